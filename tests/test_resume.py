import diffrax as dfx
import jax
import numpy as np
import pytest

import gradflow as gf

# The controller that lets a Diffrax call continue the previous one has no
# public name: this test drives Diffrax with it directly (private import: the
# private piece itself is under test).
from gradflow._loop.resume import ResumableController, next_step


# Dopri8 (a compilation of its own) in the slow tier.
@pytest.mark.parametrize(
    "solver", [dfx.Tsit5(), pytest.param(dfx.Dopri8(), marks=pytest.mark.slow)]
)
def test_chunked_solve_continues_bit_for_bit(solver):
    """Stopping every few steps and restarting with the saved solver state,
    controller state and proposed step gives the uninterrupted solve exactly."""
    problem = gf.problems.MarkovAttention(gf.chains.sticky(6, 0.5, 0.5, 0.05), width=4)
    p0 = gf.init_params(6, 4, 1e-2, 0)
    term = dfx.ODETerm(gf.GradientFlow())
    controller = ResumableController(dfx.PIDController(rtol=1e-8, atol=1e-12))
    t1 = 100.0
    full = dfx.diffeqsolve(
        term,
        solver,
        0.0,
        t1,
        None,
        p0,
        args=problem,
        stepsize_controller=controller,
        max_steps=100_000,
    )
    saveat = dfx.SaveAt(t1=True, solver_state=True, controller_state=True)
    kwargs = dict(
        args=problem,
        stepsize_controller=controller,
        max_steps=int(full.stats["num_steps"]) // 5,
        throw=False,
        saveat=saveat,
    )
    sol = dfx.diffeqsolve(term, solver, 0.0, t1, None, p0, **kwargs)
    chunks, steps = 1, int(sol.stats["num_steps"])
    while sol.result == dfx.RESULTS.max_steps_reached:
        y = jax.tree.map(lambda x: x[0], sol.ys)
        sol = dfx.diffeqsolve(
            term,
            solver,
            sol.ts[0],
            t1,
            next_step(sol.controller_state),
            y,
            controller_state=sol.controller_state,
            solver_state=sol.solver_state,
            **kwargs,
        )
        chunks += 1
        steps += int(sol.stats["num_steps"])
    assert sol.result == dfx.RESULTS.successful
    assert chunks > 3 and steps == int(full.stats["num_steps"])
    for a, b in zip(jax.tree.leaves(full.ys), jax.tree.leaves(sol.ys)):
        np.testing.assert_array_equal(a, b)
