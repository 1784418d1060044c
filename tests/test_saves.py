"""What a result saves and how to read it: `traj.at` (a save index),
`traj.at_time` (a time: Hermite interpolation between saves), a result that
never reports success without saves, and the motion saves of
`gf.SaveAt(motion=...)` (dense saves where the flow moves fast;
`gradflow.SaveAt`'s docstring, `docs/stages.md`, "Save grid")."""

import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree

import gradflow as gf


sys.path.insert(0, str(Path(__file__).parent))
from user_problems import Quadratic  # noqa: E402


QUIET = gf.Run(progress=False)
C = np.array([1.0, 2.0, 3.0])


@pytest.fixture(scope="module")
def quad():
    return gf.flow(Quadratic(jnp.asarray(C)), params=np.zeros(3), t1=10.0, run=QUIET)


def test_at_time_is_the_save_at_a_save_time_and_fourth_order_between(quad):
    ts = quad.ts
    assert np.array_equal(quad.at_time(float(ts[100])), quad.at(100))
    exact = lambda t: C - C * np.exp(-t)  # noqa: E731
    for i in range(200, 700, 50):
        h, m = ts[i + 1] - ts[i], 0.5 * (ts[i] + ts[i + 1])
        # the saves carry the solver's error (4.5e-6 at t = 1.2); it is smooth
        # in t, so at the midpoint it is the mean of the two ends' errors
        solver = 0.5 * (quad.at(i) - exact(ts[i]) + quad.at(i + 1) - exact(ts[i + 1]))
        hermite = quad.at_time(m) - exact(m)
        linear = 0.5 * (quad.at(i) + quad.at(i + 1)) - exact(m)
        # between saves as accurate as the saves themselves
        assert np.abs(hermite).max() < 2 * np.abs(solver).max() + 1e-12
        # what the interpolation adds on its own: fourth order, h^4 |p''''| / 384
        # (measured 5.7e-10 against 2.1e-10 at t = 1.2, h = 0.017), where a
        # straight line adds h^2 |p''| / 8 (3.4e-5 there)
        bound = h**4 / 384 * np.abs(C).max() * np.exp(-ts[i])
        assert np.abs(hermite - solver).max() < 5 * bound + 1e-12
        assert np.abs(linear - solver).max() > 1000 * np.abs(hermite - solver).max()


def test_a_loss_that_is_nan_at_every_save_is_no_success():
    """A loss whose value (not its gradient) turns NaN away from the start:
    the solve reaches t1, but no save has a finite loss. That is
    `RESULTS.no_saves`, never a success, and the result still prints."""

    class Masked(gf.Problem):
        c: jax.Array

        def loss(self, params):
            far = jnp.sum(params**2) > 1.0
            mask = jax.lax.stop_gradient(jnp.where(far, jnp.nan, 0.0))
            return 0.5 * jnp.sum((params - self.c) ** 2) + mask

        def init(self, key, init_scale):
            return init_scale * jnp.ones_like(self.c)

    problem = Masked(jnp.asarray(C))
    late = gf.flow(
        problem, params=np.zeros(3), t1=10.0, saveat=gf.SaveAt([5.0, 10.0]), run=QUIET
    )
    assert bool(late.result == gf.RESULTS.no_saves), late.message
    assert len(late) == 0 and not late.ok
    assert "no save time was reached with a finite loss" in late.message
    assert "0 saves" in repr(late)
    some = gf.flow(problem, params=np.zeros(3), t1=10.0, run=QUIET)
    assert bool(some.result == gf.RESULTS.nonfinite), some.message
    assert "not finite at" in some.message
    assert len(some) > 0 and np.isfinite(some.loss).all()


def deep_linear():
    """A deep linear network with three drops (also the network of
    tests/test_labelled.py's dimension names: its flow to t = 60 on the
    default saves is the grid run below, one compiled solve for the two)."""
    return gf.problems.DeepLinear.random(
        [3.0, 1.0, 0.3], n_in=5, n_out=4, hidden=(4,), seed=0
    )


@pytest.fixture(scope="module")
def deep():
    return deep_linear()


