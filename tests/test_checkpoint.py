"""Checkpoints of `gf.integrate`: a run that crashes, is interrupted or runs out
of steps, resumed from its checkpoint, ends *bit for bit* where an
uninterrupted run ends; checkpoints of other calls are refused.

Crashes and Ctrl-C are made through the public callbacks: every run here
watches a user event, `tick` (cos(2 pi t / 100) crossing zero, every 50 time
units), and a callback (called on the host between chunks of steps, for each
event of the chunk just taken) raises or sends `SIGINT` at the N-th event. A
crash then loses the process state exactly as a kill between two checkpoint
writes does (the checkpoint holds the chunk before; the end-to-end SIGKILL test
of the CLI is in `test_cli_run.py`). Chunks of 60 steps
(`gf.Run(chunk_steps=60)` instead of 1000) make these short runs cross many
chunk boundaries; all runs here share that size and the event, so they share
one compilation per solve kind.
"""

import json
import os
import signal
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradflow as gf


CHUNK = 60
CHAIN = gf.chains.sticky(6, 0.5, 0.5, 0.05)
T1 = 1500.0
SCALE = 1e-3
DATA = Path(__file__).parent / "data"


def _tick(t, params, problem):
    return jnp.cos(2 * jnp.pi * t / 100.0)


TICK = gf.Event("tick", _tick)


def _integrate(
    *,
    chain=CHAIN,
    stages=True,
    callbacks=(),
    tick=TICK,
    solver=None,
    rtol=None,
    max_steps=4_000_000,
    checkpoint=None,
    checkpoint_every=120.0,
    ts=None,
    **kwargs,
):
    """`gf.integrate` of the sticky chain with the `tick` event, chunks of 60
    steps, quiet; `kwargs` (`t1`, `seed`) and the named options override."""
    args = {"width": 8, "t1": T1, **kwargs}
    return gf.integrate(
        chain,
        SCALE,
        saveat=gf.SaveAt(ts, stages=stages, events=[tick], callbacks=callbacks),
        solver=gf.Solver(solver, rtol=rtol, max_steps=max_steps),
        run=gf.Run(
            progress=False,
            chunk_steps=CHUNK,
            checkpoint=checkpoint,
            checkpoint_every=checkpoint_every,
        ),
        **args,
    )


class _References(dict):
    """Uninterrupted runs, chunks of 60 steps, with stages (`[True]`) and
    without (`[False]`), each solved when first asked for."""

    def __missing__(self, stages: bool) -> gf.Trajectory:
        self[stages] = _integrate(stages=stages)
        return self[stages]


@pytest.fixture(scope="module")
def reference():
    return _References()


class _Crash(Exception):
    pass


def _at_event(n: int, action=None):
    """A callback that raises `_Crash` (or does `action`) at the `n`-th event
    it sees: between two chunks of steps, on the host."""
    seen = []

    def callback(event, t, params):
        seen.append(event.name)
        if len(seen) == n:
            if action is None:
                raise _Crash("simulated crash")
            action()

    return callback


def _sigint():
    os.kill(os.getpid(), signal.SIGINT)


def _counting_tick():
    """A `tick` event whose condition counts its calls (each trace of a solve
    calls it): a checked call that refuses, or returns a finished run, must
    not trace a solve. A new function, so no compiled solve has seen it."""
    calls = []

    def tick(t, params, problem):
        calls.append(t)
        return _tick(t, params, problem)

    return gf.Event("tick", tick), calls


def assert_same_trajectory(a: gf.Trajectory, b: gf.Trajectory):
    np.testing.assert_array_equal(a.ts, b.ts)
    np.testing.assert_array_equal(a.loss, b.loss)
    np.testing.assert_array_equal(a.grad_norm, b.grad_norm)
    for x, y in zip(jax.tree.leaves(a.params), jax.tree.leaves(b.params), strict=True):
        np.testing.assert_array_equal(x, y)
    assert sorted(a.extras) == sorted(b.extras)
    for k in a.extras:
        np.testing.assert_array_equal(a.extras[k], b.extras[k], err_msg=k)
    assert a.stages == b.stages
    assert a.events == b.events
    assert a.ok and b.ok
    skip = {"wall_time", "resumed_from"}
    assert {k: v for k, v in a.stats.to_dict().items() if k not in skip} == {
        k: v for k, v in b.stats.to_dict().items() if k not in skip
    }


