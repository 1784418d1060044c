r"""Figures of a trajectory and its stages (matplotlib; PNG and PDF).

- [`summary_figure`][gradflow.plot.summary_figure]: six panels on one log-time
  axis with the stages shaded: the loss against its levels $\log d$, $H(\pi)$
  and the conditional entropy; matrix norms; attention entropy; attention mass
  per key token; singular values of $W_0$; alignment cosines.
- [`pca_figure`][gradflow.plot.pca_figure]: the token embeddings (columns of
  $W_0$) projected on their top two principal directions, over time.
- [`attention_figure`][gradflow.plot.attention_figure]: the attention matrix
  $A$ at each stage boundary.
- [`save_figure`][gradflow.plot.save_figure]: writes `stem.png` and
  `stem.pdf`.

They read a [`gradflow.Trajectory`][] from
[`gradflow.integrate_stages`][] (its `extras` hold the diagnostics).
"""

import os
from pathlib import Path

import equinox as eqx
import numpy as np

from ._chain import entropy_bounds
from ._model import attention
from ._trajectory import Trajectory


STAGE_COLORS = {
    "condensation": "#9e9e9e",
    "focus": "#ff9f1c",
    "dilution": "#2ec4b6",
    "new_direction": "#7b2cbf",
}
_BOUNDARY_EVENTS = (
    "saddle_entry",
    "focus_start",
    "focus_end",
    "new_direction_start",
    "new_direction_end",
)


def _pyplot():
    import matplotlib

    if os.environ.get("MPLBACKEND") is None:
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _require(traj: Trajectory, *keys: str) -> None:
    if not isinstance(traj, Trajectory):
        raise TypeError(f"expected a gradflow.Trajectory, got {type(traj).__name__}")
    missing = [k for k in keys if k not in traj.extras]
    if missing:
        raise ValueError(
            f"the trajectory has no diagnostics {missing}: produce it with "
            "gradflow.integrate_stages (gradflow.integrate saves only the loss and "
            "parameters)"
        )


def _labels(traj: Trajectory) -> list[str]:
    return [traj.chain.label(k) for k in range(traj.chain.d)]


def _positive_time(traj: Trajectory):
    """Index of the save times > 0 (a log axis cannot show t = 0)."""
    return np.flatnonzero(np.asarray(traj.ts) > 0)


def _stage_label(stage) -> str:
    return stage.name.replace("_", " ")


def shade_stages(ax, stages, *, labels: bool = False, alpha: float = 0.18) -> None:
    """Shades each stage's time interval on `ax` in its stage colour."""
    seen = set()
    for s in stages:
        t0, t1 = s.t_start, s.t_end
        if not (np.isfinite(t0) and np.isfinite(t1)):
            continue
        t0 = max(t0, 1e-300)
        name = s.name
        label = None
        if labels and name not in seen:
            label = _stage_label(s)
            seen.add(name)
        ax.axvspan(
            t0,
            t1,
            color=STAGE_COLORS.get(name, "#cccccc"),
            alpha=alpha,
            lw=0,
            label=label,
        )


