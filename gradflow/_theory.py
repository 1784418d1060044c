r"""Stage-wise linearisation: critical points of the population loss, their
unstable modes, and the theory's predictions checked against a trajectory.

Notation of SPEC section 3: $u = \pi - \mathbf 1/d$, $\hat p = \pi/|\pi|$,
$\hat u = u/|u|$. The derivations are in `docs/theory.md`; in short:

- **Origin.** $-\nabla^2 L(0)$ couples $x = W_0\hat p$ and $y = W_1^\top\hat u$
  only: $\dot x = \sigma y$, $\dot y = \sigma x$ with
  $\sigma = |\pi - \mathbf 1/d|\,|\pi|$ (eigenvalues $\pm\sigma$, each $m$
  times; every other eigenvalue is zero).
- **Unigram point** $W_0 = a\,v\hat p^\top$, $W_1 = w v^\top$, $W_Q = W_K = 0$,
  $a\,|\pi|\,w = \log\pi - \overline{\log\pi}$: the attention block decouples
  and is a bilinear form with unstable rate
  $\lambda = a^2|\gamma|$, $\gamma = \kappa\,(\sum_l\pi_l^3 - |\pi|^4)/|\pi|^4$,
  $\kappa = \sum_i \pi_i^2 \rho_i$, $\rho_i = (\pi - P_{i\cdot})\cdot\log\pi$;
  attention focuses on $\arg\max\pi$ when $\kappa < 0$ and on $\arg\min\pi$
  when $\kappa > 0$.
"""

import math
from collections.abc import Sequence
from typing import Any

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optimistix as optx

from ._chain import MarkovChain
from ._errors import is_number, show
from ._model import Params, attention, population_loss
from ._trajectory import Trajectory


_BLOCKS = ("W0", "W1", "WQ", "WK")
DEFAULT_MAX_DENSE = 2000
DEFAULT_PLATEAU_THRESHOLD = 1e-2
DEFAULT_REL_TOL = 1e-6


# ---------------------------------------------------------------------------
# Checks
# ---------------------------------------------------------------------------


def _check_chain(chain) -> MarkovChain:
    if not isinstance(chain, MarkovChain):
        raise TypeError(
            f"chain must be a gradflow.MarkovChain, got {type(chain).__name__}"
        )
    return chain


def _check_point(params, chain: MarkovChain) -> Params:
    if not isinstance(params, Params):
        raise TypeError(
            f"params must be a gradflow.Params, got {type(params).__name__}"
        )
    for name in _BLOCKS:
        if np.ndim(getattr(params, name)) != 2:
            raise ValueError(
                f"params.{name} must be 2-dimensional (one point, no time axis), got "
                f"shape {np.shape(getattr(params, name))}; index a trajectory's params "
                "as traj.params[i]"
            )
        value = np.asarray(getattr(params, name))
        if not np.isfinite(value).all():
            i = tuple(int(k) for k in np.argwhere(~np.isfinite(value))[0])
            raise ValueError(f"params.{name} has a non-finite entry at {i}: {value[i]}")
    if params.d != chain.d:
        raise ValueError(
            f"params are for d = {params.d} tokens but the chain has d = {chain.d}"
        )
    return jax.tree.map(lambda x: jnp.asarray(x, jnp.float64), params)


def _check_trajectory(traj) -> Trajectory:
    if not isinstance(traj, Trajectory):
        raise TypeError(
            f"traj must be a gradflow.Trajectory, got {type(traj).__name__}"
        )
    if len(traj) < 3:
        raise ValueError(f"traj has {len(traj)} saved points; need at least 3")
    return traj


def _check_method(method) -> str:
    if not isinstance(method, str) or method not in ("auto", "dense", "lanczos"):
        raise ValueError(
            f"method must be 'auto', 'dense' or 'lanczos', got {show(method)}"
        )
    return method


def _check_rel_tol(tol) -> float:
    if not is_number(tol):
        raise TypeError(f"tol must be a number in (0, 1), got tol = {show(tol)}")
    tol = float(tol)
    if not math.isfinite(tol) or not 0 < tol < 1:
        raise ValueError(f"tol must lie in (0, 1), got tol = {tol}")
    return tol


# ---------------------------------------------------------------------------
# Flat views of the loss
# ---------------------------------------------------------------------------


def _flat(params: Params) -> jax.Array:
    """The parameters as one vector, in the order `W0, W1, WQ, WK`."""
    return jnp.concatenate([jnp.ravel(getattr(params, n)) for n in _BLOCKS])


def _unflat(x: jax.Array, m: int, d: int) -> Params:
    sizes = (m * d, d * m, m * m, m * m)
    shapes = ((m, d), (d, m), (m, m), (m, m))
    parts, start = [], 0
    for size, shape in zip(sizes, shapes, strict=True):
        parts.append(jnp.reshape(x[start : start + size], shape))
        start += size
    return Params(*parts)


# `m` and `d` are Python ints, hence static under `eqx.filter_jit`: one
# compilation per model size, not per call.
@eqx.filter_jit
def _flat_grad(x, chain, m: int, d: int):
    return _flat(jax.grad(population_loss)(_unflat(x, m, d), chain))


@eqx.filter_jit
def _flat_hessian(x, chain, m: int, d: int):
    return jax.hessian(lambda y: population_loss(_unflat(y, m, d), chain))(x)


