r"""Events located while integrating, with the solve continuing after each one.

A Diffrax [`diffrax.Event`][] terminates a solve. [`solve_with_events`][] turns
that into a solve that *passes through* events: it solves until the first
active condition crosses zero, locates the crossing by bisection on the
solver's dense interpolant (so the event time is exact to solver precision),
reports it to the host, and restarts from the event state with the step-size
controller's state carried over, until `t1`.

All conditions are folded into one scalar for Diffrax,
$g = \max(-1, \max_k s_k c_k)$, where $c_k$ are the conditions (each oriented
so that it fires on an upward crossing) and $s_k \in \{+1, -1, 0\}$ says
whether condition $k$ is *armed* (below zero, waiting to cross up), *disarmed*
(above zero: it must come back down before it can fire again; that down
crossing re-arms it silently) or off. $g$ crosses zero exactly when the first
term does, so one root find serves every condition, and the conditions are
evaluated once per step. Which conditions are on, and their data, live in
`args`, never in a closure: switching a condition between segments reuses the
compiled solve.
"""

import time
from collections.abc import Callable, Sequence
from typing import Any

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optimistix as optx
from jaxtyping import Array, PyTree

from ._checkpoint import deferred_interrupt, pack_tree, unpack_tree
from ._resume import ResumableController, next_step


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
    traj = gf.integrate_stages(chain, 1e-3, events=[ev])
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


class _Combined(eqx.Module):
    """$g = \\max(-1, \\max_k s_k c_k)$, with $s_k$ in `args`."""

    condition: Callable

    def __call__(self, t, y, args, **kwargs):
        del kwargs
        user_args, signs = args
        values = jnp.atleast_1d(self.condition(t, y, user_args))
        terms = jnp.where(signs != 0, signs.astype(values.dtype) * values, -1.0)
        # float64 whatever the state's dtype: Diffrax compares the value with a
        # Python 0.0 inside a `lax.cond`, which needs equal types (float32 runs).
        return jnp.maximum(jnp.max(terms), -1.0).astype(jnp.float64)


class _TimeBisection(optx.AbstractRootFinder):
    """Bisection that stops when the time interval is small.

    `optimistix.Bisection` also asks for `|g| < atol`, which a steep condition
    cannot meet at large `t` (one ulp of `t` moves `g` by more than `atol`);
    the bisection then runs out of iterations. Here only the bracket counts:
    it shrinks below `atol + rtol |t|` in about 50 halvings.
    """

    bisection: optx.Bisection

    @property
    def rtol(self):
        return self.bisection.rtol

    @property
    def atol(self):
        return self.bisection.atol

    @property
    def norm(self):
        return optx.max_norm

    def init(self, fn, y, args, options, f_struct, aux_struct, tags):
        return self.bisection.init(fn, y, args, options, f_struct, aux_struct, tags)

    def step(self, fn, y, args, options, state, tags):
        return self.bisection.step(fn, y, args, options, state, tags)

    def terminate(self, fn, y, args, options, state, tags):
        del fn, args, options, tags
        scale = self.atol + self.rtol * jnp.abs(y)
        return jnp.abs(state.lower - state.upper) < scale, optx.RESULTS.successful

    def postprocess(self, fn, y, aux, args, options, state, tags, result):
        return y, aux, {}


@eqx.filter_jit
def _values(condition, t, y, args):
    return jnp.atleast_1d(condition(t, y, args))


def _never(t, y, args):
    return -jnp.ones(1)


class _ArgsField(eqx.Module):
    """The vector field sees only the user's args."""

    vector_field: Callable

    def __call__(self, t, y, args):
        return self.vector_field(t, y, args[0])


