r"""Events located *inside* the compiled solve, without stopping it.

[`Watch`][] wraps a Diffrax solver. After every step it evaluates a vector of
$K$ conditions $c(t, y, \text{args})$ at the step's end, compares their signs
with those at the step's start, and for each condition that crossed zero in its
direction locates the crossing time by bisection on the step's dense
interpolant. The crossing (time, which condition, the interpolated state) is
written into a fixed-size buffer carried in the solver state. Diffrax keeps the
solver state of accepted steps only, so a rejected step's crossings are
forgotten and the retried step finds them again: the records are exactly those
of the accepted trajectory. The host reads the buffer between chunks of steps
and empties it.

Nothing here stops the solver or restarts it, so the steps taken do not depend
on the events (the events of a bare and an observed solve are the same steps),
and a batch of solves under `vmap` never waits at one member's event.

The same wrapper records *motion saves* (`gradflow.SaveAt(motion=...)`):
after every accepted step it samples the step's dense interpolant at
`motion_samples` evenly spaced times and records each sample that lies
further than `motion` times the size of the parameters from the sample last
recorded, into a second buffer ([`TraceState`][]) that the host empties
between chunks. Where the flow moves fast these are many, on a plateau
away from the origin none; they are the solver's own dense output, what a save time there would
have saved.
"""

from collections.abc import Callable
from typing import ClassVar

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree
from jaxtyping import Array, Bool, Float, Int, PyTree

from ..solvers import RosenbrockWState


# Direction codes of a condition: fires on an upward crossing (-/+), on a
# downward one (+/-), or on either.
UP, DOWN, EITHER = 1, -1, 0


def direction_code(direction: bool | None) -> int:
    """`True` → up, `False` → down, `None` → either (the [`gradflow.Event`][]
    convention)."""
    return EITHER if direction is None else (UP if direction else DOWN)


class TraceState(eqx.Module):
    """The motion saves a [`Watch`][] carries: the point last recorded (flat),
    the size of the start (a floor for the threshold), and the buffer (`C`
    slots of time and flat point, `count` filled, `lost` that did not fit)."""

    last: Float[Array, " n"]
    floor: Float[Array, ""]
    count: Int[Array, ""]
    lost: Int[Array, ""]
    t: Float[Array, " C"]
    y: Float[Array, "C n"]


class WatchState(eqx.Module):
    """The wrapped solver's state plus what the watch carries between steps.

    - `inner`: the wrapped solver's state;
    - `value`: the conditions at the last accepted point, shape `(K,)`;
    - `armed`: which conditions can fire (a fired condition with a `rearm_by`
      partner waits until that partner fires: hysteresis);
    - `count`, `lost`: records in the buffer, and crossings that did not fit;
    - `t`, `index`, `y`: the buffer (`E` slots): crossing time, condition
      index, interpolated state there;
    - `trace`: the motion saves ([`TraceState`][]), or `None`.
    """

    inner: PyTree
    value: Float[Array, " K"]
    armed: Bool[Array, " K"]
    count: Int[Array, ""]
    lost: Int[Array, ""]
    t: Float[Array, " E"]
    index: Int[Array, " E"]
    y: PyTree
    trace: TraceState | None = None


