r"""In-context linear regression with a linear-attention layer: the canonical
model of in-context learning dynamics (Zhang, Frei and Bartlett 2023; Zhang,
Singh, Latham and Saxe 2025). The mathematics is in `docs/problems.md`,
section "In-context regression".

A task $w \sim \mathcal N(0, I_D)$; inputs $x_1, \dots, x_N, x_q \sim
\mathcal N(0, \Sigma)$; labels $y_n = w\cdot x_n + \varepsilon_n$ and
$y_q = w\cdot x_q + \varepsilon_q$, $\varepsilon \sim \mathcal N(0,
\sigma^2)$. $H$ heads read the labels as values and the inputs as keys and
queries; the prediction $\hat y = \hat\beta^\top\Gamma x_q$ depends on the
heads only through $\Gamma = \sum_h v_h K_h^\top Q_h$ (or $\sum_h v_h W_h$),
with $\hat\beta = \frac1N\sum_n y_n x_n$. With $\tau = \operatorname{tr}\Sigma
+ \sigma^2$, $A = (1 + \frac1N)\Sigma + \frac\tau N I$ and $M = A\Sigma$, the
Gaussian fourth moment gives the exact population loss at finite $N$

$$L(\Gamma) = L^* + \tfrac12\operatorname{tr}\big((\Gamma - \Gamma^*)^\top
M(\Gamma - \Gamma^*)\Sigma\big),\qquad \Gamma^* = A^{-1},\qquad
L^* = \tfrac{\sigma^2}2 + \tfrac1{2N}\operatorname{tr}\big(\Sigma(\Sigma +
\tau I)\Gamma^*\big),$$

written through the residual $\Gamma - \Gamma^*$ and with a floor free of
cancellation, so that it stays accurate to its own size near the minimum.
"""

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, PRNGKeyArray

from ..._core.custom_types import Scalar
from ..._core.errors import show
from ..._core.random import scaled_normal
from ..._core.validate import (
    check_covariance,
    check_finite_entries,
    check_integer,
    check_number,
)
from ..._problem.base import BoundedProblem, ObservedProblem, SampledProblem
from ..._problem.functions import loss_levels
from ..._result.labelled import ArrayNames, array_names
from ..._stages import matrix_spectra


class SeparateHeads(eqx.Module):
    r"""The heads of linear attention with separate key and query: values
    `v` (one per head), keys `K` and queries `Q` of `key_dim` rows each;
    $\Gamma = \sum_h v_h K_h^\top Q_h$."""

    v: Float[Array, " H"]
    K: Float[Array, "H r D"]
    Q: Float[Array, "H r D"]


class MergedHeads(eqx.Module):
    r"""The heads of linear attention with merged key-query: values `v` (one
    per head) and key-query matrices `W`; $\Gamma = \sum_h v_h W_h$."""

    v: Float[Array, " H"]
    W: Float[Array, "H D D"]


Heads = SeparateHeads | MergedHeads


def attention_matrix(params: Heads) -> Float[Array, "D D"]:
    r"""$\Gamma = \sum_h v_h K_h^\top Q_h$ (separate key and query) or
    $\sum_h v_h W_h$ (merged): the matrix through which the heads predict,
    $\hat y = \hat\beta^\top\Gamma x_q$."""
    if isinstance(params, SeparateHeads):
        return jnp.einsum("h,hrd,hre->de", params.v, params.K, params.Q)
    return jnp.einsum("h,hde->de", params.v, params.W)


def attention_readout(
    params: Heads, tokens: Float[Array, "b n e"], context: int
) -> Float[Array, " b"]:
    r"""The label entry of the query's output, run on the tokens: each head
    scores token $n$ by $(K_hx_n)\cdot(Q_hx_q)$ (or $x_n^\top W_hx_q$) and
    adds $v_h\frac1N\sum_n y_n\,\text{score}_n$. `tokens` has shape
    `(b, N + 1, D + 1)`: rows $(x_n, y_n)$, the query $(x_q, 0)$ last (its
    zero label drops its own term)."""
    x, y = tokens[..., :-1], tokens[..., -1]
    query = x[:, -1]
    if isinstance(params, SeparateHeads):
        keys = jnp.einsum("hrd,bnd->bhnr", params.K, x)
        queries = jnp.einsum("hrd,bd->bhr", params.Q, query)
        scores = jnp.einsum("bhnr,bhr->bhn", keys, queries)
    else:
        scores = jnp.einsum("bnd,hde,be->bhn", x, params.W, query)
    return jnp.einsum("h,bhn,bn->b", params.v, scores, y) / context


