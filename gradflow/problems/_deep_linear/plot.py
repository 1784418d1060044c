r"""Figures of a deep linear network ([`gradflow.problems.DeepLinear`][]).

- [`mode_strength_figure`][gradflow.plot.mode_strength_figure]: the mode
  strengths $u_a(t)/s_a$ over Saxe et al.'s curves.
- [`learning_time_figure`][gradflow.plot.learning_time_figure]: the time at
  which each mode is half learnt, against $1/s$.
"""

import numpy as np

from ..._core.validate import check_problem_of
from ..._problem.functions import describe
from ..._result.trajectory import Trajectory
from ...plot._base import check_trajectory, pyplot, shade_stages
from ...plot._problem import GENERIC_SHADES, figures, problem_summary_figure
from .problem import DeepLinear, product
from .theory import saxe_learning_time, saxe_mode_strength


def _deep_linear(traj) -> DeepLinear:
    """The problem of a trajectory of a deep linear network."""
    return check_problem_of(
        check_trajectory(traj).problem,
        DeepLinear,
        "a trajectory of a gradflow.problems.DeepLinear",
    )


def _saxe_start(traj, modes: np.ndarray, s: np.ndarray) -> tuple[np.ndarray, str]:
    """Initial strengths for Saxe's curves: the measured $u_a(0)$ from a
    decoupled start (the product diagonal in the modes' basis); otherwise the
    $u_0$ whose curve is half way up at the measured half-time."""
    U, _, Vt = _deep_linear(traj).modes()
    W0 = np.asarray(product(traj.at(0)))
    M = U.T @ W0 @ Vt.T
    off = M - np.diag(np.diag(M))
    u0 = modes[0]
    if (u0 > 0).all() and np.abs(off).max() <= 1e-9 * np.abs(u0).max():
        return u0, "Saxe et al. from the measured $u_a(0)$"
    half = np.array([_first_crossing(traj.ts, modes[:, a], s[a] / 2)
                     for a in range(s.size)])  # fmt: skip
    return s / (1 + np.exp(2 * s * half)), "Saxe et al. through the half-time"


def _first_crossing(ts, y, level) -> float:
    above = np.flatnonzero(np.asarray(y) >= level)
    if above.size == 0 or above[0] == 0:
        return float("nan")
    i = int(above[0])
    f = (level - y[i - 1]) / (y[i] - y[i - 1])
    return float(ts[i - 1] + f * (ts[i] - ts[i - 1]))


def mode_strength_figure(traj: Trajectory, *, title: str | None = None):
    r"""A deep linear network's mode strengths $u_a(t)/s_a$ (`extras["modes"]`
    over the singular values $s_a$ of $\Sigma_{yx}$), with Saxe et al.'s
    curves $u(t) = s e^{2st}/(e^{2st} - 1 + s/u_0)$ dashed: from the measured
    $u_a(0)$ for a decoupled start, otherwise through each mode's measured
    half-time (the shape of the rise). Linear time, the generic stages
    shaded.

    **Returns:** a matplotlib `Figure`.
    """
    problem = _deep_linear(traj)
    plt = pyplot()
    _, s, _ = problem.modes()
    modes = np.asarray(traj.extras["modes"])
    k = int(np.sum(s > 1e-12 * s[0]))
    s, modes = s[:k], modes[:, :k]
    u0, how = _saxe_start(traj, modes, s)
    ts = np.asarray(traj.ts)
    fig, ax = plt.subplots(figsize=(7.5, 4.6))
    shade_stages(ax, traj.stages, labels=True, colors=GENERIC_SHADES)
    # linear time up to half as long again as the last mode took to be
    # learnt (a flow that ends long after the learning is not squeezed left);
    # Saxe's curves on a fine grid of that window (a save grid of a long flow
    # is too coarse for a fast mode's rise)
    unlearnt = np.flatnonzero((modes < 0.99 * s).any(axis=1))
    last = float(ts[unlearnt[-1]]) if unlearnt.size else float(ts[-1])
    right = min(float(ts[-1]), 1.5 * last) if last > 0 else float(ts[-1])
    grid = np.linspace(0.0, right, 4000)
    for a in range(k):
        color = f"C{a % 10}"
        ax.plot(ts, modes[:, a] / s[a], color=color, lw=1.6,
                label=f"$u_{a + 1}/s_{a + 1}$, $s_{a + 1}$ = {s[a]:.3g}")  # fmt: skip
        if np.isfinite(u0[a]) and u0[a] > 0:
            curve = saxe_mode_strength(grid, s[a], u0[a]) / s[a]
            ax.plot(grid, curve, color="k", lw=0.9, ls="--",
                    label=how if a == 0 else None)  # fmt: skip
    ax.set_xlim(0, right)
    ax.set_xlabel("gradient-flow time $t$")
    ax.set_ylabel(r"mode strength $u_a / s_a$")
    ax.legend(fontsize=7, frameon=False, loc="lower right")
    ax.set_title(title or f"{describe(problem)}: mode strengths", fontsize=10)
    fig.tight_layout()
    return fig


