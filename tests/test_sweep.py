"""gf.sweep: members equal their solo runs, C order, labels, failed members,
save/load, checkpoint/resume, a sweep of problems, bad input."""

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradflow as gf


HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
from sweep_worker import CHUNK_STEPS, DELTAS, SEEDS, T1, D, M, small_sweep  # noqa: E402
from user_problems import Quadratic  # noqa: E402


def chains():
    return [gf.chains.sticky(D, 0.5, 0.5, x) for x in DELTAS]


@pytest.fixture(scope="module")
def sw():
    return small_sweep(gf)


def crossing_time(ts, loss, level):
    """The first time the saved loss falls through `level` (linear between saves)."""
    i = int(np.flatnonzero(loss < level)[0])
    f = (loss[i - 1] - level) / (loss[i - 1] - loss[i])
    return ts[i - 1] + f * (ts[i] - ts[i - 1])


@pytest.mark.parametrize("i", [1, 6])
def test_member_equals_solo_integrate(sw, i):
    member = sw.members[i]
    # The sweep's chunks of CHUNK_STEPS steps: the solo run is then the
    # compiled chunk the sweep ran on its first device (gradflow/_sweep/lanes.py),
    # not a compilation of its own (chunks of another size continue each other
    # bit for bit: tests/test_checkpoint.py's
    # test_chunk_size_does_not_change_the_solve).
    solo = gf.integrate(
        chains()[member.problem],
        member.init_scale,
        seed=member.seed,
        width=M,
        t1=T1,
        run=gf.Run(progress=False, chunk_steps=CHUNK_STEPS),
    )
    traj = sw[i]
    assert traj.ok and solo.ok
    assert abs(traj.loss[-1] - solo.loss[-1]) <= 1e-6
    # the loss drops: through the unigram level and half-way to the final loss
    unigram = float(solo.problem.chain.unigram_entropy)
    for level in (np.log(D) - 0.01, unigram - 0.01, 0.5 * (unigram + solo.loss[-1])):
        a = crossing_time(traj.ts, traj.loss, level)
        b = crossing_time(solo.ts, solo.loss, level)
        assert abs(a - b) <= 5e-3 * b, (level, a, b)
    assert [s.name for s in traj.stages] == [s.name for s in solo.stages]
    assert [e.name for e in traj.events] == [e.name for e in solo.events]
    for a, b in zip(traj.events, solo.events, strict=True):
        assert abs(a.t - b.t) <= 5e-3 * b.t
    assert traj.settings == solo.settings
    assert traj.stats.num_steps == solo.stats.num_steps
    # On a CPU the members go one by one (batch_size 1), each through the
    # compiled chunk of a solo call on one of the host devices: the same
    # numbers, bit for bit, whichever device ran the member.
    assert sw.stats.batch_size == 1
    np.testing.assert_array_equal(traj.loss, solo.loss)
    for x, y in zip(jax.tree.leaves(traj.params), jax.tree.leaves(solo.params)):
        np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("batch_size", [8, 2])
