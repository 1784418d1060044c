"""The modified flows of gradient descent (`gf.modified_loss`), full-batch GD
(`gf.SGD(batch_size=None)`) and the stochastic modified equation
(`gf.sgd_sde`): `docs/sgd.md`, "Modified flows"."""

import jax
import numpy as np
import pytest

import gradflow as gf


def _flat(tree) -> np.ndarray:
    return np.concatenate([np.ravel(np.asarray(x)) for x in jax.tree.leaves(tree)])


def _markov():
    problem = gf.problems.MarkovAttention(gf.chains.sticky(6, 0.5, 0.5, 0.05), width=8)
    return problem, problem.init(jax.random.key(0), 0.3)


def _linear():
    problem = gf.problems.DeepLinear.random(
        [3.0, 2.0, 1.0], n_in=5, n_out=4, hidden=(6,), seed=0
    )
    return problem, problem.init(jax.random.key(0), 0.5)


@pytest.mark.parametrize(
    "make",
    [pytest.param(_markov, marks=pytest.mark.slow), _linear],
    ids=["markov", "deep-linear"],
)
def test_gd_converges_to_modified_flows_at_orders_1_2_3(make):
    """GD at t = k lr lies O(lr), O(lr^2), O(lr^3) from the flows of order 0,
    1, 2: fitted slopes of log distance against log lr (as diffrax's
    test_ode_order), on untuned problems from a start away from the origin."""
    problem, p0 = make()
    lrs, t1 = (0.04, 0.02, 0.01), 2.0
    saveat, quiet = gf.SaveAt(ts=[0.0, t1], stages=False), gf.Run(progress=False)
    solver = gf.Solver("tsit5", rtol=1e-12, atol=1e-12)
    dist = np.zeros((3, 3))
    for i, lr in enumerate(lrs):
        gd = gf.train_sgd(problem, p0, t1=t1, sgd=gf.SGD(lr, None), saveat=saveat,
                          run=quiet)  # fmt: skip
        assert gd.ts[-1] == pytest.approx(t1)
        for order in range(3):
            flow = gf.flow(gf.modified_loss(problem, lr, order), params=p0, t1=t1,
                           saveat=saveat, run=quiet, solver=solver)  # fmt: skip
            last = jax.tree.map(lambda x: x[-1], flow.params)
            gd_last = jax.tree.map(lambda x: x[-1], gd.params)
            dist[i, order] = np.linalg.norm(_flat(gd_last) - _flat(last))
    for order in range(3):
        slope = np.polyfit(np.log(lrs), np.log(dist[:, order]), 1)[0]
        assert abs(slope - (order + 1)) < 0.2, (order, slope, dist)


def test_modified_field_against_its_loss_and_finite_differences():
    """Order 1 is minus the gradient of L + lr/4 |grad L|^2; order 2 differs
    from minus the gradient of its modified loss by -(lr^2/6) H^2 g exactly,
    which is not a gradient (its Jacobian is not symmetric); the third
    derivative term against central differences of H g."""
    problem, p0 = _linear()
    lr = 0.1
    m1, m2 = gf.modified_loss(problem, lr), gf.modified_loss(problem, lr, order=2)
    g1 = _flat(jax.grad(m1.modified)(p0))
    np.testing.assert_allclose(_flat(m1.vector_field(p0)), -g1, rtol=1e-12, atol=1e-14)

    flat, unravel = jax.flatten_util.ravel_pytree(p0)
    grad = lambda x: jax.flatten_util.ravel_pytree(jax.grad(problem.loss)(unravel(x)))[
        0
    ]  # noqa: E731
    H = jax.jacfwd(grad)(flat)
    g = grad(flat)
    h2g = H @ (H @ g)
    rest = _flat(m2.vector_field(p0)) + _flat(jax.grad(m2.modified)(p0))
    np.testing.assert_allclose(rest, -(lr**2) / 6 * h2g, rtol=1e-9, atol=1e-13)
    J = jax.jacfwd(lambda x: (lambda H: H @ (H @ grad(x)))(jax.jacfwd(grad)(x)))(flat)
    assert np.abs(J - J.T).max() > 1e-3 * np.abs(J).max()
    # third derivative along g twice, by central differences of H(x) g
    eps = 1e-4
    Tgg = (
        jax.jacfwd(grad)(flat + eps * g) @ g - jax.jacfwd(grad)(flat - eps * g) @ g
    ) / (2 * eps)
    expect = -g - lr / 2 * H @ g - lr**2 * (h2g / 3 + Tgg / 12)
    np.testing.assert_allclose(_flat(m2.vector_field(p0)), expect, rtol=1e-6, atol=1e-9)


def test_modified_flow_reports_the_original_loss():
    problem, p0 = _markov()
    m = gf.modified_loss(problem, 0.2)
    assert float(m.loss(p0)) == float(problem.loss(p0))
    assert gf.loss_levels(m) == gf.loss_levels(problem)
    problem, p0 = _linear()
    kw = dict(
        params=p0, t1=1.0, saveat=gf.SaveAt(stages=False), run=gf.Run(progress=False)
    )
    plain = gf.flow(problem, **kw)
    zero = gf.flow(gf.modified_loss(problem, 0.2, order=0), **kw)
    # order 0 is the flow, bit for bit
    np.testing.assert_array_equal(plain.loss, zero.loss)
    np.testing.assert_array_equal(_flat(plain.params), _flat(zero.params))


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(lr=0.0), "lr must be finite and > 0, got lr = 0.0"),
        (dict(lr=0.1, order=3), r"order must be one of \(0, 1, 2\), got 3"),
        (dict(lr=0.1, order=-1), "order must be >= 0"),
    ],
)
def test_modified_loss_bad_input(kwargs, match):
    problem, _ = _linear()
    with pytest.raises(ValueError, match=match):
        gf.modified_loss(problem, **kwargs)


def test_full_batch_gd_is_gradient_descent():
    """SGD(batch_size=None) takes theta - lr grad L exactly, on any problem."""
    problem, p0 = _linear()
    lr = 0.05
    run = gf.train_sgd(problem, p0, t1=3 * lr, sgd=gf.SGD(lr, None),
                       saveat=gf.SaveAt(ts=[0, 3 * lr], stages=False),
                       run=gf.Run(progress=False))  # fmt: skip
    p = p0
    for _ in range(3):
        p = jax.tree.map(lambda x, g: x - lr * g, p, jax.grad(problem.loss)(p))
    np.testing.assert_allclose(
        _flat(jax.tree.map(lambda x: x[-1], run.params)), _flat(p), rtol=1e-13
    )
    with pytest.raises(ValueError, match="num_sequences = 8 needs a batch_size"):
        gf.SGD(0.1, None, num_sequences=8)
