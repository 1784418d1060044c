"""Checkpoints, resumption and Ctrl-C for `gf.train_sgd` and `gradflow sgd`.

The library's runs share one small configuration (the paper's model on
d = 4, width 4, context 16, batch 32, 100 steps, 11 saves), so the module
costs one compilation of the chunk of steps (and one of the stage detection
on the saves). Chunks are cut to 4 steps (`chunk_steps=4`), so that a
checkpoint written after every chunk (`checkpoint_every=0`) also falls
between saves.

A crash or a Ctrl-C at a chosen step is made with public means: the runs
train `Watched`, the paper's model with a host callback
(`jax.debug.callback`) in its sampler. It counts the batches drawn (the
first batch's loss, then one per step) and, at a chosen one, raises (a
process that dies inside a chunk) or sends `SIGINT` (Ctrl-C: the run stops
after the current chunk). `test_watched_trains_as_the_papers_model` checks
that it trains to the bits of the paper's model itself. The command line is
interrupted as a user does it: `SIGINT` from a thread once the run is under
way (tests/ctrl_c.py).
"""

import json
import os
import re
import signal
import sys

import jax
import numpy as np
import optax
import pytest

import gradflow as gf
from gradflow.cli import main


sys.path.insert(0, os.path.dirname(__file__))
from ctrl_c import ctrl_c_when  # noqa: E402


class _Watch:
    """The host side of `Watched`: counts the batches drawn (`draws`) and
    runs `action` at draw number `at` (from 1)."""

    def __init__(self):
        self.reset()

    def reset(self, at=None, action=None):
        self.draws, self.at, self.action = 0, at, action

    def __call__(self):
        self.draws += 1
        if self.draws == self.at:
            self.action()


WATCH = _Watch()


class Watched(gf.SampledProblem, gf.StagedProblem, gf.BoundedProblem):
    """The paper's model (`inner`), every batch it draws reported to
    `WATCH` on the host, in order."""

    inner: gf.problems.MarkovAttention

    def loss(self, params):
        return self.inner.loss(params)

    def init(self, key, init_scale):
        return self.inner.init(key, init_scale)

    def sample(self, key, n):
        jax.debug.callback(WATCH, ordered=True)
        return self.inner.sample(key, n)

    def sample_loss(self, params, batch):
        return self.inner.sample_loss(params, batch)

    def observe(self, params):
        return self.inner.observe(params)

    def loss_scale(self):
        return self.inner.loss_scale()

    def loss_floor(self):
        return self.inner.loss_floor()

    def analyse(self, ts, params, loss, *, thresholds, loss_scale):
        return self.inner.analyse(
            ts, params, loss, thresholds=thresholds, loss_scale=loss_scale
        )


def _watched(chain):
    return Watched(gf.problems.MarkovAttention(chain, 4, context=16))


CHAIN = gf.chains.sticky(4, 0.5, 0.5, 0.05)
PROBLEM = _watched(CHAIN)
SGD = gf.SGD(lr=0.2, batch_size=32)
KW = dict(
    init_scale=0.3,
    sgd=SGD,
    t1=20.0,
    saveat=gf.SaveAt(np.linspace(0.0, 20.0, 11)),
)
CLI = (
    "sgd --d 4 --width 4 --init-scale 0.3 --context 16 --batch-size 32 --lr 0.2 "
    "--t1 20 --no-progress"
).split()


def _run(**kw) -> gf.Run:
    return gf.Run(**{"progress": False, "chunk_steps": 4, **kw})


def _train(problem=PROBLEM, **kw):
    """`gf.train_sgd` of the module's configuration, changed by `kw` (`run`
    takes a dict of `gf.Run` options)."""
    run = _run(**kw.pop("run", {}))
    return gf.train_sgd(problem, **{**KW, **kw}, run=run)


def _draw(step: int, *, resumed_from: int | None = None) -> int:
    """The draw (from 1) of step `step`'s batch: a fresh run first draws one
    for the loss at its start; a resumed run starts at its checkpoint."""
    return step + 2 if resumed_from is None else step - resumed_from + 1


