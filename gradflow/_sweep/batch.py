r"""A sweep's members on the devices: stacked, sharded, advanced together by one
compiled chunk, and driven by the host like any other run (`driver.py`).

The members' loop states, problems and step-size controllers (their
`rtol`/`atol` arrays, and each observer's loss scale) are stacked along a
leading *member axis*, padded to a multiple of the device count by repeating
member 0, and sharded over a one-dimensional device mesh. One chunk runs
`run_chunk` inside `shard_map`: on each device its members go `batch_size` at
a time under `jax.vmap`, the groups one after another (`jax.lax.map`); each
device loops only as long as one of its own members needs steps, and a
member that has finished or failed is returned unchanged.

Members are dealt to the devices in turn (member `i` to device `i % D`), so
that each device gets a share of every problem of the sweep (members of one
problem take similar numbers of steps; neighbours in the sweep's C order are
seeds of one problem): on a CPU whose cores are host devices, each core then
has about the same work.
"""

import dataclasses
import functools
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from .._core.records import EventRecord
from .._event.watch import WatchState, empty_buffer
from .._flow.flow import event_record
from .._loop.checkpoint import Checkpointer, pack_tree
from .._loop.driver import Job
from .._loop.loop import (
    Crossing,
    init_state,
    restore_state,
    run_chunk,
    save_buffer_times,
)


_AXIS = "members"


# -- host <-> devices ----------------------------------------------------------


def to_host(tree):
    """A (possibly multi-host) sharded pytree as NumPy arrays, whole on every
    process."""
    if jax.process_count() == 1:
        return jax.tree.map(np.asarray, tree)
    from jax.experimental import multihost_utils

    return jax.tree.map(np.asarray, multihost_utils.process_allgather(tree, tiled=True))


def _put(tree, sharding):
    """Host arrays (the same on every process) as global arrays with
    `sharding` (each process places its own shards)."""

    def one(x):
        x = np.asarray(x)
        return jax.make_array_from_callback(x.shape, sharding, lambda idx: x[idx])

    return jax.tree.map(one, tree)


def _agree(flags: np.ndarray) -> np.ndarray:
    """Host decisions taken by process 0 and followed by all (checkpoint due,
    interrupt), so every process makes the same collective calls."""
    if jax.process_count() == 1:
        return flags
    from jax.experimental import multihost_utils

    return np.asarray(multihost_utils.broadcast_one_to_all(flags))


def stack(trees):
    """PyTrees of equal structure stacked along a new leading axis (NumPy)."""
    return jax.tree.map(lambda *xs: np.stack([np.asarray(x) for x in xs]), *trees)


def _tree_where(mask, new, old):
    return jax.tree.map(
        lambda a, b: jnp.where(
            mask.reshape(mask.shape + (1,) * (a.ndim - mask.ndim)), a, b
        ),
        new,
        old,
    )


# -- the compiled chunk ---------------------------------------------------------


class _Lanes(eqx.Module):
    """What each member brings to one chunk, stacked along the member axis:
    the array part of its `Spec` (its `rtol`/`atol`, its observer's scale),
    its problem, whether it still runs, and its loop state."""

    spec: Any
    problem: Any
    active: Any
    state: Any


def _advance(statics, lanes: _Lanes, ts, t1):
    """One chunk for one member (`vmap`ped): inactive members (finished, out
    of steps, padding) are returned unchanged. `statics` is the non-array
    part of the spec and of the problem (a problem's callables, strings,
    flags), the same for every member."""
    spec_static, problem_static = statics
    spec = eqx.combine(lanes.spec, spec_static)
    problem = eqx.combine(lanes.problem, problem_static)
    state = lanes.state
    # The host has read the previous chunk's events: empty the buffer.
    ws = state.solver_state
    if isinstance(ws, WatchState):
        state = eqx.tree_at(lambda s: s.solver_state, state, empty_buffer(ws))
    t_end = jnp.where(lanes.active, t1, state.t)
    new = run_chunk(spec, problem, ts, t_end, state)
    return _tree_where(lanes.active, new, state)


