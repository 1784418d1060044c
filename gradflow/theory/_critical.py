"""Critical points near the plateaus of a trajectory: refinement to
$\nabla L = 0$, classification, and the plateaus themselves."""

import math
from typing import Any

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from .._core.threads import with_limited_blas_threads
from .._problem.curvature import start_point, start_speed
from .._problem.functions import (
    astype,
    loss_floor,
    params_dtype,
    problem_loss_scale,
    speed_floor,
)
from .._result.trajectory import Trajectory
from .._stages import loss_level
from ._checks import (
    as_problem,
    check_method,
    check_point,
    check_rel_tol,
    check_trajectory,
)
from ._linearize import (
    DEFAULT_REL_TOL,
    Linearization,
    flat_grad,
    flat_hessian,
    flatten_params,
    linearize,
    shape_of,
)


DEFAULT_PLATEAU_THRESHOLD = 1e-2
"""The plateau threshold on $t|\nabla L|^2/\\ell$ (the speed against the loss
scale, a [`gradflow.StagedProblem`][]'s)."""

DEFAULT_LEVEL_PLATEAU_THRESHOLD = 0.1
"""The plateau threshold on the scale-free speed $t|\nabla L|^2/(L -
L_{\text{floor}})$ of every other problem (the stages' `level_entry_speed`)."""


# ---------------------------------------------------------------------------
# Critical points
# ---------------------------------------------------------------------------


@with_limited_blas_threads
def refine_critical_point(
    problem,
    params,
    *,
    max_steps: int = 200,
    gtol: float = 1e-13,
    max_parameters: int = 5000,
) -> tuple[Any, bool]:
    r"""Moves `params` to a nearby critical point, $\nabla L = 0$.

    Minimises $|\nabla L|^2$ by Levenberg-Marquardt: the residual is
    $g = \nabla L$, its Jacobian the Hessian $H = V\Lambda V^\top$, and each
    step is $\theta \leftarrow \theta - V\,\Lambda(\Lambda^2 + \mu)^{-1}
    V^\top g$, with the damping $\mu$ shrunk after a step that lowers $|g|$ and
    grown otherwise. This converges to a critical point also where $H$ is
    singular (degenerate points, symmetry orbits), where plain Newton fails,
    and ends with Newton's quadratic convergence where $H$ is regular on the
    step's span. Dense: the Hessian is formed (`max_parameters` bounds its
    size).

    `problem`: a [`gradflow.Problem`][] (or a [`gradflow.MarkovChain`][] for
    the paper's model); `params`: one point of it.

    **Returns:** `(point, converged)`, `converged` meaning $|\nabla L| <
    10^{-10}$ at the returned point.

    **Raises:** `ValueError` if the model has more than `max_parameters`
    parameters.
    """
    problem = as_problem(problem, params)
    params = check_point(params, problem)
    x = np.asarray(flatten_params(params))
    if x.size > max_parameters:
        raise ValueError(
            f"refinement forms the dense Hessian; the model has "
            f"{x.size} parameters > max_parameters = {max_parameters}"
        )
    like = shape_of(params)
    unravel = ravel_pytree(params)[1]
    g = np.asarray(flat_grad(jnp.asarray(x), problem, like))
    gnorm = float(np.linalg.norm(g))
    mu = None
    for _ in range(max_steps):
        if gnorm < gtol:
            break
        H = np.asarray(flat_hessian(jnp.asarray(x), problem, like))
        lam, V = np.linalg.eigh(0.5 * (H + H.T))
        if mu is None:
            mu = 1e-6 * float(np.max(lam**2))
        c = V.T @ g
        while True:
            x_new = x - V @ (lam * c / (lam**2 + mu))
            g_new = np.asarray(flat_grad(jnp.asarray(x_new), problem, like))
            n_new = float(np.linalg.norm(g_new))
            if np.isfinite(n_new) and n_new < gnorm:
                x, g, gnorm = x_new, g_new, n_new
                mu = max(mu / 10, 1e-300)
                break
            mu *= 10
            if mu > 1e30:
                break
        if mu > 1e30:
            break
    return unravel(jnp.asarray(x)), bool(gnorm < 1e-10)