def test_the_tick_event_fires_along_the_run(reference):
    # what the crashes below stand on: ticks at 25 + 50 k, located during the
    # solve, with the saddle events of the stages (a step longer than 50, on a
    # late plateau, steps over two crossings: those are not seen)
    ticks = np.array([e.t for e in reference[True].events if e.name == "tick"])
    assert len(ticks) >= 10
    np.testing.assert_allclose(
        ticks, 25.0 + 50.0 * np.round((ticks - 25) / 50), rtol=1e-6
    )
    np.testing.assert_allclose(ticks[:10], np.arange(25.0, 500.0, 50.0), rtol=1e-6)
    assert {"saddle_escape", "saddle_entry"} <= {e.name for e in reference[True].events}


# Both kinds of solve run the same loop and the same checkpoint code (only the
# observer differs); the bare kind costs a compilation of its own, so its
# crash-and-resume runs in the slow tier.
@pytest.mark.parametrize("stages", [True, pytest.param(False, marks=pytest.mark.slow)])
@pytest.mark.parametrize("crash_at", [3, 8])
def test_resume_after_crash_is_bit_identical(reference, tmp_path, stages, crash_at):
    ck = tmp_path / "run.ckpt.npz"
    with pytest.raises(_Crash, match="simulated crash"):
        _integrate(
            stages=stages,
            callbacks=[_at_event(crash_at)],
            checkpoint=ck,
            checkpoint_every=0,
        )
    assert ck.exists()
    resumed = _integrate(stages=stages, checkpoint=ck)
    assert 0 < resumed.stats.resumed_from < T1
    assert_same_trajectory(reference[stages], resumed)


def test_checkpoint_with_the_save_buffer_of_before_its_floor_resumes(tmp_path):
    # A checkpoint written before the save buffer had its floor of 1,024 saves
    # for a small model (`save_buffer_size` in gradflow/_loop/loop.py; 200
    # saves took a buffer of 256) resumes, its buffer padded
    # (`fit_save_buffer`), and ends bit for bit as an uninterrupted run. The
    # old checkpoint is today's cut to 256 saves: what the old code wrote
    # (its first 200 saves are bit for bit today's, `benchmarks/snapshot.py`;
    # the padded saves after them are unfilled zeros in both, checked here).
    ts = np.linspace(0.0, T1, 200)
    uninterrupted = _integrate(ts=ts)
    ck = tmp_path / "run.ckpt.npz"
    with pytest.raises(_Crash, match="simulated crash"):
        _integrate(ts=ts, callbacks=[_at_event(4)], checkpoint=ck, checkpoint_every=0)
    with np.load(ck) as f:
        arrays = {k: f[k] for k in f.files}
    buffer = [
        k
        for k, a in arrays.items()
        if k.startswith("state/") and a.shape[:1] == (1024,)
    ]
    # the mask, the loss, the gradient norm and the 4 parameter matrices
    assert len(buffer) == 7
    old = tmp_path / "old.ckpt.npz"
    for k in buffer:
        assert not arrays[k][200:].any()  # unfilled (False) or zero beyond len(ts)
        arrays[k] = arrays[k][:256]
    np.savez(old, **arrays)
    resumed = _integrate(ts=ts, checkpoint=old)
    assert 0 < resumed.stats.resumed_from < T1
    assert_same_trajectory(uninterrupted, resumed)


def test_finished_checkpoint_returns_without_solving(reference, tmp_path):
    ck = tmp_path / "done.npz"
    first = _integrate(checkpoint=ck)
    assert_same_trajectory(reference[True], first)
    assert first.stats.resumed_from is None
    seen = []
    again = _integrate(checkpoint=ck, callbacks=[lambda *event: seen.append(event)])
    assert again.stats.resumed_from == T1
    # no step taken, no event located: the steps are the first run's
    assert again.stats.num_steps == first.stats.num_steps and seen == []
    assert_same_trajectory(reference[True], again)


