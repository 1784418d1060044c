"""`gradflow run` end to end on short runs, and what its trajectory holds.

The runs share one compiled solve (same d, width and number of saves), so the
module costs one compilation.
"""

import csv
import json
import os
import signal
import subprocess
import sys
import time

import jax
import numpy as np
import pytest

import gradflow as gf
from gradflow.cli import main


sys.path.insert(0, os.path.dirname(__file__))
from ctrl_c import ctrl_c_when  # noqa: E402


@pytest.fixture(scope="module")
def short_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("run300")
    code = main(["run", "--t1", "300", "--out", str(out), "--no-progress", "--pdf"])
    return code, out


def _rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_cli_short_run_writes_everything(short_run, capsys):
    code, out = short_run
    assert code == 0
    for name in ("trajectory.npz", "stages.csv", "events.csv"):
        assert (out / name).stat().st_size > 0
    for stem in ("summary", "embeddings_pca", "attention"):
        for ext in ("png", "pdf"):
            assert (out / f"{stem}.{ext}").stat().st_size > 10_000
    stages = [r for r in _rows(out / "stages.csv") if r["name"] != "plateau"]
    assert [r["name"] for r in stages] == ["condensation", "focus", "dilution"]
    assert stages[1]["tokens"] == "0"
    events = _rows(out / "events.csv")
    assert [r["name"] for r in events][:2] == ["saddle_escape", "saddle_entry"]


def test_figures_are_png_unless_pdf_is_asked_for(short_run, tmp_path):
    """`plot_all` (what `gradflow run` calls) writes PNG by default; the run
    above asked for `--pdf` too. About 2-4 s (three figures)."""
    from gradflow import plot

    traj = gf.load(short_run[1] / "trajectory.npz")
    paths = plot.plot_all(traj, tmp_path)
    assert sorted(p.name for p in paths) == [
        "attention.png",
        "embeddings_pca.png",
        "summary.png",
    ]
    assert not list(tmp_path.glob("*.pdf"))


def test_cli_trajectory_stages_are_consistent(short_run):
    _, out = short_run
    traj = gf.load(out / "trajectory.npz")
    chain = traj.problem.chain
    cond, focus, dilution = [s for s in traj.stages if s.name != "plateau"]
    # Condensation ends on the unigram plateau H(pi).
    assert cond.loss_end == pytest.approx(float(chain.unigram_entropy), abs=2e-3)
    assert focus.t_end == dilution.t_start
    # The first focus contains the steepest fall of the attention entropy.
    t = traj.ts[1:]
    dH_dt = np.gradient(traj.extras["att_entropy"][1:], t)
    t_steep = t[np.argmin(dH_dt)]
    assert focus.t_start < t_steep < focus.t_end
    # The focus token's mass peaks at focus_end: it rose before and falls after.
    k = focus.tokens[0]
    mass = traj.extras["att_mass"][:, k]
    peak = np.interp(focus.t_end, traj.ts, mass)
    assert peak > np.interp(focus.t_start, traj.ts, mass) + 0.1
    assert peak > np.interp(dilution.t_end, traj.ts, mass) + 0.02
    # Event times agree with the detector run on the saved (sampled) curves.
    ex = traj.extras
    obs = {**ex, "loss": traj.loss}
    # The stages of the loaded file are those the detector finds on its saved
    # observations (stages are a function of the saved curves).
    again = gf.markov.detect_stages(traj.ts, obs, chain=chain)
    assert [s.name for s in again] == [s.name for s in traj.stages]
    for a, b in zip(again, traj.stages, strict=True):
        # (the saved loss and observe's own loss differ in the last bit)
        assert a.t_start == pytest.approx(b.t_start, rel=1e-9)
        assert a.t_end == pytest.approx(b.t_end, rel=1e-9)
        assert a.tokens == b.tokens
    # The saddle entries located during the solve (root-found on the dense
    # output) agree with the plateau starts the detector interpolates between
    # saves (the same speed threshold).
    entries = [e.t for e in traj.events if e.located and e.name == "saddle_entry"]
    starts = [s.t_start for s in traj.stages if s.name == "plateau"]
    assert len(entries) == len(starts) >= 2
    np.testing.assert_allclose(starts, entries, rtol=1e-2)
    # dL/dt = -|grad L|^2 along the flow: the saved loss against the integral
    # of the saved |grad L|^2 (trapezoid rule on the 798-point grid; its error
    # is O(h^2) with h ~ 0.018 in log t).
    t, L, g2 = traj.ts, traj.loss, traj.grad_norm**2
    drop = L - L[0]
    integral = -np.concatenate(
        [[0.0], np.cumsum(0.5 * (g2[1:] + g2[:-1]) * np.diff(t))]
    )
    assert np.max(np.abs(drop - integral)) < 2e-3 * (L[0] - L[-1])


