"""The flow linearised at a point of any problem: `linearize`, on the flat
views of the loss, its gradient, Hessian and Hessian-vector products and the
Lanczos iteration of `gradflow/_problem/curvature.py` (shared with the
generic stages, which read the curvature too)."""

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import PyTree

from .._core.threads import with_limited_blas_threads
from .._problem.curvature import (
    DEFAULT_MAX_DENSE,
    flat_grad,
    flat_hessian,
    flat_hvp,
    flatten_params,
    lanczos,
    shape_of,
    unflatten_like,
    unravel_for,
)
from ._checks import as_problem, check_method, check_point, check_rel_tol


DEFAULT_REL_TOL = 1e-6


def leaf_names(params) -> tuple[str, ...]:
    """A name for each leaf of a point: `W0`, ... for the paper's model, the
    path (`[0]`, `.W`) otherwise."""
    return tuple(
        jax.tree_util.keystr(path).lstrip(".")
        for path, _ in jax.tree_util.tree_flatten_with_path(params)[0]
    )


def _block_weights(vectors: np.ndarray, params) -> np.ndarray:
    """Share of each eigenvector's squared norm in each parameter (for the
    paper's model `W0, W1, WQ, WK`, and a variant's `WV`, `gain`, `bias`)."""
    sizes = [int(np.size(v)) for v in jax.tree.leaves(params)]
    edges = np.cumsum([0] + sizes)
    sq = vectors**2
    return np.stack(
        [sq[:, a:b].sum(axis=1) for a, b in zip(edges[:-1], edges[1:], strict=True)], 1
    )


@functools.singledispatch
def gauge_rank(problem, params) -> int:
    """The dimension of the orbit of the loss's continuous symmetries at
    `params`: each tangent direction of the orbit is a zero eigenvalue of the
    Hessian at a critical point, and zero eigenvalues beyond this count are
    real degeneracy. `-1` (the default) where the symmetries are not derived;
    a problem's package registers its own (`gauge_rank.register(cls)`; the
    paper's model: `docs/theory.md`)."""
    del problem, params
    return -1


# ---------------------------------------------------------------------------
# Linearisation
# ---------------------------------------------------------------------------


class Linearization(eqx.Module):
    r"""The flow linearised at a point: $\dot\xi = -\nabla^2 L(\theta)\,\xi$.

    **Fields:**

    - `eigenvalues`: eigenvalues of the flow's Jacobian $-\nabla^2 L$, in
      descending order (all of them for `method="dense"`, the `num_modes`
      largest for `"lanczos"`). A positive one is a growth rate.
    - `modes`: the unit eigenvectors as points of the problem's structure
      with a leading axis (one mode per eigenvalue).
    - `block_weights`: shape `(k, len(blocks))`, the share of each mode's
      squared norm in each parameter of `blocks` (rows sum to 1).
    - `blocks`: the parameter names of the columns of `block_weights` (the
      leaves' paths: `W0`, `W1`, `WQ`, `WK` for the paper's model, `[0]`, ...
      for a tuple).
    - `loss`, `grad_norm`: $L$ and $|\nabla L|$ at the point.
    - `method`: `"dense"` or `"lanczos"`; `tol`: the absolute tolerance below
      which an eigenvalue counts as zero; `gauge_rank`: the number of zero
      eigenvalues that the loss's symmetries explain (dense only, and where
      the problem's package derived them: [`gradflow.theory.gauge_rank`][];
      else -1).
    """

    eigenvalues: np.ndarray
    modes: PyTree
    block_weights: np.ndarray
    loss: float
    grad_norm: float
    method: str = eqx.field(static=True)
    tol: float
    gauge_rank: int
    blocks: tuple[str, ...] = eqx.field(static=True, default=())

    @property
    def unstable_rate(self) -> float:
        """The largest eigenvalue of $-\\nabla^2 L$ (the fastest growth rate)."""
        return float(self.eigenvalues[0])

    @property
    def num_unstable(self) -> int:
        """How many eigenvalues exceed `tol`."""
        return int(np.sum(self.eigenvalues > self.tol))

    @property
    def num_flat(self) -> int:
        """How many eigenvalues lie within `tol` of zero (of those computed)."""
        return int(np.sum(np.abs(self.eigenvalues) <= self.tol))

    def mode(self, i: int):
        """Mode `i` as a point of the problem (no leading axis)."""
        return jax.tree.map(lambda x: x[i], self.modes)

    @property
    def unstable_modes(self) -> PyTree:
        """The modes with eigenvalue above `tol` (leading axis)."""
        return jax.tree.map(lambda x: x[: self.num_unstable], self.modes)

    def unstable_subspace(self, rel: float = 1e-2) -> np.ndarray:
        """Flat unit vectors spanning the top eigenspace: the modes whose
        eigenvalue is within `rel` (relative) of `unstable_rate`."""
        top = self.unstable_rate
        keep = self.eigenvalues >= top - rel * abs(top)
        flat = np.stack(
            [
                np.asarray(flatten_params(self.mode(int(i))))
                for i in np.flatnonzero(keep)
            ]
        )
        return np.asarray(flat)


