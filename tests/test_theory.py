import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import random_params
from jax.flatten_util import ravel_pytree
from sweep_worker import CHUNK_STEPS

import gradflow as gf
from gradflow import theory as th


def flatten_params(params):
    """The parameters as one vector, in the order of `gf.linearize`'s modes."""
    return ravel_pytree(params)[0]


def _fd_hessian(chain, params, h=1e-5):
    x, unravel = ravel_pytree(params)
    x = np.asarray(x)

    @jax.jit
    def flat_grad(y):
        return ravel_pytree(jax.grad(gf.population_loss)(unravel(y), chain))[0]

    H = np.empty((x.size, x.size))
    for i in range(x.size):
        e = np.zeros_like(x)
        e[i] = h
        gp = np.asarray(flat_grad(jnp.asarray(x + e)))
        gm = np.asarray(flat_grad(jnp.asarray(x - e)))
        H[:, i] = (gp - gm) / (2 * h)
    return H


def test_hessian_against_finite_differences():
    # (d = 5, m = 3: the shapes of test_unstable_rates_on_unseen_chains's
    # first chain, one compiled Hessian for both)
    chain = gf.chains.random(5, seed=5)
    params = random_params(5, 3, 0.7, seed=1)
    lin = gf.linearize(chain, params, method="dense")
    H_fd = _fd_hessian(chain, params)
    # the linearisation's eigenpairs reassemble -H
    V = np.stack(
        [np.asarray(flatten_params(lin.modes[i])) for i in range(len(lin.eigenvalues))]
    )
    minus_H = V.T @ np.diag(lin.eigenvalues) @ V
    scale = np.max(np.abs(H_fd))
    assert np.max(np.abs(minus_H + H_fd)) < 1e-7 * scale
    # independent Hessian: eigenvalues of the finite-difference one
    fd_top = np.linalg.eigvalsh(-0.5 * (H_fd + H_fd.T))[::-1]
    assert abs(lin.unstable_rate - fd_top[0]) < 1e-6 * abs(fd_top[0])
    assert np.allclose(lin.block_weights.sum(axis=1), 1.0)


def test_lanczos_against_dense():
    # (d = 5, m = 3, as above)
    chain = gf.chains.random(5, seed=7)
    params = random_params(5, 3, 0.5, seed=2)
    dense = gf.linearize(chain, params, method="dense")
    n = params.num_parameters
    full = gf.linearize(chain, params, method="lanczos", num_modes=5, num_iters=n)
    np.testing.assert_allclose(full.eigenvalues, dense.eigenvalues[:5], rtol=1e-9)
    short = gf.linearize(chain, params, method="lanczos", num_modes=3, num_iters=40)
    assert abs(short.unstable_rate - dense.unstable_rate) < 1e-8 * dense.unstable_rate
    # the top Ritz vector is the top eigenvector (up to sign)
    v_l = np.asarray(flatten_params(short.modes[0]))
    v_d = np.asarray(flatten_params(dense.modes[0]))
    assert abs(abs(v_l @ v_d) - 1) < 1e-6
    assert gf.linearize(chain, params, max_dense=10).method == "lanczos"
    assert gf.linearize(chain, params).method == "dense"


