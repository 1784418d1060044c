r"""The paper's population loss, its gradient and its Hessian-vector products
written out by hand, blocked over query tokens: the fast, memory-bounded
form for large vocabularies (`docs/model.md`, "The blocked form").

The closed form (`docs/model.md`, "Population loss") builds dense
$d \times d$ intermediates (scores $S$, attention $A$, logits $Z$ and their
adjoints). Given $\pi$, the attention rows of different query tokens are
independent: row $i$ of $A$, column $i$ of $Z$ and query $i$'s term of the
loss need only $W_Q W_0 e_i$, the keys $W_K W_0$ and $\pi$. So the loss, its
gradient and a Hessian-vector product are sums over blocks of `block` query
tokens, each accumulated by one `jax.lax.scan`, and no intermediate is larger
than `block` $\times d$: peak memory grows as $d \cdot \text{block}$ rather
than $d^2$ per intermediate (the chain's own $P$ is $d^2$, of course).

Per block $b$ of queries, in query-major layout (row $i$ is query $i$), with
$Q = W_Q W_0$, $K = W_K W_0$, $E = W_0$:

    S_b  = Q_b^T K + log pi           A_b = softmax_k(S_b)        (b, d)
    H_b  = A_b E^T                    Z_b = H_b W1^T              (b, m), (b, d)
    L   += sum_i pi_i [logsumexp_y Z_b[i, y] - sum_y P[i, y] Z_b[i, y]]
    G_Z  = pi_i (softmax_y(Z_b) - P_b)                            (b, d)
    dW1 += G_Z^T H_b                  G_H = G_Z W1                (b, m)
    dE  += G_H^T A_b                  G_S = A_b * (G_H E - rowsum(G_H * H_b))
    dQ_b = G_S K^T                    dK += Q_b^T G_S

then $\partial W_Q = \partial Q\, E^\top$, $\partial W_K = \partial K\,
E^\top$, $\partial W_0 = \partial E + W_Q^\top \partial Q + W_K^\top
\partial K$. The Hessian-vector product $H v$ is the directional derivative
of these lines along $v = (V_0, V_1, V_Q, V_K)$, written out the same way
(`docs/model.md`, "The blocked form"): one scan that computes each block's
attention and softmax once for the gradient and its derivative; the
derivative's two products that contract over $m$ run as one product of
inner size $2m$ ($\dot S = [Q_b \; \dot Q_b] [\dot K; K]$, and so on).

[`blocked_population_loss`][] wraps this in two `jax.custom_jvp`s: the
loss's tangent is $\langle \nabla L, d\theta \rangle$ (so `jax.grad` runs
the hand-written backward pass), and the gradient's tangent is the
hand-written Hessian-vector product (so `jax.jvp` of the gradient, a
`jax.linearize` of it, `jax.hessian`, all stay blocked). The numbers equal
the autodiff of the dense closed form to round-off (tested), not bit for
bit: the order of the sums differs. Derivatives with respect to the chain
fall back to the dense autodiff form (they are $d \times d$ themselves).
"""

import functools

import jax
import jax.numpy as jnp
from jax.custom_batching import custom_vmap
from jax.custom_derivatives import SymbolicZero
from jaxtyping import Array, Float

from .._core.custom_types import Scalar
from .chain import MarkovChain
from .primitive import attention_weights, population_cross_entropy


# The dense autodiff form serves vocabularies below this size (and every
# recorded result at them stays bit for bit); from here on
# `gradflow.population_loss` and `MarkovAttention` use the blocked form.
# Measured (benchmarks/closed_form.py): at d = 256 the blocked gradient is
# already faster, and the paper's models (d <= 64) are far below.
BLOCKED_MIN_D = 256

