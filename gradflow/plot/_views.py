"""What a run shows at one time, beside its loss curve: the views of
[`animate`][gradflow.plot.animate] and of the explorer
([`report`][gradflow.plot.report]), computed once for every frame and drawn by
both (matplotlib for the animation, the page's script for the explorer).

A view is a [`Heatmap`][gradflow.plot.Heatmap], a
[`Scatter`][gradflow.plot.Scatter] or [`Bars`][gradflow.plot.Bars], each
holding its values at every frame time. [`views`][gradflow.plot.views] is the
extension point, keyed by the problem's class: the paper's model shows the
attention map and the embeddings on their principal directions
(`gradflow/markov/plot.py`), a deep linear network its mode strengths, a
committee machine $R$ and $Q$, in-context regression its eigen-components
(each problem's `plot.py`); any other problem its observables (a heat map per
matrix, a bar chart per vector, the first few), else its matrix parameters.
"""

import dataclasses
import functools

import numpy as np

from .._core.records import leaf_label
from ._timeline import interpolate


PALETTE = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
    "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf",
)  # fmt: skip
"""The colours of a view's named points and bars (matplotlib's tab10)."""
GREY = "#b0b0b0"
"""The colour of a view's other points and bars."""
# Views of the generic fallback, at most.
MAX_GENERIC = 4
# Matrices and vectors larger than this are not shown by the fallback.
MAX_GENERIC_SIZE = 64


@dataclasses.dataclass(frozen=True)
class Heatmap:
    """A matrix at every frame: `values` of shape `(frames, rows, cols)`,
    drawn between `vmin` and `vmax` (on a log scale with `log`), with
    `cmap` a matplotlib colour map's name (`"viridis"`, `"RdBu_r"`)."""

    title: str
    values: np.ndarray
    rows: list[str]
    cols: list[str]
    xlabel: str
    ylabel: str
    vmin: float
    vmax: float
    log: bool = False
    cmap: str = "viridis"


@dataclasses.dataclass(frozen=True)
class Scatter:
    """Points in a plane at every frame: `points` of shape `(frames, n, 2)`,
    one colour per point; the points in `named` carry their label; each
    frame's `captions` entry is written under the panel."""

    title: str
    points: np.ndarray
    labels: list[str]
    colors: list[str]
    named: list[int]
    captions: list[str]
    xlabel: str = ""
    ylabel: str = ""
    limit: float = 1.1


@dataclasses.dataclass(frozen=True)
class Bars:
    """A vector at every frame: `values` of shape `(frames, n)`, a bar each,
    drawn on `[ylim]` (log scale with `log`); `reference` draws a dashed
    level (e.g. the value a mode is learnt at)."""

    title: str
    values: np.ndarray
    labels: list[str]
    colors: list[str]
    ylim: tuple[float, float]
    ylabel: str = ""
    log: bool = False
    reference: float | None = None


View = Heatmap | Scatter | Bars


@functools.singledispatch
def views(problem, result, times: np.ndarray) -> list[View]:
    """What `result` (a trajectory or SGD run of `problem`) looks like at
    each of `times`: a list of views ([`Heatmap`][gradflow.plot.Heatmap],
    [`Scatter`][gradflow.plot.Scatter], [`Bars`][gradflow.plot.Bars]), most
    telling first, which [`animate`][gradflow.plot.animate] and the explorer
    ([`report`][gradflow.plot.report]) draw beside the loss curve.

    An extension point keyed by the problem's class
    (`views.register(cls)`): the paper's model shows the attention map, the
    embeddings on their principal directions, the attention mass per key
    token and the singular values of $W_0$; a deep linear network its mode
    strengths and the product in the modes' bases; a committee machine its
    order parameters $R$ and $Q$; in-context regression its
    eigen-components. By default: the observables (a heat map per matrix, a
    bar chart per vector, the first four), else the matrix parameters. Give
    the state between saves with [`interpolate`][gradflow.plot.interpolate].
    """
    del problem
    out: list[View] = []
    arrays = {_extra_title(k): v for k, v in result.extras.items()}
    if not any(np.ndim(v) in (2, 3) for v in arrays.values()):
        arrays = {leaf_label(p): v for p, v in _leaves(result.params)}
    for name, value in arrays.items():
        value = np.asarray(value)
        if value.ndim not in (2, 3) or value[0].size > MAX_GENERIC_SIZE**2:
            continue
        out.append(_generic_view(name, interpolate(result.ts, value, times)))
        if len(out) == MAX_GENERIC:
            break
    return out


def _extra_title(key: str) -> str:
    """A panel's title for an observable: the generic singular values of a
    matrix leaf (`sv[0]`) by the leaf's name, others by their key."""
    if key.startswith("sv") and key[2:3] in ("[", "."):
        return f"singular values of {leaf_label(key[2:])}"
    return key


def _leaves(params):
    import jax

    for path, leaf in jax.tree_util.tree_flatten_with_path(params)[0]:
        yield jax.tree_util.keystr(path), leaf


def _generic_view(name: str, values: np.ndarray) -> View:
    finite = values[np.isfinite(values)]
    lo, hi = (float(finite.min()), float(finite.max())) if finite.size else (0, 1)
    if values.ndim == 2:
        n = values.shape[1]
        pad = 0.05 * (hi - lo or 1.0)
        # within the data: values never negative (singular values) from 0
        return Bars(name, values, [str(k) for k in range(n)], [PALETTE[0]] * n,
                    (lo - pad if lo < 0 else 0.0, max(0.0, hi + pad)))  # fmt: skip
    r, c = values.shape[1:]
    bound = max(abs(lo), abs(hi)) or 1.0
    diverging = lo < 0 < hi
    return Heatmap(
        name, values, [str(k) for k in range(r)], [str(k) for k in range(c)],
        "column", "row", -bound if diverging else lo, bound if diverging else hi,
        cmap="RdBu_r" if diverging else "viridis",
    )  # fmt: skip


def symmetric_range(values: np.ndarray) -> tuple[float, float]:
    """`(-b, b)` with `b` the largest magnitude in `values` (a diverging
    colour scale centred on 0)."""
    b = float(np.nanmax(np.abs(values))) if values.size else 1.0
    return -(b or 1.0), b or 1.0


__all__ = ["Bars", "GREY", "Heatmap", "PALETTE", "Scatter", "View", "views"]