def test_batch_sizes_agree(sw, batch_size):
    """All of a device's members in one `vmap` (8: the default on a GPU) and
    groups of 2 (`lax.map` over `vmap`ped groups) give the members of
    one-by-one. (Groups of 2, not 4: on a 2-core host each of the two devices
    holds 4 of the 8 members, and 4 would be one `vmap` again.)"""
    batched = small_sweep(gf, batch_size=batch_size)
    # per device, at most its share of the members (a CPU host has one device
    # per core: gradflow/_core/devices.py)
    per_device = -(-len(sw) // batched.stats.num_devices)
    assert batched.stats.batch_size == min(batch_size, per_device)
    assert batched.ok.all()
    np.testing.assert_allclose(batched.loss, sw.loss, rtol=1e-9, atol=0)
    for a, b in zip(batched, sw, strict=True):
        assert [e.name for e in a.events] == [e.name for e in b.events]
        np.testing.assert_allclose(
            [e.t for e in a.events], [e.t for e in b.events], rtol=1e-8
        )
        assert [s.name for s in a.stages] == [s.name for s in b.stages]


def test_members_in_c_order_with_labels(sw):
    assert len(sw) == len(DELTAS) * len(SEEDS)
    for c in range(len(DELTAS)):
        for s, seed in enumerate(SEEDS):
            i = c * len(SEEDS) + s
            m = sw.members[i]
            assert (m.index, m.problem, m.seed, m.init_scale) == (i, c, seed, 1e-3)
            assert m.labels == {"delta": DELTAS[c]}
            assert sw[i].settings.seed == seed
            chain = sw[i].problem.chain
            assert np.allclose(np.asarray(chain.P), np.asarray(chains()[c].P))
    assert sw.ok.all() and sw.ok.shape == (len(sw),)
    assert sw.loss.shape == (len(sw), sw.ts.size)
    for i, traj in enumerate(sw):
        np.testing.assert_array_equal(sw.loss[i], traj.loss)
    # different seeds are different trajectories
    assert not np.allclose(sw.loss[0], sw.loss[1])


def test_table(sw):
    table = sw.table()
    n_rows = sum(max(1, len(t.stages)) for t in sw)
    assert len(table) == n_rows
    assert {"member", "delta", "seed", "stage", "t_start", "t_end"} <= set(table)
    rows = table[table.member == 5]
    assert list(rows.stage) == [s.name for s in sw[5].stages]
    assert (rows.delta == DELTAS[1]).all() and (rows.seed == SEEDS[1]).all()


def test_given_starts_and_a_failed_member(sw):
    """`params` as a batch of starting points; one of them (a huge start) fails
    and keeps its partial trajectory and message, the others are unaffected."""
    starts = [gf.init_params(D, M, 1e-3, s) for s in SEEDS]
    starts += [gf.init_params(D, M, 1e-3, s) for s in (4, 5)]
    starts += [gf.init_params(D, M, 30.0, 0)]
    starts += [gf.init_params(D, M, 1e-3, 6)]
    params = gf.Params(
        *(np.stack([getattr(p, n) for p in starts]) for n in "W0 W1 WQ WK".split())
    )
    given = gf.sweep(
        chains()[0],
        params=params,
        width=M,
        t1=T1,
        solver=gf.Solver(max_steps=600),
        run=gf.Run(progress=False, chunk_steps=CHUNK_STEPS),
    )
    assert [m.start for m in given.members] == list(range(8))
    assert [m.seed for m in given.members] == [None] * 8
    bad = given[6]
    assert not bad.ok and bad.message
    assert 0 < len(bad) and bad.t_final < T1
    assert np.isfinite(bad.loss).all()
    assert np.isnan(given.loss[6, -1])
    others = [i for i in range(8) if i != 6]
    assert given.ok[others].all()
    for i in range(len(SEEDS)):  # the same starts as the random sweep's chain 0
        np.testing.assert_allclose(given[i].loss, sw[i].loss, rtol=1e-10, atol=0)


def test_save_load(sw, tmp_path):
    path = sw.save(tmp_path / "sweep.npz")
    back = gf.load_sweep(path)
    assert len(back) == len(sw) and back.members == sw.members
    assert back.labels == {"delta": tuple(DELTAS)}
    np.testing.assert_array_equal(back.loss, sw.loss)
    np.testing.assert_array_equal(back.ts, sw.ts)
    for a, b in zip(back, sw, strict=True):
        np.testing.assert_array_equal(a.params.W0, b.params.W0)
        assert a.events == b.events and a.settings == b.settings
        assert [s.name for s in a.stages] == [s.name for s in b.stages]
    assert back.table().equals(sw.table())
    # gf.load reads any result file: here a sweep, the same as load_sweep.
    any_ = gf.load(path)
    assert isinstance(any_, gf.Sweep) and any_.members == sw.members
    np.testing.assert_array_equal(any_.loss, sw.loss)
    assert isinstance(gf.load(sw[0].save(tmp_path / "member.npz")), gf.Trajectory)
    with pytest.raises(ValueError, match="not a 'gradflow-sweep' file"):
        gf.load_sweep(sw[0].save(tmp_path / "one.npz"))
    # A file of a newer format is refused, naming both versions.
    with np.load(path, allow_pickle=False) as npz:
        arrays = {k: npz[k] for k in npz.files}
    meta = json.loads(str(arrays["__gradflow__"]))
    meta.update(format_version=meta["format_version"] + 1, gradflow_version="99.0")
    arrays["__gradflow__"] = np.array(json.dumps(meta))
    np.savez(tmp_path / "newer.npz", **arrays)
    with pytest.raises(ValueError, match=r"sweep format version \d+ by gradflow 99\.0"):
        gf.load_sweep(tmp_path / "newer.npz")


def test_checkpoint_resume(sw, tmp_path):
    """A sweep stopped part-way (out of steps) and run again resumes from its
    checkpoint to the result of an uninterrupted sweep."""
    kwargs = dict(
        init_scale=1e-3, seeds=SEEDS, width=M, t1=T1, labels={"delta": DELTAS}
    )
    path = tmp_path / "sweep.ckpt.npz"
    run = gf.Run(progress=False, checkpoint=path, chunk_steps=CHUNK_STEPS)
    stopped = gf.sweep(chains(), **kwargs, solver=gf.Solver(max_steps=200), run=run)
    assert not stopped.ok.any() and all(t.t_final < T1 for t in stopped)
    assert all("maximum number of steps" in t.message for t in stopped)
    resumed = gf.sweep(chains(), **kwargs, run=run)
    assert resumed.stats.resumed and resumed.ok.all()
    np.testing.assert_array_equal(resumed.loss, sw.loss)
    for a, b in zip(resumed, sw, strict=True):
        assert a.events == b.events
        assert a.stats.num_steps == b.stats.num_steps
        assert [s.name for s in a.stages] == [s.name for s in b.stages]
    with pytest.raises(ValueError, match="different call"):
        gf.sweep(chains(), **dict(kwargs, seeds=[0, 1, 2, 5]), run=run)


def test_ctrl_c_stops_every_lane_and_resumes(tmp_path):
    """Ctrl-C during a sweep (pressed from a thread once the first checkpoint
    is written) stops every member at a chunk boundary and raises
    `gf.Interrupted` with the partial sweep; the same call resumes from the
    checkpoint to the uninterrupted result, member for member."""
    kwargs = dict(init_scale=1e-3, seeds=SEEDS, width=M, t1=20_000.0)
    # many chunks per member (out of steps at 3000), so the interrupt lands
    solver = gf.Solver(max_steps=3000)
    path = tmp_path / "sweep.ckpt.npz"
    run = gf.Run(progress=False, checkpoint=path, chunk_steps=CHUNK_STEPS)

    def press():
        while not path.exists():
            time.sleep(0.001)
        os.kill(os.getpid(), signal.SIGINT)

    presser = threading.Thread(target=press)
    presser.start()
    with pytest.raises(gf.Interrupted) as info:
        gf.sweep(chains(), **kwargs, solver=solver, run=run)
    presser.join()
    partial = info.value.result
    assert info.value.checkpoint == path
    assert not partial.ok.any() and all("interrupted" in t.message for t in partial)
    steps = np.array(partial.stats.num_steps)
    assert (steps % CHUNK_STEPS == 0).all() and (steps < 3000).any()
    resumed = gf.sweep(chains(), **kwargs, solver=solver, run=run)
    assert resumed.stats.resumed
    whole = gf.sweep(
        chains(), **kwargs, solver=solver,
        run=gf.Run(progress=False, chunk_steps=CHUNK_STEPS),
    )  # fmt: skip
    np.testing.assert_array_equal(resumed.loss, whole.loss)
    for a, b in zip(resumed, whole, strict=True):
        assert a.events == b.events and a.stats.num_steps == b.stats.num_steps
        assert a.result == b.result


def test_a_snapshot_collects_only_the_crossings_of_its_own_chunks():
    """The driver reads the lanes' latest snapshot (`advance`), then its
    events (`collect`): a lane that finished another chunk in between must
    not give that chunk's crossings to the earlier snapshot, or a checkpoint
    of it would hold them, and resuming it would find them again (seen once:
    a `saddle_entry` twice in the resumed sweep of the Ctrl-C test above)."""
    from types import SimpleNamespace

    # Private: the order of a lane's chunk and the driver's reads is a race
    # no public call can make happen on purpose.
    from gradflow._sweep import lanes

    def state(t):
        return SimpleNamespace(running=True, num_steps=0, t=t)

    def crossing(t):
        return lanes.Crossing(t=t, index=0, y=jnp.zeros(2))

    setup = SimpleNamespace(problem_dt=Quadratic(jnp.ones(2)))
    observer = SimpleNamespace(names=["e"])
    job = lanes.LaneJob(
        [setup, setup], [None, None], [observer, observer],
        [state(0.0), state(0.0)], [None], ts=None, t1=1.0, records=[[], []],
        max_steps=10,
    )  # fmt: skip
    job._publish(0, state(0.1), True, 1, [crossing(0.05)])
    first = job._latest  # what `advance` returned
    job._publish(1, state(0.1), True, 1, [crossing(0.07)])  # a lane's next chunk
    job.collect(first)
    assert [[e.t for e in rs] for rs in job.records] == [[0.05], []]
    job.collect(job._latest)
    assert [[e.t for e in rs] for rs in job.records] == [[0.05], [0.07]]
    assert job.records[1][0].name == "e" and job.records[1][0].loss == 1.0


def test_sweep_of_problems_equals_the_sweep_of_chains(sw):
    """`gf.sweep` of `gf.problems.MarkovAttention` problems is the sweep of
    their chains, member for member and bit for bit; problems of two classes,
    of two shapes or configurations, mixed with chains, or given with `width`
    (which the problems carry) are refused before anything is solved."""
    problems = [gf.problems.MarkovAttention(c, width=M) for c in chains()]
    kw = dict(init_scale=1e-3, seeds=SEEDS, t1=T1, labels={"delta": DELTAS})
    kw.update(run=gf.Run(progress=False, chunk_steps=CHUNK_STEPS))
    of_problems = gf.sweep(problems, **kw)
    assert of_problems.members == sw.members
    assert of_problems.problems == tuple(problems)
    assert of_problems.settings == sw.settings
    assert of_problems.settings.num_problems == len(DELTAS)
    np.testing.assert_array_equal(of_problems.ts, sw.ts)
    np.testing.assert_array_equal(of_problems.loss, sw.loss)
    for a, b in zip(of_problems, sw, strict=True):
        np.testing.assert_array_equal(a.loss, b.loss)
        np.testing.assert_array_equal(a.grad_norm, b.grad_norm)
        for x, y in zip(jax.tree.leaves(a.params), jax.tree.leaves(b.params)):
            np.testing.assert_array_equal(x, y)
        assert a.events == b.events and a.stages == b.stages
        assert a.settings == b.settings
        assert a.stats.num_steps == b.stats.num_steps
    assert of_problems.table().equals(sw.table())
    assert repr(of_problems) == repr(sw)

    chain4, chain5 = gf.chains.sticky(4), gf.chains.sticky(5)
    paper = gf.problems.MarkovAttention(chain4, width=M)
    other = Quadratic(jnp.ones(3))
    call = dict(init_scale=1e-3, t1=T1, run=gf.Run(progress=False))
    with pytest.raises(
        ValueError,
        match=r"of one class: problems\[1\] is a Quadratic, problems\[0\] a Markov",
    ):
        gf.sweep([paper, other], **call)
    # a chain among problems becomes the paper's model with the call's options
    # (here the default width, 16): it differs from the others
    with pytest.raises(
        ValueError,
        match=r"share their configuration: problems\[1\] \(d=4, m=4\) differs from "
        r"problems\[0\] \(d=4, m=16\)",
    ):
        gf.sweep([chain4, paper], **call)
    with pytest.raises(ValueError, match="must have arrays of equal shapes"):
        gf.sweep([paper, gf.problems.MarkovAttention(chain5, width=M)], **call)
    with pytest.raises(ValueError, match="must share their configuration"):
        gf.sweep([paper, gf.problems.MarkovAttention(chain4, width=M + 1)], **call)
    with pytest.raises(
        ValueError,
        match=r"problems\[0\]: width is not an option of a MarkovAttention: a "
        "problem carries its own configuration, got width = 4",
    ):
        gf.sweep(problems, width=M, **call)


def _bad_params():
    p = gf.init_params(D, M, 1e-3, 0)
    return p  # one point, no member axis


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(chains=[]), ValueError, "problems must hold at least one problem"),
        (dict(chains="sticky"), TypeError, r"expected a gradflow\.Problem .*got str"),
        (dict(chains=[1.0]), TypeError, r"expected a gradflow\.Problem .*got float"),
        (
            dict(chains=[gf.chains.sticky(4), gf.chains.sticky(5)]),
            ValueError,
            r"equal shapes: problems\[1\] \(d=5, m=4\) differs from problems\[0\] "
            r"\(d=4, m=4\)",
        ),
        (dict(labels={"delta": [0.0]}), ValueError, "has 1 values for 2 problems"),
        (dict(labels={"seed": [0, 1]}), ValueError, "'seed' is a column"),
        (dict(labels=[0, 1]), TypeError, "labels must be a dict"),
        (dict(init_scale=[1e-3, -1.0]), ValueError, r"init_scale\[1\]: .*> 0"),
        (dict(init_scale=[1e-3, 1e-3]), ValueError, "init_scale has the value"),
        (dict(init_scale=None), ValueError, "exactly one of init_scale"),
        (dict(seeds=True), TypeError, "seed must be an integer"),
        (dict(seeds=[0, 1.5]), TypeError, r"seeds\[1\]"),
        (dict(seeds=[]), ValueError, "seeds must hold at least one"),
        (dict(params=_bad_params, init_scale=None), ValueError, "3-dimensional"),
        (
            dict(run_options=dict(devices=["cpu"])),
            TypeError,
            r"devices\[0\] must be a jax Device",
        ),
        (dict(width=0), ValueError, "width must be >= 1"),
        (dict(t1=-1.0), ValueError, "t1 must be finite and > 0"),
        (dict(solver="nope"), ValueError, "unknown solver"),
        (
            dict(run_options=dict(batch_size=0)),
            ValueError,
            "batch_size must be >= 1, got batch_size = 0",
        ),
        (
            dict(run_options=dict(batch_size=2.0)),
            TypeError,
            "batch_size must be an integer",
        ),
    ],
)
def test_bad_input(kwargs, error, match):
    call = dict(chains=chains(), init_scale=1e-3, width=M, t1=T1)
    call.update(kwargs)
    if callable(call.get("params")):
        call["params"] = call["params"]()
    chains_ = call.pop("chains")
    run_options = call.pop("run_options", {})
    with pytest.raises(error, match=match):
        # (the run's options are checked when the `gf.Run` is made, or by the
        # sweep: both before anything is compiled)
        gf.sweep(chains_, run=gf.Run(progress=False, **run_options), **call)


