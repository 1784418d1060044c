"""A flow's call, checked and prepared before anything is compiled: every
argument validated (one-line errors naming the argument and its value), the
starting point drawn or checked, the tolerances and settings derived."""

import dataclasses
import math
import time
import warnings
from typing import Any

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._core.random import new_key
from .._core.validate import (
    check_dtype,
    check_init_scale,
    check_positive_finite,
    check_save_times,
    check_seed,
)
from .._options import Run, SaveAt, as_run, as_saveat, as_solver
from .._problem.base import Problem
from .._problem.curvature import StartPoint, start_point
from .._problem.functions import (
    astype,
    check_problem,
    check_start,
    describe,
    initial_size,
)
from .._result.info import FlowSettings
from .solving import (
    default_save_times,
    default_tolerances,
    resolve_solver,
    solver_options,
)


def initial_point(problem: Problem, *, init_scale, params, seed: int, dtype):
    """The starting point of a flow or an SGD run: exactly one of a random
    start (`problem.init` with the key of `seed`, scale `init_scale`) or
    given `params` (checked by `problem.check_params`), in `dtype`. Returns
    `(params0, init_scale)`."""
    if (init_scale is None) == (params is None):
        raise ValueError(
            "give exactly one of init_scale (random start) and params (given start), "
            f"got init_scale={init_scale!r} and params={'None' if params is None else '...'}"
        )
    if params is None:
        init_scale = check_init_scale(init_scale)
        draw = problem.init(new_key(seed), init_scale)
        return jax.tree.map(lambda x: jnp.asarray(x, dtype), draw), init_scale
    return check_start(problem, params, dtype), None


def check_loss_at_start(problem: Problem, params) -> StartPoint:
    """The loss, $|\nabla L|$ and $|H\nabla L|$ at the start, after checking
    that the loss is a scalar there (from its shape alone, before anything is
    evaluated) and that the loss and its gradient are finite: a one-line
    `ValueError` naming the shape or the value otherwise, before any solve."""
    name = f"{type(problem).__name__}.loss"
    out = jax.eval_shape(problem.loss, params)
    shape = getattr(out, "shape", None)
    if shape is None or shape != ():
        got = f"shape {tuple(shape)}" if shape is not None else type(out).__name__
        raise ValueError(
            f"{name} must return a scalar (the population loss), got {got} at the "
            "starting point; sum or average it to one number"
        )
    if not jnp.issubdtype(out.dtype, jnp.floating):
        raise ValueError(
            f"{name} must return a floating-point scalar, got dtype {out.dtype}"
        )
    point = start_point(problem, params)
    where = f"at the starting point of {describe(problem)}"
    if not math.isfinite(point.loss):
        raise ValueError(
            f"{name} is not finite {where}: L = {point.loss}; the flow needs a "
            "finite loss and gradient at the start (start elsewhere, or check the "
            "loss's domain)"
        )
    if not math.isfinite(point.grad_norm):
        raise ValueError(
            f"the gradient of {name} is not finite {where}: |grad L| = "
            f"{point.grad_norm} (L = {point.loss:.6g}); the flow needs a finite "
            "gradient at the start (start elsewhere, or check the loss's domain)"
        )
    return point


def thresholds_dict(thresholds) -> dict[str, Any]:
    """A `StageThresholds` as the dict a result's settings record."""
    return {f.name: getattr(thresholds, f.name) for f in dataclasses.fields(thresholds)}


class FlowSetup(eqx.Module):
    """Everything a flow's call validated and derived, before any compilation:
    the problem (and its arrays in the solve's dtype), the starting point, the
    save times, the solver and tolerances, the settings a result records, and
    the options it was given."""

    problem: Problem
    problem_dt: Problem
    params0: Any
    ts: np.ndarray
    t1: float
    solver: dfx.AbstractSolver
    rtol: float
    atol: float
    max_steps: int
    dtype: Any
    settings: FlowSettings
    start: float
    saveat: SaveAt
    run: Run
    at_start: StartPoint | None = None


def prepare(
    problem, *, init_scale, params, t1, seed, saveat=None, solver=None, run=None
) -> FlowSetup:
    """Validates the arguments of a flow (raising a clear error naming the
    argument and its value) and builds the initial point. Nothing touches JAX
    until every argument has passed; the loss at the start is checked after
    that (and after a checkpoint of another call is refused) by
    [`with_start`][], before any solve."""
    start = time.perf_counter()
    problem = check_problem(problem)
    saveat, options, run = as_saveat(saveat), as_solver(solver), as_run(run)
    jdtype = check_dtype(options.dtype)
    t1 = check_positive_finite("t1", t1)
    seed = check_seed(seed)
    solver_obj, solver_name = resolve_solver(options.method)
    ts = (
        default_save_times(t1) if saveat.ts is None else check_save_times(saveat.ts, t1)
    )
    problem_dt = astype(problem, jdtype)
    params0, init_scale = initial_point(
        problem_dt, init_scale=init_scale, params=params, seed=seed, dtype=jdtype
    )
    size = initial_size(problem_dt, params0)
    default_rtol, default_atol = default_tolerances(
        jdtype, size if size > 0 else 1.0, solver_obj
    )
    rtol = default_rtol if options.rtol is None else options.rtol
    atol = default_atol if options.atol is None else options.atol
    if jdtype == jnp.float32 and rtol < 1e-6:
        warnings.warn(
            f"rtol = {rtol:g} is below what float32 can honour (about 1e-6); the "
            "solver may fail to meet it. Use dtype='float64' or rtol >= 1e-6.",
            UserWarning,
            stacklevel=4,
        )
    settings = FlowSettings(
        init_scale=None if init_scale is None else float(init_scale),
        seed=int(seed),
        t1=t1,
        solver=solver_name,
        rtol=rtol,
        atol=atol,
        max_steps=options.max_steps,
        dtype=np.dtype(jdtype).name,
        num_saves=int(ts.size),
        solver_options=solver_options(solver_obj) or None,
        stages=saveat.stages,
        thresholds=thresholds_dict(saveat.thresholds) if saveat.stages else None,
        events=tuple(e.name for e in saveat.events)
        if (saveat.events or saveat.stages)
        else None,
        motion=saveat.motion,
    )
    return FlowSetup(
        problem=problem,
        problem_dt=problem_dt,
        params0=params0,
        ts=ts,
        t1=t1,
        solver=solver_obj,
        rtol=rtol,
        atol=atol,
        max_steps=options.max_steps,
        dtype=jdtype,
        settings=settings,
        start=start,
        saveat=saveat,
        run=run,
    )


def with_start(setup: FlowSetup) -> FlowSetup:
    """`setup` with the loss checked at its start ([`check_loss_at_start`][])
    and the values there recorded (`at_start`); the first JAX work of a flow,
    after every argument and the checkpoint have passed."""
    point = check_loss_at_start(setup.problem_dt, setup.params0)
    return dataclasses.replace(setup, at_start=point)


__all__ = [
    "FlowSetup",
    "check_loss_at_start",
    "initial_point",
    "prepare",
    "with_start",
]