# Aim for blocks of about this many entries (block * d): the gradient's
# 2^18 (2 MiB in float64), the HVP's 2^17. Measured on the 2-core CPU
# (benchmarks/closed_form.py --blocks, load 1.6 to 1.8), at d = 1,024,
# m = 16: the gradient at 21, 29, 35 and 37 % of the matrix product's rate
# (both cores, wall time) with blocks of 64, 128, 256 and 512 queries, the
# HVP at 27, 38, 38 and 36 %: larger operations let XLA split them across
# its threads, and fewer scan steps cost less. The HVP stays at 2^17: a
# solver's vmapped HVPs hold r directions' blocks per intermediate (r = 64
# at d = 1,024: 307 MB more at 2^16 entries, 543 MB at 2^17).
# Up to d = 2,048 the HVP takes at least 128 queries (2^18 entries at
# d = 2,048, where 2^17 gave 64): at d = 2,048 one HVP took 0.93 times the
# time of 64-query blocks at m = 16 and at m = 32 (median paired ratios of 60
# rounds in one process, taken under load 3.8 to 4.1; docs/performance.md,
# "Everyday speed (issue 42)"); a linearised gradient vmapped over 64
# directions needs 861 MB of XLA temporaries there instead of 535 MB.
# Up to d = 2,048 the gradient takes at least 256 queries (2^19 entries at
# d = 2,048, where 2^18 gave 128): at d = 2,048, m = 16 the gradient took
# 21.8-25.2 ms with 256 against 23.5-26.2 ms with 128 (0.92-0.96x, five
# runs of 8 rounds side by side, load 0.8 to 1.7), the same at m = 32
# (docs/performance.md, "Issue 42, ninth pass").
_GRAD_ENTRIES = 2**18
_GRAD_MIN_BLOCK, _GRAD_MIN_BLOCK_UP_TO = 256, 2048
_HVP_ENTRIES = 2**17
_HVP_MIN_BLOCK, _HVP_MIN_BLOCK_UP_TO = 128, 2048


def _block(d: int, entries: int) -> int:
    block = 16
    while block < 512 and 2 * block * d <= entries:
        block *= 2
    return min(block, d)


def default_block(d: int) -> int:
    """Query tokens per block of the loss and its gradient for a vocabulary
    of `d` tokens: the power of two nearest `2^18 / d` from below, between
    16 and 512, never more than `d`; up to `d = 2048` at least 256 (or
    `d`)."""
    block = _block(d, _GRAD_ENTRIES)
    if d <= _GRAD_MIN_BLOCK_UP_TO:
        block = max(block, min(_GRAD_MIN_BLOCK, d))
    return block


def default_hvp_block(d: int) -> int:
    """Query tokens per block of the Hessian-vector product: the power of
    two nearest `2^17 / d` from below, between 16 and 512, never more than
    `d`; up to `d = 2048` at least 128 (or `d`)."""
    block = _block(d, _HVP_ENTRIES)
    if d <= _HVP_MIN_BLOCK_UP_TO:
        block = max(block, min(_HVP_MIN_BLOCK, d))
    return block


def _t_dot(x: Array, y: Array) -> Array:
    """$x^\\top y$ for `x` of shape (b, m) and `y` of shape (b, n).

    The small `x` is transposed first, behind an optimisation barrier: XLA
    would fold the transpose into the product, and XLA:CPU runs a product
    that contracts the first axes of both operands on Eigen, measured 2 to
    3 times slower here than the same product in the usual layout (which it
    hands to YNNPACK) inside the scan's body; the three such products were
    a third of the gradient's time (`docs/performance.md`, "The closed form
    at large d")."""
    return jax.lax.optimization_barrier(x.T) @ y


@custom_vmap
def _t_dot_tangent(x: Array, y: Array) -> Array:
    """`_t_dot` for the HVP's products with a tangent operand, with a
    batching rule (`_t_dot_batched`). Under `jax.vmap` over directions (a
    solver's refresh), `y` batched and `x` not, `jax.vmap`'s own rule makes
    one product of `x^T` with the directions' blocks side by side, and
    XLA:CPU transposes each `(r, b, n)` operand to `(b, r n)` and the result
    back, in every block of the scan; the rule makes it a batched product
    (`x` broadcast). Unbatched it is `_t_dot` itself (the single HVP is
    unchanged, bit for bit; `docs/performance.md`, "Issue 42, ninth pass:
    where the text flow's time goes"). Only inside the HVP's custom JVP:
    `jax.custom_batching.custom_vmap` has no transpose, so reverse-mode
    differentiation through it (of the HVP itself) is not supported."""
    return _t_dot(x, y)


