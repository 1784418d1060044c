r"""How a flow is solved and what its solver did: the solvers offered by name,
default save times and tolerances, the work counters of a result's `stats`,
and the one-line messages of a solve that failed or lost the flow."""

import dataclasses
from typing import Any

import diffrax as dfx
import jax
import jax.numpy as jnp
import numpy as np

from .._result.codes import RESULTS
from ..solvers import ROS2, ROS34PW2, AbstractRosenbrockW


DEFAULT_T1 = 20_000.0
"""The final time of a flow when `t1` is not given."""
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


def default_save_times(t1: float, num: int = DEFAULT_NUM_SAVES) -> np.ndarray:
    """`0` then `num - 1` log-spaced times from `t1 * 1e-5` to `t1`.

    Plateaus and drops of the flow are evenly spread in $\\log t$ (each escape
    takes a time $\\propto \\log(1/\\text{scale})$), so a log grid draws each
    of them with the same resolution.
    """
    return np.concatenate([[0.0], np.geomspace(t1 * 1e-5, t1, num - 1)])


def resolve_solver(solver) -> tuple[dfx.AbstractSolver, str]:
    """`(instance, name)` of a `solver=` argument: `None` (the default), a
    name in `SOLVERS` or a Diffrax solver instance."""
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


def count_grad_evals(
    solver: dfx.AbstractSolver, stats: dict, solver_state: Any = None
) -> int | None:
    """Gradient evaluations made by a solve: what `traj.stats.num_grad_evals`
    reports, for a `diffrax.diffeqsolve` of your own too.

    A solver that counts its own evaluations exposes
    `solver.num_grad_evals(solver_state)` (the final solver state is saved for
    this). For an explicit Runge-Kutta method with `s` stages: `s` per
    attempted step (`s - 1` if first-same-as-last) plus one, the count that a
    counter inside the vector field reports (checked in the tests).

    **Arguments:** `solver` (the Diffrax solver), `stats` (the solution's
    `stats`: `num_steps` is read), `solver_state` (the final solver state,
    `diffeqsolve(..., saveat=diffrax.SaveAt(..., solver_state=True))`).

    **Returns:** the count, or `None` where it is not known (Diffrax's
    implicit solvers).
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


def count_hvps(solver: dfx.AbstractSolver, solver_state: Any = None) -> int | None:
    """Hessian-vector products (Jacobian-vector products of the gradient) made by
    a solve (`traj.stats.num_hvps`), from the solver and its final state; `0`
    for an explicit Runge-Kutta method, `None` for solvers that do not count
    them.

    For [`gradflow.solvers.AbstractRosenbrockW`][] this is the work done in
    accepted steps; a Jacobian refresh made in a step that is then rejected is
    repeated in the retry and is not counted.
    """
    if solver_state is not None and hasattr(solver, "num_hvps"):
        return int(solver.num_hvps(solver_state))  # pyright: ignore[reportAttributeAccessIssue]
    if isinstance(solver, dfx.AbstractERK):
        return 0
    return None


def w_rank(solver: dfx.AbstractSolver, solver_state: Any = None) -> int | None:
    """For [`gradflow.solvers.AbstractRosenbrockW`][]: how many eigenpairs its
    W tracked at the end (an adaptive rank's last value); otherwise `None`."""
    if solver_state is not None and hasattr(solver, "rank_in_use"):
        return int(solver.rank_in_use(solver_state))  # pyright: ignore[reportAttributeAccessIssue]
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


def _diffrax_name(result) -> str | None:
    """The name of a Diffrax result (`"max_steps_reached"`, ...), if known."""
    # compared on the host, by the item's one leaf (its integer): `==`
    # would compile a program for an eager `equal`
    (value,) = jax.tree.leaves(result)
    value = np.asarray(value)
    for name, item in dfx.RESULTS._name_to_item.items():
        if value == np.asarray(jax.tree.leaves(item)[0]):
            return name
    return None


def result_code(solver_result):
    """The [`gradflow.RESULTS`][] code of the result Diffrax reported at the
    end of a solve (its last chunk)."""
    name = _diffrax_name(solver_result)
    if name == "successful":
        return RESULTS.successful
    if name in ("max_steps_reached", "nonfinite", "dt_min_reached"):
        return getattr(RESULTS, name)
    if name in _IMPLICIT_FAILURES:
        return RESULTS.implicit_solve_failed
    return RESULTS.solver_failed


def failure_message(code, t_reached: float, t1: float, max_steps: int) -> str:
    """One line for a failed solve's [`gradflow.RESULTS`][] code: where it
    stopped, why, and what to change."""
    where = f"the solver stopped at t = {t_reached:.6g} of t1 = {t1:.6g}"
    if code == RESULTS.max_steps_reached:
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
    if code == RESULTS.nonfinite or code == RESULTS.dt_min_reached:
        return (
            f"{where}: {RESULTS[code]}. Non-finite values or a vanishing step "
            "usually mean init_scale is too large or the tolerances too loose; try "
            "a smaller init_scale, tighter rtol/atol, or dtype='float64'"
        )
    if code == RESULTS.implicit_solve_failed:
        return (
            f"{where}: {RESULTS[code]}. Try the default solver "
            f"({DEFAULT_SOLVER!r}) or an explicit one such as 'tsit5', or tighter "
            "rtol/atol"
        )
    return (
        f"{where}: {RESULTS[code]}. Try a smaller init_scale, tighter "
        "rtol/atol, or another solver"
    )


def collapse_message(
    t_reached: float, t1: float, *, loss: float, size: float, loss0: float, size0: float
) -> str:
    """One line for a solve whose step size collapsed
    (`gradflow.RESULTS.step_collapsed`): where, $|\theta|$ and $L$ at the last
    accepted step against the start, and what it most likely means."""
    grew = size > 10 * max(size0, 1e-300) or loss < loss0 - 10 * max(abs(loss0), 1)
    why = (
        "the flow appears to blow up in finite time there: the loss may be "
        "unbounded below along it (check the loss, or end before this time "
        "with a smaller t1)"
        if grew
        else "the vector field may be non-smooth or not finite near this point "
        "(check the loss and its gradient there)"
    )
    return (
        f"the step size collapsed at t = {t_reached:.8g} of t1 = {t1:.6g} (a step "
        f"below the round-off of t, or 100 rejected in a row): at the last "
        f"accepted step |theta| = {size:.6g} (|theta| = {size0:.6g} at the start) "
        f"and L = {loss:.6g} (L = {loss0:.6g} at the start); {why}. Everything up "
        "to there is kept"
    )


def check_descent(ts, loss, rtol: float) -> str:
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


__all__ = [
    "DEFAULT_CHECKPOINT_EVERY",
    "DEFAULT_MAX_STEPS",
    "DEFAULT_NUM_SAVES",
    "DEFAULT_SOLVER",
    "DEFAULT_T1",
    "SOLVERS",
    "check_descent",
    "collapse_message",
    "count_grad_evals",
    "count_hvps",
    "w_rank",
    "default_save_times",
    "default_tolerances",
    "failure_message",
    "result_code",
    "resolve_solver",
    "solver_options",
]
