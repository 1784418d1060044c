"""The stage record, `observe` and `detect_stages` (docs/stages.md)."""

import dataclasses
import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradflow as gf

# The batched observation of saves and the detector's secant rate have no
# public names: these tests count the former's compilations and batches and
# check the latter on known curves.
from gradflow._engine import stages as engine_stages
from gradflow._stages import _observe_many, secant_rate

# the observables the paper's stage detector reads, and the memory bound of a
# batch of observations (shrunk in a test): internals of the paper's model
from gradflow.markov import problem as markov_problem
from gradflow.markov.stages import DETECTOR_KEYS


CHAIN = gf.chains.sticky(4, 0.5, 0.5, 0.1)


def _params(T, d=4, m=3, seed=0):
    rng = np.random.default_rng(seed)
    return gf.Params(
        rng.normal(size=(T, m, d)),
        rng.normal(size=(T, d, m)),
        rng.normal(size=(T, m, m)) * 0.3,
        rng.normal(size=(T, m, m)) * 0.3,
    )


def test_stage_round_trips_through_dict_and_json():
    s = gf.Stage(
        name="new_direction",
        cycle=2,
        t_start=744.5,
        t_end=3140.9,
        loss_start=1.3665,
        loss_end=1.3005,
        tokens=(5, 0),
        token_labels=("5", "0"),
        sv_index=1,
        ratio_start=0.002,
        ratio_end=0.8,
        direction=(0.1, -0.2, 0.9),
    )
    back = gf.Stage.from_dict(json.loads(json.dumps(s.to_dict())))
    assert back == s
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.name = "focus"  # type: ignore[misc]


def test_stage_loads_an_old_stage_dict():
    # as written by gradflow before stages were typed (docs/figures/*.csv era)
    old = {
        "name": "focus",
        "cycle": 1,
        "t_start": 75.4,
        "t_end": 102.2,
        "loss_start": 1.4964,
        "loss_end": 1.3922,
        "tokens": [0],
        "token_labels": ["0"],
        "complete": True,
        "mass_start": 0.503,
        "mass_end": 0.702,
        "counted": True,
    }
    s = gf.Stage.from_dict(old)
    assert (s.name, s.tokens, s.mass_end, s.sv_index) == ("focus", (0,), 0.702, None)


def test_trajectory_file_with_stage_dicts_loads_as_stages(tmp_path):
    # a trajectory built by hand (no solve to compile)
    p = _params(3)
    traj = gf.Trajectory(
        ts=np.array([0.0, 1.0, 2.0]),
        loss=np.array([1.38, 1.3, 1.2]),
        grad_norm=np.array([0.1, 0.1, 0.1]),
        params=p,
        problem=gf.problems.MarkovAttention(CHAIN, width=3),
        settings={"width": 3},
        stats={},
    )
    old = {"name": "condensation", "cycle": 1, "t_start": 0.0, "t_end": 4.0}
    old.update(loss_start=1.38, loss_end=1.2, tokens=[], token_labels=[])
    old.update(complete=True)
    # the file written, then its stage records rewritten as the plain dicts of
    # an old file
    path = traj.save(tmp_path / "old.npz")
    with np.load(path, allow_pickle=False) as npz:
        arrays = {k: npz[k] for k in npz.files}
    meta = json.loads(str(arrays["__gradflow__"]))
    meta["stages"] = [old]
    np.savez(path, **{**arrays, "__gradflow__": np.array(json.dumps(meta))})
    back = gf.load(path)
    assert back.stages == (gf.Stage.from_dict(old),)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(name="focuss"), "Stage.name must be one of"),
        (dict(tokens=(1, 2), token_labels=("1",)), "one label per token"),
    ],
)
def test_stage_rejects_bad_fields(kwargs, match):
    base = dict(name="focus", cycle=1, t_start=0, t_end=1, loss_start=1, loss_end=1)
    with pytest.raises(ValueError, match=match):
        gf.Stage(**{**base, **kwargs})


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(focus_rate=-1.0), r"focus_rate must be finite and > 0, got -1.0"),
        (dict(entry_speed=0.1, escape_speed=0.01), "hysteresis"),
        (dict(token_share=1.5), "token_share must be <= 1"),
        (dict(direction_low=0.5, direction_open=0.3), "direction_open must be > "),
        (dict(rate_window=math.inf), "rate_window must be finite"),
    ],
)
def test_thresholds_reject_bad_values(kwargs, match):
    with pytest.raises(ValueError, match=match):
        gf.StageThresholds(**kwargs)


