r"""The solve loop: one typed state, a pure chunk function, a thin host driver.

The whole state of a solve between two chunks of steps is one
[`LoopState`][] (a PyTree): the point reached, the solver's and the step-size
controller's states, the proposed next step, everything saved so far (fixed
`(T, ...)` arrays with a `filled` mask), the step counters and the result code.
[`run_chunk`][] is a pure function `LoopState -> LoopState` that advances a
state by at most `Spec.chunk_steps` steps (one Diffrax call that continues the
previous one bit for bit: solver state, controller state and proposed step are
carried, see `resume.py`). Because it is pure, a batch of states can be
advanced together under `jax.vmap`, and a checkpoint is the state written
whole.

The host only repeats `run_chunk`, reads and empties the event buffer (see
`watch.py`), updates the progress bar, watches for Ctrl-C and writes
checkpoints: [`LoopJob`][] says so to the one driver (`driver.py`). Nothing
inside the compiled chunk calls back to the host, so JAX's persistent
compilation cache can store it.
"""

import dataclasses
from collections.abc import Callable
from typing import Any

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float, Int, PyTree

from .._event.watch import WatchState, empty_buffer_on_host
from . import exported
from .checkpoint import pack_tree
from .driver import Job
from .resume import ResumableController, next_step


# Steps per Diffrax call. Between calls the host looks in (progress, Ctrl-C,
# checkpoints); a call continues the previous one bit for bit, so the chunk
# size changes nothing but how often the host looks in.
CHUNK_STEPS = 1000

# Models up to this many parameters take CHUNK_STEPS steps per chunk; larger
# ones fewer (see `chunk_steps_for`).
_CHUNK_FULL_SIZE = 1000


def chunk_steps_for(y0: PyTree) -> int:
    """Steps per chunk for a solve of `y0`'s size: `CHUNK_STEPS` up to 1000
    parameters (the paper's models: a chunk takes about a second), fewer above,
    so that a chunk takes seconds rather than minutes and the progress bar,
    Ctrl-C and the checkpoint writes still come in often. The cost of a step
    grows about as n^1.5 with the number of parameters n (measured: 0.7 ms at
    n = 224, about 0.5 s at n = 16,896, a 512-token text chain): the rule keeps
    `chunk x n^1.5` constant, with at least 10 steps. The chunk size changes
    nothing but how often the host looks in (each chunk continues the previous
    one bit for bit)."""
    n = sum(int(np.size(x)) for x in jax.tree.leaves(y0))
    scaled = CHUNK_STEPS * (_CHUNK_FULL_SIZE / max(n, 1)) ** 1.5
    return int(min(CHUNK_STEPS, max(10, scaled)))


class Spec(eqx.Module):
    """What a solve is, apart from its data: vector field, solver (possibly a
    [`Watch`][gradflow._event.watch.Watch]), step-size controller, save function and chunk
    size. Static: one compilation per `Spec` (and shapes)."""

    vector_field: Callable
    solver: dfx.AbstractSolver
    controller: dfx.AbstractAdaptiveStepSizeController
    save_fn: Callable
    chunk_steps: int = eqx.field(static=True, default=CHUNK_STEPS)

    @property
    def term(self) -> dfx.ODETerm:
        return dfx.ODETerm(self.vector_field)


class LoopState(eqx.Module):
    """Everything a solve carries from one chunk of steps to the next.

    - `t`, `y`: the point reached;
    - `solver_state`, `controller_state`, `dt`: how the next step continues
      (`dt` is the step the controller proposed last);
    - `saved`: `save_fn`'s values at every save time, shape `(T, ...)`;
      `filled[i]` says whether save time `i` has been reached;
    - `num_steps`, `num_accepted_steps`, `num_rejected_steps`: counters;
    - `running`: whether the solve stopped at a chunk boundary, with more
      steps to take (the loop's own flag);
    - `solver_result`: the result Diffrax reported for the last chunk
      (`successful` at `t1`; at a chunk boundary its `max_steps_reached`,
      which here means only that the chunk's steps were taken).
    """

    t: Float[Array, ""]
    y: PyTree
    solver_state: PyTree
    controller_state: PyTree
    dt: Float[Array, ""]
    saved: PyTree
    filled: Bool[Array, " T"]
    num_steps: Int[Array, ""]
    num_accepted_steps: Int[Array, ""]
    num_rejected_steps: Int[Array, ""]
    running: Bool[Array, ""]
    solver_result: Any