class CriticalPoint(eqx.Module):
    """A refined critical point near a plateau of a trajectory.

    **Fields:** `t` (the save time closest to it: least $|\\nabla L|$ on the
    plateau), `t_start`, `t_end` (the plateau's extent in save times),
    `index` (save index of `t`), `loss`, `grad_norm`, `params` (the refined
    point), `distance` (from the saved point to the refined one),
    `linearization` (a [`gradflow.Linearization`][]), `kind` (`"saddle"`,
    `"degenerate"` or `"minimum"`) and `converged` (the refinement reached
    $|\\nabla L| < 10^{-10}$).
    """

    t: float
    t_start: float
    t_end: float
    index: int
    loss: float
    grad_norm: float
    params: Any
    distance: float
    linearization: Linearization
    kind: str
    converged: bool

    def as_dict(self) -> dict[str, Any]:
        """A JSON-friendly summary (no arrays)."""
        lin = self.linearization
        return {
            "t": self.t,
            "t_start": self.t_start,
            "t_end": self.t_end,
            "loss": self.loss,
            "grad_norm": self.grad_norm,
            "distance": self.distance,
            "kind": self.kind,
            "converged": self.converged,
            "unstable_rate": lin.unstable_rate,
            "num_unstable": lin.num_unstable,
        }


def classify(lin: Linearization, problem=None) -> str:
    """`"saddle"` if an eigenvalue of $-\\nabla^2 L$ exceeds `lin.tol`;
    `"minimum"` if none does and either the loss equals the problem's floor
    (a [`gradflow.BoundedProblem`][]'s `loss_floor()`; for the paper's model
    the chain's conditional entropy: a global minimum, $L$ never goes below
    it) or no more
    eigenvalues are zero than the loss's symmetries explain; otherwise
    `"degenerate"` (the Hessian cannot tell: higher orders decide). `problem`
    may be anything [`gradflow.as_problem`][] takes, or `None` (no floor).

    Where the symmetries are not counted (`gauge_rank = -1`: Lanczos, or a
    problem whose symmetry group is not derived) a point with no
    unstable eigenvalue above the floor is `"minimum"` in the sense of
    second-order stationary: zero eigenvalues beyond the symmetries cannot be
    told apart there."""
    if lin.num_unstable > 0:
        return "saddle"
    floor = None if problem is None else loss_floor(as_problem(problem))
    if floor is not None and lin.loss <= floor + 1e-9:
        return "minimum"
    if lin.method == "dense" and lin.gauge_rank >= 0 and lin.num_flat > lin.gauge_rank:
        return "degenerate"
    return "minimum"


def _loss_scale(traj: Trajectory) -> float:
    scale = None if traj.problem is None else problem_loss_scale(traj.problem)
    return abs(float(traj.loss[0])) if scale is None else float(scale)


def _starts_still(traj: Trajectory, scale: float, threshold: float) -> bool:
    """Whether the flow of `traj` starts near a critical point (`True` where
    its problem is unknown: the saves alone cannot tell)."""
    if traj.problem is None:
        return True
    first = traj.at(0)
    problem = astype(traj.problem, params_dtype(first))
    return start_speed(start_point(problem, first), scale) <= threshold