@pytest.mark.parametrize(
    "chain",
    [
        gf.chains.random(5, seed=101),
        gf.chains.random(7, seed=11, concentration=0.3),
        gf.chains.zipf(5, exponent=1.3, rho=0.3),
    ],
)
def test_unstable_rates_on_unseen_chains(chain):
    m = 3
    zero = gf.Params(
        *(jnp.zeros(s) for s in [(m, chain.d), (chain.d, m), (m, m), (m, m)])
    )
    lin0 = gf.linearize(chain, zero)
    assert abs(lin0.unstable_rate - th.origin_rate(chain)) < 1e-9
    assert lin0.num_unstable == m  # one copy per embedding direction
    point = th.unigram_point(chain, m)
    lin = gf.linearize(chain, point)
    assert lin.grad_norm < 1e-12
    assert abs(lin.loss - float(chain.unigram_entropy)) < 1e-12
    pred = th.focus_prediction(chain)
    assert abs(lin.unstable_rate - pred["rate"]) < 1e-6 * pred["rate"]
    # the unstable mode lives in the attention block only
    np.testing.assert_allclose(lin.block_weights[0, 2:].sum(), 1.0, atol=1e-9)
    # and favours the token that the sign rule names
    assert th.mode_focus_token(chain, point, lin) == pred["token"]
    # an independent Hessian (finite differences of the gradient)
    H_fd = _fd_hessian(chain, point)
    fd_top = np.linalg.eigvalsh(-0.5 * (H_fd + H_fd.T))[-1]
    assert abs(lin.unstable_rate - fd_top) < 1e-6 * abs(fd_top)


def test_sign_rule_both_signs():
    frequent = th.focus_prediction(gf.chains.sticky(6, 0.5, 0.5, 0.05))
    assert frequent["kappa"] < 0 and frequent["token"] == 0
    chain = gf.chains.random(7, seed=11, concentration=0.3)
    rare = th.focus_prediction(chain)
    assert rare["kappa"] > 0 and rare["token"] == int(np.argmin(np.asarray(chain.pi)))
    iid = th.focus_prediction(gf.chains.zipf(5, rho=0.0))
    assert abs(iid["rate"]) < 1e-15


def test_refine_known_saddle():
    chain = gf.chains.sticky(5, 0.4, 0.5, 0.05)
    exact = th.unigram_point(chain, 3)
    start = jax_tree_add(exact, random_params(5, 3, 1e-3, seed=4))
    before = gf.linearize(chain, start).grad_norm
    point, converged = th.refine_critical_point(chain, start)
    lin = gf.linearize(chain, point)
    assert before > 1e-4
    assert converged and lin.grad_norm < 1e-10
    assert abs(lin.loss - float(chain.unigram_entropy)) < 1e-9
    assert th.classify(lin, chain) == "saddle"


def jax_tree_add(a, b):
    return gf.Params(*(getattr(a, n) + getattr(b, n) for n in ("W0", "W1", "WQ", "WK")))


# d = 4, width 4 in chunks of CHUNK_STEPS steps: the chunk compiled for
# tests/test_sweep.py's sweep (tests/sweep_worker.py) is reused (chunks of
# another size continue each other bit for bit: tests/test_checkpoint.py's
# test_chunk_size_does_not_change_the_solve).
QUIET = gf.Run(progress=False, chunk_steps=CHUNK_STEPS)


@pytest.fixture(scope="module")
def short_traj():
    chain = gf.chains.sticky(4, 0.55, 0.6, 0.05)
    return gf.integrate(chain, 1e-3, width=4, t1=300.0, run=QUIET)


def test_report_on_short_trajectory(short_traj):
    points = gf.critical_points(short_traj)
    kinds = [p.kind for p in points]
    assert kinds[0] == "saddle" and all(p.converged for p in points[:2])
    assert abs(points[0].loss - math.log(4)) < 1e-9
    rows = {r["quantity"]: r for r in gf.theory_report(short_traj, points=points)}
    assert rows["origin escape rate"]["rel_error"] < 0.05
    assert rows["origin escape time"]["rel_error"] < 0.05
    assert rows["focus growth rate"]["rel_error"] < 0.05
    assert rows["focus token"]["measured"] == rows["focus token"]["predicted"] == 0
    assert rows["W0 alignment with pi"]["measured"] > 0.99
    assert rows["attention frozen"]["measured"] < 1e-2
    text = th.format_report(list(rows.values()))
    assert "focus growth rate" in text