@_t_dot_tangent.def_vmap
def _t_dot_batched(axis_size: int, in_batched, x: Array, y: Array):
    """The batching rule of `_t_dot_tangent`: the directions (axis 0 of a
    batched operand) as the batch axis of one product, never inside its
    columns."""
    x_batched, y_batched = in_batched
    if not (x_batched or y_batched):
        return _t_dot(x, y), False
    xt = jax.lax.optimization_barrier(jnp.swapaxes(x, -1, -2))
    if y_batched and not x_batched:
        xt = jnp.broadcast_to(xt, (axis_size, *xt.shape))
    return xt @ y, True


def _pad_rows(x: Array, rows: int) -> Array:
    pad = rows - x.shape[0]
    if pad == 0:
        return x
    return jnp.pad(x, ((0, pad),) + ((0, 0),) * (x.ndim - 1))


def _scan_blocks(body, init, block: int, P: Array, *rows: Array, remat=False):
    """`body(carry, (*rows_b, P_b))` over the query tokens in blocks of
    `block`: one `jax.lax.scan` over the whole blocks, then one call on the
    rows left over. `rows` (small arrays whose rows are query tokens) are
    cut into blocks; `P`'s rows are sliced inside the scan, so `P` is never
    copied (padding it to whole blocks would copy all `d^2` entries).
    Returns the final carry and the per-query outputs of `body`, stacked
    back into `d` rows.

    `remat`: each step is a `jax.checkpoint` (the slice of `P` included),
    so that under `jax.linearize` only each block's small rows are kept."""
    d = P.shape[0]
    nb, tail = divmod(d, block)
    carry, ys = init, []
    if nb:
        xs = tuple(x[: nb * block].reshape(nb, block, *x.shape[1:]) for x in rows)

        def step(carry, x):
            i, *r = x
            Pb = jax.lax.dynamic_slice_in_dim(P, i * block, block)
            return body(carry, (*r, Pb))

        step = jax.checkpoint(step) if remat else step
        carry, y = jax.lax.scan(step, carry, (jnp.arange(nb), *xs))
        ys.append(jax.tree.map(lambda a: a.reshape(nb * block, *a.shape[2:]), y))
    if tail:
        x = (*(r[nb * block :] for r in rows), P[nb * block :])
        carry, y = (jax.checkpoint(body) if remat else body)(carry, x)
        ys.append(y)
    return carry, jax.tree.map(lambda *a: jnp.concatenate(a), *ys)


def _softmax(x: Array) -> tuple[Array, Array]:
    """Row softmax and row logsumexp."""
    xmax = jnp.max(x, axis=1, keepdims=True)
    ex = jnp.exp(x - xmax)
    s = jnp.sum(ex, axis=1, keepdims=True)
    return ex * (1 / s), jnp.log(s[:, 0]) + xmax[:, 0]


def _exp_rows(x: Array) -> tuple[Array, Array]:
    """The row softmax unnormalised: `exp(x - rowmax)` and the reciprocal
    of its row sums, `(b, 1)`; `softmax = ex * r`.

    The gradient keeps the attention in this form: each use of it is a row
    scaling of something smaller or fused (`A E^T = (ex E^T) r`,
    `G^T A = (r G)^T ex`, `A * X = ex * (r X)`), so the `(b, d)` pass that
    would normalise it is not made (one `(b, d)` fusion fewer per block,
    8 % fewer bytes in XLA's cost analysis of the compiled gradient at
    d = 1,024, m = 32). The HVP keeps `A` normalised: written this way
    there, XLA materialised `r` as a `(b, d)` broadcast and accessed more
    bytes, not fewer."""
    ex = jnp.exp(x - jnp.max(x, axis=1, keepdims=True))
    return ex, 1 / jnp.sum(ex, axis=1, keepdims=True)


def _forward(Qb, K, logpi, ET, W1T):
    """One block's unnormalised attention `ex` with its row scale `r`
    (`A = ex * r`), hidden states, logits, their softmax and logsumexp."""
    ex, r = _exp_rows(Qb @ K + logpi)  # (b, d), (b, 1)
    H = (ex @ ET) * r  # (b, m)
    Z = H @ W1T  # (b, d)
    sm, lse = _softmax(Z)
    return ex, r, H, Z, sm, lse