class Watch(dfx.AbstractAdaptiveSolver):
    """A Diffrax solver that records the zero crossings of `condition` while it
    steps (see the module docstring).

    **Arguments:**

    - `solver`: the wrapped adaptive solver.
    - `condition`: `condition(t, y, args) -> (K,)` (a Module or a function).
    - `directions`: one code per condition (`UP`, `DOWN`, `EITHER`).
    - `rearm_by`: per condition, `-1` (always armed) or the index of the
      condition whose firing re-arms it after it fired.
    - `armed0`: which conditions are armed at the start (a tuple, or a
      boolean array: data, so that a sweep's members may differ).
    - `capacity`: buffer slots (per chunk of steps; the host empties it).
    - `root_rtol`, `root_atol`: the bisection stops when its bracket is shorter
      than `root_atol + root_rtol |t|`.
    - `uses_field`: call `condition(t, y, args, field)`, where `field` is the
      vector field at `(t, y)` when the wrapped solver has computed it there
      anyway (a Rosenbrock-W step ends with it), else `None`. A condition
      built on the gradient then costs no gradient evaluation of its own.
    - `motion`: record motion saves (see the module docstring): a sample of
      the step's dense output further than `motion` times the size of the
      parameters (the Euclidean norm of all of them, at least the start's)
      from the one last recorded; `None`: none.
    - `motion_samples`: samples per step; `motion_capacity`: slots of the
      motion buffer per chunk of steps (a chunk of at most `motion_capacity
      // motion_samples` steps never overflows it).
    """

    solver: dfx.AbstractAdaptiveSolver
    condition: Callable
    directions: tuple[int, ...] = eqx.field(static=True)
    rearm_by: tuple[int, ...] = eqx.field(static=True)
    armed0: tuple[bool, ...] | Bool[Array, " K"]
    capacity: int = eqx.field(static=True, default=64)
    motion: float | None = eqx.field(static=True, default=None)
    motion_samples: int = eqx.field(static=True, default=8)
    motion_capacity: int = eqx.field(static=True, default=256)
    root_rtol: float = eqx.field(static=True, default=1e-13)
    root_atol: float = eqx.field(static=True, default=1e-13)
    uses_field: bool = eqx.field(static=True, default=False)

    term_structure: ClassVar = dfx.AbstractTerm

    @property
    def interpolation_cls(self):  # pyright: ignore[reportIncompatibleVariableOverride]
        return self.solver.interpolation_cls

    def order(self, terms):
        return self.solver.order(terms)

    def error_order(self, terms):
        return self.solver.error_order(terms)

    def func(self, terms, t0, y0, args):
        return self.solver.func(terms, t0, y0, args)

    def _values(self, t, y, args, field=None) -> Float[Array, " K"]:
        if self.uses_field:
            value = self.condition(t, y, args, field)
        else:
            value = self.condition(t, y, args)
        return jnp.atleast_1d(value).astype(jnp.float64)

    def _field_at_end(self, y1, inner):
        """The vector field at the step's end, if the step computed it."""
        if self.uses_field and isinstance(inner, RosenbrockWState):
            return ravel_pytree(y1)[1](inner.f0)
        return None

    def init(self, terms, t0, t1, y0, args) -> WatchState:
        inner = self.solver.init(terms, t0, t1, y0, args)
        value = self._values(t0, y0, args)
        E = self.capacity
        return WatchState(
            inner=inner,
            value=value,
            armed=jnp.asarray(self.armed0, dtype=bool),
            count=jnp.zeros((), jnp.int32),
            lost=jnp.zeros((), jnp.int32),
            t=jnp.full((E,), jnp.inf, jnp.result_type(t0)),
            index=jnp.full((E,), -1, jnp.int32),
            y=jax.tree.map(lambda x: jnp.zeros((E, *x.shape), x.dtype), y0),
            trace=None if self.motion is None else self._trace0(y0),
        )

    def _trace0(self, y0) -> TraceState:
        flat = ravel_pytree(y0)[0]
        C = self.motion_capacity
        return TraceState(
            last=flat,
            floor=jnp.sqrt(jnp.sum(flat**2)),
            count=jnp.zeros((), jnp.int32),
            lost=jnp.zeros((), jnp.int32),
            t=jnp.full((C,), jnp.inf, flat.dtype),
            y=jnp.zeros((C, flat.shape[0]), flat.dtype),
        )

    def _trace(self, trace: TraceState, interp, t0, t1) -> TraceState:
        """Records the samples of one accepted step's dense output that moved
        far enough from the last record (in order, each against the one
        before)."""
        if self.motion is None:
            return trace
        m, C = self.motion_samples, self.motion_capacity
        times = t0 + (t1 - t0) * jnp.arange(1, m + 1, dtype=trace.t.dtype) / m
        points = jax.vmap(lambda t: ravel_pytree(interp.evaluate(t))[0])(times)

        motion = self.motion

        def one(carry: TraceState, sample):
            t, y = sample
            size = jnp.maximum(jnp.sqrt(jnp.sum(carry.last**2)), carry.floor)
            move = jnp.sqrt(jnp.sum((y - carry.last) ** 2)) >= motion * size
            fits = carry.count < C
            slot = jnp.where(move & fits, carry.count, C)  # C: dropped
            return TraceState(
                last=jnp.where(move, y, carry.last),
                floor=carry.floor,
                count=carry.count + (move & fits).astype(carry.count.dtype),
                lost=carry.lost + (move & ~fits).astype(carry.lost.dtype),
                t=carry.t.at[slot].set(t, mode="drop"),
                y=carry.y.at[slot].set(y, mode="drop"),
            ), None

        return jax.lax.scan(one, trace, (times, points))[0]

    def step(self, terms, t0, t1, y0, args, solver_state: WatchState, made_jump):
        y1, y_error, dense_info, inner, result = self.solver.step(
            terms, t0, t1, y0, args, solver_state.inner, made_jump
        )
        before = solver_state.value
        after = self._values(t1, y1, args, self._field_at_end(y1, inner))
        code = jnp.asarray(self.directions)
        up = (before < 0) & (after >= 0)
        down = (before > 0) & (after <= 0)
        crossed = jnp.where(code == UP, up, jnp.where(code == DOWN, down, up | down))
        fired = crossed & solver_state.armed
        interp = self.interpolation_cls(t0=t0, t1=t1, **dense_info)
        t_root = self._locate(interp, args, fired, before, t0=t0, t1=t1)
        state = self._record(solver_state, interp, fired, t_root)
        state = eqx.tree_at(lambda s: (s.inner, s.value), state, (inner, after))
        if state.trace is not None:
            trace = self._trace(state.trace, interp, t0, t1)
            state = eqx.tree_at(lambda s: s.trace, state, trace)
        return y1, y_error, dense_info, state, result

    def _locate(self, interp, args, fired, before, *, t0, t1) -> Float[Array, " K"]:
        """Bisection on the dense interpolant for each fired condition, all at
        once; zero iterations when nothing fired (a `while_loop`, so a batch
        under `vmap` iterates only while one of its members needs it)."""
        K = fired.shape[0]
        lo = jnp.full((K,), t0, dtype=jnp.result_type(t0))
        hi = jnp.full((K,), t1, dtype=jnp.result_type(t0))
        sign_lo = jnp.sign(before)

        def open_(lo, hi):
            tol = self.root_atol + self.root_rtol * jnp.abs(hi)
            return fired & (hi - lo > tol)

        def cond(carry):
            lo, hi, it = carry
            return jnp.any(open_(lo, hi)) & (it < 200)

        def body(carry):
            lo, hi, it = carry
            mid = 0.5 * (lo + hi)
            values = jax.vmap(
                lambda tm, k: self._values(tm, interp.evaluate(tm), args)[k]
            )(mid, jnp.arange(K))
            # Same side as the start: the root lies above `mid`.
            same = jnp.sign(values) == sign_lo
            go = open_(lo, hi)
            lo = jnp.where(go & same, mid, lo)
            hi = jnp.where(go & ~same, mid, hi)
            return lo, hi, it + 1

        lo, hi, _ = jax.lax.while_loop(cond, body, (lo, hi, 0))
        return jnp.where(fired, hi, jnp.inf)

    def _record(self, state: WatchState, interp, fired, t_root) -> WatchState:
        """Appends the fired conditions (in time order) to the buffer and
        updates the arming."""
        K = fired.shape[0]
        E = self.capacity
        order = jnp.argsort(t_root)  # fired first (finite), earliest first
        n_new = jnp.sum(fired, dtype=jnp.int32)
        slots = state.count + jnp.arange(K, dtype=jnp.int32)
        write = (jnp.arange(K, dtype=jnp.int32) < n_new) & (slots < E)
        slot = jnp.where(write, slots, E)  # E: out of range, dropped
        times = t_root[order]
        ys = jax.vmap(interp.evaluate)(jnp.where(write, times, interp.t0))
        t_buf = state.t.at[slot].set(times, mode="drop")
        i_buf = state.index.at[slot].set(order.astype(jnp.int32), mode="drop")
        y_buf = jax.tree.map(lambda b, v: b.at[slot].set(v, mode="drop"), state.y, ys)
        written = jnp.sum(write, dtype=jnp.int32)
        armed = state.armed
        rearm = jnp.asarray(self.rearm_by)
        # A condition with a partner disarms when it fires ...
        armed = jnp.where(fired & (rearm >= 0), False, armed)
        # ... and re-arms when its partner fires.
        partner_fired = jnp.where(rearm >= 0, fired[jnp.maximum(rearm, 0)], False)
        armed = armed | partner_fired
        del K
        return eqx.tree_at(
            lambda s: (s.armed, s.count, s.lost, s.t, s.index, s.y),
            state,
            (
                armed,
                state.count + written,
                state.lost + n_new - written,
                t_buf,
                i_buf,
                y_buf,
            ),
        )


