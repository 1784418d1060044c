r"""Figures of a trajectory of the paper's model and its stages (matplotlib;
PNG and PDF), registered as the model's [`figures`][gradflow.plot.figures].

- [`summary_figure`][gradflow.plot.summary_figure]: six panels on one log-time
  axis with the stages shaded: the loss against its levels $\log d$, $H(\pi)$
  and the conditional entropy; matrix norms; attention entropy; attention mass
  per key token; singular values of $W_0$; alignment cosines.
- [`pca_figure`][gradflow.plot.pca_figure]: the token embeddings (columns of
  $W_0$) projected on their top two principal directions, over time.
- [`attention_figure`][gradflow.plot.attention_figure]: the attention matrix
  $A$ at each stage boundary.

[`plot_all`][gradflow.plot.plot_all] writes the three as PNG (and PDF on
request). They read a [`gradflow.Trajectory`][] of
[`gradflow.integrate`][] with stages (its `extras` hold the diagnostics), and
scale
with the vocabulary: tokens are named by their labels (the words, characters or
BPE pieces of a text), legends list the `TOP_TOKENS` most frequent tokens (by
$\pi$) and group the rest, and every legend sits beside its panel, never on
its curves.
"""

import equinox as eqx
import numpy as np

from .._core.threads import limited_blas_threads
from .._result.trajectory import Trajectory
from ..plot._base import (
    STAGE_COLORS,
    legend_beside,
    positive_time,
    pyplot,
    shade_stages,
    stage_label,
)
from ..plot._problem import figures
from .chain import entropy_bounds
from .model import attention_summary
from .problem import MarkovAttention, chain_of


TOP_TOKENS = 8
r"""How many tokens a legend names (and a figure draws in colour): the most
frequent by $\pi$; the others are drawn thin and grey under one legend entry."""
TOP_ATTENTION = 16
r"""Attention heat maps show every token up to this $d$, else the
`TOP_ATTENTION` most frequent queries and keys and one column for the other
keys together."""
_BOUNDARY_EVENTS = (
    "saddle_entry",
    "focus_start",
    "focus_end",
    "new_direction_start",
    "new_direction_end",
)
_LEVEL_STYLES = (("log_d", r"$\log d$", ":"), ("unigram", r"$H(\pi)$", "--"))


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
    return [token_label(chain_of(traj), k) for k in range(chain_of(traj).d)]


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
    width = getattr(traj.problem, "width", None)
    run = f"width {width}, init scale {s.init_scale}, seed {s.seed}"
    return f"{what}\n{title or describe_chain(chain_of(traj))}; {run}"


def _mark_cycles(ax, stages, t_lo: float, t_hi: float) -> None:
    """Writes `name c` (c: the cycle) at the start of each stage that is not a
    plateau, along the top of `ax` (a log-time axis from `t_lo` to `t_hi`):
    each label beside its stage's start, moved along just enough that no two
    labels overlap and none leaves the frame."""
    marks = [s for s in stages if s.name != "plateau" and np.isfinite(s.t_start)]
    if not marks or not t_hi > t_lo:
        return
    span = np.log(t_hi) - np.log(t_lo)
    xs = [(np.log(max(s.t_start, t_lo)) - np.log(t_lo)) / span for s in marks]
    gap = 0.012  # a label's height (fontsize 6, rotated) as a fraction of the axis
    placed = _label_positions(xs, gap)
    for s, x in zip(marks, placed, strict=True):
        ax.text(
            x, 0.98, f" {stage_label(s)} {s.cycle}",
            transform=ax.transAxes, rotation=90, va="top", ha="left",
            fontsize=6, color=STAGE_COLORS.get(s.name, "0.3"),
        )  # fmt: skip


def _label_positions(xs, gap: float, right: float = 1.0) -> list[float]:
    """Positions (fractions of an axis) near `xs` for labels `gap` wide that
    start at their position: in the same order, at least `gap` apart, the
    last ending inside `right`."""
    order = np.argsort(xs, kind="stable")
    pos = np.asarray(xs, float)[order]
    for i in range(len(pos)):  # left to right: push apart
        if i and pos[i] < pos[i - 1] + gap:
            pos[i] = pos[i - 1] + gap
    for i in range(len(pos) - 1, -1, -1):  # right to left: keep inside
        limit = right - gap if i == len(pos) - 1 else pos[i + 1] - gap
        pos[i] = min(pos[i], limit)
    out = np.empty_like(pos)
    out[order] = pos
    return [float(x) for x in out]


