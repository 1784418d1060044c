import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
import scipy.stats
from conftest import random_params

import gradflow as gf
import gradflow._sgd as sgd_module
from gradflow._sgd_loss import context_counts, counted_context_loss
from gradflow._sgd_samplers import ChainSampler, DatasetSampler, WindowSampler


@pytest.fixture(autouse=True)
def no_stage_detection(monkeypatch, request):
    """Stage detection on a run's saves costs more than a small run itself (it
    compiles anew for every run), so the tests that do not look at stages skip
    it; those that do request `real_stages`."""
    if "real_stages" not in request.fixturenames:
        monkeypatch.setattr(sgd_module, "_attach_stages", lambda run: run)


@pytest.fixture
def real_stages():
    """Requested by a test that keeps stage detection (see `no_stage_detection`)."""


# ------------------------------------------------------------------ sampling


def _pair_counts(seqs: np.ndarray, d: int) -> np.ndarray:
    counts = np.zeros((d, d))
    np.add.at(counts, (seqs[:, :-1].ravel(), seqs[:, 1:].ravel()), 1)
    return counts


def _chi2_pvalues(seqs, P, pi):
    """p-values of chi-square tests: x_1 ~ pi, x_last ~ pi, each row of P."""
    d = P.shape[0]
    out = [
        scipy.stats.chisquare(
            np.bincount(seqs[:, 0], minlength=d), pi * len(seqs)
        ).pvalue,
        scipy.stats.chisquare(
            np.bincount(seqs[:, -1], minlength=d), pi * len(seqs)
        ).pvalue,
    ]
    counts = _pair_counts(seqs, d)
    for i in range(d):
        n = counts[i].sum()
        out.append(scipy.stats.chisquare(counts[i], P[i] * n).pvalue)
    return np.array(out)


def test_chain_sampler_matches_P_and_pi():
    chain = gf.chains.random(5, seed=7)
    seqs = np.asarray(ChainSampler(chain, 30)(jax.random.key(0), 4000))
    assert seqs.shape == (4000, 31) and seqs.dtype == np.int32
    assert seqs.min() >= 0 and seqs.max() <= 4
    P, pi = np.asarray(chain.P), np.asarray(chain.pi)
    # 7 tests at a fixed seed; Bonferroni at 1e-3 overall.
    assert _chi2_pvalues(seqs, P, pi).min() > 1e-3 / 7
    # The same test has power: it rejects a slightly different chain.
    other = gf.chains.random(5, seed=7, concentration=1.3)
    wrong = _chi2_pvalues(seqs, np.asarray(other.P), np.asarray(other.pi))
    assert wrong.min() < 1e-6


def test_chain_sampler_sticky_repeat_rate():
    chain = gf.chains.sticky(6, 0.5, 0.5, 0.05)
    seqs = np.asarray(ChainSampler(chain, 200)(jax.random.key(3), 500))
    repeats = np.mean(seqs[:, 1:] == seqs[:, :-1])
    expected = float(jnp.sum(chain.pi * jnp.diag(chain.P)))
    n = seqs[:, 1:].size
    # 5 standard errors of a (positively correlated, so larger) binomial.
    assert abs(repeats - expected) < 5 * np.sqrt(expected * (1 - expected) / n) * 3


def test_window_and_dataset_samplers():
    ids = jnp.arange(100, dtype=jnp.int32)
    w = np.asarray(WindowSampler(ids, 9)(jax.random.key(0), 64))
    assert w.shape == (64, 10)
    np.testing.assert_array_equal(np.diff(w, axis=1), 1)  # consecutive windows
    assert w[:, 0].min() >= 0 and w[:, -1].max() <= 99
    data = jnp.arange(40, dtype=jnp.int32).reshape(20, 2)
    b = np.asarray(DatasetSampler(data, 1)(jax.random.key(1), 20))
    np.testing.assert_array_equal(b, np.asarray(data))  # full batch: the dataset
    b = np.asarray(DatasetSampler(data, 1)(jax.random.key(1), 15))
    assert len({tuple(r) for r in b}) == 15  # without replacement


# --------------------------------------------------- finite-context model