# The save buffer of a small model holds at least SAVE_BUFFER_FLOOR saves
# (the default run's 798 saves already take 1,024), as long as it holds at
# most SAVE_BUFFER_NUMBERS saved numbers (8 MiB in float64): solves of the same
# model with up to 1,024 saves share one compiled chunk (see
# `save_buffer_size`).
SAVE_BUFFER_FLOOR = 1024
SAVE_BUFFER_NUMBERS = 2**20


def save_buffer_size(num_saves: int, per_save: int | None = None) -> int:
    """The length of the save buffer for `num_saves` save times of
    `per_save` saved numbers each: the smallest of 16, 24, 32, 48, 64, 96,
    ... (2^k and 3 * 2^(k - 1)) that holds them, and at least
    `SAVE_BUFFER_FLOOR` (1,024) where that buffer holds at most
    `SAVE_BUFFER_NUMBERS` (2^20) numbers (`per_save` at most 1,024; `None`:
    no floor).

    The compiled solve depends on the number of saves only through this size:
    solves of a small model with up to 1,024 saves (say 240, 401 and the
    default 798) share one compilation, and above the floor, or for a larger
    model, nearby numbers (300 and 301, 1,100 and 1,200) share one bucket,
    at most 1.5 times longer than needed. The floor's extra saves cost their
    evaluations at the last step (`docs/performance.md`, "Save-buffer length
    only")."""
    size = 16
    while size < num_saves:
        size = size * 3 // 2 if size & (size - 1) == 0 else size * 4 // 3
    if per_save is not None and SAVE_BUFFER_FLOOR * per_save <= SAVE_BUFFER_NUMBERS:
        size = max(size, SAVE_BUFFER_FLOOR)
    return size


def padded_save_times(ts: np.ndarray, per_save: int | None = None) -> np.ndarray:
    """`ts` lengthened to [`save_buffer_size`][]`(len(ts), per_save)` by
    repeating its last time (`per_save`: the numbers saved at each time,
    `saved_numbers`). A repeated time saves the same interpolation as the
    last one (the steps do not depend on the save times); read the first
    `len(ts)` saves only."""
    ts = np.asarray(ts)
    extra = save_buffer_size(ts.shape[0], per_save) - ts.shape[0]
    return np.concatenate([ts, np.full(extra, ts[-1], ts.dtype)])


def saved_numbers(spec: Spec, y0, args) -> int:
    """How many numbers `spec.save_fn` saves at one time (traced for its
    shapes only, nothing computed)."""
    one = eqx.filter_eval_shape(spec.save_fn, 0.0, y0, args)
    return sum(int(np.prod(s.shape)) for s in jax.tree.leaves(one))


def save_buffer_times(spec: Spec, ts, y0, args, dtype) -> Array:
    """The save times a solve's state and chunks take, as a device array of
    `dtype`: `ts` padded to the bucketed length of its save buffer
    ([`padded_save_times`][] with the [`saved_numbers`][] of `spec.save_fn`
    at `y0`, `args`). The solo flow, the batched sweep and the sweep's lanes
    all build their buffers from it, so they share compiled chunks; read the
    first `len(ts)` saves only."""
    per_save = saved_numbers(spec, y0, args)
    return jnp.asarray(padded_save_times(ts, per_save), dtype)


def restore_state(checkpoint, like: LoopState) -> LoopState:
    """The loop state (or stack of states) a checkpoint holds, in the
    structure of `like`, its save buffer fitted to `like`'s length
    ([`fit_save_buffer`][]: a checkpoint written before the buffer's floor
    resumes)."""
    return checkpoint.restore("state", like, fit=fit_save_buffer)