class _Crash(Exception):
    pass


def _crash():
    raise _Crash


def _ctrl_c():
    os.kill(os.getpid(), signal.SIGINT)


@pytest.fixture(scope="module")
def reference():
    """An uninterrupted run without a checkpoint."""
    WATCH.reset()
    return _train()


def _assert_same_run(a, b):
    np.testing.assert_array_equal(a.steps, b.steps)
    np.testing.assert_array_equal(a.ts, b.ts)
    for x, y in zip(jax.tree.leaves(a.params), jax.tree.leaves(b.params), strict=True):
        np.testing.assert_array_equal(x, y)
    np.testing.assert_array_equal(a.population_loss, b.population_loss)
    np.testing.assert_array_equal(a.grad_norm, b.grad_norm)
    np.testing.assert_array_equal(a.train_loss, b.train_loss)
    assert a.ok == b.ok and a.message == b.message and a.settings == b.settings


def _read(path) -> tuple[dict, dict[str, np.ndarray]]:
    """`(meta, arrays)` of a checkpoint file: a `.npz` whose `__gradflow__`
    entry is its JSON metadata (`docs/reliability.md`)."""
    with np.load(path, allow_pickle=False) as npz:
        arrays = {k: npz[k] for k in npz.files}
    return json.loads(str(arrays.pop("__gradflow__"))), arrays


def _write(path, meta, arrays) -> None:
    np.savez(path, __gradflow__=np.array(json.dumps(meta)), **arrays)


def _holds(arrays: dict[str, np.ndarray], point) -> bool:
    """Whether every array of the parameter point `point` is in `arrays`,
    bit for bit (a checkpoint holds the iterate it stopped at)."""
    return all(
        any(a.dtype == x.dtype and np.array_equal(a, x) for a in arrays.values())
        for x in map(np.asarray, jax.tree.leaves(point))
    )


def test_watched_trains_as_the_papers_model(reference):
    """The host callback changes nothing: the watched model trains to the
    bits of the paper's model on the same chain (one compilation more)."""
    plain = gf.train_sgd(CHAIN, width=4, context=16, **KW, run=_run())
    _assert_same_run(reference, plain)
    assert reference.stages == plain.stages
    for k in plain.extras:
        np.testing.assert_array_equal(reference.extras[k], plain.extras[k])


# ------------------------------------------------------------------ resuming


def _traces():
    """The names of the functions JAX traces (to compile them) while the
    returned list is registered: a call that compiles nothing anew traces
    nothing (JAX's monitoring events)."""
    traced: list[str] = []

    def listener(event, duration, **kwargs):
        if event == "/jax/core/compile/jaxpr_trace_duration":
            traced.append(kwargs.get("fun_name", "?"))

    return traced, listener


# Chunks: steps 0-4, 4-8, 8-10, 10-14, 14-18, 18-20, ..., 98-100 (30 chunks).
STARTS = [10 * k + j for k in range(10) for j in (0, 4, 8)]