def test_cli(short_traj, tmp_path, capsys):
    from gradflow.cli import main

    path = short_traj.save(tmp_path / "t.npz")
    # (PNG, and PDF on request as in every subcommand)
    assert main(["theory", str(path), "--out", str(tmp_path / "o"), "--pdf"]) == 0
    out = capsys.readouterr().out
    assert "origin escape rate" in out
    assert (tmp_path / "o" / "theory.png").stat().st_size > 1000
    assert (tmp_path / "o" / "theory.pdf").exists()
    assert (tmp_path / "o" / "theory.json").exists()


def test_report_on_a_too_short_trajectory():
    # The model size and chunks of `short_traj` (d = 4, width 4): the solve
    # compiled there is reused.
    traj = gf.integrate(
        gf.chains.sticky(4, 0.5, 0.5, 0.05), 1e-3, width=4, t1=5.0, run=QUIET
    )
    # Nothing of the closed forms is measurable yet (the escape from the origin
    # has not left the linear range): only the origin saddle's escape, measured
    # on the displacement along its unstable modes while the flow is linear,
    # which it is from the start. Nothing invented.
    rows = gf.theory_report(traj)
    assert [r["quantity"] for r in rows] == [f"plateau L={math.log(4):.5g} escape rate"]
    assert rows[0]["rel_error"] < 1e-3


def test_cli_missing_file(tmp_path, capsys):
    from gradflow.cli import main

    assert main(["theory", str(tmp_path / "nope.npz")]) == 2
    assert "no such file" in capsys.readouterr().err


def test_bad_input():
    chain = gf.chains.sticky(4, 0.5, 0.5, 0.05)
    p = random_params(4, 2, 0.1, seed=0)
    batched = gf.Params(*(getattr(p, n)[None] for n in ("W0", "W1", "WQ", "WK")))
    with pytest.raises(
        ValueError,
        match=r"params\.W0 must have shape \(2, 4\) \(one point\), got shape "
        r"\(1, 2, 4\)",
    ):
        gf.linearize(chain, batched)
    with pytest.raises(ValueError, match="method must be"):
        gf.linearize(chain, p, method="qr")
    with pytest.raises(ValueError, match="tol = 2.0"):
        gf.linearize(chain, p, tol=2.0)
    # the one check of a given point (flows, SGD and the theory share it)
    with pytest.raises(
        ValueError,
        match=r"params\.W0 must have shape \(2, 5\) \(one point\), got shape \(2, 4\)",
    ):
        gf.linearize(gf.chains.sticky(5, 0.5, 0.5, 0.05), p)
    with pytest.raises(ValueError, match="num_iters = 0"):
        th.lanczos(lambda v: v, 5, 0)
    with pytest.raises(ValueError, match="max_parameters = 3"):
        th.refine_critical_point(chain, p, max_parameters=3)
    with pytest.raises(
        TypeError, match=r"params must have the structure of MarkovAttention\.init's"
    ):
        gf.linearize(chain, "not params")
    with pytest.raises(ValueError, match="width = 0"):
        th.unigram_point(chain, 0)
    with pytest.raises(ValueError, match="level = 3.0"):
        th.origin_escape_offset(chain, 3.0)
    # Three saves are all `plateaus` reads (a solve would only add compile time).
    traj = gf.Trajectory(
        ts=np.array([0.0, 0.5, 1.0]),
        loss=np.full(3, math.log(4)),
        grad_norm=np.full(3, 1e-3),
        params=gf.Params(
            *(
                np.stack([np.asarray(getattr(p, n))] * 3)
                for n in ("W0", "W1", "WQ", "WK")
            )
        ),
        problem=gf.problems.MarkovAttention(chain, width=p.m),
        settings={},
        stats={},
    )
    with pytest.raises(ValueError, match="threshold = -1.0"):
        th.plateaus(traj, threshold=-1.0)
    with pytest.raises(TypeError, match="gradflow.Trajectory"):
        gf.critical_points("traj.npz")


