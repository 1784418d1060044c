"""The problems beyond the paper against the literature, and the solvers on them
(issue 26): the deep linear network (Saxe, McClelland and Ganguli 2014), the
soft committee machine (Saad and Solla 1995) and in-context regression with
linear attention (Zhang, Singh, Latham and Saxe 2025). Run from the
repository's root:

    python -m benchmarks.problems            # all parts, ~25 min
    python -m benchmarks.problems --parts performance --no-doc
    python -m benchmarks.problems --parts in_context in_context_speed

Every number is measured in this one run (side by side where it is a speed
ratio) and written to `docs/figures/problems.json`; the figures go to
`docs/figures/problems_*.png` (and `.pdf`); the tables are written into
`docs/problems.md` between the markers `<!-- problems-bench -->` and
`<!-- /problems-bench -->` (unless `--no-doc`). With `--parts`, the other
parts are read back from the JSON of an earlier run.

One module a part (`literature.py`, `sgd.py`, `sweeps.py`, `performance.py`,
`in_context.py`, `in_context_speed.py`), the problems and helpers they share
(`common.py`) and the page (`page.py`). The two in-context parts keep their
own commit, date and load in the JSON (they are run apart from the others),
and the speed table says the load it was taken under.
The independent committee-machine solve is SciPy's `DOP853` on the gradient
derived by hand in NumPy (`tests/committee_reference.py`).
"""

import os


# one BLAS thread, set before NumPy is imported by any module of the package
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