# The process dies on entering chunk `crash_at` (at the first draw of its
# first step); the checkpoint (written after every chunk) holds the state
# after the chunk before: none (the first), at a save step (10), between saves
# (8, 18), before the last chunk (98).
@pytest.mark.parametrize(
    "crash_at, resumed, chunk_steps",
    [(1, None, 4), (3, 8, 4), (4, 10, 4), (6, 18, 4), (30, 98, 4), (6, 18, 3)],
)
def test_killed_run_resumes_to_the_same_bits(
    tmp_path, reference, crash_at, resumed, chunk_steps
):
    """A run killed at any chunk resumes, from its checkpoint, to the bits of
    the uninterrupted run (also with chunks of another length: `chunk_steps`
    is not part of a run's identity); a finished checkpoint then returns the
    run without taking a step."""
    path = tmp_path / "run.ckpt.npz"
    checkpointed = dict(checkpoint=path, checkpoint_every=0)
    WATCH.reset(at=_draw(STARTS[crash_at - 1]), action=_crash)
    with pytest.raises(jax.errors.JaxRuntimeError, match="_Crash"):
        _train(run=checkpointed)
    if resumed is None:
        assert not path.exists()  # nothing written before the first chunk ended
    else:
        # the state after the last chunk that ended: its step, and the
        # iterate there when it is a save (the iterate at step 10)
        meta, arrays = _read(path)
        assert meta["format"] == "gradflow-checkpoint"
        assert meta["state"] == {"step": resumed}
        if resumed % 10 == 0:
            assert _holds(arrays, reference.at(resumed // 10))

    WATCH.reset()
    traced, listener = _traces()
    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        run = _train(run=dict(checkpointed, chunk_steps=chunk_steps))
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)
    if chunk_steps == 4:  # the same chunk: nothing compiled anew
        assert traced == []
    # the steps taken: from the checkpoint on (a fresh run: and its first batch)
    assert WATCH.draws == 100 - (resumed or 0) + (resumed is None)
    assert run.stats.resumed_from_step == resumed
    assert run.stats.steps_run == 100 - (resumed or 0)
    assert run.stats.num_steps == 100
    _assert_same_run(run, reference)
    meta, arrays = _read(path)
    assert meta["state"] == {"step": 100}  # finished
    assert _holds(arrays, reference.at(-1))

    # The finished checkpoint returns the run without taking a step.
    WATCH.reset()
    again = _train(run=dict(checkpoint=path))
    assert WATCH.draws == 0
    assert again.stats.steps_run == 0 and again.stats.resumed_from_step == 100
    _assert_same_run(again, reference)


# Momentum SGD: one object for the tests below (its functions are static: a
# new object compiles the step anew).
MOMENTUM = optax.sgd(0.2, momentum=0.5)


def test_custom_optimizer_state_is_restored(tmp_path, reference):
    """Momentum SGD resumes to the same bits, with a new optimizer object (its
    repr, with memory addresses, differs); and the test can fail: the same
    checkpoint with the momentum zeroed resumes to different bits."""
    path = tmp_path / "momentum.ckpt.npz"
    opt = lambda: optax.sgd(0.2, momentum=0.5)  # a new object each call
    # Each new object compiles the step anew (its functions are static), so
    # the crashed run shares the reference's object; the resumed ones do not.
    first, second = MOMENTUM, opt()
    assert repr(first) != repr(second)
    WATCH.reset()
    ref = _train(sgd=gf.SGD(0.2, 32, optimizer=first))
    assert not np.array_equal(ref.params.W0, reference.params.W0)  # momentum acts
    WATCH.reset(at=_draw(10), action=_crash)  # entering chunk 4 (steps 10-14)
    with pytest.raises(jax.errors.JaxRuntimeError, match="_Crash"):
        _train(
            sgd=gf.SGD(0.2, 32, optimizer=first),
            run=dict(checkpoint=path, checkpoint_every=0),
        )
    WATCH.reset()
    saved = path.read_bytes()
    run = _train(sgd=gf.SGD(0.2, 32, optimizer=second), run=dict(checkpoint=path))
    assert run.stats.resumed_from_step == 10
    _assert_same_run(run, ref)

    # The optimizer's state (the momentum) is in the checkpoint: zero it. At
    # step 10 (a save) the state's (4, 4) arrays are the parameters, which
    # the run saved there, and the momentum of each.
    path.write_bytes(saved)
    meta, arrays = _read(path)
    params = [np.asarray(x) for x in jax.tree.leaves(ref.at(1))]
    momentum = [
        k
        for k, v in arrays.items()
        if v.shape == (4, 4) and not any(np.array_equal(v, p) for p in params)
    ]
    assert len(momentum) == 4 and any(np.any(arrays[k] != 0) for k in momentum)
    for k in momentum:
        arrays[k] = np.zeros_like(arrays[k])
    _write(path, meta, arrays)
    zeroed = _train(sgd=gf.SGD(0.2, 32, optimizer=second), run=dict(checkpoint=path))
    assert zeroed.stats.resumed_from_step == 10
    np.testing.assert_array_equal(zeroed.params.W0[:2], ref.params.W0[:2])
    assert not np.array_equal(zeroed.params.W0[-1], ref.params.W0[-1])


# ------------------------------------------------------------------- Ctrl-C


def test_ctrl_c_stops_saves_and_resumes(tmp_path, reference):
    path = tmp_path / "run.ckpt.npz"
    # SIGINT arrives as the 4th chunk (steps 10-14) starts: the run finishes
    # that chunk, writes its checkpoint and raises with what it has.
    WATCH.reset(at=_draw(10), action=_ctrl_c)
    with pytest.raises(KeyboardInterrupt) as info:
        _train(run=dict(checkpoint=path))
    e = info.value
    assert isinstance(e, gf.Interrupted) and e.checkpoint == path
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert WATCH.draws == _draw(13)  # the last step taken: 13
    part = e.result
    assert not part.ok and bool(part.result == gf.RESULTS.interrupted)
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
    meta, arrays = _read(path)
    assert meta["state"] == {"step": 14} and _holds(arrays, part.at(-1))

    WATCH.reset()
    run = _train(run=dict(checkpoint=path))
    assert run.stats.resumed_from_step == 14
    assert WATCH.draws == 100 - 14
    _assert_same_run(run, reference)


def test_ctrl_c_without_checkpoint():
    """Before the first save: the partial run holds the start and the iterate
    at the interruption; the message says how to make a run resumable."""
    WATCH.reset(at=_draw(0), action=_ctrl_c)
    with pytest.raises(KeyboardInterrupt) as info:
        _train()
    e = info.value
    assert isinstance(e, gf.Interrupted) and e.checkpoint is None
    assert e.result.message == (
        "gradflow.train_sgd: interrupted at step 4 of 100 (t = 0.8); pass "
        "checkpoint=PATH to be able to resume"
    )
    np.testing.assert_array_equal(e.result.steps, [0, 4])


def test_ctrl_c_in_the_last_chunk_returns_the_finished_run(reference):
    """A Ctrl-C whose chunk finishes the run interrupts nothing: the run is
    returned, complete."""
    WATCH.reset(at=_draw(98), action=_ctrl_c)  # entering the last chunk
    run = _train()
    assert WATCH.draws == _draw(99)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    _assert_same_run(run, reference)


# ---------------------------------------------------------------- refusals


@pytest.fixture(scope="module")
def finished_checkpoint(tmp_path_factory):
    path = tmp_path_factory.mktemp("ckpt") / "run.ckpt.npz"
    WATCH.reset()
    _train(run=dict(checkpoint=path))
    return path


@pytest.mark.parametrize(
    "change, match",
    [
        (dict(sgd=gf.SGD(0.25, 32)), "lr = 0.2 there, 0.25 here"),
        (dict(seed=1), "seed = 0 there, 1 here"),
        (dict(sgd=gf.SGD(0.2, 16)), "batch_size = 32 there, 16 here"),
        (
            dict(sgd=gf.SGD(0.2, 32, num_sequences=64)),
            "num_sequences = null there, 64 here",
        ),
        (dict(init_scale=0.2), "init_scale = 0.3 there, 0.2 here"),
        (
            # the problem's configuration (not an array: the same start)
            dict(problem=Watched(gf.problems.MarkovAttention(CHAIN, 4, context=8))),
            "problem inner.context = 16 there, 8 here",
        ),
        (
            dict(saveat=gf.SaveAt([0.0, 20.0])),
            "num_saves = 11 there, 2 here; the save steps differs",
        ),
        (
            dict(problem=_watched(gf.chains.sticky(4, 0.5, 0.6, 0.05))),
            # (the paper's model itself: "the problem's chain.P differs")
            r"different call: the problem's inner\.chain\.P differs\. ",
        ),
        (
            dict(params=gf.init_params(4, 4, 0.3, seed=1), init_scale=None),
            "init_scale = 0.3 there, null here; the initial parameters differs",
        ),
        (
            dict(sgd=gf.SGD(0.2, 32, optimizer=optax.sgd(0.2))),
            'optimizer = "sgd" there',
        ),
    ],
)
def test_checkpoint_of_another_call_is_refused(finished_checkpoint, change, match):
    WATCH.reset()
    with pytest.raises(ValueError, match=match) as info:
        _train(**change, run=dict(checkpoint=finished_checkpoint))
    assert f"checkpoint '{finished_checkpoint}' was made by a different call" in str(
        info.value
    )
    assert WATCH.draws == 0  # refused before anything is drawn or stepped


def test_custom_optimizers_are_compared_by_content(tmp_path):
    path = tmp_path / "opt.ckpt.npz"
    # (the module's momentum object: the compiled step of the test above)
    _train(sgd=gf.SGD(0.2, 32, optimizer=MOMENTUM), run=dict(checkpoint=path))
    # Same kind and hyperparameters, another object: accepted (finished run).
    WATCH.reset()
    run = _train(
        sgd=gf.SGD(0.2, 32, optimizer=optax.sgd(0.2, momentum=0.5)),
        run=dict(checkpoint=path),
    )
    assert run.stats.resumed_from_step == 100 and WATCH.draws == 0
    # the others are refused before anything runs
    with pytest.raises(ValueError, match=r"decay = 0.5 there, 0.9 here"):
        _train(
            sgd=gf.SGD(0.2, 32, optimizer=optax.sgd(0.2, momentum=0.9)),
            run=dict(checkpoint=path),
        )
    with pytest.raises(ValueError, match=r"step_size = -0.2 there, -0.1 here"):
        _train(
            sgd=gf.SGD(0.2, 32, optimizer=optax.sgd(0.1, momentum=0.5)),
            run=dict(checkpoint=path),
        )
    with pytest.raises(
        ValueError,
        match=r'optimizer state\[0\]\.mu\.W0 = "\(unset\)" there, "float64\[4, 4\]"',
    ):
        _train(
            sgd=gf.SGD(0.2, 32, optimizer=optax.adam(0.2)),
            run=dict(checkpoint=path),
        )
    assert WATCH.draws == 0


def test_checkpoint_of_integrate_is_refused(tmp_path, finished_checkpoint):
    # a checkpoint of the kind a flow writes (gf.flow, gf.integrate), without
    # the cost of compiling a flow: the finished one, relabelled
    path = tmp_path / "flow.ckpt.npz"
    meta, arrays = _read(finished_checkpoint)
    meta["fingerprint"]["kind"] = "integrate"
    _write(path, meta, arrays)
    with pytest.raises(
        ValueError, match="written by 'integrate', not 'train_sgd'"
    ) as info:
        _train(run=dict(checkpoint=path))
    assert str(path) in str(info.value)


def test_corrupt_checkpoint_names_the_file(tmp_path, finished_checkpoint):
    path = tmp_path / "cut.ckpt.npz"
    path.write_bytes(finished_checkpoint.read_bytes()[:2000])
    with pytest.raises(ValueError, match="could not be read .* truncated") as info:
        _train(run=dict(checkpoint=path))
    assert f"'{path}'" in str(info.value)
    junk = tmp_path / "junk.npz"
    junk.write_bytes(b"not a zip file")
    with pytest.raises(ValueError, match="is not a gradflow-checkpoint file"):
        _train(run=dict(checkpoint=junk))


def test_checkpoint_state_that_does_not_fit_is_refused(tmp_path, finished_checkpoint):
    """A checkpoint with the right fingerprint but a state that does not fit
    the call (here: a buffer of 12 saves where the grid has 11) is refused,
    not trusted: every array of the state is checked against the state this
    call builds, naming the array."""
    path = tmp_path / "odd.ckpt.npz"
    meta, arrays = _read(finished_checkpoint)
    buffers = [k for k, v in arrays.items() if v.shape == (11, 4, 4)]
    assert len(buffers) == 4  # the saved W0, W1, WQ, WK (d = m = 4)
    key = buffers[0]
    arrays[key] = np.concatenate([arrays[key], arrays[key][-1:]])
    _write(path, meta, arrays)
    WATCH.reset()
    with pytest.raises(
        ValueError,
        match=re.escape(
            f"the checkpoint's array '{key}' is float64[12, 4, 4], expected "
            "float64[11, 4, 4]"
        ),
    ):
        _train(run=dict(checkpoint=path))
    assert WATCH.draws == 0


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(checkpoint=3), TypeError, "checkpoint must be a file path"),
        (dict(checkpoint=""), ValueError, "checkpoint must be a file path"),
        (dict(checkpoint_every=-1.0), ValueError, "checkpoint_every must be"),
        (dict(checkpoint_every="1"), TypeError, "checkpoint_every must be"),
    ],
)
def test_bad_checkpoint_arguments(kwargs, error, match):
    # refused when the `gf.Run` is made: before anything is drawn or stepped
    with pytest.raises(error, match=match):
        gf.Run(**kwargs)


