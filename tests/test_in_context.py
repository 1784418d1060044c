"""In-context regression with linear attention
(`gf.problems.InContextRegression`) against its closed forms and the
literature: Zhang, Singh, Latham and Saxe (ICML 2025).

- The closed-form loss against an independent NumPy form of the expanded
  formula (`docs/problems.md`), its gradient against finite differences of
  that form and against the hand-derived gradient, and against Monte-Carlo
  means of `sample_loss` (the heads run on sampled tokens).
- $L(0) = \\tau/2$; the minimiser $\\Gamma^*$ (gradient zero, loss
  $L_{1..D}$, diagonal in the eigenbasis).
- The critical points with a set of directions learnt: their loss $L_S$ and
  the whole spectrum of $-\\nabla^2 L$ in closed form (`gf.linearize`); the
  escape rate of the in-order saddles is 0 (cubic escape), that of the
  out-of-order ones positive.
- Separate key and query (r = 1), small start: the plateaus $L_{1..k}$ in
  decreasing order of eigenvalue; with fewer heads than directions the flow
  stops at $L_{1..H}$; from the aligned balanced start each direction follows
  the closed-form cubic escape. Merged key-query: one drop, no intermediate
  plateau.
- One-line errors for every bad argument, before anything is compiled.

The flows of one shape share one compiled solve.
"""

import itertools
import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradflow as gf
from gradflow import plot
from gradflow.theory import (
    in_context_aligned_start,
    in_context_cubic_rate,
    in_context_learning_time,
    in_context_learnt_times,
    in_context_level,
    in_context_minimiser,
    in_context_saddle,
    in_context_saddle_rate,
    in_context_saddle_spectrum,
    in_context_staircase,
)


ICR = gf.problems.InContextRegression
LAM = np.array([1.0, 0.5, 0.25])
N = 16
# separate key and query, r = 1, one head per direction (D = H = 3)
PROBLEM = ICR(LAM, context=N, heads=3, key_dim=1)
LEVELS = in_context_staircase(PROBLEM)
SEPARATE_SEED = 0
SEPARATE = dict(
    init_scale=1e-2, t1=5000.0, seed=SEPARATE_SEED, run=gf.Run(progress=False)
)


def _random_covariance(seed, d=3):
    """A correlated covariance (not diagonal)."""
    B = np.random.default_rng(seed).standard_normal((d, d))
    return B @ B.T / d + 0.3 * np.eye(d)


def _numpy_loss(G, S, N, noise):
    """The expanded closed form of `docs/problems.md`, in NumPy."""
    tau = np.trace(S) + noise**2
    return 0.5 * (
        (1 + 1 / N) * np.trace(S @ S @ G @ S @ G.T)
        + tau / N * np.trace(G @ S @ G.T @ S)
        - 2 * np.trace(S @ G @ S)
        + tau
    )


def _numpy_gamma(params):
    """Gamma of a point (the heads' module or a dict of its NumPy fields)."""
    p = params if isinstance(params, dict) else vars(params)
    p = {k: np.asarray(v) for k, v in p.items()}
    if "W" in p:
        return np.einsum("h,hde->de", p["v"], p["W"])
    return np.einsum("h,hrd,hre->de", p["v"], p["K"], p["Q"])


@eqx.filter_jit
def _monte_carlo(problem, params, key, n):
    """A sample, its loss (`sample_loss`) and the closed form, in one
    compilation."""
    batch = problem.sample(key, n)
    return batch, problem.sample_loss(params, batch), problem.loss(params)


@pytest.fixture(scope="module")
def traj():
    """Separate key and query from a small random start."""
    return gf.flow(PROBLEM, **SEPARATE)


# -- the closed form ------------------------------------------------------------


