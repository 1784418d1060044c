"""The problems beyond the paper against the literature, and the solvers on them
(issue 26): the deep linear network (Saxe, McClelland and Ganguli 2014) and
the soft committee machine (Saad and Solla 1995). Run from the repository's
root:

    python -m benchmarks.problems            # all parts, ~10 min
    python -m benchmarks.problems --parts performance --no-doc

Every number is measured in this one run (side by side where it is a speed
ratio) and written to `docs/figures/problems.json`; the figures go to
`docs/figures/problems_*.png` (and `.pdf`); the tables are written into
`docs/problems.md` between the markers `<!-- problems-bench -->` and
`<!-- /problems-bench -->` (unless `--no-doc`). With `--parts`, the other
parts are read back from the JSON of an earlier run.

One module a part (`literature.py`, `sgd.py`, `sweeps.py`, `performance.py`),
the problems and helpers they share (`common.py`) and the page (`page.py`).
The independent committee-machine solve is SciPy's `DOP853` on the gradient
derived by hand in NumPy (`tests/committee_reference.py`).
"""

import os


# one BLAS thread, set before NumPy is imported by any module of the package
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