def check_eigen_covariance(value) -> np.ndarray:
    """A `D x D` symmetric positive-definite matrix, or a vector of `D`
    positive eigenvalues (made the diagonal matrix); a one-line error
    otherwise."""
    what = "a D x D matrix or a vector of D eigenvalues"
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(f"covariance must be {what}, got {show(value)}") from None
    if arr.ndim == 2:
        return check_covariance("covariance", arr)
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"covariance must be {what}, got shape {arr.shape}")
    check_finite_entries("covariance", arr)
    if not (arr > 0).all():
        i = int(np.flatnonzero(arr <= 0)[0])
        raise ValueError(
            f"covariance must have positive eigenvalues, got covariance[{i}] = "
            f"{arr[i]:.6g}"
        )
    return np.diag(arr)


def check_noise(noise) -> float:
    """The labels' noise standard deviation: a finite number >= 0."""
    value = check_number("noise", noise)
    if not (math.isfinite(value) and value >= 0):
        raise ValueError(f"noise must be finite and >= 0, got noise = {show(noise)}")
    return value


class InContextRegression(SampledProblem, ObservedProblem, BoundedProblem):
    r"""In-context linear regression with multi-head linear attention
    (Zhang, Frei and Bartlett 2023; Zhang, Singh, Latham and Saxe 2025): the
    exact population loss at finite context length, in closed form. See
    `docs/problems.md`, section "In-context regression".

    A sequence holds `context` $= N$ examples $(x_n, y_n)$ and a query
    $(x_q, 0)$: $x \sim \mathcal N(0, \Sigma)$, $y = w\cdot x + \varepsilon$
    with a task $w \sim \mathcal N(0, I_D)$ drawn per sequence and
    $\varepsilon \sim \mathcal N(0, \text{noise}^2)$. Each of the `heads`
    heads reads the labels as values and the inputs as keys and queries; the
    prediction for the query is
    $\hat y = \sum_h v_h\frac1N\sum_n y_n(K_hx_n)\cdot(Q_hx_q)$ (separate key
    and query) or $\sum_h v_h\frac1N\sum_n y_nx_n^\top W_hx_q$ (merged), and
    $L = \frac12E(\hat y - y_q)^2$.

    **Arguments:**

    - `covariance`: $\Sigma$, a `D x D` symmetric positive-definite matrix,
      or a vector of its `D` eigenvalues (then $\Sigma$ is diagonal).
    - `context`: $N \ge 1$, the number of examples in a sequence.
    - `heads`: $H \ge 1$.
    - `key_dim`: $r \ge 1$, the rows of each head's key and query (separate
      key and query); `None` (the default): merged key-query.
    - `noise`: $\sigma \ge 0$, the labels' noise standard deviation.

    The problem holds, besides `covariance` and `noise`, what the loss and the
    sampler need, computed once in float64: `basis` (the eigenvectors $U$ of
    $\Sigma$, largest eigenvalue first), `minimiser` ($\Gamma^*$), `metric`
    ($A\Sigma$), `minimum` ($L^*$) and `cholesky` (of $\Sigma$).

    Parameters are an `eqx.Module`: `SeparateHeads` (`v` of shape `(H,)`,
    `K`, `Q` of shape `(H, r, D)`) or `MergedHeads` (`v`, `W` of shape
    `(H, D, D)`); the random start draws every entry
    i.i.d. $\mathcal N(0, \text{init\_scale}^2)$. `sample(key, n)` draws `n`
    sequences as tokens and `sample_loss` runs the heads on them. `observe`
    saves `"modes"`: $\operatorname{diag}(U^\top\Gamma U)$ in the eigenbasis
    $U$ of $\Sigma$ (largest eigenvalue first), which shows the direction
    each drop learns, and `"svGamma"`: the singular values of $\Gamma$ (a
    `rank` record per direction learnt).

    **Example** (separate key and query: one drop per eigen-direction):

    ```python
    problem = gf.problems.InContextRegression([1.0, 0.5, 0.25], context=16,
                                              heads=3, key_dim=1)
    traj = gf.flow(problem, init_scale=1e-2, t1=5000)
    traj.extras["modes"]  # (saves, 3): each rises in turn, largest first
    ```
    """

    covariance: Float[Array, "D D"]
    noise: Float[Array, ""]
    # derived from the two above once, in float64 (the loss and the sampler
    # then hold no linear solve nor decomposition: faster to compile and run)
    basis: Float[Array, "D D"]
    minimiser: Float[Array, "D D"]
    metric: Float[Array, "D D"]
    minimum: Float[Array, ""]
    cholesky: Float[Array, "D D"]
    context: int = eqx.field(static=True)
    heads: int = eqx.field(static=True)
    key_dim: int | None = eqx.field(static=True)

    def __init__(self, covariance, context, heads, key_dim=None, noise=0.0):
        sigma = check_eigen_covariance(covariance)
        self.context = check_integer("context", context, 1)
        self.heads = check_integer("heads", heads, 1)
        self.key_dim = None if key_dim is None else check_integer("key_dim", key_dim, 1)
        sd = check_noise(noise)
        self.noise = jnp.asarray(sd, dtype=jnp.float64)
        self.covariance = jnp.asarray(sigma)
        N, eye = self.context, np.eye(sigma.shape[0])
        tau = float(np.trace(sigma)) + sd**2
        A = (1 + 1 / N) * sigma + (tau / N) * eye
        star = np.linalg.solve(A, eye)
        star = 0.5 * (star + star.T)
        self.basis = jnp.asarray(np.linalg.eigh(sigma)[1][:, ::-1])
        self.minimiser = jnp.asarray(star)
        self.metric = jnp.asarray(A @ sigma)
        self.minimum = jnp.asarray(
            0.5 * sd**2 + np.sum((sigma @ (sigma + tau * eye)) * star) / (2 * N)
        )
        self.cholesky = jnp.asarray(np.linalg.cholesky(sigma))

    # -- sizes and closed forms ------------------------------------------------

    @property
    def dimension(self) -> int:
        """$D$, the inputs' dimension."""
        return int(self.covariance.shape[0])

    @property
    def merged(self) -> bool:
        """Whether keys and queries are merged (`key_dim=None`)."""
        return self.key_dim is None

    def eigen(self) -> tuple[np.ndarray, np.ndarray]:
        r"""`(lam, U)`: the eigenvalues of $\Sigma$, largest first, and its
        eigenvectors as the columns of `U` (NumPy, float64)."""
        lam, U = np.linalg.eigh(np.asarray(self.covariance, dtype=np.float64))
        return lam[::-1].copy(), U[:, ::-1].copy()

    def tau(self) -> float:
        r"""$\tau = \operatorname{tr}\Sigma + \sigma^2 = 2L(0)$."""
        return float(np.trace(np.asarray(self.covariance)) + float(self.noise) ** 2)

    def gains(self) -> np.ndarray:
        r"""What learning each eigen-direction lowers the loss by, twice:
        $g_i = \lambda_i^2/((1 + \frac1N)\lambda_i + \frac\tau N)$, largest
        eigenvalue first (increasing in $\lambda$: the same order)."""
        lam, N = self.eigen()[0], self.context
        return lam**2 / ((1 + 1 / N) * lam + self.tau() / N)

    def gamma(self, params: Heads) -> Float[Array, "D D"]:
        r"""$\Gamma = \sum_h v_hK_h^\top Q_h$ (or $\sum_h v_hW_h$) of a point."""
        return attention_matrix(params)

    # -- the protocol ----------------------------------------------------------

    def loss(self, params: Heads) -> Scalar:
        # population_loss with Gamma*, A Sigma and L* computed once
        R = attention_matrix(params) - self.minimiser
        return self.minimum + 0.5 * jnp.sum(R * (self.metric @ R @ self.covariance))

    def init(self, key: PRNGKeyArray, init_scale: float) -> Heads:
        H, D, dtype = self.heads, self.dimension, self.covariance.dtype
        if self.key_dim is None:
            kv, kw = jax.random.split(key)
            return MergedHeads(
                v=scaled_normal(kv, (H,), init_scale, dtype),
                W=scaled_normal(kw, (H, D, D), init_scale, dtype),
            )
        kv, kk, kq = jax.random.split(key, 3)
        shape = (H, self.key_dim, D)
        return SeparateHeads(
            v=scaled_normal(kv, (H,), init_scale, dtype),
            K=scaled_normal(kk, shape, init_scale, dtype),
            Q=scaled_normal(kq, shape, init_scale, dtype),
        )

    def sample(self, key: PRNGKeyArray, n: int):
        """`n` sequences `(tokens, target)`: `tokens` of shape
        `(n, N + 1, D + 1)`, rows $(x_1, y_1), \\dots, (x_N, y_N), (x_q, 0)$,
        and `target` $y_q$ of shape `(n,)`."""
        kw, kx, ke = jax.random.split(key, 3)
        D, N, dtype = self.dimension, self.context, self.covariance.dtype
        w = jax.random.normal(kw, (n, D), dtype)
        z = jax.random.normal(kx, (n, N + 1, D), dtype)
        x = z @ self.cholesky.T
        eps = jax.random.normal(ke, (n, N + 1), dtype)
        y = jnp.einsum("bnd,bd->bn", x, w) + self.noise * eps
        labels = y.at[:, -1].set(0.0)
        return jnp.concatenate([x, labels[..., None]], axis=-1), y[:, -1]

    def sample_loss(self, params: Heads, batch) -> Scalar:
        """$\\frac12$ the mean squared error of the heads run on the batch's
        tokens, whose expectation is `loss`."""
        tokens, target = batch
        pred = attention_readout(params, tokens, self.context)
        return 0.5 * jnp.mean((pred - target) ** 2)

    def observe(self, params: Heads) -> dict[str, Array]:
        """`"modes"` ($\\operatorname{diag}(U^\\top\\Gamma U)$, largest
        eigenvalue of $\\Sigma$ first) and `"svGamma"` (the singular values
        of $\\Gamma$), besides the default observations."""
        out = matrix_spectra(params)
        gamma = attention_matrix(params)
        U = self.basis
        out["modes"] = jnp.einsum("di,de,ei->i", U, gamma, U)
        out["svGamma"] = jnp.linalg.svd(gamma, compute_uv=False)
        return out

    def loss_floor(self) -> float:
        r"""The least loss the heads can reach: $L_{1..k}$, the level with the
        $k = \min(D, Hr)$ leading eigen-directions learnt ($k = D$ for
        merged key-query): $\Gamma$ of rank at most $Hr$, Eckart-Young in the
        metric of the loss (`docs/problems.md`)."""
        D = self.dimension
        k = D if self.key_dim is None else min(D, self.heads * self.key_dim)
        return 0.5 * (self.tau() - float(np.sum(self.gains()[:k])))

    def __str__(self) -> str:
        heads = "merged" if self.merged else f"r={self.key_dim}"
        noise = f", noise={float(self.noise):g}" if float(self.noise) > 0 else ""
        return (
            f"InContextRegression(D={self.dimension}, N={self.context}, "
            f"H={self.heads}, {heads}{noise})"
        )


