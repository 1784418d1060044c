r"""`gradflow.integrate`: the population gradient flow $\dot\theta = -\nabla L(\theta)$
solved with Diffrax."""

import dataclasses
import math
import os
import time
import warnings
from collections.abc import Callable, Sequence
from typing import Any, cast

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import ArrayLike

from . import _loop
from ._chain import MarkovChain
from ._checkpoint import (
    Checkpointer,
    Interrupted,
    check_every,
    check_path,
    pack_tree,
)
from ._errors import is_number, show
from ._events import Event
from ._loop import (
    Crossing,
    Driven,
    LoopState,
    Spec,
    drive,
    init_state,
    make_controller,
    pack_state,
    padded_save_times,
    unpack_state,
)
from ._model import (
    AnyParams,
    Params,
    attention_summary,
    init_params,
    initial_scale,
    model_of,
    population_loss,
)
from ._observe import SADDLE_EVENTS, Observer, save_point
from ._progress import host_progress
from ._records import EventRecord
from ._stages import BUILTIN_EVENTS, StageThresholds, stages_from_params
from ._trajectory import Trajectory
from ._validate import check_dtype, check_init_scale, check_save_times, check_seed
from ._variants import VariantParams, as_model, check_variant_point
from ._watch import Watch, WatchState
from .solvers import ROS2, ROS34PW2, AbstractRosenbrockW


DEFAULT_T1 = 20_000.0
# 0 and 797 log-spaced times: stage detection needs this density (the 400
# saves of gradflow 0.1.0 are every other one of them; docs/stages.md)
DEFAULT_NUM_SAVES = 798
DEFAULT_MAX_STEPS = 4_000_000
DEFAULT_CHECKPOINT_EVERY = 120.0  # seconds of wall time between checkpoints

# Diffrax solvers offered by name. Explicit ones for accuracy studies and
# baselines; implicit ones for stiff problems.
SOLVERS: dict[str, type[dfx.AbstractSolver]] = {
    "tsit5": dfx.Tsit5,
    "dopri5": dfx.Dopri5,
    "dopri8": dfx.Dopri8,
    "bosh3": dfx.Bosh3,
    "kvaerno3": dfx.Kvaerno3,
    "kvaerno5": dfx.Kvaerno5,
    # Linearly implicit Rosenbrock-W methods with the Jacobian in eigen-form,
    # reused over many steps (gradflow.solvers).
    "ros34pw2": ROS34PW2,
    "ros2": ROS2,
}
"""The solvers `integrate(..., solver=NAME)` accepts by name: Diffrax's explicit
`tsit5`, `dopri5`, `dopri8`, `bosh3`, implicit `kvaerno3`, `kvaerno5`, and
gradflow's Rosenbrock-W `ros34pw2` (the default) and `ros2`."""
# The default: a Rosenbrock-W method with a rank-16 eigen-form W (see
# gradflow.solvers and docs/performance.md). One choice for every problem size:
# the rank-16 W costs O(16 n) memory and 33 Hessian-vector products per refresh,
# so it scales to the largest vocabularies, and for n <= 16 it is the full
# eigendecomposition.
DEFAULT_SOLVER = "ros34pw2"
"""The name in `SOLVERS` that `integrate` uses when `solver=None`."""


class GradientFlow(eqx.Module):
    r"""The vector field $f(t, \theta; \text{chain}) = -\nabla_\theta L(\theta)$.

    The chain is passed as Diffrax `args` (data, not a closure), so solving a
    new chain of the same size reuses the compiled solve.
    """

    def __call__(self, t, y: Params, args: MarkovChain) -> Params:
        del t
        grad = jax.grad(population_loss)(y, args)
        return jax.tree.map(jnp.negative, grad)


def default_save_times(t1: float, num: int = DEFAULT_NUM_SAVES) -> np.ndarray:
    """`0` then `num - 1` log-spaced times from `t1 * 1e-5` to `t1`.

    Plateaus and drops of the flow are evenly spread in $\\log t$ (each escape
    takes a time $\\propto \\log(1/\\text{scale})$), so a log grid draws each
    of them with the same resolution.
    """
    return np.concatenate([[0.0], np.geomspace(t1 * 1e-5, t1, num - 1)])


def _resolve_solver(solver) -> tuple[dfx.AbstractSolver, str]:
    if solver is None:
        solver = DEFAULT_SOLVER
    if isinstance(solver, str):
        key = solver.lower()
        if key not in SOLVERS:
            raise ValueError(
                f"unknown solver {solver!r}; choose one of {sorted(SOLVERS)} or pass "
                "a diffrax.AbstractSolver instance"
            )
        return SOLVERS[key](), key
    if isinstance(solver, dfx.AbstractSolver):
        return solver, type(solver).__name__
    raise TypeError(
        f"solver must be a name or a diffrax.AbstractSolver, got {type(solver).__name__}"
    )


