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