def half_times(traj: Trajectory) -> tuple[np.ndarray, np.ndarray]:
    """`(s, t_half)`: each nonzero mode's strength $s_a$ and the first time its
    $u_a$ reaches $s_a/2$ (`nan` if it does not by the last save)."""
    _, s, _ = _deep_linear(traj).modes()
    modes = np.asarray(traj.extras["modes"])
    k = int(np.sum(s > 1e-12 * s[0]))
    t = [_first_crossing(traj.ts, modes[:, a], s[a] / 2) for a in range(k)]
    return s[:k], np.asarray(t)


def learning_time_figure(trajs, *, labels=None, title: str | None = None):
    r"""The time at which each mode of a deep linear network is half learnt
    ($u_a = s_a/2$) against $1/s_a$, one series per trajectory; for a
    trajectory from a decoupled start Saxe et al.'s
    $t = \log(s/u_0 - 1)/(2s)$ dashed (`u0` its measured $u_a(0)$, when all
    modes share it).

    **Arguments:** `trajs`: trajectories of [`gradflow.problems.DeepLinear`][]
    problems; `labels`: one per trajectory; `title`.

    **Returns:** a matplotlib `Figure`.
    """
    labels = labels or [describe(_deep_linear(t)) for t in trajs]
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    for j, (traj, label) in enumerate(zip(trajs, labels, strict=True)):
        s, t = half_times(traj)
        ax.plot(1 / s, t, "o", color=f"C{j}", ms=5, label=f"{label}: measured")
        u0 = np.asarray(traj.extras["modes"])[0, : s.size]
        if (u0 > 0).all() and np.ptp(u0) <= 1e-9 * u0.max():
            grid = np.linspace(1 / s.max(), 1 / s.min(), 200)
            ax.plot(grid, saxe_learning_time(1 / grid, u0[0]), "--", color=f"C{j}",
                    lw=1, label=rf"Saxe: $\log(s/u_0 - 1)/2s$, $u_0$ = {u0[0]:.2g}")  # fmt: skip
    ax.set_xlabel("$1/s_a$")
    ax.set_ylabel("half-learning time $t_a$ ($u_a = s_a/2$)")
    ax.grid(alpha=0.25, lw=0.5)
    ax.legend(fontsize=7, frameon=False)
    ax.set_title(title or "deep linear network: learning time against 1/s",
                 fontsize=10)  # fmt: skip
    fig.tight_layout()
    return fig


@figures.register
def _(problem: DeepLinear, traj):
    out = {"summary": problem_summary_figure}
    if "modes" in traj.extras:
        out["modes"] = mode_strength_figure
    return out


__all__ = ["half_times", "learning_time_figure", "mode_strength_figure"]
