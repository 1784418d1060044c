r"""Many gradient flows in one call (SPEC section 10): the members are the
Cartesian product of problems, initial scales and seeds, batched with `vmap`
on a device and sharded over devices and hosts (`sweep_batch.py`).

Every member is validated and prepared exactly as [`gradflow.flow`][] prepares
a solo call (same initial point, same default tolerances, same `Spec`), and
after the solve its [`gradflow.Trajectory`][] is built by the same code as a
solo call's. Members share the problem's class and parameter shapes, the
solver, the save times, `t1` and `max_steps`; the stage analysis after the
solve and the reading of located events run on the host, member by member.
"""

import dataclasses
import os
import time
from collections.abc import Sequence
from typing import Any

import equinox as eqx
import jax
import numpy as np

from .._core.errors import is_number, show
from .._core.validate import check_init_scale, check_integer, check_seed
from .checkpoint import Checkpointer, check_every, check_path, pack_tree
from .driver import drive, interrupted, interrupted_message
from .flow import Outcome, build_trajectory, make_observer, solve_settings, solve_spec
from .problem import Problem
from .setup import check_events, check_thresholds, prepare
from .solving import DEFAULT_CHECKPOINT_EVERY, DEFAULT_MAX_STEPS, DEFAULT_T1
from .sweep_batch import SweepJob, build_batch, stack, to_host
from .sweep_result import RESERVED_COLUMNS, Member, Sweep


CHECKPOINT_LAYOUT = "sweep-state-2"


# -- validation (nothing here touches JAX) -------------------------------------


def check_problems(problems) -> tuple[Problem, ...]:
    """A problem or a non-empty sequence of problems of one class, with equal
    parameter shapes and equal static configuration (one compiled solve)."""
    if isinstance(problems, Problem):
        return (problems,)
    if isinstance(problems, (str, bytes)) or not isinstance(problems, Sequence):
        raise TypeError(
            "problems must be a gradflow.Problem or a sequence of them, got "
            f"{type(problems).__name__}"
        )
    problems = tuple(problems)
    if not problems:
        raise ValueError(
            "problems must hold at least one problem, got an empty sequence"
        )
    first = problems[0]
    for i, p in enumerate(problems):
        if not isinstance(p, Problem):
            raise TypeError(
                f"problems[{i}] must be a gradflow.Problem, got {type(p).__name__}"
            )
        if type(p) is not type(first):
            raise ValueError(
                f"the problems of a sweep must be of one class: problems[{i}] is a "
                f"{type(p).__name__}, problems[0] a {type(first).__name__}"
            )
        a, b = eqx.partition(p, eqx.is_array), eqx.partition(first, eqx.is_array)
        if not eqx.tree_equal(a[1], b[1]):
            raise ValueError(
                f"the problems of a sweep must share their configuration: "
                f"problems[{i}] ({p.describe()}) differs from problems[0] "
                f"({first.describe()})"
            )
        if [np.shape(x) for x in jax.tree.leaves(a[0])] != [
            np.shape(x) for x in jax.tree.leaves(b[0])
        ]:
            raise ValueError(
                f"the problems of a sweep must have arrays of equal shapes: "
                f"problems[{i}] ({p.describe()}) differs from problems[0] "
                f"({first.describe()}); sweep each size separately"
            )
    return problems


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


def _label_values(name: str, values, n: int, axis: str) -> tuple:
    if isinstance(values, (str, bytes)) or np.ndim(values) != 1:
        raise TypeError(
            f"labels[{name!r}] must be a sequence of one value per {axis[:-1]}, got "
            f"{show(values)}"
        )
    values = (
        list(np.asarray(values).tolist()) if hasattr(values, "shape") else list(values)
    )
    if len(values) != n:
        raise ValueError(f"labels[{name!r}] has {len(values)} values for {n} {axis}")
    for i, v in enumerate(values):
        if not (is_number(v) or isinstance(v, str)):
            raise TypeError(
                f"labels[{name!r}][{i}] must be a number or a string, got {show(v)}"
            )
    return tuple(
        float(v) if is_number(v) and not isinstance(v, (int, np.integer)) else v
        for v in values
    )


