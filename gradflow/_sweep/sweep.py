r"""Many gradient flows in one call: the members are the Cartesian product of
problems, initial scales and seeds, batched with `vmap` on a device and
sharded over devices and hosts (`batch.py`; `docs/sweeps.md`).

Every member is validated and prepared exactly as [`gradflow.flow`][] prepares
a solo call (same initial point, same default tolerances, same `Spec`), and
after the solve its [`gradflow.Trajectory`][] is built by the same code as a
solo call's. Members share the problem's class and parameter shapes, the
solver, the save times, `t1` and `max_steps`; the stage analysis after the
solve and the reading of located events run on the host, member by member.
"""

import dataclasses
import time
from collections.abc import Sequence
from typing import Any

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._core.errors import is_number, show
from .._core.records import EventRecord
from .._core.validate import check_init_scale, check_seed
from .._flow.flow import Outcome, build_trajectory, make_observer, solve_spec
from .._flow.setup import prepare, with_start
from .._flow.solving import DEFAULT_T1
from .._loop.checkpoint import Checkpointer, pack_tree, problem_inputs
from .._loop.driver import drive, interrupted, interrupted_message
from .._loop.loop import init_state, restore_state, save_buffer_times
from .._options import Run, SaveAt, Solver, as_run, as_saveat, as_solver
from .._problem.adapt import as_problem
from .._problem.base import Problem
from .._problem.files import configuration, fingerprint
from .._problem.functions import describe
from .._result.info import SolveSettings
from .batch import SweepJob, build_batch, stack, to_host
from .lanes import LaneJob
from .result import RESERVED_COLUMNS, Member, Sweep, SweepSettings, SweepStats


CHECKPOINT_LAYOUT = "sweep-state-4"


# -- validation (nothing here touches JAX) -------------------------------------


