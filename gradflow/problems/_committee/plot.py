r"""Figures of a soft committee machine ([`gradflow.problems.Committee`][]).

- [`order_parameter_figure`][gradflow.plot.order_parameter_figure]: the
  order parameters $R$ and $Q$ over time, with the closed-form symmetric
  plateau.
- [`committee_phase_diagram`][gradflow.plot.committee_phase_diagram]: the
  symmetric plateau's length over initial scale and teacher norm (a sweep).
"""

import numpy as np

from ..._problem.functions import describe
from ..._result.trajectory import Trajectory
from ..._sweep.result import Sweep
from ...plot._base import check_trajectory, positive_time, pyplot, shade_stages
from ...plot._problem import GENERIC_SHADES, figures, problem_summary_figure
from .problem import Committee
from .theory import committee_plateau, doubly_centred, isotropic_norm


def _committee(problem) -> Committee:
    """`problem` (of a trajectory or a sweep), checked to be a committee
    machine."""
    if not isinstance(problem, Committee):
        raise TypeError(
            f"expected a gradflow.problems.Committee, got a {type(problem).__name__}"
        )
    return problem


def order_parameter_figure(traj: Trajectory, *, title: str | None = None):
    r"""A soft committee machine's order parameters over time: left
    $R_{kn} = w_k\cdot v_n$, right $Q_{kl} = w_k\cdot w_l$ (solid: $k = l$,
    dotted: $k \ne l$), log time, the generic stages shaded; for an
    isotropic teacher the closed-form symmetric plateau $R^*$, $Q^*$ dashed,
    and the size of the specialisation $|P_K R P_M|$ (the doubly centred part
    of $R$) on a second axis.

    **Returns:** a matplotlib `Figure`.
    """
    problem = _committee(check_trajectory(traj).problem)
    plt = pyplot()
    keep = positive_time(traj)
    t = np.asarray(traj.ts)[keep]
    R = np.asarray(traj.extras["R"])[keep]
    Q = np.asarray(traj.extras["Q"])[keep]
    K, M = R.shape[1:]
    fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(11.5, 4.4))
    for ax in (ax0, ax1):
        shade_stages(ax, traj.stages, labels=ax is ax0, colors=GENERIC_SHADES)
        ax.set_xscale("log")
        ax.set_xlim(float(t[0]), float(t[-1]))
        ax.set_xlabel("gradient-flow time $t$")
    for k in range(K):
        for n in range(M):
            ax0.plot(t, R[:, k, n], color=f"C{n % 10}", lw=1.0, alpha=0.85,
                     label=f"$R_{{k{n + 1}}}$" if k == 0 else None)  # fmt: skip
        for n in range(K):
            ax1.plot(t, Q[:, k, n], color=f"C{k % 10}", lw=1.2 if n == k else 0.8,
                     ls="-" if n == k else ":",
                     label=f"$Q_{{{k + 1}{k + 1}}}$" if n == k else None)  # fmt: skip
    try:
        plateau = committee_plateau(problem)
    except ValueError:  # no closed form for this teacher
        plateau = None
    if plateau is not None:
        ax0.axhline(plateau.R, color="k", lw=0.8, ls="--", label="$R^*$ (plateau)")
        ax1.axhline(plateau.Q, color="k", lw=0.8, ls="--", label="$Q^*$ (plateau)")
    twin = ax0.twinx()
    spread = np.linalg.norm(doubly_centred(R), axis=(1, 2))
    twin.plot(t, np.maximum(spread, 1e-300), color="0.3", lw=0.8, ls="-.")
    twin.set_yscale("log")
    twin.set_ylabel(r"$|P_K R P_M|$ (dash-dot)", fontsize=8)
    ax0.set_ylabel("student-teacher overlap $R$")
    ax1.set_ylabel("student-student overlap $Q$ (dotted: $k \\ne l$)")
    ax0.legend(fontsize=7, frameon=False, loc="upper left")
    ax1.legend(fontsize=7, frameon=False, loc="upper left")
    fig.suptitle(title or f"{describe(problem)}: order parameters",
                 fontsize=10)  # fmt: skip
    fig.tight_layout()
    return fig


