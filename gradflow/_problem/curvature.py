r"""The curvature of any problem's loss at a point: flat views of the loss,
its gradient, Hessian and Hessian-vector products, Lanczos, and the two
probes that tell a saddle from a point the flow merely passes slowly.

- [`start_point`][] and [`start_speed`][]: whether a start is near a
  critical point. With $g = \nabla L(\theta_0)$ and the curvature
  $\kappa = |Hg|/|g|$ along it, the flow needs about $1/\kappa$ to turn, and
  the loss falls by about $|g|^2/\kappa$ meanwhile: $q_0 = |g|^2/(\kappa
  \ell)$, the speed $s = t|\nabla L|^2/\ell$ one curvature time after the
  start, extrapolated from the start. A start with $q_0$ at most
  `escape_speed` is still, on the plateau of a critical point (a small
  start near a saddle: $q_0 \propto$ `init_scale`$^2$); one above it is
  moving and begins with a drop (a convex quadratic from anywhere:
  $q_0 \approx 1$ to 2). Read at $t = 0$ itself, the speed is 0 whatever the
  start (the reason a convex quadratic used to get a plateau there).
- [`unstable_rate`][]: the largest eigenvalue of $-\nabla^2 L$ at a point
  (dense up to `DEFAULT_MAX_DENSE` parameters, Lanczos above): a plateau of
  the generic stages is a saddle only where it is clearly positive
  (`docs/stages.md`).

The theory (`gradflow.theory`) builds its linearisation on the same flat
views.
"""

from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from .._core.threads import with_limited_blas_threads
from .._loop import exported
from .base import Problem


DEFAULT_MAX_DENSE = 2000
"""Up to this many parameters the Hessian is formed densely (`eigh`); above,
Lanczos on Hessian-vector products."""


# -- flat views of the loss -----------------------------------------------------


def flatten_params(params) -> jax.Array:
    """A point of any problem as one vector: its leaves raveled in PyTree order
    (for the paper's model `W0, W1, WQ, WK`, then a variant's `WV`, `gain`,
    `bias`, those that are present)."""
    return ravel_pytree(params)[0]


def shape_of(params):
    """The shapes and dtypes of a point (a static description: one compilation
    of the flat functions per problem and shape)."""
    return jax.tree.map(
        lambda x: jax.ShapeDtypeStruct(
            np.shape(x), x.dtype if hasattr(x, "dtype") else jnp.result_type(x)
        ),
        params,
    )


def unravel_for(like):
    """The inverse of `flatten_params` for points shaped as `like` (a
    [`shape_of`][] description)."""
    return ravel_pytree(jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), like))[1]


def unflatten_like(x: jax.Array, like) -> object:
    """The inverse of [`flatten_params`][gradflow.theory.flatten_params]: the
    vector `x` as a point of the structure and shapes of `like` (a point, or
    its `jax.eval_shape`)."""
    return unravel_for(shape_of(like))(x)


@eqx.filter_jit
def flat_grad(x, problem: Problem, like):
    r"""$\nabla L$ at the flat point `x` (`like`: [`shape_of`][] a point)."""
    return ravel_pytree(jax.grad(problem.loss)(unravel_for(like)(x)))[0]


@eqx.filter_jit
def flat_hessian(x, problem: Problem, like):
    """The dense Hessian at the flat point `x`."""
    unravel = unravel_for(like)
    return jax.hessian(lambda y: problem.loss(unravel(y)))(x)


@eqx.filter_jit
def flat_hvp(x, problem: Problem, like, vector):
    """The Hessian-vector product at the flat point `x`."""
    unravel = unravel_for(like)

    def grad(y):
        return ravel_pytree(jax.grad(problem.loss)(unravel(y)))[0]

    return jax.jvp(grad, (x,), (vector,))[1]


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


# -- the probes -------------------------------------------------------------------


class StartPoint(NamedTuple):
    r"""The loss at a start, $|\nabla L|$ there and $|H\nabla L|$ (the
    Hessian applied to the gradient): what [`start_speed`][] reads."""

    loss: float
    grad_norm: float
    hg_norm: float


def _start_point(problem: Problem, params):
    loss, grad = jax.value_and_grad(problem.loss)(params)
    g = ravel_pytree(grad)[0]

    def flat(p):
        return ravel_pytree(jax.grad(problem.loss)(p))[0]

    hg = jax.jvp(flat, (params,), (grad,))[1]
    return loss, jnp.sqrt(jnp.sum(g**2)), jnp.sqrt(jnp.sum(hg**2))


_start_point_jit = eqx.filter_jit(_start_point)


def start_point(problem: Problem, params) -> StartPoint:
    """$L$, $|\\nabla L|$ and $|H\\nabla L|$ at one point (one compilation per
    problem class and shapes; where exported programs are on, the command
    line's warm start loads it, `gradflow/_loop/exported.py`)."""
    out = exported.call(
        "start_point", _start_point, problem, params, same_structure=False
    )
    loss, grad_norm, hg_norm = _start_point_jit(problem, params) if out is None else out
    return StartPoint(float(loss), float(grad_norm), float(hg_norm))


def start_speed(point: StartPoint, scale: float) -> float:
    r"""$q_0 = |g|^2/(\kappa\ell)$, $\kappa = |Hg|/|g|$: the speed
    $s = t|\nabla L|^2/\ell$ one curvature time $1/\kappa$ after a start, as
    the start's own gradient and curvature predict it (see the module
    docstring). `0` at a critical point; infinite where the loss is locally
    linear (no curvature: nothing stops the fall)."""
    g, hg = point.grad_norm, point.hg_norm
    if g == 0:
        return 0.0
    if not hg > 0:
        return float("inf")
    return g**3 / (hg * max(abs(float(scale)), 1e-300))


@with_limited_blas_threads
def unstable_rate(problem: Problem, params, *, max_dense: int = DEFAULT_MAX_DENSE):
    r"""The largest eigenvalue of $-\nabla^2 L$ at one point (a growth rate of
    the flow linearised there when positive): `eigh` of the dense Hessian up
    to `max_dense` parameters, else the top Ritz value of Lanczos (up to 200
    steps) on Hessian-vector products. `None` where it is not finite."""
    flat = flatten_params(params)
    like = shape_of(params)
    n = int(flat.shape[0])
    if n <= max_dense:
        H = np.asarray(flat_hessian(flat, problem, like), dtype=np.float64)
        top = float(np.linalg.eigvalsh(-0.5 * (H + H.T))[-1])
    else:

        def matvec(v):
            return -np.asarray(
                flat_hvp(flat, problem, like, jnp.asarray(v, flat.dtype))
            )

        top = float(lanczos(matvec, n, min(n, 200))[0][0])
    return top if np.isfinite(top) else None


__all__ = [
    "DEFAULT_MAX_DENSE",
    "StartPoint",
    "flat_grad",
    "flat_hessian",
    "flat_hvp",
    "flatten_params",
    "lanczos",
    "shape_of",
    "start_point",
    "start_speed",
    "unflatten_like",
    "unravel_for",
    "unstable_rate",
]
