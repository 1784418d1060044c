"""Executes `examples/tutorial.ipynb` and writes the executed copy the site renders.

    python docs/_execute_notebook.py [--limit 600] [--force]

The committed notebook has no outputs, so none can go stale: the site shows
the outputs of this run. The executed copy goes to
`build/docs/notebooks/tutorial.ipynb` (git-ignored) with the SHA-256 of the
notebook and of gradflow's sources in its metadata; `mkdocs build` (through
`docs/_hooks.py`) calls `ensure()` and re-executes only when either changed.

`--limit` bounds the whole execution in seconds of wall time (each cell gets
what is left); a cell that raises, or a run past the limit, fails with exit
code 1 and names the cell.
"""

import argparse
import hashlib
import os
import sys
import time
from pathlib import Path


ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "examples" / "tutorial.ipynb"
OUTPUT = ROOT / "build" / "docs" / "notebooks" / "tutorial.ipynb"
DEFAULT_LIMIT = 600.0  # generous: a busy 2-core machine took 220 s; CI uses 300


def source_hash() -> str:
    """SHA-256 over the notebook and every file of the gradflow package."""
    h = hashlib.sha256()
    for path in [SOURCE, *sorted((ROOT / "gradflow").rglob("*.py"))]:
        h.update(str(path.relative_to(ROOT)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()


def is_fresh(output: Path = OUTPUT) -> bool:
    """Whether `output` was executed from today's notebook and sources."""
    import nbformat

    if not output.exists():
        return False
    nb = nbformat.read(output, as_version=4)
    return nb.metadata.get("gradflow_execution", {}).get("sha256") == source_hash()


def execute(output: Path = OUTPUT, limit: float = DEFAULT_LIMIT) -> float:
    """Runs every cell in a fresh kernel (cwd: the repository root); returns
    the wall time in seconds. Raises `RuntimeError` naming the cell on an error
    or when `limit` seconds are spent."""
    import nbclient
    import nbformat
    from nbclient.exceptions import CellExecutionError, CellTimeoutError

    if limit <= 0:
        raise ValueError(f"limit must be > 0 seconds, got {limit}")
    # The kernel inherits this environment: one BLAS thread (the docs build
    # shares small machines) and the repository on the path.
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS"):
        os.environ.setdefault(var, "1")
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    )
    nb = nbformat.read(SOURCE, as_version=4)
    client = nbclient.NotebookClient(
        nb, kernel_name="python3", resources={"metadata": {"path": str(ROOT)}}
    )
    start = time.perf_counter()
    with client.setup_kernel():
        for index, cell in enumerate(nb.cells):
            left = limit - (time.perf_counter() - start)
            if left <= 0:
                raise RuntimeError(
                    f"{SOURCE.name}: the limit of {limit:.0f} s was spent before "
                    f"cell {index}"
                )
            client.timeout = max(1, int(left))
            try:
                client.execute_cell(cell, index)
            except CellTimeoutError as e:
                raise RuntimeError(
                    f"{SOURCE.name}: cell {index} ran past the limit of {limit:.0f} s"
                ) from e
            except CellExecutionError as e:
                raise RuntimeError(f"{SOURCE.name}: cell {index} failed:\n{e}") from e
    seconds = time.perf_counter() - start
    nb.metadata["gradflow_execution"] = {
        "sha256": source_hash(),
        "seconds": round(seconds, 1),
    }
    output.parent.mkdir(parents=True, exist_ok=True)
    tmp = output.with_suffix(".tmp")
    nbformat.write(nb, tmp)
    tmp.replace(output)
    return seconds


def ensure(output: Path = OUTPUT, limit: float = DEFAULT_LIMIT) -> float | None:
    """Executes the notebook unless `output` is fresh; the wall time, or `None`
    when nothing had to run."""
    if is_fresh(output):
        return None
    return execute(output, limit)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=float, default=DEFAULT_LIMIT)
    parser.add_argument("--force", action="store_true", help="run even if fresh")
    parser.add_argument("--out", type=Path, default=OUTPUT)
    args = parser.parse_args(argv)
    try:
        if args.force:
            seconds = execute(args.out, args.limit)
        else:
            seconds = ensure(args.out, args.limit)
    except RuntimeError as e:
        print(e, file=sys.stderr)
        return 1
    if seconds is None:
        print(f"{args.out} is up to date")
    else:
        print(f"executed {SOURCE.relative_to(ROOT)} in {seconds:.1f} s -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