@pytest.mark.slow
def test_paper_chain_report():
    chain = gf.chains.sticky(6, 0.5, 0.5, 0.05)
    traj = gf.integrate(chain, 1e-3, width=8, t1=300.0, run=gf.Run(progress=False))
    rows = {r["quantity"]: r for r in gf.theory_report(traj)}
    assert rows["origin escape rate"]["rel_error"] < 0.05
    assert rows["focus growth rate"]["rel_error"] < 0.05
    assert rows["focus token"]["measured"] == 0


@pytest.mark.slow
def test_delta_linear_law():
    chain = gf.chains.sticky(6, 0.5, 0.5, 0.05)
    traj = gf.integrate(chain, 1e-3, width=8, t1=1200.0, run=gf.Run(progress=False))
    H = float(chain.unigram_entropy)
    cp = next(p for p in gf.critical_points(traj) if p.converged and p.loss < H - 1e-3)
    point, deltas, rates = cp.params, [], []
    for delta in (0.05, 0.04, 0.03, 0.02, 0.01, 0.0):
        ch = gf.chains.sticky(6, 0.5, 0.5, delta)
        point, ok = th.refine_critical_point(ch, point)
        assert ok
        deltas.append(delta)
        rates.append(gf.linearize(ch, point).unstable_rate)
    x, y = np.array(deltas[:-1]), np.array(rates[:-1])
    slope, intercept = np.polyfit(x, y, 1)
    r2 = 1 - np.sum((y - slope * x - intercept) ** 2) / np.sum((y - y.mean()) ** 2)
    assert r2 >= 0.98 and slope > 0
    assert abs(rates[-1]) < 1e-6  # degenerate at delta = 0


def test_subspace_overlap():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((3, 10))
    # any basis change inside the span leaves the overlap at 1
    mix = rng.standard_normal((3, 3))
    assert th.subspace_overlap(a, mix @ a) == pytest.approx(1.0, abs=1e-12)
    # a subspace of the span: 1; an orthogonal one: 0
    assert th.subspace_overlap(a[:1], a) == pytest.approx(1.0, abs=1e-12)
    q = np.linalg.qr(a.T, mode="complete")[0]
    assert th.subspace_overlap(a, q[:, 3:5].T) == pytest.approx(0.0, abs=1e-12)
    # one of two directions shared: 1/2
    e = np.eye(4)
    assert th.subspace_overlap(e[:2], e[[0, 2]]) == pytest.approx(0.5, abs=1e-12)
    with pytest.raises(ValueError, match="one length"):
        th.subspace_overlap(np.ones((1, 3)), np.ones((1, 4)))


def test_eigen_clusters():
    ev = np.array([2.0, 2.0 + 1e-9, 1.0, 1.0, 1.0, 0.5, -1.0])
    clusters = th.eigen_clusters(ev, rel=1e-6)
    assert [c.tolist() for c in clusters] == [[0, 1], [2, 3, 4], [5], [6]]
    # a small 2-fold eigenvalue stays apart from the zeros and from its
    # negative twin, however large the largest eigenvalue
    ev = np.array([4e-5, 4e-5 * (1 + 1e-7), 1e-15, 0.0, -1e-15, -4e-5, -0.6])
    clusters = th.eigen_clusters(ev, rel=1e-4)
    assert [c.tolist() for c in clusters] == [[0, 1], [2, 3, 4], [5], [6]]
    assert th.eigen_clusters(np.array([])) == []


def test_track_cluster_follows_a_crossing():
    # two 2-fold modes that swap order between neighbouring parameter values:
    # the tracked one is the one whose eigenspace continues, not the top one
    e = np.eye(6)
    previous = e[[0, 1]]
    eigenvalues = np.array([3.0, 3.0, 2.0, 2.0, -1.0, -1.0])
    rot = np.array([[np.cos(0.1), np.sin(0.1)], [-np.sin(0.1), np.cos(0.1)]])
    vectors = np.concatenate([e[[2, 3]], rot @ e[[0, 1]], e[[4, 5]]])
    idx, overlap = th.track_cluster(previous, eigenvalues, vectors)
    assert idx.tolist() == [2, 3]
    assert overlap == pytest.approx(1.0, abs=1e-12)
    # without a crossing it is the top cluster
    idx, _ = th.track_cluster(e[[2, 3]], eigenvalues, vectors)
    assert idx.tolist() == [0, 1]