def _numpy_loss(W0, W1, WQ, WK, seqs):
    """SPEC section 2 written out position by position."""
    total = 0.0
    for seq in seqs:
        ctx, target = seq[:-1], seq[-1]
        q = WQ @ W0[:, ctx[-1]]
        scores = np.array([q @ (WK @ W0[:, x]) for x in ctx])
        alpha = np.exp(scores - scores.max())
        alpha /= alpha.sum()
        h = sum(a * W0[:, x] for a, x in zip(alpha, ctx, strict=True))
        logits = W1 @ h
        z = logits.max()
        total += z + np.log(np.sum(np.exp(logits - z))) - logits[target]
    return total / len(seqs)


def test_finite_context_loss_and_gradient_against_numpy():
    d, m = 4, 3
    params = random_params(d, m, 0.7, seed=5)
    seqs = np.asarray(
        ChainSampler(gf.chains.random(d, seed=2), 12)(jax.random.key(4), 6)
    )
    arrays = [np.asarray(getattr(params, n)) for n in ("W0", "W1", "WQ", "WK")]
    ref = _numpy_loss(*arrays, seqs)
    counted = counted_context_loss(params, *context_counts(jnp.asarray(seqs), d))
    np.testing.assert_allclose(float(counted), ref, rtol=1e-12)
    np.testing.assert_allclose(
        float(gf.finite_context_loss(params, seqs)), ref, rtol=1e-12
    )

    grad = jax.grad(
        lambda p: counted_context_loss(p, *context_counts(jnp.asarray(seqs), d))
    )(params)
    h = 1e-6
    for k, name in enumerate(("W0", "W1", "WQ", "WK")):
        fd = np.zeros_like(arrays[k])
        for idx in np.ndindex(arrays[k].shape):
            plus = [a.copy() for a in arrays]
            minus = [a.copy() for a in arrays]
            plus[k][idx] += h
            minus[k][idx] -= h
            fd[idx] = (_numpy_loss(*plus, seqs) - _numpy_loss(*minus, seqs)) / (2 * h)
        np.testing.assert_allclose(
            np.asarray(getattr(grad, name)), fd, rtol=1e-6, atol=1e-9
        )


# ------------------------------------------------------------------ train_sgd


def _small_chain():
    return gf.chains.sticky(4, 0.5, 0.5, 0.1)


# One small configuration (d=4, width 3, context 8, batch 16) shared by most
# tests, so that they share compilations.
SMALL = dict(context=8, batch_size=16, progress=False)