def solver_options(solver: dfx.AbstractSolver) -> dict[str, Any]:
    """The plain (number, string, flag) fields of a solver instance that differ
    from its class's defaults, e.g. `{"jacobian_tol": 5.0}` for
    `ROS34PW2(jacobian_tol=5)`: recorded with a result (`settings
    ["solver_options"]`, absent when empty), so that a saved trajectory says
    which solver made it and a checkpoint is not resumed by another one."""
    try:
        default = type(solver)()
    except TypeError:  # a solver without defaults for every field
        default = None
    options = {}
    for field in dataclasses.fields(solver):
        value = getattr(solver, field.name, None)
        if isinstance(value, bool | int | float | str) and (
            default is None or getattr(default, field.name, None) != value
        ):
            options[field.name] = value
    return options


def _check_positive_finite(name: str, value, integer: bool = False):
    if integer:
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise TypeError(f"{name} must be an integer, got {show(value)}")
        if value < 1:
            raise ValueError(f"{name} must be >= 1, got {name} = {value}")
        return int(value)
    if not is_number(value):
        raise TypeError(f"{name} must be a number, got {show(value)}")
    out = float(value)
    if not math.isfinite(out) or out <= 0:
        raise ValueError(f"{name} must be finite and > 0, got {name} = {show(value)}")
    return out


def _check_params(params, chain: MarkovChain, dtype) -> Params:
    if not isinstance(params, Params):
        raise TypeError(
            f"params must be a gradflow.Params, got {type(params).__name__}"
        )
    for name in ("W0", "W1", "WQ", "WK"):
        if np.ndim(getattr(params, name)) != 2:
            raise ValueError(
                f"params.{name} must be 2-dimensional (one point, no time axis), got "
                f"shape {np.shape(getattr(params, name))}"
            )
    if params.d != chain.d:
        raise ValueError(
            f"params are for d = {params.d} tokens (W0 has shape {params.W0.shape}) but "
            f"the chain has d = {chain.d}"
        )
    for name in ("W0", "W1", "WQ", "WK"):
        value = np.asarray(getattr(params, name))
        if not np.isfinite(value).all():
            i = tuple(int(k) for k in np.argwhere(~np.isfinite(value))[0])
            raise ValueError(f"params.{name} has a non-finite entry at {i}: {value[i]}")
    return jax.tree.map(lambda x: jnp.asarray(x, dtype=dtype), params)


def default_tolerances(dtype, scale: float, solver=None) -> tuple[float, float]:
    """Default `(rtol, atol)` for a dtype, the RMS size of the initial point and
    a solver (a name, an instance, or `None` for `DEFAULT_SOLVER`).

    `atol` is tied to the initial scale: a saddle escape grows from components
    of size `init_scale`, which must be resolved to `rtol` relative accuracy.

    In float64, `rtol` is `1e-5` for the Rosenbrock-W solvers of
    [`gradflow.solvers`][] (their error estimate is an honest local error of
    an order-3 method; on the sticky benchmark `1e-5` keeps the loss-drop times
    within 0.01 % and the final loss within 1e-14 of a tight reference, see
    `docs/performance.md`) and `1e-8` for the explicit and Diffrax implicit
    solvers. In float32 it is `1e-5`.
    """
    if solver is None:
        solver = DEFAULT_SOLVER
    if isinstance(solver, str):
        solver = SOLVERS.get(solver.lower())
    rosenbrock = isinstance(solver, AbstractRosenbrockW) or (
        isinstance(solver, type) and issubclass(solver, AbstractRosenbrockW)
    )
    if dtype == jnp.float64:
        rtol = 1e-5 if rosenbrock else 1e-8
    else:
        rtol = 1e-5
    atol = rtol * min(1.0, scale) * 1e-2
    floor = 1e-200 if dtype == jnp.float64 else 1e-30
    return rtol, max(atol, floor)


