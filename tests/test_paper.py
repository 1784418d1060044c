"""docs/paper.md, the paper claim by claim (`examples/paper/`).

- Default tier: `python -m examples.paper --fast` on the main scenario (the d = 4
  chain; every group but real text): each row's verdict (direction and
  tolerance) must be the one the page reports, so a claim that stops holding,
  or starts to, fails here. The runs are computed once for the module.
- Slow tier: the same on `sticky(6, 0.5, 0.5, 0.05)`, and the real-text rows.
- `gf.chains.from_pi`, the constructor of the main scenario's chain, and the
  rank-one manifold (`gf.markov.onto_manifold`, ...): its invariance at a
  random point, exactly.
"""

import importlib.util
import json
import sys
from dataclasses import replace
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradflow as gf
from gradflow import theory


ROOT = Path(__file__).resolve().parents[1]
FAST_GROUPS = ("condensation", "focus", "dilution", "new_direction", "cycles")


def _load_paper():
    """The package `examples/paper/`, loaded from its files (examples are not
    installed)."""
    folder = ROOT / "examples" / "paper"
    spec = importlib.util.spec_from_file_location(
        "paper", folder / "__init__.py", submodule_search_locations=[str(folder)]
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["paper"] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def paper():
    return _load_paper()


@pytest.fixture(scope="module")
def fast_rows(paper):
    study = paper.Study(paper.FAST, log=lambda line: None)
    return paper.measure(study, paper.FAST_GROUPS)


def _mismatches(rows) -> str:
    return "\n".join(
        f"claim {r.claim} [{r.scenario}] {r.part}: {r.quantity}: predicted "
        f"{r.predicted}, measured {r.measured} ({r.check}): holds = {r.holds}, "
        f"the page says {r.expect}"
        for r in rows
        if not r.as_expected
    )


def test_fast_mode_covers_every_group_but_text(paper):
    assert paper.FAST_GROUPS == FAST_GROUPS
    assert set(paper.GROUPS) == {*FAST_GROUPS, "text"}


@pytest.mark.parametrize("group", FAST_GROUPS)
def test_rows_keep_the_pages_verdict(fast_rows, group):
    rows = fast_rows[group]
    assert rows, f"no rows in {group}"
    assert not _mismatches(rows), _mismatches(rows)


def test_every_claim_has_rows_and_some_fail(fast_rows):
    rows = [r for rs in fast_rows.values() for r in rs]
    assert {r.claim for r in rows} == {1, 2, 3, 4, 5}
    # the page reports refuted parts: the checks can fail
    assert any(not r.holds for r in rows) and any(r.holds for r in rows)


def test_the_written_page_reports_its_rows_verdicts():
    """docs/figures/paper.json (written with docs/paper.md by the full run):
    every row's verdict was the expected one when the page was written."""
    data = json.loads((ROOT / "docs" / "figures" / "paper.json").read_text())
    rows = [r for rs in data["rows"].values() for r in rs]
    assert {r["claim"] for r in rows} == {1, 2, 3, 4, 5, 6}
    assert all(r["holds"] == r["expect"] for r in rows)


@pytest.mark.slow
def test_sticky_rows_keep_the_pages_verdict(paper):
    settings = replace(paper.FAST, scenarios=("sticky6",), ablation=False)
    rows = paper.measure(paper.Study(settings, log=lambda line: None), FAST_GROUPS)
    rows = [r for rs in rows.values() for r in rs]
    assert rows and not _mismatches(rows), _mismatches(rows)


@pytest.mark.slow
def test_text_rows_keep_the_pages_verdict(paper):
    rows = paper.measure(paper.Study(paper.FULL, log=lambda line: None), ("text",))
    assert rows["text"] and not _mismatches(rows["text"]), _mismatches(rows["text"])


# --------------------------------------------------------------- from_pi


@pytest.mark.parametrize("lam", [0.0, 0.5, 0.9])
def test_from_pi_is_the_papers_form_with_pi_stationary(lam):
    pi = np.array([0.7, 0.12, 0.1, 0.08])
    chain = gf.chains.from_pi(pi, lam)
    expected = lam * np.eye(4) + (1 - lam) * np.outer(np.ones(4), pi)
    np.testing.assert_allclose(chain.P, expected, rtol=0, atol=1e-15)
    np.testing.assert_allclose(chain.pi, pi, rtol=0, atol=1e-15)
    # pi P = pi, independently of the chain's own solve
    np.testing.assert_allclose(pi @ np.asarray(chain.P), pi, rtol=0, atol=1e-15)


def test_from_pi_of_stickys_pi_is_sticky():
    pi = gf.chains.sticky_pi(6, 0.5, 0.05)
    np.testing.assert_allclose(
        gf.chains.from_pi(pi, 0.5).P, gf.chains.sticky(6, 0.5, 0.5, 0.05).P, atol=1e-15
    )


def test_from_pi_renormalises_round_off_only():
    chain = gf.chains.from_pi([0.5, 0.5 + 5e-9], 0.3)
    assert abs(float(np.sum(chain.pi)) - 1.0) < 1e-15
    with pytest.raises(
        ValueError, match=r"pi must sum to 1, got sum\(pi\) = 1\.00000002"
    ):
        gf.chains.from_pi([0.5, 0.5 + 2e-8], 0.3)


# ------------------------------------------- the rank-one manifold (theory)


def _random_point(seed=0, m=8, d=4):
    rng = np.random.default_rng(seed)
    shapes = ((m, d), (d, m), (m, m), (m, m))
    return gf.Params(*(jnp.asarray(rng.standard_normal(s)) for s in shapes))


def test_gauge_keeps_the_loss_and_projection_lands_on_the_manifold():
    chain = gf.chains.from_pi([0.7, 0.12, 0.1, 0.08], 0.5)
    p = _random_point()
    loss = float(gf.population_loss(p, chain))
    assert (
        abs(float(gf.population_loss(gf.markov.manifold_gauge(p), chain)) - loss)
        < 1e-12
    )
    assert gf.markov.manifold_distance(p) > 0.1
    on = gf.markov.onto_manifold(p)
    assert gf.markov.manifold_distance(on) < 1e-13
    assert np.all(np.asarray(on.W0)[1:] == 0) and np.all(np.asarray(on.WQ)[:, 1:] == 0)


def test_the_gradient_on_the_manifold_has_no_component_off_it():
    """The invariance of docs/paper.md's claim 3, at a random point of the
    manifold: -grad L has exactly zero off-manifold coordinates, and the
    tangent basis is orthonormal and holds the gradient."""
    chain = gf.chains.from_pi([0.7, 0.12, 0.1, 0.08], 0.5)
    on = gf.markov.onto_manifold(_random_point(seed=1))
    grad = np.asarray(theory.flatten_params(jax.grad(gf.population_loss)(on, chain)))
    mask = gf.markov.manifold_mask(8, 4)
    assert np.abs(grad[mask]).max() > 1e-3
    assert np.all(grad[~mask] == 0.0)
    T = gf.markov.tangent_basis(on)
    np.testing.assert_allclose(T @ T.T, np.eye(T.shape[0]), atol=1e-12)
    assert np.linalg.norm(grad - T.T @ (T @ grad)) < 1e-12 * np.linalg.norm(grad)


def test_score_alignment_and_linear_solution_at_zero_time():
    pi = np.array([0.7, 0.12, 0.1, 0.08])
    assert gf.markov.score_alignment(-3.0 * np.outer(pi, pi), pi) == pytest.approx(-1.0)
    chain = gf.chains.from_pi(pi, 0.5)
    # the shapes of the fast mode's origin (d = 4, width 8): its compiled
    # Hessian is reused
    origin = theory.origin_point(gf.Model(), 4, 8)
    lin = gf.linearize(chain, origin, method="dense")
    start = _random_point(seed=2)
    x = gf.markov.linear_solution(lin, origin, start, np.array([0.0]))
    np.testing.assert_allclose(
        x[0], np.asarray(theory.flatten_params(start)), atol=1e-12
    )