def test_full_batch_equals_gradient_descent():
    chain = _small_chain()
    p0 = random_params(4, 3, 0.5, seed=1)
    run = gf.train_sgd(
        chain, p0, num_sequences=16, lr=0.3, t1=1.5, ts=[0.0, 1.5], **SMALL
    )
    data = ChainSampler(chain, 8)(
        jax.random.split(jax.random.fold_in(jax.random.key(0), 0x5EED))[0], 16
    )
    grad = jax.jit(
        jax.grad(lambda p: counted_context_loss(p, *context_counts(data, 4)))
    )
    p = p0
    for _ in range(5):
        p = jax.tree.map(lambda x, g: x - 0.3 * g, p, grad(p))
    assert run.steps.tolist() == [0, 5]
    np.testing.assert_allclose(run.ts, [0.0, 1.5])
    for a, b in zip(jax.tree.leaves(run.params[-1]), jax.tree.leaves(p), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(
        run.population_loss, [float(gf.population_loss(x, chain)) for x in (p0, p)]
    )


def test_results_do_not_depend_on_save_grid():
    chain = _small_chain()
    kw = dict(init_scale=0.3, width=3, lr=0.1, t1=3.0, **SMALL)
    a = gf.train_sgd(chain, **kw)
    b = gf.train_sgd(chain, ts=[0.0, 3.0], **kw)
    assert len(a) > 2 and len(b) == 2
    pairs = zip(
        jax.tree.leaves(a.params[-1]), jax.tree.leaves(b.params[-1]), strict=True
    )
    for x, y in pairs:
        np.testing.assert_allclose(x, y, rtol=1e-12)
    assert np.all(np.diff(a.ts) > 0) and a.ts[0] == 0
    np.testing.assert_allclose(a.ts, a.steps * 0.1)


@pytest.mark.slow
def test_tiny_lr_huge_batch_approaches_flow():
    # Slow tier (three compiles of SGD); the default tier ties SGD to the flow
    # in test_full_batch_equals_gradient_descent and
    # test_sgd_run_has_the_flows_stages.
    """As lr shrinks while batch and context grow, SGD tends to the flow."""
    chain = _small_chain()
    p0 = random_params(4, 3, 0.5, seed=3)
    t1 = 2.0
    traj = gf.integrate(chain, params=p0, t1=t1, ts=[0.0, t1], progress=False)
    gaps = []
    for lr, batch, context in [(0.4, 16, 8), (0.1, 96, 32), (0.025, 768, 128)]:
        run = gf.train_sgd(
            chain,
            p0,
            lr=lr,
            batch_size=batch,
            context=context,
            t1=t1,
            ts=[0.0, t1],
            progress=False,
        )
        cmp = gf.compare(traj, run)
        gaps.append(cmp.param_distance[-1])
    assert gaps[0] > gaps[1] > gaps[2]
    assert gaps[2] < gaps[0] / 4


def test_new_chain_and_lr_do_not_recompile():
    from gradflow._sgd import _advance

    kw = dict(init_scale=0.2, width=3, t1=1.0, ts=[0.0, 1.0], **SMALL)
    gf.train_sgd(gf.chains.sticky(4, 0.5, 0.5, 0.1), lr=0.1, **kw)
    before = eqx.debug.get_num_traces(_advance)
    assert before >= 1
    gf.train_sgd(gf.chains.random(4, seed=9), lr=0.25, seed=3, **kw)
    gf.train_sgd(gf.chains.zipf(4), lr=0.5, **kw)
    assert eqx.debug.get_num_traces(_advance) == before


def test_text_source_and_optimizer():
    stream = gf.text.encode(None, vocab_size=4)
    run = gf.train_sgd(
        stream,
        init_scale=0.1,
        width=3,
        lr=0.5,
        t1=10.0,
        optimizer=optax.sgd(0.5, momentum=0.5),
        **SMALL,
    )
    assert run.ok and np.array_equal(run.chain.P, stream.chain.P)
    assert run.settings["source"] == "text:builtin"
    assert run.population_loss[-1] < run.population_loss[0] - 0.05
    assert np.isfinite(run.train_loss).all()


def test_save_load_roundtrip(tmp_path, real_stages):
    run = gf.train_sgd(_small_chain(), init_scale=0.2, width=3, lr=0.5, t1=2.0, **SMALL)
    path = run.save(tmp_path / "run.npz")
    back = gf.load_sgd(path)
    np.testing.assert_array_equal(back.ts, run.ts)
    np.testing.assert_array_equal(back.population_loss, run.population_loss)
    np.testing.assert_array_equal(back.train_loss, run.train_loss)
    np.testing.assert_array_equal(back.params.W0, run.params.W0)
    assert back.settings == run.settings and back.ok
    np.testing.assert_allclose(back.chain.P, run.chain.P)
    # gf.load reads any result file: here an SGD run, the same as load_sgd.
    any_ = gf.load(path)
    assert isinstance(any_, gf.SGDRun)
    np.testing.assert_array_equal(any_.population_loss, run.population_loss)
    assert any_.settings == run.settings
    traj = gf.Trajectory(
        ts=run.ts,
        loss=run.loss,
        grad_norm=run.grad_norm,
        params=run.params,
        chain=run.chain,
        settings={},
        stats={},
    )
    traj.save(tmp_path / "traj.npz")
    with pytest.raises(
        ValueError,
        match="is a 'gradflow-trajectory' file, not a 'gradflow-sgd' file; read it with gradflow.load$",
    ):
        gf.load_sgd(tmp_path / "traj.npz")
    with pytest.raises(FileNotFoundError, match="no such file"):
        gf.load_sgd(tmp_path / "missing.npz")


def test_divergence_is_reported():
    run = gf.train_sgd(
        _small_chain(), init_scale=3.0, width=3, lr=1e200, t1=1e201, **SMALL
    )
    assert not run.ok and "non-finite" in run.message and "lower lr" in run.message


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(lr=0.0), ValueError, "lr must be finite and > 0, got lr = 0.0"),
        (dict(lr=-1), ValueError, "lr must be finite and > 0, got lr = -1"),
        (dict(context=0), ValueError, "context must be >= 1, got context = 0"),
        (dict(batch_size=0), ValueError, "batch_size must be >= 1, got batch_size = 0"),
        (dict(batch_size=2.5), TypeError, "batch_size must be an integer"),
        (
            dict(num_sequences=4),
            ValueError,
            "num_sequences = 4 is smaller than batch_size",
        ),
        (dict(t1=0.01), ValueError, "shorter than one step"),
        (dict(ts=[0.0, 5.0]), ValueError, r"ts must lie in \[0, t1\]"),
        (dict(init_scale=None), ValueError, "give exactly one of init_scale"),
        (dict(optimizer="adam"), TypeError, "optimizer must be an optax"),
    ],
)
def test_bad_input(kwargs, error, match):
    base = dict(
        init_scale=0.1, width=3, context=4, batch_size=8, lr=0.1, t1=1.0, progress=False
    )
    with pytest.raises(error, match=match):
        gf.train_sgd(_small_chain(), **{**base, **kwargs})


