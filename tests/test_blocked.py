"""The blocked closed form with its hand-written gradient
(`gradflow/markov/blocked.py`): the same loss, gradient and
Hessian-vector products as the autodiff of the closed form, to round-off;
no intermediate larger than `block x d`; used by `MarkovAttention` from
d = 256 on and not below."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradflow as gf


# From this vocabulary size on the paper's problem computes its loss in the
# blocked form (docs/performance.md, "The closed form at large d").
BLOCKED_MIN_D = 256


def _hvp(loss, params, v, chain):
    return jax.jvp(lambda q: jax.grad(loss)(q, chain), (params,), (v,))[1]


def _rel(a, b) -> float:
    return max(
        float(np.max(np.abs(x - y)) / np.max(np.abs(x)))
        for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True)
    )


# d, m, block: padded blocks; one block; whole blocks, a block larger than d
CASES = [
    (37, 3, 16),
    (12, 4, 12),
    pytest.param(24, 4, 8, marks=pytest.mark.slow),
    pytest.param(9, 2, 16, marks=pytest.mark.slow),
]


@pytest.mark.parametrize("d, m, block", CASES)
def test_same_loss_gradient_and_hvp_as_autodiff(d, m, block):
    chain = gf.chains.random(d, seed=d)
    p = gf.init_params(d, m, 0.5, seed=0)  # O(1) entries: attention far from uniform
    v = gf.init_params(d, m, 1.0, seed=1)

    def blocked(q, c):
        return gf.population_loss(q, c, block=block)

    @jax.jit
    def both(p, v, chain):
        out = []
        for loss in (gf.population_loss, blocked):
            out.append((*jax.value_and_grad(loss)(p, chain), _hvp(loss, p, v, chain)))
        return out

    (L0, g0, h0), (L1, g1, h1) = both(p, v, chain)
    # Sums in another order: a few ulps of the loss (about log d) and of the
    # largest entry of each gradient leaf.
    eps = float(jnp.finfo(jnp.float64).eps)
    assert abs(float(L1 - L0)) <= 16 * eps * abs(float(L0))
    assert _rel(g0, g1) <= 1e3 * eps
    assert _rel(h0, h1) <= 1e3 * eps


def test_no_intermediate_larger_than_a_block():
    """The compiled gradient and HVP of the blocked form hold no `d x d`
    array besides the chain's `P`: every value in their programs (the scan's
    body included) has at most `block * d` entries, or is `P`."""
    d, m, block = 64, 4, 8
    chain = gf.chains.random(d, seed=0)
    p = gf.init_params(d, m, 0.5, seed=0)

    def loss(q, c):
        return gf.population_loss(q, c, block=block)

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

    for fn in (
        lambda q: jax.grad(loss)(q, chain),
        lambda q: _hvp(loss, q, q, chain),
    ):
        jaxpr = jax.make_jaxpr(fn)(p).jaxpr
        # the padded P of the query blocks is P itself (d is a multiple of block)
        big = [s for s in sizes(jaxpr) if s > block * d]
        assert all(s == d * d for s in big)
        assert len(big) <= 1  # at most P reshaped into blocks, once


def test_not_differentiable_in_the_chain():
    chain = gf.chains.random(5, seed=0)
    p = gf.init_params(5, 2, 0.5, seed=0)
    with pytest.raises(NotImplementedError, match="not differentiable with respect"):
        jax.grad(lambda c: gf.population_loss(p, c, block=2))(chain)


def test_markov_attention_uses_it_from_the_threshold_on():
    """Below `BLOCKED_MIN_D` the problem's loss is the autodiff form (every
    recorded small-d result bit for bit); from it on, the blocked form, in
    blocks of `gf.markov.default_block(d)` query tokens."""
    for d, blocked in ((BLOCKED_MIN_D - 1, False), (BLOCKED_MIN_D, True)):
        problem = gf.problems.MarkovAttention(gf.chains.sticky(d, 0.5, 0.5, 0.0))
        p = jax.eval_shape(problem.init, jax.random.key(0), 1e-3)
        jaxpr = str(jax.make_jaxpr(problem.loss)(p))
        assert ("scan" in jaxpr) == blocked
    block = gf.markov.default_block
    assert block(2048) * 2048 <= 2**16 and block(2048) >= 16
    assert block(100) <= 100