def _loss_terms(Z, lse, Pb, pib) -> Scalar:
    return jnp.dot(pib, lse - jnp.sum(Pb * Z, axis=1))


def _assemble(W0, WQ, WK, *, gE, gW1t, gQ, gK):
    """The parameters' gradient from those of $E$, $W_1^\\top$, $Q$, $K$."""
    return (gE + WQ.T @ gQ + WK.T @ gK, gW1t.T, gQ @ W0.T, gK @ W0.T)


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
    r"""The population loss (`docs/model.md`, "Population loss") and (with
    `grad`) its gradient `(dW0, dW1, dWQ, dWK)`, accumulated over blocks of
    `block` query tokens (see the module's docstring). Peak memory: a few
    `block x d` arrays besides the inputs."""
    m, d = W0.shape
    logpi = jnp.log(pi)
    Q, K = WQ @ W0, WK @ W0  # (m, d)
    ET, KT, W1T = W0.T, K.T, W1.T
    zero = jnp.zeros((), W0.dtype)
    if not grad:

        def loss_body(L, x):
            Qb, pib, Pb = x
            _, _, _, Z, _, lse = _forward(Qb, K, logpi, ET, W1T)
            return L + _loss_terms(Z, lse, Pb, pib), None

        L, _ = _scan_blocks(loss_body, zero, block, P, Q.T, pi)
        return L, None

    def body(carry, x):
        L, gW1t, gE, gK = carry
        Qb, pib, Pb = x
        ex, r, H, Z, sm, lse = _forward(Qb, K, logpi, ET, W1T)  # A = ex * r
        L = L + _loss_terms(Z, lse, Pb, pib)
        GZ = pib[:, None] * (sm - Pb)  # (b, d)
        gW1t = gW1t + _t_dot(H, GZ)  # (m, d): dW1^T
        GH = GZ @ W1  # (b, m)
        gE = gE + _t_dot(GH * r, ex)  # (m, d): G_H^T A
        c = jnp.sum(GH * H, axis=1, keepdims=True)
        GS = ex * ((GH @ W0 - c) * r)  # (b, d): A * (G_H E - c)
        gK = gK + _t_dot(Qb, GS)  # (m, d)
        return (L, gW1t, gE, gK), GS @ KT  # dQ of the block, (b, m)

    zeros = jnp.zeros((m, d), W0.dtype)
    init = (zero, zeros, zeros, zeros)
    (L, gW1t, gE, gK), gQ = _scan_blocks(body, init, block, P, Q.T, pi)
    gQ = gQ.T  # (m, d)
    return L, _assemble(W0, WQ, WK, gE=gE, gW1t=gW1t, gQ=gQ, gK=gK)