@eqx.filter_jit
def _flat_hvp(x, chain, m: int, d: int, vector):
    def grad(y):
        return _flat(jax.grad(population_loss)(_unflat(y, m, d), chain))

    return jax.jvp(grad, (x,), (vector,))[1]


def _block_weights(vectors: np.ndarray, params: Params) -> np.ndarray:
    """Share of each eigenvector's squared norm in `W0, W1, WQ, WK`."""
    sizes = [int(np.size(getattr(params, n))) for n in _BLOCKS]
    edges = np.cumsum([0] + sizes)
    sq = vectors**2
    return np.stack(
        [sq[:, a:b].sum(axis=1) for a, b in zip(edges[:-1], edges[1:], strict=True)], 1
    )


def _gauge_rank(params: Params) -> int:
    r"""Dimension of the orbit of the loss's continuous symmetries at `params`.

    $L$ is invariant under $W_0 \to GW_0$, $(W_1, W_Q, W_K) \to (W_1, W_Q,
    W_K)G^{-1}$ and under $(W_Q, W_K) \to (MW_Q, M^{-\top}W_K)$; each tangent
    direction of these orbits is a zero eigenvalue of the Hessian at a
    critical point. Zero eigenvalues beyond this count are real degeneracy.
    """
    W0, W1, WQ, WK = (np.asarray(getattr(params, n)) for n in _BLOCKS)
    m = W0.shape[0]
    tangents = []
    for a in range(m):
        for b in range(m):
            X = np.zeros((m, m))
            X[a, b] = 1.0
            tangents.append(
                np.concatenate(
                    [
                        (X @ W0).ravel(),
                        (-W1 @ X).ravel(),
                        (-WQ @ X).ravel(),
                        (-WK @ X).ravel(),
                    ]
                )
            )
            tangents.append(
                np.concatenate(
                    [
                        np.zeros(W0.size),
                        np.zeros(W1.size),
                        (X @ WQ).ravel(),
                        (-X.T @ WK).ravel(),
                    ]
                )
            )
    T = np.stack(tangents)
    s = np.linalg.svd(T, compute_uv=False)
    if s.size == 0 or s[0] == 0:
        return 0
    return int(np.sum(s > 1e-9 * s[0]))


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
    - `modes`: the unit eigenvectors as a [`gradflow.Params`][] with a leading
      axis (one mode per eigenvalue).
    - `block_weights`: shape `(k, 4)`, the share of each mode's squared norm
      in `W0, W1, WQ, WK` (rows sum to 1).
    - `loss`, `grad_norm`: $L$ and $|\nabla L|$ at the point.
    - `method`: `"dense"` or `"lanczos"`; `tol`: the absolute tolerance below
      which an eigenvalue counts as zero; `gauge_rank`: the number of zero
      eigenvalues that the loss's symmetries explain (dense only, else -1).
    """

    eigenvalues: np.ndarray
    modes: Params
    block_weights: np.ndarray
    loss: float
    grad_norm: float
    method: str = eqx.field(static=True)
    tol: float
    gauge_rank: int

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

    @property
    def unstable_modes(self) -> Params:
        """The modes with eigenvalue above `tol` (leading axis)."""
        return self.modes[: self.num_unstable]

    def unstable_subspace(self, rel: float = 1e-2) -> np.ndarray:
        """Flat unit vectors spanning the top eigenspace: the modes whose
        eigenvalue is within `rel` (relative) of `unstable_rate`."""
        top = self.unstable_rate
        keep = self.eigenvalues >= top - rel * abs(top)
        flat = np.stack(
            [np.asarray(_flat(self.modes[i])) for i in np.flatnonzero(keep)]
        )
        return np.asarray(flat)


def linearize(
    chain: MarkovChain,
    params: Params,
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

    - `chain`, `params`: the point (one point, no time axis).
    - `method`: `"dense"` (`jax.hessian` and `eigh`), `"lanczos"` (matrix-free
      Lanczos on Hessian-vector products, `jax.jvp` of `jax.grad`), or
      `"auto"`: dense when the number of parameters is at most `max_dense`.
    - `num_modes`: how many leading modes Lanczos returns (default 10); dense
      always returns all.
    - `num_iters`: Lanczos steps (default `min(n, 3 * num_modes + 60)`).
    - `tol`: relative tolerance: eigenvalues with $|\lambda| \le$ `tol`
      $\cdot \max|\lambda|$ count as zero.
    - `seed`: Lanczos start vector.

    **Returns:** a [`gradflow.Linearization`][].

    **Example:**

    ```python
    lin = gf.linearize(chain, gf.Params(W0, W1, WQ, WK))
    lin.unstable_rate, lin.block_weights[0]
    ```
    """
    chain = _check_chain(chain)
    params = _check_point(params, chain)
    method = _check_method(method)
    tol = _check_rel_tol(tol)
    n = params.num_parameters
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
    m, d = params.m, params.d
    flat = _flat(params)
    grad = np.asarray(_flat_grad(flat, chain, m, d))
    loss = float(population_loss(params, chain))
    if method == "dense":
        H = np.asarray(_flat_hessian(flat, chain, m, d))
        H = 0.5 * (H + H.T)
        values, vectors = np.linalg.eigh(-H)
        order = np.argsort(values)[::-1]
        values, vectors = values[order], vectors[:, order].T
        gauge = _gauge_rank(params)
    else:

        def matvec(v):
            return -np.asarray(_flat_hvp(flat, chain, m, d, jnp.asarray(v)))

        values, vectors = lanczos(matvec, n, iters, seed)
        values, vectors = values[:k], vectors[:k]
        gauge = -1
    scale = float(np.max(np.abs(values))) if values.size else 0.0
    modes = jax.vmap(lambda v: _unflat(v, m, d))(jnp.asarray(vectors))
    return Linearization(
        eigenvalues=values,
        modes=modes,
        block_weights=_block_weights(vectors, params),
        loss=loss,
        grad_norm=float(np.linalg.norm(grad)),
        method=method,
        tol=tol * scale,
        gauge_rank=gauge,
    )


