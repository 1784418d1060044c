"""`gradflow sweep`: ranges and lists, the files it writes."""

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import gradflow as gf

# An internal: the CLI has no chunk option; its chunk size is patched to that of
# `small_sweep`, whose compiled chunk the command then reuses.
import gradflow._loop.loop as loop

# Internals with no public name: the parsers of the command's value lists.
from gradflow._cli.sweep import parse_seeds, parse_values
from gradflow.cli import main


sys.path.insert(0, str(Path(__file__).parent))
from sweep_worker import CHUNK_STEPS, small_sweep  # noqa: E402


def test_parse_values():
    assert parse_values("delta", "0:0.1:11") == pytest.approx(np.linspace(0, 0.1, 11))
    assert parse_values("delta", "0.01,0.05") == [0.01, 0.05]
    assert parse_values("delta", "0.05") == [0.05]
    assert parse_values("width", "4:16:4", integer=True) == [4, 8, 12, 16]
    assert parse_seeds("3") == [0, 1, 2] and parse_seeds("2,7") == [2, 7]
    with pytest.raises(ValueError, match=r"--delta must be start:stop:num"):
        parse_values("delta", "0:1")
    with pytest.raises(ValueError, match="--width takes integers"):
        parse_values("width", "4.5", integer=True)
    with pytest.raises(ValueError, match="--delta repeats a value"):
        parse_values("delta", "0.1,0.1")
    with pytest.raises(ValueError, match="--seeds must be >= 1"):
        parse_seeds("0")


def test_bad_arguments_exit_2(capsys, tmp_path):
    assert main(["sweep", "--delta", "0:x:3", "--out", str(tmp_path)]) == 2
    assert "--delta must be start:stop:num" in capsys.readouterr().err
    assert main(["sweep", "--chain", "zipf", "--delta", "0.1"]) == 2
    assert "--delta is not a parameter of zipf" in capsys.readouterr().err


def test_sweep_command_writes_sweep_table_figures(tmp_path, monkeypatch, capsys):
    # (the CLI has no chunk option) small_sweep's chunk: its compilation reused
    monkeypatch.setattr(loop, "CHUNK_STEPS", CHUNK_STEPS)
    out = tmp_path / "out"
    argv = ["sweep", "--chain", "sticky", "--d", "4", "--width", "4"]
    argv += ["--delta", "0,0.1", "--seeds", "4", "--t1", "400", "--no-progress"]
    assert main([*argv, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "8 members (2 chains x 1 init scales x 4 seeds)" in printed
    sw = gf.load_sweep(out / "sweep.npz")
    ref = small_sweep(gf)
    np.testing.assert_allclose(sw.loss, ref.loss, rtol=1e-12, atol=0)
    assert [m.labels for m in sw.members] == [m.labels for m in ref.members]
    table = pd.read_csv(out / "stages.csv")
    assert len(table) == len(sw.table()) and "delta" in table
    for stem in ("sweep_summary", "phase_delta_new_direction", "phase_delta_focus"):
        assert (out / f"{stem}.png").stat().st_size > 10_000
        assert (out / f"{stem}.pdf").exists()