def _token_lines(ax, x, values, traj: Trajectory, *, ls="-", lw=1.2, label=True):
    """One line per token (`values[:, k]` against `x`, or `x[:, k]` when `x`
    has a token axis too): the `TOP_TOKENS` most frequent in colour (named),
    the others thin and grey under one legend entry."""
    labels = _labels(traj)
    pi = np.asarray(chain_of(traj).pi)
    top = top_tokens(chain_of(traj))
    rest = np.setdiff1d(np.arange(chain_of(traj).d), top)
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
    plt = pyplot()
    idx = positive_time(traj)
    t = np.asarray(traj.ts)[idx]
    ex = {
        k: np.asarray(v)[idx]
        for k, v in traj.extras.items()
        if not k.startswith("event_")
    }
    levels = entropy_bounds(chain_of(traj))
    fig, axes = plt.subplots(6, 1, figsize=(11, 15), sharex=True, layout="constrained")
    for ax in axes:
        shade_stages(ax, traj.stages, labels=ax is axes[0])
    ax = axes[0]
    ax.plot(t, np.asarray(traj.loss)[idx], color="black", lw=1.5, label="loss $L$")
    for key, name, style in (*_LEVEL_STYLES, ("conditional", r"$H(P|\pi)$", "-.")):
        ax.axhline(levels[key], color="tab:red", ls=style, lw=1,
                   label=f"{name} = {levels[key]:.4f}")  # fmt: skip
    ax.set_ylabel("population loss")
    _mark_cycles(ax, traj.stages, t[0], t[-1])
    legend_beside(ax)
    ax = axes[1]
    for name, color in (("W0", "C0"), ("W1", "C1"), ("WQ", "C2"), ("WK", "C3")):
        ax.plot(t, ex[f"norm_{name}"], color=color,
                label=f"$|{name[0]}_{{{name[1:]}}}|_F$")  # fmt: skip
    ax.set_yscale("log")
    ax.set_ylabel("Frobenius norm")
    legend_beside(ax)
    ax = axes[2]
    ax.plot(t, ex["att_entropy"], color="black", label=r"$\sum_i \pi_i H(A_{i\cdot})$")
    ax.axhline(levels["unigram"], color="tab:red", ls="--", lw=1, label=r"$H(\pi)$")
    ax.set_ylabel("attention entropy")
    legend_beside(ax)
    ax = axes[3]
    _token_lines(ax, t, ex["att_mass"], traj)
    ax.set_ylabel("attention mass\n" r"$\sum_i \pi_i A_{ik}$ of key $k$")
    legend_beside(ax, title="key token")
    ax = axes[4]
    sv = ex["sv_W0"]
    for j in range(min(sv.shape[1], 6)):
        ax.plot(t, sv[:, j], color=f"C{j}", label=rf"$\sigma_{j + 1}(W_0)$")
    ax.set_yscale("log")
    ax.set_ylabel("singular values of $W_0$")
    legend_beside(ax)
    ax = axes[5]
    ax.plot(t, ex["cos_W0_pi"], label=r"rows of $W_0$ vs $\pi$")
    ax.plot(t, ex["cos_W1_u"], label=r"columns of $W_1$ vs $\pi - 1/d$")
    ax.plot(t, ex["cos_v_pi"][:, 0], label=r"$|v_1 \cdot \hat\pi|$")
    ax.plot(t, ex["cos_v_pi"][:, 1], label=r"$|v_2 \cdot \hat\pi|$ (new direction)")
    ax.set_ylim(-0.02, 1.05)
    ax.set_ylabel("alignment cosine")
    ax.set_xlabel("gradient-flow time $t$ (log scale)")
    ax.set_xscale("log")
    legend_beside(ax)
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
    plt = pyplot()
    W0 = np.asarray(traj.params.W0)  # (T, m, d)
    T, m, d = W0.shape
    points = np.transpose(W0, (0, 2, 1)).reshape(T * d, m)
    with limited_blas_threads():
        _, _, vt = np.linalg.svd(points, full_matrices=False)
    basis = vt[:2] if vt.shape[0] >= 2 else np.vstack([vt, np.zeros_like(vt)])
    coords = np.einsum("tmk,pm->tkp", W0, basis)  # (T, d, 2)
    fig, axes = plt.subplots(1, 2, figsize=(14, 5.8), layout="constrained")
    ax = axes[0]
    _token_lines(ax, coords[:, :, 0], coords[:, :, 1], traj)
    top = top_tokens(chain_of(traj))
    for j, k in enumerate(top):
        ax.scatter(coords[-1, k, 0], coords[-1, k, 1], color=f"C{j}", s=30, zorder=3)
    ax.scatter([0], [0], marker="+", color="black", s=60, label="origin")
    ax.set_xlabel("principal direction 1")
    ax.set_ylabel("principal direction 2")
    ax.set_title("embedding paths (dot: final)", fontsize=10)
    ax = axes[1]
    idx = positive_time(traj)
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
    return np.asarray(_attention(traj.params[i], chain_of(traj)))


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
                out.append((t, f"{stage_label(st)} {verb} (cycle {st.cycle})"))
    return sorted(out)


def _attention_view(A: np.ndarray, traj: Trajectory):
    """`(matrix, row labels, column labels)`: all of `A` up to `TOP_ATTENTION`
    tokens; else the most frequent queries and keys and one last column with
    the attention on all the other keys together."""
    labels = _labels(traj)
    d = A.shape[0]
    if d <= TOP_ATTENTION:
        return A, labels, labels
    top = top_tokens(chain_of(traj), TOP_ATTENTION)
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
    plt = pyplot()
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
    d = chain_of(traj).d
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


@figures.register
def _(problem: MarkovAttention, traj):
    """The paper's model's figures: the summary, the embedding PCA, and the
    attention at the stage boundaries (when there are any)."""
    out = {"summary": summary_figure, "embeddings_pca": pca_figure}
    if any(e.name in _BOUNDARY_EVENTS for e in traj.events):
        out["attention"] = attention_figure
    return out


__all__ = [
    "TOP_ATTENTION",
    "TOP_TOKENS",
    "attention_figure",
    "describe_chain",
    "pca_figure",
    "summary_figure",
    "token_label",
    "top_tokens",
]
