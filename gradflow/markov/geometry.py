r"""Measurements behind `docs/paper.md` that are reusable on any point or
trajectory of the paper's model (the minimal one, `gradflow.Params`):
the score matrix and its alignment with $\pi\pi^\top$, the rank-one
manifold of the dilution stage, and the flow linearised at a critical point
solved in closed form.

**The rank-one manifold.** With a unit vector $v \in \mathbb R^m$,
$$\mathcal M = \{W_0 = v c^\top,\ W_1 = b v^\top,\ W_Q = x v^\top,\
W_K = y v^\top\},\qquad c, b \in \mathbb R^d,\ x, y \in \mathbb R^m .$$
On $\mathcal M$ the scores are $S = (x\cdot y)\,cc^\top$ and every gradient
keeps the form (for example $\partial L/\partial W_Q = W_K E G^\top E^\top =
(c^\top G c)\,y v^\top$ with $G = \partial L/\partial S$), so $\mathcal M$ is
invariant under the flow. For a fixed $v$ it is a linear subspace; rotating
the embedding space (the loss's symmetry $W_0 \to GW_0$,
$(W_1, W_Q, W_K) \to (W_1, W_Q, W_K)G^\top$, $G$ orthogonal) so that
$v = e_1$ makes it the coordinate subspace "row 0 of $W_0$, column 0 of
$W_1, W_Q, W_K$" (`manifold_gauge`).
"""

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from ..theory._linearize import Linearization, flatten_params, gauge_rank
from .model import AnyParams, Params
from .problem import MarkovAttention
from .variants import Model, VariantParams


def param_shapes(m: int, d: int, model: Model | None = None) -> dict[str, tuple]:
    """`{name: shape}` of one point of `model` (default: the minimal one), in
    the order of [`flatten_params`][gradflow.theory.flatten_params]."""
    model = Model() if model is None else model
    if model.minimal:
        return {"W0": (m, d), "W1": (d, m), "WQ": (m, m), "WK": (m, m)}
    lh = (model.layers, model.heads)
    shapes = {"W0": (m, d), "W1": (d, m), "WQ": (*lh, m, m), "WK": (*lh, m, m)}
    if model.value:
        shapes["WV"] = (*lh, m, m)
    if model.norm is not None:
        shapes["gain"] = (m,)
    if model.norm == "layer":
        shapes["bias"] = (m,)
    return shapes


def unflatten_params(
    x: jax.Array, m: int, d: int, model: Model | None = None
) -> AnyParams:
    """The inverse of `flatten_params` for the paper's model of width `m` on
    `d` tokens (`model`: a [`gradflow.Model`][]; default the minimal one)."""
    shapes = param_shapes(m, d, model)
    parts, start = {}, 0
    for name, shape in shapes.items():
        size = int(np.prod(shape))
        parts[name] = jnp.reshape(x[start : start + size], shape)
        start += size
    if model is None or model.minimal:
        return Params(*parts.values())
    return VariantParams(**parts, model=model)


@gauge_rank.register
def _(problem: MarkovAttention, params) -> int:
    r"""Dimension of the orbit of the loss's continuous symmetries at `params`
    (-1 for a variant: its symmetry group is not derived, see
    `docs/variants.md`).

    $L$ is invariant under $W_0 \to GW_0$, $(W_1, W_Q, W_K) \to (W_1, W_Q,
    W_K)G^{-1}$ and under $(W_Q, W_K) \to (MW_Q, M^{-\top}W_K)$; each tangent
    direction of these orbits is a zero eigenvalue of the Hessian at a
    critical point. Zero eigenvalues beyond this count are real degeneracy.
    """
    del problem
    if not isinstance(params, Params):
        return -1
    W0, W1, WQ, WK = (np.asarray(getattr(params, n)) for n in ("W0", "W1", "WQ", "WK"))
    m = W0.shape[0]
    tangents = []
    for a in range(m):
        for b in range(m):
            X = np.zeros((m, m))
            X[a, b] = 1.0
            tangents.append(
                np.concatenate(
                    [(X @ W0).ravel(), (-W1 @ X).ravel(), (-WQ @ X).ravel(),
                     (-WK @ X).ravel()]
                )
            )  # fmt: skip
            tangents.append(
                np.concatenate(
                    [np.zeros(W0.size), np.zeros(W1.size), (X @ WQ).ravel(),
                     (-X.T @ WK).ravel()]
                )
            )  # fmt: skip
    T = np.stack(tangents)
    s = np.linalg.svd(T, compute_uv=False)
    if s.size == 0 or s[0] == 0:
        return 0
    return int(np.sum(s > 1e-9 * s[0]))


