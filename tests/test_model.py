import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import random_params
from reference import loss_and_grad, sample_sequences

import gradflow as gf


CHAINS = [
    gf.chains.sticky(6, 0.5, 0.5, 0.05),
    gf.chains.random(5, seed=1, concentration=0.3),
    gf.chains.random(9, seed=2, concentration=2.0),
    gf.chains.zipf(4, exponent=1.5, rho=0.2),
]


# Compiled once per chain size and shared by the tests below, which all take
# width 4 (one program per d instead of one eager operation per step and shape
# for each test's own width: each test's width is not what it checks).
WIDTH = 4
_loss = jax.jit(gf.population_loss)
_loss_and_grad = jax.jit(jax.value_and_grad(gf.population_loss))


def _zeros(d, m):
    return gf.Params(
        jnp.zeros((m, d)), jnp.zeros((d, m)), jnp.zeros((m, m)), jnp.zeros((m, m))
    )


@pytest.mark.parametrize("chain", CHAINS)
def test_loss_at_origin_is_log_d_and_critical(chain):
    params = _zeros(chain.d, WIDTH)
    loss, grad = _loss_and_grad(params, chain)
    assert float(loss) == pytest.approx(np.log(chain.d), rel=1e-15)
    for g in jax.tree.leaves(grad):
        assert np.all(np.asarray(g) == 0)
    np.testing.assert_allclose(
        gf.attention(params, chain),
        np.tile(np.asarray(chain.pi), (chain.d, 1)),
        rtol=1e-15,
    )


@pytest.mark.parametrize("chain", CHAINS)
@pytest.mark.parametrize("scale", [0.3, 1.0, 3.0])
def test_loss_above_conditional_entropy(chain, scale):
    floor = float(chain.conditional_entropy)
    for seed in range(5):
        loss = float(_loss(random_params(chain.d, WIDTH, scale, seed), chain))
        assert np.isfinite(loss) and loss >= floor


@pytest.mark.parametrize("chain", CHAINS)
def test_matches_independent_numpy_gradient(chain):
    for seed in range(3):
        params = random_params(chain.d, WIDTH, 0.7, seed)
        loss, grad = _loss_and_grad(params, chain)
        ref_loss, ref_grad = loss_and_grad(
            *(np.asarray(x) for x in (params.W0, params.W1, params.WQ, params.WK)),
            np.asarray(chain.P),
            np.asarray(chain.pi),
        )
        assert float(loss) == pytest.approx(ref_loss, rel=1e-13)
        for g, r in zip((grad.W0, grad.W1, grad.WQ, grad.WK), ref_grad):
            np.testing.assert_allclose(g, r, rtol=1e-10, atol=1e-13)


@pytest.mark.parametrize("chain", CHAINS[:3])
def test_gradient_matches_central_differences(chain):
    params = random_params(chain.d, WIDTH, 0.8, 11)
    _, grad = _loss_and_grad(params, chain)
    flat, unravel = jax.flatten_util.ravel_pytree(params)
    gflat, _ = jax.flatten_util.ravel_pytree(grad)

    def loss(x):
        return _loss(unravel(x), chain)

    h = 1e-6
    rng = np.random.default_rng(0)
    for k in rng.choice(flat.size, size=12, replace=False):
        e = jnp.zeros_like(flat).at[k].set(h)
        fd = (loss(flat + e) - loss(flat - e)) / (2 * h)
        # central differences: error O(h^2 |L'''|) + O(eps |L| / h) ~ 1e-10
        assert abs(float(fd) - float(gflat[k])) < 1e-8


def test_attention_rows_sum_to_one_for_extreme_scores():
    chain = gf.chains.random(6, seed=0)
    params = random_params(6, 4, 1.0, 3)
    # scale WQ so that scores reach ~1e3 and beyond
    big = gf.Params(params.W0, params.W1, 300.0 * params.WQ, 300.0 * params.WK)
    A = np.asarray(gf.attention(big, chain))
    S = np.asarray((big.WQ @ big.W0).T @ (big.WK @ big.W0))
    assert np.abs(S).max() > 1e3
    assert np.all(np.isfinite(A)) and np.all(A >= 0)
    np.testing.assert_allclose(A.sum(axis=1), 1.0, atol=1e-14)
    assert np.isfinite(float(gf.population_loss(big, chain)))


def test_linear_regime_at_origin_matches_spec():
    """Near 0 the flow is dW1/dt = (pi - 1/d)(W0 pi)^T, dW0/dt = W1^T (pi - 1/d) pi^T."""
    chain = CHAINS[1]
    d = chain.d
    params = random_params(d, WIDTH, 1e-5, 4)
    _, grad = _loss_and_grad(params, chain)
    pi = np.asarray(chain.pi)
    c = pi - 1 / d
    W0, W1 = np.asarray(params.W0), np.asarray(params.W1)
    dW1 = np.outer(c, W0 @ pi)
    dW0 = np.outer(W1.T @ c, pi)
    # corrections are one order higher in the scale 1e-5
    np.testing.assert_allclose(-np.asarray(grad.W1), dW1, rtol=1e-4, atol=1e-14)
    np.testing.assert_allclose(-np.asarray(grad.W0), dW0, rtol=1e-4, atol=1e-14)
    # WQ, WK are driven at third order: their gradient is ~scale^3
    assert np.abs(np.asarray(grad.WQ)).max() < 1e-13