def _count_grad_evals(
    solver: dfx.AbstractSolver, stats: dict, solver_state: Any = None
) -> int | None:
    """Gradient evaluations made by the solver.

    A solver that counts its own evaluations exposes
    `solver.num_grad_evals(solver_state)` (the final solver state is saved for
    this). For an explicit Runge-Kutta method with `s` stages: `s` per
    attempted step (`s - 1` if first-same-as-last) plus one, the count that a
    counter inside the vector field reports (checked in the tests). `None`
    where the count is not known (Diffrax's implicit solvers).
    """
    if isinstance(solver, AbstractRosenbrockW):
        # Counted from the attempted steps, not from the solver state: Diffrax
        # discards the state of rejected steps, whose evaluations count too.
        # Plus two: the first f(y0) and Diffrax's initial step-size selection
        # (checked against a counter inside the vector field in the tests).
        # The one evaluation that each refresh of W makes as the primal of its
        # Hessian-vector products is part of that HVP work, not counted here.
        return solver.num_grad_evals_per_step() * int(stats["num_steps"]) + 2
    if hasattr(solver, "num_grad_evals"):
        return int(solver.num_grad_evals(solver_state))  # pyright: ignore[reportAttributeAccessIssue]
    if isinstance(solver, dfx.AbstractERK):
        tableau = solver.tableau
        stages = len(tableau.c) + 1  # pyright: ignore[reportAttributeAccessIssue]
        per_step = stages - 1 if tableau.fsal else stages  # pyright: ignore[reportAttributeAccessIssue]
        return per_step * int(stats["num_steps"]) + 1
    return None


def _count_hvps(solver: dfx.AbstractSolver, solver_state: Any = None) -> int | None:
    """Hessian-vector products (Jacobian-vector products of the gradient) made by
    the solver, or `None` for solvers that make none or do not count them.

    For [`gradflow.solvers.AbstractRosenbrockW`][] this is the work done in
    accepted steps; a Jacobian refresh made in a step that is then rejected is
    repeated in the retry and is not counted.
    """
    if solver_state is not None and hasattr(solver, "num_hvps"):
        return int(solver.num_hvps(solver_state))  # pyright: ignore[reportAttributeAccessIssue]
    if isinstance(solver, dfx.AbstractERK):
        return 0
    return None


# Diffrax results that mean a linear or nonlinear solve inside an implicit
# solver failed (Lineax and Optimistix results, promoted into Diffrax's).
_IMPLICIT_FAILURES = (
    "singular",
    "breakdown",
    "stagnation",
    "conlim",
    "nonfinite_input",
    "nonlinear_max_steps_reached",
    "nonlinear_divergence",
)


def _result_name(result) -> str | None:
    """The name of a Diffrax result (`"max_steps_reached"`, ...), if known."""
    names = ("max_steps_reached", "nonfinite", "dt_min_reached", *_IMPLICIT_FAILURES)
    for name in names:
        item = getattr(dfx.RESULTS, name, None)
        try:
            if item is not None and bool(result == item):
                return name
        except Exception:  # not a Diffrax result
            return None
    return None


def _result_text(result) -> str:
    """Diffrax's own description of a result, first sentence, one line."""
    try:
        text = dfx.RESULTS[result]
    except Exception:
        text = str(result)
    text = " ".join(text.split())
    return text.split(". ")[0].rstrip(".") or "unknown failure"


def _failure_message(result, t_reached: float, t1: float, max_steps: int) -> str:
    """One line: where the solve stopped, why, and what to change."""
    where = f"the solver stopped at t = {t_reached:.6g} of t1 = {t1:.6g}"
    name = _result_name(result)
    if name == "max_steps_reached":
        if t_reached > 0:
            pace = (
                f"mean step {t_reached / max_steps:.3g}, so about "
                f"{max_steps * t1 / t_reached:.2g} steps would reach t1"
            )
        else:
            pace = "no step was accepted"
        return (
            f"{where}: maximum number of steps ({max_steps}) reached ({pace}). "
            "Raise max_steps or shorten t1; if the steps are tiny from the start, "
            "init_scale is too large (a saturated softmax makes the flow stiff): try "
            "a smaller one; otherwise loosen rtol/atol or use a stiff solver (the "
            "default is one)"
        )
    if name in ("nonfinite", "dt_min_reached"):
        return (
            f"{where}: {_result_text(result)}. Non-finite values or a vanishing step "
            "usually mean init_scale is too large or the tolerances too loose; try "
            "a smaller init_scale, tighter rtol/atol, or dtype='float64'"
        )
    if name in _IMPLICIT_FAILURES:
        return (
            f"{where}: the implicit solver's inner solve failed "
            f"({_result_text(result)}). Try the default solver "
            f"({DEFAULT_SOLVER!r}) or an explicit one such as 'tsit5', or tighter "
            "rtol/atol"
        )
    return (
        f"{where}: {_result_text(result)}. Try a smaller init_scale, tighter "
        "rtol/atol, or another solver"
    )