def test_failed_run_is_checkpointed_as_finished(tmp_path):
    path = tmp_path / "diverged.ckpt.npz"
    kw = dict(
        init_scale=3.0,
        sgd=gf.SGD(1e200, 32),
        t1=1e201,
        saveat=gf.SaveAt(None),
    )
    run = _train(**kw, run=dict(checkpoint=path))
    assert not run.ok and "non-finite" in run.message
    assert bool(run.result == gf.RESULTS.nonfinite)
    WATCH.reset()  # running it again returns the failure
    again = _train(**kw, run=dict(checkpoint=path))
    assert not again.ok and again.message == run.message
    assert again.stats.steps_run == 0 and WATCH.draws == 0
    _assert_same_run(again, run)


def test_periodic_writes_follow_the_clock(tmp_path):
    """`checkpoint_every` is wall time: 0 writes after every chunk (30 chunks:
    4 + 4 + 2 steps between saves, plus the final write), an hour writes only
    at the end."""
    every = _train(run=dict(checkpoint=tmp_path / "a.npz", checkpoint_every=0))
    hourly = _train(run=dict(checkpoint=tmp_path / "b.npz", checkpoint_every=3600))
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


def test_cli_ctrl_c_saves_partial_run(tmp_path, capsys):
    ckpt, out = tmp_path / "run.ckpt.npz", tmp_path / "run"
    # Ctrl-C once the first chunk's checkpoint is written (--checkpoint-every 0
    # writes after every chunk; the command's default save grid has a save at
    # nearly every step, so its chunks are a step or two)
    args = CLI + ["--checkpoint", str(ckpt), "--out", str(out)]
    with ctrl_c_when(ckpt.exists) as pressed:
        code = main([*args, "--checkpoint-every", "0"])
    assert pressed and code == 130
    done = _read(ckpt)[0]["state"]["step"]
    assert 0 < done < 100
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith(f"gradflow sgd: interrupted at step {done} of 100")
    assert f"partial run saved to {out / 'sgd_run.npz'}" in err
    assert f"checkpoint {ckpt}" in err
    part = gf.load_sgd(out / "sgd_run.npz")
    assert not part.ok and "interrupted" in part.message and part.steps[-1] == done
    assert main(args) == 0
    full = gf.load_sgd(out / "sgd_run.npz")
    assert full.ok and full.stats.resumed_from_step == done
    np.testing.assert_array_equal(full.steps[: len(part) - 1], part.steps[:-1])


def _running() -> bool:
    """Whether a run is in its loop of chunks: it has put its own Ctrl-C
    handler in place of Python's (the first Ctrl-C stops it after the current
    chunk)."""
    return signal.getsignal(signal.SIGINT) is not signal.default_int_handler


def test_cli_ctrl_c_without_out_or_checkpoint(capsys):
    with ctrl_c_when(_running) as pressed:
        code = main(CLI)
    assert pressed and code == 130
    err = capsys.readouterr().err.strip().splitlines()[-1]
    found = re.fullmatch(
        r"gradflow sgd: interrupted at step (\d+) of 100 \(t = ([\d.]+)\); partial "
        r"run not saved \(no --out\); not resumable \(no --checkpoint\)",
        err,
    )
    assert found, err
    step = int(found[1])
    assert 0 < step < 100 and float(found[2]) == pytest.approx(0.2 * step)


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
