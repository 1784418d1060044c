"""Checkpoints, resumption and Ctrl-C for `gf.train_sgd` and `gradflow sgd`.

All runs share one small configuration (d = 4, width 4, context 16, batch 32,
100 steps, 11 saves), so the module costs one compilation of the chunk of
steps (and one of the stage detection on the saves). Chunks are cut to 4
steps (`chunk_steps=4`), so that a checkpoint written after every chunk
(`checkpoint_every=0`) also falls between saves.

A crash or a Ctrl-C is simulated by patching `gradflow._sgd.loop.sgd_chunk`,
the compiled chunk function the run's job calls between looks of the host
(there is no public hook into a running loop); the same patch counts the
chunks a call runs.
"""

import json
import os
import re
import signal

import jax
import numpy as np
import optax
import pytest

import gradflow as gf

# The loop's module: its `sgd_chunk` is patched (see the module docstring).
import gradflow._sgd.loop as sgd_loop

# Internals of the checkpoint file: a test reads the state a checkpoint holds
# (and edits it) to check what was written, and writes a flow's checkpoint.
from gradflow._core.files import read_npz_with_meta
from gradflow._loop.checkpoint import FORMAT_NAME, Checkpointer, unpack_tree
from gradflow.cli import main


CHAIN = gf.chains.sticky(4, 0.5, 0.5, 0.05)
KW = dict(
    init_scale=0.3,
    width=4,
    context=16,
    sgd=gf.SGD(lr=0.2, batch_size=32),
    t1=20.0,
    saveat=gf.SaveAt(np.linspace(0.0, 20.0, 11)),
    run=gf.Run(progress=False, chunk_steps=4),
)
CLI = (
    "sgd --d 4 --width 4 --init-scale 0.3 --context 16 --batch-size 32 --lr 0.2 "
    "--t1 20 --no-progress"
).split()


_REAL_CHUNK = sgd_loop.sgd_chunk


def _reference(**kw):
    """An uninterrupted run without a checkpoint."""
    return gf.train_sgd(CHAIN, **{**KW, **kw})


@pytest.fixture(scope="module")
def reference():
    return _reference()


class _Crash(Exception):
    pass


class _Chunks:
    """What the patched chunk function saw: the first step of every chunk
    called (`starts`) and the state after every chunk it ran (`states`)."""

    def __init__(self):
        self.starts: list[int] = []
        self.states: list = []


def _fail_at_call(monkeypatch, n, action=None) -> _Chunks:
    """Patches the chunk function: call `n` (from 1) runs `action` first, or
    raises `_Crash` (a process killed mid-run) when `action` is None; `n = 0`
    only counts."""
    chunks = _Chunks()

    def chunk(state, *args, **kwargs):
        chunks.starts.append(int(state.step))
        if len(chunks.starts) == n:
            if action is None:
                raise _Crash
            action()
        out = _REAL_CHUNK(state, *args, **kwargs)
        chunks.states.append(out)
        return out

    monkeypatch.setattr(sgd_loop, "sgd_chunk", chunk)
    return chunks


def _no_steps(monkeypatch) -> _Chunks:
    """Counts the chunks a call runs (a finished checkpoint runs none)."""
    return _fail_at_call(monkeypatch, 0)


def _nothing_drawn(monkeypatch):
    """Fails the test if a step is taken or a batch drawn: every batch of the
    paper's model (fresh, a fixed dataset's, the first one) is drawn by
    `MarkovAttention.sample`."""

    def fail(*args, **kwargs):
        raise AssertionError("a step was taken or a batch drawn")

    monkeypatch.setattr(sgd_loop, "sgd_chunk", fail)
    monkeypatch.setattr(gf.problems.MarkovAttention, "sample", fail)


def _assert_same_run(a, b):
    np.testing.assert_array_equal(a.steps, b.steps)
    np.testing.assert_array_equal(a.ts, b.ts)
    for x, y in zip(jax.tree.leaves(a.params), jax.tree.leaves(b.params), strict=True):
        np.testing.assert_array_equal(x, y)
    np.testing.assert_array_equal(a.population_loss, b.population_loss)
    np.testing.assert_array_equal(a.grad_norm, b.grad_norm)
    np.testing.assert_array_equal(a.train_loss, b.train_loss)
    assert a.ok == b.ok and a.message == b.message and a.settings == b.settings


