r"""`gradflow.sweep`: many gradient flows in one call, batched with `vmap` on a
device and sharded over devices and hosts (SPEC section 10).

Every member of a sweep is validated and prepared exactly as
[`gradflow.integrate`][] prepares a solo call (same initial point, same
default tolerances, same [`gradflow._loop.Spec`][]); then the members' loop
states, chains and step-size controllers (their `rtol`/`atol` arrays) are
stacked along a leading *member axis* and advanced together: one compiled
chunk of `run_chunk`, inside `shard_map` over a one-dimensional device mesh.
On each device its members go `batch_size` at a time through `run_chunk`
under `jax.vmap`, the groups one after another (`jax.lax.map`): all of them
at once on a GPU or TPU (the default there), one by one on a CPU (the default
there: a CPU has no idle vector lanes for a batch to fill). Each device loops
only as long as one of its own members needs steps; a member that has
finished or failed is returned unchanged by `run_chunk`: one by one it costs
nothing, in a batch it costs the padding (its lanes of the vectorised step
are computed and discarded). After the solve each member's
[`gradflow.Trajectory`][] is built by the same code as a solo call's.

What is batched: the solve (all members' steps, step sizes, error control and
event location run in one compiled loop per device). What is not: members
share `d`, `width`, the solver, the save times `ts`, `t1` and `max_steps`;
the stage detection after the solve and the reading of located events run on
the host, member by member.
"""

import dataclasses
import functools
import os
import time
from collections.abc import Sequence
from typing import Any

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from . import _loop
from ._chain import MarkovChain
from ._checkpoint import (
    Checkpointer,
    Interrupted,
    check_every,
    check_path,
    deferred_interrupt,
    pack_tree,
    unpack_tree,
)
from ._errors import is_number, show
from ._integrate import (
    DEFAULT_CHECKPOINT_EVERY,
    DEFAULT_MAX_STEPS,
    DEFAULT_T1,
    MAX_SAVED_ATTENTION_D,
    build_trajectory,
    check_events,
    check_thresholds,
    event_record,
    prepare,
    solve_settings,
    solve_spec,
)
from ._loop import Crossing, Driven, init_state, padded_save_times
from ._model import AnyParams, Params, param_arrays
from ._observe import Observer
from ._progress import host_progress
from ._records import EventRecord
from ._sweep_result import RESERVED_COLUMNS, Member, Sweep
from ._validate import check_init_scale, check_integer, check_seed
from ._variants import Model, VariantParams
from ._watch import WatchState, empty_buffer


CHECKPOINT_LAYOUT = "sweep-state-2"
_AXIS = "members"


# -- validation (nothing here touches JAX) -------------------------------------


def _check_chains(chains) -> tuple[MarkovChain, ...]:
    if isinstance(chains, MarkovChain):
        return (chains,)
    if isinstance(chains, (str, bytes)) or not isinstance(chains, Sequence):
        raise TypeError(
            "chains must be a gradflow.MarkovChain or a sequence of them, got "
            f"{type(chains).__name__}"
        )
    chains = tuple(chains)
    if not chains:
        raise ValueError("chains must hold at least one chain, got an empty sequence")
    for i, c in enumerate(chains):
        if not isinstance(c, MarkovChain):
            raise TypeError(
                f"chains[{i}] must be a gradflow.MarkovChain, got {type(c).__name__}"
            )
        if c.d != chains[0].d:
            raise ValueError(
                f"the chains of a sweep must share d: chains[{i}] has d = {c.d}, "
                f"chains[0] has d = {chains[0].d} (sweep each d separately)"
            )
    return chains


