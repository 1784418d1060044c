r"""`gradflow.integrate`: the population gradient flow $\dot\theta = -\nabla L(\theta)$
solved with Diffrax."""

import contextlib
import math
import os
import time
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import ArrayLike

from ._chain import MarkovChain
from ._checkpoint import (
    Checkpointer,
    Interrupted,
    check_every,
    check_path,
    pack_tree,
)
from ._errors import is_number, show
from ._events import solve_with_events
from ._model import (
    Params,
    _check_init_scale,
    _check_seed,
    init_params,
    population_loss,
)
from ._progress import DelayedTqdmProgressMeter, shared_progress_bar
from ._trajectory import Trajectory
from .solvers import ROS2, ROS34PW2, AbstractRosenbrockW


DEFAULT_T1 = 20_000.0
DEFAULT_NUM_SAVES = 400
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


def _observe(t, y: Params, args: MarkovChain) -> dict[str, Any]:
    del t
    loss, grad = jax.value_and_grad(population_loss)(y, args)
    grad_sq = sum(jnp.sum(g**2) for g in jax.tree.leaves(grad))
    return {"loss": loss, "grad_norm": jnp.sqrt(grad_sq), "params": y}


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


def _check_ts(ts, t1: float, slack: float = 0.0) -> np.ndarray:
    """Save times: a finite, strictly increasing 1-D array in `[0, t1]` (up to
    a relative `slack` at `t1`)."""
    try:
        ts = np.asarray(ts, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(
            f"ts must be an increasing array of times, got {show(ts)}"
        ) from None
    if ts.ndim != 1 or ts.size == 0:
        raise ValueError(
            f"ts must be a non-empty 1-D array of times, got shape {ts.shape}"
        )
    if not np.isfinite(ts).all():
        raise ValueError(f"ts must be finite, got {ts[~np.isfinite(ts)][0]}")
    if ts.size > 1 and not (np.diff(ts) > 0).all():
        i = int(np.flatnonzero(np.diff(ts) <= 0)[0])
        raise ValueError(
            f"ts must be strictly increasing, but ts[{i}] = {ts[i]} and "
            f"ts[{i + 1}] = {ts[i + 1]}"
        )
    if ts[0] < 0 or ts[-1] > t1 * (1 + slack):
        raise ValueError(
            f"ts must lie in [0, t1] = [0, {t1}], got values from {ts[0]} to {ts[-1]}"
        )
    return ts


def _resolve_dtype(dtype):
    try:
        name = np.dtype(dtype).name if not isinstance(dtype, str) else dtype
    except TypeError:
        name = None
    if name not in ("float64", "float32"):
        raise ValueError(f"dtype must be 'float64' or 'float32', got {show(dtype)}")
    return jnp.float64 if name == "float64" else jnp.float32


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


def initial_point(chain, init_scale, params, width, seed, dtype):
    """The starting point of a flow or an SGD run: exactly one of a random
    initialisation (`init_scale`, `width`, `seed`) or given `params` (checked
    against the chain). Returns `(params0, init_scale, width)`."""
    if (init_scale is None) == (params is None):
        raise ValueError(
            "give exactly one of init_scale (random start) and params (given start), "
            f"got init_scale={init_scale!r} and params={'None' if params is None else '...'}"
        )
    if params is None:
        init_scale = _check_init_scale(init_scale)
        return (
            init_params(chain.d, width, init_scale, seed, dtype=dtype),
            init_scale,
            width,
        )
    params0 = _check_params(params, chain, dtype)
    return params0, init_scale, params0.m


class _Setup(eqx.Module):
    """Everything `integrate` validated and derived, before any compilation."""

    chain: MarkovChain
    chain_dt: MarkovChain
    params0: Params
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


def _prepare(
    chain,
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
) -> _Setup:
    """Validates the arguments of `integrate` (raising a clear error naming the
    argument and its value) and builds the initial point."""
    start = time.perf_counter()
    if not isinstance(chain, MarkovChain):
        raise TypeError(
            f"chain must be a gradflow.MarkovChain, got {type(chain).__name__}; "
            "wrap a transition matrix as gf.MarkovChain(P)"
        )
    jdtype = _resolve_dtype(dtype)
    t1 = _check_positive_finite("t1", t1)
    max_steps = _check_positive_finite("max_steps", max_steps, integer=True)
    width = _check_positive_finite("width", width, integer=True)
    seed = _check_seed(seed)
    solver_obj, solver_name = _resolve_solver(solver)
    ts_np = default_save_times(t1) if ts is None else _check_ts(ts, t1)
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
        chain, init_scale, params, width, seed, jdtype
    )
    scale = float(
        np.sqrt(
            np.mean(
                np.concatenate([np.ravel(x) ** 2 for x in jax.tree.leaves(params0)])
            )
        )
    )
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
    }
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
    params: Params | None = None,
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
) -> Trajectory:
    r"""Solves the population gradient flow $\dot\theta = -\nabla L(\theta)$.

    Starts either from a random point (`init_scale`: every entry i.i.d.
    $\mathcal{N}(0, \mathrm{init\_scale}^2)$, shapes set by `chain.d` and
    `width`) or from given `params`, and integrates to `t1` with an adaptive
    Diffrax solver. Time is gradient-descent time: step $k$ of GD at learning
    rate $\eta$ sits at $t = k\eta$.

    With `stages=True` (the default) the diagnostics of
    [`gradflow.diagnostics`][] are saved at every save time (in `traj.extras`),
    the saddles and stages are located *during* the solve by root finding on
    the solver's dense output (the solve continues after each event), and
    `traj.stages`, `traj.events` hold the records (see `docs/stages.md`).
    `stages=False` solves the bare flow: only loss, $|\nabla L|$ and
    parameters are saved.

    Importing gradflow enables JAX's float64 mode (`jax_enable_x64`); the flow
    is solved in float64 unless `dtype="float32"`.

    **Arguments:**

    - `chain`: a [`gradflow.MarkovChain`][].
    - `init_scale`: standard deviation of the random initialisation; give
      exactly one of `init_scale` and `params`.
    - `params`: a [`gradflow.Params`][] to start from.
    - `width`: the embedding width $m$ (ignored when `params` is given).
    - `t1`: final time.
    - `ts`: increasing save times in `[0, t1]`; by default
      [`gradflow.default_save_times`][] (400 log-spaced times and `0`).
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
    - `events`: user [`gradflow.Event`][]s, located and recorded like the
      built-in ones (implies `stages=True`).
    - `callbacks`: Python functions `fn(event, t, params)`, called on the host
      after every event (implies `stages=True`).
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
        print(s["name"], s["cycle"], s["t_start"], s["t_end"], s["tokens"])
    ```
    """
    if stages or events or callbacks:
        from ._integrate_stages import (
            _check_callbacks,
            _check_events,
            _check_thresholds,
        )

        # first: the other checks draw the random start (eager JAX operations)
        events = _check_events(events)
        callbacks = _check_callbacks(callbacks)
        thresholds = _check_thresholds(thresholds)
    setup = _prepare(
        chain,
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
        checkpoint,
        checkpoint_every,
    )
    if stages or events or callbacks:
        from ._integrate_stages import solve_with_stages

        return solve_with_stages(
            setup,
            events=events,
            callbacks=callbacks,
            thresholds=thresholds,
            save_attention=save_attention,
            progress=progress,
        )
    return _solve_plain(setup, progress)