def test_out_of_steps_then_resumed_with_more_steps(reference, tmp_path):
    ck = tmp_path / "steps.npz"
    partial = _integrate(checkpoint=ck, max_steps=100)
    assert not partial.ok and "maximum number of steps (100)" in partial.message
    assert bool(partial.result == gf.RESULTS.max_steps_reached)
    # checked between chunks: the run stops after the chunk that passes 100
    assert partial.stats.num_steps == 2 * CHUNK
    assert 0 < partial.t_final < T1 and partial.ts[-1] == partial.t_final
    # Everything computed is kept: the saves up to there are the reference's.
    n = np.searchsorted(reference[True].ts, partial.t_final, side="right")
    np.testing.assert_array_equal(partial.loss[:n], reference[True].loss[:n])
    # max_steps is the one setting that may change: raise it and go on.
    resumed = _integrate(checkpoint=ck)
    assert resumed.stats.resumed_from == partial.t_final
    assert_same_trajectory(reference[True], resumed)


def test_ctrl_c_returns_partial_then_resumes(reference, tmp_path):
    ck = tmp_path / "sigint.npz"
    with pytest.raises(gf.Interrupted) as info:
        _integrate(
            checkpoint=ck, checkpoint_every=1e9, callbacks=[_at_event(6, _sigint)]
        )
    partial = info.value.result
    assert isinstance(info.value, KeyboardInterrupt)
    assert info.value.checkpoint == ck and ck.exists()
    assert not partial.ok and "interrupted at t = " in partial.message
    assert bool(partial.result == gf.RESULTS.interrupted)
    assert f"the checkpoint '{ck}' holds the state" in partial.message
    assert str(info.value) == partial.message
    assert 0 < partial.t_final < T1 and partial.ts[-1] == partial.t_final
    # stopped at the end of the chunk in which Ctrl-C came
    assert partial.stats.num_steps % CHUNK == 0
    n = np.searchsorted(reference[True].ts, partial.t_final, side="right")
    np.testing.assert_array_equal(partial.loss[:n], reference[True].loss[:n])
    # the SIGINT handler is restored afterwards
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    resumed = _integrate(checkpoint=ck)
    assert resumed.stats.resumed_from == partial.t_final
    assert_same_trajectory(reference[True], resumed)


def test_ctrl_c_without_checkpoint_keeps_data():
    with pytest.raises(gf.Interrupted, match="pass checkpoint=PATH") as info:
        _integrate(callbacks=[_at_event(3, _sigint)])
    assert info.value.checkpoint is None
    assert info.value.result.ts.size > 1 and not info.value.result.ok


def test_a_second_ctrl_c_stops_at_once_and_an_ignored_one_is_ignored(reference):
    # The first Ctrl-C is deferred to the end of the chunk; a second one
    # raises KeyboardInterrupt at once (here inside the callback), and Python's
    # handler is back afterwards.
    def twice():
        _sigint()
        _sigint()

    with pytest.raises(KeyboardInterrupt) as info:
        _integrate(t1=300.0, callbacks=[_at_event(1, twice)])
    assert not isinstance(info.value, gf.Interrupted)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    # A process that ignores SIGINT (nohup, `cmd &` in a script) keeps
    # ignoring it: Ctrl-C at the terminal must not stop a background run.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        traj = _integrate(t1=300.0, callbacks=[_at_event(1, _sigint)])
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    assert traj.ok and traj.t_final == 300.0


@pytest.mark.parametrize(
    "change, match",
    [
        (dict(t1=1400.0), r"t1 = 1500\.0 there, 1400\.0 here"),
        (dict(seed=3), r"seed = 0 there, 3 here"),
        (dict(solver="tsit5"), r"solver = \"ros34pw2\" there, \"tsit5\" here"),
        (dict(stages=False), r"stages = true there, false here"),
        (dict(rtol=1e-6), r"rtol = 1e-05 there, 1e-06 here"),
        (
            # the fields of a solver instance that differ from its defaults
            dict(solver=gf.solvers.ROS34PW2(jacobian_tol=5.0, carry_basis=True)),
            r'solver_options = null there, \{"jacobian_tol": 5\.0, "carry_basis": '
            r"true\} here",
        ),
        (
            dict(chain=gf.chains.sticky(6, 0.5, 0.5, 0.06)),
            r"the problem's chain\.P differs",
        ),
    ],
)
def test_checkpoint_of_another_call_is_refused(tmp_path, change, match):
    ck = tmp_path / "other.npz"
    with pytest.raises(_Crash):
        _integrate(callbacks=[_at_event(2)], checkpoint=ck, checkpoint_every=0)
    tick, calls = _counting_tick()
    with pytest.raises(ValueError, match=match) as info:
        _integrate(checkpoint=ck, tick=tick, **change)
    assert str(ck) in str(info.value) and "\n" not in str(info.value)
    assert calls == []  # refused before anything was traced


