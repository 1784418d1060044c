r"""The paper's population loss and its gradient written out by hand, blocked
over query tokens: the fast, memory-bounded form for large vocabularies.

The closed form (`docs/model.md`, "Population loss") builds dense $d \times d$ intermediates
(scores $S$, attention $A$, logits $Z$ and their adjoints). Given $\pi$, the
attention rows of different query tokens are independent: row $i$ of $A$,
column $i$ of $Z$ and query $i$'s term of the loss need only $W_Q W_0 e_i$,
the keys $W_K W_0$ and $\pi$. So the loss and its gradient are sums over
blocks of `block` query tokens, accumulated by one `jax.lax.scan`, and no
intermediate is larger than `block` $\times d$: peak memory grows as
$d \cdot \text{block}$ rather than $d^2$ per intermediate (the chain's own
$P$ is $d^2$, of course).

Per block $b$ of queries, in query-major layout (row $i$ is query $i$):

    S_b  = Q_b^T K + log pi           A_b = softmax_k(S_b)        (b, d)
    H_b  = A_b E^T                    Z_b = H_b W1^T              (b, m), (b, d)
    L   += sum_i pi_i [logsumexp_y Z_b[i, y] - sum_y P[i, y] Z_b[i, y]]
    G_Z  = pi_i (softmax_y(Z_b) - P_b)                            (b, d)
    dW1 += G_Z^T H_b                  G_H = G_Z W1                (b, m)
    dE  += G_H^T A_b                  G_S = A_b * (G_H E - rowsum(G_H * H_b))
    dQ_b = G_S K^T                    dK += Q_b^T G_S

with $Q = W_Q W_0$, $K = W_K W_0$, $E = W_0$; then
$\partial W_Q = \partial Q\, E^\top$, $\partial W_K = \partial K\, E^\top$,
$\partial W_0 = \partial E + W_Q^\top \partial Q + W_K^\top \partial K$.
The softmax of the attention is computed once per block and serves the
forward pass and the backward one; the row sums of $A \circ (G_H^\top E)$
reduce to $m$-vectors ($\sum_k A_{ik} (G_H E)_{ik} = G_H[i] \cdot H[i]$).

[`blocked_population_loss`][] wraps this in a `jax.custom_jvp` whose tangent
is $\langle \nabla L, d\theta \rangle$: `jax.grad` returns the hand-written
gradient, and Hessian-vector products are forward-mode derivatives of it
(`jax.jvp` through the scan: memory again per block). The numbers equal the
autodiff of [`gradflow.population_loss`][] to round-off (tested), not bit for
bit: the order of the sums differs.
"""

import functools

import jax
import jax.numpy as jnp
from jax.custom_derivatives import SymbolicZero
from jaxtyping import Array, Float

from .._core.custom_types import Scalar
from .chain import MarkovChain


# The autodiff form serves vocabularies below this size (and every recorded
# result at them stays bit for bit); from here on MarkovAttention's loss is
# the blocked form. Measured (benchmarks/closed_form.py): at d = 256 the
# blocked gradient is already faster, and the paper's models (d <= 64) are
# far below.
BLOCKED_MIN_D = 256

# Aim for blocks of about this many entries (block * d): a few such
# intermediates stay in a core's cache (2^16 float64 entries = 512 kB).
_BLOCK_ENTRIES = 2**16


def default_block(d: int) -> int:
    """The block size that the paper's problem passes to
    [`gradflow.population_loss`][] (`block=`) at large vocabularies: query
    tokens per block for a vocabulary of `d` tokens, a power of two near
    `2^16 / d` between 16 and 256 (measured best for the gradient and the
    Hessian-vector product at d = 1,024 and 2,048 on a CPU, within the noise
    of a shared machine), and never more than `d`.

    ```python
    gf.markov.default_block(2048)  # 32
    ```
    """
    block = 16
    while block < 256 and 2 * block * d <= _BLOCK_ENTRIES:
        block *= 2
    return min(block, d)


def _t_dot(x: Array, y: Array) -> Array:
    """$x^\\top y$ for `x` of shape (b, m) and `y` of shape (b, n), without
    forming the transpose (a contraction over the first axes)."""
    return jax.lax.dot_general(x, y, (((0,), (0,)), ((), ())))


def _pad_rows(x: Array, rows: int) -> Array:
    pad = rows - x.shape[0]
    if pad == 0:
        return x
    return jnp.pad(x, ((0, pad),) + ((0, 0),) * (x.ndim - 1))


