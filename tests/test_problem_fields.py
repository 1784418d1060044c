"""A user's problem with fields that are not arrays (a function, a string), as
Equinox users write them: `activation: Callable = jnp.tanh`, `name: str`.

Such fields are static wherever the engine traces the problem (Equinox's
`filter_jit`, `partition`/`combine`): the flow, both paths of a sweep (lanes
and the sharded batch), SGD and the theory. The facts checked are exact: a
problem that holds `jnp.tanh` in a field flows bit for bit as one that calls
`jnp.tanh` in its code; a second problem of the same shapes and functions
compiles nothing; a sweep's members equal their solo flows; the file keeps
the function (by its import path) and refuses one it cannot name.
"""

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradflow as gf


def _target(s, seed=0):
    rng = np.random.default_rng(seed)
    q1, _ = np.linalg.qr(rng.standard_normal((3, 3)))
    q2, _ = np.linalg.qr(rng.standard_normal((3, 3)))
    return jnp.asarray(q1 @ np.diag(s) @ q2.T)


def _init(M, key, init_scale):
    ku, kv = jax.random.split(key)
    return (
        init_scale * jax.random.normal(ku, (3, 2), M.dtype),
        init_scale * jax.random.normal(kv, (3, 2), M.dtype),
    )


class Net(gf.SampledProblem):
    """1/2 |f(U) V^T - M|^2 with the function `f` and a name as fields."""

    M: jax.Array
    activation: Callable = jnp.tanh
    name: str = "net"

    def loss(self, params):
        U, V = params
        return 0.5 * jnp.sum((self.activation(U) @ V.T - self.M) ** 2)

    def init(self, key, init_scale):
        return _init(self.M, key, init_scale)

    def sample(self, key, n):
        return jax.random.normal(key, (n, 3), self.M.dtype)

    def sample_loss(self, params, x):
        U, V = params
        r = self.activation(U) @ V.T - self.M
        return 0.5 * jnp.mean(jnp.sum((x @ r.T) ** 2, axis=1))


class Tanh(gf.Problem):
    """`Net` with `jnp.tanh` written in its code instead of held in a field."""

    M: jax.Array

    def loss(self, params):
        U, V = params
        return 0.5 * jnp.sum((jnp.tanh(U) @ V.T - self.M) ** 2)

    def init(self, key, init_scale):
        return _init(self.M, key, init_scale)


M1, M2 = _target([2.0, 0.5, 0.0]), _target([1.5, 0.5, 0.0], seed=1)
KW = dict(init_scale=1e-3, t1=40.0, run=gf.Run(progress=False))


@pytest.fixture(scope="module")
def traj():
    return gf.flow(Net(M1), **KW)


def _compiles():
    events = []

    def listen(event, duration, **kwargs):
        if event == "/jax/core/compile/backend_compile_duration":
            events.append(event)

    return events, listen


def test_flow_holds_the_function_as_written_in_code(traj):
    assert traj.ok and traj.problem.name == "net"
    # the result code prints as its name (not Equinox's `...RESULTS<>`)
    assert str(traj.result) == repr(traj.result) == "RESULTS.successful"
    ref = gf.flow(Tanh(M1), **KW)
    np.testing.assert_array_equal(traj.loss, ref.loss)
    for a, b in zip(jax.tree.leaves(traj.params), jax.tree.leaves(ref.params)):
        np.testing.assert_array_equal(a, b)
    # the flow learns both modes: a plateau at the origin, then the minimum
    assert traj.loss[-1] < 1e-8 * traj.loss[0]
    assert [s.name for s in traj.stages if s.name == "plateau"]


def test_same_shapes_and_functions_compile_nothing(traj):
    # the non-array fields are part of the compiled chunk's key: equal
    # functions and strings (here a new `Net` holding the same `jnp.tanh` and
    # name) find the chunk that `traj` compiled
    events, listen = _compiles()
    jax.monitoring.register_event_duration_secs_listener(listen)
    try:
        again = gf.flow(Net(M2), **KW)
    finally:
        jax.monitoring.unregister_event_duration_listener(listen)
    assert again.ok and again.loss[-1] < 1e-6 * again.loss[0]
    assert events == []


@pytest.mark.parametrize("batch_size", [1, 2])
def test_sweep_members_equal_their_solo_flows(batch_size, traj):
    # batch_size 1: the members go one by one (lanes); 2: the sharded batch
    # under vmap, whose problems are stacked arrays and shared statics
    run = gf.Run(progress=False, batch_size=batch_size)
    sw = gf.sweep([Net(M1), Net(M2)], **{**KW, "run": run})
    assert sw.ok.all()
    solo = [traj, gf.flow(Net(M2), **KW)]
    for member, ref in zip(sw, solo, strict=True):
        assert member.problem.activation is jnp.tanh
        np.testing.assert_allclose(member.loss, ref.loss, rtol=1e-8, atol=1e-300)


def test_a_sweep_of_different_functions_is_refused():
    with pytest.raises(ValueError, match=r"must share their configuration"):
        gf.sweep([Net(M1), Net(M2, activation=jnp.sin)], **KW)


def test_theory_and_sgd(traj):
    rows = gf.theory_report(traj)
    rates = [r for r in rows if "rate" in r["quantity"]]
    # the saddle at the origin escapes at s_1 = 2 (tanh'(0) = 1)
    assert rates and rates[0]["predicted"] == pytest.approx(2.0, rel=1e-6)
    origin = jax.tree.map(jnp.zeros_like, traj.at(0))
    assert gf.linearize(Net(M1), origin).unstable_rate == pytest.approx(2.0, rel=1e-12)
    run = gf.train_sgd(
        Net(M1),
        traj.at(0),
        sgd=gf.SGD(lr=0.01, batch_size=64),
        t1=5.0,
        run=gf.Run(progress=False),
    )
    assert run.ok and run.problem.activation is jnp.tanh


def test_files_keep_the_function(traj, tmp_path):
    back = gf.load(traj.save(tmp_path / "net.npz"))
    assert back.problem.activation is jnp.tanh and back.problem.name == "net"
    np.testing.assert_array_equal(back.problem.M, M1)
    np.testing.assert_array_equal(back.loss, traj.loss)