def _check_descent(ts, loss, rtol: float) -> str:
    r"""Checks that the saved loss never rises: along the exact flow
    $dL/dt = -|\nabla L|^2 \le 0$. Returns `""`, or a one-line message
    for `Trajectory.message` naming the first rise larger than the solver's
    error allows (`10 * rtol` relative) and what to change.

    A solve whose loss rises has lost the flow even though Diffrax reports
    success; this is what happens from a large `init_scale`, where the softmax
    starts saturated (see `docs/errors.md`).
    """
    loss = np.asarray(loss, dtype=np.float64)
    ts = np.asarray(ts, dtype=np.float64)
    if loss.size < 2:
        return ""
    rise = np.diff(loss)
    allowed = 10 * rtol * np.maximum(1.0, np.abs(loss[:-1]))
    bad = np.flatnonzero(rise > allowed)
    if bad.size == 0:
        return ""
    i = int(bad[0])
    return (
        f"the loss rose from {loss[i]:.6g} at t = {ts[i]:.6g} to {loss[i + 1]:.6g} "
        f"at t = {ts[i + 1]:.6g} ({bad.size} rises, the largest "
        f"{float(rise.max()):.3g}), which the exact gradient flow never does: the "
        "solve lost the flow. A large init_scale causes this (the softmax starts "
        f"saturated): use an init_scale well below 1, or a tighter rtol (now {rtol:g})"
    )


def initial_point(chain, *, init_scale, params, width, seed, dtype, model=None):
    """The starting point of a flow or an SGD run: exactly one of a random
    initialisation (`init_scale`, `width`, `seed`, `model`) or given `params`
    (checked against the chain, and against `model` if one is given).
    Returns `(params0, init_scale, width)`."""
    if (init_scale is None) == (params is None):
        raise ValueError(
            "give exactly one of init_scale (random start) and params (given start), "
            f"got init_scale={init_scale!r} and params={'None' if params is None else '...'}"
        )
    model = None if model is None else as_model(model)
    if params is None:
        init_scale = check_init_scale(init_scale)
        return (
            init_params(chain.d, width, init_scale, seed, dtype=dtype, model=model),
            init_scale,
            width,
        )
    if isinstance(params, VariantParams):
        params0 = check_variant_point(params, chain, dtype)
    else:
        params0 = _check_params(params, chain, dtype)
    if model is not None and model != model_of(params0):
        raise ValueError(
            f"model = {model} but params are for {model_of(params0)}; give one or "
            "the other (params carry their model)"
        )
    return params0, init_scale, params0.m


class _Setup(eqx.Module):
    """Everything `integrate` validated and derived, before any compilation."""

    chain: MarkovChain
    chain_dt: MarkovChain
    params0: AnyParams
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


def prepare(
    chain,
    *,
    init_scale,
    params,
    width,
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
    model=None,
) -> _Setup:
    """Validates the arguments of `integrate` (raising a clear error naming the
    argument and its value) and builds the initial point."""
    start = time.perf_counter()
    if not isinstance(chain, MarkovChain):
        raise TypeError(
            f"chain must be a gradflow.MarkovChain, got {type(chain).__name__}; "
            "wrap a transition matrix as gf.MarkovChain(P)"
        )
    jdtype = check_dtype(dtype)
    t1 = _check_positive_finite("t1", t1)
    max_steps = _check_positive_finite("max_steps", max_steps, integer=True)
    width = _check_positive_finite("width", width, integer=True)
    seed = check_seed(seed)
    solver_obj, solver_name = _resolve_solver(solver)
    ts_np = default_save_times(t1) if ts is None else check_save_times(ts, t1)
    checkpoint = check_path(checkpoint)
    checkpoint_every = check_every(checkpoint_every)
    # Given tolerances are checked before the random start is drawn: nothing
    # touches JAX until every argument has passed.
    if rtol is not None:
        rtol = _check_positive_finite("rtol", rtol)
        if rtol >= 1:
            raise ValueError(f"rtol must be < 1, got rtol = {rtol}")
    if atol is not None:
        atol = _check_positive_finite("atol", atol)
    params0, init_scale, width = initial_point(
        chain,
        init_scale=init_scale,
        params=params,
        width=width,
        seed=seed,
        dtype=jdtype,
        model=model,
    )
    scale = initial_scale(params0)
    default_rtol, default_atol = default_tolerances(
        jdtype, scale if scale > 0 else 1.0, solver_obj
    )
    rtol = default_rtol if rtol is None else rtol
    atol = default_atol if atol is None else atol
    if jdtype == jnp.float32 and rtol < 1e-6:
        warnings.warn(
            f"rtol = {rtol:g} is below what float32 can honour (about 1e-6); the "
            "solver may fail to meet it. Use dtype='float64' or rtol >= 1e-6.",
            UserWarning,
            stacklevel=3,
        )
    settings = {
        "width": int(width),
        "init_scale": None if init_scale is None else float(init_scale),
        "seed": int(seed),
        "t1": t1,
        "solver": solver_name,
        "rtol": rtol,
        "atol": atol,
        "max_steps": max_steps,
        "dtype": np.dtype(jdtype).name,
        "num_saves": int(ts_np.size),
        "model": model_of(params0).as_dict(),
    }
    options = solver_options(solver_obj)
    if options:  # absent for default solvers: older checkpoints still resume
        settings["solver_options"] = options
    return _Setup(
        chain=chain,
        chain_dt=jax.tree.map(lambda x: x.astype(jdtype), chain),
        params0=params0,
        ts=ts_np,
        t1=t1,
        solver=solver_obj,
        rtol=rtol,
        atol=atol,
        max_steps=max_steps,  # pyright: ignore[reportArgumentType]
        dtype=jdtype,
        settings=settings,
        start=start,
        checkpoint=checkpoint,
        checkpoint_every=checkpoint_every,
    )


