"""The paper, claim by claim: every statement of "Focus and Dilution: The
Multi-stage Learning Process of Attention" (Chen, Lin, Xu, Luo, ICML 2026)
measured on the exact population flow, one row per claim or measurable part.
Run from the repository's root:

    python -m examples.paper               # docs/paper.md, docs/figures/paper_*.png, docs/figures/paper.json
    python -m examples.paper --only focus  # one group of rows (printed; nothing written)
    python -m examples.paper --fast        # reduced settings, every row checked (tests/test_paper.py)

Groups: condensation, focus, dilution, new_direction, cycles, text. Each row
says what the paper predicts, what gradflow measures, the error, the check
(direction and tolerance, `CHECKS_TEXT` in `study.py`) and whether it holds;
`expect` is what the page reports (a row the paper claims but our measurement
refutes has `expect=False`), and `--fast` fails when any row's verdict
differs from it. The scenarios: the main one, a d = 4 chain of the paper's
form `gf.chains.from_pi((0.7, 0.12, 0.1, 0.08), lam=0.5)` (strongly skewed
pi; its rare tokens are `0.1 * (1 + delta, 1, 1 - delta)` at delta = 0.2),
and `gf.chains.sticky(6, 0.5, 0.5, 0.05)`, both width 8, init_scale 1e-3,
seed 0, t1 = 20000; the real-text rows use the character-level bigram chain
of the built-in corpus (`gf.chains.from_text(None, 102, level="char")`).

The modules: `study.py` (scenarios, settings, rows, tolerances and the runs,
each computed once), `origin.py` (claims 1 and 2), `manifold.py` (claims 3
and 4), `cycles.py` (claims 5 and 6), `page.py` (the page and its figures)
and `command.py` (the command line).
"""

from .command import ROWS as ROWS, main as main, measure as measure
from .study import (
    FAST as FAST,
    FAST_GROUPS as FAST_GROUPS,
    FULL as FULL,
    GROUPS as GROUPS,
    SCENARIOS as SCENARIOS,
    Row as Row,
    Settings as Settings,
    Study as Study,
)