def test_continue_critical_point_unigram():
    # the unigram point is a critical point for every chain, with L = H(pi);
    # continuation in delta must stay on it and track its top (focus) mode
    deltas = (0.0, 0.02, 0.04)
    chains = [gf.chains.sticky(4, 0.5, 0.5, x) for x in deltas]
    start = gf.theory.unigram_point(chains[0], 2)
    recs = th.continue_critical_point(chains, start)
    assert len(recs) == 3
    for rec, ch in zip(recs, chains, strict=True):
        assert rec["converged"] and rec["grad_norm"] < 1e-10
        assert rec["loss"] == pytest.approx(float(ch.unigram_entropy), abs=1e-10)
        assert rec["tracked_is_top"]
        assert rec["tracked_rate"] == rec["top_rate"] > 0
        assert rec["overlap"] > 0.9
    assert recs[0]["step"] == 0.0 and math.isnan(recs[0]["soft_rate"])
    assert recs[1]["step"] > 0 and recs[1]["overlap"] <= 1.0 + 1e-12
    with pytest.raises(ValueError, match="at least one"):
        th.continue_critical_point([], start)


@pytest.mark.slow
def test_delta_branch_through_the_crossover():
    # the post-focus branch of sticky(6, 0.5, 0.5, delta) is continuous through
    # delta ~ 0.072 (no mode crossing, no second branch): its top mode is
    # tracked with overlap near 1, a stable direction softens there and the
    # point moves fastest, and continuing back gives the same point
    chain = gf.chains.sticky(6, 0.5, 0.5, 0.05)
    traj = gf.integrate(chain, 1e-3, width=8, t1=1200.0, run=gf.Run(progress=False))
    H = float(chain.unigram_entropy)
    cp = next(p for p in gf.critical_points(traj) if p.converged and p.loss < H - 1e-3)
    deltas = np.round(np.arange(0.050, 0.0755, 0.0005), 6)
    chains = [gf.chains.sticky(6, 0.5, 0.5, float(x)) for x in deltas]
    recs = th.continue_critical_point(chains, cp.params)
    assert all(r["converged"] for r in recs)
    assert all(r["tracked_is_top"] and r["multiplicity"] == 7 for r in recs)
    assert min(r["overlap"] for r in recs) > 0.95
    assert recs[0]["loss"] == pytest.approx(cp.loss, abs=1e-12)
    steps = np.array([r["step"] for r in recs])
    i = int(np.argmax(steps))
    assert 0.0710 <= deltas[i] <= 0.0730
    assert -1e-3 < recs[i]["soft_rate"] < 0
    # far from the crossover the same direction is much stiffer
    assert recs[-1]["soft_rate"] < 3 * recs[i]["soft_rate"]
    back = th.continue_critical_point(chains[:-13:-1], recs[-1]["params"])
    for r, b in zip(recs[-12:], back[::-1], strict=True):
        assert abs(r["loss"] - b["loss"]) < 1e-10
        assert abs(r["top_rate"] - b["top_rate"]) < 1e-4 * r["top_rate"]


