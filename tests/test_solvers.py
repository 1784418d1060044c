"""Tests of gradflow.solvers: order of convergence (like diffrax's test_ode_order),
the W-property (order kept with an inexact Jacobian), dense output and events,
and agreement with a tight reference on the gradient flow."""

import re

import diffrax as dfx
import jax
import jax.numpy as jnp
import numpy as np
import optimistix as optx
import pytest
from batch_probe import batch_probe

import gradflow as gf

# How a flow is solved, below the public entry points (private import: these
# pieces themselves are under test): the solver options a result's settings
# record, and the one-line messages of a failed or lost solve (checked for
# every result code and on hand-made curves).
from gradflow._flow.solving import (
    check_descent,
    failure_message,
    result_code,
    solver_options,
)


DEFAULT_NUM_SAVES = len(gf.default_save_times(1.0))


_A = jnp.array([[3.0, 1.0, 0.0], [1.0, 2.0, 0.5], [0.0, 0.5, 1.0]])


def _potential(y):
    A = _A.astype(y.dtype)
    return 0.5 * y @ A @ y + 0.25 * jnp.sum(y**4) + jnp.sin(y[0] * y[1])


def _gradient_flow(t, y, args):
    del t, args
    return -jax.grad(_potential)(y)


def _nonsymmetric(t, y, args):
    # Not a gradient flow, and time-dependent: the symmetrised Jacobian is a
    # genuinely inexact W, so only the W-property keeps the order.
    del args
    return jnp.stack(
        [
            y[1] - 0.5 * y[0] ** 3,
            -2.0 * y[0] - 0.3 * y[1] + jnp.sin(t) * y[2],
            -y[2] + y[0] * y[1],
        ]
    )


_Y0 = jnp.array([1.0, -0.5, 0.8])


def _order_slope(solver, vf, dts, t1=2.0):
    term = dfx.ODETerm(vf)
    ref = dfx.diffeqsolve(
        term,
        dfx.Tsit5(),
        0.0,
        t1,
        0.01,
        _Y0,
        stepsize_controller=dfx.PIDController(rtol=1e-13, atol=1e-13),
        max_steps=100_000,
    ).ys[-1]
    errors = []
    for dt in dts:
        # dt as an array: one compilation for all step sizes.
        y1 = dfx.diffeqsolve(
            term, solver, 0.0, t1, jnp.asarray(dt), _Y0, max_steps=1000
        ).ys[-1]
        errors.append(float(jnp.linalg.norm(y1 - ref)))
    return np.polyfit(np.log(dts), np.log(errors), 1)[0]


@pytest.mark.parametrize(
    "solver",
    [
        gf.solvers.ROS34PW2(),
        gf.solvers.ROS2(),
        # W computed once at t0 and never refreshed, or only the top eigenpair:
        # inexact W-matrices that a W-method must tolerate without losing order.
        gf.solvers.ROS34PW2(refresh_every=10**9, jacobian_tol=1e30),
        gf.solvers.ROS34PW2(rank=1, refresh_every=10**9, jacobian_tol=1e30),
        gf.solvers.ROS2(rank=1, refresh_every=10**9, jacobian_tol=1e30),
        # W from a basis carried between refreshes (one power step behind)
        gf.solvers.ROS34PW2(rank=2, carry_basis=True),
    ],
    ids=[
        "ros34pw2",
        "ros2",
        "ros34pw2-frozen",
        "ros34pw2-rank1",
        "ros2-rank1",
        "ros34pw2-rank2-carried",
    ],
)
@pytest.mark.parametrize("vf", [_gradient_flow, _nonsymmetric], ids=["grad", "nonsym"])
def test_ode_order(solver, vf):
    dts = [0.04, 0.02, 0.01, 0.005]
    slope = _order_slope(solver, vf, dts)
    order = solver.order(None)
    assert slope > order - 0.25, f"observed order {slope:.3f}, expected {order}"


