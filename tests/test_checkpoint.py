"""Checkpoints of `gf.integrate`: a run that crashes, is interrupted or runs out
of steps, resumed from its checkpoint, ends *bit for bit* where an
uninterrupted run ends; checkpoints of other calls are refused.

Crashes are simulated by making the chunk function
(`gradflow._loop.loop.run_chunk`) raise after a few calls, so the process
state is lost exactly as in a kill between two checkpoint writes (the end-to-end
SIGKILL test of the CLI is in `test_cli_run.py`). Chunks of 60 steps
(`chunk_steps=60` instead of 1000) make these short runs cross many chunk
boundaries; all runs here share that size, so they share one compilation per
solve kind.
"""

import json
import os
import signal
from pathlib import Path

import jax
import numpy as np
import pytest

import gradflow as gf

# An internal: its chunk function is patched to simulate a crash or a Ctrl-C
# between two chunks.
import gradflow._loop.loop as loop


CHUNK = 60
CHAIN = gf.chains.sticky(6, 0.5, 0.5, 0.05)
KW = dict(
    width=8,
    t1=1500.0,
    run=gf.Run(progress=False, chunk_steps=CHUNK),
)
SCALE = 1e-3
DATA = Path(__file__).parent / "data"


class _References(dict):
    """Uninterrupted runs, chunks of 60 steps, with stages (`[True]`) and
    without (`[False]`), each solved when first asked for."""

    def __missing__(self, stages: bool) -> gf.Trajectory:
        self[stages] = gf.integrate(CHAIN, SCALE, saveat=gf.SaveAt(stages=stages), **KW)
        return self[stages]


@pytest.fixture(scope="module")
def reference():
    return _References()


def _crash_after(monkeypatch, calls: int, action=None):
    """Makes the chunk function fail (or do `action`) at call number `calls`."""
    real = loop.run_chunk
    count = {"n": 0}

    def segment(*args, **kwargs):
        count["n"] += 1
        if count["n"] == calls:
            if action is None:
                raise RuntimeError("simulated crash")
            action()
        return real(*args, **kwargs)

    # a flow's job calls loop.run_chunk once per chunk: a crash between chunks
    monkeypatch.setattr(loop, "run_chunk", segment)
    return count


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
    assert {k: v for k, v in a.stats.items() if k not in skip} == {
        k: v for k, v in b.stats.items() if k not in skip
    }


# Both kinds of solve run the same loop and the same checkpoint code (only the
# observer differs); the bare kind costs a compilation of its own, so its
# crash-and-resume runs in the slow tier.
@pytest.mark.parametrize("stages", [True, pytest.param(False, marks=pytest.mark.slow)])
@pytest.mark.parametrize("crash_at", [3, 8])
def test_resume_after_crash_is_bit_identical(
    reference, tmp_path, monkeypatch, stages, crash_at
):
    ck = tmp_path / "run.ckpt.npz"
    _crash_after(monkeypatch, crash_at)
    with pytest.raises(RuntimeError, match="simulated crash"):
        gf.integrate(
            CHAIN,
            SCALE,
            saveat=gf.SaveAt(stages=stages),
            run=gf.Run(checkpoint=ck, checkpoint_every=0),
            **KW,
        )
    assert ck.exists()
    monkeypatch.undo()
    resumed = gf.integrate(
        CHAIN, SCALE, saveat=gf.SaveAt(stages=stages), run=gf.Run(checkpoint=ck), **KW
    )
    assert 0 < resumed.stats.resumed_from < KW["t1"]
    assert_same_trajectory(reference[stages], resumed)


def test_finished_checkpoint_returns_without_solving(reference, tmp_path, monkeypatch):
    ck = tmp_path / "done.npz"
    first = gf.integrate(CHAIN, SCALE, run=gf.Run(checkpoint=ck), **KW)
    assert_same_trajectory(reference[True], first)
    assert first.stats.resumed_from is None
    count = _crash_after(monkeypatch, 1)  # any solve would raise
    again = gf.integrate(CHAIN, SCALE, run=gf.Run(checkpoint=ck), **KW)
    assert count["n"] == 0
    assert again.stats.resumed_from == KW["t1"]
    assert_same_trajectory(reference[True], again)


def test_out_of_steps_then_resumed_with_more_steps(reference, tmp_path):
    ck = tmp_path / "steps.npz"
    partial = gf.integrate(
        CHAIN, SCALE, run=gf.Run(checkpoint=ck), solver=gf.Solver(max_steps=120), **KW
    )
    assert not partial.ok and "maximum number of steps (120)" in partial.message
    assert 0 < partial.t_final < KW["t1"] and partial.ts[-1] == partial.t_final
    # Everything computed is kept: the saves up to there are the reference's.
    n = np.searchsorted(reference[True].ts, partial.t_final, side="right")
    np.testing.assert_array_equal(partial.loss[:n], reference[True].loss[:n])
    # max_steps is the one setting that may change: raise it and go on.
    resumed = gf.integrate(CHAIN, SCALE, run=gf.Run(checkpoint=ck), **KW)
    assert resumed.stats.resumed_from == partial.t_final
    assert_same_trajectory(reference[True], resumed)


