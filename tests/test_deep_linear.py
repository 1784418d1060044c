"""The deep linear network (`gf.problems.DeepLinear`, `docs/problems.md`) against
the literature: Saxe, McClelland and Ganguli (2014).

- The closed-form loss against Monte-Carlo estimates from `sample` and
  `sample_loss`, and its gradient against finite differences and against the
  gradient with respect to the product, $W\\Sigma_{xx} - \\Sigma_{yx}$.
- From the balanced decoupled start each mode strength follows Saxe's
  $u(t) = s e^{2st}/(e^{2st} - 1 + s/u_0)$ at every save, to a multiple of the
  solver's tolerance.
- From a small random start the modes are learnt one at a time in order of
  $s$, with plateaus at $L = \\frac12\\sum_{b>a}s_b^2$.
- The saddles (the origin and each partial solution): unstable rate $s_{k+1}$
  in closed form, from `gf.linearize` at the exact saddle, from
  `gf.critical_points` at the refined plateau, and along the flow.

All flows share one compiled solve (one problem class and shape).
"""

import equinox as eqx
import jax
import jax.flatten_util
import jax.numpy as jnp
import numpy as np
import pytest

import gradflow as gf
from gradflow.theory import (
    balanced_start,
    deep_linear_saddle,
    deep_linear_saddle_rate,
    saxe_mode_strength,
)


S = np.array([3.0, 1.0, 0.3])
HIDDEN = 4
# n_in 5, n_out 4, one hidden layer of 4: Saxe's setting (sigma_xx = I) with
# random singular bases
PROBLEM = gf.problems.DeepLinear.random(S, n_in=5, n_out=4, hidden=(HIDDEN,), seed=1)
LEVELS = [0.5 * float(np.sum(S[k:] ** 2)) for k in range(len(S) + 1)]
RANDOM = dict(init_scale=1e-4, t1=60.0, run=gf.Run(progress=False))


@eqx.filter_jit
def _monte_carlo(problem, params, key, n):
    """A sample, its loss (`sample_loss`) and the closed form, in one
    compilation."""
    batch = problem.sample(key, n)
    return batch, problem.sample_loss(params, batch), problem.loss(params)


@eqx.filter_jit
def _gradients(problem, params, h):
    """The gradient and its central differences in every coordinate (step
    `h`), in one compilation."""
    flat, unravel = jax.flatten_util.ravel_pytree(params)
    steps = h * jnp.eye(flat.size, dtype=flat.dtype)
    loss = jax.vmap(lambda x: problem.loss(unravel(x)))
    fd = (loss(flat + steps) - loss(flat - steps)) / (2 * h)
    return jax.grad(problem.loss)(params), fd


def _non_white(seed):
    """A three-layer network on correlated inputs, at a random point."""
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((4, 4))
    problem = gf.problems.DeepLinear(
        A @ A.T / 4 + np.eye(4), rng.standard_normal((3, 4)), (5, 2)
    )
    return problem, problem.init(jax.random.key(seed), 0.7)


@pytest.fixture(scope="module")
def traj():
    """The flow from a small random start."""
    return gf.flow(PROBLEM, **RANDOM)


def test_closed_form_against_monte_carlo():
    problem, params = _non_white(0)
    n = 200_000
    (x, y), mc, exact = _monte_carlo(problem, params, jax.random.key(2), n)
    x, y = np.asarray(x), np.asarray(y)
    assert x.shape == (n, 4) and y.shape == (n, 3)
    # the sample's covariance is sigma_xx (to its sampling error, ~1/sqrt(n))
    np.testing.assert_allclose(np.cov(x.T, bias=True), problem.sigma_xx, atol=0.03)
    W = np.asarray(params[2]) @ np.asarray(params[1]) @ np.asarray(params[0])
    per_example = 0.5 * np.sum((x @ W.T - y) ** 2, axis=1)
    assert float(mc) == pytest.approx(per_example.mean(), rel=1e-12)
    # 4 standard errors of the Monte-Carlo mean
    assert abs(float(mc) - float(exact)) < 4 * per_example.std() / np.sqrt(n)


