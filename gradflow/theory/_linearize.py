"""The flow linearised at a point of any problem: flat views of the loss,
its gradient, Hessian and Hessian-vector products, Lanczos, and `linearize`."""

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree
from jaxtyping import PyTree

from .._core.threads import with_limited_blas_threads
from .._problem.base import Problem
from ._checks import as_problem, check_method, check_point, check_rel_tol


DEFAULT_MAX_DENSE = 2000
DEFAULT_REL_TOL = 1e-6


# ---------------------------------------------------------------------------
# Flat views of the loss
# ---------------------------------------------------------------------------


def flatten_params(params) -> jax.Array:
    """A point of any problem as one vector: its leaves raveled in PyTree order
    (for the paper's model `W0, W1, WQ, WK`, then a variant's `WV`, `gain`,
    `bias`, those that are present)."""
    return ravel_pytree(params)[0]


def unflatten_like(x: jax.Array, like: PyTree) -> PyTree:
    """The inverse of [`flatten_params`][gradflow.theory.flatten_params]: the
    vector `x` as a point of the structure and shapes of `like` (a point, or
    its `jax.eval_shape`)."""
    return _unravel(shape_of(like))(x)


def shape_of(params):
    """The shapes and dtypes of a point (a static description: one compilation
    of the flat functions per problem and shape)."""
    return jax.tree.map(
        lambda x: jax.ShapeDtypeStruct(
            np.shape(x), x.dtype if hasattr(x, "dtype") else jnp.result_type(x)
        ),
        params,
    )


def _unravel(like):
    return ravel_pytree(jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), like))[1]


@eqx.filter_jit
def flat_grad(x, problem: Problem, like):
    """$\nabla L$ at the flat point `x` (`like`: [`shape_of`][] a point)."""
    return ravel_pytree(jax.grad(problem.loss)(_unravel(like)(x)))[0]


@eqx.filter_jit
def flat_hessian(x, problem: Problem, like):
    """The dense Hessian at the flat point `x`."""
    unravel = _unravel(like)
    return jax.hessian(lambda y: problem.loss(unravel(y)))(x)


@eqx.filter_jit
def flat_hvp(x, problem: Problem, like, vector):
    """The Hessian-vector product at the flat point `x`."""
    unravel = _unravel(like)

    def grad(y):
        return ravel_pytree(jax.grad(problem.loss)(unravel(y)))[0]

    return jax.jvp(grad, (x,), (vector,))[1]


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
# Lanczos
# ---------------------------------------------------------------------------


def lanczos(
    matvec, n: int, num_iters: int, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    r"""Ritz pairs of a symmetric operator from `num_iters` Lanczos steps.

    Full re-orthogonalisation (twice, Gram-Schmidt against every previous
    Lanczos vector), so the Ritz values carry no spurious copies. With
    `num_iters = n` the result is the full spectrum up to round-off.

    **Arguments:** `matvec` maps a float64 vector of length `n` to one of the
    same length; `num_iters` in `[1, n]`; `seed` fixes the start vector.

    **Returns:** `(values, vectors)`: Ritz values in descending order, shape
    `(k,)`, and unit Ritz vectors, shape `(k, n)`, with `k <= num_iters` (fewer
    if the Krylov space closes early).
    """
    if not 1 <= num_iters <= n:
        raise ValueError(
            f"num_iters must lie in [1, n = {n}], got num_iters = {num_iters}"
        )
    rng = np.random.default_rng(seed)
    Q = np.zeros((num_iters + 1, n))
    q = rng.standard_normal(n)
    Q[0] = q / np.linalg.norm(q)
    alphas, betas = [], []
    scale = 0.0
    for j in range(num_iters):
        w = np.asarray(matvec(Q[j]), dtype=np.float64)
        alpha = float(w @ Q[j])
        alphas.append(alpha)
        for _ in range(2):
            w = w - Q[: j + 1].T @ (Q[: j + 1] @ w)
        beta = float(np.linalg.norm(w))
        scale = max(scale, abs(alpha), beta)
        if j == num_iters - 1 or beta <= 1e-12 * max(scale, 1e-300):
            break
        betas.append(beta)
        Q[j + 1] = w / beta
    k = len(alphas)
    T = np.diag(alphas) + np.diag(betas[: k - 1], 1) + np.diag(betas[: k - 1], -1)
    values, S = np.linalg.eigh(T)
    order = np.argsort(values)[::-1]
    vectors = (Q[:k].T @ S[:, order]).T
    return values[order], vectors


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
    modes = jax.vmap(_unravel(like))(jnp.asarray(vectors))
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