def test_ctrl_c_returns_partial_then_resumes(reference, tmp_path, monkeypatch):
    ck = tmp_path / "sigint.npz"
    _crash_after(monkeypatch, 6, lambda: os.kill(os.getpid(), signal.SIGINT))
    with pytest.raises(gf.Interrupted) as info:
        gf.integrate(
            CHAIN, SCALE, run=gf.Run(checkpoint=ck, checkpoint_every=1e9), **KW
        )
    partial = info.value.result
    assert isinstance(info.value, KeyboardInterrupt)
    assert info.value.checkpoint == ck and ck.exists()
    assert not partial.ok and "interrupted at t = " in partial.message
    assert f"the checkpoint '{ck}' holds the state" in partial.message
    assert str(info.value) == partial.message
    assert 0 < partial.t_final < KW["t1"] and partial.ts[-1] == partial.t_final
    n = np.searchsorted(reference[True].ts, partial.t_final, side="right")
    np.testing.assert_array_equal(partial.loss[:n], reference[True].loss[:n])
    # the SIGINT handler is restored afterwards
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    monkeypatch.undo()
    resumed = gf.integrate(CHAIN, SCALE, run=gf.Run(checkpoint=ck), **KW)
    assert resumed.stats.resumed_from == partial.t_final
    assert_same_trajectory(reference[True], resumed)


def test_ctrl_c_without_checkpoint_keeps_data(monkeypatch):
    _crash_after(monkeypatch, 3, lambda: os.kill(os.getpid(), signal.SIGINT))
    with pytest.raises(gf.Interrupted, match="pass checkpoint=PATH") as info:
        gf.integrate(CHAIN, SCALE, **KW)
    assert info.value.checkpoint is None
    assert info.value.result.ts.size > 1 and not info.value.result.ok


def test_deferred_interrupt_defers_once_and_respects_an_ignored_sigint():
    # An internal with no public name: the driver's Ctrl-C handling.
    from gradflow._loop.driver import deferred_interrupt

    previous = signal.getsignal(signal.SIGINT)
    try:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        with deferred_interrupt() as flag:
            os.kill(os.getpid(), signal.SIGINT)  # the first one is deferred
            assert flag.requested
            with pytest.raises(KeyboardInterrupt):  # the second one is not
                os.kill(os.getpid(), signal.SIGINT)
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        # A process that ignores SIGINT (nohup, `cmd &` in a script) keeps
        # ignoring it: Ctrl-C at the terminal must not stop a background run.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        with deferred_interrupt() as flag:
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
            os.kill(os.getpid(), signal.SIGINT)
            assert not flag.requested
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)


@pytest.mark.parametrize(
    "change, match",
    [
        (dict(t1=1400.0), r"t1 = 1500\.0 there, 1400\.0 here"),
        (dict(seed=3), r"seed = 0 there, 3 here"),
        (dict(solver="tsit5"), r"solver = \"ros34pw2\" there, \"tsit5\" here"),
        (dict(stages=False), r"stages = true there, false here"),
        (dict(rtol=1e-6), r"rtol = 1e-05 there, 1e-06 here"),
        (dict(chain=gf.chains.sticky(6, 0.5, 0.5, 0.06)), r"the chain \(transition"),
    ],
)
def test_checkpoint_of_another_call_is_refused(tmp_path, monkeypatch, change, match):
    ck = tmp_path / "other.npz"
    _crash_after(monkeypatch, 2)
    with pytest.raises(RuntimeError):
        gf.integrate(CHAIN, SCALE, run=gf.Run(checkpoint=ck, checkpoint_every=0), **KW)
    kwargs = {**KW, **change}
    chain = kwargs.pop("chain", CHAIN)
    count = _crash_after(monkeypatch, 1)
    with pytest.raises(ValueError, match=match) as info:
        gf.integrate(chain, SCALE, run=gf.Run(checkpoint=ck), **kwargs)
    assert str(ck) in str(info.value) and "\n" not in str(info.value)
    assert count["n"] == 0  # refused before solving


def test_bad_checkpoint_files_and_arguments(tmp_path, reference):
    not_ck = tmp_path / "traj.npz"
    reference[True].save(not_ck)
    with pytest.raises(
        ValueError,
        match="is a 'gradflow-trajectory' file, not a 'gradflow-checkpoint' file",
    ):
        gf.integrate(CHAIN, SCALE, run=gf.Run(checkpoint=not_ck), **KW)
    good = tmp_path / "good.npz"
    gf.integrate(CHAIN, SCALE, run=gf.Run(checkpoint=good), **KW)
    truncated = tmp_path / "truncated.npz"
    truncated.write_bytes(good.read_bytes()[:1000])
    with pytest.raises(ValueError, match="damaged or truncated"):
        gf.integrate(CHAIN, SCALE, run=gf.Run(checkpoint=truncated), **KW)
    with pytest.raises(ValueError, match="checkpoint must be a file path"):
        gf.integrate(CHAIN, SCALE, run=gf.Run(checkpoint=tmp_path), **KW)
    with pytest.raises(TypeError, match="checkpoint must be a file path"):
        gf.integrate(CHAIN, SCALE, run=gf.Run(checkpoint=3), **KW)
    with pytest.raises(ValueError, match="checkpoint_every must be .* got -1.0"):
        gf.integrate(
            CHAIN, SCALE, run=gf.Run(checkpoint=good, checkpoint_every=-1), **KW
        )


def test_chunk_size_does_not_change_the_solve(reference):
    """Chunks continue each other exactly: 1000-step chunks (the default for a
    model this size) give the 60-step chunks' trajectory bit for bit."""
    traj = gf.integrate(CHAIN, SCALE, **{**KW, "chunk_steps": 1000})
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
    kw = dict(KW, checkpoint=path, max_steps=CHUNK)  # one chunk, then stopped
    first = gf.integrate(CHAIN, SCALE, **kw)
    assert not first.ok and 0 < first.t_final < KW["t1"]
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
        gf.integrate(CHAIN, SCALE, **dict(kw, checkpoint=newer))
    # the unchanged file is this call's: it resumes (out of steps again at once)
    again = gf.integrate(CHAIN, SCALE, **kw)
    assert again.stats.resumed_from == first.t_final
    np.testing.assert_array_equal(again.loss, first.loss)