def test_adaptive_and_dense_output():
    # Adaptive steps with the embedded estimate; SaveAt(ts) between steps uses
    # the cubic Hermite interpolation.
    term = dfx.ODETerm(_gradient_flow)
    ts = jnp.linspace(0.0, 3.0, 41)
    kwargs = dict(saveat=dfx.SaveAt(ts=ts), max_steps=100_000)
    ref = dfx.diffeqsolve(
        term,
        dfx.Tsit5(),
        0.0,
        3.0,
        None,
        _Y0,
        stepsize_controller=dfx.PIDController(rtol=1e-12, atol=1e-12),
        **kwargs,
    )
    sol = dfx.diffeqsolve(
        term,
        gf.solvers.ROS34PW2(),
        0.0,
        3.0,
        None,
        _Y0,
        stepsize_controller=dfx.PIDController(rtol=1e-8, atol=1e-8),
        **kwargs,
    )
    assert sol.result == dfx.RESULTS.successful
    # Dense output is third order: far below the step's size, near the tolerance.
    np.testing.assert_allclose(sol.ys, ref.ys, atol=1e-6)


def test_event_root_finding():
    # Time at which |y| first falls below 0.3, located by a diffrax Event on
    # the solver's interpolation.
    term = dfx.ODETerm(_gradient_flow)

    def cond_fn(t, y, args, **kwargs):
        return jnp.linalg.norm(y) - 0.3

    event = dfx.Event(cond_fn, root_finder=optx.Newton(1e-10, 1e-10))
    kwargs = dict(event=event, max_steps=100_000)
    ref = dfx.diffeqsolve(
        term,
        dfx.Tsit5(),
        0.0,
        10.0,
        None,
        _Y0,
        stepsize_controller=dfx.PIDController(rtol=1e-12, atol=1e-12),
        **kwargs,
    )
    sol = dfx.diffeqsolve(
        term,
        gf.solvers.ROS34PW2(),
        0.0,
        10.0,
        None,
        _Y0,
        stepsize_controller=dfx.PIDController(rtol=1e-8, atol=1e-8),
        **kwargs,
    )
    t_ref, t_sol = float(ref.ts[-1]), float(sol.ts[-1])
    assert 0.1 < t_ref < 10.0
    assert abs(t_sol - t_ref) < 1e-5 * t_ref


def _crossing_time(ts, loss, level):
    k = int(np.flatnonzero(loss < level)[0])
    a, b = np.log(ts[k - 1]), np.log(ts[k])
    return float(np.exp(a + (loss[k - 1] - level) / (loss[k - 1] - loss[k]) * (b - a)))


# The tsit5 reference (rtol 1e-11) is a compilation of its own, used by no
# other test: about 15 s of CPU time per run of the default tier (measured
# in one process in issue 29 at load ~12: 14.3 s CPU for its first call,
# 0.2 s for a second). The same accuracy contract (the default path's drop
# times within 0.5 % and its final loss within 1e-6 of a tight reference) is
# checked in the default tier by tests/test_integrate.py's
# test_agrees_with_independent_implementation (against SciPy's DOP853 at rtol
# 1e-11 on the NumPy reference); this one runs in the slow tier, and the
# grad-evaluation count of the default solver is checked in the default tier
# on test_integrate.py's condensation solve (the same compilation as this
# test's default solve: test_default_solver_grad_evals_per_step).
def _default_path_sticky(**kwargs):
    chain = gf.chains.sticky(6, 0.5, 0.5, 0.05)
    # As many saves as the default (798): the default solve of this shape
    # (width 8, stages on) is compiled once for the whole test session.
    ts = np.concatenate([[0.0], np.geomspace(1.0, 200.0, DEFAULT_NUM_SAVES - 1)])
    common = dict(
        width=8, seed=0, t1=200.0, saveat=gf.SaveAt(ts), run=gf.Run(progress=False)
    )
    return chain, ts, gf.integrate(chain, 1e-3, **common, **kwargs)


