"""The modified flows of gradient descent (`gf.modified_loss`), full-batch GD
(`gf.SGD(batch_size=None)`) and the stochastic modified equation
(`gf.sgd_sde`): `docs/sgd.md`, "Modified flows"."""

import equinox as eqx
import jax
import jax.flatten_util
import jax.numpy as jnp
import numpy as np
import pytest

import gradflow as gf


def _flat(tree) -> np.ndarray:
    return np.concatenate([np.ravel(np.asarray(x)) for x in jax.tree.leaves(tree)])


# Compiled, one program per problem and term (eagerly, each operation of a
# Hessian-vector product compiled on its own, hundreds per test): a modified
# loss's vector field and the gradient of its modified loss, and a term of the
# SDE (its drift or its diffusion matrix) at t = 0.
_vector_field = eqx.filter_jit(lambda m, p: m.vector_field(p))
_modified_grad = eqx.filter_jit(lambda m, p: jax.grad(m.modified)(p))
_term_at_0 = eqx.filter_jit(lambda term, y, args: term(0.0, y, args))


def _markov():
    problem = gf.problems.MarkovAttention(gf.chains.sticky(6, 0.5, 0.5, 0.05), width=8)
    return problem, problem.init(jax.random.key(0), 0.3)


def _linear():
    problem = gf.problems.DeepLinear.random(
        [3.0, 2.0, 1.0], n_in=5, n_out=4, hidden=(6,), seed=0
    )
    return problem, problem.init(jax.random.key(0), 0.5)


# The flows of `_linear` in this module take one solver and no stages, so that
# they share compiled solves (one per vector field: the flow and the modified
# flows of order 0, 1, 2; a solve's save times and t1 are not compiled in).
TIGHT = gf.Solver("tsit5", rtol=1e-12, atol=1e-12)


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
    solver = TIGHT
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
    g1 = _flat(_modified_grad(m1, p0))
    np.testing.assert_allclose(
        _flat(_vector_field(m1, p0)), -g1, rtol=1e-12, atol=1e-14
    )

    flat, unravel = jax.flatten_util.ravel_pytree(p0)
    grad = lambda x: jax.flatten_util.ravel_pytree(jax.grad(problem.loss)(unravel(x)))[
        0
    ]  # noqa: E731
    hessian = jax.jit(jax.jacfwd(grad))  # (compiled once, used three times)
    H = hessian(flat)
    g = jax.jit(grad)(flat)
    h2g = H @ (H @ g)
    field2 = _flat(_vector_field(m2, p0))
    rest = field2 + _flat(_modified_grad(m2, p0))
    np.testing.assert_allclose(rest, -(lr**2) / 6 * h2g, rtol=1e-9, atol=1e-13)
    J = jax.jit(
        jax.jacfwd(lambda x: (lambda H: H @ (H @ grad(x)))(jax.jacfwd(grad)(x)))
    )(flat)
    assert np.abs(J - J.T).max() > 1e-3 * np.abs(J).max()
    # third derivative along g twice, by central differences of H(x) g
    eps = 1e-4
    Tgg = (hessian(flat + eps * g) @ g - hessian(flat - eps * g) @ g) / (2 * eps)
    expect = -g - lr / 2 * H @ g - lr**2 * (h2g / 3 + Tgg / 12)
    np.testing.assert_allclose(field2, expect, rtol=1e-6, atol=1e-9)


def test_modified_flow_reports_the_original_loss():
    problem, p0 = _markov()
    m = gf.modified_loss(problem, 0.2)
    assert float(m.loss(p0)) == float(problem.loss(p0))
    assert gf.loss_levels(m) == gf.loss_levels(problem)
    problem, p0 = _linear()
    kw = dict(params=p0, t1=1.0, saveat=gf.SaveAt(stages=False),
              run=gf.Run(progress=False), solver=TIGHT)  # fmt: skip
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


# -- the stochastic modified equation ------------------------------------------------


