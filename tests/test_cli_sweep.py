"""`gradflow sweep`: ranges and lists, the files it writes."""

import sys
from pathlib import Path

import jax
import numpy as np
import pandas as pd
import pytest

import gradflow as gf
from gradflow.cli import main


sys.path.insert(0, str(Path(__file__).parent))
from sweep_worker import CHUNK_STEPS, small_sweep  # noqa: E402


@pytest.mark.parametrize(
    "flag, value, message",
    [
        ("--delta", "0:x:3", "--delta must be start:stop:num"),
        ("--delta", "0:1", "--delta must be start:stop:num"),
        ("--width", "4.5", "--width takes integers"),
        ("--width", "4:8:4", "--width takes integers"),
        ("--delta", "0.1,0.1", "--delta repeats a value"),
        ("--delta", "0,inf", "--delta needs finite values"),
        ("--seeds", "0", "--seeds must be >= 1"),
        ("--seeds", "x", "--seeds must be a count or a comma list"),
    ],
)
def test_bad_values_exit_2(capsys, tmp_path, flag, value, message):
    """Each value list is read before anything runs: a bad one exits with 2
    and one line naming the flag."""
    assert main(["sweep", flag, value, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("gradflow sweep: error: ") and err.count("\n") == 1
    assert message in err


def test_bad_arguments_exit_2(capsys, tmp_path):
    assert main(["sweep", "--chain", "zipf", "--delta", "0.1"]) == 2
    assert "--delta is not a parameter of zipf" in capsys.readouterr().err


def test_sweep_command_writes_sweep_table_figures(tmp_path, capsys):
    # small_sweep's chunk (--chunk-steps): its compilation is reused. The
    # values as a range (delta 0, 0.1) and a comma list (the seeds). One
    # (d, width) group: the checkpoint is the path given.
    out, ckpt = tmp_path / "out", tmp_path / "sw.ckpt.npz"
    argv = ["sweep", "--chain", "sticky", "--d", "4", "--width", "4"]
    argv += ["--delta", "0:0.1:2", "--seeds", "0,1,2,3", "--t1", "400"]
    argv += ["--chunk-steps", str(CHUNK_STEPS), "--no-progress", "--pdf"]
    assert main([*argv, "--out", str(out), "--checkpoint", str(ckpt)]) == 0
    assert [p.name for p in tmp_path.glob("*.npz")] == [ckpt.name]
    printed = capsys.readouterr().out
    assert "  swept: delta = 0, 0.1\n" in printed
    assert "8 members (2 problems x 1 init scale x 4 seeds)" in printed
    sw = gf.load_sweep(out / "sweep.npz")
    ref = small_sweep(gf)
    np.testing.assert_allclose(sw.loss, ref.loss, rtol=1e-12, atol=0)
    assert [m.labels for m in sw.members] == [m.labels for m in ref.members]
    assert [m.seed for m in sw.members] == [m.seed for m in ref.members]
    table = pd.read_csv(out / "stages.csv")
    assert len(table) == len(sw.table()) and "delta" in table
    for stem in ("sweep_summary", "phase_delta_new_direction", "phase_delta_focus"):
        assert (out / f"{stem}.png").stat().st_size > 10_000
        assert (out / f"{stem}.pdf").exists()


@pytest.mark.slow  # two compilations (about 20 s on a busy machine)
def test_checkpoint_and_output_per_group(tmp_path, capsys):
    """Several groups of equal shapes (here `--d 2:3:2`, d = 2 and 3) each
    write into their own subfolder and their own checkpoint, named by the
    swept options that set the group (`_d<d>` before the suffix); one group
    uses the paths as given. (Tiny bare solves with Tsit5: two small
    compilations.)"""
    common = ["sweep", "--chain", "zipf", "--width", "2", "--seeds", "2"]
    common += ["--t1", "10", "--num-saves", "3", "--solver", "tsit5"]
    common += ["--no-stages", "--no-figures", "--no-progress"]
    out, ckpt = tmp_path / "groups", tmp_path / "sw.ckpt.npz"
    argv = [*common, "--d", "2:3:2", "--out", str(out), "--checkpoint", str(ckpt)]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "group d2: 2 members" in printed
    assert "group d3: 2 members" in printed
    assert not ckpt.exists()
    for d in (2, 3):
        assert (tmp_path / f"sw.ckpt_d{d}.npz").exists()
        sw = gf.load_sweep(out / f"d{d}" / "sweep.npz")
        assert sw.ok.all() and sw.problems[0].chain.d == d
        # run again: each group resumes from its own (finished) checkpoint
        assert sw.stats.resumed is False
    assert main(argv) == 0
    capsys.readouterr()
    for d in (2, 3):
        assert gf.load_sweep(out / f"d{d}" / "sweep.npz").stats.resumed

    one = tmp_path / "one"
    argv = [*common, "--d", "2", "--out", str(one)]
    assert main([*argv, "--checkpoint", str(tmp_path / "one.ckpt.npz")]) == 0
    assert (tmp_path / "one.ckpt.npz").exists()
    assert (one / "sweep.npz").exists() and not (one / "d2").exists()
    assert sorted(p.name for p in tmp_path.glob("*.ckpt*.npz")) == [
        "one.ckpt.npz",
        "sw.ckpt_d2.npz",
        "sw.ckpt_d3.npz",
    ]


def test_lr_correction_member_equals_the_run(tmp_path, capsys):
    """`gradflow sweep --lr-correction LR --order K` solves the modified flow
    of GD, as `gradflow run` does with the same options (one shared reading
    of the flags): a member equals the run of its seed bit for bit (on a CPU
    the members go one by one through a solo call's compiled chunk). Bare
    solves with Tsit5 of the deep linear network (5-6-4, singular values 3 2
    1) of tests/test_sgd_theory.py, whose modified flow of order 2 they
    share: one compiled chunk for the two files."""
    common = ["--problem", "deep-linear", "--singular-values", "3", "2", "1"]
    common += ["--inputs", "5", "--outputs", "4", "--hidden", "6", "--t1", "10"]
    common += ["--num-saves", "3", "--solver", "tsit5", "--no-stages"]
    common += ["--no-figures", "--no-progress", "--lr-correction", "0.2"]
    common += ["--order", "2"]
    assert main(["sweep", *common, "--seeds", "0,1", "--out", str(tmp_path / "s")]) == 0
    assert "modified flow of GD at lr 0.2, order 2" in capsys.readouterr().out
    assert main(["run", *common, "--seed", "1", "--out", str(tmp_path / "r")]) == 0
    capsys.readouterr()
    sw = gf.load_sweep(tmp_path / "s" / "sweep.npz")
    traj = gf.load(tmp_path / "r" / "trajectory.npz")
    problem = sw.problems[0]
    assert isinstance(problem, gf.ModifiedLoss) and problem.order == 2
    assert float(problem.lr) == 0.2
    assert sw.ok.all() and traj.ok and sw.members[1].seed == 1
    np.testing.assert_array_equal(sw[1].ts, traj.ts)
    np.testing.assert_array_equal(sw[1].loss, traj.loss)
    for x, y in zip(jax.tree.leaves(sw[1].params), jax.tree.leaves(traj.params)):
        np.testing.assert_array_equal(x, y)
