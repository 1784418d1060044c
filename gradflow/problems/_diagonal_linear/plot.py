r"""Figures of a diagonal linear network
([`gradflow.problems.DiagonalLinear`][]).

- [`saddle_path_figure`][gradflow.plot.saddle_path_figure]: the loss and
  $\beta(t)$ against the rescaled time $\tau = t/\log(1/\alpha)$, with the
  saddle-to-saddle limit path dashed.
"""

import math

import numpy as np

from ..._core.validate import check_problem_of
from ..._problem.functions import describe
from ..._result.trajectory import Trajectory
from ...plot._base import check_trajectory, positive_time, pyplot
from ...plot._problem import figures, problem_summary_figure
from .problem import DiagonalLinear
from .report import start_scale, trajectory_beta
from .theory import saddle_to_saddle


def _diagonal(traj) -> DiagonalLinear:
    return check_problem_of(
        check_trajectory(traj).problem,
        DiagonalLinear,
        "a trajectory of a gradflow.problems.DiagonalLinear",
    )


def saddle_path_figure(traj: Trajectory, *, title: str | None = None):
    r"""A diagonal linear network's staircase in the rescaled time
    $\tau = t/\log(1/\alpha)$: above, the loss above its floor (log scale)
    with the levels of the saddle-to-saddle path
    ([`gradflow.theory.saddle_to_saddle`][]) dashed; below, each coordinate
    $\beta_i(\tau)$ with the limit path (piecewise constant, jumping at
    $\tau_k$) dashed in the same colour.

    **Returns:** a matplotlib `Figure`.
    """
    problem = _diagonal(traj)
    plt = pyplot()
    keep = positive_time(traj)
    scale = math.log(1 / start_scale(traj))
    tau = np.asarray(traj.ts)[keep] / scale
    floor = problem.loss_floor()
    loss = np.asarray(traj.loss)[keep] - floor
    beta = trajectory_beta(traj)[keep]
    path = saddle_to_saddle(problem)
    times = [j.time for j in path] + [max(float(tau[-1]), path[-1].time * 1.2)]
    fig, (ax0, ax1) = plt.subplots(
        2, 1, figsize=(7.5, 6.6), sharex=True, height_ratios=(1, 1.1)
    )
    ax0.plot(tau, np.maximum(loss, 1e-300), color="k", lw=1.6, label="loss - floor")
    low = float(loss[loss > 0].min()) if (loss > 0).any() else 1e-16
    for k, j in enumerate(path):
        level = j.loss - floor
        if level > 0:
            ax0.axhline(level, color="C3", lw=0.8, ls="--", alpha=0.8)
            ax0.annotate(f"saddle {k}: {level:.3g}", (0.0, level),
                         xycoords=("axes fraction", "data"), xytext=(4, 2),
                         textcoords="offset points", fontsize=7, color="C3")  # fmt: skip
        ax0.axvline(j.time, color="0.6", lw=0.6, ls=":")
        ax1.axvline(j.time, color="0.6", lw=0.6, ls=":")
    ax0.plot([], [], color="C3", lw=0.8, ls="--", label="saddle levels (limit)")
    ax0.set_yscale("log")
    top = float(max(loss.max(), path[0].loss - floor))
    ax0.set_ylim(max(low, 1e-12 * top) / 2, 2 * top)
    ax0.set_ylabel("loss above its floor")
    ax0.legend(fontsize=7, loc="upper right", framealpha=0.9)
    for i in range(problem.dimension):
        color = f"C{i % 10}"
        ax1.plot(tau, beta[:, i], color=color, lw=1.5,
                 label=rf"$\beta_{{{i + 1}}}$ ($\beta^*$ = "
                 f"{float(problem.target[i]):.3g})")  # fmt: skip
        ax1.step(times, [j.beta[i] for j in path] + [path[-1].beta[i]],
                 where="post", color=color, lw=0.9, ls="--")  # fmt: skip
    ax1.plot([], [], color="0.3", lw=0.9, ls="--", label="saddle-to-saddle limit")
    ax1.set_xlim(0.0, float(tau[-1]))
    ax1.set_xlabel(
        r"rescaled time $\tau = t/\log(1/\alpha)$"
        + f" (alpha = {math.exp(-scale):.3g})"
    )
    ax1.set_ylabel(r"$\beta_i$")
    ax1.legend(fontsize=7, loc="center right", framealpha=0.9)
    ax0.set_title(title or f"{describe(problem)}: saddle to saddle", fontsize=10)
    fig.tight_layout()
    return fig


@figures.register
def _(problem: DiagonalLinear, traj):
    del problem, traj
    return {"summary": problem_summary_figure, "saddle_path": saddle_path_figure}


__all__ = ["saddle_path_figure"]