def _checkpointer(setup: _Setup, settings: dict) -> Checkpointer | None:
    """The checkpoint of an `integrate` call (or `None`), read and checked
    against the call before anything is compiled."""
    if setup.checkpoint is None:
        return None
    inputs = {
        "P": setup.chain.P,
        "pi": setup.chain.pi,
        "ts": setup.ts,
        **pack_tree("params0", setup.params0),
    }
    return Checkpointer(
        setup.checkpoint, "integrate", settings, inputs, setup.checkpoint_every
    )


def _interrupted(traj: Trajectory, checkpoint: Checkpointer | None) -> Interrupted:
    where = (
        f"; the checkpoint '{checkpoint.path}' holds the state: run the same call "
        "again to resume"
        if checkpoint is not None
        else "; pass checkpoint=PATH to be able to resume"
    )
    message = f"interrupted at t = {traj.t_final:.6g} of t1 = {traj.settings['t1']:.6g}"
    traj = eqx.tree_at(lambda r: r.message, traj, message + where)
    return Interrupted(
        message + where,
        result=traj,
        checkpoint=None if checkpoint is None else checkpoint.path,
    )


def integrate(
    chain: MarkovChain,
    init_scale: float | None = None,
    *,
    params: AnyParams | None = None,
    width: int = 16,
    t1: float = DEFAULT_T1,
    ts: ArrayLike | Sequence[float] | None = None,
    seed: int = 0,
    solver: str | dfx.AbstractSolver | None = None,
    rtol: float | None = None,
    atol: float | None = None,
    max_steps: int = DEFAULT_MAX_STEPS,
    progress: bool = True,
    dtype: str = "float64",
    stages: bool = True,
    events: Sequence[Any] = (),
    callbacks: Sequence[Callable] = (),
    thresholds: Any = None,
    save_attention: bool | None = None,
    checkpoint: str | os.PathLike | None = None,
    checkpoint_every: float = DEFAULT_CHECKPOINT_EVERY,
    model: Any = None,
) -> Trajectory:
    r"""Solves the population gradient flow $\dot\theta = -\nabla L(\theta)$.

    Starts either from a random point (`init_scale`: every entry i.i.d.
    $\mathcal{N}(0, \mathrm{init\_scale}^2)$, shapes set by `chain.d` and
    `width`) or from given `params`, and integrates to `t1` with an adaptive
    Diffrax solver. Time is gradient-descent time: step $k$ of GD at learning
    rate $\eta$ sits at $t = k\eta$.

    Loss, $|\nabla L|$ and parameters are saved at every save time. With
    `stages=True` (the default) the saddle escapes and entries are located
    *during* the solve by bisection on the solver's dense output, without
    stopping it, and after the solve the diagnostics of
    [`gradflow.diagnostics`][] are evaluated at every saved point (batched; in
    `traj.extras`) and the stages found on them (`traj.stages`, see
    `docs/stages.md`). The steps taken do not depend on `stages`, `events` or
    `callbacks`: a bare and an observed solve of the same call are the same
    solve.

    Importing gradflow enables JAX's float64 mode (`jax_enable_x64`); the flow
    is solved in float64 unless `dtype="float32"`.

    **Arguments:**

    - `chain`: a [`gradflow.MarkovChain`][].
    - `init_scale`: standard deviation of the random initialisation; give
      exactly one of `init_scale` and `params`.
    - `params`: a [`gradflow.Params`][] (or [`gradflow.VariantParams`][]) to
      start from.
    - `width`: the embedding width $m$ (ignored when `params` is given).
    - `t1`: final time.
    - `ts`: increasing save times in `[0, t1]`; by default
      [`gradflow.default_save_times`][] (`0` and 797 log-spaced times).
    - `seed`: seed of the random initialisation.
    - `solver`: a name in `gradflow.SOLVERS` or a Diffrax solver instance;
      by default `gradflow.DEFAULT_SOLVER` (see `docs/performance.md`).
    - `rtol`, `atol`: tolerances of the PID step-size controller; by default
      [`gradflow.default_tolerances`][], which ties `atol` to the RMS size of
      the initial parameters (saddle escapes grow from components that small).
    - `max_steps`: the most solver steps before giving up (partial results are
      returned, not lost). Checked between chunks of at most
      `min(1000, max_steps)` steps, so a run may take up to 999 steps more.
    - `progress`: show a progress bar when the solve takes longer than 2 s.
    - `dtype`: `"float64"` (default) or `"float32"`.
    - `stages`: locate saddles and stages while integrating (default `True`).
    - `events`: user [`gradflow.Event`][]s, located during the solve and
      recorded in `traj.events` like the saddle events.
    - `callbacks`: Python functions `fn(event, t, params)` called on the host
      for every event located during the solve, in time order (between chunks
      of steps: the solve does not wait for them), with the
      [`gradflow.EventRecord`][] and the parameters at the event.
    - `thresholds`: a [`gradflow.StageThresholds`][] (default thresholds when
      `None`); `save_attention`: save the `(d, d)` attention matrix at every
      save time (default: when `d <= 64`).
    - `checkpoint`: a file path. The whole state of the solve (parameters,
      solver and step-size-controller state, proposed next step, everything
      saved so far, the stage detector) is written there atomically every
      `checkpoint_every` seconds of wall time, after each event and at the
      end. If the file exists, the call resumes from it and ends at the same
      result as an uninterrupted run (bit for bit on one machine); a
      checkpoint made by a different call is refused, naming what differs.
      A finished checkpoint returns its result at once. Only `max_steps` and
      `progress` may change between the runs (raise `max_steps` to continue a
      run that ran out of steps). See `docs/errors.md`.
    - `checkpoint_every`: seconds between periodic checkpoint writes.
    - `model`: a [`gradflow.Model`][] for the random start (default: the
      paper's model). Given `params` carry their model (a
      [`gradflow.VariantParams`][]); a `model` given with them must match.

    **Returns:** a [`gradflow.Trajectory`][]. If the solver stops early,
    `traj.ok` is `False`, `traj.message` says why and what to change, and the
    trajectory holds everything up to the last time reached.

    **Raises:** `ValueError`/`TypeError` naming the argument and its value for
    bad input (or a checkpoint of another call), before anything is compiled.
    [`gradflow.Interrupted`][] (a `KeyboardInterrupt`) on Ctrl-C: the solve
    stops after the current chunk of steps, writes the checkpoint, and the
    exception's `result` holds the trajectory so far.

    **Example:**

    ```python
    import gradflow as gf
    traj = gf.integrate(gf.chains.sticky(6, 0.5, 0.5, 0.05), 1e-3, width=8)
    traj.loss[-1], traj.chain.conditional_entropy
    for s in traj.stages:
        print(s.name, s.cycle, s.t_start, s.t_end, s.tokens)
    ```
    """
    events = check_events(events)
    callbacks = _check_callbacks(callbacks)
    thresholds = check_thresholds(thresholds)
    setup = prepare(
        chain,
        init_scale=init_scale,
        params=params,
        width=width,
        t1=t1,
        ts=ts,
        seed=seed,
        solver=solver,
        rtol=rtol,
        atol=atol,
        max_steps=max_steps,
        dtype=dtype,
        checkpoint=checkpoint,
        checkpoint_every=checkpoint_every,
        model=model,
    )
    observer = Observer(stages=bool(stages), thresholds=thresholds, events=events)
    return solve(
        setup,
        observer,
        callbacks=callbacks,
        save_attention=save_attention,
        progress=progress,
    )