# ---------------------------------------------------------------------------
# Critical points
# ---------------------------------------------------------------------------


def refine_critical_point(
    chain: MarkovChain,
    params: Params,
    *,
    max_steps: int = 200,
    gtol: float = 1e-13,
    max_parameters: int = 5000,
) -> tuple[Params, bool]:
    r"""Moves `params` to a nearby critical point, $\nabla L = 0$.

    Minimises $|\nabla L|^2$ by Levenberg-Marquardt: the residual is
    $g = \nabla L$, its Jacobian the Hessian $H = V\Lambda V^\top$, and each
    step is $\theta \leftarrow \theta - V\,\Lambda(\Lambda^2 + \mu)^{-1}
    V^\top g$, with the damping $\mu$ shrunk after a step that lowers $|g|$ and
    grown otherwise. This converges to a critical point also where $H$ is
    singular (degenerate points, symmetry orbits), where plain Newton fails,
    and ends with Newton's quadratic convergence where $H$ is regular on the
    step's span. Dense: the Hessian is formed (`max_parameters` bounds its
    size).

    **Returns:** `(point, converged)`, `converged` meaning $|\nabla L| <
    10^{-10}$ at the returned point.

    **Raises:** `ValueError` if the model has more than `max_parameters`
    parameters.
    """
    chain = _check_chain(chain)
    params = _check_point(params, chain)
    if params.num_parameters > max_parameters:
        raise ValueError(
            f"refinement forms the dense Hessian; the model has "
            f"{params.num_parameters} parameters > max_parameters = {max_parameters}"
        )
    m, d = params.m, params.d
    x = np.asarray(_flat(params))
    g = np.asarray(_flat_grad(jnp.asarray(x), chain, m, d))
    gnorm = float(np.linalg.norm(g))
    mu = None
    for _ in range(max_steps):
        if gnorm < gtol:
            break
        H = np.asarray(_flat_hessian(jnp.asarray(x), chain, m, d))
        lam, V = np.linalg.eigh(0.5 * (H + H.T))
        if mu is None:
            mu = 1e-6 * float(np.max(lam**2))
        c = V.T @ g
        while True:
            x_new = x - V @ (lam * c / (lam**2 + mu))
            g_new = np.asarray(_flat_grad(jnp.asarray(x_new), chain, m, d))
            n_new = float(np.linalg.norm(g_new))
            if np.isfinite(n_new) and n_new < gnorm:
                x, g, gnorm = x_new, g_new, n_new
                mu = max(mu / 10, 1e-300)
                break
            mu *= 10
            if mu > 1e30:
                break
        if mu > 1e30:
            break
    return _unflat(jnp.asarray(x), m, d), bool(gnorm < 1e-10)


class CriticalPoint(eqx.Module):
    """A refined critical point near a plateau of a trajectory.

    **Fields:** `t` (the save time closest to it: least $|\\nabla L|$ on the
    plateau), `t_start`, `t_end` (the plateau's extent in save times),
    `index` (save index of `t`), `loss`, `grad_norm`, `params` (the refined
    point), `distance` (from the saved point to the refined one),
    `linearization` (a [`gradflow.Linearization`][]), `kind` (`"saddle"`,
    `"degenerate"` or `"minimum"`) and `converged` (the refinement reached
    $|\\nabla L| < 10^{-10}$).
    """

    t: float
    t_start: float
    t_end: float
    index: int
    loss: float
    grad_norm: float
    params: Params
    distance: float
    linearization: Linearization
    kind: str
    converged: bool

    def as_dict(self) -> dict[str, Any]:
        """A JSON-friendly summary (no arrays)."""
        lin = self.linearization
        return {
            "t": self.t,
            "t_start": self.t_start,
            "t_end": self.t_end,
            "loss": self.loss,
            "grad_norm": self.grad_norm,
            "distance": self.distance,
            "kind": self.kind,
            "converged": self.converged,
            "unstable_rate": lin.unstable_rate,
            "num_unstable": lin.num_unstable,
        }


def classify(lin: Linearization, chain: MarkovChain | None = None) -> str:
    """`"saddle"` if an eigenvalue of $-\\nabla^2 L$ exceeds `lin.tol`;
    `"minimum"` if none does and either the loss equals the chain's
    conditional entropy (a global minimum: $L$ never goes below it) or no more
    eigenvalues are zero than the loss's symmetries explain; otherwise
    `"degenerate"` (the Hessian cannot tell: higher orders decide)."""
    if lin.num_unstable > 0:
        return "saddle"
    if chain is not None and lin.loss <= float(chain.conditional_entropy) + 1e-9:
        return "minimum"
    if lin.method == "dense" and lin.num_flat > lin.gauge_rank:
        return "degenerate"
    return "minimum"