def _assert_same_tree(a, b):
    la, lb = jax.tree.leaves(a), jax.tree.leaves(b)
    assert jax.tree.structure(a) == jax.tree.structure(b) and len(la) == len(lb)
    for x, y in zip(la, lb, strict=True):
        assert np.asarray(x).dtype == np.asarray(y).dtype
        np.testing.assert_array_equal(x, y)


def _state(path, like):
    """`(meta, state)`: what the checkpoint at `path` holds, the state (an
    `SGDState`) rebuilt in the structure of `like`."""
    meta, arrays = read_npz_with_meta(path, FORMAT_NAME)
    return meta["state"], unpack_tree("state", arrays, like)


# ------------------------------------------------------------------ resuming


# Chunks: steps 0-4, 4-8, 8-10, 10-14, 14-18, 18-20, ..., 98-100 (30 chunks).
# The process dies on entering chunk `crash_at`; the checkpoint (written after
# every chunk) holds the state after the chunk before: none (the first), at a
# save step (10), between saves (8, 18), before the last chunk (98).
@pytest.mark.parametrize(
    "crash_at, resumed, chunk_steps",
    [(1, None, 4), (3, 8, 4), (4, 10, 4), (6, 18, 4), (30, 98, 4), (6, 18, 3)],
)
def test_killed_run_resumes_to_the_same_bits(
    tmp_path, monkeypatch, reference, crash_at, resumed, chunk_steps
):
    """A run killed at any chunk resumes, from its checkpoint, to the bits of
    the uninterrupted run (also with chunks of another length: `chunk_steps`
    is not part of a run's identity); a finished checkpoint then returns the
    run without taking a step."""
    path = tmp_path / "run.ckpt.npz"
    chunks = _fail_at_call(monkeypatch, crash_at)
    with pytest.raises(_Crash):
        gf.train_sgd(
            CHAIN,
            **KW,
            run=gf.Run(checkpoint=path, checkpoint_every=0),
        )
    starts = [10 * k + j for k in range(10) for j in (0, 4, 8)]
    assert chunks.starts == starts[:crash_at]
    if resumed is None:
        assert not path.exists()  # nothing written before the first chunk ended
    else:
        # The checkpoint holds the state after the last chunk, bit for bit.
        meta, state = _state(path, chunks.states[-1])
        _assert_same_tree(state, chunks.states[-1])
        assert meta == {"step": resumed} and int(state.step) == resumed
        # saves so far (step 0 and every 10 steps), steps since the last save
        assert int(state.num_saved) == resumed // 10 + 1
        assert int(state.count) == resumed % 10
        assert not bool(state.failed) and np.isfinite(float(state.total))

    chunks = _no_steps(monkeypatch)  # counts chunks, never fails
    compiled = _REAL_CHUNK._cached._cache_size()  # noqa: SLF001
    kw = dict(KW, chunk_steps=chunk_steps)
    run = gf.train_sgd(
        CHAIN,
        **kw,
        run=gf.Run(checkpoint=path, checkpoint_every=0),
    )
    if chunk_steps == KW["chunk_steps"]:  # the same chunk: no recompile
        assert _REAL_CHUNK._cached._cache_size() == compiled  # noqa: SLF001
    assert chunks.starts[0] == (resumed or 0)
    assert run.stats.resumed_from_step == resumed
    assert run.stats.steps_run == 100 - (resumed or 0)
    assert run.stats.num_steps == 100
    _assert_same_run(run, reference)
    meta, state = _state(path, chunks.states[-1])
    assert meta == {"step": 100} and int(state.num_saved) == 11  # finished
    _assert_same_tree(state, chunks.states[-1])

    # The finished checkpoint returns the run without taking a step.
    chunks = _no_steps(monkeypatch)
    again = gf.train_sgd(CHAIN, **KW, run=gf.Run(checkpoint=path))
    assert chunks.starts == []
    assert again.stats.steps_run == 0 and again.stats.resumed_from_step == 100
    _assert_same_run(again, reference)