@pytest.mark.parametrize("key_dim", [2, None])
def test_closed_form_against_numpy_and_its_gradient(key_dim):
    S = _random_covariance(0)
    problem = ICR(S, context=5, heads=2, key_dim=key_dim, noise=0.3)
    params = problem.init(jax.random.key(1), 0.7)
    G = _numpy_gamma(params)
    np.testing.assert_allclose(problem.gamma(params), G, rtol=1e-13, atol=1e-15)
    exact = _numpy_loss(G, S, 5, 0.3)
    assert float(problem.loss(params)) == pytest.approx(exact, rel=1e-13)
    # the gradient: autodiff of the closed form against the hand-derived
    # dL/dGamma = (1 + 1/N) S^2 G S + (tau/N) S G S - S^2, chained to the heads
    grad = jax.grad(problem.loss)(params)
    tau = np.trace(S) + 0.09
    dG = (1 + 1 / 5) * S @ S @ G @ S + tau / 5 * S @ G @ S - S @ S
    p = {k: np.asarray(v) for k, v in vars(params).items()}
    if key_dim is None:
        np.testing.assert_allclose(grad.W, p["v"][:, None, None] * dG, rtol=1e-12)
        hand_v = np.einsum("de,hde->h", dG, p["W"])
    else:
        hand_K = np.einsum("h,hre,de->hrd", p["v"], p["Q"], dG)
        np.testing.assert_allclose(grad.K, hand_K, rtol=1e-12, atol=1e-14)
        hand_v = np.einsum("de,hrd,hre->h", dG, p["K"], p["Q"])
    np.testing.assert_allclose(grad.v, hand_v, rtol=1e-12, atol=1e-14)
    # ... and against central differences of the NumPy form in every
    # coordinate (step 1e-5: error O(h^2) times the third derivative, ~1e-10)
    h, fd = 1e-5, {}
    for name, value in p.items():
        fd[name] = np.empty(value.shape)
        for i in np.ndindex(value.shape):
            loss = []
            for step in (h, -h):
                moved = dict(p, **{name: value.copy()})
                moved[name][i] += step
                loss.append(_numpy_loss(_numpy_gamma(moved), S, 5, 0.3))
            fd[name][i] = (loss[0] - loss[1]) / (2 * h)
    for name in p:
        np.testing.assert_allclose(fd[name], getattr(grad, name), rtol=1e-7, atol=1e-9)


@pytest.mark.parametrize("key_dim", [2, None])
def test_closed_form_against_monte_carlo(key_dim):
    """The mean of 1/2 (yhat - y_q)^2 over sampled sequences, the heads run on
    the tokens, within 4 standard errors of the closed form."""
    S = _random_covariance(2)
    problem = ICR(S, context=5, heads=2, key_dim=key_dim, noise=0.3)
    params = problem.init(jax.random.key(3), 0.7)
    n = 200_000
    (tokens, target), mc, exact = _monte_carlo(problem, params, jax.random.key(4), n)
    tokens, target = np.asarray(tokens), np.asarray(target)
    assert tokens.shape == (n, 6, 4) and target.shape == (n,)
    assert (tokens[:, -1, -1] == 0).all()  # the query's label is hidden
    x = tokens[..., :3].reshape(-1, 3)
    np.testing.assert_allclose(np.cov(x.T, bias=True), S, atol=0.02)
    # the forward on the tokens is yhat = beta_hat^T Gamma x_q
    beta = np.einsum("bn,bnd->bd", tokens[:, :-1, -1], tokens[:, :-1, :3]) / 5
    yhat = np.einsum("bd,de,be->b", beta, _numpy_gamma(params), tokens[:, -1, :3])
    per_sequence = 0.5 * (yhat - target) ** 2
    assert float(mc) == pytest.approx(per_sequence.mean(), rel=1e-10)
    assert abs(float(mc) - float(exact)) < 4 * per_sequence.std() / np.sqrt(n)


def test_origin_minimiser_and_levels():
    S = _random_covariance(5)
    problem = ICR(S, context=4, heads=2, noise=0.5)
    lam, U = problem.eigen()
    tau = np.trace(S) + 0.25
    zero = problem.init(jax.random.key(0), 1.0)
    zero = jax.tree.map(jnp.zeros_like, zero)
    assert float(problem.loss(zero)) == pytest.approx(tau / 2, rel=1e-14)
    # the minimiser: diagonal in the eigenbasis, gamma_i = 1/A_i
    star = in_context_minimiser(problem)
    A = (1 + 1 / 4) * lam + tau / 4
    np.testing.assert_allclose(U.T @ star @ U, np.diag(1 / A), atol=1e-14)
    dG = (1 + 1 / 4) * S @ S @ star @ S + tau / 4 * S @ star @ S - S @ S
    assert np.abs(dG).max() < 1e-14
    # reached by the merged heads: loss L_{1..D}, the floor
    point = in_context_saddle(problem, range(3))
    floor = in_context_level(problem, range(3))
    assert float(problem.loss(point)) == pytest.approx(floor, rel=1e-13)
    assert problem.loss_floor() == pytest.approx(floor, rel=1e-14)
    assert _numpy_loss(star, S, 4, 0.5) == pytest.approx(floor, rel=1e-12)
    # L_S = tau/2 - 1/2 sum_S lam^2/A; the staircase is L_{1..k}
    for k in range(4):
        expected = tau / 2 - 0.5 * np.sum(lam[:k] ** 2 / A[:k])
        assert in_context_staircase(problem)[k] == pytest.approx(expected, rel=1e-14)
    # any other point lies above the floor
    other = problem.init(jax.random.key(1), 0.5)
    assert float(problem.loss(other)) > floor