@loss_levels.register
def _(problem: InContextRegression) -> dict[str, tuple[str, float]]:
    r"""The levels the flow can rest on, highest first: $L(0) = \tau/2$ and
    the staircase $L_{1..k}$ up to the heads' floor (separate key and query);
    $L(0)$ and the minimum $L_{1..D}$ (merged key-query: no level between)."""
    D = problem.dimension
    top = D if problem.merged else min(D, problem.heads * int(problem.key_dim or 1))
    stairs = 0.5 * (problem.tau() - np.concatenate([[0.0], np.cumsum(problem.gains())]))
    ks = [0, D] if problem.merged else range(top + 1)
    return {
        ("start" if k == 0 else f"L{k}"): (
            "$L(0)$" if k == 0 else f"$L_{{1..{k}}}$",
            float(stairs[k]),
        )
        for k in ks
    }


@array_names.register
def _(problem: InContextRegression) -> ArrayNames:
    r"""Each head's value `v(head)` and key and query `K, Q(head, key_row,
    input)` (merged: `W(head, input, input_2)`), the eigen-components
    `modes(mode)` (largest eigenvalue of the inputs' covariance first); the
    problem's covariance and what it derives from it: the eigenbasis
    `basis(input, mode)`, `minimiser` ($\Gamma^*$), `metric` ($A\Sigma$) and
    `cholesky`, each on `(input, input_2)`, and `minimum` ($L^*$)."""
    D = problem.dimension
    square = ("input", "input_2")
    return ArrayNames(
        params={
            ".v": ("v", ("head",)),
            ".K": ("K", ("head", "key_row", "input")),
            ".Q": ("Q", ("head", "key_row", "input")),
            ".W": ("W", ("head", "input", "input_2")),
        },
        extras={"modes": ("mode",), "svGamma": ("sv_Gamma", ("sv",))},
        problem={
            "covariance": ("covariance", square),
            "basis": ("basis", ("input", "mode")),
            "minimiser": ("minimiser", square),
            "metric": ("metric", square),
            "minimum": ("minimum", ()),
            "cholesky": ("cholesky", square),
        },
        coords={"mode": np.arange(1, D + 1), "sv": np.arange(1, D + 1)},
    )


__all__ = [
    "Heads",
    "InContextRegression",
    "MergedHeads",
    "SeparateHeads",
    "attention_matrix",
    "attention_readout",
    "check_eigen_covariance",
    "check_noise",
]