def _with_empty_buffer(state: WatchState, full) -> WatchState:
    """`state` with its buffers emptied, each array made by `full(x, value)`
    (an array like `x` holding `value`)."""
    state = eqx.tree_at(
        lambda s: (s.count, s.t, s.index),
        state,
        (full(state.count, 0), full(state.t, np.inf), full(state.index, -1)),
    )
    if state.trace is None:
        return state
    tr = state.trace
    return eqx.tree_at(
        lambda s: (s.trace.count, s.trace.t),
        state,
        (full(tr.count, 0), full(tr.t, np.inf)),
    )


def empty_buffer(state: WatchState) -> WatchState:
    """The state with its buffers emptied (after the host has read them)."""
    return _with_empty_buffer(state, jnp.full_like)


def empty_buffer_on_host(state: WatchState, device=None) -> WatchState:
    """[`empty_buffer`][] built on the host: the same values, exactly, put on
    `device` (`None`: JAX's default device, uncommitted) without compiling
    anything (a jitted `empty_buffer` is one more program for every process
    whose solve crosses an event)."""

    def full(x, value):
        return jax.device_put(np.full(np.shape(x), value, x.dtype), device)

    return _with_empty_buffer(state, full)


__all__ = [
    "DOWN",
    "EITHER",
    "UP",
    "TraceState",
    "Watch",
    "WatchState",
    "direction_code",
    "empty_buffer_on_host",
]