# -- critical points and their linearisation --------------------------------------


@pytest.mark.parametrize(
    "key_dim, learnt",
    [(1, ()), (1, (0,)), (1, (0, 1)), (1, (0, 1, 2)), (1, (1,)), (1, (0, 2)),
     (2, ()), (2, (0,)), (2, (0, 1))],
)  # fmt: skip
def test_saddles_and_their_spectrum_in_closed_form(key_dim, learnt):
    """At the critical point with the directions `learnt`: gradient 0, loss
    L_S, and every eigenvalue of -Hessian as derived in docs/problems.md.
    In order with r = 1 (the leading directions) nothing grows exponentially
    (the next direction escapes cubically, through a free head); out of order
    a learnt head turns to the stronger direction; r = 2 escapes through a
    learnt head's second row at c_i lam_j^2."""
    # (context N and three heads: the Hessians compiled once, with the report's)
    problem = ICR(_random_covariance(6), context=N, heads=3, key_dim=key_dim, noise=0.3)
    point = in_context_saddle(problem, learnt)
    lin = gf.linearize(problem, point)
    assert lin.grad_norm < 1e-13
    assert lin.loss == pytest.approx(in_context_level(problem, learnt), rel=1e-13)
    predicted = in_context_saddle_spectrum(problem, learnt)
    scale = np.abs(predicted).max()
    np.testing.assert_allclose(lin.eigenvalues, predicted, atol=1e-12 * scale)
    rate = in_context_saddle_rate(problem, learnt)
    in_order = learnt == tuple(range(len(learnt)))
    if (key_dim == 1 and in_order) or not learnt:
        assert rate == 0.0 and lin.unstable_rate <= 1e-12 * max(scale, 1.0)
    else:
        assert rate > 0.01 and lin.unstable_rate == pytest.approx(rate, rel=1e-12)
    if key_dim == 2 and 0 < len(learnt) < 3:
        # a learnt head's second rows: +-c_i lam_j^2, c_i = A_i^(-1/3)
        lam = problem.eigen()[0]
        c = ((1 + 1 / N) * lam + problem.tau() / N) ** (-1 / 3)
        rest = [j for j in range(3) if j not in learnt]
        best = max(c[i] * lam[j] ** 2 for i in learnt for j in rest)
        assert rate == pytest.approx(best, rel=1e-14)


def test_merged_origin_escapes_at_the_norm_of_sigma_squared():
    S = _random_covariance(7)
    problem = ICR(S, context=N, heads=2, noise=0.3)  # (N: compiled once, as below)
    lin = gf.linearize(problem, in_context_saddle(problem, ()))
    rate = np.linalg.norm(S @ S)  # Frobenius
    np.testing.assert_allclose(lin.eigenvalues[:2], rate, rtol=1e-13)
    np.testing.assert_allclose(lin.eigenvalues[-2:], -rate, rtol=1e-13)
    np.testing.assert_allclose(
        lin.eigenvalues, in_context_saddle_spectrum(problem, ()), atol=1e-13 * rate
    )


# -- the flow -----------------------------------------------------------------------


def _plateau_losses(traj):
    """The loss at each plateau's least |grad L| (the flow's closest approach
    to the saddle)."""
    ts, g = np.asarray(traj.ts), np.asarray(traj.grad_norm)
    out = []
    for s in traj.stages:
        if s.name == "plateau":
            inside = np.flatnonzero((ts >= s.t_start) & (ts <= s.t_end))
            out.append(float(traj.loss[inside[np.argmin(g[inside])]]))
    return out