def committee_plateau_length(traj: Trajectory) -> float:
    """The length of a committee machine's symmetric plateau: the first
    complete `plateau` stage after the first drop (`nan` if there is none)."""
    for s in traj.stages:
        if s.name == "plateau" and s.cycle >= 1 and s.t_start > 0 and s.complete:
            return float(s.t_end - s.t_start)
    return float("nan")


def committee_phase_diagram(sw, *, title: str | None = None):
    r"""The symmetric plateau's length over a sweep of soft committee machines
    (isotropic teachers of several norms $\tau$) and initial scales: left, a
    heat map over $\varepsilon \times \tau$ (mean over seeds); right, the
    length against $\log(1/\varepsilon)$ for each $\tau$ with the slope
    $1/\lambda(\tau)$ of the closed-form specialisation rate dashed.

    **Returns:** a matplotlib `Figure`.
    """
    if not isinstance(sw, Sweep):
        raise TypeError(f"expected a gradflow.Sweep, got {type(sw).__name__}")
    plt = pyplot()
    problems = [_committee(p) for p in sw.problems]
    taus = np.array([isotropic_norm(problems[m.problem]) for m in sw.members])
    eps = np.array([m.init_scale for m in sw.members], dtype=float)
    length = np.array([committee_plateau_length(t) for t in sw])
    ut, ue = np.unique(taus), np.unique(eps)
    grid = np.full((ut.size, ue.size), np.nan)
    for i, tau in enumerate(ut):
        for j, e in enumerate(ue):
            sel = (taus == tau) & (eps == e)
            if np.isfinite(length[sel]).any():
                grid[i, j] = np.nanmean(length[sel])
    fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(12, 4.6))
    mesh = ax0.pcolormesh(np.arange(ue.size + 1), np.arange(ut.size + 1),
                          np.ma.masked_invalid(grid), cmap="viridis")  # fmt: skip
    fig.colorbar(mesh, ax=ax0, label="plateau length")
    ax0.set_xticks(np.arange(ue.size) + 0.5, [f"{e:.0e}" for e in ue])
    ax0.set_yticks(np.arange(ut.size) + 0.5, [f"{x:g}" for x in ut])
    ax0.set_xlabel(r"initial scale $\varepsilon$")
    ax0.set_ylabel(r"teacher norm $\tau$")
    for (i, j), v in np.ndenumerate(grid):
        if np.isfinite(v):
            ax0.text(j + 0.5, i + 0.5, f"{v:.0f}", ha="center", va="center",
                     fontsize=7, color="w")  # fmt: skip
    x = np.log(1 / ue)
    for i, tau in enumerate(ut):
        first = next(m.problem for m, t in zip(sw.members, taus, strict=True)
                     if t == tau)  # fmt: skip
        rate = committee_plateau(problems[first]).rate
        ok = np.isfinite(grid[i])
        ax1.plot(x[ok], grid[i, ok], "o", color=f"C{i}", ms=4)
        if ok.sum() >= 2:
            mid = np.mean(x[ok]), np.mean(grid[i, ok])
            ax1.plot(x[ok], mid[1] + (x[ok] - mid[0]) / rate, "--", color=f"C{i}",
                     lw=1, label=rf"$\tau$ = {tau:g}: slope $1/\lambda$ = {1 / rate:.3g}")  # fmt: skip
    ax1.set_xlabel(r"$\log(1/\varepsilon)$")
    ax1.set_ylabel("plateau length")
    ax1.legend(fontsize=7, frameon=False)
    ax1.grid(alpha=0.25, lw=0.5)
    fig.suptitle(title or "soft committee machine: length of the symmetric plateau",
                 fontsize=10)  # fmt: skip
    fig.tight_layout()
    return fig


@figures.register
def _(problem: Committee, traj):
    out = {"summary": problem_summary_figure}
    if "R" in traj.extras:
        out["order_parameters"] = order_parameter_figure
    return out


__all__ = [
    "committee_phase_diagram",
    "committee_plateau_length",
    "order_parameter_figure",
]