@pytest.mark.slow
def test_default_path_agrees_with_tight_reference():
    # The default solver and tolerances of integrate, through the first two
    # drops of the sticky chain (log 6 -> H(pi) -> next plateau), against Tsit5
    # at rtol 1e-11: the accuracy contract of issue 4 (drop times within 0.5 %,
    # final loss within 1e-6).
    chain, ts, ref = _default_path_sticky(
        solver=gf.Solver("tsit5", rtol=1e-11, atol=1e-14)
    )
    _, _, traj = _default_path_sticky()
    assert traj.settings.solver == gf.DEFAULT_SOLVER == "ros34pw2"
    assert ref.ok and traj.ok
    h_pi = float(chain.unigram_entropy)
    assert ref.loss[-1] < h_pi - 0.1  # the run does pass both drops
    for level in (0.5 * (np.log(6.0) + h_pi), 0.5 * (h_pi + ref.loss[-1])):
        t_ref = _crossing_time(ts[1:], ref.loss[1:], level)
        t_def = _crossing_time(ts[1:], traj.loss[1:], level)
        assert abs(t_def / t_ref - 1) < 5e-3, (level, t_def, t_ref)
    assert abs(traj.loss[-1] - ref.loss[-1]) < 1e-6


def test_default_tolerances():
    rtol, atol = gf.default_tolerances(jnp.float64, 1e-3)
    assert (rtol, atol) == gf.default_tolerances(jnp.float64, 1e-3, "ros34pw2")
    assert rtol == 1e-5 and np.isclose(atol, 1e-10)
    assert gf.default_tolerances(jnp.float64, 1e-3, "tsit5")[0] == 1e-8
    assert gf.default_tolerances(jnp.float64, 1e-3, gf.solvers.ROS2())[0] == 1e-5


def test_counts():
    # Count vector-field evaluations with a host callback inside the field.
    calls = [0]

    def bump():
        calls[0] += 1

    def counted_flow(t, y, args):
        jax.debug.callback(bump)
        return _gradient_flow(t, y, args)

    # W computed once (at the first step): one extra evaluation, the primal of
    # its Jacobian-vector products, which is HVP work.
    solver = gf.solvers.ROS34PW2(refresh_every=10**9, jacobian_tol=1e30)
    sol = dfx.diffeqsolve(
        dfx.ODETerm(counted_flow),
        solver,
        0.0,
        1.0,
        None,
        _Y0,
        stepsize_controller=dfx.PIDController(rtol=1e-6, atol=1e-6),
        saveat=dfx.SaveAt(t1=True, solver_state=True),
    )
    jax.block_until_ready(sol.ys)
    stats = {k: int(v) for k, v in sol.stats.items()}
    grads = gf.count_grad_evals(solver, stats, sol.solver_state)
    assert grads == 4 * stats["num_steps"] + 2
    assert calls[0] == grads + int(sol.solver_state.num_refreshes) == grads + 1
    hvps = gf.count_hvps(solver, sol.solver_state)
    # One full Jacobian (3 JVPs) and one JVP per accepted step.
    assert hvps == 3 + stats["num_accepted_steps"]
    assert gf.count_hvps(dfx.Tsit5(), None) == 0


# (moved from tests/test_errors.py, beside the other pieces of the solving module)
@pytest.mark.parametrize(
    "diffrax_result, code, match",
    [
        (
            "max_steps_reached",
            "max_steps_reached",
            r"maximum number of steps \(5000\) reached \(mean step 5\.11e-05, so about "
            r"3\.9e\+07 steps would reach t1\)\. Raise max_steps or shorten t1; .*"
            r"init_scale is too large",
        ),
        (
            "nonfinite",
            "nonfinite",
            r"a value became non-finite\. Non-finite values .* smaller init_scale",
        ),
        (
            "dt_min_reached",
            "dt_min_reached",
            r"the step size fell below the solver's minimum\. .* smaller init_scale",
        ),
        (
            "nonlinear_divergence",
            "implicit_solve_failed",
            r"the implicit solver's inner solve failed\. Try the default solver "
            r"\('ros34pw2'\)",
        ),
        ("singular", "implicit_solve_failed", r"inner solve failed\. Try"),
        ("internal_error", "solver_failed", r"the solver failed\. Try"),
    ],
)
def test_failure_messages(diffrax_result, code, match):
    # Diffrax's result at the end of a solve, as gradflow's result code, and
    # the one line of the failed solve
    got = result_code(getattr(dfx.RESULTS, diffrax_result))
    assert bool(got == getattr(gf.RESULTS, code))
    message = failure_message(got, 0.2556, 2000.0, 5000)
    assert message.startswith("the solver stopped at t = 0.2556 of t1 = 2000: ")
    assert "\n" not in message
    assert re.search(match, message), message