def check_labels(labels, n: int, axis: str = "problems") -> dict[str, tuple]:
    """Names for the problem axis: `{name: one value per problem}`."""
    if labels is None:
        return {}
    if not isinstance(labels, dict):
        raise TypeError(
            f"labels must be a dict of name -> one value per {axis[:-1]}, e.g. "
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
        out[name] = _label_values(name, values, n, axis)
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


def _check_param_batch(params, problem: Problem) -> int:
    """The number of starting points in a batch of `params` (a leading member
    axis on every leaf of a point of `problem`)."""
    like = jax.eval_shape(lambda: problem.init(jax.random.key(0), 1.0))
    if jax.tree.structure(params) != jax.tree.structure(like):
        raise TypeError(
            f"params must have the structure of {type(problem).__name__}.init's "
            f"result with a leading member axis, got {jax.tree.structure(params)}"
        )
    sizes = set()
    for (path, x), ref in zip(
        jax.tree_util.tree_flatten_with_path(params)[0],
        jax.tree.leaves(like),
        strict=True,
    ):
        if np.ndim(x) != len(ref.shape) + 1:
            raise ValueError(
                f"params{jax.tree_util.keystr(path)} must be {len(ref.shape) + 1}-"
                f"dimensional (members, ...), got shape {np.shape(x)}; give one "
                "starting point to a flow, or stack starting points"
            )
        sizes.add(np.shape(x)[0])
    if len(sizes) != 1:
        raise ValueError(f"params' leading (member) axes differ: {sorted(sizes)}")
    n = int(sizes.pop())
    if n < 1:
        raise ValueError("params holds no starting point (leading axis of length 0)")
    return n


def member_axes(problems, init_scale, params, seeds) -> list[tuple]:
    """`(problem, init_scale, seed, start)` of every member, in C order: random
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
        n_params = _check_param_batch(params, problems[0])
        return [
            (c, None, None, k) for c in range(len(problems)) for k in range(n_params)
        ]
    if init_scale is None:
        raise ValueError(
            "give exactly one of init_scale (random starts) and params (given "
            "starts), got init_scale=None and params=None"
        )
    scales = _as_list("init_scale", init_scale, check_init_scale)
    seed_list = _as_list("seeds", seeds, check_seed)
    return [
        (c, k, s, None) for c in range(len(problems)) for k in scales for s in seed_list
    ]


# -- the plan ------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Plan:
    """A sweep's members, checked and prepared (nothing compiled yet)."""

    problems: tuple[Problem, ...]
    labels: dict[str, tuple]
    given_params: bool
    members: tuple[Member, ...]
    setups: tuple[Any, ...]  # one `setup.FlowSetup` per member
    observers: tuple[Any, ...]  # one `observe.Observer` per member
    devices: tuple
    batch_size: int  # members of a device stepped together under `vmap`
    checkpoint: Any
    checkpoint_every: float


def _prepare_members(problems, axes, params, labels, *, solo: dict, watch: dict):
    """`(setups, observers, members)`: every member prepared as a solo flow
    (the shared arguments are checked by the first one, before any member is
    drawn)."""
    setups, observers, members = [], [], []
    for i, (c, scale, seed, k) in enumerate(axes):
        point = None if k is None else jax.tree.map(lambda x, k=k: x[k], params)
        try:
            setup = prepare(
                problems[c], init_scale=scale, params=point,
                seed=0 if seed is None else seed, **solo,
            )  # fmt: skip
        except (TypeError, ValueError) as e:
            if i == 0:
                raise
            raise type(e)(f"member {i}: {e}") from None
        setups.append(setup)
        observers.append(make_observer(setup, **watch))
        members.append(
            Member(
                index=i,
                problem=c,
                init_scale=scale,
                seed=seed,
                start=k,
                labels={name: v[c] for name, v in labels.items()},
            )
        )
    return tuple(setups), tuple(observers), tuple(members)


def _plan(
    problems, *, init_scale, params, seeds, labels, devices, stages, events,
    thresholds, checkpoint, checkpoint_every, batch_size, solo: dict, axis: str,
) -> _Plan:  # fmt: skip
    """Checks every argument of `sweep` (in the order of its errors) and
    prepares every member."""
    problems = check_problems(problems)
    labels = check_labels(labels, len(problems), axis)
    axes = member_axes(problems, init_scale, params, seeds)
    devices = _check_devices(devices)
    events = check_events(events)
    thresholds = check_thresholds(thresholds)
    checkpoint = check_path(checkpoint)
    checkpoint_every = check_every(checkpoint_every)
    if batch_size is not None:
        batch_size = check_integer("batch_size", batch_size, least=1)
    watch = dict(stages=stages, thresholds=thresholds, events=events)
    setups, observers, members = _prepare_members(
        problems, axes, params, labels, solo=solo, watch=watch
    )
    per_device = -(-len(setups) // len(devices))
    if batch_size is None:
        # A CPU has no idle vector lanes for a batch to fill: there a member
        # costs only its own steps when the members go one by one.
        on_cpu = all(dev.platform == "cpu" for dev in devices)
        batch_size = 1 if on_cpu else per_device
    return _Plan(
        problems=problems,
        labels=labels,
        given_params=params is not None,
        members=members,
        setups=setups,
        observers=observers,
        devices=devices,
        batch_size=min(batch_size, per_device),
        checkpoint=checkpoint,
        checkpoint_every=checkpoint_every,
    )


def _settings(plan: _Plan) -> tuple[list[dict], dict]:
    """`(settings of each member, settings of the sweep)`."""
    settings_of = [
        solve_settings(s, o) for s, o in zip(plan.setups, plan.observers, strict=True)
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
        "num_problems": len(plan.problems),
        "init_scale": [m.init_scale for m in members] if random else None,
        "seeds": (
            sorted({m.seed for m in members if m.seed is not None}) if random else None
        ),
        "rtol": [s.rtol for s in setups],
        "atol": [s.atol for s in setups],
        "labels": {k: list(v) for k, v in plan.labels.items()},
    }
    return settings_of, sweep_settings


def _checkpointer(plan: _Plan, sweep_settings: dict) -> Checkpointer | None:
    """The sweep's checkpoint file (loaded if it exists), or `None`."""
    if plan.checkpoint is None:
        return None
    inputs = {
        **stack([p.fingerprint_inputs() for p in plan.problems]),
        "ts": plan.setups[0].ts,
        **pack_tree("params0", stack([s.params0 for s in plan.setups])),
    }
    return Checkpointer(
        plan.checkpoint,
        "sweep",
        dict(sweep_settings, layout=CHECKPOINT_LAYOUT),
        inputs,
        plan.checkpoint_every,
    )


def _assemble(plan: _Plan, batch, job: SweepJob, driven, *, settings_of, sweep_settings, start) -> Sweep:  # fmt: skip
    """Each member's `Trajectory`, built by the same code as a solo call's,
    and the `Sweep` of them."""
    host_state = batch.by_member(to_host(driven.state))
    resumed_from = batch.resumed_from
    trajs = []
    for i, setup in enumerate(plan.setups):
        outcome = Outcome(
            state=jax.tree.map(lambda x, i=i: x[i], host_state),
            records=job.records[i],
            out_of_steps=bool(job.out_of_steps[i]),
            interrupted=driven.interrupted,
            resumed_from=None if resumed_from is None else resumed_from[i],
        )
        trajs.append(
            build_trajectory(
                setup,
                settings=settings_of[i],
                observer=plan.observers[i],
                outcome=outcome,
            )
        )
    n_saves = plan.setups[0].ts.shape[0]  # the buffer may be longer
    loss = np.where(host_state.filled, host_state.saved["loss"], np.nan)[:, :n_saves]
    stats = {
        "num_members": batch.n,
        "num_devices": len(plan.devices),
        "num_processes": jax.process_count(),
        "padding": batch.n_pad,
        "batch_size": plan.batch_size,
        "num_chunks": driven.num_chunks,
        "num_steps": [int(x) for x in host_state.num_steps],
        "resumed": resumed_from is not None,
        "wall_time": time.perf_counter() - start,
    }
    return Sweep(
        trajectories=tuple(trajs),
        members=plan.members,
        problems=plan.problems,
        labels=plan.labels,
        ts=np.asarray(plan.setups[0].ts),
        loss=np.asarray(loss),
        settings=sweep_settings,
        stats=stats,
    )


def sweep_problems(
    problems: Problem | Sequence[Problem],
    *,
    init_scale: float | Sequence[float] | None = None,
    params: Any = None,
    seeds: int | Sequence[int] = 0,
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
    checkpoint: str | os.PathLike | None = None,
    checkpoint_every: float = DEFAULT_CHECKPOINT_EVERY,
    batch_size: int | None = None,
    chunk_steps: int | None = None,
    axis: str = "problems",
) -> Sweep:
    """The sweep of [`gradflow.sweep`][] over problems (see its docstring);
    `axis` names the problem axis in error messages (`"chains"` for a sweep
    called with chains)."""
    start = time.perf_counter()
    solo = dict(
        t1=t1, ts=ts, solver=solver, rtol=rtol, atol=atol, max_steps=max_steps,
        dtype=dtype, chunk_steps=chunk_steps,
    )  # fmt: skip
    plan = _plan(
        problems, init_scale=init_scale, params=params, seeds=seeds, labels=labels,
        devices=devices, stages=stages, events=events, thresholds=thresholds,
        checkpoint=checkpoint, checkpoint_every=checkpoint_every,
        batch_size=batch_size, solo=solo, axis=axis,
    )  # fmt: skip
    settings_of, sweep_settings = _settings(plan)
    ckpt = _checkpointer(plan, sweep_settings)
    specs = [solve_spec(s, o) for s, o in zip(plan.setups, plan.observers, strict=True)]
    batch = build_batch(plan.setups, specs, plan.devices, ckpt)
    job = SweepJob(batch, plan.setups, plan.observers, batch_size=plan.batch_size)
    n, t1_ = batch.n, plan.setups[0].t1
    driven = drive(
        job,
        batch.state,
        total=n * t1_,
        start=float(np.minimum(batch.by_member(to_host(batch.state.t)), t1_).sum()),
        description=f"sweep of {n}",
        progress=bool(progress) and jax.process_index() == 0,
        checkpoint=ckpt,
    )
    result = _assemble(
        plan, batch, job, driven, settings_of=settings_of,
        sweep_settings=sweep_settings, start=start,
    )  # fmt: skip
    if driven.interrupted:
        raise interrupted(interrupted_message("sweep interrupted", ckpt), result, ckpt)
    return result


__all__ = ["check_labels", "check_problems", "member_axes", "sweep_problems"]
