"""The diagonal linear network (`gf.problems.DiagonalLinear`) and the
saddle-to-saddle limit of Pesme and Flammarion (2023)
(`gf.theory.saddle_to_saddle`; `docs/problems.md`, "Diagonal linear
networks").

- The closed-form loss against Monte-Carlo means of `sample_loss`, its
  gradient against the hand-derived $2u \\odot g$, $-2v \\odot g$ (and
  $v \\odot g$, $u \\odot g$), the starts.
- The limit path: the example of `docs/problems.md` exactly (coordinate 3
  learnt then unlearnt), the identity covariance in closed form, every
  saddle against SciPy's bounded least squares and every jump against an
  independent integration of the dual variable.
- Against the flow: at init scale 1e-10 the stages find every predicted
  plateau within 10 % of its level, and the report sets each level and
  jump time beside the measured; from 1e-5 to 1e-15 the error in the
  jump times falls like $1/\\log(1/\\alpha)$ and the error in $\\beta$
  faster.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.optimize import lsq_linear
from staircase_cases import (
    CONVERGENCE_PROBLEMS,
    SPEC_SIGMA,
    TRIDIAGONAL,
    convergence_errors,
)

import gradflow as gf


def _random_point(problem, seed):
    rng = np.random.default_rng(seed)
    d = problem.dimension
    return (jnp.asarray(rng.normal(size=d)), jnp.asarray(rng.normal(size=d)))


@pytest.mark.parametrize("kind", ["u2-v2", "uv"])
def test_loss_against_monte_carlo_and_the_hand_derived_gradient(kind):
    problem = gf.problems.DiagonalLinear(TRIDIAGONAL, [1.0, -2.0, 0.5, -0.2], kind,
                                         noise=0.3)  # fmt: skip
    params = _random_point(problem, 0)
    u, v = (np.asarray(x) for x in params)
    beta = u * u - v * v if kind == "u2-v2" else u * v
    r = beta - np.array([1.0, -2.0, 0.5, -0.2])
    exact = 0.5 * r @ TRIDIAGONAL @ r + 0.5 * 0.3**2
    assert float(problem.loss(params)) == pytest.approx(exact, rel=1e-14)
    n = 400_000
    x, y = problem.sample(jax.random.key(1), n)
    per = 0.5 * (np.asarray(x) @ beta - np.asarray(y)) ** 2
    assert float(problem.sample_loss(params, (x, y))) == pytest.approx(
        per.mean(), rel=1e-10
    )
    # the Monte-Carlo mean within 5 standard errors of the closed form
    assert abs(per.mean() - exact) < 5 * per.std() / math.sqrt(n)
    g = TRIDIAGONAL @ r
    du, dv = jax.grad(problem.loss)(params)
    hand = (2 * u * g, -2 * v * g) if kind == "u2-v2" else (v * g, u * g)
    np.testing.assert_allclose(du, hand[0], rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(dv, hand[1], rtol=1e-12, atol=1e-14)
    assert problem.loss_floor() == pytest.approx(0.045, rel=1e-14)


def test_starts():
    p = gf.problems.DiagonalLinear(np.ones(4), [1.0, 0, 0, 2.0])
    u, v = p.init(jax.random.key(0), 1e-3)
    np.testing.assert_array_equal(u, 1e-3)
    np.testing.assert_array_equal(v, 1e-3)
    q = gf.problems.DiagonalLinear(np.ones(4000), np.zeros(4000), "uv")
    u, v = q.init(jax.random.key(0), 1e-3)
    assert float(jnp.std(u)) == pytest.approx(1e-3, rel=0.05)
    assert float(jnp.std(v)) == pytest.approx(1e-3, rel=0.05)


def test_the_path_of_the_documented_example():
    """0 -> (0, 0, 1.4) at tau = 5/14 -> (1, 1, 0) at tau = 7.5: on the
    saddle g = Sigma (beta - beta*) = (-0.02, -0.02, 0), so s_1 = 2 (5/14)
    reaches 1 after (1 - 5/7) / 0.04 more."""
    problem = gf.problems.DiagonalLinear(SPEC_SIGMA, [1.0, 1.0, 0.0])
    path = gf.theory.saddle_to_saddle(problem)
    assert len(path) == 3
    np.testing.assert_allclose([j.time for j in path], [0, 5 / 14, 7.5], rtol=1e-12)
    np.testing.assert_allclose(path[1].beta, [0, 0, 1.4], atol=1e-12)
    np.testing.assert_allclose(path[2].beta, [1, 1, 0], atol=1e-12)
    np.testing.assert_allclose([j.loss for j in path], [1, 0.02, 0], atol=1e-12)
    assert path[1].learnt == (2,) and path[2].learnt == (0, 1)
    assert path[2].unlearnt == (2,)  # learnt, then unlearnt


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("kind", ["u2-v2", "uv"])
def test_identity_covariance_in_closed_form(seed, kind):
    rng = np.random.default_rng(seed)
    w = rng.normal(size=7) * 10.0 ** rng.uniform(-2, 1, 7)
    w[rng.permutation(7)[:2]] = 0.0
    path = gf.theory.saddle_to_saddle(gf.problems.DiagonalLinear(np.ones(7), w, kind))
    order = np.argsort(-np.abs(w))[:5]
    c = 2.0 if kind == "u2-v2" else 1.0
    np.testing.assert_allclose(
        [j.time for j in path[1:]], 1 / (c * np.abs(w[order])), rtol=1e-12
    )
    levels = [0.5 * np.sum(w[order[k:]] ** 2) for k in range(6)]
    np.testing.assert_allclose([j.loss for j in path], levels, rtol=1e-12, atol=1e-15)
    for k, j in enumerate(path):
        expected = np.zeros(7)
        expected[order[:k]] = w[order[:k]]
        np.testing.assert_allclose(j.beta, expected, atol=1e-12)


def _random_covariance(rng, d):
    A = rng.normal(size=(d, d))
    S = A @ A.T / d + 0.2 * np.eye(d)
    return S / np.sqrt(np.outer(np.diag(S), np.diag(S)))


@pytest.mark.parametrize("seed", range(6))
def test_saddles_are_bounded_least_squares_and_jumps_the_dual(seed):
    """Every saddle against `scipy.optimize.lsq_linear` (bounds from the
    signs of the dual variable), and the dual variable integrated here,
    independently, over the path: within [-1, 1] throughout, at +-1 for each
    coordinate learnt at a jump, and the coordinates nonzero at each saddle
    free in their sign."""
    rng = np.random.default_rng(100 + seed)
    d = 6
    S = _random_covariance(rng, d)
    w = rng.normal(size=d) * 10.0 ** rng.uniform(-1, 0.5, d)
    w[rng.integers(d)] = 0.0
    problem = gf.problems.DiagonalLinear(S, w)
    path = gf.theory.saddle_to_saddle(problem)
    assert len(path) >= 3
    s = np.zeros(d)
    R = np.linalg.cholesky(S).T  # S = R^T R
    for prev, j in zip(path[:-1], path[1:], strict=True):
        g = S @ (prev.beta - w)
        s = s - 2 * (j.time - prev.time) * g
        assert np.abs(s).max() <= 1 + 1e-9
        for i in j.learnt:
            assert abs(abs(s[i]) - 1) < 1e-9
        s = np.clip(s, -1, 1)
        free = np.abs(s) > 1 - 1e-9
        lo = np.where(free & (s > 0), 0.0, np.where(free, -np.inf, 0.0))
        hi = np.where(free & (s < 0), 0.0, np.where(free, np.inf, 0.0))
        idx = np.flatnonzero(free)
        sol = lsq_linear(R[:, idx], R @ w, bounds=(lo[idx], hi[idx]), tol=1e-14,
                         method="bvls")  # fmt: skip
        expected = np.zeros(d)
        expected[idx] = sol.x
        np.testing.assert_allclose(j.beta, expected, atol=1e-9)
    # the path ends at the minimiser
    np.testing.assert_allclose(path[-1].beta, w, atol=1e-9)
    assert path[-1].loss < 1e-18


def test_the_flow_finds_every_predicted_plateau_and_the_report_says_so():
    """At init scale 1e-10, on both covariances (the documented one with its
    unlearnt coordinate): every predicted plateau (each saddle's level but
    the minimum's) is a `plateau` stage within 10 % of its level, and no
    other plateau; the report's rows set each level and jump time beside the
    path's."""
    for problem in CONVERGENCE_PROBLEMS.values():
        e = convergence_errors(problem, 1e-10)
        assert e["found"] == e["predicted"] == e["plateaus"], e
        assert e["level"] < 0.1
        rows = gf.theory_report(e["traj"])
        levels = [r for r in rows if r["quantity"].startswith("plateau ")]
        jumps = [r for r in rows if r["quantity"].startswith("jump ")]
        assert len(levels) == e["predicted"] and len(jumps) == e["predicted"]
        assert max(r["rel_error"] for r in levels) < 0.1
        # each jump's rescaled time to within 0.5 (0.45 measured on the
        # documented example: about 10 / log(1e10))
        assert max(abs(r["measured"] - r["predicted"]) for r in jumps) < 0.5


@pytest.mark.parametrize("name", list(CONVERGENCE_PROBLEMS))
def test_errors_fall_like_one_over_log_one_over_init_scale(name):
    """From 1e-5 to 1e-15: the error in the jump times times log(1/alpha)
    stays within a factor 1.5 (a fit of log error on log log(1/alpha) has
    slope -1 within 0.4), the error in beta at mid-plateau falls at least as
    fast, and every predicted plateau is found at every alpha."""
    problem = CONVERGENCE_PROBLEMS[name]
    alphas = [1e-5, 1e-10, 1e-15]
    errs = [convergence_errors(problem, a) for a in alphas]
    logs = np.log([math.log(1 / a) for a in alphas])
    tau = np.array([e["tau"] for e in errs])
    slope = np.polyfit(logs, np.log(tau), 1)[0]
    assert -1.4 < slope < -0.6, (tau, slope)
    beta = np.array([e["beta"] for e in errs])
    assert (np.diff(np.log(beta)) < -0.9 * np.diff(logs)).all(), beta
    for e in errs:
        assert e["found"] == e["predicted"], e