def plateaus(
    traj: Trajectory, threshold: float = DEFAULT_PLATEAU_THRESHOLD, merge: float = 0.1
) -> list[tuple[int, int, int]]:
    r"""The plateaus of a trajectory, found from `traj.loss` and `traj.grad_norm`.

    Along the flow $dL/d\log t = -t\,|\nabla L|^2$. A save time is *on a
    plateau* when the loss falls by less than `threshold` of its whole range
    $\log d - H(P|\pi)$ per e-fold of time:
    $q(t) = t|\nabla L|^2 / (\log d - H(P|\pi)) <$ `threshold`. Runs of such
    times separated by less than `merge` in $\log t$ are merged. Each plateau
    is represented by its save with the least $|\nabla L|$ (the closest
    approach to the critical point it shadows).

    **Returns:** a list of `(start, best, end)` save indices.
    """
    traj = _check_trajectory(traj)
    threshold = float(threshold)
    if not math.isfinite(threshold) or threshold <= 0:
        raise ValueError(
            f"threshold must be finite and > 0, got threshold = {threshold}"
        )
    ts = np.asarray(traj.ts)
    g = np.asarray(traj.grad_norm)
    span = math.log(traj.chain.d) - float(traj.chain.conditional_entropy)
    q = ts * g**2 / max(span, 1e-12)
    on = q < threshold
    runs: list[list[int]] = []
    for i in np.flatnonzero(on):
        if runs and (
            i == runs[-1][1] + 1
            or (ts[runs[-1][1]] > 0 and math.log(ts[i] / ts[runs[-1][1]]) < merge)
        ):
            runs[-1][1] = i  # pyright: ignore[reportCallIssue,reportArgumentType]
        else:
            runs.append([i, i])  # pyright: ignore[reportArgumentType]
    out = []
    for a, b in runs:
        best = a + int(np.argmin(g[a : b + 1]))
        out.append((a, best, b))
    return out


def critical_points(
    traj: Trajectory,
    *,
    threshold: float = DEFAULT_PLATEAU_THRESHOLD,
    tol: float = DEFAULT_REL_TOL,
    method: str = "auto",
) -> list[CriticalPoint]:
    """For each plateau of `traj` (see [`gradflow.theory.plateaus`][]), the
    critical point it shadows: refined with
    [`refine_critical_point`][gradflow.theory.refine_critical_point] from the
    plateau's save with least $|\\nabla L|$, linearised and classified.

    **Returns:** a list of [`gradflow.CriticalPoint`][], in time order.
    """
    traj = _check_trajectory(traj)
    tol = _check_rel_tol(tol)
    method = _check_method(method)
    chain = traj.chain
    out = []
    for a, best, b in plateaus(traj, threshold):
        start = traj.params[best]
        point, converged = refine_critical_point(chain, start)
        lin = linearize(chain, point, method=method, tol=tol)
        flat0 = _flat(start)
        flat1 = _flat(point)
        out.append(
            CriticalPoint(
                t=float(traj.ts[best]),
                t_start=float(traj.ts[a]),
                t_end=float(traj.ts[b]),
                index=int(best),
                loss=lin.loss,
                grad_norm=lin.grad_norm,
                params=point,
                distance=float(jnp.linalg.norm(flat1 - flat0)),
                linearization=lin,
                kind=classify(lin, chain),
                converged=converged,
            )
        )
    return out


# ---------------------------------------------------------------------------
# Continuation in a chain parameter, with mode tracking
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


