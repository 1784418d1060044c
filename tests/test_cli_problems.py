"""Every subcommand for every problem, driven as a user drives it
(`gradflow.cli.main`, or the command in a subprocess): `run`, `sweep` and
`sgd` take `--problem` and write for any problem what they write for the
paper's model, with the same numbers as the library's calls; the output
folder is never overwritten unasked; Ctrl-C before the solve is one line and
exit status 130.

The solves are small (a few dozen saves), one compilation each; the bad
input of every subcommand is in `tests/test_errors.py` (`CLI_CASES`).
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import gradflow as gf
from gradflow.cli import main


ROOT = Path(__file__).resolve().parent.parent
QUIET = ["--no-progress"]


def _files(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())


def test_run_in_context_is_the_library_s_flow(tmp_path, capsys):
    """`gradflow run --problem in-context` solves `gf.flow` of the problem
    its flags describe (the same numbers), prints its stage table, writes
    the files and the figure (PNG; PDF with --pdf), and `gradflow theory`
    reads it. A non-empty --out is refused; `--overwrite` replaces what the
    last command wrote there (its PDFs too) and keeps other files."""
    out = tmp_path / "run"
    # (the problem of tests/test_in_context.py, tests/test_theory.py's cubic
    # escape and tests/test_labelled.py: its solve is compiled once)
    argv = ["run", "--problem", "in-context", "--d", "3", "--context", "16"]
    argv += ["--heads", "3", "--t1", "400", "--num-saves", "60", "--out", str(out)]
    assert main([*argv, *QUIET, "--pdf"]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith(
        "problem: InContextRegression(D=3, N=16, H=3, r=1), eigenvalues 1 0.5 0.25\n"
    )
    assert "stage " in printed and "\nplateau " in printed
    problem = gf.problems.InContextRegression([1.0, 0.5, 0.25], 16, 3, key_dim=1)
    ref = gf.flow(
        problem,
        1e-2,  # the in-context problem's default init scale
        t1=400.0,
        saveat=gf.SaveAt(gf.default_save_times(400.0, 60)),
        run=gf.Run(progress=False),
    )
    back = gf.load(out / "trajectory.npz")
    np.testing.assert_array_equal(back.loss, ref.loss)
    assert back.stages == ref.stages
    assert _files(out) == [
        "command.json",
        "events.csv",
        "stages.csv",
        "staircase.pdf",
        "staircase.png",
        "summary.pdf",
        "summary.png",
        "trajectory.npz",
    ]
    record = json.loads((out / "command.json").read_text())
    assert record["files"] == [f for f in _files(out) if f != "command.json"]

    # the folder holds a run: refused, then replaced with --overwrite (the
    # PDF of the last command goes, a file of the user's stays)
    (out / "notes.txt").write_text("mine")
    assert main([*argv, *QUIET]) == 2
    assert "is not empty" in capsys.readouterr().err
    assert main([*argv, *QUIET, "--overwrite"]) == 0
    assert "summary.pdf" not in _files(out) and "staircase.pdf" not in _files(out)
    assert "notes.txt" in _files(out)
    capsys.readouterr()

    # the run's folder stands for its trajectory.npz
    assert main(["theory", str(out), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "critical points:" in printed
    assert (out / "theory.png").exists() and (out / "theory.json").exists()


def test_sweep_deep_linear_over_a_grid_of_its_option(tmp_path, capsys):
    """`gradflow sweep --problem deep-linear`: a grid of one of its options
    (`--problem-seed 0,1`: two random teachers) in one batched solve, the
    same numbers as `gf.sweep`, the sweep file, the stage table and the
    figures."""
    out = tmp_path / "sweep"
    # (tests/test_saves.py's network, 5-4-4 by the flags' defaults: the first
    # member's solve shares the chunk compiled for that network's solves)
    argv = ["sweep", "--problem", "deep-linear", "--singular-values", "3", "1", "0.3"]
    argv += ["--problem-seed", "0,1", "--t1", "30", "--num-saves", "50"]
    assert main([*argv, "--out", str(out), *QUIET]) == 0
    printed = capsys.readouterr().out
    assert "  swept: problem_seed = 0, 1\n" in printed
    assert "2 members (2 problems x 1 init scale x 1 seed)" in printed
    problems = [
        gf.problems.DeepLinear.random(
            [3.0, 1.0, 0.3], n_in=5, n_out=4, hidden=(4,), seed=s
        )
        for s in (0, 1)
    ]
    ref = gf.sweep(
        problems,
        init_scale=1e-3,
        t1=30.0,
        saveat=gf.SaveAt(gf.default_save_times(30.0, 50)),
        run=gf.Run(progress=False),
    )
    sw = gf.load_sweep(out / "sweep.npz")
    np.testing.assert_array_equal(sw.loss, ref.loss)
    assert [m.labels for m in sw.members] == [{"problem_seed": 0}, {"problem_seed": 1}]
    assert _files(out) == [
        "command.json",
        "phase_problem_seed_plateau.png",
        "stages.csv",
        "sweep.npz",
        "sweep_summary.png",
    ]


def test_sgd_committee_against_its_flow(tmp_path, capsys):
    """`gradflow sgd --problem committee --flow`: SGD on the committee's
    samples, the flow from the same start, the crossing-time error of every
    drop, and the files."""
    out = tmp_path / "sgd"
    argv = ["sgd", "--problem", "committee", "--t1", "20", "--lr", "0.05"]
    argv += ["--batch-size", "64", "--num-saves", "40", "--flow", "--out", str(out)]
    assert main([*argv, *QUIET]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("SGD of Committee(K=3, M=3, N=6)")
    assert "against the flow: crossing-time error of each drop, half way down: " in (
        printed
    )
    run = gf.load_sgd(out / "sgd_run.npz")
    assert isinstance(run.problem, gf.problems.Committee) and run.ok
    traj = gf.load(out / "trajectory.npz")
    np.testing.assert_array_equal(traj.ts, run.ts)
    summary = gf.compare(traj, run).summary()
    assert len(summary["drops"]) >= 1
    assert _files(out) == [
        "command.json",
        "compare.png",
        "sgd_run.npz",
        "trajectory.npz",
    ]


def test_an_existing_checkpoint_resumes_into_its_own_folder(tmp_path, capsys):
    """A command that resumes (its --checkpoint exists) writes into the
    folder of the run it continues: the folder is not refused (here the
    checkpoint is not one, which the library then says)."""
    out = tmp_path / "run"
    out.mkdir()
    (out / "trajectory.npz").write_text("from the interrupted run")
    ckpt = tmp_path / "ck.npz"
    ckpt.write_text("not a checkpoint")
    code = main(["run", "--out", str(out), "--checkpoint", str(ckpt), *QUIET])
    err = capsys.readouterr().err
    assert code == 2 and "is not empty" not in err and "ck.npz" in err


def test_overwrite_keeps_the_folder_when_the_command_is_refused(tmp_path, capsys):
    """With --overwrite, what the previous command wrote is deleted when the
    new one writes, not before: a command refused after the folder was
    looked at (here a bad --animate suffix) leaves the folder as it was."""
    out = tmp_path / "run"
    out.mkdir()
    (out / "trajectory.npz").write_text("the previous run")
    listed = {"argv": ["run"], "files": ["trajectory.npz"]}
    (out / "command.json").write_text(json.dumps(listed))
    argv = ["run", "--out", str(out), "--overwrite", "--animate", "run.avi"]
    assert main([*argv, *QUIET]) == 2
    assert "--animate must end in .mp4 or .gif" in capsys.readouterr().err
    assert (out / "trajectory.npz").read_text() == "the previous run"
    assert json.loads((out / "command.json").read_text()) == listed


_USER_MODULE = """
from collections.abc import Callable

