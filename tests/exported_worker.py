"""One process of tests/test_exported.py (run as `python exported_worker.py
STEP DIR`, without the tests' import hook):

- `export`: with exported chunks kept in DIR, solves a small chain (one file
  written, the chunk run through it), solves it again with them off
  (`jax.jit`'s path) and checks the two bit for bit; saves the solve.
- `load`: (a later process) with exporting made to raise, solves again: the
  chunk loaded from DIR's file, the solve equal to the saved one bit for bit;
  then damages the file and solves again: the file exported anew.

Prints `STEP: ok` at the end."""

import os
import sys
from pathlib import Path

import numpy as np


os.environ.setdefault("EQX_ON_ERROR", "nan")  # as the command line runs

import jax  # noqa: E402

import gradflow as gf  # noqa: E402
from gradflow._loop import exported  # noqa: E402


def solve():
    chain = gf.chains.sticky(4, 0.5, 0.5, 0.05)
    traj = gf.integrate(chain, 1e-3, seed=0, width=4, t1=300.0,
                        run=gf.Run(progress=False),
                        saveat=gf.SaveAt(stages=False))  # fmt: skip
    assert traj.ok, traj.message
    return {"ts": np.asarray(traj.ts), "loss": np.asarray(traj.loss),
            **{f"p{i}": np.asarray(x) for i, x in enumerate(jax.tree.leaves(traj.params))},
            "steps": np.asarray(traj.stats.num_steps)}  # fmt: skip


def assert_equal(a, b):
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


def main(step: str, folder: Path) -> None:
    exported.enable(folder / "export")
    if step == "export":
        via_file = solve()
        assert len(exported._LOADED) == 1, "the chunk did not run through a file"
        assert len(list((folder / "export").glob("*.jaxexport"))) == 1
        exported.enable(None)
        assert_equal(via_file, solve())
        np.savez(folder / "solve.npz", **via_file)
    else:
        saved = dict(np.load(folder / "solve.npz"))
        export = jax.export.export

        def no_export(*args, **kwargs):
            raise AssertionError("traced and exported again instead of loaded")

        jax.export.export = no_export
        loaded = solve()
        # (a failed export falls back to jax.jit silently: the program loaded)
        assert len(exported._LOADED) == 1, "the chunk was not loaded from its file"
        assert_equal(saved, loaded)
        jax.export.export = export
        (path,) = (folder / "export").glob("*.jaxexport")
        path.write_bytes(b"damaged")
        exported._LOADED.clear()
        assert_equal(saved, solve())
        assert len(exported._LOADED) == 1
        jax.export.deserialize(bytearray(path.read_bytes()))
    print(f"{step}: ok")


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