def test_population_loss_is_limit_of_finite_context_model():
    """Monte-Carlo estimates of the finite-context loss approach the closed form."""
    chain = gf.chains.random(4, seed=5, concentration=1.0)
    params = random_params(4, 4, 1.0, 9)
    exact = float(gf.population_loss(params, chain))
    P, pi = np.asarray(chain.P), np.asarray(chain.pi)
    loss_fn = jax.jit(gf.finite_context_loss)
    errors = []
    for context in (4, 32, 256):
        seqs = sample_sequences(P, pi, num=20_000, length=context + 1, seed=context)
        errors.append(abs(float(loss_fn(params, jnp.asarray(seqs))) - exact))
    # bias shrinks like 1/context; the last one is within Monte-Carlo noise
    # (standard error of a mean of 20000 cross-entropies of spread ~1: ~0.007)
    assert errors[0] > errors[1] > errors[2]
    assert errors[2] < 0.02
    assert errors[0] > 3 * errors[2]


def test_finite_context_single_sequence_by_hand():
    params = random_params(3, 2, 1.0, 1)
    seq = jnp.array([0, 2, 2, 1, 0])
    E, W1 = np.asarray(params.W0), np.asarray(params.W1)
    keys = E[:, [0, 2, 2, 1]]
    q = np.asarray(params.WQ) @ keys[:, -1]
    scores = q @ (np.asarray(params.WK) @ keys)
    alpha = np.exp(scores - scores.max())
    alpha /= alpha.sum()
    logits = W1 @ (keys @ alpha)
    expected = -(logits[0] - np.log(np.sum(np.exp(logits))))
    assert float(gf.finite_context_loss(params, seq)) == pytest.approx(
        expected, rel=1e-13
    )


def test_params_shape_checks():
    m, d = 3, 4
    W0 = jnp.zeros((m, d))
    with pytest.raises(
        ValueError, match=r"Params.W1 has shape \(3, 4\) but W0 has shape \(3, 4\)"
    ):
        gf.Params(W0, jnp.zeros((m, d)), jnp.zeros((m, m)), jnp.zeros((m, m)))
    with pytest.raises(ValueError, match=r"Params.WK has shape \(2, 2\)"):
        gf.Params(W0, jnp.zeros((d, m)), jnp.zeros((m, m)), jnp.zeros((2, 2)))
    with pytest.raises(
        ValueError, match="Params.W0 must be an array with at least 2 dimensions"
    ):
        gf.Params(jnp.zeros(3), jnp.zeros((d, m)), jnp.zeros((m, m)), jnp.zeros((m, m)))
    p = gf.Params(W0=W0, W1=jnp.zeros((d, m)), WQ=jnp.eye(m), WK=jnp.eye(m))
    assert (p.m, p.d, p.num_parameters) == (3, 4, 2 * 12 + 2 * 9)


def test_init_params_draws_are_jax_random_normal():
    # init_params draws through one flat, power-of-two-long vector per matrix
    # (gradflow/_random.py, one compilation per size instead of per shape);
    # the numbers are jax.random.normal's for the matrix's own shape, exactly.
    cases = [(6, 8, "float64", gf.Model()), (3, 2, "float32", gf.Model())]
    cases += [(3, 2, "float64", gf.Model(heads=2, value=True))]
    for d, m, dtype, model in cases:
        p = gf.init_params(d, m, 0.3, seed=2, dtype=dtype, model=model)
        lh = () if model.minimal else (model.layers, model.heads)
        shapes = [(m, d), (d, m), (*lh, m, m), (*lh, m, m)]
        shapes += [] if model.minimal else [(*lh, m, m)]
        keys = jax.random.split(jax.random.key(2), len(shapes))
        names = ["W0", "W1", "WQ", "WK", "WV"]
        for name, key, shape in zip(names, keys, shapes):
            direct = 0.3 * jax.random.normal(key, shape, dtype=dtype)
            np.testing.assert_array_equal(getattr(p, name), direct, err_msg=name)
            assert getattr(p, name).dtype == direct.dtype
    # without partitionable Threefry there is no prefix property: the direct draw
    with jax.threefry_partitionable(False):
        p = gf.init_params(3, 2, 0.3, seed=2)
        direct = 0.3 * jax.random.normal(
            jax.random.split(jax.random.key(2), 4)[0], (2, 3)
        )
        np.testing.assert_array_equal(p.W0, direct)


def test_random_params_draws_are_jax_random_normal():
    # the tests' own starts (tests/conftest.py) draw flat as init_params does,
    # one compilation per size; the numbers are the direct draws', exactly
    p = random_params(4, 3, 0.05, 22)
    keys = jax.random.split(jax.random.key(22), 4)
    shapes = [(3, 4), (4, 3), (3, 3), (3, 3)]
    for x, key, shape in zip(jax.tree.leaves(p), keys, shapes, strict=True):
        direct = 0.05 * jax.random.normal(key, shape)
        np.testing.assert_array_equal(x, direct)
        assert x.dtype == direct.dtype


def test_init_params_distribution_and_determinism():
    p = gf.init_params(50, 40, 0.01, seed=3)
    q = gf.init_params(50, 40, 0.01, seed=3)
    flat = np.concatenate([np.ravel(x) for x in jax.tree.leaves(p)])
    assert abs(flat.std() - 0.01) < 0.0005 and abs(flat.mean()) < 0.0005
    assert all(
        np.array_equal(a, b) for a, b in zip(jax.tree.leaves(p), jax.tree.leaves(q))
    )
    assert p.W0.dtype == jnp.float64
    with pytest.raises(ValueError, match="init_scale must be finite and > 0, got -1.0"):
        gf.init_params(4, 3, -1.0)
    with pytest.raises(
        ValueError, match="width must be an integer >= 1, got width = 0"
    ):
        gf.init_params(4, 0, 1.0)