def fit_save_buffer(arrays: dict, like: LoopState, prefix: str = "state") -> dict:
    """A checkpoint's arrays (`pack_tree(prefix, state)`) with the save
    buffer (`saved`, `filled`) cut or padded to the length of `like`'s (a
    state or a stack of states): a checkpoint written with another buffer
    length (before the floor of `save_buffer_size`) resumes. Only the saves
    beyond the save times change (padded with unfilled zeros), which are
    never read."""
    leaves, treedef = jax.tree.flatten(like)
    index = jax.tree.unflatten(treedef, range(len(leaves)))
    axis = np.ndim(like.filled) - 1
    length = np.shape(like.filled)[axis]
    out = dict(arrays)
    for i in [*jax.tree.leaves(index.saved), index.filled]:
        key = f"{prefix}/{i}"
        a = out.get(key)
        if a is None or a.ndim <= axis or a.shape[axis] == length:
            continue
        if a.shape[axis] > length:
            a = np.take(a, np.arange(length), axis=axis)
        else:
            pad = [(0, 0)] * a.ndim
            pad[axis] = (0, length - a.shape[axis])
            a = np.pad(a, pad)
        out[key] = a
    return out


def _zeros(shape_tree):
    return jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shape_tree)


def init_state(spec: Spec, *, y0, args, t0, t1, ts) -> LoopState:
    """The state at `t0`: controller and solver initialised (the first step
    size chosen by the controller), nothing saved yet.

    Every leaf is a strongly typed array, like the states `run_chunk` returns:
    a Python scalar or a weakly typed leaf (Diffrax's initial controller state
    has both) would make the first chunk compile once more. (`device_put`
    of a host copy, not `jnp.asarray`: in JAX 0.10 the latter compiles a
    tiny `jit(stage)` per new shape and dtype, 17 of a warm start's
    compilations here.) Where exported programs are on (the command line),
    a warm start loads the traced program with its output's structure
    (`gradflow/_loop/exported.py`) instead of tracing and lowering it again."""
    state = exported.call(
        "init_state", _init_state, spec, y0, args, (t0, t1, ts), same_structure=False
    )
    if state is None:
        state = _init_state_jit(spec, y0, args, (t0, t1, ts))
    return jax.tree.map(lambda x: jax.device_put(np.asarray(x)), state)


def _init_state(spec: Spec, y0, args, times) -> LoopState:
    t0, t1, ts = times
    term = spec.term
    solver = spec.solver
    tnext, controller_state = spec.controller.init(
        term, t0, t1, y0, None, args, solver.func, solver.error_order(term)
    )
    tnext = jnp.minimum(tnext, t1)
    solver_state = solver.init(term, t0, tnext, y0, args)
    one = eqx.filter_eval_shape(spec.save_fn, t0, y0, args)
    saved = jax.tree.map(lambda s: jnp.zeros((ts.shape[0], *s.shape), s.dtype), one)
    zero = jnp.zeros((), jnp.int64 if jax.config.jax_enable_x64 else jnp.int32)  # pyright: ignore[reportAttributeAccessIssue]
    return LoopState(
        t=jnp.asarray(t0),
        y=y0,
        solver_state=solver_state,
        controller_state=controller_state,
        dt=jnp.asarray(tnext - t0),
        saved=saved,
        filled=jnp.zeros(ts.shape, bool),
        num_steps=zero,
        num_accepted_steps=zero,
        num_rejected_steps=zero,
        running=jnp.asarray(True),
        solver_result=dfx.RESULTS.successful,
    )


_init_state_jit = eqx.filter_jit(_init_state)