def _arrays(params: Params) -> tuple[np.ndarray, ...]:
    if not isinstance(params, Params):
        raise TypeError(
            f"params must be a gradflow.Params (the minimal model), got "
            f"{type(params).__name__}"
        )
    return tuple(np.asarray(getattr(params, n)) for n in ("W0", "W1", "WQ", "WK"))


def score_matrix(params: Params) -> np.ndarray:
    r"""$S = (W_Q W_0)^\top (W_K W_0)$, shape `(..., d, d)` (leading axes of
    `params` kept: a trajectory's `params` gives one matrix per save)."""
    W0, _, WQ, WK = _arrays(params)
    return np.einsum("...mi,...nm,...nk,...kj->...ij", W0, WQ, WK, W0)


def score_alignment(
    scores: Float[Array | np.ndarray, "... d d"], pi: Float[Array | np.ndarray, " d"]
) -> np.ndarray:
    r"""The cosine (Frobenius) of $S$ with $\pi\pi^\top$, one per leading index:
    $\langle S, \pi\pi^\top\rangle / (|S|\,|\pi|^2)$; $+1$ when the scores rise
    with $\pi_i\pi_k$ (every query attends more to frequent keys)."""
    S = np.asarray(scores)
    pp = np.outer(pi, pi) / float(np.sum(np.asarray(pi) ** 2))
    norm = np.linalg.norm(S, axis=(-2, -1))
    return np.einsum("...ij,ij->...", S, pp) / np.maximum(norm, 1e-300)


def embedding_direction(params: Params) -> np.ndarray:
    """The unit vector $v$ of the rank-one manifold nearest to `params`: the
    top left singular vector of $W_0$ (shape `(..., m)`)."""
    W0 = _arrays(params)[0]
    U = np.linalg.svd(W0)[0]
    return U[..., :, 0]


def manifold_distance(params: Params) -> np.ndarray:
    r"""Distance of `params` from the rank-one manifold $\mathcal M$ (module
    docstring) with $v$ the top left singular vector of $W_0$:
    $\big(|W_0 - vv^\top W_0|^2 + \sum_{X = W_1, W_Q, W_K}|X - Xvv^\top|^2
    \big)^{1/2}$, one value per leading index. Zero exactly on $\mathcal M$."""
    W0, W1, WQ, WK = _arrays(params)
    v = embedding_direction(params)
    Pv = np.einsum("...i,...j->...ij", v, v)
    parts = (W0 - Pv @ W0, W1 - W1 @ Pv, WQ - WQ @ Pv, WK - WK @ Pv)
    return np.sqrt(sum(np.sum(p**2, axis=(-2, -1)) for p in parts))


def manifold_gauge(params: Params) -> Params:
    r"""One point rotated so that $v = e_1$: $W_0 \to GW_0$,
    $(W_1, W_Q, W_K) \to (W_1, W_Q, W_K)G^\top$ with $G = U^\top$ from the SVD
    $W_0 = U\Sigma V^\top$ (row 0 of $GW_0$ summing to $\ge 0$). The loss is
    unchanged; the rank-one manifold becomes a coordinate subspace."""
    W0, W1, WQ, WK = _arrays(params)
    if W0.ndim != 2:
        raise ValueError(f"params must be one point, got W0 of shape {W0.shape}")
    G = np.linalg.svd(W0)[0].T
    if (G @ W0)[0].sum() < 0:
        G[0] = -G[0]
    return Params(*(jnp.asarray(x) for x in (G @ W0, W1 @ G.T, WQ @ G.T, WK @ G.T)))