def summary_figure(traj: Trajectory, *, title: str | None = None):
    r"""The summary figure: six panels sharing a log-time axis, stages shaded.

    **Returns:** a matplotlib `Figure`.
    """
    _require(traj, "norm_W0", "att_entropy", "att_mass", "sv_W0", "cos_W0_pi")
    plt = _pyplot()
    idx = _positive_time(traj)
    t = np.asarray(traj.ts)[idx]
    ex = {
        k: np.asarray(v)[idx]
        for k, v in traj.extras.items()
        if not k.startswith("event_")
    }
    loss = np.asarray(traj.loss)[idx]
    levels = entropy_bounds(traj.chain)
    labels = _labels(traj)
    d = traj.chain.d
    fig, axes = plt.subplots(6, 1, figsize=(9, 15), sharex=True)
    ax = axes[0]
    shade_stages(ax, traj.stages, labels=True)
    ax.plot(t, loss, color="black", lw=1.5, label="loss $L$")
    for value, name, style in (
        (levels["log_d"], r"$\log d$", ":"),
        (levels["unigram"], r"$H(\pi)$", "--"),
        (levels["conditional"], "conditional entropy", "-."),
    ):
        ax.axhline(
            value, color="tab:red", ls=style, lw=1, label=f"{name} = {value:.4f}"
        )
    ax.set_ylabel("population loss")
    ax.legend(fontsize=7, ncol=2, loc="upper right")

    ax = axes[1]
    shade_stages(ax, traj.stages)
    for name, color in (("W0", "C0"), ("W1", "C1"), ("WQ", "C2"), ("WK", "C3")):
        ax.plot(
            t, ex[f"norm_{name}"], color=color, label=f"$|{name[0]}_{{{name[1:]}}}|_F$"
        )
    ax.set_yscale("log")
    ax.set_ylabel("Frobenius norm")
    ax.legend(fontsize=7, ncol=4, loc="lower right")

    ax = axes[2]
    shade_stages(ax, traj.stages)
    ax.plot(t, ex["att_entropy"], color="black", label=r"$\sum_i \pi_i H(A_{i\cdot})$")
    ax.axhline(levels["unigram"], color="tab:red", ls="--", lw=1, label=r"$H(\pi)$")
    ax.set_ylabel("attention entropy")
    ax.legend(fontsize=7, loc="lower left")

    ax = axes[3]
    shade_stages(ax, traj.stages)
    cmap = plt.get_cmap("tab10" if d <= 10 else "viridis")
    shown = range(d) if d <= 10 else np.argsort(-np.asarray(traj.chain.pi))[:10]
    for j, k in enumerate(shown):
        color = cmap(j) if d <= 10 else cmap(j / 10)
        ax.plot(t, ex["att_mass"][:, k], color=color, label=f"token {labels[k]}")
    ax.set_ylabel(r"attention mass $\sum_i \pi_i A_{ik}$")
    ax.legend(fontsize=7, ncol=min(5, len(shown)), loc="upper left")

    ax = axes[4]
    shade_stages(ax, traj.stages)
    sv = ex["sv_W0"]
    for j in range(min(sv.shape[1], 6)):
        ax.plot(t, sv[:, j], label=rf"$\sigma_{j + 1}(W_0)$")
    ax.set_yscale("log")
    ax.set_ylabel("singular values of $W_0$")
    ax.legend(fontsize=7, ncol=3, loc="lower right")

    ax = axes[5]
    shade_stages(ax, traj.stages)
    ax.plot(t, ex["cos_W0_pi"], label=r"rows of $W_0$ vs $\pi$")
    ax.plot(t, ex["cos_W1_u"], label=r"columns of $W_1$ vs $\pi - 1/d$")
    ax.plot(t, ex["cos_v_pi"][:, 0], label=r"$|v_1 \cdot \hat\pi|$")
    ax.plot(t, ex["cos_v_pi"][:, 1], label=r"$|v_2 \cdot \hat\pi|$ (new direction)")
    ax.set_ylim(-0.02, 1.05)
    ax.set_ylabel("alignment cosine")
    ax.set_xlabel("gradient-flow time $t$ (log scale)")
    ax.set_xscale("log")
    ax.legend(fontsize=7, ncol=2, loc="lower left")
    if title is None:
        s = traj.settings
        title = (
            f"d = {d}, width {s.get('width')}, init scale {s.get('init_scale')}, "
            f"seed {s.get('seed')}"
        )
    # the time axis spans the saves (a stage starting at t = 0 would stretch
    # the log axis down to its clipping value)
    axes[-1].set_xlim(t[0], t[-1])
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def _event_times(traj: Trajectory, names=_BOUNDARY_EVENTS) -> list[tuple[str, float]]:
    return [(e.name, float(e.t)) for e in traj.events if e.name in names]


def pca_figure(traj: Trajectory, *, title: str | None = None):
    r"""Token embeddings (columns of $W_0$) on their top two principal directions.

    The directions are those of all embeddings at all save times (uncentred,
    so that the origin stays the origin). Left: each token's path in that
    plane, the end marked; right: the two coordinates against log time, stages
    shaded, showing the embeddings' retreat and expansion.

    **Returns:** a matplotlib `Figure`.
    """
    _require(traj)
    plt = _pyplot()
    W0 = np.asarray(traj.params.W0)  # (T, m, d)
    T, m, d = W0.shape
    points = np.transpose(W0, (0, 2, 1)).reshape(T * d, m)
    _, _, vt = np.linalg.svd(points, full_matrices=False)
    basis = vt[:2] if vt.shape[0] >= 2 else np.vstack([vt, np.zeros_like(vt)])
    coords = np.einsum("tmk,pm->tkp", W0, basis)  # (T, d, 2)
    labels = _labels(traj)
    fig, axes = plt.subplots(1, 2, figsize=(13, 5.5))
    ax = axes[0]
    cmap = plt.get_cmap("tab10" if d <= 10 else "viridis")
    for k in range(d):
        color = cmap(k) if d <= 10 else cmap(k / max(d - 1, 1))
        ax.plot(
            coords[:, k, 0],
            coords[:, k, 1],
            color=color,
            lw=1.2,
            label=f"token {labels[k]}",
        )
        ax.scatter(coords[-1, k, 0], coords[-1, k, 1], color=color, s=30, zorder=3)
    ax.scatter([0], [0], marker="+", color="black", s=60, label="origin")
    ax.set_xlabel("principal direction 1")
    ax.set_ylabel("principal direction 2")
    ax.set_title("embedding paths (dot: final)")
    ax.legend(fontsize=7, ncol=2)
    ax = axes[1]
    idx = _positive_time(traj)
    t = np.asarray(traj.ts)[idx]
    shade_stages(ax, traj.stages, labels=True)
    for k in range(d):
        color = cmap(k) if d <= 10 else cmap(k / max(d - 1, 1))
        ax.plot(t, coords[idx, k, 0], color=color, lw=1.2)
        ax.plot(t, coords[idx, k, 1], color=color, lw=1.0, ls="--")
    ax.set_xscale("log")
    ax.set_xlabel("gradient-flow time $t$ (log scale)")
    ax.set_ylabel("coordinate (solid: direction 1, dashed: direction 2)")
    ax.legend(fontsize=7, loc="upper left")
    fig.suptitle(title or "token embeddings, principal directions")
    fig.tight_layout()
    return fig


