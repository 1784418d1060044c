"""What `gradflow run`, `sweep` and `sgd` write on request beside their `.npz`
file, and `gradflow report` of their folders: `--animate` (the run's
animation), `--netcdf` (the result as a netCDF file that `gf.load` reads back
equal to the `.npz`), the explorer of a run folder and of a sweep folder; for
the paper's model, the other built-in problems and a factory of the user's
(`--problem MODULE:FUNCTION`). The solves have the shapes of solves other
test files make (named beside each), so that a test session compiles each
once and loads it from the session's compilation cache for the other."""

import json
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
from sweep_worker import CHUNK_STEPS  # noqa: E402


def test_run_writes_its_animation_and_netcdf_file_then_report(tmp_path, capsys):
    out = tmp_path / "run"
    # the default scenario at t1 = 300, as in test_cli_run.py: one compilation
    argv = ["run", "--t1", "300", "--no-progress", "--no-figures"]
    argv += ["--animate", "run.gif", "--frames", "20", "--netcdf"]
    assert main([*argv, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "trajectory.nc, run.gif, command.json to " in printed
    record = json.loads((out / "command.json").read_text())
    assert {"trajectory.nc", "run.gif"} <= set(record["files"])
    traj = gf.load(out / "trajectory.npz")
    assert_same_result(traj, gf.load(out / "trajectory.nc"))
    with PIL.open(out / "run.gif") as film:
        # 20 frames, the last held for a second (GIF merges repeated frames)
        assert film.size == (1024, 720) and 20 <= film.n_frames <= 20 + 15
    assert main(["report", str(out)]) == 0
    html = (out / "report.html").read_text()
    assert re.search(r'"kind":"run"', html) and "gradflow_data" not in html
    assert f"wrote {out / 'report.html'}" in capsys.readouterr().out


def test_sweep_and_sgd_write_their_netcdf_files(tmp_path, capsys):
    out = tmp_path / "sweep"
    # the sweep of test_cli_sweep.py (and small_sweep's chunk): one compilation
    argv = ["sweep", "--chain", "sticky", "--d", "4", "--width", "4"]
    argv += ["--delta", "0:0.1:2", "--seeds", "0,1,2,3", "--t1", "400"]
    argv += ["--chunk-steps", str(CHUNK_STEPS), "--no-progress", "--no-figures"]
    argv += ["--netcdf"]
    assert main([*argv, "--out", str(out)]) == 0
    sw = gf.load(out / "sweep.npz")
    assert_same_sweep(sw, gf.load(out / "sweep.nc"))
    ds = sw.to_xarray()
    assert ds.loss.dims == ("delta", "seed", "t")
    assert main(["report", str(out), "--frames", "10"]) == 0
    assert (out / "report.html").stat().st_size > 10_000
    out = tmp_path / "sgd"
    # the command line's SGD run of tests/test_sgd_checkpoint.py (CLI): one
    # compiled chunk for the two files
    argv = ["sgd", "--d", "4", "--width", "4", "--init-scale", "0.3"]
    argv += ["--context", "16", "--batch-size", "32", "--lr", "0.2", "--t1", "20"]
    argv += ["--no-progress"]
    assert main([*argv, "--netcdf", "--out", str(out)]) == 0
    run = gf.load(out / "sgd_run.npz")
    assert isinstance(run, gf.SGDRun)
    assert_same_result(run, gf.load(out / "sgd_run.nc"))
    np.testing.assert_array_equal(run.to_xarray().step, run.steps)
    assert "sgd_run.nc" in capsys.readouterr().out


def test_other_problems_animate_write_netcdf_and_report(tmp_path, capsys):
    """`--animate`, `--netcdf` and `gradflow report` are the command line's,
    not the paper model's: in-context regression animates and explores its
    eigen-components, a deep linear sweep and a committee's SGD run (with
    its flow) write their netCDF files, equal to their `.npz` files."""
    out = tmp_path / "in_context"
    argv = ["run", "--problem", "in-context", "--d", "3", "--context", "16"]
    # (the run of test_cli_problems.py, whose compilation this one shares)
    argv += ["--heads", "3", "--t1", "400", "--num-saves", "60", "--no-figures"]
    argv += ["--no-progress", "--out", str(out), "--animate", "a.gif", "--netcdf"]
    argv += ["--frames", "20"]
    assert main(argv) == 0
    traj = gf.load(out / "trajectory.npz")
    assert_same_result(traj, gf.load(out / "trajectory.nc"))
    assert traj.to_xarray().modes.dims == ("t", "mode")
    with PIL.open(out / "a.gif") as film:
        assert 20 <= film.n_frames <= 20 + 15
    assert main(["report", str(out), "--frames", "10"]) == 0
    html = (out / "report.html").read_text()
    assert "eigen-components of" in html and '"kind":"run"' in html
    # the explorer is not written over unasked
    assert main(["report", str(out), "--frames", "10"]) == 2
    assert "report.html' exists; give --overwrite" in capsys.readouterr().err
    assert main(["report", str(out), "--frames", "10", "--overwrite"]) == 0

    out = tmp_path / "deep_linear"
    # (the sweep of test_cli_problems.py, whose compilation this one shares)
    argv = ["sweep", "--problem", "deep-linear", "--singular-values", "3", "1", "0.3"]
    argv += ["--problem-seed", "0,1", "--t1", "30", "--num-saves", "50"]
    argv += ["--no-figures", "--no-progress", "--netcdf", "--out", str(out)]
    assert main(argv) == 0
    sw = gf.load(out / "sweep.npz")
    assert_same_sweep(sw, gf.load(out / "sweep.nc"))
    assert f"wrote {out / 'sweep.nc'}" in capsys.readouterr().out
    assert main(["report", str(out), "--frames", "5"]) == 0
    assert "mode strengths" in (out / "report.html").read_text()

    out = tmp_path / "committee"
    argv = ["sgd", "--problem", "committee", "--t1", "20", "--lr", "0.05"]
    argv += ["--batch-size", "64", "--num-saves", "40", "--flow", "--no-figures"]
    argv += ["--no-progress", "--netcdf", "--out", str(out)]
    assert main(argv) == 0
    assert_same_result(gf.load(out / "sgd_run.npz"), gf.load(out / "sgd_run.nc"))
    assert_same_result(gf.load(out / "trajectory.npz"), gf.load(out / "trajectory.nc"))
    printed = capsys.readouterr().out
    assert f"wrote {out / 'sgd_run.nc'}, {out / 'trajectory.nc'}" in printed


def test_a_factory_s_problem_writes_netcdf_and_its_explorer(tmp_path, monkeypatch):
    """A problem of the user's own (`--problem MODULE:FUNCTION`), which names
    no arrays and registers no views: its arrays under the generic names, its
    parameters in the explorer."""
    (tmp_path / "user_quadratic.py").write_text(
        "import jax, jax.numpy as jnp\n"
        "import gradflow as gf\n\n"
        "class Quadratic(gf.Problem):\n"
        "    target: jax.Array\n\n"
        "    def loss(self, params):\n"
        "        return 0.5 * jnp.sum((params['a'] @ params['b'] - self.target) ** 2)\n\n"
        "    def init(self, key, init_scale):\n"
        "        ka, kb = jax.random.split(key)\n"
        "        return {'a': init_scale * jax.random.normal(ka, (3, 2)),\n"
        "                'b': init_scale * jax.random.normal(kb, (2, 3))}\n\n"
        "def make():\n"
        "    return Quadratic(jnp.diag(jnp.array([2.0, 1.0, 0.0])))\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delitem(sys.modules, "user_quadratic", raising=False)
    argv = ["run", "--problem", "user_quadratic:make", "--t1", "5", "--num-saves"]
    argv += ["20", "--no-figures", "--no-progress", "--netcdf", "--out", "run"]
    assert main([*argv, "--animate", "run.gif"]) == 0
    traj = gf.load(tmp_path / "run" / "trajectory.npz")
    ds = gf.load(tmp_path / "run" / "trajectory.nc").to_xarray()
    assert ds.params_a.dims == ("t", "params_a_dim_0", "params_a_dim_1")
    np.testing.assert_array_equal(ds.params_b, traj.params["b"])
    assert (tmp_path / "run" / "run.gif").stat().st_size > 1000
    assert main(["report", "run", "--frames", "5"]) == 0
    assert "user_quadratic:make" in (tmp_path / "run" / "report.html").read_text()