def _chunk(spec: Spec, args, ts, t1, state: LoopState) -> LoopState:
    t0 = state.t
    started = jnp.any(state.filled)
    t_skip = jnp.where(started, t0, -jnp.inf)
    one = eqx.filter_eval_shape(spec.save_fn, t0, state.y, args)

    # Save times already passed are clipped to `t0` (fixed shapes: no
    # recompile) and not computed; the `filled` mask keeps the earlier values.
    def save(t, y, a):
        return jax.lax.cond(
            t > t_skip, lambda: spec.save_fn(t, y, a), lambda: _zeros(one)
        )

    saveat = dfx.SaveAt(
        subs=[dfx.SubSaveAt(ts=jnp.clip(ts, t0, t1), fn=save), dfx.SubSaveAt(t1=True)],
        controller_state=True,
        solver_state=True,
    )
    sol = dfx.diffeqsolve(
        spec.term,
        spec.solver,
        t0,
        t1,
        state.dt,
        state.y,
        args=args,
        saveat=saveat,
        stepsize_controller=spec.controller,
        controller_state=state.controller_state,
        solver_state=state.solver_state,
        max_steps=spec.chunk_steps,
        throw=False,
    )
    assert sol.ts is not None and sol.ys is not None
    t_end = sol.ts[1][0]
    reached = jnp.isfinite(sol.ts[0]) & (ts <= t_end) & ~state.filled

    def merge(new, old):
        mask = reached.reshape(reached.shape + (1,) * (new.ndim - 1))
        return jnp.where(mask, new, old)

    stats = sol.stats
    return LoopState(
        t=t_end,
        y=jax.tree.map(lambda x: x[0], sol.ys[1]),
        solver_state=sol.solver_state,
        controller_state=sol.controller_state,
        dt=next_step(sol.controller_state),
        saved=jax.tree.map(merge, sol.ys[0], state.saved),
        filled=state.filled | reached,
        num_steps=state.num_steps + stats["num_steps"],
        num_accepted_steps=state.num_accepted_steps + stats["num_accepted_steps"],
        num_rejected_steps=state.num_rejected_steps + stats["num_rejected_steps"],
        # Diffrax stops a chunk by its step budget (`max_steps`): the solve
        # goes on from there; any other result ends it.
        running=sol.result == dfx.RESULTS.max_steps_reached,
        solver_result=sol.result,
    )


def is_running(state: LoopState) -> Bool[Array, "*batch"]:
    """Whether a state is at a chunk boundary (more steps to take)."""
    return state.running


def _advance(spec: Spec, args, ts, t1, state: LoopState) -> LoopState:
    new = _chunk(spec, args, ts, jnp.where(is_running(state), t1, state.t), state)
    running = is_running(state)
    return jax.tree.map(lambda a, b: jnp.where(running, a, b), new, state)


_advance_jit = eqx.filter_jit(_advance)


def run_chunk(spec: Spec, args, ts, t1, state: LoopState) -> LoopState:
    """Advances `state` by at most `spec.chunk_steps` steps towards `t1`.

    A state that has finished (reached `t1` or failed) is returned unchanged.
    Pure: `jax.vmap` it over a batch of states (and `args`) to advance many
    solves at once. Compiled (`eqx.filter_jit`); where exported programs are
    on (`gradflow/_loop/exported.py`, the command line), a warm start loads
    the traced program instead of tracing it again."""
    out = exported.call("run_chunk", _advance, spec, args, ts, t1, state)
    if out is not None:
        return out
    return _advance_jit(spec, args, ts, t1, state)


def _filter_jit_parts(wrapper) -> tuple[Any, Callable, Callable] | None:
    """`(jitted, split, join)` of an `eqx.filter_jit` wrapper: the
    `jax.jit` it calls, `split(args) -> (dynamic, static)` its arguments
    (`static` the last, static one) and `join(out)` the wrapper's output
    from the jit's: `join(jitted(*dynamic, static))` is `wrapper(*args)`, the
    same program. `None` where this Equinox keeps them otherwise (its own
    names, not public: Equinox has no separate trace step) or this JAX's
    jit has no `trace`."""
    try:
        from equinox._jit import _postprocess, _preprocess

        jitted = wrapper._cached
        info = (
            wrapper._signature,
            wrapper._dynamic_fun,
            wrapper._static_fun,
            wrapper.donate_first,
            wrapper.donate_rest,
        )
    except (ImportError, AttributeError):
        return None
    if not callable(getattr(jitted, "trace", None)):
        return None

    def split(args):
        *dynamic, static = _preprocess(info, args, {}, return_static=True)
        return tuple(dynamic), static

    return jitted, split, _postprocess


def _signature(tree) -> tuple:
    """What a compiled program's inputs must match: their structure, shapes,
    dtypes and weak types."""
    leaves, treedef = jax.tree.flatten(tree)
    return treedef, tuple(
        (x.shape, x.dtype, getattr(x, "weak_type", False)) for x in leaves
    )


