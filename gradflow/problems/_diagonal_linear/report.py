r"""The diagonal linear network's rows of the theory report
(`docs/problems.md`, "Diagonal linear networks"): each plateau's level and
each jump's rescaled time $\tau = t/\log(1/\alpha)$, predicted by
[`saddle_to_saddle`][gradflow.theory.saddle_to_saddle] and measured on the
flow ([`diagonal_jumps`][gradflow.theory.diagonal_jumps]); registered with
[`gradflow.theory.report_rows`][].
"""

import math
from typing import Any

import jax
import numpy as np

from ..._core.validate import check_problem_of
from ..._result.trajectory import Trajectory
from ...theory._critical import CriticalPoint
from ...theory._report import report_row, report_rows
from .problem import DiagonalLinear
from .theory import Jump, saddle_to_saddle


def _problem_of(traj) -> DiagonalLinear:
    if not isinstance(traj, Trajectory):
        raise TypeError(
            f"traj must be a gradflow.Trajectory, got {type(traj).__name__}"
        )
    return check_problem_of(
        traj.problem,
        DiagonalLinear,
        "a trajectory of a gradflow.problems.DiagonalLinear",
    )


def trajectory_beta(traj: Trajectory) -> np.ndarray:
    r"""$\beta$ at every save, shape `(saves, D)`: `traj.extras["beta"]`, or
    computed from the saved parameters."""
    if "beta" in traj.extras:
        return np.asarray(traj.extras["beta"], np.float64)
    problem = _problem_of(traj)
    params = jax.tree.map(np.asarray, traj.params)
    return np.asarray(problem.beta(params), np.float64)


def start_scale(traj: Trajectory) -> float:
    r"""$\alpha$ of a run: its `init_scale`, or for a given start the root
    mean square of its first parameters."""
    given = getattr(traj.settings, "init_scale", None)
    if given is not None:
        return float(given)
    u, v = (np.asarray(x)[0] for x in traj.params)
    return float(np.sqrt(0.5 * (np.mean(u**2) + np.mean(v**2))))


def diagonal_jumps(traj: Trajectory, path: list[Jump] | None = None) -> dict:
    r"""The saddle-to-saddle path measured on a trajectory of a
    [`gradflow.problems.DiagonalLinear`][], against `path` (default:
    [`saddle_to_saddle`][gradflow.theory.saddle_to_saddle] of its problem),
    in the rescaled time $\tau = t/\log(1/\alpha)$:

    - `"times"`: for each jump $k \ge 1$, the first $\tau$ at which the
      flow's $\beta$ is nearer the saddle $\beta_k$ than the one before,
      $\beta_{k-1}$ (interpolated linearly between saves; NaN if never);
    - `"betas"`: for each saddle $k \ge 1$ but the last, the flow's $\beta$
      half way between its jumps, at $\tau = (\tau_k + \tau_{k+1})/2$
      (interpolated; NaN past the last save);
    - `"scale"`: $\log(1/\alpha)$.
    """
    problem = _problem_of(traj)
    path = saddle_to_saddle(problem) if path is None else path
    log_scale = math.log(1 / start_scale(traj))
    tau = np.asarray(traj.ts, np.float64) / log_scale
    beta = trajectory_beta(traj)
    times = []
    for k in range(1, len(path)):
        near = np.sum((beta - path[k].beta) ** 2, axis=1)
        far = np.sum((beta - path[k - 1].beta) ** 2, axis=1)
        d = near - far
        idx = np.flatnonzero(d < 0)
        if idx.size == 0:
            times.append(math.nan)
            continue
        i = int(idx[0])
        if i == 0:
            times.append(float(tau[0]))
            continue
        f = d[i - 1] / (d[i - 1] - d[i])
        times.append(float(tau[i - 1] + f * (tau[i] - tau[i - 1])))
    betas = []
    for k in range(1, len(path) - 1):
        mid = 0.5 * (path[k].time + path[k + 1].time)
        if mid > tau[-1]:
            betas.append(np.full(beta.shape[1], math.nan))
            continue
        betas.append(
            np.array([np.interp(mid, tau, beta[:, i]) for i in range(beta.shape[1])])
        )
    return {"times": np.array(times), "betas": betas, "scale": log_scale}


def _name(beta: np.ndarray) -> str:
    nz = np.flatnonzero(beta != 0)
    return "{" + ", ".join(str(i + 1) for i in nz) + "}" if nz.size else "{}"


@report_rows.register
def _(
    problem: DiagonalLinear, traj: Trajectory, points: list[CriticalPoint]
) -> list[dict[str, Any]]:
    r"""The diagonal linear network's rows (`docs/problems.md`):

    - `plateau k level, support S`: for each `plateau` stage, the level of
      the predicted saddle nearest the flow's $\beta$ at the plateau's least
      $|\nabla L|$ against the loss there (with the saddle's support $S$ and
      its jump time $\tau_k$ in the note);
    - `jump k rescaled time`: $\tau_k$ of
      [`saddle_to_saddle`][gradflow.theory.saddle_to_saddle] against the
      $\tau$ at which the flow's $\beta$ passes half way from one saddle to
      the next ([`diagonal_jumps`][gradflow.theory.diagonal_jumps]); the
      error falls like $1/\log(1/\alpha)$.
    """
    del points
    path = saddle_to_saddle(problem)
    measured = diagonal_jumps(traj, path)
    ts, g = np.asarray(traj.ts), np.asarray(traj.grad_norm)
    loss = np.asarray(traj.loss)
    beta = trajectory_beta(traj)
    rows: list[dict[str, Any]] = []
    plateaus = [s for s in traj.stages if s.name == "plateau"]
    for k, stage in enumerate(plateaus, start=1):
        inside = np.flatnonzero((ts >= stage.t_start) & (ts <= stage.t_end))
        if inside.size == 0:
            continue
        best = int(inside[np.argmin(g[inside])])
        j = int(np.argmin([np.sum((beta[best] - p.beta) ** 2) for p in path]))
        rows.append(
            report_row(
                f"plateau {k} level, support {_name(path[j].beta)}",
                path[j].loss,
                loss[best],
                f"saddle {j} of saddle_to_saddle (tau = {path[j].time:.4g}); loss at "
                f"the least |grad L|, tau = {ts[best] / measured['scale']:.4g}",
            )
        )
    for k in range(1, len(path)):
        t = float(measured["times"][k - 1])
        if not math.isfinite(t):
            continue
        rows.append(
            report_row(
                f"jump {k} rescaled time, to support {_name(path[k].beta)}",
                path[k].time,
                t,
                "tau = t / log(1/init_scale) where beta passes half way from saddle "
                f"{k - 1} to saddle {k}",
            )
        )
    return rows


__all__ = ["diagonal_jumps"]