def test_descent_check_names_the_first_rise():
    # (moved from tests/test_errors.py) the descent check on hand-made curves
    ts = np.array([0.0, 1.0, 2.0, 3.0, 4.0])
    assert check_descent(ts, [2.0, 1.5, 1.5 + 1e-6, 1.2, 1.1], rtol=1e-5) == ""
    message = check_descent(ts, [2.0, 1.5, 1.7, 1.2, 1.9], rtol=1e-5)
    assert re.fullmatch(
        r"the loss rose from 1\.5 at t = 1 to 1\.7 at t = 2 \(2 rises, the largest "
        r"0\.7\), which the exact gradient flow never does: .*\(now 1e-05\)",
        message,
    ), message


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(rank=0), "rank must be None or an integer >= 1, got 0"),
        (dict(rank=2.5), "rank must be None or an integer >= 1, got 2.5"),
        (dict(refresh_every=0), "refresh_every must be an integer >= 1, got 0"),
        (dict(jacobian_tol=-1.0), r"jacobian_tol must be > 0, got -1.0"),
        (dict(power_iterations=-1), "power_iterations must be an integer >= 0, got -1"),
        (
            dict(carry_basis=True, rank=None),
            "carry_basis needs an integer rank and power_iterations >= 1, got "
            "rank = None, power_iterations = 1",
        ),
        (
            dict(carry_basis=True, power_iterations=0),
            "carry_basis needs an integer rank and power_iterations >= 1, got "
            "rank = 16, power_iterations = 0",
        ),
        (dict(carry_basis=1), "carry_basis must be True or False, got 1"),
    ],
)
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        gf.solvers.ROS34PW2(**kwargs)


def test_registry():
    assert gf.SOLVERS["ros34pw2"] is gf.solvers.ROS34PW2
    assert gf.SOLVERS["ros2"] is gf.solvers.ROS2


def test_float32():
    # Under strict dtype promotion (conftest) a float32 state stays float32.
    y0 = _Y0.astype(jnp.float32)
    sol = dfx.diffeqsolve(
        dfx.ODETerm(_gradient_flow),
        gf.solvers.ROS34PW2(),
        jnp.float32(0.0),
        jnp.float32(1.0),
        None,
        y0,
        stepsize_controller=dfx.PIDController(rtol=1e-4, atol=1e-6),
    )
    assert sol.result == dfx.RESULTS.successful
    assert sol.ys.dtype == jnp.float32


@pytest.mark.slow
def test_default_path_full_sticky_scenario():
    # Issue 4's accuracy contract on its scenario (t1 = 20000, five drops):
    # drop-crossing times within 0.5 % and final loss within 1e-6 of Tsit5 at
    # rtol 1e-10. About 2 minutes (the reference is stiff for Tsit5).
    chain = gf.chains.sticky(6, 0.5, 0.5, 0.05)
    ts = np.concatenate([[0.0], np.geomspace(0.2, 20_000.0, 1999)])
    common = dict(
        width=8, seed=0, t1=20_000.0, saveat=gf.SaveAt(ts), run=gf.Run(progress=False)
    )
    ref = gf.integrate(
        chain, 1e-3, solver=gf.Solver("tsit5", rtol=1e-10, atol=1e-13), **common
    )
    traj = gf.integrate(chain, 1e-3, **common)
    assert ref.ok and traj.ok
    # Plateaus of the reference: log 6, H(pi), and the later ones it reaches.
    plateaus = [np.log(6.0), float(chain.unigram_entropy), 1.3665, 1.2975, 1.1194]
    assert abs(ref.loss[-1] - float(chain.conditional_entropy)) < 1e-6
    for a, b in zip(plateaus[:-1], plateaus[1:], strict=True):
        level = 0.5 * (a + b)
        t_ref = _crossing_time(ts[1:], ref.loss[1:], level)
        t_def = _crossing_time(ts[1:], traj.loss[1:], level)
        assert abs(t_def / t_ref - 1) < 5e-3, (level, t_def, t_ref)
    assert abs(traj.loss[-1] - ref.loss[-1]) < 1e-6