def test_custom_optimizer_state_is_restored(tmp_path, monkeypatch, reference):
    """Momentum SGD resumes to the same bits, with a new optimizer object (its
    repr, with memory addresses, differs); and the test can fail: the same
    checkpoint with the momentum zeroed resumes to different bits."""
    path = tmp_path / "momentum.ckpt.npz"
    opt = lambda: optax.sgd(0.2, momentum=0.5)  # a new object each call
    # Each new object compiles the step anew (its functions are static), so
    # the crashed run shares the reference's object; the resumed ones do not.
    first, second = opt(), opt()
    assert repr(first) != repr(second)
    ref = _reference(optimizer=first)
    assert not np.array_equal(ref.params.W0, reference.params.W0)  # momentum acts
    chunks = _fail_at_call(monkeypatch, 4)
    with pytest.raises(_Crash):
        gf.train_sgd(
            CHAIN,
            **KW,
            sgd=gf.SGD(optimizer=first),
            run=gf.Run(checkpoint=path, checkpoint_every=0),
        )
    like = chunks.states[-1]
    monkeypatch.setattr(sgd_loop, "sgd_chunk", _REAL_CHUNK)
    saved = path.read_bytes()
    run = gf.train_sgd(
        CHAIN, **KW, sgd=gf.SGD(optimizer=second), run=gf.Run(checkpoint=path)
    )
    assert run.stats.resumed_from_step == 10
    _assert_same_run(run, ref)

    # The optimizer's state (the momentum) is in the checkpoint: zero it.
    path.write_bytes(saved)
    meta, arrays = read_npz_with_meta(path, FORMAT_NAME)
    paths = jax.tree_util.tree_flatten_with_path(like)[0]
    momentum = [
        f"state/{i}"
        for i, (key, _) in enumerate(paths)
        if jax.tree_util.keystr(key).startswith(".opt_state")
    ]
    assert momentum and any(np.any(arrays[k] != 0) for k in momentum)
    for k in momentum:
        arrays[k] = np.zeros_like(arrays[k])
    np.savez(path, __gradflow__=np.array(json.dumps(meta)), **arrays)
    zeroed = gf.train_sgd(
        CHAIN, **KW, sgd=gf.SGD(optimizer=second), run=gf.Run(checkpoint=path)
    )
    assert zeroed.stats.resumed_from_step == 10
    np.testing.assert_array_equal(zeroed.params.W0[:2], ref.params.W0[:2])
    assert not np.array_equal(zeroed.params.W0[-1], ref.params.W0[-1])


# ------------------------------------------------------------------- Ctrl-C


def test_ctrl_c_stops_saves_and_resumes(tmp_path, monkeypatch, reference):
    path = tmp_path / "run.ckpt.npz"
    # SIGINT arrives as the 4th chunk (steps 10-14) starts: the run finishes
    # that chunk, writes its checkpoint and raises with what it has.
    chunks = _fail_at_call(monkeypatch, 4, lambda: os.kill(os.getpid(), signal.SIGINT))
    with pytest.raises(KeyboardInterrupt) as info:
        gf.train_sgd(CHAIN, **KW, run=gf.Run(checkpoint=path))
    e = info.value
    assert isinstance(e, gf.Interrupted) and e.checkpoint == path
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert chunks.starts == [0, 4, 8, 10]
    part = e.result
    assert not part.ok
    assert part.message == (
        "gradflow.train_sgd: interrupted at step 14 of 100 (t = 2.8); the "
        f"checkpoint '{path}' holds the state: run the same call again to resume"
    )
    assert str(e) == part.message
    # Saves at steps 0 and 10, then the iterate at the interruption (step 14).
    np.testing.assert_array_equal(part.steps, [0, 10, 14])
    np.testing.assert_allclose(part.ts, [0.0, 2.0, 2.8])
    for x, y in zip(
        jax.tree.leaves(part.params[:2]), jax.tree.leaves(reference.params[:2])
    ):
        np.testing.assert_array_equal(x, y)
    np.testing.assert_array_equal(part.train_loss[:2], reference.train_loss[:2])
    np.testing.assert_array_equal(
        part.population_loss[:2], reference.population_loss[:2]
    )
    assert part.stats.num_steps == 14
    assert len(part.extras["att_entropy"]) == 3  # stages were attached
    # The iterate at the interruption is the state the checkpoint holds.
    meta, state = _state(path, chunks.states[-1])
    _assert_same_tree(state, chunks.states[-1])
    assert meta == {"step": 14} and int(state.count) == 4
    assert int(state.num_saved) == 2 and not bool(state.failed)
    for x, y in zip(
        jax.tree.leaves(part.params), jax.tree.leaves(state.params), strict=True
    ):
        np.testing.assert_array_equal(x[-1], y)

    monkeypatch.setattr(sgd_loop, "sgd_chunk", _REAL_CHUNK)
    run = gf.train_sgd(CHAIN, **KW, run=gf.Run(checkpoint=path))
    assert run.stats.resumed_from_step == 14
    _assert_same_run(run, reference)


