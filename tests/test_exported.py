"""Exported chunks (`gradflow/_loop/exported.py`): with them on (the command
line turns them on), the first solve of a configuration writes its traced
chunk to a file and a later process loads it instead of tracing again. The
file must give the solve of `jax.jit`'s path bit for bit, be found again,
and never serve a program whose code its key cannot see (a problem class or
a function of the user's).

The solves run in processes of their own (tests/exported_worker.py), without
the tests' shape-checking import hook: it wraps gradflow's functions in
closures no key can describe, so under it nothing is exported."""

import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest

import gradflow as gf


sys.path.insert(0, str(Path(__file__).parent))
from user_problems import Quadratic  # noqa: E402

# The key is private; its rules (what makes two calls one program) are tested
# here for themselves, as the solves cannot show them under the import hook.
from gradflow._loop import exported


ROOT = Path(__file__).resolve().parents[1]


def test_the_key_sees_static_settings_and_shapes_not_values():
    def key(*tree):
        return exported._key("run_chunk", tree)[0]

    solver = gf.Solver("tsit5", rtol=1e-8, atol=1e-8)
    x = jnp.zeros(3)
    assert key(solver, x) == key(solver, jnp.ones(3))  # values are inputs
    assert key(solver, x) != key(solver, jnp.zeros(4))  # shapes are compiled in
    assert key(solver, x) != key(gf.Solver("tsit5", rtol=1e-9, atol=1e-8), x)
    assert key(solver, x) != key(gf.Solver("dopri5", rtol=1e-8, atol=1e-8), x)
    with pytest.raises(exported._Unkeyable):
        key(Quadratic(x), x)  # a class of the user's
    with pytest.raises(exported._Unkeyable):
        key(solver, lambda p: p, x)  # a function of the user's


# Two processes that each import gradflow and compile a solve: the integration
# tier.
@pytest.mark.integration
def test_a_later_process_loads_the_exported_chunk(tmp_path):
    """The first process exports the chunk (its solve equal to `jax.jit`'s
    bit for bit); the second reads it with exporting made to fail (so it
    cannot have traced again) and gets the same solve."""
    worker = ROOT / "tests" / "exported_worker.py"
    env = {**os.environ, "PYTHONPATH": str(ROOT),
           "JAX_COMPILATION_CACHE_DIR": str(tmp_path / "jax")}  # fmt: skip
    for step in ("export", "load"):
        done = subprocess.run(
            [sys.executable, str(worker), step],
            capture_output=True, text=True, timeout=600, env=env,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        assert done.stdout.strip().endswith(f"{step}: ok"), done.stdout


def test_an_exported_call_keeps_an_output_structure_of_its_own(tmp_path):
    """A function whose output is not shaped like its last argument (the
    loop's initial state, the start's curvature) is exported with its output's
    treedef beside it; a later load (here: the process's table of loaded
    programs emptied) reads both and gives the same structure, equal to the
    original (Equinox's `MISSING` in a Module's treedef comes back as
    itself), and the same numbers."""

    def fn(x, y):
        params = gf.Params(W0=x, W1=(x * y).T, WQ=y[:, :2], WK=y[:, :2] - 1.0)
        return {"params": params, "total": jnp.sum(x) + jnp.sum(y)}

    x, y = jnp.arange(6.0).reshape(2, 3), jnp.linspace(0.0, 1.0, 6).reshape(2, 3)
    want = fn(x, y)
    exported.enable(tmp_path)
    try:
        first = exported.call("test_structure", fn, x, y, same_structure=False)
        assert len(list(tmp_path.glob("*.treedef"))) == 1
        exported._LOADED.clear()
        again = exported.call("test_structure", fn, x, y, same_structure=False)
    finally:
        exported.enable(None)
        exported._LOADED.clear()
    for got in (first, again):
        assert jax.tree.structure(got) == jax.tree.structure(want)
        for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
            assert a.dtype == b.dtype and bool(jnp.all(a == b))


def test_the_command_line_s_exports_end_with_its_command(tmp_path, capsys):
    """`gradflow.cli.main` in-process keeps exported programs for its own
    command only: library calls made after it take `jax.jit`'s path (and share
    its compilations) instead of exporting."""
    from gradflow.cli import main

    assert not exported.enabled()
    # a command that fails on its input after the cache is turned on
    assert main(["report", str(tmp_path / "missing")]) == 2
    assert "missing" in capsys.readouterr().err
    assert not exported.enabled()