_attention = eqx.filter_jit(attention)


def _attention_at(traj: Trajectory, i: int) -> np.ndarray:
    """The attention matrix at save `i`, from the saved parameters."""
    return np.asarray(_attention(traj.params[i], traj.chain))


def attention_figure(
    traj: Trajectory, *, max_panels: int = 8, title: str | None = None
):
    r"""Heatmaps of the attention matrix $A$ at the stage boundaries.

    One panel per stage boundary (the earliest `max_panels - 1`), plus the
    final state. Row: query token; column: key token.

    **Returns:** a matplotlib `Figure`.
    """
    plt = _pyplot()
    # The boundaries of the recorded stages, in time order, each shown at the
    # save time nearest to it (the attention there is computed from the saved
    # parameters), the earliest first.
    bounds = []
    for st in sorted(traj.stages, key=lambda x: x.t_start):
        for key, verb in (("t_start", "start"), ("t_end", "end")):
            t = float(getattr(st, key))
            if t > 0 and (key == "t_start" or st.complete):
                bounds.append((t, f"{st.name.replace('_', ' ')} {verb}"))
    bounds.sort()
    picks, used = [], []
    ts = np.asarray(traj.ts)
    for t, name in bounds:
        j = int(np.argmin(np.abs(np.log(np.maximum(ts, 1e-300)) - np.log(t))))
        if j in used or j == len(ts) - 1:
            continue
        used.append(j)
        picks.append((f"{name}\nt = {ts[j]:.4g}", _attention_at(traj, j)))
    picks = picks[: max_panels - 1]
    picks.append(
        (f"final\nt = {traj.ts[-1]:.4g}", _attention_at(traj, len(traj.ts) - 1))
    )
    if not picks:
        raise ValueError("the trajectory has no stage boundary events to show")
    n = len(picks)
    cols = min(4, n)
    rows = int(np.ceil(n / cols))
    fig, axes = plt.subplots(
        rows, cols, figsize=(3.4 * cols, 3.3 * rows), squeeze=False
    )
    labels = _labels(traj)
    d = traj.chain.d
    image = None
    for i, (ax, (name, A)) in enumerate(zip(axes.flat, picks, strict=False)):
        image = ax.imshow(A, vmin=0, vmax=1, cmap="magma")
        ax.set_title(name, fontsize=9)
        if d <= 16:
            ax.set_xticks(range(d), labels, fontsize=7)
            ax.set_yticks(range(d), labels, fontsize=7)
        if i // cols == rows - 1 or i + cols >= n:
            ax.set_xlabel("key token")
        if i % cols == 0:
            ax.set_ylabel("query token")
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    fig.colorbar(image, ax=axes, shrink=0.8, label="attention $A_{ik}$")
    fig.suptitle(title or "attention at the stage boundaries")
    return fig


def save_figure(fig, stem: str | os.PathLike) -> list[Path]:
    """Saves `fig` as `stem.png` (150 dpi) and `stem.pdf`; returns the paths."""
    stem = Path(stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    paths = []
    for ext in ("png", "pdf"):
        path = stem.with_suffix(f".{ext}")
        fig.savefig(path, dpi=150 if ext == "png" else None, bbox_inches="tight")
        paths.append(path)
    _pyplot().close(fig)
    return paths


def plot_all(
    traj: Trajectory, out_dir: str | os.PathLike, prefix: str = ""
) -> list[Path]:
    """Writes the summary, PCA and attention figures (PNG and PDF) into
    `out_dir`; returns the paths."""
    out = Path(out_dir)
    paths = save_figure(summary_figure(traj), out / f"{prefix}summary")
    paths += save_figure(pca_figure(traj), out / f"{prefix}embeddings_pca")
    if any(e.name in _BOUNDARY_EVENTS for e in traj.events):
        paths += save_figure(attention_figure(traj), out / f"{prefix}attention")
    return paths


__all__ = [
    "STAGE_COLORS",
    "attention_figure",
    "pca_figure",
    "plot_all",
    "save_figure",
    "shade_stages",
    "summary_figure",
]
