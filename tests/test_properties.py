"""Property tests (hypothesis) over random valid chains and parameters."""

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import given, settings, strategies as st

import gradflow as gf


SETTINGS = settings(deadline=None, max_examples=25, derandomize=True)


@st.composite
def chains(draw, min_d=2, max_d=6):
    d = draw(st.integers(min_d, max_d))
    raw = draw(st.lists(st.floats(1e-3, 1.0), min_size=d * d, max_size=d * d))
    P = np.array(raw).reshape(d, d)
    # sparsify some entries but keep a positive diagonal (aperiodic) and a
    # positive cycle 0 -> 1 -> ... -> d-1 -> 0 (irreducible)
    mask = np.array(
        draw(st.lists(st.booleans(), min_size=d * d, max_size=d * d))
    ).reshape(d, d)
    P = np.where(mask, 0.0, P)
    P[np.arange(d), np.arange(d)] += 0.1
    P[np.arange(d), (np.arange(d) + 1) % d] += 0.1
    return gf.MarkovChain(P / P.sum(axis=1, keepdims=True))


@st.composite
def chain_and_params(draw, max_scale=3.0):
    chain = draw(chains())
    m = draw(st.integers(1, 4))
    scale = draw(st.floats(0.01, max_scale))
    seed = draw(st.integers(0, 2**16))
    return chain, gf.init_params(chain.d, m, scale, seed)


_loss = jax.jit(gf.population_loss)
_grad = jax.jit(jax.grad(gf.population_loss))


@SETTINGS
@given(chains(2, 12))
def test_pi_is_stationary(chain):
    P, pi = np.asarray(chain.P), np.asarray(chain.pi)
    assert np.all(pi > 0) and abs(pi.sum() - 1) < 1e-12
    assert np.max(np.abs(pi @ P - pi)) < 1e-12


@SETTINGS
@given(chain_and_params())
def test_loss_finite_and_above_conditional_entropy(cp):
    chain, params = cp
    loss = float(_loss(params, chain))
    assert np.isfinite(loss)
    assert loss >= float(chain.conditional_entropy) - 1e-12


@SETTINGS
@given(chain_and_params(max_scale=1.5), st.integers(0, 2**16))
def test_directional_derivative_matches_finite_differences(cp, seed):
    chain, params = cp
    direction = gf.init_params(chain.d, params.m, 1.0, seed)
    g = _grad(params, chain)
    exact = sum(
        jnp.vdot(a, b) for a, b in zip(jax.tree.leaves(g), jax.tree.leaves(direction))
    )
    h = 1e-5

    def at(s):
        return _loss(jax.tree.map(lambda p, v: p + s * v, params, direction), chain)

    fd = (at(h) - at(-h)) / (2 * h)
    # central difference: O(h^2) truncation plus O(eps/h) round-off
    assert abs(float(fd) - float(exact)) < 1e-6 * max(1.0, abs(float(exact)))


@SETTINGS
@given(chains(), st.integers(0, 2**16), st.floats(1e3, 1e5))
def test_attention_rows_sum_to_one_for_extreme_scores(chain, seed, size):
    params = gf.init_params(chain.d, 3, 1.0, seed)
    # rescale WQ so that the largest score is `size`
    S = (params.WQ @ params.W0).T @ (params.WK @ params.W0)
    factor = size / float(jnp.max(jnp.abs(S)))
    big = gf.Params(params.W0, params.W1, factor * params.WQ, params.WK)
    A = np.asarray(gf.attention(big, chain))
    assert np.all(np.isfinite(A)) and np.all(A >= 0)
    np.testing.assert_allclose(A.sum(axis=1), 1.0, atol=1e-13)
    assert np.isfinite(float(_loss(big, chain)))