import jax
import jax.numpy as jnp

import gradflow as gf


class Net(gf.SampledProblem):
    M: jax.Array
    activation: Callable = jnp.tanh
    name: str = "net"

    def loss(self, params):
        U, V = params
        return 0.5 * jnp.sum((self.activation(U) @ V.T - self.M) ** 2)

    def init(self, key, init_scale):
        ku, kv = jax.random.split(key)
        return (init_scale * jax.random.normal(ku, (3, 2), self.M.dtype),
                init_scale * jax.random.normal(kv, (3, 2), self.M.dtype))

    def sample(self, key, n):
        return jax.random.normal(key, (n, 3), self.M.dtype)

    def sample_loss(self, params, x):
        U, V = params
        r = self.activation(U) @ V.T - self.M
        return 0.5 * jnp.mean(jnp.sum((x @ r.T) ** 2, axis=1))


def make(top: float = 2.0):
    return Net(jnp.diag(jnp.array([top, 0.5, 0.0])))
"""


def _forget(module: str) -> None:
    """As in a new process started in the same folder: the folder is not on
    the import path and `module` is not imported."""
    sys.path[:] = [p for p in sys.path if p not in ("", os.getcwd())]
    sys.modules.pop(module, None)


def test_theory_report_sweep_and_sgd_import_a_factory_as_run_does(
    tmp_path, monkeypatch, capsys
):
    """From one folder: `gradflow run --problem mymod:make --out D`, then
    `gradflow theory D` and `gradflow report D` find the class the file names
    (exit 0, no warning, the page titled by the class), and `sweep` and `sgd`
    take the factory too. The problem holds a function and a string."""
    (tmp_path / "mymod.py").write_text(_USER_MODULE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delitem(sys.modules, "mymod", raising=False)
    short = ["--t1", "20", "--num-saves", "40", "--no-figures", *QUIET]
    assert main(["run", "--problem", "mymod:make", *short, "--out", "D"]) == 0
    capsys.readouterr()
    _forget("mymod")
    assert main(["theory", "D"]) == 0
    printed = capsys.readouterr()
    assert printed.err == "" and printed.out.startswith("Trajectory(Net(M=3x3")
    assert "escape rate" in printed.out
    _forget("mymod")
    assert main(["report", "D", "--frames", "5"]) == 0
    assert capsys.readouterr().err == ""
    html = (tmp_path / "D" / "report.html").read_text()
    assert "<title>gradient flow of Net(M=3x3, name=net)</title>" in html
    _forget("mymod")
    sweep = ["sweep", "--problem", "mymod:make", "--seeds", "2"]
    assert main([*sweep, *short, "--out", "S"]) == 0
    sw = gf.load_sweep(tmp_path / "S" / "sweep.npz")
    assert len(sw) == 2 and sw.ok.all() and sw[0].problem.activation.__name__ == "tanh"
    _forget("mymod")
    sgd = ["sgd", "--problem", "mymod:make", "--t1", "2", "--lr", "0.05"]
    assert main([*sgd, "--num-saves", "10", "--no-figures", *QUIET, "--out", "G"]) == 0
    assert gf.load_sgd(tmp_path / "G" / "sgd_run.npz").ok
    assert capsys.readouterr().err == ""


_EDITED = """
import jax, jax.numpy as jnp
import gradflow as gf