def test_cond_per_member_equals_cond_and_computes_only_chosen_members():
    """Under `vmap`, `cond_per_member` gives what `lax.cond` gives member by
    member; the expensive branch runs once per member whose predicate holds
    (counted by a host callback, which only runs when executed), where the
    `select` that `lax.cond` becomes under `vmap` runs it for every member."""
    # the batched branch of the solvers' Jacobian refresh has no public name
    # (private import: the piece itself is under test)
    from gradflow.solvers._batching import cond_per_member

    calls = []

    def expensive(x, y):
        jax.debug.callback(lambda v: calls.append(float(v)), x)
        return jnp.sin(x) * y, x + 1.0

    def cheap(x, y):
        return x * 0.0 + y, x

    x = jnp.arange(6.0)
    y = jnp.asarray(2.0)
    pred = jnp.asarray([True, False, False, True, True, False])
    out = jax.jit(jax.vmap(lambda p, x: cond_per_member(p, expensive, cheap, (x, y))))(
        pred, x
    )
    assert sorted(calls) == [0.0, 3.0, 4.0]
    want = jax.vmap(lambda p, x: jax.lax.cond(p, expensive, cheap, x, y))(pred, x)
    for a, b in zip(out, want, strict=True):
        np.testing.assert_array_equal(a, b)
    assert len(calls) == 3 + 6
    # Unbatched predicate, batched operands; and no vmap at all.
    calls.clear()
    out = jax.vmap(
        lambda x: cond_per_member(jnp.asarray(True), expensive, cheap, (x, y))
    )(x)
    np.testing.assert_array_equal(out[0], jnp.sin(x) * y)
    assert cond_per_member(jnp.asarray(False), expensive, cheap, (x[1], y))[1] == 1.0


@pytest.mark.parametrize("power_iterations", [1, 2])
def test_carried_basis_finds_the_dominant_eigenpairs_at_fewer_products(
    power_iterations,
):
    # A quadratic potential with three stiff directions among twelve: both
    # subspace iterations converge to the top three eigenpairs of J = -A; the
    # carried one takes power_iterations * rank products per refresh instead
    # of (power_iterations + 1) * rank.
    n, r = 12, 3
    rng = np.random.default_rng(0)
    Qr, _ = np.linalg.qr(rng.standard_normal((n, n)))
    lam = np.concatenate([[400.0, 150.0, 60.0], np.linspace(0.1, 1.0, n - 3)])
    A = jnp.asarray((Qr * lam) @ Qr.T)
    term = dfx.ODETerm(lambda t, y, args: -(A @ y))
    y0 = jnp.asarray(rng.standard_normal(n))
    states = {}
    for carry in (False, True):
        # a refresh at every step: the iteration runs for all the steps
        solver = gf.solvers.ROS34PW2(
            rank=r,
            refresh_every=1,
            power_iterations=power_iterations,
            carry_basis=carry,
        )
        sol = dfx.diffeqsolve(
            term,
            solver,
            0.0,
            1.0,
            1e-3,
            y0,
            stepsize_controller=dfx.ConstantStepSize(),
            saveat=dfx.SaveAt(t1=True, solver_state=True),
            max_steps=2000,
        )
        states[carry] = sol.solver_state
        steps = int(sol.stats["num_accepted_steps"])
        per_refresh = (power_iterations + (not carry)) * r
        assert int(sol.solver_state.num_refreshes) == steps
        assert int(sol.solver_state.num_jvps) == steps * (1 + per_refresh)
        assert (sol.solver_state.basis is not None) == carry
    for state in states.values():
        np.testing.assert_allclose(
            np.sort(np.asarray(state.mu)), np.sort(-lam[:3]), rtol=1e-10
        )
        V = np.asarray(state.V)
        # V spans the top three eigenvectors
        np.testing.assert_allclose(np.linalg.svd(Qr[:, :3].T @ V)[1], 1.0, rtol=1e-10)