class Discrete(gf.SampledProblem, gf.EnumeratedProblem):
    """A nonlinear regression on K fixed inputs drawn with weights w: its
    sampler and its sum over the sample space describe the same examples."""

    X: jax.Array
    Y: jax.Array
    w: jax.Array

    def example_losses(self, params):
        a, v = params
        return 0.5 * (jnp.tanh(self.X @ a) @ v - self.Y) ** 2

    def example_weights(self):
        return self.w

    def loss(self, params):
        return self.w @ self.example_losses(params)

    def init(self, key, init_scale):
        ka, kv = jax.random.split(key)
        n, h = self.X.shape[1], 3
        return (init_scale * jax.random.normal(ka, (n, h)),
                init_scale * jax.random.normal(kv, (h,)))  # fmt: skip

    def sample(self, key, n):
        return jax.random.choice(key, self.w.shape[0], (n,), p=self.w)

    def sample_loss(self, params, batch):
        return jnp.mean(self.example_losses(params)[batch])


def _discrete():
    rng = np.random.default_rng(0)
    K, n = 7, 2
    w = rng.uniform(0.5, 1.5, K)
    problem = Discrete(jnp.asarray(rng.standard_normal((K, n))),
                       jnp.asarray(rng.standard_normal(K)), jnp.asarray(w / w.sum()))  # fmt: skip
    return problem, problem.init(jax.random.key(1), 0.8)


def _diffusion(problem, params, samples, lr=0.2, batch=4, key=None, compensate=False):
    from jax.flatten_util import ravel_pytree

    # the SDE's two terms themselves (the pieces under test: a solve shows
    # neither its drift nor its diffusion matrix)
    from gradflow._sgd.sde import _Diffusion, _Drift

    flat, unravel = ravel_pytree(params)
    key = jax.random.key(0) if key is None else key
    args = (
        problem,
        jnp.asarray(lr),
        jnp.asarray(np.sqrt(lr / batch)),
        key,
        jnp.asarray(lr / 2),
    )
    drift = _term_at_0(_Drift(1, unravel, compensate), flat, args)
    diffusion = _term_at_0(_Diffusion(samples, unravel), flat, args)
    return np.asarray(drift), np.asarray(diffusion)


def _empirical(problem, params, n, key):
    """Per-example gradients of `n` draws of the sampler: `(n, parameters)`."""
    batch = problem.sample(key, n)

    def one(x):
        grad = jax.grad(problem.sample_loss)(params, x[None])
        return jax.flatten_util.ravel_pytree(grad)[0]

    return np.asarray(jax.lax.map(one, batch, batch_size=512))


@pytest.mark.parametrize("make", [_discrete, _markov], ids=["discrete", "markov"])
def test_sde_drift_is_the_modified_field(make):
    problem, p0 = make()
    drift, _ = _diffusion(problem, p0, None)
    expect = _flat(_vector_field(gf.modified_loss(problem, 0.2), p0))
    np.testing.assert_allclose(drift, expect, rtol=1e-12, atol=1e-15)
    # compensated for the Euler step dt = lr / 2: the order-1 field at lr / 2
    drift, _ = _diffusion(problem, p0, None, compensate=True)
    expect = _flat(_vector_field(gf.modified_loss(problem, 0.1), p0))
    np.testing.assert_allclose(drift, expect, rtol=1e-12, atol=1e-15)


@pytest.mark.slow
def test_sde_solve_follows_the_modified_flow_to_second_order():
    """Without noise (a huge batch), the Euler solve with its default step
    dt = lr / 2 lies O(lr^2) from the order-1 modified flow (fitted slope 2;
    without the compensation of the step it is O(lr))."""
    problem, p0 = _linear()
    t1, quiet = 2.0, gf.Run(progress=False)
    saveat = gf.SaveAt(ts=[0.0, t1], stages=False)
    lrs = (0.04, 0.02, 0.01)
    dist = {True: [], False: []}
    for lr in lrs:
        flow = gf.flow(gf.modified_loss(problem, lr), params=p0, t1=t1, saveat=saveat,
                       run=quiet, solver=gf.Solver("tsit5", rtol=1e-12, atol=1e-12))  # fmt: skip
        end = _flat(jax.tree.map(lambda x: x[-1], flow.params))
        for compensate in (True, False):
            sde = gf.sgd_sde(problem, p0, seeds=[0], t1=t1, saveat=saveat, run=quiet,
                             sgd=gf.SGD(lr, 10**15),
                             solver=gf.SDESolver(compensate=compensate))  # fmt: skip
            dist[compensate].append(
                np.linalg.norm(
                    _flat(jax.tree.map(lambda x: x[-1], sde[0].params)) - end
                )
            )
    slope = {k: np.polyfit(np.log(lrs), np.log(v), 1)[0] for k, v in dist.items()}
    assert abs(slope[True] - 2) < 0.2 and abs(slope[False] - 1) < 0.2, (slope, dist)