def population_loss_grad_and_hvp(
    W0: Float[Array, "m d"],
    W1: Float[Array, "d m"],
    WQ: Float[Array, "m m"],
    WK: Float[Array, "m m"],
    *,
    V0: Float[Array, "m d"],
    V1: Float[Array, "d m"],
    VQ: Float[Array, "m m"],
    VK: Float[Array, "m m"],
    P: Float[Array, "d d"],
    pi: Float[Array, " d"],
    block: int,
) -> tuple[Scalar, tuple[Array, Array, Array, Array], tuple[Array, ...]]:
    r"""The population loss, its gradient and the Hessian-vector product
    $\nabla^2 L \, v$ along $v = (V_0, V_1, V_Q, V_K)$, in one scan over
    blocks of `block` query tokens (`docs/model.md`, "The blocked form").

    Each block's attention and softmax are computed once and serve the
    gradient and its directional derivative; the derivative's two products
    that contract over $m$ run as one product of inner size $2m$. Each
    block is a `jax.checkpoint`: under `jax.linearize` (a solver's
    Jacobian-vector products) only each block's small inputs are kept, and
    the block is computed again for each call of the linear map, so memory
    stays a few `block x d` arrays there too."""
    m, d = W0.shape
    logpi = jnp.log(pi)
    Q, K = WQ @ W0, WK @ W0  # (m, d)
    dQ, dK = VQ @ W0 + WQ @ V0, VK @ W0 + WK @ V0  # their tangents
    ET, KT, V0T, W1T = W0.T, K.T, V0.T, W1.T
    # the two products of a tangent x dy + dx y, when both contract over m,
    # as one product of inner size 2m: [x dx] [dy; y]
    dKK = jnp.concatenate([dK, K])  # (2m, d)
    V1W1T = jnp.concatenate([V1, W1], axis=1).T  # (2m, d)
    V0E = jnp.concatenate([V0, W0])  # (2m, d)

    # Primal and tangent products stay apart (no [x dx] [y dy]): under
    # jax.linearize the primal outputs must not depend on the tangents.
    def body(carry, x):
        L, gW1t, gE, gK, hW1t, hE, hK = carry
        Qb, dQb, pib, Pb = x
        A, _ = _softmax(Qb @ K + logpi)  # (b, d)
        dS = jnp.concatenate([Qb, dQb], axis=1) @ dKK  # Q dK + dQ K
        dA = A * (dS - jnp.sum(A * dS, axis=1, keepdims=True))
        H = A @ ET  # (b, m)
        dH = dA @ ET + A @ V0T
        Z = H @ W1T
        sm, lse = _softmax(Z)
        L = L + _loss_terms(Z, lse, Pb, pib)
        # pi_i dZ = pi_i (H V1^T + dH W1^T): pi scales the (b, 2m) factor, so
        # that no (b, d) broadcast of it is made
        pdZ = (pib[:, None] * jnp.concatenate([H, dH], axis=1)) @ V1W1T
        GZ = pib[:, None] * (sm - Pb)
        dGZ = sm * (pdZ - jnp.sum(sm * pdZ, axis=1, keepdims=True))
        gW1t = gW1t + _t_dot(H, GZ)
        hW1t = hW1t + _t_dot_tangent(dH, GZ) + _t_dot_tangent(H, dGZ)
        GH = GZ @ W1  # (b, m)
        dGH = dGZ @ W1 + GZ @ V1
        gE = gE + _t_dot(GH, A)
        hE = hE + _t_dot_tangent(dGH, A) + _t_dot_tangent(GH, dA)
        GA = GH @ W0  # (b, d)
        dGA = jnp.concatenate([GH, dGH], axis=1) @ V0E  # G_H V0 + dG_H E
        c = jnp.sum(GH * H, axis=1, keepdims=True)
        dc = jnp.sum(dGH * H + GH * dH, axis=1, keepdims=True)
        GS = A * (GA - c)
        dGS = dA * (GA - c) + A * (dGA - dc)
        gK = gK + _t_dot(Qb, GS)
        hK = hK + _t_dot_tangent(dQb, GS) + _t_dot_tangent(Qb, dGS)
        gQb = GS @ KT  # (b, m)
        hQb = GS @ dK.T + dGS @ KT
        return (L, gW1t, gE, gK, hW1t, hE, hK), (gQb, hQb)

    zero = jnp.zeros((), W0.dtype)
    zeros = jnp.zeros((m, d), W0.dtype)
    init = (zero,) + (zeros,) * 6
    rows = (Q.T, dQ.T, pi)
    carry, (gQ, hQ) = _scan_blocks(body, init, block, P, *rows, remat=True)
    L, gW1t, gE, gK, hW1t, hE, hK = carry
    gQ, hQ = gQ.T, hQ.T  # (m, d)
    grads = _assemble(W0, WQ, WK, gE=gE, gW1t=gW1t, gQ=gQ, gK=gK)
    hvp = (
        hE + VQ.T @ gQ + WQ.T @ hQ + VK.T @ gK + WK.T @ hK,
        hW1t.T,
        hQ @ W0.T + gQ @ V0.T,
        hK @ W0.T + gK @ V0.T,
    )
    return L, grads, hvp


# -- the public, differentiable wrapper -----------------------------------------

_NAMES = ("W0", "W1", "WQ", "WK")


def _dense_loss(params, chain: MarkovChain) -> Scalar:
    """The dense closed form, the same operations as
    `gradflow.population_loss` below `BLOCKED_MIN_D` (for derivatives with
    respect to the chain)."""
    E = params.W0
    A = attention_weights(params.WQ, params.WK, E, E, jnp.log(chain.pi))
    return population_cross_entropy(params.W1 @ (E @ A.T), chain)