def _per_device(statics, batch_size: int, lanes: _Lanes, ts, t1):
    """One chunk for a device's members: `batch_size` of them at a time under
    `vmap`, the groups one after another (`lax.map`); all at once when
    `batch_size` covers them, one by one (no `vmap` at all) when it is 1."""
    n_local = jax.tree.leaves(lanes)[0].shape[0]
    advance = functools.partial(_advance, statics, ts=ts, t1=t1)
    if batch_size >= n_local:
        return jax.vmap(advance)(lanes)
    if batch_size == 1:
        # not `batch_size=1`: with it lax.map would still `vmap` each member
        # (over an axis of one), a batched loop instead of the solo one
        return jax.lax.map(advance, lanes)
    return jax.lax.map(advance, lanes, batch_size=batch_size)


@eqx.filter_jit
def _step(statics, mesh, lanes: _Lanes, ts, t1, *, batch_size: int):
    """The batched chunk: each device advances its own members (see
    `_per_device`) inside `shard_map` over the mesh, so each device loops
    only while its own members need steps. Static parts (solver, chunk size,
    the problem's non-array fields, mesh, batch size) are the compile key: a second sweep of the same shapes
    reuses the compiled chunk."""
    m, r = PartitionSpec(_AXIS), PartitionSpec()
    return jax.shard_map(
        functools.partial(_per_device, statics, batch_size),
        mesh=mesh,
        in_specs=(m, r, r),
        out_specs=m,
        check_vma=False,
    )(lanes, ts, t1)


# -- the batch -----------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Batch:
    """The members on the devices: specs, problems and initial loop states
    stacked along the member axis, padded, sharded over the mesh; and what a
    checkpoint brought back."""

    n: int  # members, without the padding
    n_pad: int
    position: np.ndarray  # (n,): where member i sits along the member axis
    mesh: Mesh
    sharded: NamedSharding
    spec_static: Any
    spec: Any
    problem_static: Any  # the problem's non-array fields (every member's)
    problem: Any  # its array fields, stacked
    state: Any
    ts: Any
    t1: Any
    records: list[list[EventRecord]]  # events read so far, per member
    resumed_from: list[float] | None

    def by_member(self, tree):
        """Host arrays along the member axis (a pytree), in member order and
        without the padding."""
        return jax.tree.map(lambda x: np.asarray(x)[self.position], tree)

    def lanes(self, active: np.ndarray, state) -> _Lanes:
        """The inputs of one chunk: `active` (in member order) says which
        members step."""
        mask = np.zeros(self.n + self.n_pad, bool)
        mask[self.position] = active
        return _Lanes(
            spec=self.spec,
            problem=self.problem,
            active=_put(mask, self.sharded),
            state=state,
        )