def test_separate_heads_learn_one_direction_per_drop_in_order(traj):
    assert traj.ok
    names = [s.name for s in traj.stages if s.name != "rank"]
    # (the rest at the minimum that ends the last drop is no plateau)
    assert names == ["plateau", "drop"] * 3
    # each plateau at its level L_{1..k}, at its least |grad L| (the flow
    # passes each saddle at a distance of the order of the unlearnt
    # components, where L differs from L_S at second order: measured 6e-7,
    # 1.2e-6 and 8e-8)
    np.testing.assert_allclose(_plateau_losses(traj), LEVELS[:3], rtol=1e-5)
    # the directions in decreasing order of eigenvalue: direction k is half
    # learnt inside drop k
    gamma = 1 / ((1 + 1 / N) * LAM + PROBLEM.tau() / N)
    modes, ts = traj.extras["modes"], traj.ts
    drops = [s for s in traj.stages if s.name == "drop"]
    halves = in_context_learnt_times(traj)
    for k, drop in enumerate(drops):
        assert drop.t_start < halves[k] < drop.t_end
        # against plain linear interpolation: within the save spacing there
        i = np.searchsorted(ts, halves[k])
        linear = np.interp(0.5, modes[:, k] / gamma[k], ts)
        assert abs(halves[k] - linear) < ts[i] - ts[i - 1]
    # one rank of Gamma per drop, and the minimum at the end
    ranks = [s.rank for s in traj.stages if s.name == "rank"]
    assert ranks == [1, 2, 3]
    np.testing.assert_allclose(modes[-1], gamma, rtol=1e-6)
    assert traj.loss[-1] == pytest.approx(PROBLEM.loss_floor(), rel=1e-9)


def _stops_at_the_level_of_two_heads(traj, problem):
    assert traj.ok
    names = [s.name for s in traj.stages if s.name != "rank"]
    # the rest at L_{1,2} ends the last drop: no plateau (a head at zero never
    # moves, so nothing grows there: no saddle for this flow)
    assert names == ["plateau", "drop"] * 2
    np.testing.assert_allclose(_plateau_losses(traj), LEVELS[:2], rtol=1e-5)
    assert traj.loss[-1] == pytest.approx(LEVELS[2], rel=1e-9)
    # the weakest direction is never learnt: it grows through the learnt
    # heads' small components, to at most 1e-3 of its learnt value (measured
    # 1.2e-4), and decays again
    gamma = 1 / ((1 + 1 / N) * LAM + problem.tau() / N)
    modes = traj.extras["modes"]
    assert np.abs(modes[:, 2]).max() < 1e-3 * gamma[2]
    assert abs(modes[-1, 2]) < 1e-12


def test_fewer_heads_than_directions_stop_at_the_level_of_the_heads(traj):
    """Two heads, three directions: the flow stops at L_{1,2}, the floor of
    two heads. A head at exactly zero never moves (its gradient is a product
    of its own zero entries), so three heads with one zeroed are two heads:
    the same solve as `traj`'s (the two-head problem itself is the slow test
    below)."""
    start = PROBLEM.init(jax.random.key(SEPARATE_SEED), SEPARATE["init_scale"])
    start = jax.tree.map(lambda x: x.at[2].set(0.0), start)
    flow = gf.flow(PROBLEM, params=start, t1=SEPARATE["t1"], run=gf.Run(progress=False))
    # (to rounding: the stiff solver's linear solves mix in 1e-21)
    for leaf in (flow.params.v, flow.params.K, flow.params.Q):
        assert np.abs(leaf[:, 2]).max() < 1e-15
    _stops_at_the_level_of_two_heads(flow, PROBLEM)
    two = ICR(LAM, context=N, heads=2, key_dim=1)
    assert two.loss_floor() == pytest.approx(LEVELS[2], rel=1e-14)


@pytest.mark.slow
def test_two_heads_stop_at_the_level_of_the_heads():
    problem = ICR(LAM, context=N, heads=2, key_dim=1)
    _stops_at_the_level_of_two_heads(gf.flow(problem, **SEPARATE), problem)