def test_observe_shapes_and_values():
    p = jax.tree.map(lambda x: jnp.asarray(x[0]), _params(1, d=4, m=3))
    out = gf.markov.observe(1.0, p, CHAIN)
    n = 3
    assert out["att_mass"].shape == (4,) and out["sv_W0"].shape == (n,)
    assert out["sv_ratio"].shape == (n - 1,) and out["right_sv_W0"].shape == (n, 4)
    assert "attention" not in out
    A = np.asarray(gf.attention(p, CHAIN))
    pi = np.asarray(CHAIN.pi)
    np.testing.assert_allclose(out["att_mass"], pi @ A, rtol=1e-12)
    np.testing.assert_allclose(
        out["att_entropy"], -pi @ (A * np.log(A)).sum(axis=1), rtol=1e-12
    )
    _, s, vt = np.linalg.svd(np.asarray(p.W0), full_matrices=False)
    np.testing.assert_allclose(out["sv_ratio"], s[1:] / s[0], rtol=1e-10)
    # every right singular vector, signed with its largest entry positive
    V = np.asarray(out["right_sv_W0"])
    np.testing.assert_allclose(np.abs(V @ vt.T), np.eye(n), atol=1e-10)
    assert (V[np.arange(n), np.abs(V).argmax(axis=1)] > 0).all()
    assert float(out["loss"]) == pytest.approx(float(gf.population_loss(p, CHAIN)))


def test_observe_params_compiles_once_per_shape():
    ts = np.linspace(1.0, 10.0, 7)
    a = gf.markov.observe_params(ts, _params(7, seed=1), CHAIN, batch=4)
    before = _observe_many._cached._cache_size()  # noqa: SLF001
    # another run, another chain of the same d, another length: no new trace
    gf.markov.observe_params(ts[:5], _params(5, seed=2), gf.chains.random(4), batch=4)
    assert _observe_many._cached._cache_size() == before  # noqa: SLF001
    one = gf.markov.observe(
        jnp.asarray(ts[3]),
        jax.tree.map(lambda x: jnp.asarray(x[3]), _params(7, seed=1)),
        CHAIN,
    )
    np.testing.assert_allclose(a["att_mass"][3], one["att_mass"], rtol=1e-12)


def test_observe_params_batches_are_bounded_by_d_squared(monkeypatch):
    # Memory: a batch holds a few (d, d) arrays per point, so the batch is
    # capped at OBSERVE_BATCH_ENTRIES / d^2 points; the cap changes no value.
    ts = np.linspace(1.0, 10.0, 11)
    params = _params(11, seed=3)
    whole = gf.markov.observe_params(ts, params, CHAIN)
    sizes = []
    inner = engine_stages._observe_many  # noqa: SLF001

    def spy(problem_, params_):
        sizes.append(jax.tree.leaves(params_)[0].shape[0])
        return inner(problem_, params_)

    monkeypatch.setattr(engine_stages, "_observe_many", spy)
    monkeypatch.setattr(markov_problem, "OBSERVE_BATCH_ENTRIES", 3 * CHAIN.d**2 + 1)
    capped = gf.markov.observe_params(ts, params, CHAIN)
    assert sizes == [3, 3, 3, 3]
    for key in whole:
        np.testing.assert_allclose(capped[key], whole[key], rtol=1e-13, atol=1e-15)


def test_secant_rate_is_exact_on_a_line_and_averages_fast_wiggles():
    u = np.linspace(0.0, 5.0, 501)
    np.testing.assert_allclose(secant_rate(u, 3.0 * u - 1.0, 0.03), 3.0, rtol=1e-12)
    wiggle = 2.0 * u + 1e-3 * np.sin(2 * np.pi * u / 0.01)  # period 0.01 < window
    r = secant_rate(u, wiggle, 0.03)
    assert np.abs(r[5:-5] - 2.0).max() < 0.2