def test_bad_source_and_short_corpus():
    with pytest.raises(TypeError, match="source must be a gradflow.MarkovChain"):
        gf.train_sgd(np.eye(3), init_scale=0.1)
    stream = gf.text.encode("the cat sat on the mat and the dog", vocab_size=3)
    with pytest.raises(ValueError, match="corpus has 9 tokens, too few .* 33 tokens"):
        gf.train_sgd(stream, init_scale=0.1, context=32, batch_size=4, progress=False)


# ------------------------------------------------------------------- compare


def test_crossing_time_interpolates_in_log_t():
    from gradflow._compare import crossing_time

    ts = np.array([0.0, 1.0, 10.0, 100.0])
    loss = np.array([2.0, 2.0, 1.0, 0.5])
    assert crossing_time(ts, loss, 1.5) == pytest.approx(np.sqrt(10.0))
    assert crossing_time(ts, loss, 1.0) == pytest.approx(10.0)
    assert np.isnan(crossing_time(ts, loss, 0.1))


def _synthetic_flow(chain, ts):
    """A trajectory-like record: a loss that drops from log d to H(pi) around
    t = 40 (logistic in log t), with parameters that move along."""
    H, L0 = float(chain.unigram_entropy), np.log(chain.d)
    ts = np.asarray(ts, float)
    x = np.log(np.maximum(ts, 1e-12) / 40.0) * 8
    loss = H + (L0 - H) / (1 + np.exp(x))
    base = random_params(chain.d, 3, 1.0, seed=0)
    p = jax.tree.map(lambda a: np.asarray(a)[None] * (1 + ts[:, None, None] / 50), base)
    return gf.Trajectory(
        ts=ts,
        loss=loss,
        grad_norm=np.zeros_like(ts),
        params=p,
        chain=chain,
        settings={},
        stats={},
    )


def test_compare_flow_with_itself_and_shifted():
    chain = gf.chains.sticky(6, 0.5, 0.5, 0.05)
    ts = gf.default_save_times(200.0)
    traj = _synthetic_flow(chain, ts)
    same = gf.compare(traj, traj)
    assert (
        same.exact and np.all(same.loss_gap == 0) and np.all(same.param_distance == 0)
    )
    np.testing.assert_array_equal(same.flow_crossings, same.sgd_crossings)
    assert 40 < same.drop_end < 60 and same.mean_abs_gap_after == 0
    # A copy delayed by 10 % in time: crossings 10 % late, and a loss gap.
    late = _synthetic_flow(chain, ts)
    late = gf.Trajectory(
        ts=ts * 1.1,
        loss=late.loss,
        grad_norm=late.grad_norm,
        params=late.params,
        chain=chain,
        settings={},
        stats={},
    )
    cmp = gf.compare(traj, late)
    assert not cmp.exact
    np.testing.assert_allclose(cmp.crossing_rel_error, 0.1, rtol=0.02)
    assert cmp.max_abs_gap_after > 0.01
    assert 0 < cmp.param_distance[-1] < 1