class DeviceChunk:
    """[`run_chunk`][] for a thread that computes under
    `jax.default_device(device)` (a sweep's lane on a device other than the
    default one, `gradflow/_sweep/lanes.py`), without tracing the chunk
    again.

    JAX keys its cache of traced programs on the default device: under the
    context, `run_chunk` would trace `_advance` anew (seconds) into the same
    program. Here it is traced under `outside()`, a context that restores the
    default device of the solo runs (a hit in JAX's cache once a solo run or
    the sweep's first lane has traced it), then lowered and compiled under
    the thread's own context, for its device
    (`jax.jit(...).trace(...).lower().compile()`, JAX's ahead-of-time
    stages). The lowering is the one `run_chunk` makes under that context:
    the same program, the same persistent-cache key (measured), the same
    numbers. JAX caches the lowering and its executable per default device
    (`jax.clear_caches()` clears them), so a later sweep's lane on the same
    device lowers and compiles nothing; each `DeviceChunk` keeps its
    executables by input signature too, to skip JAX's stages between
    chunks.

    Exported chunks (the command line, `exported.py`) and an Equinox
    without the parts this needs take `run_chunk`'s path.

    **Arguments:**

    - `outside`: a function returning the context to trace under.
    """

    def __init__(self, outside: Callable[[], Any]):
        self._outside = outside
        self._parts = _filter_jit_parts(_advance_jit)
        self._compiled: dict = {}

    def __call__(self, spec: Spec, args, ts, t1, state: LoopState) -> LoopState:
        out = exported.call("run_chunk", _advance, spec, args, ts, t1, state)
        if out is not None:
            return out
        if self._parts is None:
            return _advance_jit(spec, args, ts, t1, state)
        jitted, split, join = self._parts
        dynamic, static = split((spec, args, ts, t1, state))
        key = (static, _signature(dynamic))
        compiled = self._compiled.get(key)
        if compiled is None:
            with self._outside():
                traced = jitted.trace(*dynamic, static)
            compiled = self._compiled[key] = traced.lower().compile()
        try:
            out = compiled(*dynamic)
            jax.block_until_ready(out[0])  # (Equinox's marker: errors surface here)
        except Exception:  # noqa: BLE001  (raised again below)
            # An error inside the program (a check of Equinox's, which only
            # `eqx.filter_jit` turns into its readable message): the
            # ordinary path runs the same pure chunk and raises it so
            return _advance_jit(spec, args, ts, t1, state)
        return join(out)


def make_controller(rtol, atol) -> ResumableController:
    # Tolerances as arrays: floats would be static and recompile for each value.
    return ResumableController(  # pyright: ignore[reportCallIssue]
        # (device_put: no tiny compilation, and weakly typed as jnp.asarray's)
        dfx.PIDController(rtol=jax.device_put(rtol), atol=jax.device_put(atol))
    )


# -- the host driver -----------------------------------------------------------


@dataclasses.dataclass
class Crossing:
    """One crossing read from the event buffer (host side)."""

    t: float
    index: int
    y: Any


_empty = empty_buffer_on_host


def read_buffer(
    state: LoopState,
    *,
    empty: Callable[[WatchState], WatchState] = _empty,
    member: int | None = None,
) -> tuple[LoopState, list[Crossing]]:
    """Takes the crossings out of a [`Watch`][] buffer (host side), returning
    the state with an empty buffer (`empty(ws)`: the watch state with its
    buffer emptied; by default `empty_buffer`'s values, built on the host). Raises if crossings
    did not fit (naming the sweep's `member` whose state it is, if given)."""
    ws = state.solver_state
    if not isinstance(ws, WatchState):
        return state, []
    if int(ws.lost) > 0:
        where = "" if member is None else f"member {member}: "
        raise RuntimeError(
            f"{where}more than {ws.t.shape[0]} events fired within one chunk of "
            f"steps (up to t = {float(state.t):.6g}); a condition is chattering "
            "around its threshold"
        )
    n = int(ws.count)
    if n == 0:
        return state, []
    # sliced on the host: a device slice would compile once per count
    ts = np.asarray(ws.t)[:n]
    idx = np.asarray(ws.index)[:n]
    ys = jax.tree.map(lambda x: np.asarray(x)[:n], ws.y)
    out = [
        Crossing(float(ts[i]), int(idx[i]), jax.tree.map(lambda x, i=i: x[i], ys))
        for i in range(n)
    ]
    state = eqx.tree_at(lambda s: s.solver_state, state, empty(ws))
    return state, out