def test_sweep_of_a_model_variant():
    """`model=` makes every member a variant; members equal their solo runs,
    and a batch of variant starting points (`params=`) gives the same sweep."""
    model = gf.Model(heads=2, value=True)
    chain = gf.chains.sticky(3, 0.5, 0.5, 0.05)
    # Tsit5: a member equals its solo run whatever the solver, and Tsit5
    # compiles in about half the default solver's time (the default solver's
    # members are test_member_equals_solo_integrate's). This model, solver,
    # stage observer and saves are tests/test_integrate.py's
    # test_flow_on_a_variant_is_integrate: its compiled chunk is reused.
    kw = dict(
        width=2,
        t1=200.0,
        saveat=gf.SaveAt(np.linspace(0.0, 200.0, 41)),
        solver="tsit5",
        run=gf.Run(progress=False),
    )
    sw = gf.sweep(chain, init_scale=0.1, seeds=[0, 1], model=model, **kw)
    assert sw.ok.all() and sw[0].problem.model == model
    solo = gf.integrate(chain, 0.1, seed=1, model=model, **kw)
    np.testing.assert_allclose(sw[1].loss, solo.loss, rtol=1e-10, atol=0)
    starts = [gf.init_params(3, 2, 0.1, s, model=model) for s in (0, 1)]
    batch = jax.tree.map(lambda *x: np.stack(x), *starts)
    given = gf.sweep(chain, params=batch, **kw)
    np.testing.assert_allclose(given.loss, sw.loss, rtol=1e-10, atol=0)
    with pytest.raises(ValueError, match="params are for"):
        gf.sweep(chain, params=batch, model=gf.Model(heads=3), **kw)