def test_ctrl_c_without_checkpoint(monkeypatch):
    """Before the first save: the partial run holds the start and the iterate
    at the interruption; the message says how to make a run resumable."""
    _fail_at_call(monkeypatch, 1, lambda: os.kill(os.getpid(), signal.SIGINT))
    with pytest.raises(KeyboardInterrupt) as info:
        gf.train_sgd(CHAIN, **KW)
    e = info.value
    assert isinstance(e, gf.Interrupted) and e.checkpoint is None
    assert e.result.message == (
        "gradflow.train_sgd: interrupted at step 4 of 100 (t = 0.8); pass "
        "checkpoint=PATH to be able to resume"
    )
    np.testing.assert_array_equal(e.result.steps, [0, 4])


def test_ctrl_c_in_the_last_chunk_returns_the_finished_run(monkeypatch, reference):
    """A Ctrl-C whose chunk finishes the run interrupts nothing: the run is
    returned, complete."""
    _fail_at_call(monkeypatch, 30, lambda: os.kill(os.getpid(), signal.SIGINT))
    run = gf.train_sgd(CHAIN, **KW)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    _assert_same_run(run, reference)


# ---------------------------------------------------------------- refusals


@pytest.fixture(scope="module")
def finished_checkpoint(tmp_path_factory):
    path = tmp_path_factory.mktemp("ckpt") / "run.ckpt.npz"
    gf.train_sgd(CHAIN, **KW, run=gf.Run(checkpoint=path))
    return path


@pytest.mark.parametrize(
    "change, match",
    [
        (dict(sgd=gf.SGD(lr=0.25)), "lr = 0.2 there, 0.25 here"),
        (dict(seed=1), "seed = 0 there, 1 here"),
        (dict(batch_size=16), "batch_size = 32 there, 16 here"),
        (dict(num_sequences=64), "num_sequences = null there, 64 here"),
        (dict(init_scale=0.2), "init_scale = 0.3 there, 0.2 here"),
        (
            dict(ts=[0.0, 20.0]),
            "num_saves = 11 there, 2 here; the save steps differs",
        ),
        (
            dict(source=gf.chains.sticky(4, 0.5, 0.6, 0.05)),
            r"different call: the chain \(transition matrix P\) differs\. ",
        ),
        (
            dict(params=gf.init_params(4, 4, 0.3, seed=1), init_scale=None),
            "init_scale = 0.3 there, null here; the initial parameters differs",
        ),
        (dict(optimizer=optax.sgd(0.2)), 'optimizer = "sgd" there'),
    ],
)
def test_checkpoint_of_another_call_is_refused(
    finished_checkpoint, monkeypatch, change, match
):
    _nothing_drawn(monkeypatch)  # refused before anything is drawn or stepped
    kw = {**KW, "source": CHAIN, **change}
    with pytest.raises(ValueError, match=match) as info:
        gf.train_sgd(**kw, run=gf.Run(checkpoint=finished_checkpoint))
    assert f"checkpoint '{finished_checkpoint}' was made by a different call" in str(
        info.value
    )


def test_custom_optimizers_are_compared_by_content(tmp_path, monkeypatch):
    path = tmp_path / "opt.ckpt.npz"
    opt = optax.sgd(0.2, momentum=0.5)
    gf.train_sgd(CHAIN, **KW, sgd=gf.SGD(optimizer=opt), run=gf.Run(checkpoint=path))
    chunks = _no_steps(monkeypatch)
    # Same kind and hyperparameters, another object: accepted (finished run).
    run = gf.train_sgd(
        CHAIN,
        **KW,
        sgd=gf.SGD(optimizer=optax.sgd(0.2, momentum=0.5)),
        run=gf.Run(checkpoint=path),
    )
    assert run.stats.resumed_from_step == 100 and chunks.starts == []
    _nothing_drawn(monkeypatch)  # the others are refused before anything runs
    with pytest.raises(ValueError, match=r"decay = 0.5 there, 0.9 here"):
        gf.train_sgd(
            CHAIN,
            **KW,
            sgd=gf.SGD(optimizer=optax.sgd(0.2, momentum=0.9)),
            run=gf.Run(checkpoint=path),
        )
    with pytest.raises(ValueError, match=r"step_size = -0.2 there, -0.1 here"):
        gf.train_sgd(
            CHAIN,
            **KW,
            sgd=gf.SGD(optimizer=optax.sgd(0.1, momentum=0.5)),
            run=gf.Run(checkpoint=path),
        )
    with pytest.raises(
        ValueError,
        match=r'optimizer state\[0\]\.mu\.W0 = "\(unset\)" there, "float64\[4, 4\]"',
    ):
        gf.train_sgd(
            CHAIN,
            **KW,
            sgd=gf.SGD(optimizer=optax.adam(0.2)),
            run=gf.Run(checkpoint=path),
        )


