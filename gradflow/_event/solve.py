r"""[`gradflow.solve_with_events`][]: any ODE $\dot y = f(t, y, \text{args})$
solved with the loop of [`gradflow.flow`][], the zero crossings of the
events' conditions located without stopping the solve."""

from collections.abc import Callable
from typing import Any, cast

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import PyTree

from .._core.records import EventRecord
from .._core.validate import check_save_times
from .._flow.solving import resolve_solver, result_code
from .._loop.driver import drive
from .._loop.loop import CHUNK_STEPS, LoopJob, Spec, init_state, make_controller
from .._options import as_run, as_saveat, as_solver
from .._result.codes import RESULTS, is_successful
from .watch import Watch, direction_code


class SegmentedSolution(eqx.Module):
    """What [`gradflow.solve_with_events`][] returns (host-side NumPy arrays).

    - `ts`, `saved`: the save times reached and `save_fn`'s values there;
    - `t_final`, `y_final`: the last time reached and the state there;
    - `events`: the [`gradflow.EventRecord`][]s in time order (`loss` is NaN:
      a general ODE has none);
    - `result`: a [`gradflow.RESULTS`][] code; `ok` (whether `t1` was
      reached) derives from it; step counts and the wall time.
    """

    ts: np.ndarray
    saved: Any
    t_final: float
    y_final: Any
    events: list
    result: Any
    num_steps: int
    num_accepted_steps: int
    num_rejected_steps: int
    wall_time: float

    @property
    def ok(self) -> bool:
        return is_successful(self.result)


class _Conditions(eqx.Module):
    """The events' conditions as one vector (what the in-solve watch reads)."""

    fns: tuple[Callable, ...] = eqx.field(static=True)

    def __call__(self, t, y, args):
        return jnp.stack([jnp.asarray(fn(t, y, args)).reshape(()) for fn in self.fns])


def solve_with_events(
    vector_field: Callable,
    y0: PyTree,
    args: Any,
    *,
    t0: float,
    t1: float,
    save_fn: Callable,
    saveat: Any,
    solver: Any = None,
    run: Any = None,
) -> SegmentedSolution:
    r"""Solves $\dot y = f(t, y, \text{args})$ from `t0` to `t1`, recording every
    zero crossing of the events' conditions without stopping (the loop of
    [`gradflow.flow`][], for any ODE).

    **Arguments:**

    - `vector_field`: `f(t, y, args)`; `y0`, `args`: initial state and data.
    - `t0`, `t1`: the interval.
    - `save_fn`: `save_fn(t, y, args)`, saved at the save times.
    - `saveat`: a [`gradflow.SaveAt`][] with the save times `ts` (required,
      increasing, in `[t0, t1]`), the [`gradflow.Event`][]s (each
      `cond_fn(t, y, args)` a scalar) and `callbacks` (`fn(record, t, y)`,
      called on the host for each event, in time order, between chunks of
      steps). Stages do not apply to a general ODE.
    - `solver`: a [`gradflow.Solver`][] or a solver's name (default Tsit5 with
      `rtol = 1e-8`, `atol = 1e-10`, as Diffrax's defaults for an accurate
      solve); `run`: a [`gradflow.Run`][] (`chunk_steps`).

    **Returns:** a [`gradflow.SegmentedSolution`][].

    **Example** (a harmonic oscillator; $\cos t$ crosses zero at
    $\pi/2 + k\pi$):

    ```python
    sol = gf.solve_with_events(
        lambda t, y, a: jnp.stack([y[1], -y[0]]), jnp.array([1.0, 0.0]), None,
        t0=0.0, t1=10.0, save_fn=lambda t, y, a: y[0],
        saveat=gf.SaveAt(np.linspace(0, 10, 11),
                         events=[gf.Event("x", lambda t, y, a: y[0])]))
    [e.t for e in sol.events]  # [1.5707963..., 4.712388..., 7.853981...]
    ```
    """
    quiet = run is None  # a general solve shows no progress bar unless asked
    saveat, options, run = as_saveat(saveat), as_solver(solver), as_run(run)
    if saveat.ts is None:
        raise ValueError("saveat must give the save times: gf.SaveAt(ts=...)")
    ts = check_save_times(np.asarray(saveat.ts) - t0, t1 - t0) + t0
    events = saveat.events
    chunk_steps = CHUNK_STEPS if run.chunk_steps is None else run.chunk_steps
    inner = dfx.Tsit5() if options.method is None else resolve_solver(options.method)[0]
    watched = inner
    if events:
        watched = Watch(
            cast(dfx.AbstractAdaptiveSolver, inner),
            _Conditions(tuple(e.cond_fn for e in events)),
            directions=tuple(direction_code(e.direction) for e in events),
            rearm_by=(-1,) * len(events),
            armed0=(True,) * len(events),
        )
    rtol = 1e-8 if options.rtol is None else options.rtol
    atol = 1e-10 if options.atol is None else options.atol
    spec = Spec(
        vector_field=vector_field,
        solver=watched,
        controller=make_controller(rtol, atol),
        save_fn=save_fn,
        chunk_steps=int(min(chunk_steps, options.max_steps)),
    )
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
        for fn in saveat.callbacks:
            fn(record, crossing.t, crossing.y)

    names = [e.name for e in events]
    job = LoopJob(
        spec,
        args,
        jnp.asarray(ts, dtype),
        jnp.asarray(t1, dtype),
        max_steps=options.max_steps,
        record=lambda c: EventRecord(name=names[c.index], t=c.t, loss=float("nan")),
        on_event=forward,
    )
    driven = drive(job, state, total=float(t1), progress=run.progress and not quiet)
    state = driven.state
    filled = np.asarray(state.filled)
    if driven.interrupted:
        code = RESULTS.interrupted
    elif job.out_of_steps:
        code = RESULTS.max_steps_reached
    else:
        code = result_code(state.solver_result)
    return SegmentedSolution(
        ts=ts[filled],
        saved=jax.tree.map(lambda x: np.asarray(x)[filled], state.saved),
        t_final=float(state.t),
        y_final=state.y,
        events=job.records,
        result=code,
        num_steps=int(state.num_steps),
        num_accepted_steps=int(state.num_accepted_steps),
        num_rejected_steps=int(state.num_rejected_steps),
        wall_time=driven.wall_time,
    )


__all__ = ["SegmentedSolution", "solve_with_events"]
