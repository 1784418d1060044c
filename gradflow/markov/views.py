r"""The paper's model in the animation and the explorer: its
[`views`][gradflow.plot.views] at any time, from the parameters interpolated
between saves: the attention map (the top `TOP_ATTENTION` tokens and the
rest beyond), the token embeddings on their principal directions, the
attention mass per key token and the singular values of $W_0$."""

import equinox as eqx
import jax
import numpy as np

from ..plot._timeline import interpolate
from ..plot._views import GREY, PALETTE, Bars, Heatmap, Scatter, views
from .model import attention_summary
from .plot import TOP_ATTENTION, TOP_TOKENS, token_label, top_tokens
from .problem import MarkovAttention


# Frames of the attention computed together: at most this many matrix
# entries at once.
ATTENTION_BATCH_ENTRIES = 2**23
_attention_many = eqx.filter_jit(jax.vmap(attention_summary, in_axes=(0, None)))


def attention_frames(params, chain) -> np.ndarray:
    """The attention matrix (`gf.markov.attention_summary`) of parameters
    with a leading frame axis, in batches of frames."""
    frames = jax.tree.leaves(params)[0].shape[0]
    step = max(1, ATTENTION_BATCH_ENTRIES // chain.d**2)
    parts = []
    for i in range(0, frames, step):
        batch = jax.tree.map(lambda x, i=i: x[i : i + step], params)
        parts.append(np.asarray(_attention_many(batch, chain)))
    return np.concatenate(parts)


def pca_basis(W0: np.ndarray) -> np.ndarray:
    """The top two principal directions, shape `(2, m)`, of every token's
    embedding at every save (uncentred: the origin stays the origin)."""
    T, m, d = W0.shape
    points = np.transpose(W0, (0, 2, 1)).reshape(T * d, m)
    _, _, vt = np.linalg.svd(points, full_matrices=False)
    return vt[:2] if vt.shape[0] >= 2 else np.vstack([vt, np.zeros_like(vt)])


def _token_colours(chain, top) -> list[str]:
    colours = [GREY] * chain.d
    for j, k in enumerate(top):
        colours[int(k)] = PALETTE[j % len(PALETTE)]
    return colours


@views.register
def _(problem: MarkovAttention, result, times) -> list:
    """The attention map, the embeddings on their principal directions, the
    attention mass per key token and the singular values of $W_0$."""
    chain = problem.chain
    labels = [token_label(chain, k) for k in range(chain.d)]
    params = interpolate(result.ts, jax.tree.map(np.asarray, result.params), times)
    A = attention_frames(params, chain)
    colours = _token_colours(chain, top_tokens(chain, TOP_TOKENS))
    shown = top_tokens(chain, TOP_ATTENTION) if chain.d > TOP_ATTENTION else None
    return [
        _attention_panel(A, labels, shown),
        _pca_panel(np.asarray(result.params.W0), np.asarray(params.W0), labels,
                   colours, list(top_tokens(chain, TOP_TOKENS))),
        _mass_panel(A, np.asarray(chain.pi), labels, colours, shown),
        _sv_panel(np.asarray(params.W0)),
    ]  # fmt: skip


def _attention_panel(A, labels, shown) -> Heatmap:
    """All of $A$ up to `TOP_ATTENTION` tokens (linear scale); beyond, the
    most frequent queries and keys, a column for the other keys together,
    and a log scale."""
    title = "attention A (row: query token, column: key token)"
    if shown is None:
        return Heatmap(title, A, labels, labels, "key token", "query token",
                       0.0, float(A.max()))  # fmt: skip
    rest = np.setdiff1d(np.arange(A.shape[1]), shown)
    top = A[:, shown][:, :, shown]
    other = A[:, shown][:, :, rest].sum(-1, keepdims=True)
    view = np.concatenate([top, other], -1)
    names = [labels[k] for k in shown]
    positive = view[view > 0]
    lo = max(float(positive.min()) if positive.size else 1e-6, 1e-6)
    return Heatmap(title, view, names, [*names, f"other {rest.size}"], "key token",
                   "query token", lo, float(view.max()), log=True)  # fmt: skip


def _pca_panel(W0_saved, W0, labels, colours, named) -> Scatter:
    r"""Each token's embedding (a column of $W_0$) on the top two principal
    directions of all saves, scaled at each frame to the largest (the scale
    in the caption): the shape of the cloud, as it condenses to a line and
    opens new directions."""
    coords = np.einsum("fmk,pm->fkp", W0, pca_basis(W0_saved))  # (F, d, 2)
    scale = np.maximum(np.abs(coords).max(axis=(1, 2)), 1e-300)
    norms = np.linalg.norm(W0, axis=(1, 2))
    captions = [f"|W0| = {n:.3g}; shown scaled by 1/{s:.3g}"
                for n, s in zip(norms, scale, strict=True)]  # fmt: skip
    return Scatter(
        "token embeddings on their principal directions", coords / scale[:, None, None],
        labels, colours, [int(k) for k in named], captions,
        "principal direction 1", "principal direction 2",
    )  # fmt: skip


def _mass_panel(A, pi, labels, colours, shown) -> Bars:
    r"""The attention mass $\sum_i \pi_i A_{ik}$ on each key token."""
    mass = np.einsum("i,fik->fk", pi, A)
    names, cols = labels, colours
    if shown is not None:
        rest = np.setdiff1d(np.arange(A.shape[1]), shown)
        mass = np.concatenate(
            [mass[:, shown], mass[:, rest].sum(-1, keepdims=True)], -1
        )
        names = [*(labels[k] for k in shown), f"other {rest.size}"]
        cols = [*(colours[k] for k in shown), GREY]
    return Bars("attention mass on each key token", mass, list(names), list(cols),
                (0.0, 1.0), "mass")  # fmt: skip


def _sv_panel(W0) -> Bars:
    """The singular values of $W_0$ (log scale): one, then more, open."""
    s = np.linalg.svd(W0, compute_uv=False)
    s = s[:, : min(s.shape[1], 16)]
    lo = max(float(s[s > 0].min()) if (s > 0).any() else 1e-6, 1e-12)
    names = [f"σ{j + 1}" for j in range(s.shape[1])]
    return Bars("singular values of W0", s, names, [PALETTE[0]] * s.shape[1],
                (lo / 2, 2 * float(s.max())), log=True)  # fmt: skip


__all__ = ["attention_frames", "pca_basis"]
