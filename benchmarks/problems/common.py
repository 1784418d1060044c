"""The problems every part measures (those of `tests/test_deep_linear.py` and
`tests/test_committee.py`), the files it writes, and the helpers the parts
share."""

import math
import runpy
import types
from pathlib import Path

import numpy as np

import gradflow as gf


ROOT = Path(__file__).resolve().parents[2]
FIGURES = ROOT / "docs" / "figures"
JSON = FIGURES / "problems.json"
PAGE = ROOT / "docs" / "problems.md"
BEGIN, END = "<!-- problems-bench -->", "<!-- /problems-bench -->"
PARTS = (
    "literature",
    "sgd",
    "sweeps",
    "performance",
    "in_context",
    "in_context_speed",
)
# the parts that keep their own date, commit and load (run apart from the others)
OWN_META = ("in_context", "in_context_speed")

S = np.array([3.0, 1.0, 0.3])
DEEP = gf.problems.DeepLinear.random(S, n_in=5, n_out=4, hidden=(4,), seed=1)
DEEP_KW = dict(init_scale=1e-4, t1=60.0, run=gf.Run(progress=False))
COMMITTEE = gf.problems.Committee.isotropic(3, 6, students=3)
COMMITTEE_KW = dict(init_scale=1e-3, t1=1000.0, run=gf.Run(progress=False))


def crossing(ts, loss, level) -> float:
    """The first time `loss` falls through `level` (linear between saves)."""
    below = np.flatnonzero(np.asarray(loss) < level)
    if below.size == 0 or below[0] == 0:
        return math.nan
    i = int(below[0])
    f = (loss[i - 1] - level) / (loss[i - 1] - loss[i])
    return float(ts[i - 1] + f * (ts[i] - ts[i - 1]))


def fit_log_slope(ts, y, lo, hi) -> float:
    """Slope of log(y) against t over the saves with lo <= y <= hi."""
    ok = (y >= lo) & (y <= hi)
    if ok.sum() < 3:
        return math.nan
    return float(np.polyfit(ts[ok], np.log(y[ok]), 1)[0])


def row(quantity, formula, source, predicted, measured, note=""):
    err = abs(measured - predicted) / abs(predicted) if predicted else abs(measured)
    return dict(
        quantity=quantity,
        formula=formula,
        source=source,
        predicted=float(predicted),
        measured=float(measured),
        error=float(err),
        note=note,
    )


def closest(traj, stage):
    ts, g = np.asarray(traj.ts), np.asarray(traj.grad_norm)
    inside = np.flatnonzero((ts >= stage.t_start) & (ts <= stage.t_end))
    return int(inside[np.argmin(g[inside])])


SAXE = "Saxe, McClelland, Ganguli (2014)"
SAAD = "Saad, Solla (1995)"


def committee_reference() -> types.SimpleNamespace:
    """The committee machine's loss, gradient and SciPy solve derived by hand
    in NumPy (`tests/committee_reference.py`, run from its file)."""
    path = ROOT / "tests" / "committee_reference.py"
    return types.SimpleNamespace(**runpy.run_path(str(path)))