def test_sde_noise_covariance_matches_the_sampler():
    """diffusion diffusion^T / (lr/B) against the empirical covariance of
    50,000 per-example gradients drawn by the problem's own sampler: every
    entry within 5 Monte-Carlo standard errors (exact columns over the sample
    space, and columns estimated from M = 50,000 samples)."""
    problem, p0 = _discrete()
    lr, B = 0.2, 4
    G = _empirical(problem, p0, 50_000, jax.random.key(7))
    D = G - G.mean(0)
    emp = D.T @ D / (len(G) - 1)
    se = np.sqrt(np.var(D[:, :, None] * D[:, None, :], axis=0) / len(G))
    _, S = _diffusion(problem, p0, None, lr, B)
    assert S.shape == (G.shape[1], 7)  # low rank: one column per example
    exact = S @ S.T / (lr / B)
    assert np.max(np.abs(exact - emp) / (se + 1e-300)) < 5
    assert np.abs(exact - emp).max() < 0.05 * np.abs(exact).max()
    _, S = _diffusion(problem, p0, 50_000, lr, B, key=jax.random.key(3))
    estimated = S @ S.T / (lr / B)
    assert np.max(np.abs(estimated - exact) / (se + 1e-300)) < 5


@pytest.mark.slow
def test_markov_exact_noise_near_the_finite_context_sampler():
    """The paper's model: the infinite-context covariance against the
    finite-context sampler's (context 256), to the few per cent the finite
    context adds (`docs/sgd.md`)."""
    problem, p0 = _markov()
    _, S = _diffusion(problem, p0, None, 0.2, 1)
    exact = S @ S.T / 0.2
    G = _empirical(problem, p0, 20_000, jax.random.key(7))
    D = G - G.mean(0)
    emp = D.T @ D / (len(G) - 1)
    assert abs(np.trace(emp) / np.trace(exact) - 1) < 0.05
    top = np.linalg.eigvalsh(exact)[-3:], np.linalg.eigvalsh(emp)[-3:]
    np.testing.assert_allclose(top[0], top[1], rtol=0.08)


def test_sde_ensembles_are_reproducible_per_seed():
    problem, p0 = _discrete()
    # the settings of test_sde_mean_and_spread_follow_sgd (one compiled solve:
    # its number of steps and of saves are compiled in)
    kw = dict(t1=2.0, sgd=gf.SGD(0.05, 1), run=gf.Run(progress=False),
              saveat=gf.SaveAt(ts=np.linspace(0, 2, 11), stages=False))  # fmt: skip
    a = gf.sgd_sde(problem, p0, seeds=[3, 5], **kw)
    b = gf.sgd_sde(problem, p0, seeds=[5], **kw)
    assert len(a) == 2 and [m.seed for m in a.members] == [3, 5]
    np.testing.assert_array_equal(_flat(a[1].params), _flat(b[0].params))
    np.testing.assert_array_equal(a[1].loss, b[0].loss)
    assert not np.array_equal(a[0].loss, a[1].loss)
    np.testing.assert_array_equal(a.ts, np.linspace(0, 2, 11))
    assert a[0].loss[0] == float(problem.loss(p0))
    # the estimated noise too
    c = gf.sgd_sde(problem, p0, seeds=[5], solver=gf.SDESolver(samples=8), **kw)
    d = gf.sgd_sde(problem, p0, seeds=[5], solver=gf.SDESolver(samples=8), **kw)
    np.testing.assert_array_equal(c.loss, d.loss)


def test_sde_mean_and_spread_follow_sgd():
    """Weak check on the discrete problem: the mean and the standard
    deviation of the population loss at t = 2 over 200 SDE paths against 200
    SGD runs (same start), within 4 combined standard errors for the mean
    and a factor 1.3 for the spread."""
    problem, p0 = _discrete()
    t1, sgd = 2.0, gf.SGD(0.05, 1)
    # (11 saves: the solve of test_sde_ensembles_are_reproducible_per_seed)
    saveat = gf.SaveAt(ts=np.linspace(0, t1, 11), stages=False)
    quiet = gf.Run(progress=False)
    n = 200
    sde = gf.sgd_sde(
        problem, p0, seeds=range(n), t1=t1, sgd=sgd, saveat=saveat, run=quiet
    )
    sgd_end = np.array([gf.train_sgd(problem, p0, seed=s, t1=t1, sgd=sgd, saveat=saveat,
                                     run=quiet).loss[-1] for s in range(n)])  # fmt: skip
    sde_end = sde.loss[:, -1]
    se = np.sqrt(sgd_end.var(ddof=1) / n + sde_end.var(ddof=1) / n)
    assert abs(sgd_end.mean() - sde_end.mean()) < 4 * se
    ratio = sde_end.std(ddof=1) / sgd_end.std(ddof=1)
    assert 1 / 1.3 < ratio < 1.3, ratio