class Bowl(gf.Problem):
    c: jax.Array

    def loss(self, params):
        return {k} * jnp.sum((params - self.c) ** 2)

    def init(self, key, init_scale):
        return init_scale * jnp.ones(3)

def make():
    return Bowl(jnp.ones(3))
"""


def test_an_edited_problem_is_solved_anew(tmp_path, monkeypatch):
    """A user edits the loss of their problem between two `gradflow run`s
    (same class name, same shapes): the second run solves the new loss, not
    the first run's compiled program (the command line keeps traced solves
    on disk, keyed by what they compute; a user's class is not keyed by its
    name alone)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    argv = ["run", "--problem", "user_bowl:make", "--t1", "1", "--num-saves", "5"]
    argv += ["--no-figures", *QUIET, "--out"]
    first = []
    for k, out in ((1.0, "one"), (2.0, "two")):
        (tmp_path / "user_bowl.py").write_text(_EDITED.format(k=k))
        sys.modules.pop("user_bowl", None)
        assert main([*argv, out]) == 0
        first.append(gf.load(tmp_path / out / "trajectory.npz").loss[0])
    # L(start) = k |1e-3 - 1|^2 * 3
    np.testing.assert_allclose(first, [3 * 0.999**2, 6 * 0.999**2], rtol=1e-12)