def test_merged_heads_make_a_single_drop():
    problem = ICR(LAM, context=N, heads=2)
    traj = gf.flow(problem, init_scale=1e-3, t1=200.0, run=gf.Run(progress=False))
    # the theory report: the origin's rate ||Sigma^2||_F in closed form, by
    # the Hessian (2e-16) and along the flow (slope of log|grad L|: 1.2e-3)
    rows = {r["quantity"]: r for r in gf.theory_report(traj, points=[])}
    assert rows["saddle {}: escape rate, Hessian"]["rel_error"] < 1e-12
    along = rows["saddle {}: escape rate along the flow"]
    assert along["predicted"] == pytest.approx(np.sqrt(np.sum(LAM**4)), rel=1e-14)
    assert along["rel_error"] < 1e-2
    assert traj.ok
    names = [s.name for s in traj.stages if s.name != "rank"]
    # the drop ends where the flow comes to rest at the global minimum (the
    # loss floor, below): a rest at a minimum is no plateau (nothing grows
    # there), so no plateau follows (`docs/stages.md`)
    assert names == ["plateau", "drop"]
    drop = [s for s in traj.stages if s.name == "drop"][0]
    # from tau/2 to within 3 % of the whole fall from the floor (measured
    # 1.8 %: the plateau is left where the loss falls by 20 % of its height
    # above the floor per e-fold of t, the scale-free escape of
    # `docs/stages.md`; 0.15 % when the speed was read against the loss at the
    # start), and to within 1 % of the floor (measured 2e-14), then a smooth
    # approach
    floor = problem.loss_floor()
    assert LEVELS[0] - drop.loss_start < 0.03 * (LEVELS[0] - floor)
    assert drop.loss_end - floor < 0.01 * (LEVELS[0] - floor)
    assert traj.loss[-1] == pytest.approx(floor, rel=1e-6)
    # every direction rises in the one drop
    gamma = 1 / ((1 + 1 / N) * LAM + problem.tau() / N)
    modes, ts = traj.extras["modes"], traj.ts
    for k in range(3):
        assert drop.t_start < np.interp(0.5, modes[:, k] / gamma[k], ts) < drop.t_end


def test_aligned_start_follows_the_cubic_escape(traj):
    """From the aligned balanced start the directions decouple: saved at the
    closed-form times at which each component reaches 10 %, 50 % and 90 % of
    its learnt value, it is there, to a time error (the gap over the slope
    of the scalar flow) of a few rtol; the off-diagonal stays zero."""
    c0 = 1e-2
    start = in_context_aligned_start(PROBLEM, c0)
    lam = PROBLEM.eigen()[0]
    gamma = 1 / ((1 + 1 / N) * lam + PROBLEM.tau() / N)
    fractions = np.array([0.1, 0.5, 0.9])
    times = np.array([in_context_learning_time(PROBLEM, c0, f) for f in fractions])
    # the default grid with these times added: as many saves as `traj`'s
    # (the same compiled solve)
    t1 = SEPARATE["t1"]
    ts = np.union1d(gf.default_save_times(t1, len(traj.ts) - times.size), times)
    flow = gf.flow(
        PROBLEM, params=start, t1=t1, saveat=gf.SaveAt(ts), run=gf.Run(progress=False)
    )
    assert flow.ok
    tol, errors = flow.settings.rtol, []
    for (i, f), k in itertools.product(enumerate(fractions), range(3)):
        p = flow.extras["modes"][np.searchsorted(ts, times[i, k]), k]
        c = np.cbrt(p)
        slope = 3 * c**4 * lam[k] ** 2 * (1 - p / gamma[k])  # dp/dt
        errors.append(abs(p - f * gamma[k]) / slope / times[i, k])
    # (measured 2.4 rtol at the default rtol 1e-5, 16 rtol at rtol 1e-8)
    assert max(errors) < 10 * tol, f"largest time error {max(errors):.3g}"
    gammas = jax.vmap(PROBLEM.gamma)(flow.params)
    U = PROBLEM.eigen()[1]
    off = np.einsum("di,tde,ej->tij", U, np.asarray(gammas), U) * (1 - np.eye(3))
    # (zero but for rounding seeds that the flow carries: measured 1.5e-9)
    assert np.abs(off).max() < 1e-6 * gamma.max()
    # the theory report recognises the aligned start: each half-learning time
    # against the closed form, to a few rtol (measured 2.4e-5 at rtol 1e-5)
    rows = [r for r in gf.theory_report(flow, points=[]) if "aligned" in r["quantity"]]
    assert len(rows) == 3 and max(r["rel_error"] for r in rows) < 10 * tol
    # about 1/(lam^2 c0): inversely proportional to lam^2 and to c0
    t = in_context_learning_time(PROBLEM, 1e-6)
    np.testing.assert_allclose(t * lam**2 * 1e-6, 1.0, rtol=1e-4)


