"""The stage detector against the independent labeller (tests/stages_labeller.py).

Default tier: three small chains of three families (d = 4, width 4), solved in
the test on the dense grid of `benchmarks/stages_accuracy.py`; the detector
reads every second save (the grid `integrate(stages=True)` uses), the labeller
all of them. The full evaluation (28 trajectories, five families) is the
`slow` test and `python benchmarks/stages_accuracy.py`.
"""

import sys
from pathlib import Path

import numpy as np
import pytest

import gradflow as gf


sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import stages_accuracy as sa  # noqa: E402
import stages_labeller as lab  # noqa: E402


SMALL = [
    ("sticky", lambda: gf.chains.sticky(4, 0.5, 0.5, 0.2), 0),
    ("random", lambda: gf.chains.random(4, seed=7), 1),
    ("zipf", lambda: gf.chains.zipf(4, 1.0, 0.5), 2),
]


@pytest.fixture(scope="module")
def small_results():
    out = []
    for name, chain, seed in SMALL:
        traj = gf.integrate(
            chain(),
            1e-3,
            width=4,
            seed=seed,
            t1=5000.0,
            saveat=gf.SaveAt(gf.default_save_times(5000.0, sa.DENSE_NUM), stages=False),
            run=gf.Run(progress=False),
        )
        assert traj.ok, traj.message
        stages, _ = sa.detect_on_default_grid(traj, step=sa.STAGES_STEP)
        r = lab.check_trajectory(traj, stages)
        r["name"] = name
        out.append(r)
    return out


def test_detector_agrees_with_the_labeller_on_small_chains(small_results):
    table = lab.summarize(small_results)
    found = {k: v for k, v in table.items() if v["labelled"] or v["detected"]}
    assert {"condensation", "plateau", "focus"} <= set(found)
    for kind, row in found.items():
        assert row["precision"] >= 0.95 and row["recall"] >= 0.95, (kind, row)


def test_focus_never_raises_the_entropy_and_openings_are_covered(small_results):
    for r in small_results:
        assert all(x < 0 for x in r["focus_entropy_change"]), r["name"]
        assert not r["uncovered"], (r["name"], r["uncovered"])


def test_labeller_sees_a_planted_opening():
    """The labeller is not blind: on curves with a known opening of
    sigma_2 / sigma_1 it reports it, and a detector output without it fails."""
    t = np.geomspace(1.0, 1e4, 800)
    r = np.stack([1e-3 + 0.8 / (1 + np.exp(-(np.log(t) - 6.0) / 0.2))], axis=1)
    c = dict(t=t, r=r)
    ((k, lo, hi),) = lab.openings(c)

    def when(level):  # r = level, solved exactly
        x = (level - 1e-3) / 0.8
        return np.exp(6.0 + 0.2 * np.log(x / (1 - x)))

    assert k == 1
    assert lo == pytest.approx(when(0.05), rel=1e-3)
    assert hi == pytest.approx(when(0.3), rel=1e-3)


@pytest.mark.slow
def test_full_suite_precision_and_recall():
    summary, results = sa.evaluate(sa.suite(), verbose=False)
    assert len(results) >= 24
    assert len({e["family"] for e in sa.suite()}) >= 4
    for kind, row in summary.items():
        assert row["precision"] >= 0.95 and row["recall"] >= 0.95, (kind, row)
    assert sa.default_scenario(results)
