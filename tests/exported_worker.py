"""One process of tests/test_exported.py (run as `python exported_worker.py
STEP`, without the tests' import hook, `JAX_COMPILATION_CACHE_DIR` set to a
folder of the test's):

- `export`: solves a small chain by `jax.jit`'s path, then with the command
  line's cache on (`gradflow.cli.enable_compilation_cache`, which keeps
  exported programs in its `gradflow-export` folder): the chunk and the
  loop's initial state (with its output's treedef beside it) among the
  programs exported, one file each (`jax.export.export` called once per
  file), the solve equal to the first bit for bit; saves it.
- `load`: (a later process) the command line's cache on, `jax.export.export`
  made to raise: every program read from its file (`jax.export.deserialize`
  called once per file), the solve equal to the saved one bit for bit.

Prints `STEP: ok` at the end."""

import os
import sys
from pathlib import Path

import jax
import numpy as np

import gradflow as gf
from gradflow.cli import enable_compilation_cache


CALLS = {"export": 0, "deserialize": 0}


def _counted(name, fn):
    def counted(*args, **kwargs):
        CALLS[name] += 1
        return fn(*args, **kwargs)

    return counted


jax.export.export = _counted("export", jax.export.export)
jax.export.deserialize = _counted("deserialize", jax.export.deserialize)


def solve():
    chain = gf.chains.sticky(4, 0.5, 0.5, 0.05)
    traj = gf.integrate(chain, 1e-3, seed=0, width=4, t1=300.0,
                        run=gf.Run(progress=False),
                        saveat=gf.SaveAt(stages=False))  # fmt: skip
    assert traj.ok, traj.message
    leaves = jax.tree.leaves(traj.params)
    return {"ts": np.asarray(traj.ts), "loss": np.asarray(traj.loss),
            **{f"p{i}": np.asarray(x) for i, x in enumerate(leaves)},
            "steps": np.asarray(traj.stats.num_steps)}  # fmt: skip


def assert_equal(a, b):
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


def main(step: str) -> None:
    folder = Path(os.environ["JAX_COMPILATION_CACHE_DIR"]).parent
    if step == "export":
        by_jit = solve()  # the command line's cache not yet on: jax.jit's path
        assert CALLS == {"export": 0, "deserialize": 0}, CALLS
        files = enable_compilation_cache() / "gradflow-export"
        by_file = solve()
        # the chunk, and at least the initial state with its output's treedef
        exported = len(list(files.glob("*.jaxexport")))
        assert CALLS["export"] == exported >= 2, (CALLS, exported)
        assert 1 <= len(list(files.glob("*.treedef"))) < exported
        assert_equal(by_jit, by_file)
        np.savez(folder / "solve.npz", **by_file)
    else:
        files = enable_compilation_cache() / "gradflow-export"

        def no_export(*args, **kwargs):
            raise AssertionError("traced and exported again instead of loaded")

        jax.export.export = no_export
        assert_equal(dict(np.load(folder / "solve.npz")), solve())
        # (a failed export would fall back to jax.jit silently: it was read)
        assert CALLS["deserialize"] == len(list(files.glob("*.jaxexport"))), CALLS
    print(f"{step}: ok")


if __name__ == "__main__":
    main(sys.argv[1])