def _as_list(name: str, value, check) -> tuple:
    """A scalar or a non-empty sequence of scalars, each passed through
    `check` (whose error is re-raised naming the entry)."""
    if isinstance(value, (str, bytes, dict)):
        raise TypeError(
            f"{name} must be a number or a sequence of them, got {show(value)}"
        )
    if np.ndim(value) == 0 and not isinstance(value, (list, tuple, range)):
        return (check(value),)
    values = (
        list(np.asarray(value).tolist()) if hasattr(value, "shape") else list(value)
    )
    if not values:
        raise ValueError(f"{name} must hold at least one value, got an empty sequence")
    out = []
    for i, v in enumerate(values):
        try:
            out.append(check(v))
        except (TypeError, ValueError) as e:
            raise type(e)(f"{name}[{i}]: {e}") from None
    seen = set()
    for i, v in enumerate(out):
        if v in seen:
            raise ValueError(f"{name} has the value {v!r} twice (at index {i})")
        seen.add(v)
    return tuple(out)


def _check_labels(labels, n_chains: int) -> dict[str, tuple]:
    if labels is None:
        return {}
    if not isinstance(labels, dict):
        raise TypeError(
            "labels must be a dict of name -> one value per chain, e.g. "
            f"{{'delta': deltas}}, got {type(labels).__name__}"
        )
    out = {}
    for name, values in labels.items():
        if not isinstance(name, str) or not name:
            raise TypeError(f"labels keys must be non-empty strings, got {name!r}")
        if name in RESERVED_COLUMNS:
            raise ValueError(
                f"labels key {name!r} is a column of the sweep's table; choose "
                "another name"
            )
        if isinstance(values, (str, bytes)) or np.ndim(values) != 1:
            raise TypeError(
                f"labels[{name!r}] must be a sequence of one value per chain, got "
                f"{show(values)}"
            )
        values = (
            list(np.asarray(values).tolist())
            if hasattr(values, "shape")
            else list(values)
        )
        if len(values) != n_chains:
            raise ValueError(
                f"labels[{name!r}] has {len(values)} values for {n_chains} chains"
            )
        for i, v in enumerate(values):
            if not (is_number(v) or isinstance(v, str)):
                raise TypeError(
                    f"labels[{name!r}][{i}] must be a number or a string, got {show(v)}"
                )
        out[name] = tuple(
            float(v) if is_number(v) and not isinstance(v, (int, np.integer)) else v
            for v in values
        )
    return out


def _check_devices(devices) -> tuple:
    if devices is None:
        return tuple(jax.devices())
    if isinstance(devices, jax.Device):
        return (devices,)
    try:
        devices = tuple(devices)
    except TypeError:
        raise TypeError(
            f"devices must be a sequence of jax devices or None, got {show(devices)}"
        ) from None
    if not devices:
        raise ValueError("devices must hold at least one device, got an empty sequence")
    for i, dev in enumerate(devices):
        if not isinstance(dev, jax.Device):
            raise TypeError(f"devices[{i}] must be a jax Device, got {show(dev)}")
    if len(set(devices)) != len(devices):
        raise ValueError(f"devices lists a device twice: {show(devices)}")
    return devices


def _check_param_batch(params, d: int) -> int:
    """The number of starting points in a batch of `params` (leading axis)."""
    if not isinstance(params, (Params, VariantParams)):
        raise TypeError(
            "params must be a gradflow.Params or gradflow.VariantParams with a "
            f"leading member axis, got {type(params).__name__}"
        )
    shapes = {n: np.shape(v) for n, v in param_arrays(params).items()}
    if len(shapes["W0"]) != 3:
        raise ValueError(
            f"params.W0 must be 3-dimensional (members, ...), got shape "
            f"{shapes['W0']}; give one starting point to gf.integrate, or stack "
            "starting points"
        )
    # a 0-dimensional array has no member axis: -1 never matches W0's size
    sizes = {s[0] if s else -1 for s in shapes.values()}
    if len(sizes) != 1:
        raise ValueError(
            f"params' leading (member) axes differ: {', '.join(f'{n}: {s[0] if s else None}' for n, s in shapes.items())}"
        )
    n = int(sizes.pop())
    if n < 1:
        raise ValueError("params holds no starting point (leading axis of length 0)")
    if shapes["W0"][2] != d:
        raise ValueError(
            f"params are for d = {shapes['W0'][2]} tokens but the chains have d = {d}"
        )
    return n


# -- host <-> devices ----------------------------------------------------------


