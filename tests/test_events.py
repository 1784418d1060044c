"""Events located during the solve: exact times on toy ODEs with known crossings,
and the solve continuing after each event."""

import jax.numpy as jnp
import numpy as np
import pytest

import gradflow as gf


# One vector field, save function and set of events for the oscillator tests
# that watch both directions, so they share one compiled solve (the events'
# conditions and directions are part of it). y = (cos t, -sin t). Events: cos t
# crossing zero either way ("x"); the velocity rising through 0.5 ("v").
def _oscillator(t, y, args):
    return jnp.stack([y[1], -y[0]])


def _save(t, y, args):
    return y[0]


def _x(t, y, args):
    return y[0]


def _v(t, y, args):
    return y[1] - 0.5


EVENTS = [gf.Event("x", _x), gf.Event("v", _v, direction=True)]


def _solve_oscillator(events, callbacks=()):
    return gf.solve_with_events(
        _oscillator,
        jnp.array([1.0, 0.0]),
        None,
        t0=0.0,
        t1=10.0,
        save_fn=_save,
        saveat=gf.SaveAt(
            np.linspace(0.0, 10.0, 11), events=events, callbacks=callbacks
        ),
        solver=gf.Solver(rtol=1e-10, atol=1e-12),
    )


def test_exact_times_and_continuation():
    # cos t crosses zero (both ways) at pi/2 + k pi; the velocity -sin t rises
    # through 0.5 at 7 pi / 6 + 2 k pi.
    sol = _solve_oscillator(EVENTS)
    assert sol.ok and bool(sol.result == gf.RESULTS.successful)
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
    sol = _solve_oscillator([gf.Event("x", _x, direction=False)])
    np.testing.assert_allclose(
        [e.t for e in sol.events], [np.pi / 2, np.pi / 2 + 2 * np.pi], atol=1e-9
    )


def test_callbacks_see_each_event_and_the_solve_does_not_depend_on_events():
    # The callbacks are called on the host, in time order, with the state at
    # the event; the steps of a solve with events equal those without.
    seen = []

    def callback(record, t, y):
        seen.append((record.name, t, float(y[0])))

    sol = _solve_oscillator(EVENTS, callbacks=[callback])
    assert [n for n, _, _ in seen] == [e.name for e in sol.events]
    assert [t for _, t, _ in seen] == [e.t for e in sol.events]
    assert [n for n, _, _ in seen].count("x") == 3
    # cos t at each of its crossings is zero (the state passed is the one at
    # the event).
    np.testing.assert_allclose([y for n, _, y in seen if n == "x"], 0.0, atol=1e-9)
    bare = _solve_oscillator([])
    assert bare.events == []
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
        save_fn=lambda t, y, a: y,
        saveat=gf.SaveAt(
            np.array([0.0, 5.0]),
            events=[
                gf.Event("half", lambda t, y, a: 0.5 - y, direction=True),
                gf.Event("tenth", lambda t, y, a: 0.1 - y, direction=True),
            ],
        ),
        solver=gf.Solver(rtol=1e-10, atol=1e-12),
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
        gf.Event("x", _x, direction="up")
    with pytest.raises(ValueError, match="saveat must give the save times"):
        gf.solve_with_events(
            _oscillator,
            jnp.array([1.0, 0.0]),
            None,
            t0=0.0,
            t1=10.0,
            save_fn=_save,
            saveat=gf.SaveAt(events=EVENTS),
        )
    with pytest.raises(ValueError, match="Event name must be a non-empty string"):
        gf.Event("", lambda t, p, c: 0.0)
    with pytest.raises(TypeError, match="cond_fn must be callable, got int"):
        gf.Event("e", 3)
    with pytest.raises(
        ValueError, match="direction must be True, False or None, got 2"
    ):
        gf.Event("e", lambda t, p, c: 0.0, direction=2)