@pytest.fixture
def slow_factory(tmp_path, monkeypatch):
    """A user's module with factories: one that stops as Ctrl-C does, one
    that waits (writing a marker file first) for a Ctrl-C from outside."""
    (tmp_path / "user_factories.py").write_text(
        "import pathlib, time\n\n"
        "def interrupted():\n"
        "    raise KeyboardInterrupt\n\n"
        "def waiting(marker: str = 'started'):\n"
        "    pathlib.Path(marker).write_text('')\n"
        "    time.sleep(120)\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delitem(sys.modules, "user_factories", raising=False)
    return tmp_path


def test_ctrl_c_before_the_solve_is_one_line(slow_factory, capsys):
    out = slow_factory / "out"
    argv = ["run", "--problem", "user_factories:interrupted", "--out", str(out)]
    assert main(argv) == 130
    assert capsys.readouterr().err == (
        "gradflow run: interrupted (Ctrl-C) before the solve started; nothing was "
        "written\n"
    )
    assert not out.exists()


def _interrupt(command: list[str], ready, cwd: Path) -> subprocess.CompletedProcess:
    """Runs `command`, sends it SIGINT once `ready()` holds, and returns what
    it did."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while not ready() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    return subprocess.CompletedProcess(command, proc.returncode, out, err)


def test_ctrl_c_while_gradflow_is_imported(tmp_path):
    """The `gradflow` command (`_gradflow_main.py`, its entry point): a Ctrl-C
    while gradflow and JAX are being imported is one line and status 130,
    not a traceback through the imports.

    The signal goes when the import of JAX begins (a file the child's import
    hook writes then), not after a fixed delay: on a slow machine the child
    may not have reached the entry point after a few tenths of a second."""
    script = (
        "import pathlib, sys\n"
        "class Mark:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'jax':\n"
        "            pathlib.Path('importing-jax').touch()\n"
        "sys.meta_path.insert(0, Mark())\n"
        "sys.argv = ['gradflow', 'run', '--out', 'x']\n"
        "import _gradflow_main\n"
        "sys.exit(_gradflow_main.main())\n"
    )
    done = _interrupt(
        [sys.executable, "-c", script], (tmp_path / "importing-jax").exists, tmp_path
    )
    assert (tmp_path / "importing-jax").exists(), done.stderr
    assert done.returncode == 130, done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert done.stderr.startswith("gradflow")
    assert not (tmp_path / "x").exists()


# A subprocess that imports gradflow (several seconds): the integration tier.
@pytest.mark.integration
def test_ctrl_c_in_the_command_before_the_solve(slow_factory):
    """`python -m gradflow.cli` (as the `gradflow` command runs it): Ctrl-C
    while the problem is being built is one line and status 130, at once."""
    marker = slow_factory / "started"
    command = [sys.executable, "-m", "gradflow.cli", "run"]
    command += ["--problem", "user_factories:waiting", "--out", "out"]
    done = _interrupt(command, marker.exists, slow_factory)
    assert done.returncode == 130, done.stderr
    assert done.stderr == (
        "gradflow run: interrupted (Ctrl-C) before the solve started; nothing was "
        "written\n"
    )
    assert not (slow_factory / "out").exists()