def _blocks(Q: Array, P: Array, pi: Array, block: int):
    """The query side cut into blocks: `Q^T`, `P`'s rows and `pi`, padded
    with zero-weight queries (`pi = 0`, `P` rows 0) to whole blocks."""
    m, d = Q.shape
    nb = -(-d // block)
    rows = nb * block
    return (
        _pad_rows(Q.T, rows).reshape(nb, block, m),
        _pad_rows(P, rows).reshape(nb, block, d),
        _pad_rows(pi, rows).reshape(nb, block),
    )


def _forward(Qb, K, logpi, E, W1):
    """One block's attention, hidden states, logits and their softmax."""
    S = Qb @ K + logpi  # (b, d)
    S = S - jnp.max(S, axis=1, keepdims=True)
    eS = jnp.exp(S)
    A = eS * (1 / jnp.sum(eS, axis=1, keepdims=True))
    H = A @ E.T  # (b, m)
    Z = H @ W1.T  # (b, d)
    zmax = jnp.max(Z, axis=1, keepdims=True)
    eZ = jnp.exp(Z - zmax)
    sZ = jnp.sum(eZ, axis=1, keepdims=True)
    lse = jnp.log(sZ[:, 0]) + zmax[:, 0]
    return A, H, Z, eZ * (1 / sZ), lse


def _loss_terms(Z, lse, Pb, pib) -> Scalar:
    return jnp.dot(pib, lse - jnp.sum(Pb * Z, axis=1))


def population_loss_and_grad(
    W0: Float[Array, "m d"],
    W1: Float[Array, "d m"],
    WQ: Float[Array, "m m"],
    WK: Float[Array, "m m"],
    *,
    P: Float[Array, "d d"],
    pi: Float[Array, " d"],
    block: int,
    grad: bool = True,
) -> tuple[Scalar, tuple[Array, Array, Array, Array] | None]:
    r"""The population loss (`docs/model.md`, "Population loss") and (with `grad`) its gradient
    `(dW0, dW1, dWQ, dWK)`, accumulated over blocks of `block` query tokens
    (see the module's docstring). Peak memory: a few `block x d` arrays
    besides the inputs."""
    m, d = W0.shape
    logpi = jnp.log(pi)
    Q, K = WQ @ W0, WK @ W0  # (m, d)
    xs = _blocks(Q, P, pi, block)
    zero = jnp.zeros((), W0.dtype)
    if not grad:

        def loss_body(L, x):
            Qb, Pb, pib = x
            _, _, Z, _, lse = _forward(Qb, K, logpi, W0, W1)
            return L + _loss_terms(Z, lse, Pb, pib), None

        L, _ = jax.lax.scan(loss_body, zero, xs)
        return L, None

    def body(carry, x):
        L, gW1t, gE, gK = carry
        Qb, Pb, pib = x
        A, H, Z, sm, lse = _forward(Qb, K, logpi, W0, W1)
        L = L + _loss_terms(Z, lse, Pb, pib)
        GZ = pib[:, None] * (sm - Pb)  # (b, d)
        gW1t = gW1t + _t_dot(H, GZ)  # (m, d): dW1^T
        GH = GZ @ W1  # (b, m)
        gE = gE + _t_dot(GH, A)  # (m, d)
        c = jnp.sum(GH * H, axis=1, keepdims=True)
        GS = A * (GH @ W0 - c)  # (b, d)
        gK = gK + _t_dot(Qb, GS)  # (m, d)
        return (L, gW1t, gE, gK), GS @ K.T  # dQ of the block, (b, m)

    zeros = jnp.zeros((m, d), W0.dtype)
    (L, gW1t, gE, gK), gQb = jax.lax.scan(body, (zero, zeros, zeros, zeros), xs)
    gQ = gQb.reshape(-1, m)[:d].T  # (m, d)
    grads = (
        gE + WQ.T @ gQ + WK.T @ gK,
        gW1t.T,
        gQ @ W0.T,
        gK @ W0.T,
    )
    return L, grads


@functools.partial(jax.custom_jvp, nondiff_argnums=(2,))
def _loss(params, chain: MarkovChain, block: int) -> Scalar:
    L, _ = population_loss_and_grad(
        params.W0, params.W1, params.WQ, params.WK, P=chain.P, pi=chain.pi,
        block=block, grad=False,
    )  # fmt: skip
    return L


def _loss_jvp(block, primals, tangents):
    params, chain = primals
    d_params, d_chain = tangents
    if not all(isinstance(t, SymbolicZero) for t in jax.tree.leaves(d_chain)):
        raise NotImplementedError(
            "the blocked population loss is not differentiable with respect to "
            "the chain; use gradflow.population_loss(params, chain) for that"
        )
    L, grads = population_loss_and_grad(
        params.W0,
        params.W1,
        params.WQ,
        params.WK,
        P=chain.P,
        pi=chain.pi,
        block=block,
    )
    assert grads is not None
    dL = jnp.zeros((), L.dtype)
    for g, name in zip(grads, ("W0", "W1", "WQ", "WK"), strict=True):
        t = getattr(d_params, name)
        if not isinstance(t, SymbolicZero):
            dL = dL + jnp.vdot(g, t)
    return L, dL


_loss.defjvp(_loss_jvp, symbolic_zeros=True)


def blocked_population_loss(params, chain: MarkovChain, block: int) -> Scalar:
    r"""[`gradflow.population_loss`][] of the paper's model (a
    [`gradflow.Params`][]), computed over blocks of `block` query tokens,
    with its gradient written out by hand: `jax.grad` of it runs the blocked
    backward pass of this module, and forward-mode derivatives of that
    gradient (Hessian-vector products) stay blocked too. Equal to the
    autodiff form to round-off. Not differentiable with respect to the
    chain (raises `NotImplementedError`)."""
    return _loss(params, chain, int(block))


__all__ = [
    "BLOCKED_MIN_D",
    "blocked_population_loss",
    "default_block",
    "population_loss_and_grad",
]