def test_learning_time_is_the_integral_of_the_scalar_flow():
    from scipy.integrate import quad

    lam = PROBLEM.eigen()[0]
    A = (1 + 1 / N) * lam + PROBLEM.tau() / N
    for j, c0, f in [(0, 1e-2, 0.5), (2, 1e-3, 0.9), (1, 0.3, 0.2)]:
        g = A[j] ** (-1 / 3)
        exact, _ = quad(
            lambda c, s=lam[j] ** 2, g=g: 1 / (s * c * c * (1 - (c / g) ** 3)),
            c0,
            g * f ** (1 / 3),
            epsabs=0,
            epsrel=1e-13,
            limit=200,
        )
        assert in_context_learning_time(PROBLEM, c0, f)[j] == pytest.approx(
            exact, rel=1e-10
        )


def test_files_keep_the_problem(traj, tmp_path):
    back = gf.load(traj.save(tmp_path / "in_context.npz"))
    assert isinstance(back.problem, ICR)
    assert (back.problem.heads, back.problem.key_dim, back.problem.context) == (3, 1, N)
    np.testing.assert_array_equal(back.problem.covariance, PROBLEM.covariance)
    np.testing.assert_array_equal(back.extras["modes"], traj.extras["modes"])
    # a merged problem with noise (a static None, a 0-d array) through a file
    merged = ICR(_random_covariance(1), context=3, heads=2, noise=0.25)
    start = merged.init(jax.random.key(0), 0.1)
    one = gf.Trajectory(
        ts=np.zeros(1), loss=np.zeros(1), grad_norm=np.zeros(1),
        params=jax.tree.map(lambda x: np.asarray(x)[None], start), problem=merged,
        settings=gf.FlowSettings(), stats=gf.FlowStats(),
    )  # fmt: skip
    again = gf.load(one.save(tmp_path / "merged.npz")).problem
    assert again.key_dim is None and float(again.noise) == 0.25
    np.testing.assert_array_equal(again.covariance, merged.covariance)


def test_description_and_configuration():
    assert str(PROBLEM) == "InContextRegression(D=3, N=16, H=3, r=1)"
    merged = ICR([2.0, 1.0], context=4, heads=2, noise=0.1)
    assert str(merged) == "InContextRegression(D=2, N=4, H=2, merged, noise=0.1)"
    assert gf.problems.describe(merged) == str(merged)
    assert (merged.dimension, merged.context, merged.heads, merged.key_dim) == (
        2, 4, 2, None
    )  # fmt: skip
    assert float(merged.noise) == 0.1
    np.testing.assert_array_equal(merged.covariance, np.diag([2.0, 1.0]))


# -- errors ---------------------------------------------------------------------------


