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
[`gradflow.integrate_stages`][] (its `extras` hold the diagnostics), and scale
with the vocabulary: tokens are named by their labels (the words, characters or
BPE pieces of a text), legends list the `TOP_TOKENS` most frequent tokens (by
$\pi$) and group the rest, and every legend sits beside its panel, never on
its curves.
"""

import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import equinox as eqx
import numpy as np

from ._core.threads import limited_blas_threads as _limited_blas_threads
from ._engine.result import Trajectory
from .problems._markov.chain import entropy_bounds
from .problems._markov.model import attention_summary


# One colour per stage kind, told apart at a glance (plateaus blue, not the
# grey of condensation).
STAGE_COLORS = {
    "condensation": "#8d8d8d",
    "focus": "#ff9f1c",
    "dilution": "#2ec4b6",
    "new_direction": "#7b2cbf",
    "plateau": "#4d96ff",
    "drop": "#e63946",
    "rank": "#6a994e",
}
# Tokens named in a legend or drawn in colour: the most frequent by pi; the
# others are drawn thin and grey under one legend entry.
TOP_TOKENS = 8
# Attention heat maps show every token up to this d, else the TOP_ATTENTION
# most frequent queries and keys and one column for the other keys together.
TOP_ATTENTION = 16
_BOUNDARY_EVENTS = (
    "saddle_entry",
    "focus_start",
    "focus_end",
    "new_direction_start",
    "new_direction_end",
)
_LEVEL_STYLES = (("log_d", r"$\log d$", ":"), ("unigram", r"$H(\pi)$", "--"))


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


def token_label(chain, k: int) -> str:
    """Token `k`'s name as a figure shows it: its label (a word, a character
    or a BPE piece, with spaces and line breaks made visible), or its index."""
    label = chain.label(k)
    if chain.tokens is None:
        return label
    shown = label.replace("\n", "\\n").replace("\t", "\\t")
    if shown != shown.strip() or not shown:
        shown = repr(label)
    return shown if len(shown) <= 14 else shown[:13] + "…"


def _labels(traj: Trajectory) -> list[str]:
    return [token_label(traj.chain, k) for k in range(traj.chain.d)]


def top_tokens(chain, k: int = TOP_TOKENS) -> np.ndarray:
    """The `k` most frequent tokens (largest $\\pi$ first)."""
    return np.argsort(-np.asarray(chain.pi), kind="stable")[:k]


def describe_chain(chain) -> str:
    """A short name of a chain for titles: its size and, for a text, its first
    tokens."""
    if chain.tokens is None:
        pi = np.asarray(chain.pi)
        return f"chain of d = {chain.d} tokens (largest pi {pi.max():.3g})"
    first = ", ".join(token_label(chain, int(k)) for k in top_tokens(chain, 3))
    return f"bigram chain of a text, d = {chain.d} tokens ({first}, ...)"


def _title(traj: Trajectory, what: str, title: str | None) -> str:
    s = traj.settings
    run = (
        f"width {s.get('width')}, init scale {s.get('init_scale')}, "
        f"seed {s.get('seed')}"
    )
    return f"{what}\n{title or describe_chain(traj.chain)}; {run}"


def _positive_time(traj: Trajectory):
    """Index of the save times > 0 (a log axis cannot show t = 0)."""
    return np.flatnonzero(np.asarray(traj.ts) > 0)


def _stage_label(stage) -> str:
    return stage.name.replace("_", " ")


def _legend_beside(ax, **kwargs) -> None:
    """A legend to the right of `ax`, off its curves (the constrained layout
    keeps it inside the figure)."""
    kwargs.setdefault("fontsize", 7)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False, **kwargs)


def shade_stages(ax, stages, *, labels: bool = False, alpha: float = 0.18) -> None:
    """Shades each stage's time interval on `ax` in its stage colour (one
    legend entry per stage kind with `labels`)."""
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


def _mark_cycles(ax, stages, t_lo: float) -> None:
    """Writes `name c` (c: the cycle) at the start of each stage that is not a
    plateau, along the top of `ax`."""
    for s in stages:
        if s.name == "plateau" or not np.isfinite(s.t_start):
            continue
        ax.text(
            max(s.t_start, t_lo), 0.98, f" {_stage_label(s)} {s.cycle}",
            transform=ax.get_xaxis_transform(), rotation=90, va="top",
            ha="left", fontsize=6, color=STAGE_COLORS.get(s.name, "0.3"),
        )  # fmt: skip


def _token_lines(ax, x, values, traj: Trajectory, *, ls="-", lw=1.2, label=True):
    """One line per token (`values[:, k]` against `x`, or `x[:, k]` when `x`
    has a token axis too): the `TOP_TOKENS` most frequent in colour (named),
    the others thin and grey under one legend entry."""
    labels = _labels(traj)
    pi = np.asarray(traj.chain.pi)
    top = top_tokens(traj.chain)
    rest = np.setdiff1d(np.arange(traj.chain.d), top)
    x = np.asarray(x)

    def xs(k):
        return x[:, k] if x.ndim == 2 else x

    for k in rest:
        first = label and k == rest[0]
        name = f"the other {rest.size} tokens" if first else None
        ax.plot(xs(k), values[:, k], color="0.6", lw=0.5, alpha=0.6, ls=ls, label=name)
    for j, k in enumerate(top):
        name = f"{labels[k]} (π = {pi[k]:.3f})" if label else None
        ax.plot(xs(k), values[:, k], color=f"C{j}", lw=lw, ls=ls, label=name)


def summary_figure(traj: Trajectory, *, title: str | None = None):
    r"""The summary figure: six panels sharing a log-time axis, stages shaded
    in their colours and marked with their cycle, legends beside the panels.
    `title` names the chain or corpus (default: the chain's size and first
    tokens); the run's width, init scale and seed follow it.

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
    levels = entropy_bounds(traj.chain)
    fig, axes = plt.subplots(6, 1, figsize=(11, 15), sharex=True, layout="constrained")
    for ax in axes:
        shade_stages(ax, traj.stages, labels=ax is axes[0])
    ax = axes[0]
    ax.plot(t, np.asarray(traj.loss)[idx], color="black", lw=1.5, label="loss $L$")
    for key, name, style in (*_LEVEL_STYLES, ("conditional", r"$H(P|\pi)$", "-.")):
        ax.axhline(levels[key], color="tab:red", ls=style, lw=1,
                   label=f"{name} = {levels[key]:.4f}")  # fmt: skip
    ax.set_ylabel("population loss")
    _mark_cycles(ax, traj.stages, t[0])
    _legend_beside(ax)
    ax = axes[1]
    for name, color in (("W0", "C0"), ("W1", "C1"), ("WQ", "C2"), ("WK", "C3")):
        ax.plot(t, ex[f"norm_{name}"], color=color,
                label=f"$|{name[0]}_{{{name[1:]}}}|_F$")  # fmt: skip
    ax.set_yscale("log")
    ax.set_ylabel("Frobenius norm")
    _legend_beside(ax)
    ax = axes[2]
    ax.plot(t, ex["att_entropy"], color="black", label=r"$\sum_i \pi_i H(A_{i\cdot})$")
    ax.axhline(levels["unigram"], color="tab:red", ls="--", lw=1, label=r"$H(\pi)$")
    ax.set_ylabel("attention entropy")
    _legend_beside(ax)
    ax = axes[3]
    _token_lines(ax, t, ex["att_mass"], traj)
    ax.set_ylabel("attention mass\n" r"$\sum_i \pi_i A_{ik}$ of key $k$")
    _legend_beside(ax, title="key token")
    ax = axes[4]
    sv = ex["sv_W0"]
    for j in range(min(sv.shape[1], 6)):
        ax.plot(t, sv[:, j], color=f"C{j}", label=rf"$\sigma_{j + 1}(W_0)$")
    ax.set_yscale("log")
    ax.set_ylabel("singular values of $W_0$")
    _legend_beside(ax)
    ax = axes[5]
    ax.plot(t, ex["cos_W0_pi"], label=r"rows of $W_0$ vs $\pi$")
    ax.plot(t, ex["cos_W1_u"], label=r"columns of $W_1$ vs $\pi - 1/d$")
    ax.plot(t, ex["cos_v_pi"][:, 0], label=r"$|v_1 \cdot \hat\pi|$")
    ax.plot(t, ex["cos_v_pi"][:, 1], label=r"$|v_2 \cdot \hat\pi|$ (new direction)")
    ax.set_ylim(-0.02, 1.05)
    ax.set_ylabel("alignment cosine")
    ax.set_xlabel("gradient-flow time $t$ (log scale)")
    ax.set_xscale("log")
    _legend_beside(ax)
    # the time axis spans the saves (a stage starting at t = 0 would stretch
    # the log axis down to its clipping value)
    axes[-1].set_xlim(t[0], t[-1])
    fig.suptitle(_title(traj, "loss, weights and attention along the flow", title))
    return fig


