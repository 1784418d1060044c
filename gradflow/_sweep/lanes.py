r"""A sweep's members one by one on every device at once: one host thread per
device, each running members through the compiled chunk of a solo run.

This is how a sweep runs when its members go one at a time (`batch_size`
1, the default on a CPU) in one process. Each device has a *lane*: a host
thread that takes the next member not yet started, runs it chunk by chunk
through [`run_chunk`][gradflow._loop.loop.run_chunk] (the very program a
solo [`gradflow.flow`][] runs, so a member equals its solo run bit for bit)
until it finishes, fails or runs out of steps, then takes the next. JAX
releases Python's global interpreter lock while a device computes, so the
lanes step at the same time, each on its own device: on a CPU whose cores
are host devices (`gradflow/_core/devices.py`), each on its own core. The
lanes do not wait for each other between chunks, and a lane that is done
takes the next member, so the cores stay busy until the last members.

The host thread of the sweep (the one driver, `driver.py`) reads what the
lanes have done: [`LaneJob.advance`][] waits until a lane has finished a
chunk and returns the members' latest states (a [`Lanes`][] snapshot, each
member at a chunk boundary); the driver moves the progress bar, turns the
located events into records, writes the checkpoint (the members' states
stacked, as the sharded path writes it, so either path resumes the other's
file) and stops the lanes on Ctrl-C.

One program per device: a CPU device's program cannot run on another
device. The first lane traces and compiles the chunk (shared with a solo run
of the same shapes, and with JAX's persistent cache); the other lanes start
once it has finished its first chunk, and trace nothing: JAX keys its traced
programs on the default device, so under their devices' contexts
`run_chunk` would trace the chunk again (seconds each), and they take the
first lane's trace instead, from outside the context, and lower and compile
it for their devices ([`DeviceChunk`][gradflow._loop.loop.DeviceChunk]:
the same program, the same numbers; docs/performance.md, "Issue 42, eighth
pass"). Each device's compilation has a key of its own in JAX's persistent
cache (the key holds the device): a later process loads it from there, the
first one compiles it, while the first lane already steps.

A lane computes under `jax.default_device(device)` (the lane on the
process's default device under no context: `jax.jit` keys its cache on the
default device, and the solo runs have none set) and leaves a member's
arrays uncommitted (placed on no device in particular), as a solo run's are:
`jax.jit` moves them to the lane's device, and the chunk is lowered exactly
as a solo run's. Arrays put on a device (`jax.device_put(x, device)`,
committed) would lower to another program, annotated with their device's
sharding, which no solo run shares: the same chunk would be compiled once
for the solo runs and again for the sweeps.
"""

import collections
import contextlib
import dataclasses
import threading
from typing import Any

import equinox as eqx
import jax
import numpy as np

from .._event.watch import WatchState, empty_buffer_on_host
from .._flow.flow import event_record
from .._loop.checkpoint import pack_tree
from .._loop.driver import Job
from .._loop.loop import Crossing, DeviceChunk, read_buffer, run_chunk
from .batch import stack


@dataclasses.dataclass(frozen=True)
class Lanes:
    """What the driver sees of a lane sweep: every member's latest state (at
    a chunk boundary), whether it still runs, its steps and its time, and a
    counter of the chunks finished so far."""

    states: tuple
    running: np.ndarray
    steps: np.ndarray
    t: np.ndarray
    version: int


def _host(x) -> np.ndarray:
    return np.asarray(x)


def _emptied(ws: WatchState, device) -> WatchState:
    """`empty_buffer` of the watch state, computed on the host (no program
    to compile per device), committed to `device` only where the state was
    (uncommitted arrays go to the lane's default device). A sweep takes no
    motion saves (`as_saveat`), so a lane's watch state has no trace."""
    target = device if getattr(ws.count, "committed", False) else None
    return empty_buffer_on_host(ws, target)


def _default_device(device):
    """`jax.default_device(device)` for this thread (JAX's default device is
    set per thread), or nothing where `device` is already the default: the
    default device is part of `jax.jit`'s cache key, so a lane on it shares
    the solo runs' compiled chunk only outside the context (measured: a sweep
    then a solo run of the same shapes compiled the chunk twice)."""
    # (a new thread: the global value; JAX types no attribute for it)
    default = getattr(jax.config, "jax_default_device", None)
    if device == default or (default is None and device == jax.devices()[0]):
        return contextlib.nullcontext()
    return jax.default_device(device)


def _chunk_for(device):
    """`(context, chunk)` for a lane on `device`: the context it computes
    under (`_default_device`) and the function that advances a member by
    a chunk: `run_chunk` where no context is needed, else a
    [`DeviceChunk`][gradflow._loop.loop.DeviceChunk] that takes the chunk's
    trace from outside the context (JAX's cache of traced programs is keyed on
    the default device) and lowers and compiles it for `device`."""
    context = _default_device(device)
    if isinstance(context, contextlib.nullcontext):
        return context, run_chunk
    # (read in the lane's thread before its context: the global value)
    default = getattr(jax.config, "jax_default_device", None)
    return context, DeviceChunk(lambda: jax.default_device(default))


def _put(tree, device):
    """`tree` for a lane on `device`: its committed arrays put on `device`;
    the uncommitted ones (a solo run's kind) left as they are, for `jax.jit`
    to move to the lane's default device (see the module's docstring)."""

    def one(x):
        if isinstance(x, jax.Array) and x.committed:
            return jax.device_put(x, device)
        return x

    arrays, rest = eqx.partition(tree, eqx.is_array)
    return eqx.combine(jax.tree.map(one, arrays), rest)