def _to_host(tree):
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


def _stack(trees):
    return jax.tree.map(lambda *xs: np.stack([np.asarray(x) for x in xs]), *trees)


def _tree_where(mask, new, old):
    return jax.tree.map(
        lambda a, b: jnp.where(
            mask.reshape(mask.shape + (1,) * (a.ndim - mask.ndim)), a, b
        ),
        new,
        old,
    )


class _Lanes(eqx.Module):
    """What each member brings to one chunk, stacked along the member axis:
    the array part of its `Spec` (its `rtol`/`atol`), its chain, whether it
    still runs, and its loop state."""

    spec: Any
    chain: MarkovChain
    active: Any
    state: Any


def _advance(spec_static, lanes: _Lanes, ts, t1):
    """One chunk for one member (`vmap`ped): inactive members (finished, out
    of steps, padding) are returned unchanged."""
    spec = eqx.combine(lanes.spec, spec_static)
    state = lanes.state
    # The host has read the previous chunk's events: empty the buffer.
    ws = state.solver_state
    if isinstance(ws, WatchState):
        state = eqx.tree_at(lambda s: s.solver_state, state, empty_buffer(ws))
    t_end = jnp.where(lanes.active, t1, state.t)
    new = _loop.run_chunk(spec, lanes.chain, ts, t_end, state)
    return _tree_where(lanes.active, new, state)


def _per_device(spec_static, batch_size: int, lanes: _Lanes, ts, t1):
    """One chunk for a device's members: `batch_size` of them at a time under
    `vmap`, the groups one after another (`lax.map`); all at once when
    `batch_size` covers them, one by one (no `vmap` at all) when it is 1."""
    n_local = jax.tree.leaves(lanes)[0].shape[0]
    advance = functools.partial(_advance, spec_static, ts=ts, t1=t1)
    if batch_size >= n_local:
        return jax.vmap(advance)(lanes)
    if batch_size == 1:
        # not `batch_size=1`: with it lax.map would still `vmap` each member
        # (over an axis of one), a batched loop instead of the solo one
        return jax.lax.map(advance, lanes)
    return jax.lax.map(advance, lanes, batch_size=batch_size)


@eqx.filter_jit
def _step(spec_static, mesh, lanes: _Lanes, ts, t1, *, batch_size: int):
    """The batched chunk: each device advances its own members (see
    `_per_device`) inside `shard_map` over the mesh, so each device loops
    only while its own members need steps. Static parts (solver, chunk size,
    mesh, batch size) are the compile key: a second sweep of the same shapes
    reuses the compiled chunk."""
    m, r = PartitionSpec(_AXIS), PartitionSpec()
    return jax.shard_map(
        functools.partial(_per_device, spec_static, batch_size),
        mesh=mesh,
        in_specs=(m, r, r),
        out_specs=m,
        check_vma=False,
    )(lanes, ts, t1)


# -- validation and preparation ----------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Plan:
    """A sweep's members, checked and prepared (nothing compiled yet)."""

    chains: tuple[MarkovChain, ...]
    chain_labels: dict[str, tuple]
    given_params: bool
    members: tuple[Member, ...]
    setups: tuple[Any, ...]  # one `gradflow._integrate.prepare` per member
    observer: Observer
    save_attention: bool
    devices: tuple
    batch_size: int  # members of a device stepped together under `vmap`
    checkpoint: Any
    checkpoint_every: float

    @property
    def first(self):
        """The first member's setup: what all members share (`ts`, `t1`,
        `dtype`, `max_steps`)."""
        return self.setups[0]