def integrate_stages(
    chain: MarkovChain, init_scale: float | None = None, **kwargs
) -> Trajectory:
    """[`gradflow.integrate`][] with `stages=True` (its default): kept as a name
    for scripts that want to say so explicitly. Takes the same arguments."""
    if kwargs.get("stages") is False:
        raise ValueError(
            "integrate_stages always locates stages; use gf.integrate(..., stages=False)"
        )
    kwargs.pop("stages", None)
    return integrate(chain, init_scale, stages=True, **kwargs)


def check_events(events) -> tuple[Event, ...]:
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


def _check_callbacks(callbacks) -> tuple[Callable, ...]:
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


# Above this vocabulary size the (d, d) attention matrix is not kept in
# `traj.extras` at every save time.
MAX_SAVED_ATTENTION_D = 64
# The layout of integrate's checkpoints (the loop state written whole); a
# checkpoint of an older layout is refused, naming this setting.
CHECKPOINT_LAYOUT = "loop-state-3"


def solve_settings(setup: _Setup, observer: Observer, save_attention: bool) -> dict:
    settings = dict(setup.settings, stages=observer.stages)
    if observer.stages:
        th = observer.thresholds
        settings["thresholds"] = {
            f.name: getattr(th, f.name) for f in dataclasses.fields(th)
        }
        settings["save_attention"] = bool(save_attention)
    if observer.events or observer.stages:
        settings["events"] = [e.name for e in observer.events]
    return settings