def read_trace(state: LoopState) -> tuple[LoopState, np.ndarray, np.ndarray]:
    """Takes the motion saves out of a [`Watch`][]'s second buffer (host
    side): `(state with an empty buffer, times (m,), flat points (m, n))`."""
    ws = state.solver_state
    if not isinstance(ws, WatchState) or ws.trace is None:
        return state, np.zeros(0), np.zeros((0, 0))
    tr = ws.trace
    if int(tr.lost) > 0:  # (a chunk is short enough that this cannot happen)
        raise RuntimeError(
            f"more than {tr.t.shape[0]} motion saves within one chunk of steps"
        )
    n = int(tr.count)
    ts, ys = np.asarray(tr.t)[:n], np.asarray(tr.y)[:n]
    if n:
        state = eqx.tree_at(lambda s: s.solver_state, state, _empty(ws))
    return state, ts, ys


class LoopJob(Job):
    """One solve's chunks for the driver: advance the loop state towards
    `t1`, stop at `max_steps`, read the located events (each turned into a
    record by `record` and passed to `on_event`), checkpoint the state
    whole."""

    def __init__(
        self, spec: Spec, args, ts, t1, *, max_steps: int, record, on_event=None
    ):
        self.spec, self.args = spec, args
        # in the state's dtype (a float32 solve compares times in float32)
        self.ts, self.t1 = ts, t1
        self.max_steps = max_steps
        self.record, self.on_event = record, on_event
        self.records: list[Any] = []
        self.out_of_steps = False
        # motion saves: times and flat points (SaveAt(motion=...))
        self.dense_t: list[np.ndarray] = []
        self.dense_y: list[np.ndarray] = []

    def running(self, state: LoopState) -> bool:
        if not bool(is_running(state)):
            return False
        # recomputed each time: a resumed run may raise max_steps
        self.out_of_steps = int(state.num_steps) >= self.max_steps
        return not self.out_of_steps

    def advance(self, state: LoopState) -> LoopState:
        return run_chunk(self.spec, self.args, self.ts, self.t1, state)

    def collect(self, state: LoopState):
        before = state
        state, new = read_buffer(state)
        for crossing in new:
            record = self.record(crossing)
            self.records.append(record)
            if self.on_event is not None:
                self.on_event(record, crossing)
        if new:  # emptying the crossings emptied the motion saves too: read them first
            _, ts, ys = read_trace(before)
        else:
            state, ts, ys = read_trace(state)
        if ts.size:
            self.dense_t.append(ts)
            self.dense_y.append(ys)
        return state, bool(new)

    def dense(self) -> tuple[np.ndarray, np.ndarray]:
        """The motion saves so far: `(times (m,), flat points (m, n))`."""
        if not self.dense_t:
            return np.zeros(0), np.zeros((0, 0))
        return np.concatenate(self.dense_t), np.concatenate(self.dense_y)

    def progress(self, state: LoopState):
        return float(state.t), None

    def snapshot(self, state: LoopState):
        meta = {"t_now": float(state.t), "events": [r.to_dict() for r in self.records]}
        arrays = pack_state(state)
        if self.dense_t:
            arrays["dense_t"], arrays["dense_y"] = self.dense()
        return meta, arrays


def pack_state(state: LoopState) -> dict[str, np.ndarray]:
    """The state as flat NumPy arrays (for a checkpoint file)."""
    return pack_tree("state", state)


__all__ = [
    "SAVE_BUFFER_FLOOR",
    "SAVE_BUFFER_NUMBERS",
    "fit_save_buffer",
    "padded_save_times",
    "restore_state",
    "save_buffer_size",
    "save_buffer_times",
    "saved_numbers",
    "CHUNK_STEPS",
    "chunk_steps_for",
    "Crossing",
    "DeviceChunk",
    "LoopJob",
    "LoopState",
    "Spec",
    "init_state",
    "is_running",
    "make_controller",
    "pack_state",
    "read_buffer",
    "read_trace",
    "run_chunk",
]