def test_solver_options_are_recorded_in_the_settings():
    # A saved result says which solver made it; a checkpoint of one solver's
    # solve is not resumed by another (the settings differ: through
    # gf.integrate, tests/test_checkpoint.py's
    # test_checkpoint_of_another_call_is_refused; None for the default solver,
    # tests/test_integrate.py's test_default_solver_grad_evals_per_step).
    assert solver_options(gf.solvers.ROS34PW2()) == {}
    assert solver_options(dfx.Tsit5()) == {}
    tuned = gf.solvers.ROS34PW2(jacobian_tol=5.0, carry_basis=True)
    assert solver_options(tuned) == {"jacobian_tol": 5.0, "carry_basis": True}


def _linear_flow(lam, seed=0):
    """y' = -A y with A = Q diag(lam) Q^T: the gradient flow of a quadratic
    whose Hessian has the eigenvalues `lam`."""
    n = len(lam)
    rng = np.random.default_rng(seed)
    Q, _ = np.linalg.qr(rng.standard_normal((n, n)))
    A = (Q * lam) @ Q.T
    return (
        dfx.ODETerm(lambda t, y, args: -(jnp.asarray(A) @ y)),
        A,
        rng.standard_normal(n),
    )


def _solve(term, solver, y0, t1, controller):
    return dfx.diffeqsolve(
        term, solver, 0.0, t1, 0.01, jnp.asarray(y0), stepsize_controller=controller,
        saveat=dfx.SaveAt(t1=True, solver_state=True), max_steps=20_000,
    )  # fmt: skip


@pytest.mark.slow  # two compiled solves: about 20-40 s on the shared machine
def test_growth_rule_does_not_refresh_for_the_untracked_part():
    """A constant Jacobian with more large eigenvalues than the rank: the
    rule "residual" refreshes W at every step (h times the untracked
    eigenvalues exceeds jacobian_tol), the rule "growth" only every
    `refresh_every` steps (J - W never grows), and both give the same
    solution (a W-method's order does not depend on W)."""
    lam = np.concatenate(
        [[300.0, 200.0, 100.0], np.full(9, 80.0), np.linspace(0.1, 1, 8)]
    )
    term, A, y0 = _linear_flow(lam)
    out = {}
    for rule in ("residual", "growth"):
        solver = gf.solvers.ROS34PW2(rank=3, refresh=rule, max_rank=None)
        sol = _solve(term, solver, y0, 2.0, dfx.ConstantStepSize())  # h = 0.01
        out[rule] = sol
    steps = 200  # h * 80 = 0.8 > jacobian_tol: "residual" refreshes at every
    # step once its power iteration has found the untracked eigenvalue
    assert int(out["residual"].solver_state.num_refreshes) >= 0.9 * steps
    # the age limit (8 steps), and once more while the power iteration that
    # measures rho converges after the first refresh
    assert steps // 8 <= int(out["growth"].solver_state.num_refreshes) <= steps // 8 + 2
    exact = np.asarray(jax.scipy.linalg.expm(-2.0 * jnp.asarray(A)) @ y0)
    # order 3 at h = 0.01, the nine directions outside W at h * lambda = 0.8:
    # measured 3e-5 for both rules
    for sol in out.values():
        np.testing.assert_allclose(np.asarray(sol.ys[0]), exact, atol=1e-4)
    np.testing.assert_allclose(
        np.asarray(out["growth"].ys[0]), np.asarray(out["residual"].ys[0]), atol=1e-4
    )