class LaneJob(Job):
    """A sweep's members on one lane (host thread) per device, for the one
    driver. `states` are the members' initial (or resumed) loop states,
    `records` the events already read per member."""

    def __init__(
        self, setups, specs, observers, states, devices, *, ts, t1, records, max_steps
    ):
        n = len(setups)
        self.setups, self.specs, self.observers = setups, specs, observers
        self.devices = tuple(devices)[: max(1, n)]
        self.ts, self.t1, self.max_steps = ts, t1, max_steps
        self.records = [list(rs) for rs in records]
        self.num_chunks = 0
        running = np.array([bool(_host(s.running)) for s in states])
        steps = np.array([int(_host(s.num_steps)) for s in states])
        self._latest = Lanes(
            states=tuple(states),
            running=running,
            steps=steps,
            t=np.array([float(_host(s.t)) for s in states]),
            version=0,
        )
        self.out_of_steps = running & (steps >= max_steps)
        # members still to run, in order; a lane takes the first
        self._pending = collections.deque(
            int(i) for i in np.flatnonzero(running & (steps < max_steps))
        )
        # (version of the snapshot that holds the chunk, member, crossing)
        self._crossings: list[tuple[int, int, Crossing]] = []
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._first_chunk = threading.Event()
        self._error: BaseException | None = None
        self._threads: list[threading.Thread] = []
        self._alive = 0

    @property
    def initial(self) -> Lanes:
        return self._latest

    # -- the lanes (worker threads) ---------------------------------------------

    def _start(self) -> None:
        self._alive = len(self.devices)
        for k, device in enumerate(self.devices):
            thread = threading.Thread(
                target=self._lane, args=(k, device), name=f"gradflow-lane-{k}",
                daemon=True,
            )  # fmt: skip
            self._threads.append(thread)
            thread.start()

    def _next_member(self) -> int | None:
        with self._cond:
            if self._stop.is_set() or not self._pending:
                return None
            return self._pending.popleft()

    def _lane(self, k: int, device) -> None:
        try:
            if k > 0:
                # lane 0 traces the chunk first; the others take its trace
                # from JAX's cache (`_chunk_for`)
                self._first_chunk.wait()
            context, chunk = _chunk_for(device)
            with context:
                ts, t1 = _put(self.ts, device), _put(self.t1, device)
                while (i := self._next_member()) is not None:
                    self._run_member(i, device, chunk, ts, t1)
        except BaseException as e:  # noqa: BLE001  (raised again by the driver)
            with self._cond:
                if self._error is None:
                    self._error = e
                self._stop.set()
        finally:
            self._first_chunk.set()
            with self._cond:
                self._alive -= 1
                self._cond.notify_all()

    def _run_member(self, i: int, device, chunk, ts, t1) -> None:
        spec = _put(self.specs[i], device)
        problem = _put(self.setups[i].problem_dt, device)
        state = _put(self._latest.states[i], device)
        while not self._stop.is_set():
            state = chunk(spec, problem, ts, t1, state)
            running, steps = bool(_host(state.running)), int(_host(state.num_steps))
            state, crossings = read_buffer(
                state, empty=lambda ws: _emptied(ws, device), member=i
            )
            self._first_chunk.set()
            self._publish(i, state, running, steps, crossings)
            if not running or steps >= self.max_steps:
                return

    def _publish(self, i, state, running, steps, crossings) -> None:
        with self._cond:
            old = self._latest
            states = list(old.states)
            states[i] = state
            flags, counts, times = old.running.copy(), old.steps.copy(), old.t.copy()
            flags[i], counts[i], times[i] = running, steps, float(_host(state.t))
            self._latest = Lanes(tuple(states), flags, counts, times, old.version + 1)
            self._crossings.extend((old.version + 1, i, c) for c in crossings)
            self.num_chunks += 1
            self._cond.notify_all()

    def close(self) -> None:
        """Stops the lanes after their current chunks and waits for them."""
        self._stop.set()
        for thread in self._threads:
            thread.join()

    # -- the driver's side --------------------------------------------------------

    def running(self, state: Lanes) -> bool:
        self.out_of_steps = state.running & (state.steps >= self.max_steps)
        return bool((state.running & ~self.out_of_steps).any())

    def advance(self, state: Lanes) -> Lanes:
        if not self._threads:
            self._start()
        with self._cond:
            while (
                self._latest.version == state.version
                and self._alive > 0
                and self._error is None
            ):
                # (a timeout: Ctrl-C's handler runs between waits)
                self._cond.wait(0.2)
            if self._error is not None:
                raise self._error
            return self._latest

    def collect(self, state: Lanes):
        """The crossings of the chunks `state` holds, and only those: a lane
        may have finished another chunk since `advance` returned `state`, and
        its crossings belong to the next snapshot (a checkpoint of `state`
        holding them would find them again on resuming, twice)."""
        with self._cond:
            taken = [x for x in self._crossings if x[0] <= state.version]
            self._crossings = [x for x in self._crossings if x[0] > state.version]
        for _, i, crossing in taken:
            problem = self.setups[i].problem_dt
            self.records[i].append(event_record(self.observers[i], crossing, problem))
        return state, bool(taken)

    def progress(self, state: Lanes):
        done = float(np.minimum(state.t, self.t1_value).sum())
        return (
            done,
            f"{int((state.running & (state.steps < self.max_steps)).sum())} running",
        )

    @property
    def t1_value(self) -> float:
        return float(_host(self.t1))

    def host_state(self, state: Lanes) -> Any:
        """Every member's state as NumPy arrays, stacked in member order."""
        return stack([jax.tree.map(_host, s) for s in state.states])

    def snapshot(self, state: Lanes):
        host_state = self.host_state(state)
        meta = {
            "t_now": [float(t) for t in state.t],
            "events": [[r.to_dict() for r in rs] for rs in self.records],
        }
        return meta, pack_tree("state", host_state)


__all__ = ["LaneJob", "Lanes"]