def plateaus(
    traj: Trajectory, threshold: float | None = None, merge: float = 0.1
) -> list[tuple[int, int, int]]:
    r"""The plateaus of a trajectory, found from `traj.loss` and `traj.grad_norm`.

    Along the flow $dL/d\log t = -t\,|\nabla L|^2$. A save time is *on a
    plateau* when the loss falls by less than `threshold` of its height above
    its floor per e-fold of time (scale-free, `docs/stages.md`, "Scale-free
    plateaus"): $q(t) = t|\nabla L|^2 / \lambda <$ `threshold`, $\lambda =
    \min(\ell, L - L_{\text{floor}})$ (default `threshold`
    `DEFAULT_LEVEL_PLATEAU_THRESHOLD` = 0.1); for a
    [`gradflow.StagedProblem`][] against its loss scale, $\lambda = \ell$
    (its `loss_scale()`; for the paper's model its whole range
    $\log d - H(P|\pi)$; default `threshold` `DEFAULT_PLATEAU_THRESHOLD` =
    0.01). $\ell$ is the loss at the start where the problem gives none. Runs of such
    times separated by less than `merge` in $\log t$ are merged. Each plateau
    is represented by its save with the least $|\nabla L|$ (the closest
    approach to the critical point it shadows).

    **Returns:** a list of `(start, best, end)` save indices.
    """
    traj = check_trajectory(traj)
    loss = np.asarray(traj.loss)
    floor = speed_floor(traj.problem, loss[0]) if traj.problem is not None else None
    if threshold is None:
        threshold = (
            DEFAULT_PLATEAU_THRESHOLD
            if floor is None
            else DEFAULT_LEVEL_PLATEAU_THRESHOLD
        )
    threshold = float(threshold)
    if not math.isfinite(threshold) or threshold <= 0:
        raise ValueError(
            f"threshold must be finite and > 0, got threshold = {threshold}"
        )
    ts = np.asarray(traj.ts)
    g = np.asarray(traj.grad_norm)
    span = _loss_scale(traj)
    kind = loss.dtype
    eps = float(np.finfo(kind).eps) if kind.kind == "f" else 2.2e-16
    level = loss_level(loss.astype(np.float64), max(span, 1e-12), floor, eps)
    q = ts * g**2 / level
    on = q < threshold
    still = min(threshold, DEFAULT_PLATEAU_THRESHOLD)
    if on[0] and ts[0] == 0 and not _starts_still(traj, span, still):
        # the run from t = 0 is slow only because t is small
        on[: int(np.argmin(on)) if not on.all() else on.size] = False
    runs: list[list[int]] = []
    for i in np.flatnonzero(on):
        if runs and (
            i == runs[-1][1] + 1
            or (ts[runs[-1][1]] > 0 and math.log(ts[i] / ts[runs[-1][1]]) < merge)
        ):
            runs[-1][1] = int(i)
        else:
            runs.append([int(i), int(i)])
    out = []
    for a, b in runs:
        best = a + int(np.argmin(g[a : b + 1]))
        out.append((a, best, b))
    return out


@with_limited_blas_threads
def critical_points(
    traj: Trajectory,
    *,
    threshold: float | None = None,
    tol: float = DEFAULT_REL_TOL,
    method: str = "auto",
) -> list[CriticalPoint]:
    """For each plateau of `traj` (see [`gradflow.theory.plateaus`][]), the
    critical point it shadows: refined with
    [`refine_critical_point`][gradflow.theory.refine_critical_point] from the
    plateau's save with least $|\\nabla L|$, linearised and classified.

    **Returns:** a list of [`gradflow.CriticalPoint`][], in time order.
    """
    traj = check_trajectory(traj)
    tol = check_rel_tol(tol)
    method = check_method(method)
    problem = traj.problem
    if problem is None:
        raise ValueError(
            "traj has no problem (gf.load could not import its class and warned "
            "which), and critical points need the loss: define the class at the "
            "top level of an importable module (a file on the Python path, not a "
            "script run as __main__ nor a function), then rerun and save the "
            "flow, or give the loaded trajectory its problem back: "
            "dataclasses.replace(traj, problem=MyProblem(...))"
        )
    out = []
    for a, best, b in plateaus(traj, threshold):
        start = traj.at(best)
        point, converged = refine_critical_point(problem, start)
        lin = linearize(problem, point, method=method, tol=tol)
        flat0 = flatten_params(start)
        flat1 = flatten_params(point)
        out.append(
            CriticalPoint(
                t=float(traj.ts[best]),
                t_start=float(traj.ts[a]),
                t_end=float(traj.ts[b]),
                index=int(best),
                loss=lin.loss,
                grad_norm=lin.grad_norm,
                params=point,
                distance=float(jnp.linalg.norm(flat1 - flat0)),
                linearization=lin,
                kind=classify(lin, problem),
                converged=converged,
            )
        )
    return out


__all__ = [
    "CriticalPoint",
    "DEFAULT_LEVEL_PLATEAU_THRESHOLD",
    "DEFAULT_PLATEAU_THRESHOLD",
    "classify",
    "critical_points",
    "plateaus",
    "refine_critical_point",
]
