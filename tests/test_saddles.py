"""Stages never invent a saddle (`docs/stages.md`, "Saddles, not slow
stretches").

A plateau is a saddle: the flow near a critical point with a direction that
grows. A convex loss has no saddle anywhere, so its flow must show no
`plateau` and no saddle event, from any start: it is one drop from the start
(cycle 0), whatever its conditioning (an ill-conditioned quadratic slows
down between its time scales, as on a plateau, and comes to rest at its
minimum). The built-in problems' saddles stay (their stage tables are checked
in their own test files and by `benchmarks/snapshot.py`); here, that the
start's verdict is taken per member of a sweep.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradflow as gf


QUIET = gf.Run(progress=False)
SADDLE_EVENTS = ("saddle_escape", "saddle_entry")


class Quadratic(gf.Problem):
    """1/2 (p - c)^T A (p - c): convex, its only critical point the minimum c."""

    A: jax.Array
    c: jax.Array

    def loss(self, params):
        r = params - self.c
        return 0.5 * r @ self.A @ r

    def init(self, key, init_scale):
        return init_scale * jax.random.normal(key, self.c.shape, self.c.dtype)


def _rotated(eigenvalues, seed=0):
    q, _ = np.linalg.qr(np.random.default_rng(seed).standard_normal((3, 3)))
    return jnp.asarray(q @ np.diag(eigenvalues) @ q.T)


C = jnp.array([1.0, 2.0, 3.0])
# (name, problem, start: init_scale or params, t1): five conditionings and
# starts; all of shape 3, so the solves share their compilation.
CONVEX = [
    # the case: 1/2 |p - c|^2 from a small start, with a short t1 (its
    # first saves at t ~ 5e-4, where the speed s = t |grad L|^2 / L is small)
    ("isotropic-small-start", Quadratic(jnp.eye(3), C), 1e-3, 50.0),
    ("isotropic-start-1", Quadratic(jnp.eye(3), C), 1.0, 50.0),
    # the snapshot's quadratic: condition number 100
    ("diagonal-1e2", Quadratic(jnp.diag(jnp.array([1.0, 0.1, 0.01])), C), 1e-3, 2000.0),
    # condition number 1e4: between its time scales the loss sits still for
    # two decades of t (a candidate plateau that is no saddle), then falls again
    (
        "diagonal-1e4",
        Quadratic(jnp.diag(jnp.array([1.0, 1e-4, 1e-4])), jnp.array([1.0, 100.0, 0.0])),
        1e-3,
        1e5,
    ),
    # a start near the minimum, rotated axes, condition number 30
    (
        "rotated-near-minimum",
        Quadratic(_rotated([3.0, 1.0, 0.1]), C),
        np.asarray(C) + np.array([1e-3, -2e-3, 5e-4]),
        200.0,
    ),
]


def _level_speed(traj):
    """The scale-free speed $-d\\log L/d\\log t$ at the saves after $t = 0$
    (`docs/stages.md`, "Scale-free plateaus"; the loss's floor is 0), by
    finite differences, with the level held at 1e5 machine epsilons of the
    start."""
    ts, loss = np.asarray(traj.ts)[1:], np.asarray(traj.loss)[1:]
    level = np.maximum(loss, 1e5 * np.finfo(loss.dtype).eps * float(traj.loss[0]))
    return ts, -np.gradient(loss, np.log(ts)) / level


@pytest.mark.parametrize(
    "problem, start, t1", [c[1:] for c in CONVEX], ids=[c[0] for c in CONVEX]
)
def test_a_convex_flow_is_one_drop_with_no_saddle(problem, start, t1):
    if isinstance(start, float):
        traj = gf.flow(problem, start, t1=t1, run=QUIET)
    else:
        traj = gf.flow(problem, params=start, t1=t1, run=QUIET)
    assert traj.ok, traj.message
    names = [s.name for s in traj.stages]
    assert names == ["drop"], traj.stages
    drop = traj.stages[0]
    assert drop.cycle == 0 and drop.t_start == 0.0
    # it ends where the flow comes to rest at the minimum: the scale-free
    # speed -dlog L/dlog t (the loss's level held at 1e5 machine epsilons of
    # its start, below which its fall is round-off) falls through
    # level_entry_speed there and stays below it to t1 (the loss at the drop's
    # end is then 1e-14 to 1e-12 of its start); or, conditioning 1e4 and the
    # start near the minimum, the loss still falls by orders of magnitude at
    # t1 and the drop runs to the last save; the flow goes on to the minimum
    # (the loss at t1 measured at most 1.03e-9 of its start, for conditioning
    # 1e4)
    ts, speed = _level_speed(traj)
    entry = gf.StageThresholds().level_entry_speed
    if drop.t_end < traj.t_final:
        i = int(np.searchsorted(ts, drop.t_end))
        assert 0 < i < ts.size - 1
        assert speed[i - 1] > 0.95 * entry and speed[i:].max() < entry
        assert traj.loss[i] < 1e-9 * traj.loss[0]
    else:
        assert not drop.complete and speed[-10:].min() > entry
    assert traj.loss[-1] < 1e-8 * traj.loss[0]
    assert not [e for e in traj.events if e.name in SADDLE_EVENTS], traj.events


def test_the_slow_stretch_of_an_ill_conditioned_quadratic_was_a_candidate():
    """The 1e4-conditioned quadratic does slow down as on a plateau (the speed
    falls below `entry_speed` and rises above `escape_speed` again): without
    the saddle test it would be a plateau. Measured on its own saves: the
    speed's minimum between the two time scales, and its later peak."""
    _, problem, scale, t1 = CONVEX[3]
    traj = gf.flow(problem, scale, t1=t1, run=QUIET)
    ts, speed = _level_speed(traj)
    th = gf.StageThresholds()
    slow = (ts > 10) & (ts < 100)
    assert speed[slow].min() < th.level_entry_speed
    assert speed[ts > 1000].max() > th.level_escape_speed


def test_saddle_events_follow_each_members_start():
    """Two members of one sweep: the product a . b from near the origin (a
    saddle: a plateau, then its escape) and from far away (moving: one drop,
    no escape event). The start's verdict is data of each member."""

    class Product(gf.Problem):
        c: jax.Array

        def loss(self, params):
            a, b = params
            return 0.5 * (a @ b - self.c) ** 2

        def init(self, key, init_scale):
            ka, kb = jax.random.split(key)
            shape = (2,)
            return (
                init_scale * jax.random.normal(ka, shape),
                init_scale * jax.random.normal(kb, shape),
            )

    near = (np.array([1e-3, 2e-3]), np.array([-1e-3, 1.5e-3]))
    far = (np.array([1.0, 0.5]), np.array([0.2, -1.0]))
    starts = jax.tree.map(lambda *x: np.stack(x), near, far)
    # One lane, on the process's default device, which runs the solo runs
    # below: the members and the solo runs share one compiled chunk (a lane on
    # another device compiles it again for its device)
    run = gf.Run(progress=False, devices=[jax.devices()[0]])
    sw = gf.sweep([Product(jnp.asarray(2.0))], params=starts, t1=20.0, run=run)
    still, moving = sw[0], sw[1]
    assert [s.name for s in still.stages][:2] == ["plateau", "drop"]
    assert [e.name for e in still.events if e.name in SADDLE_EVENTS] == [
        "saddle_escape"
    ]
    assert [s.name for s in moving.stages] == ["drop"]
    assert not [e for e in moving.events if e.name in SADDLE_EVENTS]
    for member, start in ((still, near), (moving, far)):
        solo = gf.flow(Product(jnp.asarray(2.0)), params=start, t1=20.0, run=QUIET)
        assert member.stages == solo.stages and member.events == solo.events


def test_the_theory_finds_no_plateau_at_a_moving_start():
    """`gf.critical_points` reads plateaus off the saves: at t = 0 the speed is
    0 whatever the start, so a start that is no critical point (the soft
    committee machine's origin) must not count as one. Its one saddle is the
    symmetric plateau of Saad and Solla."""
    committee = gf.problems.Committee.isotropic(3, 6, 3, norm=1.0, seed=None)
    traj = gf.flow(committee, 1e-3, t1=5000.0, run=QUIET)
    points = gf.critical_points(traj)
    assert points[0].t > 1.0, [(p.t, p.kind) for p in points]
    assert [p.kind for p in points] == ["saddle", "minimum"]
