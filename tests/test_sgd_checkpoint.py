"""Checkpoints, resumption and Ctrl-C for `gf.train_sgd` and `gradflow sgd`.

All runs share one small configuration (d = 4, width 4, context 16, batch 32,
100 steps, 11 saves), so the module costs one compilation of the step. Chunks
are cut to 4 steps (`_CHUNK`), so that a checkpoint written after every chunk
(`checkpoint_every=0`) also falls between saves. Stage detection, which is a
deterministic function of the saved parameters compared here bit for bit, is
skipped except where a test says otherwise (it recompiles on every call).
"""

import json
import os
import re
import signal

import equinox as eqx
import jax
import numpy as np
import optax
import pytest

import gradflow as gf
import gradflow._sgd as sgd_module
from gradflow._checkpoint import FORMAT_NAME, Checkpointer
from gradflow._files import read_npz_with_meta
from gradflow.cli import main


CHAIN = gf.chains.sticky(4, 0.5, 0.5, 0.05)
KW = dict(
    init_scale=0.3,
    width=4,
    context=16,
    batch_size=32,
    lr=0.2,
    t1=20.0,
    ts=np.linspace(0.0, 20.0, 11),
    progress=False,
)
CLI = (
    "sgd --d 4 --width 4 --init-scale 0.3 --context 16 --batch-size 32 --lr 0.2 "
    "--t1 20 --no-progress"
).split()


_REAL_ADVANCE = sgd_module._advance


@pytest.fixture(autouse=True)
def small_chunks(monkeypatch, request):
    monkeypatch.setattr(sgd_module, "_CHUNK", 4)
    if "real_stages" not in request.fixturenames:
        monkeypatch.setattr(sgd_module, "_attach_stages", lambda run: run)


@pytest.fixture
def real_stages():
    """Requested by a test that keeps stage detection (see `small_chunks`)."""


