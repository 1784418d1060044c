"""Events located during the solve: exact times on toy ODEs with known crossings,
and the solve continuing after each event."""

import jax.numpy as jnp
import numpy as np
import pytest

import gradflow as gf


# One vector field, condition and save function for all oscillator tests, so
# they share one compiled solve. y = (cos t, -sin t). Conditions: cos t; the
# velocity minus args[0]; cos t minus args[1].
def _oscillator(t, y, args):
    return jnp.stack([y[1], -y[0]])


def _conditions(t, y, args):
    return jnp.stack([y[0], y[1] - args[0], y[0] - args[1]])


def _save(t, y, args):
    return y[0]


def _solve_oscillator(directions, levels=(0.5, -0.5), **kwargs):
    return gf.solve_with_events(
        _oscillator,
        jnp.array([1.0, 0.0]),
        jnp.asarray(levels),
        t0=0.0,
        t1=10.0,
        ts=np.linspace(0.0, 10.0, 11),
        save_fn=_save,
        condition=_conditions,
        directions=directions,
        rtol=1e-10,
        atol=1e-12,
        **kwargs,
    )


def test_exact_times_and_continuation():
    # cos t crosses zero (both ways) at pi/2 + k pi; the velocity -sin t rises
    # through 0.5 at 7 pi / 6 + 2 k pi.
    sol = _solve_oscillator(
        [None, True, None], names=["x", "v", "off"], active=[True, True, False]
    )
    assert sol.ok
    got = [(e.name, e.t) for e in sol.events]
    want = sorted(
        [("x", np.pi / 2 + k * np.pi) for k in range(3)]
        + [("v", 7 * np.pi / 6 + 2 * k * np.pi) for k in range(2)],
        key=lambda e: e[1],
    )
    assert [n for n, _ in got] == [n for n, _ in want]
    np.testing.assert_allclose(
        [t for _, t in got], [t for _, t in want], rtol=0, atol=1e-9
    )
    # Saves lie on the exact solution.
    np.testing.assert_allclose(sol.ts, np.linspace(0.0, 10.0, 11))
    np.testing.assert_allclose(sol.saved, np.cos(sol.ts), atol=1e-8)


def test_direction_down_only():
    # cos t falls through zero at pi/2 + 2 k pi only.
    sol = _solve_oscillator([False, True, None], active=[True, False, False])
    np.testing.assert_allclose(
        [e.t for e in sol.events], [np.pi / 2, np.pi / 2 + 2 * np.pi], atol=1e-9
    )


def test_on_event_sees_each_event_and_the_solve_does_not_depend_on_events():
    # on_event is called on the host, in time order, with the state at the
    # event; the steps of a solve with conditions equal those without.
    seen = []

    def on_event(record, t, y, args):
        seen.append((record.name, t, float(y[0])))

    sol = _solve_oscillator(
        [None, True, True],
        names=["x", "v", "level"],
        active=[True, False, False],
        on_event=on_event,
    )
    assert [n for n, _, _ in seen] == [e.name for e in sol.events] == ["x"] * 3
    # cos t at each crossing is zero (the state passed is the one at the event).
    np.testing.assert_allclose([y for _, _, y in seen], 0.0, atol=1e-9)
    bare = _solve_oscillator([], levels=(0.5, -0.5))
    assert bare.num_steps == sol.num_steps
    np.testing.assert_array_equal(bare.saved, sol.saved)


def test_exponential_decay_crossing():
    # y' = -y from 1 crosses 0.5 at log 2 and 0.1 at log 10.
    sol = gf.solve_with_events(
        lambda t, y, a: -y,
        jnp.array(1.0),
        None,
        t0=0.0,
        t1=5.0,
        ts=np.array([0.0, 5.0]),
        save_fn=lambda t, y, a: y,
        condition=lambda t, y, a: jnp.stack([0.5 - y, 0.1 - y]),
        directions=[True, True],
        names=["half", "tenth"],
        rtol=1e-10,
        atol=1e-12,
    )
    assert [e.name for e in sol.events] == ["half", "tenth"]
    np.testing.assert_allclose(
        [e.t for e in sol.events], [np.log(2.0), np.log(10.0)], atol=1e-9
    )
    np.testing.assert_allclose(sol.saved[-1], np.exp(-5.0), rtol=1e-8)


def test_bad_arguments():
    with pytest.raises(
        ValueError, match="direction must be True, False or None, got 'up'"
    ):
        _solve_oscillator(["up", None, None])
    with pytest.raises(ValueError, match="got 3 directions but 2 names"):
        _solve_oscillator([None, None, None], names=["a", "b"])
    with pytest.raises(ValueError, match="Event name must be a non-empty string"):
        gf.Event("", lambda t, p, c: 0.0)
    with pytest.raises(TypeError, match="cond_fn must be callable, got int"):
        gf.Event("e", 3)
    with pytest.raises(
        ValueError, match="direction must be True, False or None, got 2"
    ):
        gf.Event("e", lambda t, p, c: 0.0, direction=2)