def _member_axes(chains, init_scale, params, seeds) -> list[tuple]:
    """`(chain, init_scale, seed, start)` of every member, in C order: random
    starts (`start` is `None`) or given ones (`init_scale`, `seed` `None`)."""
    if params is not None:
        if init_scale is not None:
            raise ValueError(
                "give exactly one of init_scale (random starts) and params (given "
                f"starts), got init_scale={init_scale!r} and params=..."
            )
        if not (
            isinstance(seeds, (int, np.integer))
            and not isinstance(seeds, bool)
            and seeds == 0
        ):
            raise ValueError(
                f"seeds has no effect with given params; leave it at 0, got seeds = {show(seeds)}"
            )
        n_params = _check_param_batch(params, chains[0].d)
        return [(c, None, None, k) for c in range(len(chains)) for k in range(n_params)]
    if init_scale is None:
        raise ValueError(
            "give exactly one of init_scale (random starts) and params (given "
            "starts), got init_scale=None and params=None"
        )
    scales = _as_list("init_scale", init_scale, check_init_scale)
    seed_list = _as_list("seeds", seeds, check_seed)
    return [
        (c, k, s, None) for c in range(len(chains)) for k in scales for s in seed_list
    ]


def _prepare_members(chains, axes, params, chain_labels, solo: dict):
    """`(setups, members)`: every member prepared as a solo integrate call
    with the arguments `solo` prepares it (the shared arguments are checked by
    the first one, before any member is drawn)."""
    setups, members = [], []
    for i, (c, scale, seed, k) in enumerate(axes):
        point = None if k is None else jax.tree.map(lambda x, k=k: x[k], params)
        try:
            setup = prepare(
                chains[c], init_scale=scale, params=point,
                seed=0 if seed is None else seed, **solo,
            )  # fmt: skip
        except (TypeError, ValueError) as e:
            if i == 0:
                raise
            raise type(e)(f"member {i}: {e}") from None
        setups.append(setup)
        members.append(
            Member(
                index=i,
                chain=c,
                init_scale=scale,
                seed=seed,
                start=k,
                labels={name: v[c] for name, v in chain_labels.items()},
            )
        )
    return tuple(setups), tuple(members)