def test_checkpoint_of_integrate_is_refused(tmp_path):
    # a checkpoint of the kind a flow writes (gf.flow, gf.integrate), without
    # the cost of compiling a flow
    path = tmp_path / "flow.ckpt.npz"
    Checkpointer(path, "integrate", {"t1": 20.0}, {}).write({"t": 1.0}, {})
    with pytest.raises(
        ValueError, match="written by 'integrate', not 'train_sgd'"
    ) as info:
        gf.train_sgd(CHAIN, **KW, run=gf.Run(checkpoint=path))
    assert str(path) in str(info.value)


def test_corrupt_checkpoint_names_the_file(tmp_path, finished_checkpoint):
    path = tmp_path / "cut.ckpt.npz"
    path.write_bytes(finished_checkpoint.read_bytes()[:2000])
    with pytest.raises(ValueError, match="could not be read .* truncated") as info:
        gf.train_sgd(CHAIN, **KW, run=gf.Run(checkpoint=path))
    assert f"'{path}'" in str(info.value)
    junk = tmp_path / "junk.npz"
    junk.write_bytes(b"not a zip file")
    with pytest.raises(ValueError, match="is not a gradflow-checkpoint file"):
        gf.train_sgd(CHAIN, **KW, run=gf.Run(checkpoint=junk))


def test_checkpoint_state_that_does_not_fit_is_refused(
    tmp_path, monkeypatch, finished_checkpoint
):
    """A checkpoint with the right fingerprint but a state that does not fit
    the call (here: a buffer of 12 saves where the grid has 11) is refused,
    not trusted: every array of the state is checked against the state this
    call builds, naming the array."""
    path = tmp_path / "odd.ckpt.npz"
    meta, arrays = read_npz_with_meta(finished_checkpoint, FORMAT_NAME)
    buffers = [k for k, v in arrays.items() if v.shape == (11, 4, 4)]
    assert len(buffers) == 4  # the saved W0, W1, WQ, WK (d = m = 4)
    key = buffers[0]
    arrays[key] = np.concatenate([arrays[key], arrays[key][-1:]])
    np.savez(path, __gradflow__=np.array(json.dumps(meta)), **arrays)
    chunks = _no_steps(monkeypatch)
    with pytest.raises(
        ValueError,
        match=re.escape(
            f"the checkpoint's array '{key}' is float64[12, 4, 4], expected "
            "float64[11, 4, 4]"
        ),
    ):
        gf.train_sgd(CHAIN, **KW, run=gf.Run(checkpoint=path))
    assert chunks.starts == []


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(checkpoint=3), TypeError, "checkpoint must be a file path"),
        (dict(checkpoint=""), ValueError, "checkpoint must be a file path"),
        (dict(checkpoint_every=-1.0), ValueError, "checkpoint_every must be"),
        (dict(checkpoint_every="1"), TypeError, "checkpoint_every must be"),
    ],
)
def test_bad_checkpoint_arguments(monkeypatch, kwargs, error, match):
    _nothing_drawn(monkeypatch)
    with pytest.raises(error, match=match):
        gf.train_sgd(CHAIN, **KW, **kwargs)


def test_failed_run_is_checkpointed_as_finished(tmp_path, monkeypatch):
    path = tmp_path / "diverged.ckpt.npz"
    kw = dict(
        KW, init_scale=3.0, sgd=gf.SGD(lr=1e200), t1=1e201, saveat=gf.SaveAt(None)
    )
    run = gf.train_sgd(CHAIN, **kw, run=gf.Run(checkpoint=path))
    assert not run.ok and "non-finite" in run.message
    chunks = _no_steps(monkeypatch)  # running it again returns the failure
    again = gf.train_sgd(CHAIN, **kw, run=gf.Run(checkpoint=path))
    assert not again.ok and again.message == run.message
    assert again.stats.steps_run == 0 and chunks.starts == []
    _assert_same_run(again, run)


