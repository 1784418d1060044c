"""The solve loop as data: a second solve of the same shapes compiles nothing,
and `run_chunk` advances a batch of states under `vmap` exactly as it advances
each alone (the property sweeps stand on)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradflow as gf

# The loop's pure chunk function and its chunk-size rule have no public names:
# these tests vmap the chunk function directly and check the rule on sizes no
# test could afford to solve (private import: the loop itself is under test).
from gradflow._loop import loop


CHAIN = gf.chains.sticky(3, 0.5, 0.5, 0.05)


class _Compiles:
    def __enter__(self):
        self.events = []
        jax.monitoring.register_event_duration_secs_listener(self._listen)
        return self

    def _listen(self, event, duration, fun_name="?", **kwargs):
        if event == "/jax/core/compile/backend_compile_duration":
            self.events.append(fun_name)

    def __exit__(self, *exc):
        jax.monitoring.unregister_event_duration_listener(self._listen)


# The default scenario's shapes (d = 6, width 8, the default number of saves),
# whose staged solve other tests compile already; a short t1.
SCENARIO = gf.chains.sticky(6, 0.5, 0.5, 0.05)
SCENARIO_KW = dict(width=8, t1=200.0, run=gf.Run(progress=False))
SCENARIO_TS = gf.default_save_times(200.0)


# The bare kind compiles a solve of its own, so it is in the slow tier.
@pytest.mark.parametrize("stages", [True, pytest.param(False, marks=pytest.mark.slow)])
def test_second_solve_compiles_nothing(stages):
    saveat = gf.SaveAt(SCENARIO_TS, stages=stages)
    gf.integrate(SCENARIO, 1e-3, seed=0, saveat=saveat, **SCENARIO_KW)
    # another start, then another chain of the same size and another t1 (the
    # same number of saves): the chain, the start and t1 are data, not shapes
    other = gf.chains.sticky(6, 0.4, 0.3, 0.1)
    later = gf.SaveAt(gf.default_save_times(250.0), stages=stages)
    # and another number of saves: a small model's save buffer holds at least
    # 1,024 saves (`loop.save_buffer_size`), so 240 saves share the chunk
    # (the observations, `observe_saves`, keep their batches of today's
    # buckets: another batch length can change their last bit; they and the
    # attention matrices of the saves, `_attention_many`, compile per length)
    fewer = gf.SaveAt(np.linspace(0.0, 200.0, 240), stages=stages)
    with _Compiles() as c:
        traj = gf.integrate(SCENARIO, 2e-3, seed=1, saveat=saveat, **SCENARIO_KW)
        again = gf.integrate(
            other, 1e-3, seed=2, saveat=later, **{**SCENARIO_KW, "t1": 250.0}
        )
    with _Compiles() as c_few:
        few = gf.integrate(SCENARIO, 1e-3, seed=0, saveat=fewer, **SCENARIO_KW)
    assert traj.ok and again.ok and again.t_final == 250.0
    assert few.ok and len(few.ts) == 240
    assert not {"jit(_advance)", "jit(_init_state)"} & set(c_few.events), c_few.events
    assert c.events == [], f"stages={stages}: {len(c.events)} compilations"


def _save(t, y, problem):
    return {"loss": problem.loss(y), "params": y}


@pytest.mark.slow
def test_run_chunk_under_vmap_equals_each_member():
    # Slow tier: the default tier checks the same property end to end
    # (tests/test_sweep.py: members equal their solo runs) and the batched
    # refresh (tests/test_solvers.py: cond_per_member).
    problem = gf.problems.MarkovAttention(CHAIN, width=2)
    spec = loop.Spec(
        vector_field=gf.GradientFlow(),
        solver=gf.solvers.ROS34PW2(),
        controller=loop.make_controller(1e-6, 1e-9),
        save_fn=_save,
        chunk_steps=40,
    )
    ts = jnp.linspace(0.0, 60.0, 7)
    t1 = jnp.asarray(60.0)
    states = [
        loop.init_state(
            spec,
            y0=problem.init(jax.random.key(seed), scale),
            args=problem,
            t0=jnp.asarray(0.0),
            t1=t1,
            ts=ts,
        )
        for seed, scale in ((0, 1e-2), (1, 3e-2))
    ]
    alone = []
    for st in states:
        for _ in range(3):
            st = loop.run_chunk(spec, problem, ts, t1, st)
        alone.append(st)
    batch = jax.tree.map(lambda *x: jnp.stack(x), *states)
    step = jax.vmap(lambda st: loop.run_chunk(spec, problem, ts, t1, st))
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


def _zeros(d, m):  # only the sizes matter (and zeros compile nothing)
    return gf.Params(*(np.zeros(s) for s in [(m, d), (d, m), (m, m), (m, m)]))


def test_chunks_are_shorter_for_large_models():
    # The paper's models keep chunks of CHUNK_STEPS steps; a text-sized model
    # (a step takes about 0.5 s at d = 512) gets chunks of seconds, not minutes.
    def steps(d, m):
        return loop.chunk_steps_for(_zeros(d, m))

    assert steps(6, 8) == steps(6, 16) == loop.CHUNK_STEPS == 1000
    sizes = [steps(d, 16) for d in (32, 64, 128, 256, 512, 1024, 2048)]
    assert sizes == sorted(sizes, reverse=True) and len(set(sizes)) > 4
    assert sizes[0] < loop.CHUNK_STEPS and sizes[-1] == 10
    assert steps(512, 16) * 0.5 < 30  # seconds per chunk at d = 512


def test_save_buffer_has_a_floor_for_small_models():
    # buckets of 2^k and 3 * 2^(k - 1); with the saved numbers per save given,
    # at least 1,024 saves while the buffer holds at most 2^20 numbers
    size = loop.save_buffer_size
    assert [size(n) for n in (1, 11, 17, 25, 240, 401, 798, 1025)] == [
        16, 16, 24, 32, 256, 512, 1024, 1536
    ]  # fmt: skip
    assert size(11, 30) == size(401, 30) == size(798, 1024) == 1024
    assert size(1025, 30) == 1536 and size(5000, 30) == size(5000) == 6144
    assert size(240, 1025) == 256 and size(11, 10**6) == 16  # too many numbers
    assert loop.SAVE_BUFFER_FLOOR * 1024 == loop.SAVE_BUFFER_NUMBERS
    ts = loop.padded_save_times(np.array([0.0, 1.0, 2.0]), 30)
    assert ts.shape == (1024,) and (ts[2:] == 2.0).all()


def test_a_save_buffer_of_another_length_is_cut_or_padded():
    # a checkpoint's state with a save buffer of another length (written
    # before the floor) fits the state of this length: the saves beyond it
    # are padded with unfilled zeros, or cut (never read: beyond len(ts))
    def state(length, batch=()):
        return loop.LoopState(  # pyright: ignore[reportCallIssue]
            t=np.zeros(batch), y=np.ones((*batch, 3)), solver_state=None,
            controller_state=None, dt=np.zeros(batch),
            saved={"loss": np.arange(float(np.prod(batch, dtype=int) * length))
                   .reshape(*batch, length),
                   "params": np.ones((*batch, length, 3))},
            filled=np.ones((*batch, length), bool), num_steps=np.zeros(batch),
            num_accepted_steps=np.zeros(batch), num_rejected_steps=np.zeros(batch),
            running=np.ones(batch, bool), solver_result=np.zeros(batch),
        )  # fmt: skip

    def unpack(arrays, like):  # the inverse of loop.pack_state
        leaves, treedef = jax.tree.flatten(like)
        return jax.tree.unflatten(
            treedef, [arrays[f"state/{i}"] for i in range(len(leaves))]
        )

    for batch in [(), (2,)]:
        old = loop.pack_state(state(256, batch))
        like = state(1024, batch)
        fit = loop.fit_save_buffer(old, like)
        back = unpack(fit, like)
        n = len(batch)
        np.testing.assert_array_equal(
            back.saved["loss"][..., :256], state(256, batch).saved["loss"]
        )
        assert back.saved["params"].shape == (*batch, 1024, 3)
        assert back.filled[..., :256].all() and not back.filled[..., 256:].any()
        assert (back.saved["loss"][..., 256:] == 0).all()
        np.testing.assert_array_equal(back.y, state(256, batch).y)
        cut = loop.fit_save_buffer(loop.pack_state(like), state(256, batch))
        assert unpack(cut, state(256, batch)).filled.shape[n] == 256


class _Stiff(gf.Problem):
    """$L = \\frac12 \\sum_i 1000\\, \\theta_i^2$: Tsit5 takes steps of about
    3e-3 (its stability limit), so a run to t1 = 100 stops at `max_steps`,
    checked between chunks: at the end of the chunk that reaches it."""

    lam: jax.Array

    def loss(self, params):
        return 0.5 * jnp.sum(self.lam * params**2)

    def init(self, key, init_scale):
        return init_scale * jax.random.normal(key, self.lam.shape)


@pytest.mark.parametrize(
    "n, chunk_steps, max_steps, stops_at",
    [
        (3, 25, 60, 75),  # Run(chunk_steps=) overrides the rule
        (3, None, 7, 7),  # a chunk never exceeds max_steps
        # 8704 parameters (d = 256, m = 16): chunks of the rule's size (the
        # paper's model's chunks of CHUNK_STEPS: test_integrate.py's
        # test_huge_init_scale_stops_with_a_clear_message)
        pytest.param(
            8704,
            None,
            50,
            2 * loop.chunk_steps_for(np.zeros(8704)),
            marks=pytest.mark.slow,
        ),
    ],
)
def test_a_flow_runs_chunks_of_the_rule_or_of_chunk_steps(
    n, chunk_steps, max_steps, stops_at
):
    assert loop.chunk_steps_for(np.zeros(8704)) < 50
    traj = gf.flow(
        _Stiff(jnp.full(n, 1000.0)),
        params=jnp.ones(n),
        t1=100.0,
        saveat=gf.SaveAt([0.0, 100.0], stages=False),
        solver=gf.Solver("tsit5", max_steps=max_steps),
        run=gf.Run(progress=False, chunk_steps=chunk_steps),
    )
    assert bool(traj.result == gf.RESULTS.max_steps_reached)
    assert traj.stats.num_steps == stops_at