def solve_spec(setup: _Setup, observer: Observer) -> Spec:
    solver = setup.solver
    if observer.watches:
        solver = Watch(
            cast(dfx.AbstractAdaptiveSolver, solver),
            observer,
            directions=observer.directions,
            rearm_by=observer.rearm_by,
            armed0=observer.armed0,
            uses_field=observer.uses_field,
        )
    return Spec(
        vector_field=GradientFlow(),
        solver=solver,
        controller=make_controller(setup.rtol, setup.atol),
        save_fn=save_point,
        # read at call time, so tests can make chunks small
        chunk_steps=int(min(_loop.chunk_steps_for(setup.params0), setup.max_steps)),
    )


_loss = eqx.filter_jit(population_loss)


def event_record(observer: Observer, crossing: Crossing, chain) -> EventRecord:
    loss = float(_loss(jax.tree.map(jnp.asarray, crossing.y), chain))
    return EventRecord(name=observer.names[crossing.index], t=crossing.t, loss=loss)


def solve(
    setup: _Setup,
    observer: Observer,
    *,
    callbacks: Sequence[Callable] = (),
    save_attention: bool | None = None,
    progress: bool = True,
) -> Trajectory:
    """The one solve path of [`gradflow.integrate`][]: a validated call, an
    [`Observer`][] (what is watched during the solve and found after it), the
    host driving the chunks; returns the [`gradflow.Trajectory`][]."""
    if save_attention is None:
        save_attention = setup.chain.d <= MAX_SAVED_ATTENTION_D
    settings = solve_settings(setup, observer, bool(save_attention))
    checkpoint = _checkpointer(
        setup, dict(settings, checkpoint_layout=CHECKPOINT_LAYOUT)
    )
    spec = solve_spec(setup, observer)
    chain = setup.chain_dt
    jdtype = setup.dtype
    # The save buffer has a bucketed length (one compilation for nearby numbers
    # of saves); `_saves` reads the first len(setup.ts).
    ts_padded = padded_save_times(setup.ts)
    ts = jnp.asarray(ts_padded, jdtype)
    state = init_state(
        spec,
        y0=setup.params0,
        args=chain,
        t0=jnp.asarray(0.0, jdtype),
        t1=jnp.asarray(setup.t1, jdtype),
        ts=ts,
    )
    records: list[EventRecord] = []
    resumed_from = None
    if checkpoint is not None and checkpoint.state is not None:
        meta, arrays = checkpoint.state
        state = unpack_state(arrays, state)
        records = [EventRecord.from_dict(r) for r in meta["events"]]
        resumed_from = float(state.t)

    def on_crossings(new: list[Crossing]) -> None:
        for crossing in new:
            record = event_record(observer, crossing, chain)
            records.append(record)
            for fn in callbacks:
                fn(record, crossing.t, crossing.y)

    def write(state, crossings, force):
        assert checkpoint is not None
        if force or checkpoint.due():
            meta = {"t_now": float(state.t), "events": [r.to_dict() for r in records]}
            checkpoint.write(meta, pack_state(state))

    with host_progress(setup.t1, enabled=progress, start=float(state.t)) as bar:
        driven = drive(
            spec,
            state,
            chain,
            ts_padded,
            setup.t1,
            max_steps=setup.max_steps,
            on_chunk=lambda s: bar.update(float(s.t)),
            on_crossings=on_crossings,
            checkpoint=None if checkpoint is None else write,
            resumed_from=resumed_from,
        )
    traj = build_trajectory(
        setup,
        settings=settings,
        observer=observer,
        driven=driven,
        records=records,
        save_attention=bool(save_attention),
    )
    if driven.interrupted:
        raise _interrupted(traj, checkpoint)
    return traj


