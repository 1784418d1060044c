r"""User events, and a general ODE solve that records events without stopping.

[`gradflow.Event`][] names a scalar condition of the state; [`solve_with_events`][]
solves any $\dot y = f(t, y, \text{args})$ with the loop of
[`gradflow.integrate`][] (`_loop.py`): the conditions' zero crossings are
located by bisection on the solver's dense output inside the compiled solve
(`_watch.py`), and the solve never stops or restarts for them.
"""

from collections.abc import Callable, Sequence
from typing import Any, cast

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import PyTree

from .._core.records import EventRecord
from .._core.validate import check_integer
from .._loop.driver import drive
from .._loop.loop import CHUNK_STEPS, LoopJob, Spec, init_state, make_controller
from .watch import Watch, direction_code


class Event(eqx.Module):
    r"""A user event: a named scalar condition of the state.

    The event fires when `cond_fn(t, params, chain)` crosses zero: upward if
    `direction=True`, downward if `False`, either way if `None`. Its time is
    located by bisection on the solver's dense output, and the solve continues.

    **Arguments:**

    - `name`: a label for the event record.
    - `cond_fn`: a JAX function `(t, params, chain) -> scalar`.
    - `direction`: `True`, `False` or `None` (see above).

    **Example:**

    ```python
    # When the loss falls through the unigram level H(pi) + 0.01.
    level = float(chain.unigram_entropy) + 0.01
    ev = gf.Event("below_unigram", lambda t, p, c: level - gf.population_loss(p, c),
                  direction=True)
    traj = gf.integrate(chain, 1e-3, events=[ev])
    ```
    """

    name: str = eqx.field(static=True)
    cond_fn: Callable = eqx.field(static=True)
    direction: bool | None = eqx.field(static=True, default=None)

    def __check_init__(self):
        if not isinstance(self.name, str):
            raise TypeError(f"Event name must be a string, got {self.name!r}")
        if not self.name:
            raise ValueError(
                f"Event name must be a non-empty string, got {self.name!r}"
            )
        if not callable(self.cond_fn):
            raise TypeError(
                f"Event {self.name!r}: cond_fn must be callable, got "
                f"{type(self.cond_fn).__name__}"
            )
        if self.direction not in (None, True, False):
            raise ValueError(
                f"Event {self.name!r}: direction must be True, False or None, got "
                f"{self.direction!r}"
            )


class SegmentedSolution(eqx.Module):
    """What [`gradflow.solve_with_events`][] returns (host-side NumPy arrays).

    - `ts`, `saved`: the save times reached and `save_fn`'s values there;
    - `t_final`, `y_final`: the last time reached and the state there;
    - `events`: the [`gradflow.EventRecord`][]s in time order (`loss` is NaN:
      a general ODE has none);
    - `result`: Diffrax's result; `ok`: whether `t1` was reached;
      `interrupted`: whether Ctrl-C stopped it; step counts.
    """

    ts: np.ndarray
    saved: Any
    t_final: float
    y_final: Any
    events: list
    result: Any
    ok: bool
    num_steps: int
    num_accepted_steps: int
    num_rejected_steps: int
    wall_time: float
    interrupted: bool = False


class _Condition(eqx.Module):
    fn: Callable = eqx.field(static=True)

    def __call__(self, t, y, args):
        return jnp.atleast_1d(self.fn(t, y, args))