@eqx.filter_jit
def _segment(
    vector_field,
    solver,
    controller,
    combined,
    y0,
    args,
    signs,
    t0,
    t1,
    ts,
    save_fn,
    controller_state,
    fresh,
    carried_dt,
    carried_solver_state,
    max_steps,
    meter,
    root_rtol,
    root_atol,
    t_skip,
):
    """One Diffrax call: from `t0` until `t1`, an event, or `max_steps` steps.

    `fresh` starts the solver afresh (first step size selected by the
    controller, solver state initialised: at the start and after an event);
    otherwise the call continues a previous one exactly, from its proposed
    step `carried_dt` and solver state. Both branches live in one compiled
    function, so chunks and segments share one compilation.
    """
    term = dfx.ODETerm(_ArgsField(vector_field))
    full_args = (args, signs)

    def start_afresh():
        tnext, _ = controller.init(
            term, t0, t1, y0, None, full_args, solver.func, solver.error_order(term)
        )
        tnext = jnp.minimum(tnext, t1)
        return tnext - t0, solver.init(term, t0, tnext, y0, full_args)

    dt0, solver_state = jax.lax.cond(
        fresh, start_afresh, lambda: (carried_dt, carried_solver_state)
    )
    event = dfx.Event(
        cond_fn=combined,
        root_finder=_TimeBisection(optx.Bisection(rtol=root_rtol, atol=root_atol)),  # pyright: ignore[reportCallIssue]
        direction=True,
    )

    # Save times before this segment are clipped to its start (fixed shapes:
    # no recompile) and dropped on the host; skip computing them, or every
    # segment would evaluate `save_fn` once per already-passed save time.
    def save_args_fn(t, y, a):
        shapes = jax.eval_shape(save_fn, t, y, a[0])
        return jax.lax.cond(
            t > t_skip,
            lambda: save_fn(t, y, a[0]),
            lambda: jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes),
        )

    saveat = dfx.SaveAt(
        subs=[dfx.SubSaveAt(ts=ts, fn=save_args_fn), dfx.SubSaveAt(t1=True)],
        controller_state=True,
        solver_state=True,
    )
    return dfx.diffeqsolve(
        term,
        solver,
        t0,
        t1,
        dt0,
        y0,
        args=full_args,
        saveat=saveat,
        stepsize_controller=controller,
        controller_state=controller_state,
        solver_state=solver_state,
        event=event,
        max_steps=max_steps,
        throw=False,
        progress_meter=meter,
    )


@eqx.filter_jit
def _init_controller(vector_field, solver, controller, y0, args, signs, t0, t1):
    term = dfx.ODETerm(_ArgsField(vector_field))
    _, state = controller.init(
        term, t0, t1, y0, None, (args, signs), solver.func, solver.error_order(term)
    )
    return state


def _solver_state_shape(vector_field, solver, y0, args, signs, t0, t1):
    term = dfx.ODETerm(_ArgsField(vector_field))
    return eqx.filter_eval_shape(solver.init, term, t0, t1, y0, (args, signs))


def _zeros_like_shape(shapes):
    return jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)


def _strong(tree):
    """Arrays with concrete (not weak) dtypes: the controller state that
    Diffrax returns is strongly typed, its initial state is not; mixing them
    would compile the segment twice."""
    return jax.tree.map(lambda x: jnp.asarray(np.asarray(x)), tree)


# Steps per Diffrax call. Between calls the loop checks for Ctrl-C and writes
# checkpoints; a call continues the previous one bit for bit (see `_resume`),
# so the chunk size changes nothing but how often the host looks in.
CHUNK_STEPS = 1000


