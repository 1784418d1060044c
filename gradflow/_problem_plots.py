r"""Figures of the problems beyond the paper (re-exported by `gradflow.plot`).

- [`problem_summary_figure`][gradflow.plot.problem_summary_figure]: any
  problem's trajectory: the loss and $|\nabla L|$ on one log-time axis, the
  generic stages (plateau, drop) shaded and the `rank` records marked.
- [`mode_strength_figure`][gradflow.plot.mode_strength_figure]: a deep linear
  network's mode strengths $u_a(t)/s_a$ over Saxe et al.'s curves.
- [`order_parameter_figure`][gradflow.plot.order_parameter_figure]: a soft
  committee machine's order parameters $R$ and $Q$ over time, with the
  closed-form symmetric plateau.
- [`learning_time_figure`][gradflow.plot.learning_time_figure]: the time at
  which each mode of a deep linear network is half learnt, against $1/s$.
- [`committee_phase_diagram`][gradflow.plot.committee_phase_diagram]: the
  symmetric plateau's length over initial scale and teacher norm (a sweep).
- [`plot_problem`][gradflow.plot.plot_problem]: writes the summary and the
  problem's own figures (what `gradflow run --problem` draws).
"""

import os
from pathlib import Path

import numpy as np

from ._engine.result import Trajectory
from .problems._committee import Committee
from .problems._deep_linear import DeepLinear, product
from .theory._problems import (
    committee_plateau,
    doubly_centred,
    isotropic_norm,
    saxe_learning_time,
    saxe_mode_strength,
)


_SHADES = {"plateau": "#9e9e9e", "drop": "#ff9f1c"}


def _pyplot():
    import matplotlib

    if os.environ.get("MPLBACKEND") is None:
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, stem: Path, formats: tuple[str, ...] = ("png", "pdf")) -> list[Path]:
    paths = []
    stem.parent.mkdir(parents=True, exist_ok=True)
    for ext in formats:
        path = stem.with_suffix(f".{ext}")
        fig.savefig(path, dpi=150 if ext == "png" else None, bbox_inches="tight")
        paths.append(path)
    _pyplot().close(fig)
    return paths


def _check(traj) -> Trajectory:
    if not isinstance(traj, Trajectory):
        raise TypeError(f"expected a gradflow.Trajectory, got {type(traj).__name__}")
    return traj


def _deep_linear(traj) -> DeepLinear:
    """The problem of a trajectory of a deep linear network."""
    problem = _check(traj).problem
    if not isinstance(problem, DeepLinear):
        raise TypeError(
            "expected a trajectory of a gradflow.problems.DeepLinear, got one of "
            f"{type(problem).__name__}"
        )
    return problem


def _committee(problem) -> Committee:
    """`problem` (of a trajectory or a sweep), checked to be a committee
    machine."""
    if not isinstance(problem, Committee):
        raise TypeError(
            f"expected a gradflow.problems.Committee, got a {type(problem).__name__}"
        )
    return problem


def _shade(ax, stages, *, labels: bool = False) -> None:
    seen = set()
    for s in stages:
        if s.name not in _SHADES or not np.isfinite(s.t_end):
            continue
        label = s.name if labels and s.name not in seen else None
        seen.add(s.name)
        ax.axvspan(max(s.t_start, 1e-300), s.t_end, color=_SHADES[s.name],
                   alpha=0.18, lw=0, label=label)  # fmt: skip


def _log_time(traj):
    keep = np.asarray(traj.ts) > 0
    return keep, np.asarray(traj.ts)[keep]