def pca_figure(traj: Trajectory, *, title: str | None = None):
    r"""Token embeddings (columns of $W_0$) on their top two principal directions.

    The directions are those of all embeddings at all save times (uncentred,
    so that the origin stays the origin). Left: each token's path in that
    plane, the end marked; right: the two coordinates against log time, stages
    shaded, showing the embeddings' retreat and expansion. The `TOP_TOKENS`
    most frequent tokens are coloured and named, the others grey.

    **Returns:** a matplotlib `Figure`.
    """
    _require(traj)
    plt = _pyplot()
    W0 = np.asarray(traj.params.W0)  # (T, m, d)
    T, m, d = W0.shape
    points = np.transpose(W0, (0, 2, 1)).reshape(T * d, m)
    with _limited_blas_threads():
        _, _, vt = np.linalg.svd(points, full_matrices=False)
    basis = vt[:2] if vt.shape[0] >= 2 else np.vstack([vt, np.zeros_like(vt)])
    coords = np.einsum("tmk,pm->tkp", W0, basis)  # (T, d, 2)
    fig, axes = plt.subplots(1, 2, figsize=(14, 5.8), layout="constrained")
    ax = axes[0]
    _token_lines(ax, coords[:, :, 0], coords[:, :, 1], traj)
    top = top_tokens(traj.chain)
    for j, k in enumerate(top):
        ax.scatter(coords[-1, k, 0], coords[-1, k, 1], color=f"C{j}", s=30, zorder=3)
    ax.scatter([0], [0], marker="+", color="black", s=60, label="origin")
    ax.set_xlabel("principal direction 1")
    ax.set_ylabel("principal direction 2")
    ax.set_title("embedding paths (dot: final)", fontsize=10)
    ax = axes[1]
    idx = _positive_time(traj)
    t = np.asarray(traj.ts)[idx]
    shade_stages(ax, traj.stages, labels=True)
    _token_lines(ax, t, coords[idx, :, 0], traj, label=False)
    _token_lines(ax, t, coords[idx, :, 1], traj, ls="--", lw=1.0, label=False)
    ax.set_xscale("log")
    ax.set_xlim(t[0], t[-1])
    ax.set_xlabel("gradient-flow time $t$ (log scale)")
    ax.set_ylabel("coordinate\n(solid: direction 1, dashed: direction 2)")
    # one legend for both panels: tokens (left panel's lines), then stages
    handles, names = axes[0].get_legend_handles_labels()
    more, more_names = ax.get_legend_handles_labels()
    ax.legend(handles + more, names + more_names, loc="upper left",
              bbox_to_anchor=(1.01, 1.0), frameon=False, fontsize=7,
              title="token (π)")  # fmt: skip
    fig.suptitle(_title(traj, "token embeddings on their principal directions", title))
    return fig


