r"""Figures of in-context regression with linear attention
([`gradflow.problems.InContextRegression`][]).

- [`staircase_figure`][gradflow.plot.staircase_figure]: the loss on the
  predicted levels $L_{1..k}$, and the learnt eigen-components
  $\tilde\Gamma_{ii}$ against the minimiser's $\gamma_i$.
"""

import numpy as np

from ..._core.validate import check_problem_of
from ..._problem.functions import describe, loss_levels
from ..._result.trajectory import Trajectory
from ...plot._base import check_trajectory, positive_time, pyplot, shade_stages
from ...plot._problem import GENERIC_SHADES, figures, problem_summary_figure
from .problem import InContextRegression
from .report import trajectory_modes
from .theory import in_context_minimiser


def _in_context(traj) -> InContextRegression:
    return check_problem_of(
        check_trajectory(traj).problem,
        InContextRegression,
        "a trajectory of a gradflow.problems.InContextRegression",
    )


def staircase_figure(traj: Trajectory, *, title: str | None = None):
    r"""In-context regression's staircase: above, the loss (log time) with
    the predicted levels $L_{1..k}$ dashed (`gf.loss_levels`: every $k$ up
    to the heads' floor; for merged key-query $L(0)$ and the minimum only); below, the eigen-components $\tilde\Gamma_{ii} =
    (U^\top\Gamma U)_{ii}$ (`traj.extras["modes"]`, largest eigenvalue
    first) with the minimiser's $\gamma_i = 1/((1 + \frac1N)\lambda_i +
    \frac\tau N)$ dashed in the same colour. The generic stages shaded.

    **Returns:** a matplotlib `Figure`.
    """
    problem = _in_context(traj)
    plt = pyplot()
    keep = positive_time(traj)
    ts = np.asarray(traj.ts)[keep]
    loss = np.asarray(traj.loss)[keep]
    modes = trajectory_modes(traj)[keep]
    lam, U = problem.eigen()
    gamma = np.diag(U.T @ in_context_minimiser(problem) @ U)
    fig, (ax0, ax1) = plt.subplots(
        2, 1, figsize=(7.5, 6.6), sharex=True, height_ratios=(1.1, 1)
    )
    for ax in (ax0, ax1):
        shade_stages(ax, traj.stages, labels=ax is ax0, colors=GENERIC_SHADES)
    ax0.plot(ts, loss, color="k", lw=1.6, label="loss")
    for name, level in loss_levels(problem).values():
        ax0.axhline(level, color="C3", lw=0.8, ls="--", alpha=0.8)
        ax0.annotate(
            f"{name} = {level:.4g}",
            (0.0, level),
            xycoords=("axes fraction", "data"),
            xytext=(4, 2),
            textcoords="offset points",
            ha="left",
            va="bottom",
            fontsize=7,
            color="C3",
        )
    ax0.plot([], [], color="C3", lw=0.8, ls="--", label="predicted levels")
    ax0.set_ylabel("loss $L$")
    ax0.legend(fontsize=7, loc="center right", framealpha=0.9)
    for i in range(lam.size):
        color = f"C{i % 10}"
        ax1.plot(ts, modes[:, i], color=color, lw=1.5,
                 label=rf"$\tilde\Gamma_{{{i + 1}{i + 1}}}$, "
                 rf"$\lambda_{i + 1}$ = {lam[i]:.3g}")  # fmt: skip
        ax1.axhline(gamma[i], color=color, lw=0.8, ls="--")
    ax1.plot([], [], color="0.3", lw=0.8, ls="--", label=r"minimiser's $\gamma_i$")
    ax1.set_xscale("log")
    # from a thousandth of the last time: the first plateau shows, the decades
    # before it (nothing happens there) do not
    ax1.set_xlim(max(float(ts[0]), 1e-3 * float(ts[-1])), float(ts[-1]))
    ax1.set_xlabel("gradient-flow time $t$")
    ax1.set_ylabel(r"eigen-component $(U^\top\Gamma U)_{ii}$")
    ax1.legend(fontsize=7, loc="center left", framealpha=0.9)
    what = (
        "one drop, every direction at once"
        if problem.merged
        else "the staircase, one direction a drop"
    )
    ax0.set_title(title or f"{describe(problem)}: {what}", fontsize=10)
    fig.tight_layout()
    return fig


@figures.register
def _(problem: InContextRegression, traj):
    del problem, traj
    return {"summary": problem_summary_figure, "staircase": staircase_figure}


__all__ = ["staircase_figure"]
