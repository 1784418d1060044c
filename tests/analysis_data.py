"""Tiny results for the tests of the analysis (labelled arrays, tables,
animations, the explorer): each solved once per process (`functools.cache`),
so the tests of a file, which run in one process, share them; and the
comparison of two results read from two files."""

import functools

import equinox as eqx
import jax
import numpy as np

import gradflow as gf


D, WIDTH = 4, 3
DELTAS = (0.02, 0.05, 0.1, 0.2)
SEEDS = (0, 1, 2, 3)
QUIET = gf.Run(progress=False)


def chain(delta: float = 0.05, d: int = D):
    return gf.chains.sticky(d, 0.5, 0.5, delta)


def saves(t1: float, n: int) -> gf.SaveAt:
    return gf.SaveAt(gf.default_save_times(t1, n))


@functools.cache
def markov_run():
    """The paper's model through condensation, focus, dilution and a new
    direction (d = 4, width 3, 240 saves)."""
    return gf.integrate(
        chain(), 1e-3, width=WIDTH, t1=3000.0, saveat=saves(3000.0, 240), run=QUIET
    )


@functools.cache
def sweep16():
    """A 16-member sweep: 4 chains (labelled by delta) x 4 seeds (d = 4,
    width 3, 30 saves: the model size of `markov_run`, whose compiled chunk
    its members reuse)."""
    return gf.sweep(
        [chain(x) for x in DELTAS], init_scale=1e-3, seeds=list(SEEDS),
        width=WIDTH, t1=400.0, saveat=saves(400.0, 30),
        labels={"delta": list(DELTAS)}, run=QUIET,
    )  # fmt: skip


@functools.cache
def sgd_run():
    """SGD on the model size of `markov_run` (lr 0.1 to t = 3: 31 saves, the
    run of tests/test_sgd.py's test_results_do_not_depend_on_save_grid, whose
    compiled chunk and observables it shares)."""
    return gf.train_sgd(
        chain(), init_scale=1e-3, width=WIDTH, t1=3.0, context=8,
        sgd=gf.SGD(0.1, batch_size=16), run=QUIET,
    )  # fmt: skip


@functools.cache
def deep_linear_run():
    """The deep linear network of tests/test_saves.py (5-4-4): the shapes of
    its flow there and in tests/test_deep_linear.py and tests/test_theory.py,
    so that the tier compiles one solve of that network."""
    problem = gf.problems.DeepLinear.random(
        [3.0, 1.0, 0.3], n_in=5, n_out=4, hidden=(4,), seed=0
    )
    return gf.flow(problem, 1e-3, t1=10.0, saveat=saves(10.0, 120), run=QUIET)


@functools.cache
def committee_run():
    """Saad and Solla's committee of tests/test_committee.py (K = M = 3,
    N = 6): the shapes of its flow there and in tests/test_theory.py and
    tests/test_saddles.py, so that the tier compiles one committee solve."""
    problem = gf.problems.Committee.isotropic(3, 6, 3)
    return gf.flow(problem, 1e-3, t1=200.0, saveat=saves(200.0, 120), run=QUIET)


@functools.cache
def in_context_run():
    """In-context regression, separate key and query: one drop per
    eigen-direction of the inputs' covariance."""
    problem = gf.problems.InContextRegression(
        [1.0, 0.5, 0.25], context=16, heads=3, key_dim=1
    )
    return gf.flow(problem, 1e-2, t1=3000.0, saveat=saves(3000.0, 120), run=QUIET)


def cut(traj, keep):
    """The trajectory at the saves `keep` only (a run that stopped early, or
    one with too few saves)."""
    take = lambda x: np.asarray(x)[keep]  # noqa: E731
    return eqx.tree_at(
        lambda t: (t.ts, t.loss, t.grad_norm, t.params, t.extras),
        traj,
        (take(traj.ts), take(traj.loss), take(traj.grad_norm),
         jax.tree.map(take, traj.params), {k: take(v) for k, v in traj.extras.items()}),
    )  # fmt: skip


def assert_same_result(a, b):
    """Two trajectories or SGD runs hold the same arrays and records."""
    assert type(a) is type(b)
    for name in a.own_arrays:
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    la, lb = jax.tree.leaves(a.params), jax.tree.leaves(b.params)
    assert jax.tree.structure(a.params) == jax.tree.structure(b.params)
    for x, y in zip(la, lb, strict=True):
        np.testing.assert_array_equal(x, y)
    assert sorted(a.extras) == sorted(b.extras)
    for k in a.extras:
        np.testing.assert_array_equal(a.extras[k], b.extras[k])
    assert (a.stages, a.events) == (b.stages, b.events)
    assert (a.settings, a.stats, a.result, a.detail) == (
        b.settings,
        b.stats,
        b.result,
        b.detail,
    )
    assert type(a.problem) is type(b.problem)
    if a.problem is not None:
        for x, y in zip(
            jax.tree.leaves(a.problem), jax.tree.leaves(b.problem), strict=True
        ):
            np.testing.assert_array_equal(x, y)


def assert_same_sweep(a, b):
    assert (a.members, a.labels, a.settings, a.stats) == (
        b.members,
        b.labels,
        b.settings,
        b.stats,
    )
    np.testing.assert_array_equal(a.ts, b.ts)
    np.testing.assert_array_equal(a.loss, b.loss)
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert_same_result(x, y)