def _flat(traj):
    return np.stack([np.asarray(ravel_pytree(traj.at(i))[0]) for i in range(len(traj))])


def test_motion_saves_fill_the_fast_moves_and_change_nothing_else(deep):
    grid = gf.flow(deep, 1e-3, t1=60.0, run=QUIET)
    dense = gf.flow(deep, 1e-3, t1=60.0, saveat=gf.SaveAt(motion=0.02), run=QUIET)
    # the same steps, and the grid's saves bit for bit
    assert dense.stats.num_steps == grid.stats.num_steps
    on_grid = np.isin(dense.ts, grid.ts)
    assert np.array_equal(dense.ts[on_grid], grid.ts)
    assert np.array_equal(dense.loss[on_grid], grid.loss)
    assert dense.settings.num_saves == grid.settings.num_saves == 798
    assert dense.settings.motion == 0.02 and grid.settings.motion is None
    # the extra saves lie in the drops and in the growth out of the origin
    # (measured: 324 in all, 157 within 10 % of the drops, the others on the
    # first plateau, where the parameters of size 6e-3 grow by 2 % every
    # 0.02 in t, which the scale-free speed counts as the plateau's until the
    # loss falls by 20 % of its height per e-fold of t), at most one inside
    # each plateau between the drops (10 % in t from its ends), where the size
    # barely moves (measured: 1 and 1)
    extra = dense.ts[~on_grid]
    assert extra.size > 50
    drops = [s for s in grid.stages if s.name == "drop"]
    plateaus = [s for s in grid.stages if s.name == "plateau"]
    assert plateaus[0].t_start == 0.0 and len(plateaus) == 3
    in_drop = np.zeros(extra.size, bool)
    for s in drops:
        in_drop |= (extra >= s.t_start * 0.9) & (extra <= s.t_end * 1.1)
    assert in_drop.sum() > 100
    elsewhere = ~(in_drop | (extra <= plateaus[0].t_end))
    assert np.sum(elsewhere) <= len(plateaus) - 1
    for s in plateaus[1:]:
        middle = (extra > 1.1 * s.t_start) & (extra < 0.9 * s.t_end)
        assert np.sum(middle) <= 1, s
    # each extra save is the flow there (to the solver's accuracy)
    for i in np.flatnonzero(~on_grid)[::25]:
        x = ravel_pytree(dense.at(int(i)))[0]
        y = ravel_pytree(grid.at_time(float(dense.ts[i])))[0]
        assert np.abs(x - y).max() < 1e-6

    # the largest move between neighbouring saves, relative to the size:
    # at most 8 samples a step, so below the grid's by far in the fastest step
    def largest_move(traj):
        X = _flat(traj)
        size = np.maximum(np.linalg.norm(X[:-1], axis=1), np.linalg.norm(X[0]))
        return (np.linalg.norm(np.diff(X, axis=0), axis=1) / size).max()

    assert largest_move(dense) < 0.75 * largest_move(grid)
    # the stages read off the denser saves are the grid's
    grid_plateaus = [(s.t_start, s.t_end) for s in plateaus]
    dense_plateaus = [(s.t_start, s.t_end) for s in dense.stages if s.name == "plateau"]
    assert np.allclose(dense_plateaus, grid_plateaus, rtol=2e-2)


def test_motion_saves_survive_a_checkpoint(deep, tmp_path):
    saveat = gf.SaveAt(motion=0.02)
    whole = gf.flow(deep, 1e-3, t1=60.0, saveat=saveat, run=QUIET)
    ckpt = tmp_path / "dense.ckpt.npz"
    # stopped part-way by max_steps, then resumed with more steps
    short = gf.Solver(max_steps=200)
    run = gf.Run(progress=False, checkpoint=ckpt, chunk_steps=50)
    part = gf.flow(deep, 1e-3, t1=60.0, saveat=saveat, solver=short, run=run)
    assert bool(part.result == gf.RESULTS.max_steps_reached)
    resumed = gf.flow(deep, 1e-3, t1=60.0, saveat=saveat, run=run)
    assert resumed.stats.resumed_from is not None
    assert np.array_equal(resumed.ts, whole.ts)
    assert np.array_equal(resumed.loss, whole.loss)