def _solve_plain(setup: _Setup, progress: bool) -> Trajectory:
    """The bare flow, saving loss, gradient norm and params (no events)."""
    jdtype, t1, max_steps = setup.dtype, setup.t1, setup.max_steps
    settings = dict(setup.settings, stages=False)
    checkpoint = _checkpointer(setup, settings)
    with shared_progress_bar() if progress else contextlib.nullcontext():
        sol = solve_with_events(
            GradientFlow(),
            setup.params0,
            setup.chain_dt,
            t0=0.0,
            t1=t1,
            ts=setup.ts,
            save_fn=_observe,
            solver=setup.solver,
            rtol=setup.rtol,
            atol=setup.atol,
            max_steps=max_steps,
            meter_factory=_meter_factory(progress, t1),
            counters=_counters(setup.solver),
            checkpoint=checkpoint,
        )
    observed, ts_out = sol.saved, sol.ts
    keep = np.isfinite(np.asarray(observed["loss"]))
    observed = jax.tree.map(lambda x: np.asarray(x)[keep], observed)
    ts_out = ts_out[keep]
    message = ""
    if not sol.ok:
        message = _failure_message(sol.result, sol.t_final, t1, max_steps)
        if ts_out.size == 0 or sol.t_final > ts_out[-1]:
            last = jax.tree.map(
                np.asarray,
                _observe_jit(
                    jnp.asarray(sol.t_final, jdtype), sol.y_final, setup.chain_dt
                ),
            )
            if np.isfinite(last["loss"]):
                # Keep the last state reached, so no computed work is lost.
                observed = jax.tree.map(
                    lambda a, b: np.concatenate([a, b[None]]), observed, last
                )
                ts_out = np.append(ts_out, sol.t_final)
    ok, message, stats = _outcome(sol, ts_out, observed["loss"], setup, message)
    traj = Trajectory(
        ts=ts_out,
        loss=observed["loss"],
        grad_norm=observed["grad_norm"],
        params=observed["params"],
        chain=setup.chain,
        settings=settings,
        stats=stats,
        ok=ok,
        message=message,
    )
    if sol.interrupted:
        raise _interrupted(traj, checkpoint)
    return traj


_observe_jit = eqx.filter_jit(_observe)


def _outcome(sol, ts_out, loss, setup: _Setup, message: str):
    """`(ok, message, stats)` of a finished solve. A solve that Diffrax calls
    successful is checked for a rising loss ([`_check_descent`][])."""
    ok = sol.ok
    if ok:
        message = _check_descent(ts_out, loss, setup.rtol)
        ok = not message
    stats = {
        "num_steps": sol.num_steps,
        "num_accepted_steps": sol.num_accepted_steps,
        "num_rejected_steps": sol.num_rejected_steps,
        "num_segments": sol.num_segments,
        # Counted per segment (each restarts the solver) and summed. The event
        # conditions' own gradients (one per step and per bisection iteration)
        # are not counted: this is the vector field's count.
        **sol.counts,
        "resumed_from": sol.resumed_from,
        "wall_time": time.perf_counter() - setup.start,
    }
    return ok, message, stats


def _meter_factory(progress: bool, t1: float) -> Callable:
    def meter_factory(t_start, t_end):
        if not progress:
            return dfx.NoProgressMeter()
        # One bar for all chunks (shared_progress_bar); the start fraction is
        # an array, so a new chunk does not recompile.
        return DelayedTqdmProgressMeter(start_fraction=np.asarray(t_start / t1, float))

    return meter_factory


def _counters(solver) -> Callable:
    """Gradient evaluations and HVPs of one segment (summed by the loop)."""

    def counters(seg_stats, solver_state):
        return {
            "num_grad_evals": _count_grad_evals(solver, seg_stats, solver_state),
            "num_hvps": _count_hvps(solver, solver_state),
        }

    return counters