def test_compare_bad_input():
    def fake(d):
        p = random_params(d, 3, 0.1, seed=0)
        p = jax.tree.map(lambda x: np.stack([np.asarray(x)] * 3), p)
        return gf.Trajectory(
            ts=np.array([0.0, 1.0, 2.0]),
            loss=np.array([1.0, 0.9, 0.8]),
            grad_norm=np.ones(3),
            params=p,
            chain=gf.chains.sticky(d),
            settings={},
            stats={},
        )

    a, b = fake(4), fake(5)
    with pytest.raises(ValueError, match="d = 4 tokens but the SGD run has d = 5"):
        gf.compare(a, b)
    with pytest.raises(ValueError, match=r"fractions must lie in \(0, 1\)"):
        gf.compare(a, a, fractions=(0.5, 1.0))


def test_cli_sgd_bad_input(capsys):
    from gradflow.cli import main

    assert main(["sgd", "--lr", "-0.5"]) == 2
    assert "lr must be finite and > 0, got lr = -0.5" in capsys.readouterr().err
    assert main(["sgd", "--context", "0"]) == 2
    assert "context must be >= 1, got context = 0" in capsys.readouterr().err
    assert main(["sgd", "--text", "builtin", "--vocab-size", "100000"]) == 2
    assert "larger than the" in capsys.readouterr().err


@pytest.mark.slow
def test_sgd_tracks_flow_on_unseen_chain(real_stages):
    """The issue's criterion on one chain used nowhere else: context 256,
    batch 512, lr 0.2; first-drop crossing times within 10 %, and the mean
    population-loss gap after the drop below 0.01."""
    chain = gf.chains.zipf(7, 1.2, rho=0.3)
    p0 = gf.init_params(chain.d, 8, 1e-3, seed=5)
    run = gf.train_sgd(
        chain,
        p0,
        context=256,
        batch_size=512,
        lr=0.2,
        t1=300.0,
        seed=5,
        progress=False,
    )
    traj = gf.integrate(chain, params=p0, t1=300.0, ts=run.ts, progress=False)
    cmp = gf.compare(traj, run)
    assert cmp.exact and np.isfinite(cmp.flow_crossings).all()
    assert np.max(cmp.crossing_rel_error) < 0.1
    assert cmp.mean_abs_gap_after < 0.01


def test_sgd_run_has_the_flows_stages(real_stages):
    """SGD iterates go through the same stage detector as the flow; at context
    256, batch 512, lr 0.2 the first cycle's stages start at nearly the same
    times (SGD is a few percent late, see docs/sgd.md)."""
    chain = gf.chains.sticky(6, 0.5, 0.5, 0.05)
    p0 = gf.init_params(6, 8, 1e-3, 0)
    run = gf.train_sgd(
        chain, p0, context=256, batch_size=512, lr=0.2, t1=250.0, progress=False
    )
    # The flow at the default save times (not the run's): the solve compiled
    # for the default scenario's shapes is reused; stages and `compare` read
    # times off each curve's own grid.
    traj = gf.integrate(chain, params=p0, t1=250.0, progress=False)
    sgd_stages = [s for s in run.stages if s.name != "plateau"]
    names = [s.name for s in sgd_stages]
    assert names[:3] == ["condensation", "focus", "dilution"]
    flow_stages = [s for s in traj.stages if s.name != "plateau"]
    assert [s.name for s in flow_stages][:3] == names[:3]
    assert sgd_stages[1].tokens == flow_stages[1].tokens
    diffs = gf.compare(traj, run).stage_time_diffs
    assert {"focus[1]", "dilution[1]"} <= set(diffs)
    assert abs(diffs["focus[1]"]) < 0.1 * flow_stages[1].t_start