def test_periodic_writes_follow_the_clock(tmp_path):
    """`checkpoint_every` is wall time: 0 writes after every chunk (30 chunks:
    4 + 4 + 2 steps between saves, plus the final write), an hour writes only
    at the end."""
    every = gf.train_sgd(
        CHAIN,
        **KW,
        run=gf.Run(checkpoint=tmp_path / "a.npz", checkpoint_every=0),
    )
    hourly = gf.train_sgd(
        CHAIN,
        **KW,
        run=gf.Run(checkpoint=tmp_path / "b.npz", checkpoint_every=3600),
    )
    assert every.stats.checkpoint_writes == 31
    assert hourly.stats.checkpoint_writes == 1


# ----------------------------------------------------------------------- CLI


def test_cli_checkpoint_resumes(tmp_path, capsys):
    ckpt, out = tmp_path / "run.ckpt.npz", tmp_path / "run"
    args = CLI + ["--checkpoint", str(ckpt), "--out", str(out), "--json"]
    assert main(args) == 0
    first = json.loads(capsys.readouterr().out)
    assert first["stats"]["resumed_from_step"] is None and ckpt.exists()
    assert main(args) == 0
    second = json.loads(capsys.readouterr().out)
    assert second["stats"]["resumed_from_step"] == 100
    assert second["stats"]["steps_run"] == 0
    assert second["final_population_loss"] == first["final_population_loss"]
    # Another lr: refused, one line, exit code 2.
    assert main([*args[:-1], "--lr", "0.25"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("gradflow sgd: error: checkpoint ") and err.count("\n") == 1
    assert "lr = 0.2 there, 0.25 here" in err


def test_cli_ctrl_c_saves_partial_run(tmp_path, capsys, monkeypatch):
    ckpt, out = tmp_path / "run.ckpt.npz", tmp_path / "run"
    # (the command's default save grid has a save at nearly every step, so
    # its chunks are the same whatever their length)
    chunks = _fail_at_call(monkeypatch, 30, lambda: os.kill(os.getpid(), signal.SIGINT))
    args = CLI + ["--checkpoint", str(ckpt), "--out", str(out)]
    assert main(args) == 130
    done = _state(ckpt, chunks.states[-1])[0]["step"]
    assert len(chunks.starts) == 30 and 0 < done < 100
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith(f"gradflow sgd: interrupted at step {done} of 100")
    assert f"partial run saved to {out / 'sgd_run.npz'}" in err
    assert f"checkpoint {ckpt}" in err
    part = gf.load_sgd(out / "sgd_run.npz")
    assert not part.ok and "interrupted" in part.message and part.steps[-1] == done
    monkeypatch.setattr(sgd_loop, "sgd_chunk", _REAL_CHUNK)
    assert main(args) == 0
    full = gf.load_sgd(out / "sgd_run.npz")
    assert full.ok and full.stats.resumed_from_step == done
    np.testing.assert_array_equal(full.steps[: len(part) - 1], part.steps[:-1])


def test_cli_ctrl_c_without_out_or_checkpoint(capsys, monkeypatch):
    _fail_at_call(monkeypatch, 2, lambda: os.kill(os.getpid(), signal.SIGINT))
    assert main(CLI) == 130
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err == (
        "gradflow sgd: interrupted at step 2 of 100 (t = 0.4); partial run not "
        "saved (no --out); not resumable (no --checkpoint)"
    )


def test_cli_failed_run_exits_nonzero(tmp_path, capsys):
    out = tmp_path / "run"
    args = CLI + ["--init-scale", "3", "--lr", "1e200", "--t1", "1e201"]
    assert main([*args, "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("gradflow sgd: run failed: the mini-batch loss")
    assert f"partial run saved to {out / 'sgd_run.npz'}" in err
    assert not gf.load_sgd(out / "sgd_run.npz").ok


def test_cli_bad_checkpoint_arguments(tmp_path, capsys):
    assert main([*CLI, "--checkpoint", str(tmp_path)]) == 2
    assert "checkpoint must be a file path" in capsys.readouterr().err
    assert main([*CLI, "--checkpoint", "x.npz", "--checkpoint-every", "-1"]) == 2
    assert "--checkpoint-every must be" in capsys.readouterr().err
