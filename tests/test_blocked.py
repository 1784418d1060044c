"""The blocked closed form with its hand-written gradient and Hessian-vector
product (`gradflow/markov/blocked.py`, `docs/model.md`, "The
blocked form"): the same loss, gradient and Hessian-vector products as the
dense closed form differentiated by JAX, to round-off; no intermediate larger
than `block x d`; what `gf.population_loss` uses from d = 256 on and not
below."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradflow as gf


BLOCKED_MIN_D = gf.markov.BLOCKED_MIN_D
default_block = gf.markov.default_block
default_hvp_block = gf.markov.default_hvp_block


def _dense(q, c):
    return gf.population_loss(q, c, block="dense")


def _blocked(block):
    def loss(q, c):
        return gf.population_loss(q, c, block=block)

    return loss


def _hvp(loss, params, v, chain):
    return jax.jvp(lambda q: jax.grad(loss)(q, chain), (params,), (v,))[1]


def _rel(a, b) -> float:
    """The largest difference of each leaf, relative to the leaf's largest entry."""
    return max(
        float(np.max(np.abs(x - y)) / np.max(np.abs(x)))
        for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True)
    )


def _cast(tree, dtype):
    return jax.tree.map(lambda x: jnp.asarray(x, dtype), tree)


def _setup(d, m, dtype=jnp.float64):
    chain = _cast(gf.chains.random(d, seed=d), dtype)
    # O(1) entries: attention and logits far from uniform
    p = _cast(gf.init_params(d, m, 0.5, seed=0), dtype)
    v = _cast(gf.init_params(d, m, 1.0, seed=1), dtype)
    return chain, p, v


# d, m, block, dtype: padded blocks; one block; a block larger than d; float32
CASES = [
    (37, 3, 16, jnp.float64),
    (12, 4, 12, jnp.float32),
    pytest.param(21, 3, 8, jnp.float32, marks=pytest.mark.slow),
    pytest.param(24, 4, 8, jnp.float64, marks=pytest.mark.slow),
    pytest.param(9, 2, 16, jnp.float64, marks=pytest.mark.slow),
    pytest.param(50, 5, 7, jnp.float32, marks=pytest.mark.slow),
]


@pytest.mark.parametrize("d, m, block, dtype", CASES)
def test_same_loss_gradient_and_hvp_as_dense(d, m, block, dtype):
    chain, p, v = _setup(d, m, dtype)
    blocked = _blocked(block)
    # three directions at once, as a solver's vmapped Jacobian-vector products
    vs = jax.tree.map(lambda x: jnp.stack([x, 2 * x[::-1], -x]), v)

    @jax.jit
    def both(p, v, vs, chain):
        out = []
        for loss in (_dense, blocked):
            L, g = jax.value_and_grad(loss)(p, chain)
            # (chain closed over: linearised in the parameters only)
            _, lin = jax.linearize(lambda q, f=loss: jax.grad(f)(q, chain), p)
            out.append((L, g, _hvp(loss, p, v, chain), lin(v), jax.vmap(lin)(vs)))
        return out

    (L0, g0, h0, l0, b0), (L1, g1, h1, l1, b1) = both(p, v, vs, chain)
    assert g1.W0.dtype == dtype and h1.W0.dtype == dtype
    # Sums in another order: a few ulps of the loss (about log d) and of the
    # largest entry of each gradient and HVP leaf.
    eps = float(jnp.finfo(dtype).eps)
    assert abs(float(L1 - L0)) <= 16 * eps * abs(float(L0))
    assert _rel(g0, g1) <= 1e3 * eps
    assert _rel(h0, h1) <= 1e3 * eps
    assert _rel(l0, l1) <= 1e3 * eps
    assert _rel(b0, b1) <= 1e3 * eps


