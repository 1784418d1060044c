"""A flow that blows up in finite time ends at once (`docs/errors.md`, "The
step size collapsed").

For $L = -\\frac14\\sum_i p_i^4$ from $p = 1$, $\\dot p = p^3$ and
$p(t) = 1/\\sqrt{1 - 2t}$: the flow reaches infinity at $t = 1/2$. The
solver's steps shrink to the round-off of $t$ there; the solve must then end
with `RESULTS.step_collapsed` (not grind through millions of rejected steps
to `max_steps`), say where, keep what it computed, and do so inside a sweep
for the member that blows up only.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradflow as gf


QUIET = gf.Run(progress=False)


class Quartic(gf.Problem):
    """`sign * sum(p^4) / 4`: unbounded below for `sign = -1` (a blow-up at
    t = 1/(2 p0^2)), convex for `sign = +1`."""

    sign: jax.Array

    def loss(self, params):
        return 0.25 * self.sign * jnp.sum(params**4)

    def init(self, key, init_scale):
        return init_scale * jnp.ones(3)


START = np.ones(3)


def test_a_blow_up_ends_at_once_and_keeps_what_it_computed():
    traj = gf.flow(Quartic(jnp.asarray(-1.0)), params=START, t1=1.0, run=QUIET)
    assert bool(traj.result == gf.RESULTS.step_collapsed), traj.message
    assert not traj.ok
    # (the issue measured 654 accepted and 3,999,346 rejected steps)
    assert traj.stats.num_steps < 2000, traj.stats
    # it stopped at the blow-up, t = 1/2 to the solver's accuracy there
    assert traj.t_final == pytest.approx(0.5, rel=1e-4)
    message = traj.message
    assert "step size collapsed at t = 0.500" in message
    assert "|theta| = " in message and "L = -" in message
    assert "unbounded below" in message
    # what was computed is kept: every save before the blow-up, and the exact
    # solution there
    # to the solver's accuracy: the default rtol = 1e-5, amplified as the
    # blow-up nears (a relative error in p grows like p^2 along this flow;
    # measured 1.2e-5 at p = 1.6 and 2.6e-4 at p = 5.8, t = 0.485)
    before = traj.ts < 0.49
    exact = 1 / np.sqrt(1 - 2 * traj.ts[before])
    error = np.abs(traj.params[before][:, 0] / exact - 1)
    assert np.all(error < 3 * 1e-5 * exact**2), (error / exact**2).max()
    # and the last point reached, beyond the last save time passed
    assert traj.ts[-1] not in set(gf.default_save_times(1.0))


def test_a_sweep_member_that_blows_up_keeps_its_own_code():
    problems = [Quartic(jnp.asarray(-1.0)), Quartic(jnp.asarray(1.0))]
    sw = gf.sweep(problems, params=START[None], t1=1.0, run=QUIET)
    down, up = sw[0], sw[1]
    assert bool(down.result == gf.RESULTS.step_collapsed), down.message
    assert up.ok, up.message
    solo = gf.flow(problems[0], params=START, t1=1.0, run=QUIET)
    assert down.stats.num_steps == solo.stats.num_steps
    assert np.array_equal(down.loss, solo.loss)


def test_a_collapsed_checkpoint_returns_the_same_result(tmp_path):
    """The collapse is part of the loop state: a checkpoint written at the end
    returns the same failed trajectory, at once, when the call is repeated."""
    run = gf.Run(progress=False, checkpoint=tmp_path / "blow.ckpt.npz")
    first = gf.flow(Quartic(jnp.asarray(-1.0)), params=START, t1=1.0, run=run)
    again = gf.flow(Quartic(jnp.asarray(-1.0)), params=START, t1=1.0, run=run)
    assert bool(again.result == gf.RESULTS.step_collapsed)
    assert again.stats.resumed_from == first.t_final
    assert np.array_equal(again.loss, first.loss)
    assert again.message == first.message