_attention = eqx.filter_jit(attention_summary)


def _attention_at(traj: Trajectory, i: int) -> np.ndarray:
    """The attention matrix at save `i`, from the saved parameters."""
    return np.asarray(_attention(traj.params[i], traj.chain))


def _boundaries(traj: Trajectory) -> list[tuple[float, str]]:
    """Each stage's start and (if complete) end, with the stage table's time
    and the stage's cycle, in time order; plateaus left out."""
    out = []
    for st in traj.stages:
        if st.name == "plateau":
            continue
        for key, verb in (("t_start", "start"), ("t_end", "end")):
            t = float(getattr(st, key))
            if t > 0 and np.isfinite(t) and (key == "t_start" or st.complete):
                out.append((t, f"{_stage_label(st)} {verb} (cycle {st.cycle})"))
    return sorted(out)


def _attention_view(A: np.ndarray, traj: Trajectory):
    """`(matrix, row labels, column labels)`: all of `A` up to `TOP_ATTENTION`
    tokens; else the most frequent queries and keys and one last column with
    the attention on all the other keys together."""
    labels = _labels(traj)
    d = A.shape[0]
    if d <= TOP_ATTENTION:
        return A, labels, labels
    top = top_tokens(traj.chain, TOP_ATTENTION)
    rest = np.setdiff1d(np.arange(d), top)
    view = np.concatenate(
        [A[np.ix_(top, top)], A[np.ix_(top, rest)].sum(1)[:, None]], 1
    )
    names = [labels[k] for k in top]
    return view, names, [*names, f"other {rest.size}"]


