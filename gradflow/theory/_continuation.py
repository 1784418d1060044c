"""Natural-parameter continuation of a critical point along a family of
problems (e.g. chains of the paper's model with a growing asymmetry),
tracking its unstable eigenspace by overlap."""

from collections.abc import Sequence
from typing import Any

import numpy as np
from jaxtyping import PyTree

from .._core.threads import with_limited_blas_threads
from ._critical import refine_critical_point
from ._linearize import flatten_params, linearize


# ---------------------------------------------------------------------------
# Continuation in a problem parameter, with mode tracking
# ---------------------------------------------------------------------------


def subspace_overlap(a: np.ndarray, b: np.ndarray) -> float:
    r"""How much two subspaces coincide: $\frac1k\|Q_a^\top Q_b\|_F^2$ for
    orthonormal bases of the row spans of `a` (shape `(k, n)`) and `b`
    (shape `(l, n)`), $k = \min$ of the two dimensions.

    1 when the smaller span lies inside the larger, 0 when they are
    orthogonal; the mean squared cosine of the principal angles. Invariant
    under any change of basis inside either span, which is what tracking a
    degenerate (multi-fold) eigenvalue needs.
    """
    a = np.atleast_2d(np.asarray(a, dtype=np.float64))
    b = np.atleast_2d(np.asarray(b, dtype=np.float64))
    if a.shape[1] != b.shape[1]:
        raise ValueError(
            f"a and b must hold vectors of one length, got {a.shape} and {b.shape}"
        )
    qa = np.linalg.qr(a.T)[0]
    qb = np.linalg.qr(b.T)[0]
    k = min(qa.shape[1], qb.shape[1])
    return float(np.sum((qa.T @ qb) ** 2) / k)


def eigen_clusters(eigenvalues: np.ndarray, rel: float = 1e-2) -> list[np.ndarray]:
    """Groups descending `eigenvalues` into clusters of (numerically) equal
    values: consecutive values within `rel` (relative to the cluster's first
    value) of that value, or within $10^{-10}\\max|\\lambda|$ (so exact
    zeros form one cluster). Relative to each cluster's own size, so a small
    multi-fold eigenvalue is not lumped with the zeros. The default 1 % makes
    a near-degenerate multiplet (a symmetry broken only slightly, e.g. by the
    random start's small components) one cluster: its single eigenvectors
    rotate freely under small perturbations, only their span can be tracked.
    Returns index arrays, in order."""
    ev = np.asarray(eigenvalues, dtype=np.float64)
    if ev.size == 0:
        return []
    floor = 1e-10 * float(np.max(np.abs(ev)))
    out, start = [], 0
    for i in range(1, ev.size + 1):
        if i == ev.size or abs(ev[i] - ev[start]) > rel * abs(ev[start]) + floor:
            out.append(np.arange(start, i))
            start = i
    return out


def track_cluster(
    previous: np.ndarray,
    eigenvalues: np.ndarray,
    vectors: np.ndarray,
    *,
    rel: float = 1e-2,
    num_clusters: int = 4,
) -> tuple[np.ndarray, float]:
    r"""Among the `num_clusters` leading eigenvalue clusters (see
    [`eigen_clusters`][gradflow.theory.eigen_clusters]), the one whose
    eigenspace overlaps most with `previous` (rows: a basis of the tracked
    eigenspace at the neighbouring parameter value).

    This follows a mode through a crossing: at a true crossing the order of
    the eigenvalues changes but the eigenspaces move continuously.

    **Returns:** `(indices, overlap)`: the chosen cluster's indices into
    `eigenvalues` (rows of `vectors`) and its
    [`subspace_overlap`][gradflow.theory.subspace_overlap] with `previous`.
    """
    clusters = eigen_clusters(eigenvalues, rel)[:num_clusters]
    if not clusters:
        raise ValueError("no eigenvalues to track")
    scores = [subspace_overlap(previous, vectors[c]) for c in clusters]
    best = int(np.argmax(scores))
    return clusters[best], float(scores[best])


@with_limited_blas_threads
def continue_critical_point(
    problems: Sequence[Any], params: PyTree, *, rel: float = 1e-2
) -> list[dict[str, Any]]:
    r"""Natural-parameter continuation of a critical point along a family of
    problems, tracking its top unstable mode by eigenspace overlap.

    `problems` are problems of one structure (or anything
    [`gradflow.as_problem`][] takes: chains of the paper's model, whose width
    and variant are read from `params`). The point is refined for
    `problems[0]` from `params`, then for each next problem from the previous
    refined point
    ([`refine_critical_point`][gradflow.theory.refine_critical_point]). The
    tracked mode starts as the top eigenvalue cluster of $-\nabla^2 L$ at the
    first problem; at each next problem it is the leading cluster whose eigenspace
    overlaps most with the previous tracked eigenspace
    ([`track_cluster`][gradflow.theory.track_cluster]).

    **Returns:** one record per problem: `params` (the refined point),
    `converged`, `loss`, `grad_norm`, `step` (distance from the previous
    point), `top_rate` (the largest eigenvalue), `tracked_rate`,
    `multiplicity` (size of the tracked cluster), `overlap` (with the previous
    tracked eigenspace; 1 for the first), `tracked_is_top`, `second_rate`
    (the second-largest distinct eigenvalue), and `soft_rate`,
    `soft_weight`: the eigenvalue of the non-zero mode carrying most of the
    step from the previous point, and its share of the step (NaN for the
    first). A `soft_rate` near zero with a large `step` marks a near-degenerate
    point: the critical point moves fast because a stable direction softens.
    """
    problems = list(problems)
    if not problems:
        raise ValueError("problems must hold at least one problem, got none")
    point = params
    prev_basis = None
    prev_flat = None
    out = []
    for problem in problems:
        point, ok = refine_critical_point(problem, point)
        lin = linearize(problem, point, method="dense")
        vectors = np.stack(
            [
                np.asarray(flatten_params(lin.modes[i]))
                for i in range(len(lin.eigenvalues))
            ]
        )
        clusters = eigen_clusters(lin.eigenvalues, rel)
        if prev_basis is None:
            idx, overlap = clusters[0], 1.0
        else:
            idx, overlap = track_cluster(prev_basis, lin.eigenvalues, vectors, rel=rel)
        flat = np.asarray(flatten_params(point))
        soft_rate, soft_weight, step = float("nan"), float("nan"), 0.0
        if prev_flat is not None:
            dx = flat - prev_flat
            step = float(np.linalg.norm(dx))
            if step > 0:
                w = (vectors @ dx) ** 2 / step**2
                nonzero = np.abs(lin.eigenvalues) > lin.tol
                if nonzero.any():
                    j = int(np.argmax(np.where(nonzero, w, -1.0)))
                    soft_rate, soft_weight = float(lin.eigenvalues[j]), float(w[j])
        out.append(
            {
                "params": point,
                "converged": ok,
                "loss": lin.loss,
                "grad_norm": lin.grad_norm,
                "step": step,
                "top_rate": lin.unstable_rate,
                "tracked_rate": float(lin.eigenvalues[idx[0]]),
                "multiplicity": int(idx.size),
                "overlap": overlap,
                "tracked_is_top": bool(idx[0] == 0),
                "second_rate": float(lin.eigenvalues[clusters[1][0]])
                if len(clusters) > 1
                else float("nan"),
                "soft_rate": soft_rate,
                "soft_weight": soft_weight,
            }
        )
        prev_basis, prev_flat = vectors[idx], flat
    return out


__all__ = [
    "continue_critical_point",
    "eigen_clusters",
    "subspace_overlap",
    "track_cluster",
]
