"""What `gradflow run`, `sweep` and `sgd` write on request beside their `.npz`
file, and `gradflow report` of their folders: `--animate` (the run's
animation), `--netcdf` (the result as a netCDF file that `gf.load` reads back
equal to the `.npz`), the explorer of a run folder and of a sweep folder."""

import re
import sys
from pathlib import Path

import numpy as np
import pytest

import gradflow as gf
from gradflow.cli import main


pytest.importorskip("xarray", reason="the [analysis] extra is not installed")
PIL = pytest.importorskip("PIL.Image", reason="Pillow writes the GIFs")
sys.path.insert(0, str(Path(__file__).parent))
from analysis_data import assert_same_result, assert_same_sweep  # noqa: E402


SMALL = ["--d", "3", "--width", "2", "--no-progress"]


def test_run_writes_its_animation_and_netcdf_file_then_report(tmp_path, capsys):
    out = tmp_path / "run"
    argv = ["run", *SMALL, "--t1", "300", "--num-saves", "60", "--no-figures"]
    assert main([*argv, "--out", str(out), "--animate", "run.gif", "--netcdf"]) == 0
    printed = capsys.readouterr().out
    assert "trajectory.nc, run.gif to " in printed
    traj = gf.load(out / "trajectory.npz")
    assert_same_result(traj, gf.load(out / "trajectory.nc"))
    with PIL.open(out / "run.gif") as film:
        assert film.size == (1024, 720) and film.n_frames >= 100
    assert main(["report", str(out)]) == 0
    html = (out / "report.html").read_text()
    assert re.search(r'"kind":"run"', html) and "gradflow_data" not in html
    assert f"wrote {out / 'report.html'}" in capsys.readouterr().out


def test_sweep_and_sgd_write_their_netcdf_files(tmp_path, capsys):
    out = tmp_path / "sweep"
    argv = ["sweep", "--chain", "sticky", *SMALL, "--delta", "0.05,0.1"]
    argv += ["--seeds", "0,1", "--t1", "200", "--no-figures", "--netcdf"]
    assert main([*argv, "--out", str(out)]) == 0
    sw = gf.load(out / "sweep.npz")
    assert_same_sweep(sw, gf.load(out / "sweep.nc"))
    ds = sw.to_xarray()
    assert ds.loss.dims == ("delta", "seed", "t")
    assert main(["report", str(out), "--frames", "10"]) == 0
    assert (out / "report.html").stat().st_size > 10_000
    out = tmp_path / "sgd"
    argv = ["sgd", *SMALL, "--t1", "2", "--batch-size", "8", "--context", "4"]
    assert main([*argv, "--netcdf", "--out", str(out)]) == 0
    run = gf.load(out / "sgd_run.npz")
    assert isinstance(run, gf.SGDRun)
    assert_same_result(run, gf.load(out / "sgd_run.nc"))
    np.testing.assert_array_equal(run.to_xarray().step, run.steps)
    assert "sgd_run.nc" in capsys.readouterr().out