def attention_figure(
    traj: Trajectory, *, max_panels: int = 8, title: str | None = None
):
    r"""Heatmaps of the attention matrix $A$ at the stage boundaries.

    One panel per stage boundary (the earliest `max_panels - 1`), plus the
    final state; each panel is titled with the stage, its cycle and the stage
    table's time, and shows $A$ at the save nearest that time (the saved
    parameters; its time is given too). Row: query token; column: key token,
    named. Up to `TOP_ATTENTION` tokens every entry is shown on a linear scale;
    beyond, the most frequent queries and keys, a last column for the other
    keys together, and a logarithmic colour scale (entries of order $1/d$).

    **Returns:** a matplotlib `Figure`.
    """
    plt = _pyplot()
    from matplotlib.colors import LogNorm, Normalize

    ts = np.asarray(traj.ts)
    picks, used = [], set()
    for t, name in _boundaries(traj):
        j = int(np.argmin(np.abs(np.log(np.maximum(ts, 1e-300)) - np.log(t))))
        if j in used or j == len(ts) - 1:
            continue
        used.add(j)
        picks.append((f"{name}\nt = {t:.4g} (A at save t = {ts[j]:.4g})", j))
    picks = picks[: max_panels - 1]
    picks.append((f"final\nt = {ts[-1]:.4g}", len(ts) - 1))
    n = len(picks)
    cols = min(4, n)
    rows = int(np.ceil(n / cols))
    d = traj.chain.d
    small = d <= TOP_ATTENTION
    size = 3.6 if small else 4.6
    fig, axes = plt.subplots(rows, cols, figsize=(size * cols + 1.2, size * rows + 0.8),
                             squeeze=False, layout="constrained")  # fmt: skip
    norm = Normalize(0, 1) if small else LogNorm(1e-4, 1)
    image = None
    for i, (ax, (name, j)) in enumerate(zip(axes.flat, picks, strict=False)):
        view, rows_l, cols_l = _attention_view(_attention_at(traj, j), traj)
        image = ax.imshow(np.clip(view, 1e-4, 1), norm=norm, cmap="magma",
                          aspect="auto")  # fmt: skip
        ax.set_title(name, fontsize=8)
        fs = 7 if small else 5
        ax.set_xticks(range(len(cols_l)), cols_l, fontsize=fs, rotation=90)
        ax.set_yticks(range(len(rows_l)), rows_l, fontsize=fs)
        if i // cols == rows - 1 or i + cols >= n:
            ax.set_xlabel("key token")
        if i % cols == 0:
            ax.set_ylabel("query token")
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    fig.colorbar(image, ax=axes, shrink=0.8, label="attention $A_{ik}$")  # pyright: ignore[reportArgumentType]
    what = "attention at the stage boundaries"
    if not small:
        what += f" (the {TOP_ATTENTION} most frequent tokens)"
    fig.suptitle(_title(traj, what, title))
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
    traj: Trajectory,
    out_dir: str | os.PathLike,
    prefix: str = "",
    *,
    title: str | None = None,
    pdf: bool = False,
) -> list[Path]:
    """Writes the summary, PCA and attention figures into `out_dir` as PNG,
    and with `pdf` also as PDF (a PDF of the three costs about a second more
    than the PNGs: on request), each titled with `title` (the chain or corpus;
    default: the chain's size and first tokens); returns the paths."""
    out = Path(out_dir)
    formats = ("png", "pdf") if pdf else ("png",)
    paths = save_figure(
        summary_figure(traj, title=title), out / f"{prefix}summary", formats
    )
    paths += save_figure(
        pca_figure(traj, title=title), out / f"{prefix}embeddings_pca", formats
    )
    if any(e.name in _BOUNDARY_EVENTS for e in traj.events):
        paths += save_figure(
            attention_figure(traj, title=title), out / f"{prefix}attention", formats
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
        ylabels = [f"{v:.4g}" for v in uy]
        if y == "seed" and uy.size > 1:  # a last row: the mean over the seeds
            n_ok = np.isfinite(grid).sum(0)
            mean = np.where(n_ok > 0, np.nansum(grid, 0) / np.maximum(n_ok, 1), np.nan)
            grid, uy = np.vstack([grid, mean]), np.append(uy, uy[-1] + 1)
            ylabels.append("mean")
        fig, ax = plt.subplots(figsize=(6.4, 4.4))

        def edges(u):
            if u.size == 1:
                return np.array([u[0] - 0.5, u[0] + 0.5])
            mid = 0.5 * (u[1:] + u[:-1])
            return np.concatenate([[2 * u[0] - mid[0]], mid, [2 * u[-1] - mid[-1]]])

        from matplotlib.colors import LogNorm, Normalize

        finite = grid[np.isfinite(grid)]
        norm = LogNorm() if log_value and finite.size and (finite > 0).all() else None
        if norm is None and finite.size:
            # a colour range of at least 1 % of the values: differences below
            # that (solver noise) are not stretched over the whole scale
            lo, hi = float(finite.min()), float(finite.max())
            half = max(hi - lo, 0.01 * abs(float(np.median(finite)))) / 2
            norm = Normalize(0.5 * (lo + hi) - half, 0.5 * (lo + hi) + half)
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
            ax.set_xticks(ux, [f"{v:.4g}" for v in ux])
        if uy.size <= 17:
            ax.set_yticks(uy, ylabels)
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
            parts = [f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                     for k, v in m.labels.items()]  # fmt: skip
            if (
                m.init_scale is not None
                and len(set(sw.settings.get("init_scale") or [])) > 1
            ):
                parts.append(f"eps={m.init_scale:.3g}")
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


# The figures of the problems beyond the paper (deep linear network, committee
# machine, any problem's summary) live in their own module.
from ._problem_plots import (  # noqa: E402
    committee_phase_diagram as committee_phase_diagram,
    learning_time_figure as learning_time_figure,
    mode_strength_figure as mode_strength_figure,
    order_parameter_figure as order_parameter_figure,
    plot_problem as plot_problem,
    problem_summary_figure as problem_summary_figure,
)
