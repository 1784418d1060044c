"""Scale-free stages on known staircases (`docs/stages.md`, "Scale-free
plateaus"): wherever the loss stands, a rest near a saddle is a `plateau`
and nothing else is.

- Diagonal networks $\\frac12|u \\odot v - w|^2$ (identity covariance) with
  3 to 6 nonzero entries spread over 1e-2 to 1e1, random signs, zeros among
  them, starts 1e-3 to 1e-6, both parametrisations, and the case of issue 41,
  $w = (5, 0, 1, 0, 0.2)$ from 1e-4 (its third plateau, at 0.2 % of the
  starting loss, used to be missed): every level
  $\\frac12\\sum_{j \\ge k} w_{(j)}^2$ within 5 %, and no other plateau; the
  saddle events located during the solve agree.
- A deep linear network whose singular values span three decades: every
  level $\\frac12\\sum_{a \\ge k} s_a^2$ (Saxe et al.).
- In-context regression with label noise: the staircase $L_{1..k}$ above a
  floor that is not zero.

The soft committee machine keeps its one plateau
(`tests/test_committee.py`), the paper's model its stage tables
(`tests/test_stages_accuracy.py`, `tests/test_integrate_stages.py`), convex
losses no plateau (`tests/test_saddles.py`).
"""

import numpy as np
import pytest
from staircase_cases import QUIET, plateau_levels, staircase_cases, staircase_flow

import gradflow as gf


CASES = staircase_cases()


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_every_level_of_a_diagonal_staircase_is_found(case):
    traj = staircase_flow(case)
    assert traj.ok, traj.message
    predicted = gf.loss_levels(traj.problem)
    # the limit path's levels are the closed form on the identity covariance
    w = np.sort(np.abs(np.asarray(case.target)))[::-1]
    w = w[w > 0]
    closed = [0.5 * float(np.sum(w[k:] ** 2)) for k in range(w.size + 1)]
    levels = [v for _, v in predicted.values()]
    np.testing.assert_allclose(levels, closed, rtol=1e-12, atol=1e-15)
    # the loss spans at least six decades (to round-off at the end), the
    # levels by a factor 600 at least (651 in the case: 13.02 to 0.02)
    assert traj.loss[-1] < 1e-6 * traj.loss[0] and closed[0] / closed[-2] > 600
    found = plateau_levels(traj)
    assert len(found) == w.size, (found, closed)  # no other plateau
    np.testing.assert_allclose(found, closed[:-1], rtol=0.05)
    # the located saddle events: an escape from each plateau, an entry into
    # each but the first (the start, still)
    names = [e.name for e in traj.events if e.located]
    assert names.count("saddle_escape") == w.size
    assert names.count("saddle_entry") == w.size - 1
    drops = [s for s in traj.stages if s.name == "drop"]
    assert drops[-1].complete  # the rest at the minimum is no plateau


def test_the_family_spans_decades_of_levels():
    """Between the start's level and the last plateau: at least 5.5
    decades in one case, at least 2.5 in every case (2.8 for the issue's)."""
    spans = []
    for case in CASES:
        w = np.sort(np.abs(np.asarray(case.target)))
        w = w[w > 0]
        spans.append(np.log10(np.sum(w**2) / w[0] ** 2))
    assert max(spans) > 5.5 and min(spans) > 2.5, spans


def test_deep_linear_levels_over_three_decades_of_singular_values():
    s = np.array([10.0, 1.0, 0.1, 0.01])
    problem = gf.problems.DeepLinear.random(s, n_in=5, n_out=4, hidden=(4,), seed=2)
    traj = gf.flow(problem, init_scale=1e-3, t1=1200.0, run=QUIET)
    assert traj.ok, traj.message
    levels = [0.5 * float(np.sum(s[k:] ** 2)) for k in range(s.size)]
    found = plateau_levels(traj)
    assert len(found) == s.size, found
    np.testing.assert_allclose(found, levels, rtol=0.05)


def test_in_context_staircase_above_a_floor():
    problem = gf.problems.InContextRegression(
        [1.0, 0.5, 0.25], context=16, heads=3, key_dim=1, noise=0.5
    )
    traj = gf.flow(problem, init_scale=1e-2, t1=5000.0, run=QUIET)
    assert traj.ok, traj.message
    stairs = gf.theory.in_context_staircase(problem)
    assert problem.loss_floor() == pytest.approx(stairs[-1], rel=1e-12)
    assert problem.loss_floor() > 0.1  # the levels stand on a floor
    found = plateau_levels(traj)
    assert len(found) == 3, found
    # each level's height above the floor, within 5 %
    floor = problem.loss_floor()
    np.testing.assert_allclose(np.array(found) - floor, stairs[:-1] - floor, rtol=0.05)
