"""A flow's call, checked and prepared before anything is compiled: every
argument validated (one-line errors naming the argument and its value), the
starting point drawn or checked, the tolerances and settings derived."""

import time
import warnings
from collections.abc import Callable
from typing import Any

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._core.records import BUILTIN_EVENTS, SADDLE_EVENTS
from .._core.validate import (
    check_dtype,
    check_init_scale,
    check_integer,
    check_positive_finite,
    check_save_times,
    check_seed,
)
from .checkpoint import check_every, check_path
from .events import Event
from .problem import Problem, check_problem
from .solving import (
    DEFAULT_CHECKPOINT_EVERY,
    default_save_times,
    default_tolerances,
    resolve_solver,
    solver_options,
)
from .stages import StageThresholds


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
        draw = problem.init(jax.random.key(seed), init_scale)
        return jax.tree.map(lambda x: jnp.asarray(x, dtype), draw), init_scale
    return problem.check_params(params, dtype), None


def check_events(events) -> tuple[Event, ...]:
    """User events: `Event`s with distinct names that are not built-in."""
    if isinstance(events, Event):
        events = (events,)
    events = tuple(events)
    names = set(BUILTIN_EVENTS) | set(SADDLE_EVENTS)
    for e in events:
        if not isinstance(e, Event):
            raise TypeError(
                f"events must be gradflow.Event objects, got {type(e).__name__}"
            )
        if e.name in names:
            raise ValueError(
                f"event name {e.name!r} is used twice (or is a built-in name)"
            )
        names.add(e.name)
    return events


def check_callbacks(callbacks) -> tuple[Callable, ...]:
    if callable(callbacks):
        callbacks = (callbacks,)
    callbacks = tuple(callbacks)
    for c in callbacks:
        if not callable(c):
            raise TypeError(f"callbacks must be callables, got {type(c).__name__}")
    return callbacks


def check_thresholds(thresholds) -> StageThresholds:
    if thresholds is None:
        return StageThresholds()
    if not isinstance(thresholds, StageThresholds):
        raise TypeError(
            "thresholds must be a gradflow.StageThresholds, got "
            f"{type(thresholds).__name__}"
        )
    return thresholds


def check_chunk_steps(chunk_steps) -> int | None:
    return None if chunk_steps is None else check_integer("chunk_steps", chunk_steps, 1)


class FlowSetup(eqx.Module):
    """Everything a flow's call validated and derived, before any compilation:
    the problem (and its arrays in the solve's dtype), the starting point, the
    save times, the solver and tolerances, the settings a result records."""

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
    settings: dict[str, Any]
    start: float
    checkpoint: Any = None
    checkpoint_every: float = DEFAULT_CHECKPOINT_EVERY
    chunk_steps: int | None = None


def _check_tolerances(rtol, atol):
    if rtol is not None:
        rtol = check_positive_finite("rtol", rtol)
        if rtol >= 1:
            raise ValueError(f"rtol must be < 1, got rtol = {rtol}")
    if atol is not None:
        atol = check_positive_finite("atol", atol)
    return rtol, atol


def prepare(
    problem,
    *,
    init_scale,
    params,
    t1,
    ts,
    seed,
    solver,
    rtol,
    atol,
    max_steps,
    dtype,
    checkpoint=None,
    checkpoint_every=DEFAULT_CHECKPOINT_EVERY,
    chunk_steps=None,
) -> FlowSetup:
    """Validates the arguments of a flow (raising a clear error naming the
    argument and its value) and builds the initial point. Nothing touches JAX
    until every argument has passed."""
    start = time.perf_counter()
    problem = check_problem(problem)
    jdtype = check_dtype(dtype)
    t1 = check_positive_finite("t1", t1)
    max_steps = check_integer("max_steps", max_steps, 1, echo_name=False)
    seed = check_seed(seed)
    solver_obj, solver_name = resolve_solver(solver)
    ts_np = default_save_times(t1) if ts is None else check_save_times(ts, t1)
    checkpoint = check_path(checkpoint)
    checkpoint_every = check_every(checkpoint_every)
    chunk_steps = check_chunk_steps(chunk_steps)
    rtol, atol = _check_tolerances(rtol, atol)
    problem_dt = problem.astype(jdtype)
    params0, init_scale = initial_point(
        problem_dt, init_scale=init_scale, params=params, seed=seed, dtype=jdtype
    )
    size = problem.initial_size(params0)
    default_rtol, default_atol = default_tolerances(
        jdtype, size if size > 0 else 1.0, solver_obj
    )
    rtol = default_rtol if rtol is None else rtol
    atol = default_atol if atol is None else atol
    if jdtype == jnp.float32 and rtol < 1e-6:
        warnings.warn(
            f"rtol = {rtol:g} is below what float32 can honour (about 1e-6); the "
            "solver may fail to meet it. Use dtype='float64' or rtol >= 1e-6.",
            UserWarning,
            stacklevel=4,
        )
    settings = {
        **problem.settings(params0),
        "init_scale": None if init_scale is None else float(init_scale),
        "seed": int(seed),
        "t1": t1,
        "solver": solver_name,
        "rtol": rtol,
        "atol": atol,
        "max_steps": max_steps,
        "dtype": np.dtype(jdtype).name,
        "num_saves": int(ts_np.size),
    }
    options = solver_options(solver_obj)
    if options:  # absent for default solvers: older checkpoints still resume
        settings["solver_options"] = options
    return FlowSetup(
        problem=problem,
        problem_dt=problem_dt,
        params0=params0,
        ts=ts_np,
        t1=t1,
        solver=solver_obj,
        rtol=rtol,
        atol=atol,
        max_steps=max_steps,
        dtype=jdtype,
        settings=settings,
        start=start,
        checkpoint=checkpoint,
        checkpoint_every=checkpoint_every,
        chunk_steps=chunk_steps,
    )


__all__ = [
    "FlowSetup",
    "check_callbacks",
    "check_chunk_steps",
    "check_events",
    "check_thresholds",
    "initial_point",
    "prepare",
]