@pytest.mark.slow  # two compiled solves
def test_adaptive_rank_grows_to_the_stiff_part():
    """Twenty eigenvalues between 50 and 100 and a rank of 4: with an
    adaptive rank (max_rank 32) the rank grows until the stiff part is
    tracked, and the solve takes fewer steps than at the fixed rank, with the
    same accuracy; the rank stays 4 without `max_rank`."""
    lam = np.concatenate([np.linspace(50.0, 100.0, 20), np.linspace(0.01, 0.1, 44)])
    term, A, y0 = _linear_flow(lam)
    ctrl = dfx.PIDController(rtol=1e-6, atol=1e-8)
    fixed = gf.solvers.ROS34PW2(rank=4, refresh="growth", max_rank=None)
    adaptive = gf.solvers.ROS34PW2(rank=4, refresh="growth", max_rank=32)
    sol_f = _solve(term, fixed, y0, 10.0, ctrl)
    sol_a = _solve(term, adaptive, y0, 10.0, ctrl)
    assert sol_f.solver_state.level is None
    assert adaptive.rank_in_use(sol_a.solver_state) == 32
    assert fixed.rank_in_use(sol_f.solver_state) == 4
    assert int(sol_a.stats["num_steps"]) < int(sol_f.stats["num_steps"]) / 2
    exact = np.asarray(jax.scipy.linalg.expm(-10.0 * jnp.asarray(A)) @ y0)
    for sol in (sol_f, sol_a):
        np.testing.assert_allclose(np.asarray(sol.ys[0]), exact, atol=1e-5)


def test_auto_keeps_the_old_rule_and_rank_below_the_threshold():
    """`refresh="auto"` and `max_rank="auto"` (the defaults) are the rule
    "residual" and a fixed rank below AUTO_MIN_SIZE (512, as documented)
    parameters (the state carries none of the new fields: the recorded results
    of the paper's models are unchanged), and "growth" with an adaptive rank
    (up to 4 * rank) from it on."""
    solver = gf.solvers.ROS34PW2()
    term = dfx.ODETerm(lambda t, y, args: -y)
    for n, new in ((511, False), (512, True)):
        state = jax.eval_shape(
            lambda y: solver.init(term, 0.0, 1.0, y, None), jnp.zeros(n)
        )
        assert (state.rho_floor is not None) == new
        assert (state.level is not None) == new
        # the eigenbasis has room for the largest rank W may use
        assert state.V.shape == (n, 64 if new else 16)


def test_refresh_products_run_in_batches_of_16_from_512_parameters():
    """A low-rank refresh's Jacobian-vector products are vmapped over at most
    16 directions at a time from 512 parameters on (`jax.lax.map` over
    batches; `JVP_BATCH`, `AUTO_MIN_SIZE` of `gradflow/solvers/base.py`),
    and over all of a rank's directions below; W is the same."""
    sizes = []
    probe = batch_probe(sizes)

    # the field's Jacobian-vector products pass the probe (as the blocked
    # closed form's pass its own batching rule, in its custom JVP)
    @jax.custom_jvp
    def field(y):
        return -2.0 * y

    @field.defjvp
    def _(primals, tangents):
        return field(primals[0]), probe(-2.0 * tangents[0])

    # the refresh's branches for the ranks 16, 32, 64 are all traced
    for n, batches in ((512, {16}), (511, {16, 32, 64})):
        solver = gf.solvers.ROS34PW2(max_rank=64)
        term = dfx.ODETerm(lambda t, y, args: field(y))
        y0 = jnp.linspace(0.5, 1.5, n)
        state = solver.init(term, 0.0, 1.0, y0, None)
        sizes.clear()
        new = solver.step(term, 0.0, 0.1, y0, None, state, False)[3]
        assert set(sizes) == batches
        np.testing.assert_allclose(new.mu[:16], -2.0, rtol=1e-12)