def test_gradient_and_hvp_match_central_differences():
    """The hand-written gradient against central differences of the blocked
    loss, and the hand-written HVP against central differences of the
    hand-written gradient, along random directions (d not a multiple of the
    block)."""
    d, m, block = 13, 3, 5
    chain, p, _ = _setup(d, m)
    loss = jax.jit(_blocked(block))
    grad = jax.jit(jax.grad(_blocked(block)))
    rng = np.random.default_rng(0)
    h = 1e-5

    def at(s, u):
        return jax.tree.map(lambda x, y: x + s * y, p, u)

    for _ in range(3):
        u = jax.tree.map(lambda x: jnp.asarray(rng.standard_normal(x.shape)), p)
        fd = (float(loss(at(h, u), chain)) - float(loss(at(-h, u), chain))) / (2 * h)
        exact = sum(
            float(jnp.vdot(g, w))
            for g, w in zip(jax.tree.leaves(grad(p, chain)), jax.tree.leaves(u))
        )
        assert fd == pytest.approx(exact, rel=1e-7, abs=1e-10)
        up, down = grad(at(h, u), chain), grad(at(-h, u), chain)
        fd_h = jax.tree.map(lambda a, b: (a - b) / (2 * h), up, down)
        assert _rel(_hvp(_blocked(block), p, u, chain), fd_h) <= 1e-7


def test_hessian_through_the_blocked_form():
    """`jax.hessian` (forward over reverse) runs the hand-written rules and
    equals the dense Hessian."""
    d, m, block = 7, 2, 3
    chain, p, _ = _setup(d, m)
    H0 = jax.jit(jax.hessian(_dense))(p, chain)
    H1 = jax.jit(jax.hessian(_blocked(block)))(p, chain)
    assert _rel(H0, H1) <= 1e-12


def test_batched_hvps_are_the_single_ones():
    """Vmapped over directions (a solver's refresh), over parameters (the
    members of a sweep) and over both, the blocked gradient and HVP equal
    the single ones, one at a time, to round-off (the batching rule of
    `_t_dot_tangent` runs in each of these: one operand batched, or both)."""
    d, m, block = 20, 3, 8
    chain, p, v = _setup(d, m)
    loss = _blocked(block)
    ps = jax.tree.map(lambda x: jnp.stack([x, 0.5 * x[::-1], -x]), p)
    vs = jax.tree.map(lambda x: jnp.stack([x, 2 * x[::-1], -x]), v)

    @jax.jit
    def grad(q):
        return jax.grad(loss)(q, chain)

    @jax.jit
    def hvp(q, u):
        return _hvp(loss, q, u, chain)

    def at(tree, k):
        return jax.tree.map(lambda x: x[k], tree)

    def each(fn, *trees):
        outs = [fn(*(at(t, k) for t in trees)) for k in range(3)]
        return jax.tree.map(lambda *xs: jnp.stack(xs), *outs)

    _, lin = jax.linearize(grad, p)
    assert _rel(jax.jit(jax.vmap(lin))(vs), each(lin, vs)) <= 1e-12
    assert _rel(jax.jit(jax.vmap(grad))(ps), each(grad, ps)) <= 1e-12
    hvp_members = jax.jit(jax.vmap(hvp, in_axes=(0, None)))(ps, v)
    assert _rel(hvp_members, each(lambda q: hvp(q, v), ps)) <= 1e-12
    assert _rel(jax.jit(jax.vmap(hvp))(ps, vs), each(hvp, ps, vs)) <= 1e-12
    # members x directions
    nested = jax.jit(jax.vmap(jax.vmap(hvp, in_axes=(None, 0)), in_axes=(0, None)))
    full = nested(ps, vs)
    for k in range(3):
        q = at(ps, k)
        expect = each(lambda u, q=q: hvp(q, u), vs)
        assert _rel(at(full, k), expect) <= 1e-12


def test_vmapped_hvp_transposes_no_block_of_directions():
    """The compiled HVPs vmapped over `r` directions (a solver's refresh)
    transpose no `(r, block, d)` array in the scan's body: each product of a
    direction's block with a shared operand runs as a batched product
    (`_t_dot_tangent`'s batching rule), not as one product over the directions'
    blocks side by side, which XLA:CPU laid out by transposing them, three
    times per block (`docs/performance.md`, "Issue 42, ninth pass: where
    the text flow's time goes")."""
    d, m, block, r = 64, 4, 16, 8
    chain, p, v = _setup(d, m)
    loss = _blocked(block)
    vs = jax.tree.map(lambda x: jnp.stack([x * (k + 1) for k in range(r)]), v)

    def batched(q, us):
        _, lin = jax.linearize(lambda s: jax.grad(loss)(s, chain), q)
        return jax.vmap(lin)(us)

    hlo = jax.jit(batched).lower(p, vs).compile().as_text()
    shapes = re.findall(r"f64\[([\d,]+)\]\{[\d,]*\} transpose\(", hlo)
    big = [
        s for s in shapes if np.prod([int(n) for n in s.split(",")]) >= r * block * d
    ]
    assert big == []