def continue_critical_point(
    chains: Sequence[MarkovChain], params: Params, *, rel: float = 1e-2
) -> list[dict[str, Any]]:
    r"""Natural-parameter continuation of a critical point along a family of
    chains, tracking its top unstable mode by eigenspace overlap.

    The point is refined for `chains[0]` from `params`, then for each next
    chain from the previous refined point
    ([`refine_critical_point`][gradflow.theory.refine_critical_point]). The
    tracked mode starts as the top eigenvalue cluster of $-\nabla^2 L$ at the
    first chain; at each next chain it is the leading cluster whose eigenspace
    overlaps most with the previous tracked eigenspace
    ([`track_cluster`][gradflow.theory.track_cluster]).

    **Returns:** one record per chain: `params` (the refined point),
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
    chains = list(chains)
    if not chains:
        raise ValueError("chains must hold at least one MarkovChain")
    point = params
    prev_basis = None
    prev_flat = None
    out = []
    for chain in chains:
        point, ok = refine_critical_point(chain, point)
        lin = linearize(chain, point, method="dense")
        vectors = np.stack(
            [np.asarray(_flat(lin.modes[i])) for i in range(len(lin.eigenvalues))]
        )
        clusters = eigen_clusters(lin.eigenvalues, rel)
        if prev_basis is None:
            idx, overlap = clusters[0], 1.0
        else:
            idx, overlap = track_cluster(prev_basis, lin.eigenvalues, vectors, rel=rel)
        flat = np.asarray(_flat(point))
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


# ---------------------------------------------------------------------------
# Closed-form predictions
# ---------------------------------------------------------------------------


def origin_rate(chain: MarkovChain) -> float:
    r"""$\sigma = |\pi - \mathbf 1/d|\,|\pi|$: the growth rate at the origin."""
    pi = np.asarray(_check_chain(chain).pi)
    return float(np.linalg.norm(pi - 1.0 / pi.size) * np.linalg.norm(pi))


def unigram_point(chain: MarkovChain, width: int) -> Params:
    r"""The balanced rank-one unigram critical point the flow reaches first.

    $W_0 = a\,e_1\hat p^\top$, $W_1 = w e_1^\top$, $W_Q = W_K = 0$ with
    $a|\pi|w = z^* = \log\pi - \overline{\log\pi}$ and $|w| = a$, so
    $a^2 = |z^*|/|\pi|$: the model predicts $\mathrm{softmax}(z^*) = \pi$
    for every query, and $L = H(\pi)$.
    """
    chain = _check_chain(chain)
    if isinstance(width, bool) or not isinstance(width, (int, np.integer)) or width < 1:
        raise ValueError(f"width must be an integer >= 1, got width = {width!r}")
    pi = np.asarray(chain.pi)
    d = pi.size
    z = np.log(pi) - np.log(pi).mean()
    a = math.sqrt(np.linalg.norm(z) / np.linalg.norm(pi))
    w = z / (a * np.linalg.norm(pi))
    W0 = np.zeros((width, d))
    W0[0] = a * pi / np.linalg.norm(pi)
    W1 = np.zeros((d, width))
    W1[:, 0] = w
    zero = np.zeros((width, width))
    return Params(*(jnp.asarray(x) for x in (W0, W1, zero, zero)))


def focus_prediction(chain: MarkovChain) -> dict[str, float | int]:
    r"""Closed-form focus rate and direction at the unigram point.

    $\rho_i = (\pi - P_{i\cdot})\cdot\log\pi$, $\kappa = \sum_i\pi_i^2\rho_i$
    (a covariance under $\pi$, since $\sum_i \pi_i\rho_i = 0$),
    $\gamma = \kappa(\sum_l \pi_l^3 - |\pi|^4)/|\pi|^4$, and
    $\lambda = a^2|\gamma|$ with $a^2 = |\log\pi - \overline{\log\pi}|/|\pi|$.
    The growing mode has scores $S_{ik} \propto -\mathrm{sign}(\gamma)\,
    \pi_i\pi_k$: every query attends more to the most frequent token when
    $\kappa < 0$, to the least frequent one when $\kappa > 0$.

    **Returns:** `{"rate", "kappa", "gamma", "a2", "token"}` (`token` is -1
    when $\kappa = 0$ or $\pi$ is uniform: no focus).
    """
    chain = _check_chain(chain)
    pi = np.asarray(chain.pi)
    P = np.asarray(chain.P)
    logpi = np.log(pi)
    rho = (pi[None, :] - P) @ logpi
    kappa = float(np.sum(pi**2 * rho))
    p2 = float(np.sum(pi**2))
    gamma = kappa * (float(np.sum(pi**3)) - p2**2) / p2**2
    z = logpi - logpi.mean()
    a2 = float(np.linalg.norm(z) / math.sqrt(p2))
    if gamma == 0:
        token = -1
    else:
        token = int(np.argmax(pi)) if gamma < 0 else int(np.argmin(pi))
    return {
        "rate": a2 * abs(gamma),
        "kappa": kappa,
        "gamma": gamma,
        "a2": a2,
        "token": token,
    }


def _reduced_loss(y, pi):
    a, w = y
    z = a * jnp.linalg.norm(pi) * w
    return jax.nn.logsumexp(z) - jnp.dot(pi, z)


def origin_escape_offset(chain: MarkovChain, level: float | None = None) -> float:
    r"""$\tau_1$: the order-one part of the escape time from the origin.

    The escape time to loss `level` (default: halfway from $\log d$ to
    $H(\pi)$) is $t_{esc} = \sigma^{-1}\log(1/|g_0|) + \tau_1$, where
    $g_0 = (W_0(0)\hat p + W_1(0)^\top\hat u)/\sqrt 2$ is the initial
    amplitude of the unstable mode. $\tau_1$ comes from the reduced flow
    on $W_0 = a\,v\hat p^\top$, $W_1 = wv^\top$ (exact while attention is
    uniform), started on the unstable mode at amplitude $\varepsilon$:
    $\tau_1 = T(\varepsilon) + \sigma^{-1}\log(\sqrt 2\,\varepsilon)$.
    """
    chain = _check_chain(chain)
    pi = jnp.asarray(chain.pi)
    sigma = origin_rate(chain)
    if level is None:
        level = 0.5 * (math.log(chain.d) + float(chain.unigram_entropy))
    level = float(level)
    if not float(chain.unigram_entropy) < level < math.log(chain.d):
        raise ValueError(
            f"level must lie between H(pi) = {float(chain.unigram_entropy):.6g} and "
            f"log d = {math.log(chain.d):.6g}, got level = {level}"
        )
    eps = 1e-7
    u = pi - 1.0 / chain.d
    y0 = (jnp.asarray(eps), eps * u / jnp.linalg.norm(u))

    def field(t, y, args):
        g = jax.grad(_reduced_loss)(y, args)
        return jax.tree.map(jnp.negative, g)

    def cond(t, y, args, **kwargs):
        return _reduced_loss(y, args) - level

    t_max = 50.0 * (math.log(1 / eps) + 10) / sigma
    sol = dfx.diffeqsolve(
        dfx.ODETerm(field),
        dfx.Tsit5(),
        0.0,
        t_max,
        None,
        y0,
        args=pi,
        saveat=dfx.SaveAt(t1=True),
        stepsize_controller=dfx.PIDController(rtol=1e-11, atol=1e-14),
        event=dfx.Event(cond, optx.Newton(rtol=1e-12, atol=1e-12)),
        max_steps=100_000,
    )
    T = float(sol.ts[-1])  # pyright: ignore[reportOptionalSubscript]
    return T + math.log(math.sqrt(2) * eps) / sigma


def unstable_amplitude(chain: MarkovChain, params: Params) -> float:
    r"""$|g_0| = |W_0\hat p + W_1^\top\hat u|/\sqrt 2$ at `params`."""
    pi = np.asarray(chain.pi)
    u = pi - 1.0 / pi.size
    x = np.asarray(params.W0) @ (pi / np.linalg.norm(pi))
    y = np.asarray(params.W1).T @ (u / np.linalg.norm(u))
    return float(np.linalg.norm(x + y) / math.sqrt(2))


# ---------------------------------------------------------------------------
# Measurements on a trajectory
# ---------------------------------------------------------------------------


def _fit_rate(ts, values, lo, hi) -> tuple[float, float, float, int]:
    """Least-squares slope of log(values) on times where lo <= values <= hi,
    restricted to the first contiguous run. Returns (slope, t0, t1, n)."""
    ok = (values >= lo) & (values <= hi) & np.isfinite(values)
    idx = np.flatnonzero(ok)
    if idx.size == 0:
        return float("nan"), float("nan"), float("nan"), 0
    run = [idx[0]]
    for i in idx[1:]:
        if i != run[-1] + 1:
            break
        run.append(i)
    run = np.asarray(run)
    if run.size < 3:
        return float("nan"), float("nan"), float("nan"), int(run.size)
    slope = np.polyfit(ts[run], np.log(values[run]), 1)[0]
    return float(slope), float(ts[run[0]]), float(ts[run[-1]]), int(run.size)


def flank_rate(
    traj: Trajectory, index: int, low: float = 3.0, high: float = 10.0
) -> dict[str, float]:
    r"""The escape rate measured on the rising flank of $|\nabla L|$ after save
    `index` (a plateau's closest approach, where $|\nabla L| = g_{min}$).

    Near a saddle with top rate $\lambda$, $|\nabla L| \propto e^{\lambda t}$
    once the unstable mode dominates the decaying ones and while it is still
    small. The slope of $\log|\nabla L|$ is fitted on the first run of saves
    after `index` with $|\nabla L| \in [\text{low}\,g_{min},
    \text{high}\,g_{min}]$: above `low` the stable modes have decayed, below
    `high` the unstable amplitude is within a decade of its closest approach,
    so higher-order terms are small.

    **Returns:** `{"rate", "t0", "t1", "n"}` (`n` saves used; `rate` is NaN
    when fewer than 3 fit).
    """
    ts = np.asarray(traj.ts)[index:]
    g = np.asarray(traj.grad_norm)[index:]
    rate, t0, t1, n = _fit_rate(ts, g, low * g[0], high * g[0])
    return {"rate": rate, "t0": t0, "t1": t1, "n": n}


def _loss_crossing(ts, loss, level) -> float:
    below = np.flatnonzero(loss <= level)
    if below.size == 0 or below[0] == 0:
        return float("nan")
    i = below[0]
    # linear interpolation in t between the bracketing saves
    f = (loss[i - 1] - level) / (loss[i - 1] - loss[i])
    return float(ts[i - 1] + f * (ts[i] - ts[i - 1]))


def _row(quantity, predicted, measured, note="") -> dict[str, Any]:
    predicted = float(predicted)
    measured = float(measured)
    if predicted != 0 and math.isfinite(predicted) and math.isfinite(measured):
        rel = abs(measured - predicted) / abs(predicted)
    else:
        rel = float("nan")
    return {
        "quantity": quantity,
        "predicted": predicted,
        "measured": measured,
        "rel_error": rel,
        "note": note,
    }


def theory_report(
    traj: Trajectory,
    *,
    points: list[CriticalPoint] | None = None,
    threshold: float = DEFAULT_PLATEAU_THRESHOLD,
) -> list[dict[str, Any]]:
    r"""Predicted against measured, for every stage the linearisation explains.

    Rows (`{"quantity", "predicted", "measured", "rel_error", "note"}`):

    - `origin escape rate`: $\sigma = |\pi - 1/d||\pi|$ against the slope of
      $\log\sqrt{s_1(W_0)s_1(W_1)}$ ($s_1$: top singular value) while it grows
      from 10 times its initial value to 0.1 (linear regime).
    - `origin escape time`: $\sigma^{-1}\log(1/|g_0|) + \tau_1$ against the
      time the loss crosses halfway from $\log d$ to $H(\pi)$.
    - `W0 alignment with pi`, `W1 alignment with pi - 1/d`: cosines of the top
      singular vectors at the end of the linear regime (predicted 1).
    - `W1 alignment with log pi (unigram point)`: predicted 1 (see
      `docs/theory.md`).
    - `attention frozen`: $|W_{Q,K}(t) - W_{Q,K}(0)|/|W_{Q,K}(0)|$ at the
      end of the linear regime (predicted 0; `rel_error` is the measured value).
    - `unigram plateau loss`: $H(\pi)$ against the refined critical point.
    - `focus growth rate`: `unstable_rate` at the refined unigram critical
      point (the balanced one the flow reaches, `unigram_point`) against half
      the slope of $\log|S|_F$, $S = (W_QW_0)^\top W_KW_0$,
      on the unigram plateau while $|S|_F < 0.1$.
    - `focus rate (closed form)`: $a^2|\gamma|$ against the Hessian.
    - `focus token`: the sign rule's token against the key token whose
      $\pi$-weighted attention mass gained most by the end of the focus.
    - `plateau k escape rate`: for each later saddle, `unstable_rate` against
      the slope of $\log|\nabla L|$ on its rising flank.

    Rows whose measurement is impossible on this trajectory (too short, no
    such plateau) are left out.
    """
    traj = _check_trajectory(traj)
    chain = traj.chain
    pi = np.asarray(chain.pi)
    d = chain.d
    u = pi - 1.0 / d
    ts = np.asarray(traj.ts)
    loss = np.asarray(traj.loss)
    P = traj.params
    rows: list[dict[str, Any]] = []
    if points is None:
        points = critical_points(traj, threshold=threshold)

    # --- origin -------------------------------------------------------------
    sigma = origin_rate(chain)
    s0 = np.linalg.svd(np.asarray(P.W0), compute_uv=False)[:, 0]
    s1 = np.linalg.svd(np.asarray(P.W1), compute_uv=False)[:, 0]
    growth = np.sqrt(s0 * s1)
    rate, t_lo, t_hi, n = _fit_rate(ts, growth, 10 * growth[0], 0.1)
    if n >= 3:
        rows.append(
            _row(
                "origin escape rate",
                sigma,
                rate,
                f"fit of log sqrt(s1(W0) s1(W1)) on t in [{t_lo:.4g}, {t_hi:.4g}], "
                f"{n} saves",
            )
        )
        level = 0.5 * (math.log(d) + float(chain.unigram_entropy))
        g0 = unstable_amplitude(chain, P[0])
        tau1 = origin_escape_offset(chain, level)
        rows.append(
            _row(
                "origin escape time",
                math.log(1.0 / g0) / sigma + tau1,
                _loss_crossing(ts, loss, level),
                f"log(1/|g0|)/sigma + tau1, |g0| = {g0:.3g}, tau1 = {tau1:.4g}; "
                f"measured: loss crosses {level:.5g}",
            )
        )
        i_end = int(np.flatnonzero(ts <= t_hi)[-1])
        U0, _, V0 = np.linalg.svd(np.asarray(P.W0[i_end]))
        U1, _, _ = np.linalg.svd(np.asarray(P.W1[i_end]))
        cos0 = abs(V0[0] @ pi) / np.linalg.norm(pi)
        cos1 = abs(U1[:, 0] @ u) / np.linalg.norm(u)
        rows.append(_row("W0 alignment with pi", 1.0, cos0, f"at t = {ts[i_end]:.4g}"))
        rows.append(
            _row("W1 alignment with pi - 1/d", 1.0, cos1, f"at t = {ts[i_end]:.4g}")
        )
        frozen = max(
            float(np.linalg.norm(P.WQ[i_end] - P.WQ[0]) / np.linalg.norm(P.WQ[0])),
            float(np.linalg.norm(P.WK[i_end] - P.WK[0]) / np.linalg.norm(P.WK[0])),
        )
        row = _row(
            "attention frozen",
            0.0,
            frozen,
            f"max relative change of WQ, WK to t = {ts[i_end]:.4g}",
        )
        row["rel_error"] = frozen
        rows.append(row)

    # --- unigram point and focus ------------------------------------------------
    H_pi = float(chain.unigram_entropy)
    unigram = [
        k for k, p in enumerate(points) if abs(p.loss - H_pi) <= 1e-6 * max(1.0, H_pi)
    ]
    later = list(range(len(points)))
    if unigram:
        k = unigram[0]
        cp = points[k]
        later = [j for j in later if j > k]
        rows.append(
            _row(
                "unigram plateau loss",
                H_pi,
                cp.loss,
                f"refined point near t = {cp.t:.4g}",
            )
        )
        zc = np.log(pi) - np.log(pi).mean()
        U1, _, _ = np.linalg.svd(np.asarray(cp.params.W1))
        rows.append(
            _row(
                "W1 alignment with log pi - mean",
                1.0,
                abs(U1[:, 0] @ zc) / np.linalg.norm(zc),
                "top left singular vector of W1 at the unigram point",
            )
        )
        lam_refined = cp.linearization.unstable_rate
        # The unigram critical points form a manifold; the flow reaches its
        # balanced rank-one point (W0 W0^T - W1^T W1 is conserved while
        # attention is uniform, and ~0 from a small start), so the prediction
        # is the Hessian there. A point refined from a save is another point
        # of the manifold, with another rate: reported separately.
        lam = linearize(chain, unigram_point(chain, cp.params.m)).unstable_rate
        # measured: half the slope of log |S|_F on the plateau while |S| < 0.1
        S = jnp.einsum("tmi,tnm,tnk,tkj->tij", P.W0, P.WQ, P.WK, P.W0)
        Snorm = np.asarray(jnp.linalg.norm(S, axis=(1, 2)))
        # from the plateau's closest approach to the unigram point (where the
        # linearisation there applies) until |S| reaches 0.1 (still linear)
        window = np.flatnonzero((np.arange(len(ts)) >= cp.index) & (Snorm < 0.1))
        if window.size >= 3:
            window = window[: np.argmax(np.diff(np.r_[window, -10]) != 1) + 1]
        if window.size >= 3:
            slope = np.polyfit(ts[window], np.log(Snorm[window]), 1)[0]
            rows.append(
                _row(
                    "focus growth rate",
                    lam,
                    slope / 2,
                    f"half slope of log|S| on t in [{ts[window[0]]:.4g}, "
                    f"{ts[window[-1]]:.4g}], {window.size} saves",
                )
            )
        fp = focus_prediction(chain)
        rows.append(
            _row(
                "focus rate (closed form)",
                fp["rate"],
                lam,
                "a^2 |gamma| against the Hessian at the balanced unigram point",
            )
        )
        rows.append(
            _row(
                "focus rate at refined plateau point",
                lam,
                lam_refined,
                f"Hessian at the critical point refined from t = {cp.t:.4g} "
                f"(distance {cp.distance:.3g}; not balanced)",
            )
        )
        # measured focus token: the key whose attention, relative to its prior
        # weight pi_k, rose most: argmax_k sum_i pi_i log(A[i, k] / pi_k)
        A = np.asarray(jax.vmap(lambda p: attention(p, chain))(P))
        lift = np.einsum("i,tik->tk", pi, np.log(A / pi[None, None, :]))
        # the focus stage: from the unigram point to the next plateau
        t_next = points[k + 1].t if k + 1 < len(points) else np.inf
        after = np.flatnonzero((ts >= cp.t) & (ts <= t_next))
        gain_t = after[np.argmax(np.max(lift[after], axis=1))] if after.size else -1
        measured_token = int(np.argmax(lift[gain_t]))
        row = _row(
            "focus token",
            fp["token"],
            measured_token,
            f"sign rule (kappa = {fp['kappa']:.3g}); measured: largest attention lift "
            f"gain, at t = {ts[gain_t]:.4g}",
        )
        row["rel_error"] = float(fp["token"] != measured_token)
        rows.append(row)
        rows.append(
            _row(
                "focus token (Hessian mode)",
                fp["token"],
                mode_focus_token(chain, cp.params, cp.linearization),
                "token favoured by the unstable mode's scores",
            )
        )
        rows[-1]["rel_error"] = float(rows[-1]["predicted"] != rows[-1]["measured"])

    # --- later plateaus -----------------------------------------------------------
    for j in later:
        cp = points[j]
        if cp.kind != "saddle" or not cp.converged or cp.index >= len(ts) - 3:
            continue
        fr = flank_rate(traj, cp.index)
        if fr["n"] < 3:
            continue
        rows.append(
            _row(
                f"plateau L={cp.loss:.5g} escape rate",
                cp.linearization.unstable_rate,
                fr["rate"],
                f"t* = {cp.t:.4g}, refined point {cp.distance:.2g} away; slope of "
                f"log|grad L| on t in [{fr['t0']:.4g}, {fr['t1']:.4g}], "
                f"{fr['n']} saves",
            )
        )
    return rows


def mode_focus_token(chain: MarkovChain, params: Params, lin: Linearization) -> int:
    r"""The key token that the top unstable mode's attention scores favour.

    Along the mode the scores become $S = (\delta W_Q E)^\top(\delta W_K E)$
    (at $W_Q = W_K = 0$ the first-order terms vanish), and
    $\log(A_{ik}/\pi_k) = S_{ik} - \log Z_i$; the favoured key is
    $\arg\max_k \sum_i \pi_i S_{ik}$: the key whose attention relative to
    its prior weight $\pi_k$ rises most. (The absolute mass gain
    $\pi_k(S_{ik} - \bar S_i)$ can peak elsewhere when the scores favour rare
    tokens.)"""
    mode = lin.modes[0]
    E = jnp.asarray(params.W0)
    S = (mode.WQ @ E).T @ (mode.WK @ E)
    return int(np.argmax(np.asarray(chain.pi @ S)))


def format_report(rows: list[dict[str, Any]]) -> str:
    """The report as a fixed-width table."""
    head = (
        f"{'quantity':42s} {'predicted':>12s} {'measured':>12s} {'rel_error':>10s}"
        "  note"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(
            f"{r['quantity']:42s} {r['predicted']:12.6g} {r['measured']:12.6g} "
            f"{r['rel_error']:10.3g}  {r['note']}"
        )
    return "\n".join(lines)


__all__ = [
    "CriticalPoint",
    "Linearization",
    "classify",
    "continue_critical_point",
    "critical_points",
    "eigen_clusters",
    "flank_rate",
    "focus_prediction",
    "format_report",
    "lanczos",
    "linearize",
    "mode_focus_token",
    "origin_escape_offset",
    "origin_rate",
    "plateaus",
    "refine_critical_point",
    "subspace_overlap",
    "theory_report",
    "track_cluster",
    "unigram_point",
    "unstable_amplitude",
]