def test_cli_symmetric_chain_has_no_new_direction(tmp_path):
    # delta = 0: the rare tokens are exactly symmetric and the flow stays on
    # the degenerate point, so no new direction opens, even by t1 = 20000.
    code = main(
        [
            "run",
            "--delta",
            "0",
            "--t1",
            "20000",
            "--out",
            str(tmp_path),
            "--no-progress",
            "--no-figures",
        ]
    )
    assert code == 0
    names = [
        r["name"] for r in _rows(tmp_path / "stages.csv") if r["name"] != "plateau"
    ]
    assert names == ["condensation", "focus", "dilution"]
    traj = gf.load(tmp_path / "trajectory.npz")
    assert traj.extras["sv_ratio"][-1, 0] < 0.01


def test_cli_help(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0
    assert "run" in capsys.readouterr().out
    with pytest.raises(SystemExit) as e:
        main(["run", "--help"])
    assert e.value.code == 0
    text = capsys.readouterr().out
    for option in (
        "--chain",
        "--transition-matrix",
        "--width",
        "--init-scale",
        "--t1",
        "--seed",
        "--solver",
        "--rtol",
        "--atol",
        "--out",
    ):
        assert option in text


def test_cli_bad_input(tmp_path, capsys):
    assert main(["run", "--transition-matrix", str(tmp_path / "none.npy")]) == 2
    assert "no such file" in capsys.readouterr().err
    np.save(tmp_path / "P.npy", np.array([[0.5, 0.6], [0.5, 0.5]]))
    code = main(
        ["run", "--transition-matrix", str(tmp_path / "P.npy"), "--out", str(tmp_path)]
    )
    assert code == 2
    assert "row 0 of transition matrix P sums to" in capsys.readouterr().err
    assert main(["run", "--init-scale", "-1", "--out", str(tmp_path)]) == 2
    assert "--init-scale must be finite and > 0, got -1.0" in capsys.readouterr().err


def _cli_args(*args):
    return list(map(str, args))


def _cli(*args):
    return [sys.executable, "-m", "gradflow.cli", *_cli_args(*args)]


# The killed run takes chunks of 5 steps, each followed by a checkpoint
# write, so that the kill lands in the middle of the solve; chunking changes
# nothing in the result (tests/test_checkpoint.py), so the resumed run uses
# the default chunks.


# Two `gradflow run` processes that each compile their solve: the integration
# tier (`python -m pytest -m integration`, run by .ci/run).
@pytest.mark.integration
def test_cli_killed_with_sigkill_resumes_to_the_same_result(tmp_path):
    """Done means (issue 7): kill `gradflow run --checkpoint ck` at a random
    moment with SIGKILL, run it again, get the same figures and a final state
    within 1e-9 of an uninterrupted run (here: bit for bit)."""
    env = dict(os.environ)
    common = ["run", "--t1", "3000", "--no-progress"]
    ck = tmp_path / "ck.npz"
    killed = subprocess.Popen(
        _cli(*common, "--checkpoint", ck, "--checkpoint-every", "0")
        + _cli_args("--chunk-steps", "5", "--out", tmp_path / "killed", "--no-figures"),
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 300
    while not ck.exists() and killed.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    # seeded: a fixed moment in the solve, the same on every run
    time.sleep(np.random.default_rng(7).uniform(0.0, 1.0))
    killed.kill()
    _, err = killed.communicate()
    assert killed.returncode == -signal.SIGKILL, err.decode()
    # the checkpoint's JSON metadata says where the killed run was
    with np.load(ck, allow_pickle=False) as npz:
        meta = json.loads(str(npz["__gradflow__"]))
    assert meta["format"] == "gradflow-checkpoint"
    assert 0 < meta["state"]["t_now"] < 3000

    resumed = subprocess.run(
        _cli(*common, "--checkpoint", ck, "--out", tmp_path / "resumed"),
        env=env,
        capture_output=True,
        text=True,
    )
    assert resumed.returncode == 0, resumed.stderr
    assert "resumed from the checkpoint at t = " in resumed.stdout
    # The uninterrupted run, in this process (its solve is compiled already).
    assert main([*common, "--out", str(tmp_path / "fresh"), "--no-figures"]) == 0

    a = gf.load(tmp_path / "fresh" / "trajectory.npz")
    b = gf.load(tmp_path / "resumed" / "trajectory.npz")
    assert a.ok and b.ok and b.stats.resumed_from > 0
    np.testing.assert_array_equal(a.ts, b.ts)
    np.testing.assert_array_equal(a.loss, b.loss)
    for x, y in zip(jax.tree.leaves(a.params), jax.tree.leaves(b.params), strict=True):
        np.testing.assert_array_equal(x, y)
    assert a.stages == b.stages and a.events == b.events
    for stem in ("summary", "embeddings_pca", "attention"):
        assert (tmp_path / "resumed" / f"{stem}.png").stat().st_size > 10_000
    assert (tmp_path / "resumed" / "stages.csv").read_text() == (
        tmp_path / "fresh" / "stages.csv"
    ).read_text()


def test_cli_out_of_steps_saves_partial_and_fails(tmp_path, capsys):
    # 1,000 steps of a solve of ~3,000 (t1 20,000): the chunk of the module's
    # other runs (a chunk takes at most --max-steps steps, and the chunk's
    # length is compiled in), so no compilation of its own
    out = tmp_path / "partial"
    argv = ["run", "--t1", "20000", "--max-steps", "1000", "--no-progress"]
    code = main([*argv, "--out", str(out)])
    assert code == 1
    err = capsys.readouterr().err
    assert "maximum number of steps (1000)" in err and "partial trajectory" in err
    traj = gf.load(out / "trajectory.npz")
    assert not traj.ok and 0 < traj.t_final < 20000


def test_a_progress_bar_ends_where_the_work_stopped_and_its_line(capsys):
    """A bar closed before its end stays where the work stopped (not moved to
    100 %) and ends its line, so that the next output is a line of its own;
    a bar not yet drawn (its `delay` not over) draws nothing."""
    # the progress bar has no public name: the bar itself is under test
    from gradflow._core.progress import host_progress

    with host_progress(10.0, delay=0.0) as bar:
        bar.update(4.0)
    print("next", file=sys.stderr)
    err = capsys.readouterr().err
    assert err.endswith("]\nnext\n"), err
    last = err.split("\r")[-1]
    assert " 40.0%" in last and "100.0%" not in err
    with host_progress(10.0, delay=60.0) as bar:
        bar.update(4.0)
    print("next", file=sys.stderr)
    assert capsys.readouterr().err == "next\n"


def test_cli_ctrl_c_saves_partial_and_exits_130(tmp_path, capsys):
    """Ctrl-C in `gradflow run` keeps what was computed: the partial trajectory
    and tables are written, the exit code is 130, and the checkpoint resumes."""
    out, ck = tmp_path / "out", tmp_path / "ck.npz"
    argv = ["run", "--t1", "20000", "--no-progress", "--out", str(out)]
    # Ctrl-C pressed once the first chunk is done (its checkpoint is written:
    # --checkpoint-every 0 writes after every chunk); the default chunks of
    # 1,000 steps (the module's compiled solve) and t1 20,000, so that it
    # lands inside the solve (of ~3,000 steps: three chunks)
    with ctrl_c_when(ck.exists) as pressed:
        code = main([*argv, "--checkpoint", str(ck), "--checkpoint-every", "0"])
    assert pressed and code == 130
    err = capsys.readouterr().err
    # the notice of the first Ctrl-C, then the message: on a line of its own,
    # the word once, the resume advice in the command's terms (not Python's)
    *_, notice, message = err.strip("\n").split("\n")
    assert notice.startswith("gradflow: interrupt received; stopping after")
    assert message.startswith("gradflow run: interrupted at t = ")
    assert message.count("interrupted") == 1 and "checkpoint=" not in message
    assert f"the partial trajectory is in {out / 'trajectory.npz'}" in message
    assert message.endswith(f"the checkpoint {ck} holds the state: run the same "
                            "command to resume")  # fmt: skip
    partial = gf.load(out / "trajectory.npz")
    assert not partial.ok and 0 < partial.t_final < 20000
    assert bool(partial.result == gf.RESULTS.interrupted)
    assert (out / "stages.csv").exists() and not (out / "summary.png").exists()
    assert main([*argv, "--checkpoint", str(ck), "--no-figures"]) == 0
    assert gf.load(out / "trajectory.npz").stats.resumed_from == partial.t_final


def test_readme_stage_table_is_what_run_prints(tmp_path, capsys):
    """The README's output of its main command (`gradflow run --out
    runs/default`, written by docs/_make_outputs.py) is what the command
    prints today: the same stage table, row for row. (The solve is the
    module's compiled one: same d, width and number of saves.)"""
    import importlib.util
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    spec = importlib.util.spec_from_file_location(
        "_make_outputs", root / "docs" / "_make_outputs.py"
    )
    outputs = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(outputs)  # pyright: ignore[reportOptionalMemberAccess]
    documented = dict(outputs.blocks(root / "README.md"))[
        "gradflow run --out runs/default"
    ]
    code = main(["run", "--out", str(tmp_path), "--no-progress", "--no-figures"])
    assert code == 0
    printed = capsys.readouterr().out
    assert outputs.stage_table(printed) == outputs.stage_table(documented)