def test_compare_reports_modified_and_ensemble_crossings():
    """`compare(..., modified=True)` adds the modified flow's crossings (GD
    crosses nearer them than the flow's); of an ensemble, the means and
    standard deviations of members shifted by known amounts, the gap in
    standard errors and the shares of the SGD-flow gap."""
    from types import SimpleNamespace

    problem, p0 = _linear()
    lr, t1 = 0.02, 1.0
    ts = np.arange(51) * lr
    quiet = gf.Run(progress=False)
    gd = gf.train_sgd(problem, p0, t1=t1, sgd=gf.SGD(lr, None),
                      saveat=gf.SaveAt(ts=ts, stages=False), run=quiet)  # fmt: skip
    flow = gf.flow(problem, params=p0, t1=t1, saveat=gf.SaveAt(ts=ts, stages=False),
                   run=quiet, solver=TIGHT)  # fmt: skip
    cmp = gf.compare(flow, gd, modified=True)
    assert np.all(np.isfinite(cmp.modified_crossings))
    # the modified flow is solved as the flow was (its solver and tolerances)
    own = gf.flow(gf.modified_loss(problem, lr), params=p0, t1=t1, run=quiet,
                  saveat=gf.SaveAt(ts=ts, stages=False), solver=TIGHT)  # fmt: skip
    mine = gf.compare(flow, gd, modified=own).modified_crossings
    np.testing.assert_array_equal(cmp.modified_crossings, mine)
    assert np.all(
        np.abs(cmp.sgd_crossings - cmp.modified_crossings)
        < 0.2 * np.abs(cmp.sgd_crossings - cmp.flow_crossings)
    )
    shifts = (0.1, 0.2, 0.3)
    runs = [SimpleNamespace(ts=flow.ts + s, loss=flow.loss) for s in shifts]
    sde = [SimpleNamespace(ts=flow.ts + s, loss=flow.loss) for s in (0.1, 0.3)]
    ens = gf.compare(
        flow, runs, sde=sde, modified=cmp.modified_crossings is not None and gd
    )
    assert isinstance(ens, gf.EnsembleComparison)
    np.testing.assert_allclose(ens.sgd_mean - ens.flow_crossings, 0.2, atol=2e-3)
    np.testing.assert_allclose(ens.sgd_std, 0.1, atol=2e-3)
    np.testing.assert_allclose(ens.sde_std, np.std((0.1, 0.3), ddof=1), atol=2e-3)
    np.testing.assert_allclose(ens.z, 0.0, atol=0.05)
    np.testing.assert_allclose(ens.explained_sde, 1.0, atol=0.02)
    assert "| SDE mean ± std |" in ens.table()
    with pytest.raises(ValueError, match="sde= compares an ensemble"):
        gf.compare(flow, gd, sde=sde)


def test_ensemble_figure_without_sde_members_draws_no_band():
    """`gradflow sgd --seeds N` without `--sde`: the figure draws the SGD
    runs and the flow, no SDE band (and no warning of an empty quantile)."""
    from types import SimpleNamespace

    ts = np.linspace(0.0, 4.0, 41)
    flow = SimpleNamespace(ts=ts, loss=2.0 - np.tanh(ts - 2.0), problem=None, stages=())
    runs = [
        SimpleNamespace(ts=ts, loss=2.0 - np.tanh(ts - 2.0 - s)) for s in (0.1, 0.2)
    ]
    ens = gf.compare(flow, runs)
    assert isinstance(ens, gf.EnsembleComparison) and len(ens.sde_loss) == 0
    fig = ens.figure()
    labels = fig.axes[0].get_legend_handles_labels()[1]
    assert "SGD runs" in labels and not any(x.startswith("SDE") for x in labels)
    assert np.isnan(ens.sde_mean).all()