_save_point = eqx.filter_jit(save_point)


def _saves(setup: _Setup, state: LoopState, ok: bool):
    """The saved points reached, as NumPy arrays; a failed solve also keeps its
    last finite state, so no computed work is lost (the one rule for the last
    point)."""
    n = setup.ts.shape[0]  # the save buffer may be longer (padded_save_times)
    filled = np.asarray(state.filled)[:n]
    saved = jax.tree.map(lambda x: np.asarray(x)[:n][filled], state.saved)
    ts_out = setup.ts[filled]
    keep = np.isfinite(saved["loss"])
    saved = jax.tree.map(lambda x: x[keep], saved)
    ts_out = ts_out[keep]
    t_final = float(state.t)
    if not ok and (ts_out.size == 0 or t_final > ts_out[-1]):
        last = jax.tree.map(
            np.asarray,
            _save_point(jnp.asarray(t_final, setup.dtype), state.y, setup.chain_dt),
        )
        if np.isfinite(last["loss"]):
            saved = jax.tree.map(lambda a, b: np.concatenate([a, b[None]]), saved, last)
            ts_out = np.append(ts_out, t_final)
    return ts_out, saved


def build_trajectory(
    setup: _Setup,
    *,
    settings: dict,
    observer: Observer,
    driven: Driven,
    records: list[EventRecord],
    save_attention: bool,
) -> Trajectory:
    """The one place a [`gradflow.Trajectory`][] is built from a finished drive."""
    state = driven.state
    result = state.result
    ok = bool(result == dfx.RESULTS.successful) and not driven.out_of_steps
    if driven.out_of_steps:
        result = dfx.RESULTS.max_steps_reached
    ts_out, saved = _saves(setup, state, ok)
    message = ""
    if not ok and not driven.interrupted:
        message = _failure_message(result, float(state.t), setup.t1, setup.max_steps)
    if ok:
        message = _check_descent(ts_out, saved["loss"], setup.rtol)
        ok = not message
    if driven.interrupted:
        ok = False
    stages, events, extras = (), tuple(records), {}
    # (stage rates need three saves at least)
    if observer.stages and ts_out.size >= 3:
        found, boundaries, curves = stages_from_params(
            ts_out, saved["params"], setup.chain, observer.thresholds
        )
        stages = tuple(found)
        extras = {
            k: np.asarray(v)
            for k, v in curves.items()
            if k not in ("loss", "grad_norm")
        }
        if save_attention:
            extras["attention"] = _attention_at_saves(saved["params"], setup.chain_dt)
        # The plateau boundaries are the saddle events located during the
        # solve; the other stage boundaries are interpolated between saves.
        derived = [e for e in boundaries if e.name not in SADDLE_EVENTS]
        events = tuple(sorted(records + derived, key=lambda e: e.t))
    stats = _stats(setup, state, driven)
    return Trajectory(
        ts=ts_out,
        loss=saved["loss"],
        grad_norm=saved["grad_norm"],
        params=saved["params"],
        chain=setup.chain,
        settings=settings,
        stats=stats,
        ok=ok,
        message=message,
        stages=stages,
        events=events,
        extras=extras,
    )


# for a variant: the last layer's head-averaged attention (gf.attention_summary)
_attention_many = eqx.filter_jit(jax.vmap(attention_summary, in_axes=(0, None)))


def _attention_at_saves(params: Params, chain: MarkovChain) -> np.ndarray:
    """The `(T, d, d)` attention matrices at the saved points (one batch)."""
    return np.asarray(_attention_many(jax.tree.map(jnp.asarray, params), chain))


def _stats(setup: _Setup, state: LoopState, driven: Driven) -> dict[str, Any]:
    solver = setup.solver
    inner = state.solver_state
    if isinstance(inner, WatchState):
        inner = inner.inner
    steps = {
        "num_steps": int(state.num_steps),
        "num_accepted_steps": int(state.num_accepted_steps),
        "num_rejected_steps": int(state.num_rejected_steps),
    }
    return {
        **steps,
        # The event conditions' own gradients (one per step and per bisection
        # iteration) are not counted: this is the vector field's count.
        "num_grad_evals": _count_grad_evals(solver, steps, inner),
        "num_hvps": _count_hvps(solver, inner),
        "resumed_from": driven.resumed_from,
        "wall_time": time.perf_counter() - setup.start,
    }
