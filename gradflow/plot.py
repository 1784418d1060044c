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
  `stem.pdf`; [`plot_all`][gradflow.plot.plot_all] writes the three as PNG
  (and PDF on request).

They read a [`gradflow.Trajectory`][] from
[`gradflow.integrate_stages`][] (its `extras` hold the diagnostics).
"""

import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import equinox as eqx
import numpy as np

from ._engine.result import Trajectory
from .problems._markov.chain import entropy_bounds
from .problems._markov.model import attention_summary


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


_attention = eqx.filter_jit(attention_summary)


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
    fig.colorbar(image, ax=axes, shrink=0.8, label="attention $A_{ik}$")  # pyright: ignore[reportArgumentType]
    fig.suptitle(title or "attention at the stage boundaries")
    return fig


def save_figure(
    fig, stem: str | os.PathLike, formats: tuple[str, ...] = ("png", "pdf")
) -> list[Path]:
    """Saves `fig` as `stem.png` (150 dpi) and `stem.pdf` (or the `formats`
    given); returns the paths."""
    stem = Path(stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    paths = []
    for ext in formats:
        path = stem.with_suffix(f".{ext}")
        fig.savefig(path, dpi=150 if ext == "png" else None, bbox_inches="tight")
        paths.append(path)
    _pyplot().close(fig)
    return paths


def plot_all(
    traj: Trajectory, out_dir: str | os.PathLike, prefix: str = "", *, pdf: bool = False
) -> list[Path]:
    """Writes the summary, PCA and attention figures into `out_dir` as PNG,
    and with `pdf` also as PDF (a PDF of the three costs about a second more
    than the PNGs: on request); returns the paths."""
    out = Path(out_dir)
    formats = ("png", "pdf") if pdf else ("png",)
    paths = save_figure(summary_figure(traj), out / f"{prefix}summary", formats)
    paths += save_figure(pca_figure(traj), out / f"{prefix}embeddings_pca", formats)
    if any(e.name in _BOUNDARY_EVENTS for e in traj.events):
        paths += save_figure(
            attention_figure(traj), out / f"{prefix}attention", formats
        )
    return paths


# -- sweeps --------------------------------------------------------------------


def _check_sweep(sw):
    from ._engine.sweep_result import Sweep

    if not isinstance(sw, Sweep):
        raise TypeError(f"expected a gradflow.Sweep, got {type(sw).__name__}")


def _member_axis(sw, name: str) -> np.ndarray:
    """Each member's value of a sweep axis: `"chain"`, `"init_scale"`,
    `"seed"`, `"start"` or a label of the chain axis."""
    if name in ("chain", "init_scale", "seed", "start"):
        values = [getattr(m, name) for m in sw.members]
    elif name in sw.labels:
        values = [m.labels[name] for m in sw.members]
    else:
        axes = ["chain", "init_scale", "seed", "start", *sw.labels]
        raise ValueError(f"no sweep axis {name!r}; choose one of {axes}")
    if any(v is None for v in values):
        raise ValueError(f"the sweep's members have no {name!r} (given starts?)")
    return np.asarray(values)


def member_value(traj: Trajectory, value: str | Callable[[Trajectory], Any]) -> float:
    """A number read off one member: `"STAGE.FIELD"` (that field of the
    member's first stage of that name, e.g. `"new_direction.t_start"`; `nan`
    when the member has no such stage), `"final_loss"`, `"num_steps"`, or a
    function `traj -> float`."""
    if callable(value):
        return float(value(traj))
    if value == "final_loss":
        return float(traj.loss[-1])
    if value == "num_steps":
        return float(traj.stats["num_steps"])
    if not isinstance(value, str) or value.count(".") != 1:
        raise ValueError(
            "value must be 'STAGE.FIELD' (e.g. 'new_direction.t_start'), "
            f"'final_loss', 'num_steps' or a function of a trajectory, got {value!r}"
        )
    name, field = value.split(".")
    for stage in traj.stages:
        if stage.name == name:
            got = getattr(stage, field, None)
            return math.nan if got is None else float(got)
    return math.nan


def _value_label(value) -> str:
    if callable(value):
        return getattr(value, "__name__", "value")
    if isinstance(value, str) and "." in value:
        name, field = value.split(".")
        what = {"t_start": "start time", "t_end": "end time"}.get(field, field)
        return f"{what} of {name.replace('_', ' ')}"
    return str(value).replace("_", " ")


def _axis_label(name: str) -> str:
    return {
        "delta": r"asymmetry $\delta$",
        "init_scale": r"initial scale $\varepsilon$",
        "seed": "seed",
        "chain": "chain",
    }.get(name, name)


def phase_diagram(
    sw,
    x: str,
    y: str | None = None,
    value="new_direction.t_start",
    *,
    theory: str | Callable[..., Any] | None = None,
    log_value: bool = False,
    title: str | None = None,
):
    r"""A phase diagram of a [`gradflow.Sweep`][]: `value` over one or two of
    its axes.

    - With `y`: a heat map over the grid of `x` x `y` (e.g. `x="delta"`,
      `y="seed"`), one cell per member; members without the value (no such
      stage) are hatched.
    - Without `y`: every member's value against `x` (points), their mean over
      the other axes (line) and, with `theory="escape"`, the linear theory's
      escape time from the origin $\log(1/arepsilon)/\sigma$ with
      $\sigma = |\pi - \mathbf 1/d|\,|\pi|$ (SPEC section 3) for
      `x="init_scale"`; `theory` may also be a function `f(x_values, chain)`.

    **Arguments:** `sw`; `x`, `y`: axis names (`"chain"`, `"init_scale"`,
    `"seed"` or a label such as `"delta"`); `value`: see
    [`member_value`][gradflow.plot.member_value]; `log_value`: a log colour or
    y scale; `title`.

    **Returns:** the matplotlib figure.
    """
    _check_sweep(sw)
    plt = _pyplot()
    xs = _member_axis(sw, x)
    vals = np.array([member_value(t, value) for t in sw])
    label = _value_label(value)
    if y is not None:
        ys = _member_axis(sw, y)
        ux, uy = np.unique(xs), np.unique(ys)
        grid = np.full((uy.size, ux.size), np.nan)
        for xv, yv, v in zip(xs, ys, vals, strict=True):
            grid[np.searchsorted(uy, yv), np.searchsorted(ux, xv)] = v
        fig, ax = plt.subplots(figsize=(6.4, 4.4))

        def edges(u):
            if u.size == 1:
                return np.array([u[0] - 0.5, u[0] + 0.5])
            mid = 0.5 * (u[1:] + u[:-1])
            return np.concatenate([[2 * u[0] - mid[0]], mid, [2 * u[-1] - mid[-1]]])

        from matplotlib.colors import LogNorm

        finite = grid[np.isfinite(grid)]
        norm = LogNorm() if log_value and finite.size and (finite > 0).all() else None
        ax.set_facecolor("white")
        ex, ey = edges(ux.astype(float)), edges(uy.astype(float))
        from matplotlib.patches import Rectangle

        ax.add_patch(Rectangle((ex[0], ey[0]), ex[-1] - ex[0], ey[-1] - ey[0],
                               facecolor="white", edgecolor="0.7", hatch="///",
                               lw=0, zorder=0))  # fmt: skip
        mesh = ax.pcolormesh(ex, ey, np.ma.masked_invalid(grid), cmap="viridis",
                             norm=norm, shading="flat")  # fmt: skip
        fig.colorbar(mesh, ax=ax, label=label)
        ax.set_xlabel(_axis_label(x))
        ax.set_ylabel(_axis_label(y))
        if ux.size <= 12:
            ax.set_xticks(ux, [f"{v:g}" for v in ux])
        if uy.size <= 16:
            ax.set_yticks(uy, [f"{v:g}" for v in uy])
        if grid.size <= 120:  # small grids: the numbers in the cells
            cmap, cnorm = mesh.cmap, mesh.norm
            for (r, c), v in np.ndenumerate(grid):
                if np.isfinite(v):
                    light = np.mean(cmap(cnorm(v))[:3]) > 0.5
                    ax.text(float(0.5 * (ex[c] + ex[c + 1])),
                            float(0.5 * (ey[r] + ey[r + 1])),
                            f"{v:.3g}", ha="center", va="center", fontsize=7,
                            color="k" if light else "w")  # fmt: skip
        missing = int(np.isnan(grid).sum())
        note = f" (hatched: no value, {missing} cells)" if missing else ""
        ax.set_title(title or f"{label}{note}", fontsize=10)
        fig.tight_layout()
        return fig

    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    ux = np.unique(xs)
    ok = np.isfinite(vals)
    ax.plot(xs[ok], vals[ok], "o", ms=4, color="C0", alpha=0.45, mec="none",
            label=f"members ({int(ok.sum())} of {len(vals)})")  # fmt: skip
    means = np.array([np.nanmean(vals[xs == u]) if np.isfinite(vals[xs == u]).any()
                      else np.nan for u in ux])  # fmt: skip
    lo_hi = np.array([[np.nanmin(vals[xs == u]), np.nanmax(vals[xs == u])]
                      if np.isfinite(vals[xs == u]).any() else [np.nan, np.nan]
                      for u in ux])  # fmt: skip
    if len(vals) > ux.size:
        ax.fill_between(ux, lo_hi[:, 0], lo_hi[:, 1], color="C0", alpha=0.12, lw=0,
                        label="range over the other axes")  # fmt: skip
    ax.plot(ux, means, "-", color="C0", lw=1.5, label="mean over the other axes")
    if theory is not None:
        grid_x = np.geomspace(ux.min(), ux.max(), 100) if x == "init_scale" else ux
        if theory == "escape":
            if x != "init_scale":
                raise ValueError(
                    f"theory='escape' is drawn against x='init_scale', got x={x!r}"
                )
            from . import theory as _theory_api

            origin_rate = _theory_api.origin_rate

            chain_ids = sorted({m.chain for m in sw.members})
            for j, c in enumerate(chain_ids):
                sigma = origin_rate(sw.chains[c])
                ax.plot(grid_x, np.log(1 / grid_x) / sigma, "--", color="k", lw=1,
                        label=(r"theory $\log(1/\varepsilon)/\sigma$, "
                               rf"$\sigma$ = {sigma:.3g}") if j < 3 else None)  # fmt: skip
        elif callable(theory):
            for j, c in enumerate(sorted({m.chain for m in sw.members})):
                ax.plot(grid_x, theory(grid_x, sw.chains[c]), "--", color="k", lw=1,
                        label="theory" if j == 0 else None)  # fmt: skip
        else:
            raise ValueError(
                f"theory must be None, 'escape' or a function, got {theory!r}"
            )
    if x == "init_scale":
        ax.set_xscale("log")
    if log_value:
        ax.set_yscale("log")
    ax.set_xlabel(_axis_label(x))
    ax.set_ylabel(label)
    ax.legend(fontsize=8, frameon=False)
    ax.grid(alpha=0.25, lw=0.5)
    ax.set_title(title or f"{label} across the sweep ({len(sw)} members)", fontsize=10)
    fig.tight_layout()
    return fig


def sweep_summary(sw, *, color_by: str | None = None, title: str | None = None):
    """Every member of a [`gradflow.Sweep`][] at a glance: left, the loss
    curves of all members on a log-time axis, coloured by `color_by` (a sweep
    axis; by default its first label, else the chain); right, one row per
    member with its stages shaded over the same time axis (failed members
    marked where they stopped).

    **Returns:** the matplotlib figure.
    """

    _check_sweep(sw)
    plt = _pyplot()
    if color_by is None:
        color_by = next(iter(sw.labels), "chain")
    cvals = _member_axis(sw, color_by).astype(float)
    import matplotlib as mpl
    import matplotlib.cm
    import matplotlib.colors

    lo, hi = float(np.min(cvals)), float(np.max(cvals))
    norm = matplotlib.colors.Normalize(lo, hi if hi > lo else lo + 1)
    cmap = mpl.colormaps["viridis"]
    n = len(sw)
    fig, (ax0, ax1) = plt.subplots(
        1, 2, figsize=(12, max(4.2, min(9.0, 2.0 + 0.12 * n))),
        gridspec_kw={"width_ratios": [1.1, 1]},
    )  # fmt: skip
    t_lo = float(np.min(sw.ts[sw.ts > 0]))
    t_hi = float(sw.ts[-1])
    for traj, cv in zip(sw, cvals, strict=True):
        keep = traj.ts > 0
        ax0.plot(traj.ts[keep], traj.loss[keep], color=cmap(norm(cv)), lw=0.8,
                 alpha=0.8)  # fmt: skip
    levels = entropy_bounds(sw.chains[0])
    for key, text in (("log_d", r"$\log d$"), ("unigram", r"$H(\pi)$"),
                      ("conditional", "cond. entropy")):  # fmt: skip
        ax0.axhline(levels[key], color="0.4", lw=0.7, ls=":")
        ax0.text(t_lo, levels[key], " " + text, fontsize=7, va="bottom", color="0.3")
    ax0.set_xscale("log")
    ax0.set_xlim(t_lo, t_hi)
    ax0.set_xlabel("gradient-flow time $t$")
    ax0.set_ylabel("population loss")
    sm = matplotlib.cm.ScalarMappable(norm=norm, cmap=cmap)
    fig.colorbar(sm, ax=ax0, label=_axis_label(color_by), pad=0.01)
    if len(sw.chains) > 1:
        ax0.set_title("loss levels of chain 0 dotted", fontsize=8)
    seen = set()
    for i, traj in enumerate(sw):
        for stage in traj.stages:
            name = stage.name
            t0 = max(float(stage.t_start), t_lo)
            t1 = stage.t_end
            t1 = traj.t_final if t1 is None or not np.isfinite(t1) else float(t1)
            if not t1 > t0:
                continue
            # new_direction overlaps the previous cycle's stages: a thinner
            # bar in the lower half of the row keeps both visible
            lower = name == "new_direction"
            ax1.barh(i + 0.2 if lower else i, t1 - t0, left=t0,
                     height=0.4 if lower else 0.8, lw=0,
                     color=STAGE_COLORS.get(name, "#cccccc"),
                     label=name.replace("_", " ") if name not in seen else None)  # fmt: skip
            seen.add(name)
        if not traj.ok:
            ax1.plot(traj.t_final, i, "x", color="C3", ms=5,
                     label="failed: stopped here" if "failed" not in seen else None)  # fmt: skip
            seen.add("failed")
    ax1.set_xscale("log")
    ax1.set_xlim(t_lo, t_hi)
    ax1.set_ylim(n - 0.5, -0.5)
    ax1.set_xlabel("gradient-flow time $t$")
    ax1.set_ylabel("member")
    if n <= 32:
        names = []
        for m in sw.members:
            parts = [f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}"
                     for k, v in m.labels.items()]  # fmt: skip
            if (
                m.init_scale is not None
                and len(set(sw.settings.get("init_scale") or [])) > 1
            ):
                parts.append(f"eps={m.init_scale:g}")
            parts.append(f"seed {m.seed}" if m.seed is not None else f"start {m.start}")
            names.append(", ".join(parts))
        ax1.set_yticks(range(n), names, fontsize=6)
    ax1.legend(fontsize=7, loc="lower left", bbox_to_anchor=(0.0, 1.01),
               ncol=5, frameon=False, handlelength=1.2, columnspacing=1.0)  # fmt: skip
    fig.suptitle(title or f"sweep of {n} members: loss and stages", fontsize=11)
    fig.tight_layout()
    return fig


__all__ = [
    "STAGE_COLORS",
    "attention_figure",
    "member_value",
    "phase_diagram",
    "pca_figure",
    "plot_all",
    "save_figure",
    "shade_stages",
    "summary_figure",
    "sweep_summary",
]