def _instantiate(tree):
    return jax.tree.map(
        lambda t: (
            jnp.zeros(t.aval.shape, t.aval.dtype)  # pyright: ignore[reportAttributeAccessIssue]
            if isinstance(t, SymbolicZero)
            else t
        ),
        tree,
        is_leaf=lambda t: isinstance(t, SymbolicZero),
    )


def _is_zero(tree) -> bool:
    return all(
        isinstance(t, SymbolicZero)
        for t in jax.tree.leaves(tree, is_leaf=lambda t: isinstance(t, SymbolicZero))
    )


def _arrays(params):
    return tuple(getattr(params, name) for name in _NAMES)


# `blocks`: (the loss's and gradient's block, the HVP's block)


@functools.partial(jax.custom_jvp, nondiff_argnums=(2,))
def _loss(params, chain: MarkovChain, blocks: tuple[int, int]) -> Scalar:
    L, _ = population_loss_and_grad(
        *_arrays(params), P=chain.P, pi=chain.pi, block=blocks[0], grad=False
    )
    return L


def _loss_jvp(blocks, primals, tangents):
    params, chain = primals
    d_params, d_chain = tangents
    if not _is_zero(d_chain):
        return jax.jvp(_dense_loss, primals, _instantiate(tangents))
    L, grads = _loss_and_grad(params, chain, blocks)
    dL = jnp.zeros((), L.dtype)
    for name in _NAMES:
        t = getattr(d_params, name)
        if not isinstance(t, SymbolicZero):
            dL = dL + jnp.vdot(getattr(grads, name), t)
    return L, dL


_loss.defjvp(_loss_jvp, symbolic_zeros=True)


@functools.partial(jax.custom_jvp, nondiff_argnums=(2,))
def _loss_and_grad(params, chain: MarkovChain, blocks: tuple[int, int]):
    L, grads = population_loss_and_grad(
        *_arrays(params), P=chain.P, pi=chain.pi, block=blocks[0]
    )
    assert grads is not None
    return L, type(params)(*grads)


def _loss_and_grad_jvp(blocks, primals, tangents):
    params, chain = primals
    d_params, d_chain = tangents
    if not _is_zero(d_chain):
        return jax.jvp(jax.value_and_grad(_dense_loss), primals, _instantiate(tangents))
    v = _arrays(_instantiate(d_params))
    L, grads, hvp = population_loss_grad_and_hvp(
        *_arrays(params),
        **{"V" + name[1:]: t for name, t in zip(_NAMES, v, strict=True)},
        P=chain.P,
        pi=chain.pi,
        block=blocks[1],
    )
    dL = sum(jnp.vdot(g, t) for g, t in zip(grads, v, strict=True))
    Params = type(params)
    return (L, Params(*grads)), (dL, Params(*hvp))


_loss_and_grad.defjvp(_loss_and_grad_jvp, symbolic_zeros=True)


def blocked_population_loss(
    params, chain: MarkovChain, block: int | None = None
) -> Scalar:
    r"""[`gradflow.population_loss`][] of the paper's model (a
    [`gradflow.Params`][]), computed over blocks of `block` query tokens
    (`None`: `default_block(d)` for the loss and its gradient,
    `default_hvp_block(d)` for Hessian-vector products), with its gradient
    and Hessian-vector products written out by hand
    (`docs/model.md`, "The blocked form"): `jax.grad` of it runs the blocked
    backward pass of this module, and forward-mode derivatives of that
    gradient (`jax.jvp`, `jax.linearize`, `jax.hessian`) run the blocked
    Hessian-vector product. Equal to the dense form to round-off.
    Derivatives with respect to the chain are those of the dense form."""
    if block is None:
        d = chain.d
        return _loss(params, chain, (default_block(d), default_hvp_block(d)))
    return _loss(params, chain, (int(block), int(block)))


__all__ = [
    "BLOCKED_MIN_D",
    "blocked_population_loss",
    "default_block",
    "default_hvp_block",
    "population_loss_and_grad",
    "population_loss_grad_and_hvp",
]