def problem_summary_figure(traj: Trajectory, *, title: str | None = None):
    r"""Any problem's trajectory at a glance: the loss (with the plateau
    levels and the problem's `loss_floor`) and $|\nabla L|$ on a log-time
    axis, plateaus and drops shaded, a tick at each `rank` record.

    **Returns:** a matplotlib `Figure`.
    """
    traj = _check(traj)
    plt = _pyplot()
    keep, t = _log_time(traj)
    loss = np.asarray(traj.loss)[keep]
    grad = np.asarray(traj.grad_norm)[keep]
    fig, (ax0, ax1) = plt.subplots(2, 1, figsize=(7.5, 6.2), sharex=True)
    floor = None if traj.problem is None else traj.problem.loss_floor()
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
        _shade(ax, traj.stages, labels=ax is ax0)
        for r in ranks:
            ax.axvline(r.t_start, color="C3", lw=0.6, alpha=0.6)
    ax1.plot(t, grad, color="C2", lw=1.2)
    ax1.set_yscale("log")
    ax1.set_ylabel(r"$|\nabla L|$")
    ax1.set_xscale("log")
    ax1.set_xlim(float(t[0]), float(t[-1]))
    ax1.set_xlabel("gradient-flow time $t$")
    if ranks:
        ax0.plot([], [], color="C3", lw=0.6, label="rank records")
    ax0.legend(fontsize=8, frameon=False, loc="lower left")
    what = "trajectory" if traj.problem is None else traj.problem.describe()
    ax0.set_title(title or f"{what}: loss and stages", fontsize=10)
    fig.tight_layout()
    return fig


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
    plt = _pyplot()
    _, s, _ = problem.modes()
    modes = np.asarray(traj.extras["modes"])
    k = int(np.sum(s > 1e-12 * s[0]))
    s, modes = s[:k], modes[:, :k]
    u0, how = _saxe_start(traj, modes, s)
    ts = np.asarray(traj.ts)
    fig, ax = plt.subplots(figsize=(7.5, 4.6))
    _shade(ax, traj.stages, labels=True)
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
    ax.set_title(title or f"{problem.describe()}: mode strengths", fontsize=10)
    fig.tight_layout()
    return fig


def order_parameter_figure(traj: Trajectory, *, title: str | None = None):
    r"""A soft committee machine's order parameters over time: left
    $R_{kn} = w_k\cdot v_n$, right $Q_{kl} = w_k\cdot w_l$ (solid: $k = l$,
    dotted: $k \ne l$), log time, the generic stages shaded; for an
    isotropic teacher the closed-form symmetric plateau $R^*$, $Q^*$ dashed,
    and the size of the specialisation $|P_K R P_M|$ (the doubly centred part
    of $R$) on a second axis.

    **Returns:** a matplotlib `Figure`.
    """
    problem = _committee(_check(traj).problem)
    plt = _pyplot()
    keep, t = _log_time(traj)
    R = np.asarray(traj.extras["R"])[keep]
    Q = np.asarray(traj.extras["Q"])[keep]
    K, M = R.shape[1:]
    fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(11.5, 4.4))
    for ax in (ax0, ax1):
        _shade(ax, traj.stages, labels=ax is ax0)
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
    fig.suptitle(title or f"{problem.describe()}: order parameters",
                 fontsize=10)  # fmt: skip
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
    labels = labels or [_deep_linear(t).describe() for t in trajs]
    plt = _pyplot()
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
    from ._engine.sweep_result import Sweep

    if not isinstance(sw, Sweep):
        raise TypeError(f"expected a gradflow.Sweep, got {type(sw).__name__}")
    plt = _pyplot()
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


def plot_problem(
    traj: Trajectory, out_dir: str | os.PathLike, prefix: str = "", *, pdf: bool = False
) -> list[Path]:
    """Writes the generic summary of any problem's trajectory and the
    problem's own figures (a deep linear network's mode strengths, a committee
    machine's order parameters) into `out_dir` as PNG, and with `pdf` also as
    PDF (as [`gradflow.plot.plot_all`][]); returns the paths."""
    traj = _check(traj)
    out = Path(out_dir)
    formats = ("png", "pdf") if pdf else ("png",)
    paths = _save(problem_summary_figure(traj), out / f"{prefix}summary", formats)
    if isinstance(traj.problem, DeepLinear) and "modes" in traj.extras:
        paths += _save(mode_strength_figure(traj), out / f"{prefix}modes", formats)
    if isinstance(traj.problem, Committee) and "R" in traj.extras:
        paths += _save(
            order_parameter_figure(traj), out / f"{prefix}order_parameters", formats
        )
    return paths


__all__ = [
    "committee_phase_diagram",
    "committee_plateau_length",
    "half_times",
    "learning_time_figure",
    "mode_strength_figure",
    "order_parameter_figure",
    "plot_problem",
    "problem_summary_figure",
]
