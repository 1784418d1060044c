"""The solve loop as data: a second solve of the same shapes compiles nothing,
and `run_chunk` advances a batch of states under `vmap` exactly as it advances
each alone (the property sweeps stand on)."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradflow as gf

# The pure chunk function and the pieces a flow builds it from (its checked
# call, its Spec and its Observer) have no public names: these tests vmap the
# chunk function directly and read the chunk size a flow's Spec gets.
from gradflow._engine import loop
from gradflow._flow.flow import solve_spec
from gradflow._event.observe import Observer
from gradflow._flow.setup import prepare


CHAIN = gf.chains.sticky(3, 0.5, 0.5, 0.05)
KW = dict(
    width=2,
    t1=60.0,
    saveat=gf.SaveAt(np.linspace(0.0, 60.0, 7)),
    run=gf.Run(progress=False),
)


class _Compiles:
    def __enter__(self):
        self.events = []
        jax.monitoring.register_event_duration_secs_listener(self._listen)
        return self

    def _listen(self, event, duration, **kwargs):
        if event == "/jax/core/compile/backend_compile_duration":
            self.events.append(event)

    def __exit__(self, *exc):
        jax.monitoring.unregister_event_duration_listener(self._listen)


# The default scenario's shapes (d = 6, width 8, the default number of saves),
# whose staged solve other tests compile already; a short t1.
SCENARIO = gf.chains.sticky(6, 0.5, 0.5, 0.05)
SCENARIO_KW = dict(
    width=8,
    t1=200.0,
    saveat=gf.SaveAt(gf.default_save_times(200.0)),
    run=gf.Run(progress=False),
)


# The bare kind compiles a solve of its own, so it is in the slow tier.
@pytest.mark.parametrize("stages", [True, pytest.param(False, marks=pytest.mark.slow)])
def test_second_solve_compiles_nothing(stages):
    gf.integrate(SCENARIO, 1e-3, seed=0, saveat=gf.SaveAt(stages=stages), **SCENARIO_KW)
    with _Compiles() as c:
        traj = gf.integrate(
            SCENARIO, 2e-3, seed=1, saveat=gf.SaveAt(stages=stages), **SCENARIO_KW
        )
    assert traj.ok
    assert c.events == [], f"stages={stages}: {len(c.events)} compilations"


def _setup(init_scale, seed, params=None, chunk_steps=None):
    return prepare(
        gf.problems.MarkovAttention(CHAIN, width=2),
        init_scale=init_scale,
        params=params,
        t1=60.0,
        ts=KW["ts"],
        seed=seed,
        solver=None,
        rtol=1e-6,
        atol=1e-9,
        max_steps=10_000,
        dtype="float64",
        chunk_steps=chunk_steps,
    )


@pytest.mark.slow
def test_run_chunk_under_vmap_equals_each_member():
    # Slow tier: the default tier checks the same property end to end
    # (tests/test_sweep.py: members equal their solo runs) and the batched
    # refresh (tests/test_solvers.py: cond_per_member).
    observer = Observer(stages=True, thresholds=gf.StageThresholds())
    setups = [_setup(1e-2, 0, chunk_steps=40), _setup(3e-2, 1, chunk_steps=40)]
    spec = solve_spec(setups[0], observer)
    assert spec.chunk_steps == 40
    ts = jnp.asarray(KW["ts"])
    t1 = jnp.asarray(60.0)
    states = [
        loop.init_state(
            spec, y0=s.params0, args=s.problem_dt, t0=jnp.asarray(0.0), t1=t1, ts=ts
        )
        for s in setups
    ]
    alone = []
    for s, st in zip(setups, states, strict=True):
        for _ in range(3):
            st = loop.run_chunk(spec, s.problem_dt, ts, t1, st)
        alone.append(st)
    batch = jax.tree.map(lambda *x: jnp.stack(x), *states)
    args = setups[0].problem_dt
    step = jax.vmap(lambda st: loop.run_chunk(spec, args, ts, t1, st))
    for _ in range(3):
        batch = step(batch)
    for i, st in enumerate(alone):
        member = jax.tree.map(lambda x, i=i: x[i], batch)
        # Same steps (a batched matrix product may round differently, so the
        # values are compared to 1e-10, the step counts exactly).
        assert int(member.num_steps) == int(st.num_steps)
        assert int(member.num_rejected_steps) == int(st.num_rejected_steps)
        np.testing.assert_allclose(float(member.t), float(st.t), rtol=1e-10)
        for a, b in zip(
            jax.tree.leaves((st.y, st.saved)),
            jax.tree.leaves((member.y, member.saved)),
            strict=True,
        ):
            np.testing.assert_allclose(b, a, rtol=1e-10, atol=1e-14)
    # The two members take different steps (per-member step sizes).
    assert int(alone[0].num_steps) != int(alone[1].num_steps) or float(
        alone[0].t
    ) != float(alone[1].t)


def test_chunks_are_shorter_for_large_models():
    # The paper's models keep chunks of CHUNK_STEPS steps; a text-sized model
    # (a step takes about 0.5 s at d = 512) gets chunks of seconds, not minutes.
    def zeros(d, m):  # only the sizes matter (and zeros compile nothing)
        return gf.Params(*(np.zeros(s) for s in [(m, d), (d, m), (m, m), (m, m)]))

    def steps(d, m):
        return loop.chunk_steps_for(zeros(d, m))

    assert steps(6, 8) == steps(6, 16) == loop.CHUNK_STEPS
    sizes = [steps(d, 16) for d in (32, 64, 128, 256, 512, 1024, 2048)]
    assert sizes == sorted(sizes, reverse=True) and len(set(sizes)) > 4
    assert sizes[0] < loop.CHUNK_STEPS and sizes[-1] == 10
    assert steps(512, 16) * 0.5 < 30  # seconds per chunk at d = 512
    # integrate's solve uses it, capped by max_steps
    observer = Observer(stages=False, thresholds=gf.StageThresholds())
    small = _setup(None, 0, params=zeros(3, 2))
    assert solve_spec(small, observer).chunk_steps == loop.CHUNK_STEPS
    big = dataclasses.replace(small, params0=zeros(256, 16))
    assert solve_spec(big, observer).chunk_steps == steps(256, 16)
    few = dataclasses.replace(small, max_steps=7)
    assert solve_spec(few, observer).chunk_steps == 7
    # chunk_steps= (gf.flow's keyword) overrides the default, still capped
    given = _setup(None, 0, params=zeros(3, 2), chunk_steps=25)
    assert solve_spec(given, observer).chunk_steps == 25
    assert (
        solve_spec(dataclasses.replace(given, max_steps=7), observer).chunk_steps == 7
    )