def member_positions(n: int, num_devices: int) -> np.ndarray:
    """Where each of `n` members sits along the member axis of a batch sharded
    over `num_devices` devices (equal contiguous shares): member `i` on device
    `i % num_devices`, in its slot `i // num_devices`. One device: in order."""
    per_device = -(-n // num_devices)
    i = np.arange(n)
    return (i % num_devices) * per_device + i // num_devices


def build_batch(setups, specs, devices, ckpt: Checkpointer | None) -> Batch:
    """The members' specs, problems and initial states (or the checkpoint's
    states), stacked, padded and put on the devices. Every member's problem
    has the structure of the first's (checked by the sweep)."""
    n = len(setups)
    n_pad = -n % len(devices)
    position = member_positions(n, len(devices))
    # which member's data fills each slot (padding: member 0's, inactive)
    order = np.zeros(n + n_pad, np.int64)
    order[position] = np.arange(n)
    _, spec_static = eqx.partition(specs[0], eqx.is_array)
    spec_dyn = stack([eqx.partition(specs[i], eqx.is_array)[0] for i in order])
    # the first member's structure and non-array fields (equal for every
    # member: checked by the sweep), every member's arrays
    _, problem_static = eqx.partition(setups[0].problem_dt, eqx.is_array)
    problems = stack(
        [eqx.partition(setups[i].problem_dt, eqx.is_array)[0] for i in order]
    )
    first = setups[0]
    # a bucketed save buffer, as in a solo flow
    ts_j = save_buffer_times(
        specs[0], first.ts, first.params0, first.problem_dt, first.dtype
    )
    t0_j, t1_j = jnp.asarray(0.0, first.dtype), jnp.asarray(first.t1, first.dtype)
    host_state = stack(
        [
            init_state(
                specs[i],
                y0=setups[i].params0,
                args=setups[i].problem_dt,
                t0=t0_j,
                t1=t1_j,
                ts=ts_j,
            )  # fmt: skip
            for i in range(n)
        ]
    )
    records: list[list[EventRecord]] = [[] for _ in range(n)]
    resumed_from = None
    if ckpt is not None and ckpt.state is not None:
        meta = ckpt.state[0]
        host_state = restore_state(ckpt, host_state)
        records = [[EventRecord.from_dict(r) for r in rs] for rs in meta["events"]]
        resumed_from = [float(t) for t in np.asarray(host_state.t)]

    mesh = Mesh(np.asarray(devices), (_AXIS,))
    sharded = NamedSharding(mesh, PartitionSpec(_AXIS))
    replicated = NamedSharding(mesh, PartitionSpec())
    return Batch(
        n=n,
        n_pad=n_pad,
        position=position,
        mesh=mesh,
        sharded=sharded,
        spec_static=spec_static,
        spec=_put(spec_dyn, sharded),
        problem_static=problem_static,
        problem=_put(problems, sharded),
        state=_put(jax.tree.map(lambda x: np.asarray(x)[order], host_state), sharded),
        ts=_put(np.asarray(ts_j), replicated),
        t1=_put(np.asarray(t1_j), replicated),
        records=records,
        resumed_from=resumed_from,
    )


# -- driving it ----------------------------------------------------------------


class SweepJob(Job):
    """A sweep's chunks for the driver: while any member is active (still at
    a chunk boundary, under `max_steps`), advance the batch; read each
    member's located events; checkpoint every member's state."""

    def __init__(self, batch: Batch, setups, observers, *, batch_size: int):
        self.batch, self.setups, self.observers = batch, setups, observers
        self.batch_size = batch_size
        self.records = [list(rs) for rs in batch.records]
        n = batch.n
        self.active = np.zeros(n, bool)
        self.out_of_steps = np.zeros(n, bool)
        self.t1 = setups[0].t1
        self.max_steps = setups[0].max_steps

    def running(self, state) -> bool:
        running, steps = self.batch.by_member(to_host((state.running, state.num_steps)))
        # Out of steps: still at a chunk boundary with max_steps taken
        # (recomputed each time: a resumed sweep may raise max_steps).
        running = np.asarray(running, bool)
        self.out_of_steps = running & (steps >= self.max_steps)
        self.active = running & ~self.out_of_steps
        return bool(self.active.any())

    def advance(self, state):
        b = self.batch
        lanes = b.lanes(self.active, state)
        statics = (b.spec_static, b.problem_static)
        return _step(statics, b.mesh, lanes, b.ts, b.t1, batch_size=self.batch_size)

    def collect(self, state):
        """Reads the chunk's located events into `records` (the devices empty
        the buffers at the start of the next chunk)."""
        ws = state.solver_state
        if not isinstance(ws, WatchState):
            return state, False
        count, lost = self.batch.by_member(to_host((ws.count, ws.lost)))
        if (lost > 0).any():
            i = int(np.flatnonzero(lost > 0)[0])
            raise RuntimeError(
                f"member {i}: more than {ws.t.shape[-1]} events fired within one "
                "chunk of steps; a condition is chattering around its threshold"
            )
        if not count.any():
            return state, False
        t_buf, i_buf, y_buf = self.batch.by_member(to_host((ws.t, ws.index, ws.y)))
        for i in np.flatnonzero(count):
            for j in range(int(count[i])):
                y = jax.tree.map(lambda x, i=i, j=j: x[i, j], y_buf)
                crossing = Crossing(float(t_buf[i, j]), int(i_buf[i, j]), y)
                problem = self.setups[i].problem_dt
                self.records[i].append(
                    event_record(self.observers[i], crossing, problem)
                )
        return state, True

    def progress(self, state):
        t_now = self.batch.by_member(to_host(state.t))
        return float(
            np.minimum(t_now, self.t1).sum()
        ), f"{int(self.active.sum())} running"

    def snapshot(self, state):
        host_state = self.batch.by_member(to_host(state))
        meta = {
            "t_now": [float(t) for t in host_state.t],
            "events": [[r.to_dict() for r in rs] for rs in self.records],
        }
        return meta, pack_tree("state", host_state)

    def agree(self, flags):
        return _agree(flags)

    @property
    def writes(self) -> bool:
        return jax.process_index() == 0


__all__ = ["Batch", "SweepJob", "build_batch", "member_positions", "stack", "to_host"]