def _reference(**kw):
    """An uninterrupted run without a checkpoint."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sgd_module, "_CHUNK", 4)
        mp.setattr(sgd_module, "_attach_stages", lambda run: run)
        return gf.train_sgd(CHAIN, **{**KW, **kw})


@pytest.fixture(scope="module")
def reference():
    return _reference()


class _Crash(Exception):
    pass


def _fail_at_call(monkeypatch, n, action=None):
    """Patches the chunk function: call `n` (from 1) runs `action` first, or
    raises `_Crash` (a process killed mid-run) when `action` is None. Returns
    the list of calls made."""
    calls = []

    def advance(*args, **kwargs):
        calls.append(int(args[3]))  # the first step of the chunk
        if len(calls) == n:
            if action is None:
                raise _Crash
            action()
        return _REAL_ADVANCE(*args, **kwargs)

    monkeypatch.setattr(sgd_module, "_advance", advance)
    return calls


def _no_steps(monkeypatch):
    def advance(*args, **kwargs):
        raise AssertionError("a step was taken")

    monkeypatch.setattr(sgd_module, "_advance", advance)
    monkeypatch.setattr(sgd_module, "_first_batch_loss", advance)
    monkeypatch.setattr(sgd_module, "_draw", advance)


def _assert_same_run(a, b):
    np.testing.assert_array_equal(a.steps, b.steps)
    np.testing.assert_array_equal(a.ts, b.ts)
    for x, y in zip(jax.tree.leaves(a.params), jax.tree.leaves(b.params), strict=True):
        np.testing.assert_array_equal(x, y)
    np.testing.assert_array_equal(a.population_loss, b.population_loss)
    np.testing.assert_array_equal(a.grad_norm, b.grad_norm)
    np.testing.assert_array_equal(a.train_loss, b.train_loss)
    assert a.ok == b.ok and a.message == b.message and a.settings == b.settings


def _state(path):
    meta, arrays = read_npz_with_meta(path, FORMAT_NAME)
    return meta["state"], arrays


# ------------------------------------------------------------------ resuming


def test_killed_run_resumes_to_the_same_bits(tmp_path, monkeypatch, reference):
    path = tmp_path / "run.ckpt.npz"
    # Chunks: steps 0-4, 4-8, 8-10, 10-14, 14-18, 18-20, ...; the process dies
    # on entering the 6th, after the checkpoint at step 18 (between saves).
    calls = _fail_at_call(monkeypatch, 6)
    with pytest.raises(_Crash):
        gf.train_sgd(CHAIN, **KW, checkpoint=path, checkpoint_every=0)
    assert calls == [0, 4, 8, 10, 14, 18]
    state, arrays = _state(path)
    assert state["done"] == 18 and state["count"] == 8 and state["num_saved"] == 2
    assert not state["finished"] and np.isfinite(arrays["partial_sum"])
    calls = _fail_at_call(monkeypatch, 0)  # counts chunks, never fails
    traces = eqx.debug.get_num_traces(_REAL_ADVANCE)
    run = gf.train_sgd(CHAIN, **KW, checkpoint=path, checkpoint_every=0)
    assert eqx.debug.get_num_traces(_REAL_ADVANCE) == traces  # no recompile
    assert calls[0] == 18 and run.stats["resumed_from_step"] == 18
    assert run.stats["steps_run"] == 82 and run.stats["num_steps"] == 100
    _assert_same_run(run, reference)
    assert _state(path)[0]["finished"]

    # The finished checkpoint returns the run without taking a step.
    _no_steps(monkeypatch)
    again = gf.train_sgd(CHAIN, **KW, checkpoint=path)
    assert again.stats["steps_run"] == 0 and again.stats["resumed_from_step"] == 100
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
    _fail_at_call(monkeypatch, 4)
    with pytest.raises(_Crash):
        gf.train_sgd(CHAIN, **KW, optimizer=first, checkpoint=path, checkpoint_every=0)
    monkeypatch.setattr(sgd_module, "_advance", _REAL_ADVANCE)
    saved = path.read_bytes()
    run = gf.train_sgd(CHAIN, **KW, optimizer=second, checkpoint=path)
    assert run.stats["resumed_from_step"] == 10
    _assert_same_run(run, ref)

    path.write_bytes(saved)
    meta, arrays = read_npz_with_meta(path, FORMAT_NAME)
    assert any(np.any(v != 0) for k, v in arrays.items() if k.startswith("opt_state/"))
    for k in arrays:
        if k.startswith("opt_state/"):
            arrays[k] = np.zeros_like(arrays[k])
    np.savez(path, __gradflow__=np.array(json.dumps(meta)), **arrays)
    zeroed = gf.train_sgd(CHAIN, **KW, optimizer=second, checkpoint=path)
    assert zeroed.stats["resumed_from_step"] == 10
    np.testing.assert_array_equal(zeroed.params.W0[:2], ref.params.W0[:2])
    assert not np.array_equal(zeroed.params.W0[-1], ref.params.W0[-1])


# ------------------------------------------------------------------- Ctrl-C


def test_ctrl_c_stops_saves_and_resumes(tmp_path, monkeypatch, reference, real_stages):
    path = tmp_path / "run.ckpt.npz"
    # SIGINT arrives as the 4th chunk (steps 10-14) starts: the run finishes
    # that chunk, writes its checkpoint and raises with what it has.
    _fail_at_call(monkeypatch, 4, lambda: os.kill(os.getpid(), signal.SIGINT))
    with pytest.raises(KeyboardInterrupt) as info:
        gf.train_sgd(CHAIN, **KW, checkpoint=path)
    e = info.value
    assert isinstance(e, gf.Interrupted) and e.checkpoint == path
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    part = e.result
    assert not part.ok and "interrupted at step 14 of 100 (t = 2.8)" in part.message
    assert str(path) in part.message and str(path) in str(e)
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
    assert part.stats["num_steps"] == 14
    assert len(part.extras["att_entropy"]) == 3  # stages were attached
    state, _ = _state(path)
    assert state["done"] == 14 and state["count"] == 4 and not state["finished"]

    monkeypatch.setattr(sgd_module, "_advance", _REAL_ADVANCE)
    monkeypatch.setattr(sgd_module, "_attach_stages", lambda run: run)
    run = gf.train_sgd(CHAIN, **KW, checkpoint=path)
    assert run.stats["resumed_from_step"] == 14
    _assert_same_run(run, reference)


def test_ctrl_c_without_checkpoint(monkeypatch):
    """Before the first save: the partial run holds the start and the iterate
    at the interruption; the message says how to make a run resumable."""
    _fail_at_call(monkeypatch, 1, lambda: os.kill(os.getpid(), signal.SIGINT))
    with pytest.raises(KeyboardInterrupt) as info:
        gf.train_sgd(CHAIN, **KW)
    e = info.value
    assert isinstance(e, gf.Interrupted) and e.checkpoint is None
    assert "interrupted at step 4 of 100" in e.result.message
    assert "pass checkpoint=PATH (gradflow sgd: --checkpoint PATH)" in e.result.message
    np.testing.assert_array_equal(e.result.steps, [0, 4])


# ---------------------------------------------------------------- refusals


@pytest.fixture(scope="module")
def finished_checkpoint(tmp_path_factory):
    path = tmp_path_factory.mktemp("ckpt") / "run.ckpt.npz"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sgd_module, "_CHUNK", 4)
        mp.setattr(sgd_module, "_attach_stages", lambda run: run)
        gf.train_sgd(CHAIN, **KW, checkpoint=path)
    return path


@pytest.mark.parametrize(
    "change, match",
    [
        (dict(lr=0.25), "lr = 0.2 there, 0.25 here"),
        (dict(seed=1), "seed = 0 there, 1 here"),
        (dict(batch_size=16), "batch_size = 32 there, 16 here"),
        (dict(num_sequences=64), "num_sequences = null there, 64 here"),
        (dict(init_scale=0.2), "init_scale = 0.3 there, 0.2 here"),
        (dict(ts=[0.0, 20.0]), "num_saves = 11 there, 2 here; save steps differs"),
        (dict(source=gf.chains.sticky(4, 0.5, 0.6, 0.05)), "chain.P differs"),
        (dict(optimizer=optax.sgd(0.2)), 'optimizer = "sgd" there'),
    ],
)
def test_checkpoint_of_another_call_is_refused(
    finished_checkpoint, monkeypatch, change, match
):
    _no_steps(monkeypatch)  # refused before anything is drawn or stepped
    kw = {**KW, "source": CHAIN, **change}
    with pytest.raises(ValueError, match=match) as info:
        gf.train_sgd(**kw, checkpoint=finished_checkpoint)
    assert f"checkpoint '{finished_checkpoint}' was made by a different call" in str(
        info.value
    )


def test_custom_optimizers_are_compared_by_content(tmp_path, monkeypatch):
    path = tmp_path / "opt.ckpt.npz"
    opt = optax.sgd(0.2, momentum=0.5)
    gf.train_sgd(CHAIN, **KW, optimizer=opt, checkpoint=path)
    _no_steps(monkeypatch)
    # Same kind and hyperparameters, another object: accepted (finished run).
    run = gf.train_sgd(
        CHAIN, **KW, optimizer=optax.sgd(0.2, momentum=0.5), checkpoint=path
    )
    assert run.stats["resumed_from_step"] == 100
    with pytest.raises(ValueError, match=r"decay = 0.5 there, 0.9 here"):
        gf.train_sgd(
            CHAIN, **KW, optimizer=optax.sgd(0.2, momentum=0.9), checkpoint=path
        )
    with pytest.raises(ValueError, match=r"step_size = -0.2 there, -0.1 here"):
        gf.train_sgd(
            CHAIN, **KW, optimizer=optax.sgd(0.1, momentum=0.5), checkpoint=path
        )
    with pytest.raises(
        ValueError,
        match=r'optimizer state\[0\]\.mu\.W0 = "\(unset\)" there, "float64\[4, 4\]"',
    ):
        gf.train_sgd(CHAIN, **KW, optimizer=optax.adam(0.2), checkpoint=path)


def test_checkpoint_of_integrate_is_refused(tmp_path):
    path = tmp_path / "flow.ckpt.npz"
    Checkpointer(path, "integrate", {"t1": 20.0}, {}).write({"t": 1.0}, {})
    with pytest.raises(
        ValueError, match="written by 'integrate', not 'train_sgd'"
    ) as info:
        gf.train_sgd(CHAIN, **KW, checkpoint=path)
    assert str(path) in str(info.value)


def test_corrupt_checkpoint_names_the_file(tmp_path, finished_checkpoint):
    path = tmp_path / "cut.ckpt.npz"
    path.write_bytes(finished_checkpoint.read_bytes()[:2000])
    with pytest.raises(ValueError, match="could not be read .* truncated") as info:
        gf.train_sgd(CHAIN, **KW, checkpoint=path)
    assert f"'{path}'" in str(info.value)
    junk = tmp_path / "junk.npz"
    junk.write_bytes(b"not a zip file")
    with pytest.raises(ValueError, match="is not a gradflow-checkpoint file"):
        gf.train_sgd(CHAIN, **KW, checkpoint=junk)


def test_inconsistent_checkpoint_names_the_file(tmp_path, finished_checkpoint):
    """A checkpoint with the right fingerprint but a state that does not fit
    the call (here: more saves than the grid has) is refused, not trusted."""
    path = tmp_path / "odd.ckpt.npz"
    meta, arrays = read_npz_with_meta(finished_checkpoint, FORMAT_NAME)
    meta["state"]["num_saved"] = 12
    np.savez(path, __gradflow__=np.array(json.dumps(meta)), **arrays)
    with pytest.raises(
        ValueError, match=re.escape(f"checkpoint '{path}' is inconsistent")
    ):
        gf.train_sgd(CHAIN, **KW, checkpoint=path)


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
    _no_steps(monkeypatch)
    with pytest.raises(error, match=match):
        gf.train_sgd(CHAIN, **KW, **kwargs)


def test_failed_run_is_checkpointed_as_finished(tmp_path, monkeypatch):
    path = tmp_path / "diverged.ckpt.npz"
    kw = dict(KW, init_scale=3.0, lr=1e200, t1=1e201, ts=None)
    run = gf.train_sgd(CHAIN, **kw, checkpoint=path)
    assert not run.ok and "non-finite" in run.message
    _no_steps(monkeypatch)  # running it again returns the failure
    again = gf.train_sgd(CHAIN, **kw, checkpoint=path)
    assert not again.ok and again.message == run.message
    assert again.stats["steps_run"] == 0
    _assert_same_run(again, run)


def test_periodic_writes_follow_the_clock(tmp_path):
    """`checkpoint_every` is wall time: 0 writes after every chunk (30 chunks:
    4 + 4 + 2 steps between saves, plus the final write), an hour writes only
    at the end."""
    every = gf.train_sgd(CHAIN, **KW, checkpoint=tmp_path / "a.npz", checkpoint_every=0)
    hourly = gf.train_sgd(
        CHAIN, **KW, checkpoint=tmp_path / "b.npz", checkpoint_every=3600
    )
    assert every.stats["checkpoint_writes"] == 31
    assert hourly.stats["checkpoint_writes"] == 1


# ----------------------------------------------------------------------- CLI


def test_cli_checkpoint_resumes(tmp_path, capsys):
    ckpt, out = tmp_path / "run.ckpt.npz", tmp_path / "run.npz"
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
    ckpt, out = tmp_path / "run.ckpt.npz", tmp_path / "run.npz"
    calls = _fail_at_call(monkeypatch, 30, lambda: os.kill(os.getpid(), signal.SIGINT))
    args = CLI + ["--checkpoint", str(ckpt), "--out", str(out)]
    assert main(args) == 130
    done = _state(ckpt)[0]["done"]
    assert len(calls) == 30 and 0 < done < 100
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith(f"gradflow sgd: interrupted at step {done} of 100")
    assert f"partial run saved to {out}" in err and f"checkpoint {ckpt}" in err
    part = gf.load_sgd(out)
    assert not part.ok and "interrupted" in part.message and part.steps[-1] == done
    monkeypatch.setattr(sgd_module, "_advance", _REAL_ADVANCE)
    assert main(args) == 0
    full = gf.load_sgd(out)
    assert full.ok and full.stats["resumed_from_step"] == done
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
    out = tmp_path / "run.npz"
    args = CLI + ["--init-scale", "3", "--lr", "1e200", "--t1", "1e201"]
    assert main([*args, "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("gradflow sgd: run failed: the mini-batch loss")
    assert f"partial run saved to {out}" in err
    assert not gf.load_sgd(out).ok


def test_cli_bad_checkpoint_arguments(tmp_path, capsys):
    assert main([*CLI, "--checkpoint", str(tmp_path)]) == 2
    assert "checkpoint must be a file path" in capsys.readouterr().err
    assert main([*CLI, "--checkpoint", "x.npz", "--checkpoint-every", "-1"]) == 2
    assert "checkpoint_every must be" in capsys.readouterr().err