def _prepare(
    chains,
    *,
    init_scale,
    params,
    seeds,
    labels,
    devices,
    stages,
    events,
    thresholds,
    save_attention,
    checkpoint,
    checkpoint_every,
    batch_size,
    solo: dict,
) -> _Plan:
    """Checks every argument of `sweep` (in the order of its errors) and
    prepares every member."""
    chains = _check_chains(chains)
    d = chains[0].d
    chain_labels = _check_labels(labels, len(chains))
    axes = _member_axes(chains, init_scale, params, seeds)
    devices = _check_devices(devices)
    events = check_events(events)
    thresholds = check_thresholds(thresholds)
    checkpoint = check_path(checkpoint)
    checkpoint_every = check_every(checkpoint_every)
    if batch_size is not None:
        batch_size = check_integer("batch_size", batch_size, least=1)
    if save_attention is None:
        save_attention = d <= MAX_SAVED_ATTENTION_D
    observer = Observer(stages=bool(stages), thresholds=thresholds, events=events)
    setups, members = _prepare_members(chains, axes, params, chain_labels, solo)
    per_device = -(-len(setups) // len(devices))
    if batch_size is None:
        # A CPU has no idle vector lanes for a batch to fill: there a member
        # costs only its own steps when the members go one by one.
        on_cpu = all(dev.platform == "cpu" for dev in devices)
        batch_size = 1 if on_cpu else per_device
    return _Plan(
        chains=chains,
        chain_labels=chain_labels,
        given_params=params is not None,
        members=members,
        setups=setups,
        observer=observer,
        save_attention=bool(save_attention),
        devices=devices,
        batch_size=min(batch_size, per_device),
        checkpoint=checkpoint,
        checkpoint_every=checkpoint_every,
    )


def _settings(plan: _Plan) -> tuple[list[dict], dict]:
    """`(settings of each member, settings of the sweep)`."""
    settings_of = [
        solve_settings(s, plan.observer, plan.save_attention) for s in plan.setups
    ]
    members, setups = plan.members, plan.setups
    random = not plan.given_params
    sweep_settings = {
        **{
            k: v
            for k, v in settings_of[0].items()
            if k not in ("init_scale", "seed", "rtol", "atol")
        },
        "num_members": len(setups),
        "num_chains": len(plan.chains),
        "init_scale": [m.init_scale for m in members] if random else None,
        "seeds": (
            sorted({m.seed for m in members if m.seed is not None}) if random else None
        ),
        "rtol": [s.rtol for s in setups],
        "atol": [s.atol for s in setups],
        "labels": {k: list(v) for k, v in plan.chain_labels.items()},
    }
    return settings_of, sweep_settings


def _checkpointer(plan: _Plan, sweep_settings: dict) -> Checkpointer | None:
    """The sweep's checkpoint file (loaded if it exists), or `None`."""
    if plan.checkpoint is None:
        return None
    inputs = {
        "P": np.stack([np.asarray(c.P) for c in plan.chains]),
        "pi": np.stack([np.asarray(c.pi) for c in plan.chains]),
        "ts": plan.first.ts,
        **pack_tree("params0", _stack([s.params0 for s in plan.setups])),
    }
    return Checkpointer(
        plan.checkpoint,
        "sweep",
        dict(sweep_settings, layout=CHECKPOINT_LAYOUT),
        inputs,
        plan.checkpoint_every,
    )


# -- the batch -----------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Batch:
    """The members on the devices: specs (`rtol`/`atol` arrays per member),
    chains and initial loop states stacked along the member axis, padded to
    a multiple of the device count by repeating member 0, sharded over the
    mesh; and what a checkpoint brought back."""

    n: int  # members, without the padding
    n_pad: int
    mesh: Mesh
    sharded: NamedSharding
    spec_static: Any
    spec: Any
    chain: MarkovChain
    state: Any
    ts: Any
    t1: Any
    records: list[list[EventRecord]]  # events read so far, per member
    resumed_from: list[float] | None

    def lanes(self, active: np.ndarray, state) -> _Lanes:
        """The inputs of one chunk: `active` says which members step."""
        mask = np.concatenate([active, np.zeros(self.n_pad, bool)])
        return _Lanes(
            spec=self.spec,
            chain=self.chain,
            active=_put(mask, self.sharded),
            state=state,
        )


def _build_batch(plan: _Plan, ckpt: Checkpointer | None) -> _Batch:
    """The members' specs, chains and initial states (or the checkpoint's
    states), stacked, padded and put on the devices."""
    setups, observer = plan.setups, plan.observer
    n = len(setups)
    n_pad = -n % len(plan.devices)
    order = list(range(n)) + [0] * n_pad
    specs = [solve_spec(s, observer) for s in setups]
    _, spec_static = eqx.partition(specs[0], eqx.is_array)
    spec_dyn = _stack([eqx.partition(specs[i], eqx.is_array)[0] for i in order])
    chain0 = plan.chains[0]
    ref = MarkovChain(np.asarray(chain0.P), pi=np.asarray(chain0.pi))
    chain_def = jax.tree.structure(ref)
    args = jax.tree.unflatten(
        chain_def,
        [
            np.stack([np.asarray(leaf) for leaf in group])
            for group in zip(*(jax.tree.leaves(setups[i].chain_dt) for i in order))
        ],
    )
    first = plan.first
    # a bucketed save buffer, as in `integrate` (`padded_save_times`)
    ts_j = jnp.asarray(padded_save_times(first.ts), first.dtype)
    t0_j, t1_j = jnp.asarray(0.0, first.dtype), jnp.asarray(first.t1, first.dtype)
    host_state = _stack(
        [
            init_state(
                specs[i],
                y0=setups[i].params0,
                args=setups[i].chain_dt,
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
        meta, arrays = ckpt.state
        host_state = unpack_tree("state", arrays, host_state)
        records = [[EventRecord.from_dict(r) for r in rs] for rs in meta["events"]]
        resumed_from = [float(t) for t in np.asarray(host_state.t)]

    mesh = Mesh(np.asarray(plan.devices), (_AXIS,))
    sharded = NamedSharding(mesh, PartitionSpec(_AXIS))
    replicated = NamedSharding(mesh, PartitionSpec())
    pad = np.asarray(order)
    return _Batch(
        n=n,
        n_pad=n_pad,
        mesh=mesh,
        sharded=sharded,
        spec_static=spec_static,
        spec=_put(spec_dyn, sharded),
        chain=_put(args, sharded),
        state=_put(jax.tree.map(lambda x: np.asarray(x)[pad], host_state), sharded),
        ts=_put(np.asarray(ts_j), replicated),
        t1=_put(np.asarray(t1_j), replicated),
        records=records,
        resumed_from=resumed_from,
    )


# -- running it ----------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Outcome:
    """Where the solve stopped: the members' final loop states (on the host,
    padding dropped), their events, and why it stopped."""

    state: Any
    records: list[list[EventRecord]]
    out_of_steps: np.ndarray
    interrupted: bool
    num_chunks: int


def _read_events(state, plan: _Plan, records: list[list[EventRecord]]) -> np.ndarray:
    """Reads the chunk's located events into `records` (host side); returns
    which members had any."""
    n = len(plan.setups)
    ws = state.solver_state
    if not isinstance(ws, WatchState):
        return np.zeros(n, bool)
    count, lost = _to_host((ws.count, ws.lost))
    count, lost = count[:n], lost[:n]
    if (lost > 0).any():
        i = int(np.flatnonzero(lost > 0)[0])
        raise RuntimeError(
            f"member {i}: more than {ws.t.shape[-1]} events fired within one "
            "chunk of steps; a condition is chattering around its threshold"
        )
    if not count.any():
        return count > 0
    t_buf, i_buf, y_buf = _to_host((ws.t, ws.index, ws.y))
    for i in np.flatnonzero(count):
        for j in range(int(count[i])):
            y = jax.tree.map(lambda x, i=i, j=j: x[i, j], y_buf)
            crossing = Crossing(float(t_buf[i, j]), int(i_buf[i, j]), y)
            chain = plan.setups[i].chain_dt
            records[i].append(event_record(plan.observer, crossing, chain))
    return count > 0


def _write_checkpoint(ckpt, host_state, records, n: int) -> None:
    """Writes the members' states and events so far (process 0 only)."""
    if jax.process_index() == 0:
        meta = {
            "t_now": [float(t) for t in host_state.t[:n]],
            "events": [[r.to_dict() for r in rs] for rs in records],
        }
        trimmed = jax.tree.map(lambda x: x[:n], host_state)
        assert ckpt is not None
        ckpt.write(meta, pack_tree("state", trimmed))


def _run(plan: _Plan, batch: _Batch, ckpt, *, progress: bool) -> _Outcome:
    """Advances the batch chunk by chunk until no member needs steps (or
    Ctrl-C), reading each chunk's events and writing the checkpoint when one
    is due."""
    n, first, state = batch.n, plan.first, batch.state
    records = [list(rs) for rs in batch.records]
    out_of_steps = np.zeros(n, bool)
    interrupted = False
    num_chunks = 0
    t1 = first.t1
    main = jax.process_index() == 0
    with (
        deferred_interrupt() as interrupt,
        host_progress(
            n * t1, enabled=bool(progress) and main, description=f"sweep of {n}"
        ) as bar,
    ):
        while True:
            result, steps, t_now = _to_host(
                (state.result._value, state.num_steps, state.t)
            )
            # Out of steps: still at a chunk boundary with max_steps taken
            # (recomputed each time: a resumed sweep may raise max_steps).
            running = result[:n] == _RUNNING
            out_of_steps = running & (steps[:n] >= first.max_steps)
            active = running & ~out_of_steps
            bar.update(
                float(np.minimum(t_now[:n], t1).sum()), f"{int(active.sum())} running"
            )
            if not active.any():
                break
            state = _step(
                batch.spec_static,
                batch.mesh,
                batch.lanes(active, state),
                batch.ts,
                batch.t1,
                batch_size=plan.batch_size,
            )
            num_chunks += 1
            fired = _read_events(state, plan, records)
            flags = _agree(
                np.array(
                    [
                        interrupt.requested,
                        ckpt is not None and (fired.any() or ckpt.due()),
                    ]
                )
            )
            if flags[0]:
                interrupted = True
                break
            if flags[1]:
                _write_checkpoint(ckpt, _to_host(state), records, n)
        host_state = jax.tree.map(lambda x: x[:n], _to_host(state))
        if ckpt is not None:
            _write_checkpoint(ckpt, host_state, records, n)
    return _Outcome(
        state=host_state,
        records=records,
        out_of_steps=out_of_steps,
        interrupted=interrupted,
        num_chunks=num_chunks,
    )


# -- the result ----------------------------------------------------------------


def _assemble(
    plan: _Plan, batch: _Batch, outcome: _Outcome, *, settings_of, sweep_settings, start
) -> Sweep:
    """Each member's `Trajectory`, built by the same code as a solo call's,
    and the `Sweep` of them."""
    host_state, resumed_from = outcome.state, batch.resumed_from
    trajs = []
    wall = time.perf_counter() - start
    for i, setup in enumerate(plan.setups):
        member_state = jax.tree.map(lambda x, i=i: jnp.asarray(x[i]), host_state)
        driven = Driven(
            state=member_state,
            crossings=[],
            interrupted=outcome.interrupted,
            out_of_steps=bool(outcome.out_of_steps[i]),
            resumed_from=None if resumed_from is None else resumed_from[i],
            wall_time=wall,
        )
        traj = build_trajectory(
            setup, settings=settings_of[i], observer=plan.observer, driven=driven,
            records=outcome.records[i], save_attention=plan.save_attention,
        )  # fmt: skip
        trajs.append(traj)
    n_saves = plan.first.ts.shape[0]  # the buffer may be longer
    loss = np.where(host_state.filled, host_state.saved["loss"], np.nan)[:, :n_saves]
    stats = {
        "num_members": batch.n,
        "num_devices": len(plan.devices),
        "num_processes": jax.process_count(),
        "padding": batch.n_pad,
        "batch_size": plan.batch_size,
        "num_chunks": outcome.num_chunks,
        "num_steps": [int(x) for x in host_state.num_steps],
        "resumed": resumed_from is not None,
        "wall_time": time.perf_counter() - start,
    }
    return Sweep(
        trajectories=tuple(trajs),
        members=plan.members,
        chains=plan.chains,
        labels=plan.chain_labels,
        ts=np.asarray(plan.first.ts),
        loss=np.asarray(loss),
        settings=sweep_settings,
        stats=stats,
    )


# -- the sweep -----------------------------------------------------------------


def sweep(
    chains: MarkovChain | Sequence[MarkovChain],
    *,
    init_scale: float | Sequence[float] | None = None,
    params: AnyParams | None = None,
    seeds: int | Sequence[int] = 0,
    width: int = 16,
    t1: float = DEFAULT_T1,
    ts=None,
    devices=None,
    labels: dict[str, Sequence] | None = None,
    solver=None,
    rtol: float | None = None,
    atol: float | None = None,
    max_steps: int = DEFAULT_MAX_STEPS,
    progress: bool = True,
    dtype: str = "float64",
    stages: bool = True,
    events: Sequence[Any] = (),
    thresholds: Any = None,
    save_attention: bool | None = None,
    checkpoint: str | os.PathLike | None = None,
    checkpoint_every: float = DEFAULT_CHECKPOINT_EVERY,
    model: Model | None = None,
    batch_size: int | None = None,
) -> Sweep:
    r"""Integrates many gradient flows in one call (SPEC section 10).

    The members are the Cartesian product of `chains`, `init_scale` and
    `seeds` in C order: member `(c * n_init + k) * n_seeds + s` is chain `c`,
    initial scale `k`, seed `s` (`sw.members[i]` says which). Alternatively
    `params` gives a batch of starting points (a [`gradflow.Params`][] with a
    leading member axis): then member `c * n_params + k` starts chain `c` from
    point `k`. Each member is the trajectory [`gradflow.integrate`][] gives
    alone with the same arguments (same initial point, same default
    tolerances); `sw[i]` is that [`gradflow.Trajectory`][].

    All members are solved together: one compiled solve, sharded over
    `devices` (the member axis is padded to a multiple of the device count by
    repeating member 0; the padding is dropped); on each device its members
    go `batch_size` at a time through one `vmap`ped loop (each has its own
    step sizes, events and failure). A member that fails (out of
    steps, non-finite) keeps its partial trajectory and message and does not
    stop the others. Members share `d`, `width`, the solver, `t1` and the save
    times (see `docs/sweeps.md`).

    **Arguments:**

    - `chains`: a [`gradflow.MarkovChain`][] or a sequence of chains of equal `d`.
    - `init_scale`: a number or a sequence (give this or `params`).
    - `params`: starting points with a leading member axis (instead of
      `init_scale` and `seeds`).
    - `seeds`: an int (one seed) or a sequence of seeds, e.g. `range(8)`.
    - `width`, `t1`, `ts`, `solver`, `rtol`, `atol`, `max_steps`, `dtype`,
      `stages`, `events`, `thresholds`, `save_attention`, `model`: as for
      [`gradflow.integrate`][], for every member (`model`: a
      [`gradflow.Model`][], one for the whole sweep; `params` carry theirs).
    - `devices`: the devices to shard the members over (default: all of
      `jax.devices()`, every host's after `jax.distributed.initialize()`).
    - `labels`: names for the chain axis, e.g. `{"delta": deltas}` (one value
      per chain), carried into `sw.members`, `sw.table()` and the plots.
    - `batch_size`: how many of a device's members step together under
      `vmap`; the groups go one after another (`jax.lax.map`). Default: all
      of them on a GPU or TPU; 1 on a CPU, which has no idle vector lanes for
      a batch to fill (a member then costs only its own steps, where in a
      batch it waits, computed and discarded, for the slowest member).
    - `progress`: a progress bar over members x time.
    - `checkpoint`, `checkpoint_every`: one file for the whole sweep, written
      every `checkpoint_every` seconds, after each chunk with events and at
      the end; a killed sweep run again with the same call resumes from it to
      the same result.

    **Returns:** a [`gradflow.Sweep`][].

    **Raises:** `ValueError`/`TypeError` naming the argument and its value for
    bad input, before anything is compiled; [`gradflow.Interrupted`][] on
    Ctrl-C (its `result` is the partial sweep).

    **Example:**

    ```python
    import numpy as np
    import gradflow as gf
    deltas = np.linspace(0, 0.1, 5)
    sw = gf.sweep([gf.chains.sticky(6, 0.5, 0.5, x) for x in deltas],
                  init_scale=1e-3, seeds=range(4), width=8, t1=2000,
                  labels={"delta": deltas})
    sw.table()
    ```
    """
    start = time.perf_counter()
    plan = _prepare(
        chains, init_scale=init_scale, params=params, seeds=seeds, labels=labels,
        devices=devices, stages=stages, events=events, thresholds=thresholds,
        save_attention=save_attention, checkpoint=checkpoint,
        checkpoint_every=checkpoint_every, batch_size=batch_size,
        solo=dict(
            width=width, t1=t1, ts=ts, solver=solver, rtol=rtol, atol=atol,
            max_steps=max_steps, dtype=dtype, model=model,
        ),
    )  # fmt: skip
    settings_of, sweep_settings = _settings(plan)
    ckpt = _checkpointer(plan, sweep_settings)
    batch = _build_batch(plan, ckpt)
    outcome = _run(plan, batch, ckpt, progress=progress)
    result = _assemble(
        plan, batch, outcome, settings_of=settings_of,
        sweep_settings=sweep_settings, start=start,
    )  # fmt: skip
    if outcome.interrupted:
        where = (
            f"; the checkpoint '{ckpt.path}' holds the state: run the same call "
            "again to resume"
            if ckpt is not None
            else "; pass checkpoint=PATH to be able to resume"
        )
        raise Interrupted(
            "sweep interrupted" + where,
            result=result,
            checkpoint=None if ckpt is None else ckpt.path,
        )
    return result


_RUNNING = int(np.asarray(dfx.RESULTS.max_steps_reached._value))

__all__ = ["sweep"]