class SegmentedSolution(eqx.Module):
    """What [`gradflow.solve_with_events`][] returns (host-side NumPy arrays).

    - `ts`, `saved`: the save times reached and `save_fn`'s values there;
    - `t_final`, `y_final`: the last time reached and the state there;
    - `events`: one dict per event that fired, in time order: `name`, `index`
      (position in the condition vector), `t`, plus whatever `on_event` added;
    - `result`: Diffrax's result of the last segment; `ok`: whether `t1` was
      reached; `interrupted`: whether Ctrl-C stopped it; step counts (all
      segments together) and `num_segments`;
    - `args`: the data the last segment saw (as replaced by `on_event`);
    - `resumed_from`: the time a checkpoint was resumed from (or `None`).
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
    num_segments: int
    wall_time: float
    counts: dict = eqx.field(default_factory=dict)
    interrupted: bool = False
    args: Any = None
    resumed_from: float | None = None


def _add_counts(counts: dict, new: dict) -> None:
    for key, value in new.items():
        prev = counts.get(key, 0)
        counts[key] = None if value is None or prev is None else prev + value


def solve_with_events(
    vector_field: Callable,
    y0: PyTree[Array],
    args: Any,
    *,
    t0: float,
    t1: float,
    ts: np.ndarray,
    save_fn: Callable,
    condition: Callable | None = None,
    directions: Sequence[bool | None] = (),
    names: Sequence[str] | None = None,
    active: Sequence[bool] | np.ndarray | None = None,
    on_event: Callable | None = None,
    solver: dfx.AbstractSolver | None = None,
    rtol: float = 1e-8,
    atol: float = 1e-10,
    max_steps: int = 1_000_000,
    max_events: int = 10_000,
    meter_factory: Callable | None = None,
    counters: Callable | None = None,
    root_rtol: float = 1e-13,
    root_atol: float = 1e-13,
    chunk_steps: int | None = None,
    checkpoint: Any = None,
    checkpoint_state: tuple[Callable, Callable] | None = None,
) -> SegmentedSolution:
    r"""Solves $\dot y = f(t, y, \text{args})$ from `t0` to `t1`, stopping at each
    event, reporting it, and continuing.

    Each event ends a *segment*; the next segment starts from the event state
    with the PID controller's state carried over (its first step size is
    selected afresh). Within a segment the solve runs in Diffrax calls of at
    most `chunk_steps` steps, each continuing the previous one exactly
    (solver state, controller state and proposed step carried over), so
    chunking does not change the result; between chunks the loop checks for
    Ctrl-C and writes checkpoints. Save times and the compiled solve are shared
    by all segments and chunks.

    **Arguments:**

    - `vector_field`: `f(t, y, args)`.
    - `y0`, `args`: initial state and data.
    - `t0`, `t1`: the interval.
    - `ts`: increasing save times in `[t0, t1]`; `save_fn(t, y, args)` is saved
      at each of them.
    - `condition`: `c(t, y, args)` returning a vector of `K` condition values
      (or a scalar, `K = 1`); `directions`: for each, the crossing it fires on
      (`True` upward, `False` downward, `None` either way).
    - `names`: labels of the `K` conditions (default `"event_0"`, ...).
    - `active`: which conditions are switched on at the start (default all).
    - `on_event(record, t, y, args)`: called on the host after each event with
      its record (a dict it may add to). Returns `None` (carry on), the new
      on/off mask of the conditions, or a pair `(mask, args)` to also replace
      the data the next segments see (same structure, so no recompile).
    - `solver`, `rtol`, `atol`: as in Diffrax. `max_steps`: the most steps of
      all segments together (checked between chunks).
    - `max_events`: a guard against a condition that chatters.
    - `counters`: `fn(segment_stats, final_solver_state) -> dict[str, int]`,
      called at the end of each segment; the values are summed over segments
      into `counts` (`None` values make the sum `None`: unknown).
    - `meter_factory`: called with `(t_start, t1)`, returns a Diffrax progress
      meter for a chunk.
    - `root_rtol`, `root_atol`: the bisection that locates each event time on
      the dense interpolant stops when its bracket is shorter than
      `root_atol + root_rtol * |t|`.
    - `chunk_steps`: steps per Diffrax call (default `CHUNK_STEPS`).
    - `checkpoint`: a `gradflow._checkpoint.Checkpointer` (or `None`): the
      loop's whole state is written to it after each event, after a chunk
      when it is due, and at the end; if it holds a state, the solve resumes
      from there. `checkpoint_state`: a pair `(get, set)` for the caller's own
      state, `get() -> (meta, arrays)` and `set(meta, arrays)`, stored with
      the loop's.

    A first Ctrl-C stops the loop after the current chunk (written to the
    checkpoint, if any); the solution then has `interrupted=True`.

    **Returns:** a [`gradflow.SegmentedSolution`][].

    **Example** (a harmonic oscillator; $\cos t$ crosses zero at
    $\pi/2 + k\pi$):

    ```python
    sol = gf.solve_with_events(
        lambda t, y, a: jnp.stack([y[1], -y[0]]), jnp.array([1.0, 0.0]), None,
        t0=0.0, t1=10.0, ts=np.linspace(0, 10, 11), save_fn=lambda t, y, a: y[0],
        condition=lambda t, y, a: y[0], directions=[None])
    [e["t"] for e in sol.events]  # [1.5707963..., 4.712388..., 7.853981...]
    ```
    """
    start = time.perf_counter()
    solver = dfx.Tsit5() if solver is None else solver
    # Tolerances as arrays: floats would be static and recompile for each value.
    controller = ResumableController(  # pyright: ignore[reportCallIssue]
        dfx.PIDController(rtol=jnp.asarray(rtol), atol=jnp.asarray(atol))
    )
    n = len(directions)
    for d in directions:
        if d not in (None, True, False):
            raise ValueError(f"each direction must be True, False or None, got {d!r}")
    names = tuple(names) if names is not None else tuple(f"event_{i}" for i in range(n))
    if len(names) != n:
        raise ValueError(f"got {n} directions but {len(names)} names")
    mask = np.ones(n, dtype=bool) if active is None else np.array(active, dtype=bool)
    if mask.shape != (n,):
        raise ValueError(
            f"active must have one entry per condition ({n}), got {mask.shape}"
        )
    chunk_steps = CHUNK_STEPS if chunk_steps is None else chunk_steps
    if isinstance(chunk_steps, bool) or not isinstance(chunk_steps, (int, np.integer)):
        raise TypeError(f"chunk_steps must be an integer, got {chunk_steps!r}")
    if chunk_steps < 1:
        raise ValueError(f"chunk_steps must be >= 1, got {chunk_steps}")
    directions = tuple(directions)
    if n == 0:  # nothing to watch: one condition that is always off
        condition, directions = _never, (True,)
    combined = _Combined(condition)  # pyright: ignore[reportArgumentType]
    ts = np.asarray(ts, dtype=np.float64)
    dtype = jax.tree.leaves(y0)[0].dtype
    t1 = float(t1)
    # static: one compiled solve for every chunk (a smaller last chunk would
    # compile again)
    steps_per_call = int(min(chunk_steps, max_steps))

    def current_values(t, y, a):
        return np.asarray(_values(condition, jnp.asarray(t, dtype), y, a))

    def initial_state(values):
        """Sign and armed flag of each condition from its current value."""
        sign = np.empty(len(directions))
        armed = np.empty(len(directions), dtype=bool)
        for k, (d, c) in enumerate(zip(directions, values, strict=True)):
            if d is None:
                sign[k], armed[k] = (1.0 if c <= 0 else -1.0), True
            elif d:
                sign[k], armed[k] = (1.0 if c <= 0 else -1.0), c <= 0
            else:
                sign[k], armed[k] = (-1.0 if c >= 0 else 1.0), c >= 0
        return sign, armed

    t_now = float(t0)
    y_now = y0
    sign, armed = initial_state(current_values(t_now, y_now, args))
    on = mask.copy() if n else np.zeros(1, dtype=bool)
    signs0 = jnp.asarray(sign * on)
    controller_state = _strong(
        _init_controller(
            vector_field,
            solver,
            controller,
            y0,
            args,
            signs0,
            jnp.asarray(t_now, dtype),
            jnp.asarray(t1, dtype),
        )
    )
    solver_shape = _solver_state_shape(
        vector_field,
        solver,
        y0,
        args,
        signs0,
        jnp.asarray(t_now, dtype),
        jnp.asarray(t1, dtype),
    )
    save_shape = jax.eval_shape(save_fn, jnp.asarray(t_now, dtype), y0, args)
    # How the next call starts: afresh (start, after an event) or continuing.
    fresh = True
    carried_dt = jnp.zeros((), dtype)
    carried_solver_state = _zeros_like_shape(solver_shape)
    saved_chunks, ts_chunks, events = [], [], []
    steps = accepted = rejected = segments = 0
    seg_stats: dict = {}  # stats of the current segment's chunks so far
    counts: dict = {}
    result = dfx.RESULTS.successful
    ok = interrupted = False
    resumed_from = None
    y_like, args_like, controller_like = y0, args, controller_state

    def pack():
        meta = {
            "t_now": t_now,
            "sign": sign.tolist(),
            "armed": armed.tolist(),
            "on": on.tolist(),
            "fresh": fresh,
            "events": events,
            "steps": steps,
            "accepted": accepted,
            "rejected": rejected,
            "segments": segments,
            "seg_stats": seg_stats,
            "counts": counts,
            "started": bool(ts_chunks),
            "ok": ok,
        }
        if len(ts_chunks) > 1:  # joined once, not again at every write
            ts_chunks[:] = [np.concatenate(ts_chunks)]
            saved_chunks[:] = [
                jax.tree.map(lambda *xs: np.concatenate(xs), *saved_chunks)
            ]
        arrays = {
            **pack_tree("y", y_now),
            **pack_tree("args", args),
            **pack_tree("controller", controller_state),
            **pack_tree("solver", carried_solver_state),
            "carried_dt": np.asarray(carried_dt),
            "ts_saved": ts_chunks[0] if ts_chunks else ts[:0],
        }
        if ts_chunks:
            arrays.update(pack_tree("saved", saved_chunks[0]))
        if checkpoint_state is not None:
            extra_meta, extra_arrays = checkpoint_state[0]()
            meta["extra"] = extra_meta
            arrays.update({f"extra/{k}": v for k, v in extra_arrays.items()})
        return meta, arrays

    def write_checkpoint():
        if checkpoint is not None:
            checkpoint.write(*pack())

    if checkpoint is not None and checkpoint.state is not None:
        meta, arrays = checkpoint.state
        t_now = float(meta["t_now"])
        resumed_from = t_now
        sign = np.asarray(meta["sign"], dtype=np.float64)
        armed = np.asarray(meta["armed"], dtype=bool)
        on = np.asarray(meta["on"], dtype=bool)
        fresh = bool(meta["fresh"])
        events = list(meta["events"])
        steps, accepted = int(meta["steps"]), int(meta["accepted"])
        rejected, segments = int(meta["rejected"]), int(meta["segments"])
        seg_stats, counts = dict(meta["seg_stats"]), dict(meta["counts"])
        y_now = jax.tree.map(jnp.asarray, unpack_tree("y", arrays, y_like))
        args = jax.tree.map(jnp.asarray, unpack_tree("args", arrays, args_like))
        controller_state = _strong(unpack_tree("controller", arrays, controller_like))
        carried_solver_state = jax.tree.map(
            jnp.asarray, unpack_tree("solver", arrays, solver_shape)
        )
        carried_dt = jnp.asarray(arrays["carried_dt"])
        if meta["started"]:
            ts_saved = arrays["ts_saved"]
            like = jax.tree.map(
                lambda s: jax.ShapeDtypeStruct((ts_saved.size, *s.shape), s.dtype),
                save_shape,
            )
            ts_chunks = [ts_saved]
            saved_chunks = [unpack_tree("saved", arrays, like)]
        if checkpoint_state is not None:
            extra = {
                k[len("extra/") :]: v
                for k, v in arrays.items()
                if k.startswith("extra/")
            }
            checkpoint_state[1](meta.get("extra", {}), extra)
        ok = bool(meta["ok"])

    with deferred_interrupt() as interrupt:
        while not ok:
            if steps >= max_steps:
                result = dfx.RESULTS.max_steps_reached
                write_checkpoint()  # raise max_steps and resume to go on
                break
            # Save times already passed are pointed at `t_now` and dropped
            # afterwards, so `ts` keeps its shape (and the compiled solve is
            # reused).
            ts_seg = np.clip(ts, t_now, t1)
            keep = ts >= t_now if not ts_chunks else ts > t_now
            meter = meter_factory(t_now, t1) if meter_factory else dfx.NoProgressMeter()
            sol = _segment(
                vector_field,
                solver,
                controller,
                combined,
                y_now,
                args,
                jnp.asarray(sign * on),
                jnp.asarray(t_now, dtype),
                jnp.asarray(t1, dtype),
                jnp.asarray(ts_seg, dtype),
                save_fn,
                controller_state,
                jnp.asarray(fresh),
                carried_dt,
                carried_solver_state,
                steps_per_call,
                meter,
                root_rtol,
                root_atol,
                # the first call keeps ts >= t0, later ones ts > t_now
                jnp.asarray(t_now if ts_chunks else -np.inf, dtype),
            )
            chunk_stats = {k: int(v) for k, v in sol.stats.items() if np.ndim(v) == 0}
            steps += chunk_stats["num_steps"]
            accepted += chunk_stats["num_accepted_steps"]
            rejected += chunk_stats["num_rejected_steps"]
            for key, value in chunk_stats.items():
                seg_stats[key] = seg_stats.get(key, 0) + value
            t_end = float(np.asarray(sol.ts[1])[0])  # pyright: ignore[reportOptionalSubscript]
            y_end = jax.tree.map(lambda x: x[0], sol.ys[1])  # pyright: ignore[reportOptionalSubscript]
            seg_ts = np.asarray(sol.ts[0], dtype=np.float64)  # pyright: ignore[reportOptionalSubscript]
            sel = keep & np.isfinite(seg_ts) & (ts <= t_end)
            ts_chunks.append(ts[sel])
            saved_chunks.append(
                jax.tree.map(lambda x, s=sel: np.asarray(x)[s], sol.ys[0])  # pyright: ignore[reportOptionalSubscript]
            )
            result = sol.result
            t_now, y_now = t_end, y_end
            controller_state = _strong(sol.controller_state)
            if result == dfx.RESULTS.max_steps_reached:
                # The chunk ended: the next call continues it exactly.
                fresh = False
                carried_dt = jnp.asarray(np.asarray(next_step(controller_state)))
                carried_solver_state = _strong(sol.solver_state)
                if interrupt.requested:
                    interrupted = True
                    write_checkpoint()
                    break
                if checkpoint is not None and checkpoint.due():
                    write_checkpoint()
                continue
            # The segment ended (t1, an event or a failure).
            segments += 1
            if counters is not None:
                _add_counts(counts, counters(seg_stats, sol.solver_state))
            seg_stats = {}
            fresh = True
            if result == dfx.RESULTS.successful:
                ok = True
                write_checkpoint()
                break
            if result != dfx.RESULTS.event_occurred:
                write_checkpoint()
                break
            # The condition that crossed is the largest term (zero up to the root
            # finder's tolerance) among those switched on.
            values = current_values(t_end, y_end, args)
            k = int(np.argmax(np.where(on, sign * values, -np.inf)))
            # Whatever happened, condition k is now on the other side of zero.
            was_armed = bool(armed[k])
            sign[k] = -sign[k]
            armed[k] = directions[k] is None or not was_armed
            if was_armed:  # (otherwise it came back to where it can fire again)
                record = {"name": names[k], "index": k, "t": t_end}
                new = on_event(record, t_end, y_end, args) if on_event else None
                events.append(record)
                if isinstance(new, tuple):
                    new, args = new
                if new is not None:
                    new = np.array(new, dtype=bool)
                    # Conditions switched on now start from their current side.
                    fresh_on = new & ~on
                    if fresh_on.any():
                        s0, a0 = initial_state(current_values(t_end, y_end, args))
                        sign[fresh_on], armed[fresh_on] = s0[fresh_on], a0[fresh_on]
                    on = new
                write_checkpoint()
                if len(events) >= max_events:
                    raise RuntimeError(
                        f"more than max_events = {max_events} events fired (last: "
                        f"{names[k]!r} at t = {t_end:.6g}); a condition is "
                        "chattering around its threshold"
                    )
            if interrupt.requested:
                interrupted = True
                write_checkpoint()
                break
    if ok:
        result = dfx.RESULTS.successful
    ts_out = np.concatenate(ts_chunks) if ts_chunks else ts[:0]
    if saved_chunks:
        saved = jax.tree.map(lambda *xs: np.concatenate(xs), *saved_chunks)
    else:
        saved = jax.tree.map(lambda s: np.zeros((0, *s.shape), s.dtype), save_shape)
    return SegmentedSolution(
        ts=ts_out,
        saved=saved,
        t_final=t_now,
        y_final=y_now,
        events=events,
        result=result,
        ok=ok,
        num_steps=steps,
        num_accepted_steps=accepted,
        num_rejected_steps=rejected,
        num_segments=segments,
        counts=counts,
        wall_time=time.perf_counter() - start,
        interrupted=interrupted,
        args=args,
        resumed_from=resumed_from,
    )


__all__ = ["Event", "SegmentedSolution", "solve_with_events"]
