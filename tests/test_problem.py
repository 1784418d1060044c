"""A user-defined problem on the engine, written only against public names
(`examples/user_problem.py`, the example of `docs/problems.md`): matrix
factorisation $L = \\frac12\\|UV^\\top - M\\|_F^2$ through `gf.flow`,
`gf.sweep`, `gf.linearize`, `gf.train_sgd` and the files.

The facts checked are exact: from a small start the flow learns the singular
values $s_1 > s_2 > s_3$ of $M$ one at a time (Saxe et al. 2014), so it passes
saddles at the loss levels $\\frac12\\sum_{k>j} s_k^2$; at the origin the flow's
Jacobian has eigenvalues $\\pm s_k$, each once per column of $U$.
"""

import importlib.util
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradflow as gf


def _example():
    path = Path(__file__).resolve().parents[1] / "examples" / "user_problem.py"
    spec = importlib.util.spec_from_file_location("user_problem", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    # registered, so that gf.load finds the class a file names
    sys.modules["user_problem"] = module
    spec.loader.exec_module(module)
    return module


EXAMPLE = _example()
S = np.array([4.0, 1.0, 0.25])
PROBLEM = EXAMPLE.Factorisation(EXAMPLE.target(S), rank=3)
LEVELS = [0.5 * float(np.sum(S[k:] ** 2)) for k in range(len(S))]
KW = dict(init_scale=1e-4, t1=200.0, run=gf.Run(progress=False))


@pytest.fixture(scope="module")
def traj():
    return gf.flow(PROBLEM, **KW)


def test_flow_passes_the_saddles_at_the_analytic_levels(traj):
    assert traj.ok and isinstance(traj.problem, EXAMPLE.Factorisation)
    plateaus = [s for s in traj.stages if s.name == "plateau"]
    drops = [s for s in traj.stages if s.name == "drop"]
    # each plateau a saddle; the rest at the minimum that ends the last drop is
    # no plateau (no unstable direction there: docs/stages.md)
    assert len(plateaus) == 3 and len(drops) == 3
    ts, g = np.asarray(traj.ts), np.asarray(traj.grad_norm)
    for plateau, level in zip(plateaus, LEVELS, strict=True):
        # the closest approach to the saddle: least |grad L| on the plateau
        inside = (ts >= plateau.t_start) & (ts <= plateau.t_end)
        i = np.flatnonzero(inside)[np.argmin(g[inside])]
        # 1e-3 of the level: the flow passes the saddle at a distance of the
        # order of the unlearnt modes' strength there (measured: at most 2.1e-4)
        assert traj.loss[i] == pytest.approx(level, rel=1e-3)
        assert plateau.loss_end <= level * (1 + 1e-9) <= plateau.loss_start * (1 + 1e-6)
    # each drop leads from one plateau to the next
    for drop, a, b in zip(drops, plateaus, plateaus[1:], strict=False):
        assert drop.t_start == a.t_end and drop.t_end == b.t_start
    # and the last one ends where the flow comes to rest at the minimum, long
    # before t1, after most of its fall (measured: 0.0236 -> 0.0016 by t = 33.7)
    last = drops[-1]
    assert last.complete and last.t_end < traj.t_final / 2
    assert last.loss_end < 0.1 * last.loss_start
    # the modes are learnt in order of s: each factor gains one rank per drop
    ranks = [(s.leaf, s.rank) for s in traj.stages if s.name == "rank"]
    for leaf in ("[0]", "[1]"):
        assert [r for name, r in ranks if name == leaf][-3:] == [1, 2, 3]


def test_members_of_a_sweep_equal_their_solo_flows():
    sw = gf.sweep([PROBLEM], seeds=[0, 1], **KW)
    assert sw.ok.all() and len(sw) == 2
    for member, traj in zip(sw.members, sw, strict=True):
        solo = gf.flow(PROBLEM, seed=member.seed, **KW)
        np.testing.assert_allclose(traj.loss, solo.loss, rtol=1e-8, atol=0)
        for a, b in zip(jax.tree.leaves(traj.params), jax.tree.leaves(solo.params)):
            np.testing.assert_allclose(a, b, rtol=1e-8, atol=1e-300)
        assert traj.stats.num_steps == solo.stats.num_steps


def test_linearisation_at_the_origin_has_rates_s():
    origin = jax.tree.map(jnp.zeros_like, PROBLEM.init(jax.random.key(0), 1.0))
    lin = gf.linearize(PROBLEM, origin)
    # +-s_k for each k, once per column of U (rank = 3), zeros for s_4 = 0
    np.testing.assert_allclose(lin.eigenvalues[:9], np.repeat(S, 3), rtol=1e-12)
    assert lin.blocks == ("[0]", "[1]")
    np.testing.assert_allclose(lin.block_weights[0], [0.5, 0.5], rtol=1e-12)


def test_critical_points_are_the_saddles(traj):
    points = gf.critical_points(traj)
    saddles = [p for p in points if p.kind == "saddle"]
    assert len(saddles) >= 3
    for p, level, rate in zip(saddles, LEVELS, S, strict=False):
        assert p.converged and p.loss == pytest.approx(level, rel=1e-10)
        # the escape rate of saddle j is s_j (the next mode to learn), up to
        # O(init_scale^2) = 1e-8: the flow keeps the start's components in the
        # null space of M (rate 0 there), and the refined critical point
        # keeps them too (measured: 7e-8 relative at the third saddle)
        assert p.linearization.unstable_rate == pytest.approx(rate, rel=1e-6)


def test_sgd_follows_the_flow(traj):
    start = traj.at(0)
    run = gf.train_sgd(
        PROBLEM,
        start,
        sgd=gf.SGD(lr=0.002, batch_size=256),
        t1=12.0,
        run=gf.Run(progress=False),
    )
    # trained on the problem itself (not a chain or a text made into one)
    assert run.ok and isinstance(run.problem, EXAMPLE.Factorisation)
    np.testing.assert_array_equal(run.problem.M, PROBLEM.M)
    flow = gf.flow(
        PROBLEM,
        params=start,
        t1=12.0,
        saveat=gf.SaveAt(run.ts),
        run=gf.Run(progress=False),
    )
    level = 0.5 * (LEVELS[0] + LEVELS[1])
    t_sgd = np.interp(-level, -run.population_loss, run.ts)
    t_flow = np.interp(-level, -flow.loss, flow.ts)
    # lr 0.002: SGD's drop time agrees with the flow's to 2 %
    assert abs(t_sgd - t_flow) / t_flow < 0.02


def test_files_keep_the_problem(traj, tmp_path):
    path = traj.save(tmp_path / "fact.npz")
    back = gf.load(path)
    assert isinstance(back.problem, EXAMPLE.Factorisation)
    assert back.problem.rank == 3
    np.testing.assert_array_equal(back.problem.M, PROBLEM.M)
    np.testing.assert_array_equal(back.loss, traj.loss)
    for a, b in zip(jax.tree.leaves(back.params), jax.tree.leaves(traj.params)):
        np.testing.assert_array_equal(a, b)
    assert back.stages == traj.stages


@pytest.mark.parametrize(
    "params, error, match",
    [
        ((jnp.zeros((4, 3)),), TypeError, "params must have the structure"),
        (
            (jnp.zeros((4, 2)), jnp.zeros((4, 3))),
            ValueError,
            r"params\[0\] must have shape \(4, 3\)",
        ),
        (
            (jnp.full((4, 3), jnp.nan), jnp.zeros((4, 3))),
            ValueError,
            r"params\[0\] has a non-finite entry",
        ),
    ],
)
def test_bad_points_are_refused(params, error, match):
    with pytest.raises(error, match=match):
        gf.flow(PROBLEM, params=params, t1=1.0, run=gf.Run(progress=False))