@with_limited_blas_threads
def linearize(
    problem,
    params,
    *,
    method: str = "auto",
    num_modes: int | None = None,
    num_iters: int | None = None,
    tol: float = DEFAULT_REL_TOL,
    max_dense: int = DEFAULT_MAX_DENSE,
    seed: int = 0,
) -> Linearization:
    r"""Linearises the gradient flow at `params`: the spectrum of $-\nabla^2 L$.

    **Arguments:**

    - `problem`: a [`gradflow.Problem`][], or anything
      [`gradflow.as_problem`][] makes one of (a [`gradflow.MarkovChain`][]:
      the paper's model on it, of the width and variant of `params`).
    - `params`: the point (one point, no time axis), of the problem's
      structure.
    - `method`: `"dense"` (`jax.hessian` and `eigh`), `"lanczos"` (matrix-free
      Lanczos on Hessian-vector products, `jax.jvp` of `jax.grad`), or
      `"auto"`: dense when the number of parameters is at most `max_dense`.
    - `num_modes`: how many leading modes Lanczos returns (default 10); dense
      always returns all.
    - `num_iters`: Lanczos steps (default `min(n, 3 * num_modes + 60)`).
    - `tol`: relative tolerance: eigenvalues with $|\lambda| \le$ `tol`
      $\cdot \max|\lambda|$ count as zero.
    - `seed`: Lanczos start vector.

    **Returns:** a [`gradflow.Linearization`][] (its modes of the problem's
    structure, with a leading axis).

    **Example:**

    ```python
    lin = gf.linearize(chain, gf.Params(W0, W1, WQ, WK))
    lin.unstable_rate, lin.block_weights[0]
    ```
    """
    problem = as_problem(problem, params)
    # The options first, the point after (checking it traces `problem.init`
    # for its shapes): every bad argument is refused before anything is traced.
    method = check_method(method)
    tol = check_rel_tol(tol)
    n = sum(int(np.size(x)) for x in jax.tree.leaves(params))
    if method == "auto":
        method = "dense" if n <= max_dense else "lanczos"
    if method == "lanczos":
        # Checked before anything is compiled.
        k = 10 if num_modes is None else int(num_modes)
        if not 1 <= k <= n:
            raise ValueError(
                f"num_modes must lie in [1, {n}], got num_modes = {num_modes}"
            )
        iters = min(n, 3 * k + 60) if num_iters is None else int(num_iters)
        if not k <= iters <= n:
            raise ValueError(
                f"num_iters must lie in [num_modes = {k}, n = {n}], got {num_iters}"
            )
    params = check_point(params, problem)
    flat = flatten_params(params)
    like = shape_of(params)
    grad = np.asarray(flat_grad(flat, problem, like))
    loss = float(problem.loss(params))
    if method == "dense":
        H = np.asarray(flat_hessian(flat, problem, like))
        H = 0.5 * (H + H.T)
        values, vectors = np.linalg.eigh(-H)
        order = np.argsort(values)[::-1]
        values, vectors = values[order], vectors[:, order].T
        gauge = gauge_rank(problem, params)
    else:

        def matvec(v):
            return -np.asarray(flat_hvp(flat, problem, like, jnp.asarray(v)))

        values, vectors = lanczos(matvec, n, iters, seed)
        values, vectors = values[:k], vectors[:k]
        gauge = -1
    scale = float(np.max(np.abs(values))) if values.size else 0.0
    modes = jax.vmap(unravel_for(like))(jnp.asarray(vectors))
    return Linearization(
        eigenvalues=values,
        modes=modes,
        block_weights=_block_weights(vectors, params),
        loss=loss,
        grad_norm=float(np.linalg.norm(grad)),
        method=method,
        tol=tol * scale,
        gauge_rank=gauge,
        blocks=leaf_names(params),
    )


__all__ = [
    "DEFAULT_MAX_DENSE",
    "DEFAULT_REL_TOL",
    "Linearization",
    "flat_grad",
    "flat_hessian",
    "flat_hvp",
    "flatten_params",
    "gauge_rank",
    "lanczos",
    "leaf_names",
    "linearize",
    "shape_of",
    "unflatten_like",
]