def solve_with_events(
    vector_field: Callable,
    y0: PyTree,
    args: Any,
    *,
    t0: float,
    t1: float,
    ts: np.ndarray,
    save_fn: Callable,
    condition: Callable | None = None,
    directions: Sequence[bool | None] = (),
    names: Sequence[str] | None = None,
    active: Sequence[bool] | None = None,
    on_event: Callable | None = None,
    solver: dfx.AbstractSolver | None = None,
    rtol: float = 1e-8,
    atol: float = 1e-10,
    max_steps: int = 1_000_000,
    chunk_steps: int | None = None,
) -> SegmentedSolution:
    r"""Solves $\dot y = f(t, y, \text{args})$ from `t0` to `t1`, recording every
    zero crossing of the conditions without stopping.

    **Arguments:**

    - `vector_field`: `f(t, y, args)`; `y0`, `args`: initial state and data.
    - `t0`, `t1`: the interval; `ts`: increasing save times in `[t0, t1]`,
      where `save_fn(t, y, args)` is saved.
    - `condition`: `c(t, y, args)` returning `K` values (or a scalar);
      `directions`: per condition, the crossing it fires on (`True` upward,
      `False` downward, `None` either way); `names`: their labels (default
      `"event_0"`, ...); `active`: which are switched on (default all).
    - `on_event(record, t, y, args)`: called on the host for each event, in
      time order, between chunks of steps (the solve does not wait for it).
    - `solver` (default Tsit5), `rtol`, `atol`, `max_steps`: as in Diffrax.
    - `chunk_steps`: steps per compiled call (default 1000).

    **Returns:** a [`gradflow.SegmentedSolution`][].

    **Example** (a harmonic oscillator; $\cos t$ crosses zero at
    $\pi/2 + k\pi$):

    ```python
    sol = gf.solve_with_events(
        lambda t, y, a: jnp.stack([y[1], -y[0]]), jnp.array([1.0, 0.0]), None,
        t0=0.0, t1=10.0, ts=np.linspace(0, 10, 11), save_fn=lambda t, y, a: y[0],
        condition=lambda t, y, a: y[0], directions=[None])
    [e.t for e in sol.events]  # [1.5707963..., 4.712388..., 7.853981...]
    ```
    """
    n = len(directions)
    for d in directions:
        if d not in (None, True, False):
            raise ValueError(f"each direction must be True, False or None, got {d!r}")
    names = tuple(names) if names is not None else tuple(f"event_{i}" for i in range(n))
    if len(names) != n:
        raise ValueError(f"got {n} directions but {len(names)} names")
    mask = (True,) * n if active is None else tuple(bool(a) for a in active)
    if len(mask) != n:
        raise ValueError(
            f"active must have one entry per condition ({n}), got {len(mask)}"
        )
    chunk_steps = CHUNK_STEPS if chunk_steps is None else chunk_steps
    chunk_steps = check_integer("chunk_steps", chunk_steps, 1, echo_name=False)
    solver = dfx.Tsit5() if solver is None else solver
    if n:
        solver = Watch(
            cast(dfx.AbstractAdaptiveSolver, solver),
            _Condition(cast(Callable, condition)),
            directions=tuple(direction_code(d) for d in directions),
            rearm_by=(-1,) * n,
            armed0=mask,
        )
    spec = Spec(
        vector_field=vector_field,
        solver=solver,
        controller=make_controller(rtol, atol),
        save_fn=save_fn,
        chunk_steps=int(min(chunk_steps, max_steps)),
    )
    ts = np.asarray(ts, dtype=np.float64)
    dtype = jax.tree.leaves(y0)[0].dtype
    state = init_state(
        spec,
        y0=y0,
        args=args,
        t0=jnp.asarray(t0, dtype),
        t1=jnp.asarray(t1, dtype),
        ts=jnp.asarray(ts, dtype),
    )

    def forward(record, crossing):
        if on_event is not None:
            on_event(record, crossing.t, crossing.y, args)

    job = LoopJob(
        spec,
        args,
        jnp.asarray(ts, dtype),
        jnp.asarray(t1, dtype),
        max_steps=max_steps,
        record=lambda c: EventRecord(name=names[c.index], t=c.t, loss=float("nan")),
        on_event=forward,
    )
    driven = drive(job, state, total=float(t1), progress=False)
    state = driven.state
    filled = np.asarray(state.filled)
    ok = bool(state.result == dfx.RESULTS.successful) and not job.out_of_steps
    return SegmentedSolution(
        ts=ts[filled],
        saved=jax.tree.map(lambda x: np.asarray(x)[filled], state.saved),
        t_final=float(state.t),
        y_final=state.y,
        events=job.records,
        result=dfx.RESULTS.max_steps_reached if job.out_of_steps else state.result,
        ok=ok,
        num_steps=int(state.num_steps),
        num_accepted_steps=int(state.num_accepted_steps),
        num_rejected_steps=int(state.num_rejected_steps),
        wall_time=driven.wall_time,
        interrupted=driven.interrupted,
    )


__all__ = ["Event", "SegmentedSolution", "solve_with_events"]