def test_no_intermediate_larger_than_a_block():
    """The compiled gradient, HVP and linearised gradient of the blocked form
    hold no array larger than a block, `block x d` entries: every value in
    their programs (the scan's body included) is at most that, the chain's
    `P` (an input) is sliced block by block and never copied, also when `d`
    is not a multiple of the block."""
    d, m, block = 60, 4, 8
    chain, p, _ = _setup(d, m)
    loss = _blocked(block)

    def subjaxprs(value):
        if isinstance(value, jax.extend.core.ClosedJaxpr):
            yield value.jaxpr
        elif isinstance(value, jax.extend.core.Jaxpr):
            yield value
        elif isinstance(value, (tuple, list)):
            for v in value:
                yield from subjaxprs(v)

    def sizes(jaxpr):
        for eqn in jaxpr.eqns:
            for var in eqn.outvars:
                yield int(np.prod(var.aval.shape))
            for value in eqn.params.values():
                for sub in subjaxprs(value):
                    yield from sizes(sub)

    def linearized(q):
        _, lin = jax.linearize(lambda r: jax.grad(loss)(r, chain), q)
        return lin(q), lin(q)  # the linear map called twice

    for fn in (
        lambda q: jax.grad(loss)(q, chain),
        lambda q: _hvp(loss, q, q, chain),
        linearized,
    ):
        assert max(sizes(jax.make_jaxpr(fn)(p).jaxpr)) <= block * d


def test_chain_derivatives_are_the_dense_ones():
    d, m, block = 10, 3, 4
    chain, p, v = _setup(d, m)

    def in_chain(loss):
        return jax.grad(lambda c: loss(p, c))(chain)

    assert _rel(in_chain(_dense), in_chain(_blocked(block))) <= 1e-12
    # the gradient's derivative in the chain (forward over reverse)
    dc = jax.tree.map(lambda x: 1e-3 * x, chain)

    def mixed(loss):
        return jax.jvp(lambda c: jax.grad(loss)(p, c), (chain,), (dc,))[1]

    assert _rel(mixed(_dense), mixed(_blocked(block))) <= 1e-12


def test_population_loss_switches_at_the_threshold():
    """Below `BLOCKED_MIN_D`, `gf.population_loss` is the dense form (every
    recorded small-d result bit for bit) for its value, gradient and HVP;
    from it on, the blocked form, in `gf.population_loss` itself and so in
    `MarkovAttention`."""
    for d, blocked in ((BLOCKED_MIN_D - 1, False), (BLOCKED_MIN_D, True)):
        chain = gf.chains.sticky(d, 0.5, 0.5, 0.0)
        p = gf.init_params(d, 2, 0.3, seed=0)
        problem = gf.problems.MarkovAttention(chain, width=2)
        for loss in (gf.population_loss, lambda q, c, f=problem.loss: f(q)):
            grad = jax.make_jaxpr(jax.grad(loss))(p, chain)
            hvp = jax.make_jaxpr(_hvp, static_argnums=0)(loss, p, p, chain)
            assert ("scan" in str(grad)) == blocked
            assert ("scan" in str(hvp)) == blocked
    d = 8  # the snapshot cases' size: the default is the dense form exactly
    chain, p, v = _setup(d, 3)
    for fn in (
        lambda loss: jax.value_and_grad(loss)(p, chain),
        lambda loss: _hvp(loss, p, v, chain),
    ):
        for a, b in zip(
            jax.tree.leaves(fn(gf.population_loss)), jax.tree.leaves(fn(_dense))
        ):
            assert np.array_equal(a, b)


def test_default_blocks():
    for d in (2, 100, 256, 1024, 2048, 8192, 100_000):
        for block in (default_block(d), default_hvp_block(d)):
            assert 1 <= block <= min(d, 512)
            assert block == d or block >= 16
    assert default_block(1024) * 1024 == 2**18
    assert default_hvp_block(1024) * 1024 == 2**17
    assert default_hvp_block(2048) == 128  # at least 128 up to d = 2048
    assert default_hvp_block(1500) == 128
    assert default_hvp_block(4096) == 32
    assert default_block(2048) == default_block(1500) == 256  # up to 2048
    assert default_block(4096) == 64
    assert default_block(100) == 100