def manifold_mask(m: int, d: int) -> np.ndarray:
    """The coordinates of the rank-one manifold in the gauge $v = e_1$, as a
    boolean mask over `flatten_params` order: row 0 of `W0`, column 0 of `W1`,
    `WQ`, `WK`."""
    W0 = np.zeros((m, d), bool)
    W0[0] = True
    W1 = np.zeros((d, m), bool)
    W1[:, 0] = True
    WQ = np.zeros((m, m), bool)
    WQ[:, 0] = True
    return np.concatenate([x.ravel() for x in (W0, W1, WQ, WQ)])


def onto_manifold(params: Params) -> Params:
    """`params` in the gauge $v = e_1$ with every coordinate off the manifold set
    to zero: a point exactly on $\\mathcal M$ (its distance is 0.0)."""
    p = manifold_gauge(params)
    W0, W1, WQ, WK = (x.copy() for x in _arrays(p))
    W0[1:] = 0.0
    W1[:, 1:] = 0.0
    WQ[:, 1:] = 0.0
    WK[:, 1:] = 0.0
    return Params(*(jnp.asarray(x) for x in (W0, W1, WQ, WK)))


def tangent_basis(params: Params) -> np.ndarray:
    r"""An orthonormal basis (rows, flat in `flatten_params` order) of the
    tangent space of $\mathcal M$ at a point of it in the gauge $v = e_1$:
    the manifold's coordinates plus the rotations of $v$ towards $e_j$,
    $(e_jc^\top, b e_j^\top, x e_j^\top, y e_j^\top)$, $j \ge 2$."""
    W0, W1, WQ, WK = _arrays(params)
    m, d = W0.shape
    mask = manifold_mask(m, d)
    rows = [np.eye(mask.size)[i] for i in np.flatnonzero(mask)]
    c, b, x, y = W0[0], W1[:, 0], WQ[:, 0], WK[:, 0]
    for j in range(1, m):
        e = np.zeros(m)
        e[j] = 1.0
        rows.append(
            np.concatenate(
                [np.outer(e, c).ravel(), np.outer(b, e).ravel()]
                + [np.outer(z, e).ravel() for z in (x, y)]
            )
        )
    Q, s, _ = np.linalg.svd(np.stack(rows).T, full_matrices=False)
    return Q[:, s > 1e-12 * s[0]].T


def tangent_shares(lin: Linearization, params: Params) -> np.ndarray:
    """For each mode of `lin` (linearised at `params`, a point of the manifold
    in the gauge $v = e_1$), the share of its squared norm in the tangent space
    of $\\mathcal M$ (1: the mode moves along the manifold; 0: transverse)."""
    T = tangent_basis(params)
    V = np.stack(
        [np.asarray(flatten_params(lin.mode(i))) for i in range(len(lin.eigenvalues))]
    )
    return np.sum((V @ T.T) ** 2, axis=1)


def linear_solution(
    lin: Linearization, point, start, ts: Float[Array | np.ndarray, " t"]
) -> np.ndarray:
    r"""The flow linearised at `point` and solved in closed form:
    $\theta_{lin}(t) = \theta^* + V e^{\Lambda t} V^\top (\theta_0 - \theta^*)$,
    with `lin` = `gradflow.linearize` at `point` (dense: every mode).
    **Returns:** flat points, shape `(len(ts), n)`."""
    V = np.stack(
        [np.asarray(flatten_params(lin.mode(i))) for i in range(len(lin.eigenvalues))]
    )
    if V.shape[0] != V.shape[1]:
        raise ValueError(
            f"lin must hold every mode (method='dense'), got {V.shape[0]} of {V.shape[1]}"
        )
    x_star = np.asarray(flatten_params(point))
    c0 = V @ (np.asarray(flatten_params(start)) - x_star)
    growth = np.exp(np.outer(np.asarray(ts), lin.eigenvalues))
    return x_star + (growth * c0) @ V


__all__ = [
    "embedding_direction",
    "linear_solution",
    "manifold_distance",
    "manifold_gauge",
    "manifold_mask",
    "onto_manifold",
    "param_shapes",
    "score_alignment",
    "score_matrix",
    "tangent_basis",
    "tangent_shares",
    "unflatten_params",
]