EYE = np.eye(2)
ERRORS = [
    (dict(covariance=np.array([[1.0, 0.5], [0.4, 1.0]])), ValueError,
     r"^covariance must be symmetric, but covariance\[0, 1\] = 0\.5 and "
     r"covariance\[1, 0\] = 0\.4$"),
    (dict(covariance=np.array([[1.0, 2.0], [2.0, 1.0]])), ValueError,
     r"^covariance must be positive definite, got smallest eigenvalue -1$"),
    (dict(covariance=np.ones((2, 3))), ValueError,
     r"^covariance must be a square matrix, got shape \(2, 3\)$"),
    (dict(covariance=np.ones((2, 2, 2))), ValueError,
     r"^covariance must be a D x D matrix or a vector of D eigenvalues, got shape "
     r"\(2, 2, 2\)$"),
    (dict(covariance=np.diag([1.0, np.inf])), ValueError,
     r"^covariance has a non-finite entry at \(1, 1\): inf$"),
    (dict(covariance=[1.0, np.nan]), ValueError,
     r"^covariance has a non-finite entry at \(1,\): nan$"),
    (dict(covariance=[1.0, 0.0]), ValueError,
     r"^covariance must have positive eigenvalues, got covariance\[1\] = 0$"),
    (dict(covariance="eye"), TypeError,
     r"^covariance must be a D x D matrix or a vector of D eigenvalues, got 'eye'$"),
    (dict(context=0), ValueError, r"^context must be >= 1, got context = 0$"),
    (dict(context=2.5), TypeError, r"^context must be an integer, got context = 2\.5$"),
    (dict(heads=0), ValueError, r"^heads must be >= 1, got heads = 0$"),
    (dict(key_dim=0), ValueError, r"^key_dim must be >= 1, got key_dim = 0$"),
    (dict(noise=-0.1), ValueError, r"^noise must be finite and >= 0, got noise = -0\.1$"),
    (dict(noise=math.inf), ValueError, r"^noise must be finite and >= 0, got noise = inf$"),
    (dict(noise=math.nan), ValueError, r"^noise must be finite and >= 0, got noise = nan$"),
    (dict(noise="0.1"), TypeError, r"^noise must be a number, got noise = '0\.1'$"),
]  # fmt: skip


@pytest.mark.parametrize("bad, error, match", ERRORS)
def test_bad_arguments_get_one_line(bad, error, match):
    args = dict(covariance=EYE, context=4, heads=2, key_dim=1, noise=0.0)
    args.update(bad)
    with pytest.raises(error, match=match) as info:
        ICR(**args)
    assert "\n" not in str(info.value)


THEORY_ERRORS = [
    (lambda: in_context_level(PROBLEM, (0, 3)), ValueError,
     r"^learnt must be distinct eigen-direction indices in \[0, 3\) \(0 the largest "
     r"eigenvalue\), got learnt = \(0, 3\)$"),
    (lambda: in_context_level(PROBLEM, (1, 1)), ValueError, r"got learnt = \(1, 1\)$"),
    (lambda: in_context_saddle(ICR(LAM, context=N, heads=2), (0,)), ValueError,
     r"^merged key-query has two critical points, the origin \(learnt=\(\)\) and the "
     r"minimum \(all 3 directions\), got learnt = \(0,\)$"),
    (lambda: in_context_saddle(ICR(LAM, context=N, heads=2, key_dim=1), (0, 1, 2)),
     ValueError, r"^learnt needs one head per direction, at most heads = 2, got 3 "
     r"directions$"),
    (lambda: in_context_learning_time(PROBLEM, 10.0), ValueError,
     r"^c0 must lie below \(fraction / A_j\)\^\(1/3\) = "),
    (lambda: in_context_learning_time(PROBLEM, 1e-2, fraction=1.0), ValueError,
     r"^fraction must lie in \(0, 1\), got fraction = 1\.0$"),
    (lambda: in_context_level(gf.problems.Committee(EYE, students=2)), TypeError,
     r"^in_context_level takes a gradflow\.problems\.InContextRegression, got "
     r"Committee$"),
]  # fmt: skip


@pytest.mark.parametrize("call, error, match", THEORY_ERRORS)
def test_theory_refuses_bad_arguments(call, error, match):
    with pytest.raises(error, match=match) as info:
        call()
    assert "\n" not in str(info.value)


def test_all_ordered_saddles_are_below_the_unordered_ones():
    """The levels order the saddles: learning a stronger direction always
    lowers the loss more (g_i increases with lambda_i)."""
    for k in range(1, 3):
        levels = {
            S: in_context_level(PROBLEM, S) for S in itertools.combinations(range(3), k)
        }
        assert min(levels, key=levels.get) == tuple(range(k))


# -- the theory report, the symmetries, the figures ------------------------------------


