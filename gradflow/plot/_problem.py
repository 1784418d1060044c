r"""Figures of any problem's trajectory, and the extension point through
which a problem's package adds its own: [`figures`][gradflow.plot.figures],
which [`plot_all`][gradflow.plot.plot_all] (what `gradflow run` draws)
writes.

- [`problem_summary_figure`][gradflow.plot.problem_summary_figure]: the loss
  and $|\nabla L|$ on one log-time axis, the generic stages (plateau, drop)
  shaded and the `rank` records marked.
"""

import functools
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from .._problem.functions import describe, loss_floor
from .._result.trajectory import Trajectory
from ._base import check_trajectory, positive_time, pyplot, save_figure, shade_stages


GENERIC_SHADES = {"plateau": "#9e9e9e", "drop": "#ff9f1c"}
"""The shades of the generic stages (plateau, drop) in the figures of the
problems beyond the paper's model (pass as `shade_stages(..., colors=)`)."""


def problem_summary_figure(traj: Trajectory, *, title: str | None = None):
    r"""Any problem's trajectory at a glance: the loss (with the plateau
    levels and the problem's `loss_floor`) and $|\nabla L|$ on a log-time
    axis, plateaus and drops shaded, a tick at each `rank` record.

    **Returns:** a matplotlib `Figure`.
    """
    traj = check_trajectory(traj)
    plt = pyplot()
    keep = positive_time(traj)
    t = np.asarray(traj.ts)[keep]
    loss = np.asarray(traj.loss)[keep]
    grad = np.asarray(traj.grad_norm)[keep]
    fig, (ax0, ax1) = plt.subplots(2, 1, figsize=(7.5, 6.2), sharex=True)
    floor = loss_floor(traj.problem)
    shifted = loss - (floor or 0.0)
    positive = shifted > 0
    ax0.plot(t[positive], shifted[positive], color="C0", lw=1.5)
    ax0.set_yscale("log")
    for s in traj.stages:
        if s.name == "plateau" and s.complete:
            level = s.loss_end - (floor or 0.0)
            if level > 0:
                ax0.axhline(level, color="0.5", lw=0.6, ls=":")
    ax0.set_ylabel("loss" if not floor else f"loss - floor ({floor:.4g})")
    ranks = [s for s in traj.stages if s.name == "rank"]
    for ax in (ax0, ax1):
        shade_stages(ax, traj.stages, labels=ax is ax0, colors=GENERIC_SHADES)
        for r in ranks:
            ax.axvline(r.t_start, color="C3", lw=0.6, alpha=0.6)
    ax1.plot(t, grad, color="C2", lw=1.2)
    ax1.set_yscale("log")
    ax1.set_ylabel(r"$|\nabla L|$")
    ax1.set_xscale("log")
    t_hi, note = _time_axis_end(t, loss, floor)
    ax1.set_xlim(float(t[0]), t_hi)
    ax1.set_xlabel("gradient-flow time $t$" + note)
    if ranks:
        ax0.plot([], [], color="C3", lw=0.6, label="rank records")
    ax0.legend(fontsize=8, frameon=False, loc="lower left")
    what = "trajectory" if traj.problem is None else describe(traj.problem)
    ax0.set_title(title or f"{what}: loss and stages", fontsize=10)
    fig.tight_layout()
    return fig


# Where the loss is this close to its floor (relative to its start), what is
# left of the run is round-off: the summary's time axis ends soon after.
ROUND_OFF = 1e-12


def _time_axis_end(t, loss, floor) -> tuple[float, str]:
    """The end of the summary's time axis: the last save, or twice the time
    the loss came within round-off of its floor when that is earlier (the
    rest of a long run would fill the log axis with round-off); with a note
    for the axis label."""
    t_end = float(t[-1])
    if floor is None or loss.size < 2:
        return t_end, ""
    gap = loss - floor
    reached = np.flatnonzero(gap <= ROUND_OFF * max(abs(float(gap[0])), 1e-300))
    if reached.size and 2 * t[reached[0]] < t_end:
        t_cut = float(2 * t[reached[0]])
        return t_cut, (
            f" (shown to {t_cut:.3g}: the loss is at its floor to round-off from "
            f"t = {t[reached[0]]:.3g} to t1 = {t_end:.4g})"
        )
    return t_end, ""


@functools.singledispatch
def figures(problem, traj) -> Mapping[str, Callable[..., Any]]:
    """The figures of a trajectory of `problem`: `{file stem: function}`,
    each function `fn(traj, title=None) -> Figure`. By default the generic
    summary ([`problem_summary_figure`][gradflow.plot.problem_summary_figure]);
    a problem's package registers its own (`figures.register(cls)`): the
    paper's model its six-panel summary, the embedding PCA and the attention
    maps; the deep linear network its mode strengths; the committee machine
    its order parameters."""
    del problem, traj
    return {"summary": problem_summary_figure}


def plot_all(
    traj: Trajectory,
    out_dir: str | os.PathLike,
    prefix: str = "",
    *,
    title: str | None = None,
    pdf: bool = False,
) -> list[Path]:
    """Writes every figure of a trajectory ([`figures`][gradflow.plot.figures]
    of its problem) into `out_dir` as PNG, and with `pdf` also as PDF, each
    titled with `title` (default: the problem's own title); returns the
    paths."""
    traj = check_trajectory(traj)
    out = Path(out_dir)
    formats = ("png", "pdf") if pdf else ("png",)
    paths = []
    for stem, make in figures(traj.problem, traj).items():
        paths += save_figure(make(traj, title=title), out / f"{prefix}{stem}", formats)
    return paths


__all__ = ["GENERIC_SHADES", "figures", "plot_all", "problem_summary_figure"]