def _user_problems():
    """`Factorisation` and `Product` of `examples/user_problem.py` (public
    names only, as a user writes them)."""
    import importlib.util
    import sys
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "examples" / "user_problem.py"
    spec = importlib.util.spec_from_file_location("user_problem", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("user_problem", module)
    spec.loader.exec_module(module)
    return module


def _escape_cases():
    user = _user_problems()
    deep = gf.problems.DeepLinear.random(
        [3.0, 1.0, 0.3], n_in=5, n_out=4, hidden=(4,), seed=0
    )
    committee = gf.problems.Committee.isotropic(3, 6, 3, norm=1.0, seed=None)
    factor = user.Factorisation(user.target(np.array([4.0, 1.0, 0.25])), rank=3)
    # (the problem of tests/test_in_context.py::test_merged_heads_make_a_single_drop:
    # a session compiles its solve once)
    merged = gf.problems.InContextRegression([1.0, 0.5, 0.25], context=16, heads=2)
    return {
        # (problem, init scale, t1, the saddles' predicted rates)
        "deep-linear": (deep, 1e-3, 40.0, [3.0, 1.0, 0.3]),
        "committee": (committee, 1e-3, 400.0, [committee_rate(committee)]),
        "factorisation": (factor, 1e-4, 40.0, [4.0, 1.0, 0.25]),
        "product": (user.Product(jnp.asarray(2.0)), 1e-3, 10.0, [2.0]),
        "in-context-merged": (merged, 1e-2, 20.0, [in_context_rate(merged)]),
    }


def committee_rate(problem) -> float:
    return float(gf.theory.committee_plateau(problem).rate)


def in_context_rate(problem) -> float:
    return gf.theory.in_context_saddle_rate(problem)


ESCAPES = _escape_cases()


@pytest.mark.parametrize("name", list(ESCAPES))
def test_escape_rates_of_every_problem(name):
    """For every kind of problem the report sets each saddle's predicted
    escape rate (its closed form, where the problem has one) against the rate
    measured on the flow, and they agree within 3 % (docs/theory.md, "Any
    problem: the escape rates")."""
    problem, scale, t1, rates = ESCAPES[name]
    traj = gf.flow(problem, scale, t1=t1, run=gf.Run(progress=False))
    # the rate of each plateau's refined point against the flow's slope (the
    # rows every problem gets; a problem's package may add closed-form rows)
    rows = [r for r in gf.theory_report(traj) if r["quantity"].endswith(" escape rate")]
    assert len(rows) == len(rates), rows
    for row, rate in zip(rows, rates, strict=True):
        # (the refined point keeps components of the start of order the init
        # scale: its rate is the closed form to 1e-4)
        assert row["predicted"] == pytest.approx(rate, rel=1e-3)
        assert row["rel_error"] < 0.03, row


def test_a_cubic_escape_is_reported_as_not_exponential():
    """In-context regression with separate key and query, r = 1: the in-order
    saddles have exponential rate 0 (closed form, and the Hessian's top
    eigenvalue at the exact saddle); the report measures the cubic escape
    instead (lambda_j^2 against the slope of F(Gamma_jj^(1/3))) rather than
    forming a ratio with whatever small rate the refinement finds near the
    degenerate saddle."""
    lam = [1.0, 0.5, 0.25]
    problem = gf.problems.InContextRegression(lam, context=16, heads=3, key_dim=1)
    traj = gf.flow(problem, 1e-2, t1=600.0, run=gf.Run(progress=False))
    rows = gf.theory_report(traj)
    cubic = [r for r in rows if "cubic escape of direction" in r["quantity"]]
    assert len(cubic) == 2, rows
    for j, r in enumerate(cubic):
        assert r["predicted"] == lam[j] ** 2 and r["rel_error"] < 1e-2, r
    rates = [r for r in rows if "escape rate" in r["quantity"]]
    assert len(rates) == 2, rows
    for r in rates:  # the Hessian at the exact saddle: no exponential escape
        assert r["predicted"] == 0.0 and r["rel_error"] < 1e-12, r
    # each plateau on the staircase L_(1..k), the third one (not left by t1)
    # included
    levels = gf.theory.in_context_staircase(problem)
    level_rows = [r for r in rows if " level, directions " in r["quantity"]]
    assert len(level_rows) == 3, rows
    for r, level in zip(level_rows, levels, strict=False):
        assert r["predicted"] == level and r["rel_error"] < 1e-5
