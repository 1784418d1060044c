"""The stage record, `observe` and `detect_stages` (docs/stages.md)."""

import dataclasses
import json
import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from batch_probe import batch_probe

import gradflow as gf


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
        settings=gf.FlowSettings(),
        stats=gf.FlowStats(),
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
        (
            dict(level_entry_speed=0.2),
            "level_entry_speed must be < level_escape_speed",
        ),
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


class _Compiles:
    """Records JAX's compilation events (trace, lower, compile) while active."""

    def __enter__(self):
        self.events = []
        jax.monitoring.register_event_duration_secs_listener(self._listen)
        return self

    def _listen(self, event, duration, **kwargs):
        if event.startswith("/jax/core/compile/"):
            self.events.append(event)

    def __exit__(self, *exc):
        jax.monitoring.unregister_event_duration_listener(self._listen)


def test_observe_params_compiles_once_per_shape():
    ts = np.linspace(1.0, 10.0, 7)
    a = gf.markov.observe_params(ts, _params(7, seed=1), CHAIN, batch=4)
    other, params = gf.chains.random(4), _params(5, seed=2)
    # another run, another chain of the same d, another length: no new trace
    with _Compiles() as c:
        gf.markov.observe_params(ts[:5], params, other, batch=4)
    assert c.events == []
    one = gf.markov.observe(
        jnp.asarray(ts[3]),
        jax.tree.map(lambda x: jnp.asarray(x[3]), _params(7, seed=1)),
        CHAIN,
    )
    np.testing.assert_allclose(a["att_mass"][3], one["att_mass"], rtol=1e-12)


def test_observe_params_in_batches_gives_the_same_values():
    ts = np.linspace(1.0, 10.0, 11)
    params = _params(11, seed=3)
    whole = gf.markov.observe_params(ts, params, CHAIN)
    batched = gf.markov.observe_params(ts, params, CHAIN, batch=3)
    assert sorted(batched) == sorted(whole)
    for key in whole:
        np.testing.assert_allclose(batched[key], whole[key], rtol=1e-13, atol=1e-15)


# The size of each batch that `gf.problems.observe_saves` evaluates, recorded
# when a problem's `observe` is traced under its `vmap` (a custom batching
# rule sees the batch size).
_BATCHES = []
_batch_probe = batch_probe(_BATCHES)


class _Probe(gf.ObservedProblem):
    """A vector of `n` parameters whose observation records its batch size."""

    n: int = eqx.field(static=True)

    def loss(self, params):
        return jnp.sum(params**2)

    def init(self, key, init_scale):
        return init_scale * jax.random.normal(key, (self.n,))

    def observe(self, params):
        return {"norm2": _batch_probe(jnp.sum(params**2))}


@pytest.mark.parametrize(
    "n, batch, size",
    [
        (8, 512, 16),  # the bucket of 11 saves (save_buffer_size)
        (8, 3, 3),  # the batch asked for
        # Memory: a batch holds a few intermediates of up to (longest axis)^2
        # entries per point (an attention matrix over the vocabulary), so at
        # most 2^24 / longest^2 points go at once (gradflow/_problem/functions.py);
        # from 2^20 entries per point on (batches of at most
        # OBSERVE_MAP_BATCH = 16), a batch's points are observed one after
        # the other (`jax.lax.map`): nothing is vmapped
        (1024, 512, None),
        (2048, 512, None),
    ],
)
def test_observe_saves_batches_are_bounded_by_the_longest_axis_squared(n, batch, size):
    ts = np.linspace(1.0, 10.0, 11)
    params = np.random.default_rng(n).normal(size=(11, n))
    _BATCHES.clear()
    obs = gf.problems.observe_saves(_Probe(n), ts, params, batch=batch)
    # one trace: every batch has that size
    assert _BATCHES == ([] if size is None else [size])
    # the cap changes no value
    np.testing.assert_allclose(obs["norm2"], (params**2).sum(axis=1), rtol=1e-13)


def test_secant_rate_is_exact_on_a_line_and_averages_fast_wiggles():
    # the rates of the stage detectors (gf.problems.Curves.rate): secants
    # over `window` e-folds of t
    u = np.linspace(0.0, 5.0, 501)
    curves = gf.problems.Curves(np.exp(u), {}, 0.03)
    np.testing.assert_allclose(curves.rate(3.0 * u - 1.0), 3.0, rtol=1e-12)
    wiggle = 2.0 * u + 1e-3 * np.sin(2 * np.pi * u / 0.01)  # period 0.01 < window
    r = curves.rate(wiggle)
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
    # the synthetic observations are what the detector reads: it needs each
    for key in obs:
        with pytest.raises(ValueError, match=rf"observations lack \['{key}'\]"):
            gf.markov.detect_stages(
                ts, {k: v for k, v in obs.items() if k != key}, chain=CHAIN
            )


def test_stages_from_params_gives_events_of_the_boundaries():
    ts = np.geomspace(1.0, 100.0, 20)
    stages, events, obs = gf.markov.stages_from_params(ts, _params(20, seed=3), CHAIN)
    assert obs["att_mass"].shape == (20, 4)
    assert all(isinstance(s, gf.Stage) for s in stages)
    assert [e.t for e in events] == sorted(e.t for e in events)
    assert all(isinstance(e, gf.EventRecord) and not e.located for e in events)