def test_theory_report_of_the_staircase(traj):
    """Separate key and query, r = 1, from a small random start: each plateau
    at its level L_S, the in-order saddles' escape rate 0 in closed form and
    by the Hessian, and each escape cubic: F(Gamma_jj^(1/3)) grows at
    lambda_j^2 (measured 2.9e-3, 1.7e-4, 7.9e-6)."""
    rows = gf.theory_report(traj, points=[])
    by_name = {r["quantity"]: r for r in rows}
    directions = ["{}", "{1}", "{1, 2}", "{1, 2, 3}"]
    for k, S in enumerate(directions):
        # the rest at the minimum is past the last drop: no plateau there
        name = f"plateau {k + 1} level" if k < 3 else "level at the end"
        row = by_name[f"{name}, directions {S}"]
        assert row["predicted"] == pytest.approx(LEVELS[k], rel=1e-14)
        assert row["rel_error"] < 1e-5
    for j, S in enumerate(directions[:3]):
        hessian = by_name[f"saddle {S}: escape rate, Hessian"]
        assert hessian["predicted"] == 0.0 and hessian["rel_error"] < 1e-12
        cubic = by_name[f"saddle {S}: cubic escape of direction {j + 1}"]
        assert cubic["predicted"] == LAM[j] ** 2
        assert cubic["rel_error"] < 1e-2
    end = by_name["learnt components at the end, directions {1, 2, 3}"]
    assert end["rel_error"] < 1e-6
    assert not [r for r in rows if "aligned" in r["quantity"]]  # a random start
    # the measurement itself: a window starting later gives the same rate
    rate = in_context_cubic_rate(traj, 0, low=1e-3, high=1e-2)
    assert rate["n"] >= 3 and rate["rate"] == pytest.approx(1.0, rel=1e-2)


@pytest.mark.parametrize("key_dim", [1, 2, None])
def test_gauge_rank_counts_the_rescalings(key_dim):
    """v_h K_h^T Q_h is invariant under (v, K, Q) -> (a v, K / a, Q) and
    (K, Q) -> (G K, G^-T Q): the loss is, and the orbit's dimension is
    1 + r^2 per head in general position (merged: 1), 2r per learnt head of a
    saddle (one nonzero row), 0 for a zero head."""
    problem = ICR(_random_covariance(8), context=N, heads=3, key_dim=key_dim, noise=0.3)
    params = problem.init(jax.random.key(2), 0.8)
    loss = float(problem.loss(params))
    G = np.array([[1.3, 0.4], [-0.2, 0.9]])[: key_dim or 1, : key_dim or 1]
    if key_dim is None:
        moved = eqx.tree_at(lambda p: (p.v, p.W), params, (params.v * 2, params.W / 2))
        expected = 3
    else:
        moved = eqx.tree_at(
            lambda p: (p.v, p.K, p.Q),
            params,
            (params.v * 2, jnp.einsum("ab,hbd->had", G, params.K) / 2,
             jnp.einsum("ba,hbd->had", np.linalg.inv(G), params.Q)),
        )  # fmt: skip
        expected = 3 * (1 + key_dim**2)
    assert float(problem.loss(moved)) == pytest.approx(loss, rel=1e-13)
    assert gf.theory.gauge_rank(problem, params) == expected
    if key_dim is not None:
        saddle = in_context_saddle(problem, (0, 1))
        lin = gf.linearize(problem, saddle)
        assert lin.gauge_rank == 2 * 2 * key_dim
        assert lin.num_flat > lin.gauge_rank  # the free head: real degeneracy
    else:
        assert gf.theory.gauge_rank(problem, in_context_saddle(problem, range(3))) == 1


def test_staircase_figure(traj, tmp_path):
    """The problem's figures: the generic summary and the staircase (the
    loss on the predicted levels, the eigen-components against gamma_i)."""
    assert set(plot.figures(PROBLEM, traj)) == {"summary", "staircase"}
    fig = plot.staircase_figure(traj)
    top, bottom = fig.axes[:2]
    levels = sorted(line.get_ydata()[0] for line in top.lines[1:-1])
    np.testing.assert_allclose(levels, sorted(LEVELS), rtol=1e-14)
    gamma = 1 / ((1 + 1 / N) * LAM + PROBLEM.tau() / N)
    dashed = sorted(
        line.get_ydata()[0]
        for line in bottom.lines
        if line.get_ls() == "--" and len(line.get_ydata())
    )
    np.testing.assert_allclose(dashed[-3:], sorted(gamma), rtol=1e-12)
    paths = plot.save_figure(fig, tmp_path / "staircase", formats=("png",))
    assert [p.name for p in paths] == ["staircase.png"]
    assert gf.loss_levels(PROBLEM)["L2"] == ("$L_{1..2}$", pytest.approx(LEVELS[2]))