def test_bad_checkpoint_files_and_arguments(tmp_path, reference):
    not_ck = tmp_path / "traj.npz"
    reference[True].save(not_ck)
    with pytest.raises(
        ValueError,
        match="is a 'gradflow-trajectory' file, not a 'gradflow-checkpoint' file",
    ):
        _integrate(checkpoint=not_ck)
    good = tmp_path / "good.npz"
    _integrate(checkpoint=good)
    truncated = tmp_path / "truncated.npz"
    truncated.write_bytes(good.read_bytes()[:1000])
    with pytest.raises(ValueError, match="damaged or truncated"):
        _integrate(checkpoint=truncated)
    with pytest.raises(ValueError, match="checkpoint must be a file path"):
        _integrate(checkpoint=tmp_path)
    with pytest.raises(TypeError, match="checkpoint must be a file path"):
        _integrate(checkpoint=3)
    with pytest.raises(ValueError, match="checkpoint_every must be .* got -1.0"):
        _integrate(checkpoint=good, checkpoint_every=-1)


def test_chunk_size_does_not_change_the_solve(reference):
    """Chunks continue each other exactly: 1000-step chunks (the default for a
    model this size) give the 60-step chunks' trajectory bit for bit."""
    traj = gf.integrate(
        CHAIN,
        SCALE,
        width=8,
        t1=T1,
        saveat=gf.SaveAt(events=[TICK]),
        run=gf.Run(progress=False),
    )
    assert traj.stats.num_steps > CHUNK * 5
    assert_same_trajectory(reference[True], traj)


def test_written_files_get_the_usual_permissions(tmp_path):
    """Results and checkpoints are written through a temporary file (private
    by default); the file left behind has the permissions of any new file."""
    traj = gf.load(DATA / "trajectory_v0.1.0.npz")  # any result: no solve
    umask = os.umask(0o022)
    try:
        traj.save(tmp_path / "a.npz")
        plain = tmp_path / "b"
        plain.write_bytes(b"x")
    finally:
        os.umask(umask)
    assert (tmp_path / "a.npz").stat().st_mode & 0o777 == 0o644
    assert plain.stat().st_mode & 0o777 == 0o644
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_checkpoint_of_another_format_version_is_refused(tmp_path):
    """A checkpoint written in another file-format version is refused with a
    message naming both versions (and the same call's checkpoint resumes)."""
    path = tmp_path / "ck.npz"
    kw = dict(checkpoint=path, max_steps=CHUNK)  # one chunk, then stopped
    first = _integrate(**kw)
    assert not first.ok and 0 < first.t_final < T1
    assert first.stats.num_steps == CHUNK
    with np.load(path, allow_pickle=False) as npz:
        arrays = {k: npz[k] for k in npz.files}
    meta = json.loads(str(arrays["__gradflow__"]))
    ours = meta["format_version"]
    # The same file as a newer gradflow would write it.
    meta.update(format_version=ours + 1, gradflow_version="99.0")
    arrays["__gradflow__"] = np.array(json.dumps(meta))
    newer = tmp_path / "newer.npz"
    np.savez(newer, **arrays)
    with pytest.raises(
        ValueError,
        match=rf"has format version {ours + 1} \(gradflow 99\.0\); this gradflow "
        rf"\(.*\) writes version {ours}",
    ):
        _integrate(**dict(kw, checkpoint=newer))
    # the unchanged file is this call's: it resumes (out of steps again at once)
    again = _integrate(**kw)
    assert again.stats.resumed_from == first.t_final
    np.testing.assert_array_equal(again.loss, first.loss)