def check_problems(problems, params=None, **options) -> tuple[Problem, ...]:
    """A problem or a non-empty sequence of problems of one class, with equal
    parameter shapes and equal static configuration (one compiled solve).
    Each entry may be anything [`gradflow.as_problem`][] turns into a problem
    with `options` (the paper's chains)."""
    if isinstance(problems, (str, bytes)) or not isinstance(problems, Sequence):
        problems = (problems,)
    problems = tuple(problems)
    if not problems:
        raise ValueError(
            "problems must hold at least one problem, got an empty sequence"
        )
    made = []
    for i, p in enumerate(problems):
        try:
            made.append(as_problem(p, params=params, **options))
        except (TypeError, ValueError) as e:
            where = f"problems[{i}]: " if len(problems) > 1 else "problems: "
            raise type(e)(where + str(e)) from None
    problems = tuple(made)
    first = problems[0]
    for i, p in enumerate(problems):
        if type(p) is not type(first):
            raise ValueError(
                f"the problems of a sweep must be of one class: problems[{i}] is a "
                f"{type(p).__name__}, problems[0] a {type(first).__name__}"
            )
        a, b = eqx.partition(p, eqx.is_array), eqx.partition(first, eqx.is_array)
        if not eqx.tree_equal(a[1], b[1]):
            raise ValueError(
                f"the problems of a sweep must share their configuration: "
                f"problems[{i}] ({describe(p)}) differs from problems[0] "
                f"({describe(first)})"
            )
        if [np.shape(x) for x in jax.tree.leaves(a[0])] != [
            np.shape(x) for x in jax.tree.leaves(b[0])
        ]:
            raise ValueError(
                f"the problems of a sweep must have arrays of equal shapes: "
                f"problems[{i}] ({describe(p)}) differs from problems[0] "
                f"({describe(first)}); sweep each size separately"
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


def _label_values(name: str, values, n: int) -> tuple:
    if isinstance(values, (str, bytes)) or np.ndim(values) != 1:
        raise TypeError(
            f"labels[{name!r}] must be a sequence of one value per problem, got "
            f"{show(values)}"
        )
    values = (
        list(np.asarray(values).tolist()) if hasattr(values, "shape") else list(values)
    )
    if len(values) != n:
        raise ValueError(f"labels[{name!r}] has {len(values)} values for {n} problems")
    for i, v in enumerate(values):
        if not (is_number(v) or isinstance(v, str)):
            raise TypeError(
                f"labels[{name!r}][{i}] must be a number or a string, got {show(v)}"
            )
    return tuple(
        float(v) if is_number(v) and not isinstance(v, (int, np.integer)) else v
        for v in values
    )


def check_labels(labels, n: int) -> dict[str, tuple]:
    """Names for the problem axis: `{name: one value per problem}`."""
    if labels is None:
        return {}
    if not isinstance(labels, dict):
        raise TypeError(
            "labels must be a dict of name -> one value per problem, e.g. "
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
        out[name] = _label_values(name, values, n)
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
    observers: tuple[Any, ...]  # one `observe.Observer` per member (once started)
    devices: tuple
    batch_size: int  # members of a device stepped together under `vmap`
    run: Run


def _prepare_members(problems, axes, params, labels, *, solo: dict):
    """`(setups, members)`: every member prepared as a solo flow (the shared
    arguments are checked by the first one, before any member is drawn)."""
    setups, members = [], []
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
    return tuple(setups), tuple(members)


def _start_members(plan: "_Plan") -> "_Plan":
    """Every member's start checked ([`with_start`][gradflow._flow.setup.with_start]:
    the first JAX work, after the checkpoint), and what each watches."""
    setups = []
    for i, setup in enumerate(plan.setups):
        try:
            setups.append(with_start(setup))
        except ValueError as e:
            raise ValueError(f"member {i}: {e}") from None
    observers = tuple(make_observer(s) for s in setups)
    return dataclasses.replace(plan, setups=tuple(setups), observers=observers)


def _plan(
    problems, *, init_scale, params, seeds, labels, t1, saveat, solver, run, options
) -> _Plan:
    """Checks every argument of `sweep` (in the order of its errors) and
    prepares every member."""
    saveat = as_saveat(saveat, entry="gradflow.sweep")
    solver, run = as_solver(solver), as_run(run, sweep=True)
    problems = check_problems(problems, params, **options)
    labels = check_labels(labels, len(problems))
    axes = member_axes(problems, init_scale, params, seeds)
    devices = _check_devices(run.devices)
    solo = dict(t1=t1, saveat=saveat, solver=solver, run=run_of_member(run))
    setups, members = _prepare_members(problems, axes, params, labels, solo=solo)
    per_device = -(-len(setups) // len(devices))
    batch_size = run.batch_size
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
        observers=(),
        devices=devices,
        batch_size=min(batch_size, per_device),
        run=run,
    )


def run_of_member(run: Run) -> Run:
    """The `Run` each member is prepared with: the sweep's chunk size; the
    sweep's own progress bar and checkpoint."""
    return Run(progress=False, chunk_steps=run.chunk_steps)


def _settings(plan: _Plan) -> SweepSettings:
    """The settings of the sweep: those its members share (the fields of
    `SolveSettings`, read from the first member's), and the lists of what
    differs (initial scales, seeds, tolerances)."""
    first = plan.setups[0].settings
    members, setups = plan.members, plan.setups
    random = not plan.given_params
    shared = {f.name: getattr(first, f.name) for f in dataclasses.fields(SolveSettings)}
    return SweepSettings(
        **shared,
        num_members=len(setups),
        num_problems=len(plan.problems),
        init_scale=(
            tuple(float(m.init_scale or 0.0) for m in members) if random else None
        ),
        seeds=(
            tuple(sorted({m.seed for m in members if m.seed is not None}))
            if random
            else None
        ),
        rtol=tuple(s.rtol for s in setups),
        atol=tuple(s.atol for s in setups),
        labels={k: list(v) for k, v in plan.labels.items()},
    )


def _checkpointer(plan: _Plan, settings: SweepSettings) -> Checkpointer | None:
    """The sweep's checkpoint file (loaded if it exists), or `None`."""
    if plan.run.checkpoint is None:
        return None
    inputs = {
        **problem_inputs(stack([fingerprint(p) for p in plan.problems])),
        "ts": plan.setups[0].ts,
        **pack_tree("params0", stack([s.params0 for s in plan.setups])),
    }
    return Checkpointer(
        plan.run.checkpoint,
        "sweep",
        # (the problems share their configuration: `check_problems`)
        dict(
            settings.to_dict(),
            **configuration(plan.problems[0]),
            layout=CHECKPOINT_LAYOUT,
        ),
        inputs,
        plan.run.checkpoint_every,
    )


@dataclasses.dataclass(frozen=True)
class _Solved:
    """How the members' solve ended, on the host: every member's final loop
    state (NumPy, stacked in member order), its located events and whether
    it ran out of steps; and what the run cost."""

    host_state: Any
    records: list
    out_of_steps: np.ndarray
    interrupted: bool
    resumed_from: list[float] | None
    num_chunks: int
    padding: int


def _solve_sharded(plan: _Plan, specs, ckpt) -> _Solved:
    """The members stacked and sharded over the devices, advanced together by
    one compiled chunk (`batch.py`): batches under `vmap`, several hosts."""
    batch = build_batch(plan.setups, specs, plan.devices, ckpt)
    job = SweepJob(batch, plan.setups, plan.observers, batch_size=plan.batch_size)
    n, t1 = batch.n, plan.setups[0].t1
    driven = drive(
        job,
        batch.state,
        total=n * t1,
        start=float(np.minimum(batch.by_member(to_host(batch.state.t)), t1).sum()),
        description=f"sweep of {n}",
        progress=plan.run.progress and jax.process_index() == 0,
        checkpoint=ckpt,
    )
    return _Solved(
        host_state=batch.by_member(to_host(driven.state)),
        records=job.records,
        out_of_steps=job.out_of_steps,
        interrupted=driven.interrupted,
        resumed_from=batch.resumed_from,
        num_chunks=driven.num_chunks,
        padding=batch.n_pad,
    )


def _solve_lanes(plan: _Plan, specs, ckpt) -> _Solved:
    """The members one by one on one host thread per device, each through
    the compiled chunk of a solo run (`lanes.py`)."""
    first = plan.setups[0]
    n, dtype = len(plan.setups), first.dtype
    ts = save_buffer_times(specs[0], first.ts, first.params0, first.problem_dt, dtype)
    t0, t1 = jnp.asarray(0.0, dtype), jnp.asarray(first.t1, dtype)
    states = [
        init_state(spec, y0=s.params0, args=s.problem_dt, t0=t0, t1=t1, ts=ts)
        for s, spec in zip(plan.setups, specs, strict=True)
    ]
    records: list[list[EventRecord]] = [[] for _ in range(n)]
    resumed_from = None
    if ckpt is not None and ckpt.state is not None:
        host = restore_state(ckpt, stack([jax.tree.map(np.asarray, s) for s in states]))
        states = [jax.tree.map(lambda x, i=i: x[i], host) for i in range(n)]
        events = ckpt.state[0]["events"]
        records = [[EventRecord.from_dict(r) for r in rs] for rs in events]
        resumed_from = [float(t) for t in np.asarray(host.t)]
    job = LaneJob(
        plan.setups, specs, plan.observers, states, plan.devices,
        ts=ts, t1=t1, records=records, max_steps=first.max_steps,
    )  # fmt: skip
    try:
        driven = drive(
            job,
            job.initial,
            total=n * first.t1,
            start=float(np.minimum(job.initial.t, first.t1).sum()),
            description=f"sweep of {n}",
            progress=plan.run.progress,
            checkpoint=ckpt,
        )
    finally:
        job.close()
    return _Solved(
        host_state=job.host_state(driven.state),
        records=job.records,
        out_of_steps=job.out_of_steps,
        interrupted=driven.interrupted,
        resumed_from=resumed_from,
        num_chunks=job.num_chunks,
        padding=0,
    )


def uses_lanes(plan: _Plan) -> bool:
    """Whether the members go through lanes (one by one, one process) rather
    than the sharded batch."""
    return plan.batch_size == 1 and jax.process_count() == 1


def _assemble(plan: _Plan, solved: _Solved, *, settings, start) -> Sweep:
    """Each member's `Trajectory`, built by the same code as a solo call's,
    and the `Sweep` of them."""
    host_state = solved.host_state
    resumed_from = solved.resumed_from
    trajs = []
    for i, setup in enumerate(plan.setups):
        outcome = Outcome(
            state=jax.tree.map(lambda x, i=i: x[i], host_state),
            records=solved.records[i],
            out_of_steps=bool(solved.out_of_steps[i]),
            interrupted=solved.interrupted,
            resumed_from=None if resumed_from is None else resumed_from[i],
        )
        trajs.append(
            build_trajectory(setup, observer=plan.observers[i], outcome=outcome)
        )
    n_saves = plan.setups[0].ts.shape[0]  # the buffer may be longer
    loss = np.where(host_state.filled, host_state.saved["loss"], np.nan)[:, :n_saves]
    stats = SweepStats(
        num_members=len(plan.setups),
        num_devices=len(plan.devices),
        num_processes=jax.process_count(),
        padding=solved.padding,
        batch_size=plan.batch_size,
        num_chunks=solved.num_chunks,
        num_steps=tuple(int(x) for x in host_state.num_steps),
        resumed=resumed_from is not None,
        wall_time=time.perf_counter() - start,
    )
    return Sweep(
        trajectories=tuple(trajs),
        members=plan.members,
        problems=plan.problems,
        labels=plan.labels,
        ts=np.asarray(plan.setups[0].ts),
        loss=np.asarray(loss),
        settings=settings,
        stats=stats,
    )


def sweep(
    problems: Any,
    *,
    init_scale: float | Sequence[float] | None = None,
    params: Any = None,
    seeds: int | Sequence[int] = 0,
    t1: float = DEFAULT_T1,
    labels: dict[str, Sequence] | None = None,
    saveat: SaveAt | None = None,
    solver: Solver | str | dfx.AbstractSolver | None = None,
    run: Run | None = None,
    **problem_options,
) -> Sweep:
    r"""Integrates many gradient flows in one call.

    The members are the Cartesian product of `problems`, `init_scale` and
    `seeds` in C order: member `(c * n_init + k) * n_seeds + s` is problem
    `c`, initial scale `k`, seed `s` (`sw.members[i]` says which).
    Alternatively `params` gives a batch of starting points (a leading member
    axis on every leaf): then member `c * n_params + k` starts problem `c`
    from point `k`. Each member is the trajectory [`gradflow.flow`][] gives
    alone with the same arguments (same initial point, same default
    tolerances); `sw[i]` is that [`gradflow.Trajectory`][].

    All members are solved together: one compiled solve, sharded over the
    devices (the member axis is padded to a multiple of the device count by
    repeating member 0; the padding is dropped); on each device its members
    go `run.batch_size` at a time through one `vmap`ped loop (each has its
    own step sizes, events and failure). A member that fails (out of steps,
    non-finite) keeps its partial trajectory and its result code and does not
    stop the others. Members share the problem's class and shapes, the
    solver, `t1` and the save times (see `docs/sweeps.md`).

    **Arguments:**

    - `problems`: a [`gradflow.Problem`][] or a sequence of problems of one
      class and equal parameter shapes; or anything
      [`gradflow.as_problem`][] turns into problems with `problem_options`:
      a [`gradflow.MarkovChain`][] or a sequence of chains of equal `d` (the
      paper's model on each, with `width=...`, `model=...`).
    - `init_scale`: a number or a sequence (give this or `params`).
    - `params`: starting points with a leading member axis (instead of
      `init_scale` and `seeds`).
    - `seeds`: an int (one seed) or a sequence of seeds, e.g. `range(8)`.
    - `t1`: final time of every member.
    - `labels`: names for the problem axis, e.g. `{"delta": deltas}` (one
      value per problem), carried into `sw.members`, `sw.table()` and the
      plots.
    - `saveat`, `solver`: a [`gradflow.SaveAt`][] and a [`gradflow.Solver`][]
      (or a solver's name), for every member.
    - `run`: a [`gradflow.Run`][]: the progress bar (members x time), one
      checkpoint file for the whole sweep (a killed sweep run again with the
      same call resumes from it to the same result), the chunk size, and
      `devices` and `batch_size`.
    - `problem_options`: options of [`gradflow.as_problem`][] (for chains:
      `width` (default 16), `model`, `save_attention`).

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
                  init_scale=1e-3, seeds=range(4), t1=2000, width=8,
                  labels={"delta": deltas})
    sw.table()
    ```
    """
    start = time.perf_counter()
    plan = _plan(
        problems, init_scale=init_scale, params=params, seeds=seeds, labels=labels,
        t1=t1, saveat=saveat, solver=solver, run=run, options=problem_options,
    )  # fmt: skip
    settings = _settings(plan)
    ckpt = _checkpointer(plan, settings)
    plan = _start_members(plan)
    specs = [solve_spec(s, o) for s, o in zip(plan.setups, plan.observers, strict=True)]
    solve = _solve_lanes if uses_lanes(plan) else _solve_sharded
    solved = solve(plan, specs, ckpt)
    result = _assemble(plan, solved, settings=settings, start=start)
    if solved.interrupted:
        raise interrupted(interrupted_message("sweep interrupted", ckpt), result, ckpt)
    return result


__all__ = ["check_labels", "check_problems", "member_axes", "sweep"]