def _synthetic(T=600):
    """Curves with one plateau, one focus on tokens {1, 2} and one opening of
    sigma_2 / sigma_1, at known times."""
    ts = np.concatenate([[0.0], np.geomspace(1e-2, 1e4, T - 1)])
    u = np.log(np.maximum(ts, 1e-2))
    d = 4
    H_pi = float(CHAIN.unigram_entropy)
    sig = lambda x: 1 / (1 + np.exp(-x))  # noqa: E731
    loss = np.log(d) - 0.3 * sig((u - 1.0) / 0.15) - 0.2 * sig((u - 6.0) / 0.15)
    # focus: mass gathers on tokens 1 and 2 around u = 4, then partly flows back
    g = 0.15 * sig((u - 4.0) / 0.1) - 0.06 * sig((u - 4.6) / 0.1)
    mass = np.tile(np.asarray(CHAIN.pi), (T, 1))
    mass[:, 1] += g
    mass[:, 2] += g
    mass[:, 0] -= 2 * g
    H = H_pi - 0.3 * sig((u - 4.0) / 0.1) + 0.02 * sig((u - 4.6) / 0.1)
    r = np.full((T, 2), 1e-3)
    r[:, 0] = 1e-3 + 0.8 * sig((u - 7.0) / 0.2)
    V = np.tile(np.eye(3, d), (T, 1, 1))
    V[:, 1] = np.array([0.0, 0.1, -0.5, 0.86])
    obs = dict(loss=loss, att_entropy=H, att_mass=mass, sv_ratio=r, right_sv_W0=V)
    return ts, obs


def test_detect_stages_on_synthetic_curves():
    ts, obs = _synthetic()
    stages = gf.markov.detect_stages(ts, obs, chain=CHAIN)
    names = [s.name for s in stages]
    assert names == [
        "condensation",
        "plateau",
        "focus",
        "dilution",
        "new_direction",
        "plateau",
    ], names
    focus = stages[2]
    assert set(focus.tokens) == {1, 2}
    assert focus.entropy_end < focus.entropy_start
    # the focus tokens' mass peaks at u = 4.3 (where the rise and the fall balance)
    peak = ts[1 + np.argmax(obs["att_mass"][1:, 1] + obs["att_mass"][1:, 2])]
    assert focus.t_end == pytest.approx(peak, rel=0.02)
    new = stages[4]
    assert (new.sv_index, new.tokens, new.cycle) == (1, (3, 2), 2)
    t_lo = np.exp(7.0 + 0.2 * np.log((0.05 - 1e-3) / (0.8 - 0.05 + 1e-3)))
    assert new.t_start < t_lo and new.t_end > np.exp(7.0)
    assert stages[5].cycle == 2 and not stages[5].complete


def test_detect_stages_needs_the_observations():
    ts, obs = _synthetic(50)
    with pytest.raises(ValueError, match=r"observations lack \['att_entropy'\]"):
        gf.markov.detect_stages(
            ts, {k: v for k, v in obs.items() if k != "att_entropy"}, chain=CHAIN
        )
    with pytest.raises(ValueError, match=r"observations\['loss'\] must have one entry"):
        gf.markov.detect_stages(ts, {**obs, "loss": obs["loss"][:-1]}, chain=CHAIN)
    with pytest.raises(ValueError, match="strictly increasing"):
        gf.markov.detect_stages(ts[::-1], obs, chain=CHAIN)
    with pytest.raises(ValueError, match="but chain has d = 6"):
        gf.markov.detect_stages(ts, obs, chain=gf.chains.sticky(6, 0.5, 0.5, 0.05))
    with pytest.raises(
        TypeError, match="thresholds must be a gradflow.StageThresholds"
    ):
        gf.markov.detect_stages(ts, obs, chain=CHAIN, thresholds={"focus_rate": 1})
    assert set(DETECTOR_KEYS) <= set(obs)


def test_stages_from_params_gives_events_of_the_boundaries():
    ts = np.geomspace(1.0, 100.0, 20)
    stages, events, obs = gf.markov.stages_from_params(ts, _params(20, seed=3), CHAIN)
    assert obs["att_mass"].shape == (20, 4)
    assert all(isinstance(s, gf.Stage) for s in stages)
    assert [e.t for e in events] == sorted(e.t for e in events)
    assert all(isinstance(e, gf.EventRecord) and not e.located for e in events)