def test_gradient_against_finite_differences_and_the_product_rule():
    problem, params = _non_white(3)
    grad, fd = _gradients(problem, params, 1e-5)
    # with respect to the product W = W3 W2 W1: G = W sigma_xx - sigma_yx, so
    # dL/dW1 = (W3 W2)^T G, dL/dW3 = G (W2 W1)^T
    W1, W2, W3 = (np.asarray(w) for w in params)
    G = W3 @ W2 @ W1 @ np.asarray(problem.sigma_xx) - np.asarray(problem.sigma_yx)
    np.testing.assert_allclose(grad[0], (W3 @ W2).T @ G, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(grad[2], G @ (W2 @ W1).T, rtol=1e-12, atol=1e-14)
    # central differences in every coordinate (step 1e-5: error O(h^2) times
    # the third derivative, ~1e-10 here, far below the 1e-7 asked)
    exact = jax.flatten_util.ravel_pytree(grad)[0]
    np.testing.assert_allclose(fd, exact, rtol=1e-7, atol=1e-9)


def test_loss_is_zero_at_the_least_squares_map_and_at_the_floor_otherwise():
    point, level = deep_linear_saddle(PROBLEM, 3)
    # (the fourth singular value of the target is 0 up to rounding, 1e-16)
    assert float(PROBLEM.loss(point)) < 1e-28 and level < 1e-28
    assert PROBLEM.loss_floor() == 0.0
    # a bottleneck of width 1 cannot learn the weaker modes: Eckart-Young
    narrow = gf.problems.DeepLinear.random(S, n_in=5, n_out=4, hidden=(1,), seed=1)
    assert narrow.loss_floor() == pytest.approx(LEVELS[1], rel=1e-12)
    point, level = deep_linear_saddle(narrow, 1)
    assert float(narrow.loss(point)) == pytest.approx(narrow.loss_floor(), rel=1e-12)


@pytest.mark.parametrize("rtol", [None, 1e-8])
def test_balanced_start_follows_saxe(rtol):
    """Every mode strength at every save against Saxe's u(t): the relative error
    of u is not amplified by the flow (along du/dt = 2u(s - u),
    d/dt (du/u) = -2 du <= 0 for du >= 0), so the global error is the sum of
    the local errors, which the step control keeps at about rtol per step,
    partly cancelling: within 30 rtol of s (measured: 7 rtol at the default
    1e-5, 11 rtol at 1e-8)."""
    u0 = 1e-3
    start = balanced_start(PROBLEM, np.full(3, u0))
    flow = gf.flow(
        PROBLEM,
        params=start,
        t1=30.0,
        solver=gf.Solver(rtol=rtol),
        run=gf.Run(progress=False),
    )
    assert flow.ok
    u = flow.extras["modes"][:, :3]
    exact = saxe_mode_strength(flow.ts[:, None], S, u0)
    # the modes rise from u0 to s (the check is not empty)
    np.testing.assert_allclose(u[0], u0, rtol=1e-12)
    assert (u[-1] > 0.999 * S).all()
    tol = flow.settings.rtol
    err = np.max(np.abs(u - exact) / S)
    assert err < 30 * tol, f"largest error {err:.3g} = {err / tol:.3g} rtol"
    # decoupled: the fourth mode (s = 0) stays zero up to the solver's local
    # errors, which the flow damps there (du/dt = -2u^2): below rtol s_3
    # (measured 6e-12 at the default rtol)
    assert np.abs(flow.extras["modes"][:, 3]).max() < tol * S[-1]


def test_random_start_learns_the_modes_in_order_with_plateaus_at_the_levels(traj):
    assert traj.ok
    plateaus = [s for s in traj.stages if s.name == "plateau"]
    # a plateau at each saddle; the rest at the minimum (the last level, 0,
    # reached to the solver's accuracy) is no plateau: the last drop ends there
    assert len(plateaus) == 3
    ts, g = np.asarray(traj.ts), np.asarray(traj.grad_norm)
    for plateau, level in zip(plateaus, LEVELS[:3], strict=True):
        inside = (ts >= plateau.t_start) & (ts <= plateau.t_end)
        i = np.flatnonzero(inside)[np.argmin(g[inside])]
        # the flow passes each saddle at a distance of the order of the
        # unlearnt modes' strength there: 1e-3 of the level
        assert traj.loss[i] == pytest.approx(level, rel=1e-3)
    last = [s for s in traj.stages if s.name == "drop"][-1]
    assert last.complete and last.loss_end < 1e-3 and last.t_end < traj.t_final
    # modes in order of s: each reaches half its strength after the stronger
    u = traj.extras["modes"]
    half = [np.interp(0.5, u[:, a] / S[a], ts) for a in range(3)]
    assert half[0] < plateaus[1].t_start < half[1] < plateaus[2].t_start < half[2]
    # and one rank per drop in each layer
    ranks = [(s.leaf, s.rank) for s in traj.stages if s.name == "rank"]
    for leaf in ("[0]", "[1]"):
        assert [r for name, r in ranks if name == leaf][-3:] == [1, 2, 3]


def test_saddle_rates_in_closed_form_at_the_exact_saddles():
    """-Hessian at the partial solution with k modes learnt: +s_j for each
    unlearnt j, once per free hidden direction (HIDDEN - k); nothing else
    positive."""
    for k in range(4):
        point, level = deep_linear_saddle(PROBLEM, k)
        lin = gf.linearize(PROBLEM, point)
        assert lin.loss == pytest.approx(level, rel=1e-12, abs=1e-28)
        assert lin.grad_norm < 1e-12
        positive = np.repeat(S[k:], HIDDEN - k)
        np.testing.assert_allclose(
            lin.eigenvalues[: positive.size], np.sort(positive)[::-1], rtol=1e-10
        )
        assert lin.num_unstable == positive.size
        predicted = deep_linear_saddle_rate(PROBLEM, k)
        assert predicted == pytest.approx(S[k] if k < 3 else 0.0, rel=1e-12)


def test_deeper_network_has_degenerate_saddles():
    """Three layers: the Hessian vanishes at the origin (rate 0; the escape is
    polynomial), and at a partial solution no eigenvalue is positive."""
    deep = gf.problems.DeepLinear.random(S, n_in=5, n_out=4, hidden=(4, 4), seed=1)
    origin, _ = deep_linear_saddle(deep, 0)
    lin = gf.linearize(deep, origin)
    assert np.abs(lin.eigenvalues).max() == 0.0
    assert deep_linear_saddle_rate(deep, 0) == 0.0
    point, level = deep_linear_saddle(deep, 1)
    lin = gf.linearize(deep, point)
    assert lin.grad_norm < 1e-12 and lin.loss == pytest.approx(level, rel=1e-12)
    assert lin.unstable_rate < 1e-12 * abs(lin.eigenvalues[-1])


def test_critical_points_and_rates_along_the_flow(traj):
    """The plateaus refined to their saddles (`gf.critical_points`): loss at the
    levels and unstable rate s_{k+1}; along the flow, the rise of |grad L|
    after each plateau's closest approach (`gf.theory.flank_rate`) grows at
    that rate, to 5 %."""
    points = [p for p in gf.critical_points(traj) if p.kind == "saddle"]
    plateaus = [s for s in traj.stages if s.name == "plateau"]
    ts, g, modes = traj.ts, traj.grad_norm, traj.extras["modes"]
    assert len(points) == 3
    for k, p in enumerate(points):
        assert p.converged and p.loss == pytest.approx(LEVELS[k], rel=1e-10)
        # up to O(init_scale^2) = 1e-8: the refined point keeps the start's
        # components in the null space of the target (rate 0 there)
        assert p.linearization.unstable_rate == pytest.approx(S[k], rel=1e-6)
        measured = gf.theory.flank_rate(traj, p.index)["rate"]
        assert measured == pytest.approx(S[k], rel=0.05)
        # the escaping mode's strength u_{k+1} = a b grows at 2 s_{k+1} (both
        # factors at s_{k+1}) on the plateau, from where |grad L| has risen to
        # 3x its least value (the stable modes have decayed) to the plateau's
        # end (measured within 1.4 %)
        i0 = p.index + int(np.flatnonzero(g[p.index :] >= 3 * g[p.index])[0])
        sel = (ts >= ts[i0]) & (ts <= plateaus[k].t_end)
        growth = np.polyfit(ts[sel], np.log(modes[sel, k]), 1)[0]
        assert growth / 2 == pytest.approx(S[k], rel=0.05)


def test_files_keep_the_problem(traj, tmp_path):
    back = gf.load(traj.save(tmp_path / "deep_linear.npz"))
    assert isinstance(back.problem, gf.problems.DeepLinear)
    assert back.problem.hidden == (HIDDEN,)
    np.testing.assert_array_equal(back.problem.sigma_yx, PROBLEM.sigma_yx)
    np.testing.assert_array_equal(back.extras["modes"], traj.extras["modes"])
    assert back.stages == traj.stages


@pytest.mark.slow
def test_sgd_converges_to_the_flow(traj):
    """Online SGD (fresh batches of 64) at shrinking learning rates: its loss
    crosses the levels between the plateaus at the flow's times, within 5 %
    at the smallest rate."""
    start = traj.at(0)
    levels = [0.5 * (a + b) for a, b in zip(LEVELS[:-1], LEVELS[1:])]
    errors = []
    for lr in (0.03, 0.01, 0.003):
        run = gf.train_sgd(
            PROBLEM,
            start,
            sgd=gf.SGD(lr=lr, batch_size=64),
            t1=40.0,
            run=gf.Run(progress=False),
        )
        flow = gf.flow(
            PROBLEM,
            params=start,
            t1=40.0,
            saveat=gf.SaveAt(run.ts),
            run=gf.Run(progress=False),
        )
        t_sgd = [np.interp(-x, -run.population_loss, run.ts) for x in levels]
        t_flow = [np.interp(-x, -flow.loss, flow.ts) for x in levels]
        errors.append(max(abs(a - b) / b for a, b in zip(t_sgd, t_flow)))
    assert errors[-1] < 0.05
    assert errors[-1] < errors[0]


def test_cli_run_deep_linear(traj, tmp_path, capsys):
    """`gradflow run --problem deep-linear`: the same flow as `gf.flow` on the
    same problem (its defaults are this module's problem with seed 1), its
    stage table, files and figures."""
    from gradflow.cli import main

    out = tmp_path / "run"
    argv = ["run", "--problem", "deep-linear", "--problem-seed", "1"]
    argv += ["--init-scale", "1e-4", "--t1", "60", "--out", str(out), "--no-progress"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "problem: DeepLinear(5-4-4), singular values 3 1 0.3, seed 1" in printed
    assert printed.count("\nplateau ") == 3 and printed.count("\ndrop ") == 3
    back = gf.load(out / "trajectory.npz")
    np.testing.assert_array_equal(back.loss, traj.loss)
    assert back.stages == traj.stages
    rows = (out / "stages.csv").read_text().splitlines()
    assert rows[0] == "name,cycle,t_start,t_end,loss_start,loss_end,complete,leaf,rank"
    assert len(rows) == 1 + len(traj.stages)
    for stem in ("summary", "modes"):  # PNG only: PDF on request (--pdf)
        assert (out / f"{stem}.png").stat().st_size > 10_000
        assert not (out / f"{stem}.pdf").exists()


def test_cli_run_refuses_an_unknown_problem(tmp_path, capsys):
    from gradflow.cli import main

    code = main(["run", "--problem", "nonsense", "--out", str(tmp_path)])
    assert code == 2
    err = capsys.readouterr().err
    assert (
        "--problem must be one of markov, deep-linear, committee, in-context, "
        "diagonal-linear or" in err
    )
    assert "'package.module:factory', got 'nonsense'" in err
