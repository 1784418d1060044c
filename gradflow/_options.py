r"""The options that every entry point shares, grouped into three objects and
documented once (the way Diffrax takes `SaveAt`, a step-size controller and an
`Event`):

- [`gradflow.SaveAt`][]: what is saved and watched along a run: the save
  times, stage detection, user events and callbacks;
- [`gradflow.Solver`][]: how the flow is solved numerically: the method, its
  tolerances, the precision and the step budget;
- [`gradflow.Run`][]: how the host runs it: progress bar, checkpoints, how
  often the host looks in, and (for sweeps) devices and batches;

and, for [`gradflow.train_sgd`][], [`gradflow.SGD`][]: the learning rate,
batch size, optimizer, dataset size and precision.

Each checks its arguments when it is made, with one-line errors naming the
argument and its value, before anything is compiled. `None` for an entry
point's `saveat`, `solver` or `run` means the defaults; `solver` also takes a
solver's name or a Diffrax solver instance.

```python
traj = gf.integrate(
    chain, 1e-3, t1=5000,
    saveat=gf.SaveAt(ts=np.linspace(0, 5000, 201), events=[event]),
    solver=gf.Solver("tsit5", rtol=1e-8),
    run=gf.Run(progress=False, checkpoint="run.ckpt.npz"),
)
```
"""

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import diffrax as dfx
import equinox as eqx
import numpy as np
import optax

from ._core.records import BUILTIN_EVENTS, SADDLE_EVENTS
from ._core.validate import (
    as_float_array,
    check_dtype,
    check_integer,
    check_positive_finite,
)
from ._event.events import Event
from ._flow.solving import (
    DEFAULT_CHECKPOINT_EVERY,
    DEFAULT_MAX_STEPS,
    resolve_solver,
)
from ._loop.checkpoint import check_every, check_path
from ._stages import StageThresholds


def _events(events) -> tuple[Event, ...]:
    """User events: `Event`s with distinct names that are not built-in."""
    if isinstance(events, Event):
        events = (events,)
    if isinstance(events, (str, bytes)) or not isinstance(events, Sequence):
        raise TypeError(
            f"events must be a sequence of gradflow.Event, got {type(events).__name__}"
        )
    events = tuple(events)
    names = set(BUILTIN_EVENTS) | set(SADDLE_EVENTS)
    for e in events:
        if not isinstance(e, Event):
            raise TypeError(
                f"events must be gradflow.Event objects, got {type(e).__name__}"
            )
        if e.name in names:
            raise ValueError(
                f"event name {e.name!r} is used twice (or is a built-in name)"
            )
        names.add(e.name)
    return events


def _callbacks(callbacks) -> tuple[Callable, ...]:
    if callable(callbacks):
        callbacks = (callbacks,)
    callbacks = tuple(callbacks)
    for c in callbacks:
        if not callable(c):
            raise TypeError(f"callbacks must be callables, got {type(c).__name__}")
    return callbacks


def _flag(name: str, value) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False, got {value!r}")
    return bool(value)


class SaveAt(eqx.Module):
    r"""What a run saves and watches.

    **Arguments:**

    - `ts`: increasing save times in `[0, t1]`; by default
      [`gradflow.default_save_times`][] (`0` and 797 log-spaced times up to
      `t1`, which draw each plateau and drop of a flow with the same
      resolution). For SGD: the times at which iterates are kept (rounded to
      steps).
    - `stages`: locate the saddle escapes and entries *during* the solve (by
      bisection on the solver's dense output, without stopping it) and find
      the stages on the saves after it (`traj.stages`, `traj.events`;
      `docs/stages.md`). The steps taken do not depend on it: a bare and an
      observed solve of the same call are the same solve.
    - `thresholds`: a [`gradflow.StageThresholds`][] (the defaults when
      `None`).
    - `events`: user [`gradflow.Event`][]s, located during the solve like the
      saddle events and recorded in `traj.events`; their `cond_fn(t, params,
      problem)` receives the problem.
    - `callbacks`: Python functions `fn(event, t, params)` called on the host
      for every event located during the solve, in time order, between
      chunks of steps (the solve does not wait for them), with the
      [`gradflow.EventRecord`][] and the parameters at the event.
    - `motion`: dense saves where the flow moves fast ([`gradflow.flow`][]
      and `integrate` only). Besides `ts`, save wherever the parameters have
      moved by `motion` times their size (the Euclidean norm of all of them,
      at least the start's) since the last such save: after each accepted
      step the solver's dense output is sampled at 8 evenly spaced times and
      each sample that far from the last one recorded is saved. Where the
      flow moves fast (an escape, a drop, a rotation of the embeddings) the
      saves then lie about `motion` apart in parameter space; on a plateau
      away from the origin there are none (small parameters growing out of
      the origin move by a steady fraction of their size, and get some). They are the solver's own dense output (what a save
      time there would give; the steps do not change) and join `ts` in the
      result, sorted by time, so `traj.ts` is no longer the grid given
      (`traj.settings.num_saves` counts the grid). `0.01` draws a path in
      steps of 1 % of its size; `None` (the default): only `ts`
      (`docs/stages.md`, "Save grid").
    """

    ts: Any = None
    stages: bool = True
    thresholds: StageThresholds = eqx.field(default_factory=StageThresholds)
    events: tuple[Event, ...] = ()
    callbacks: tuple[Callable, ...] = ()
    motion: float | None = None

    def __init__(
        self,
        ts=None,
        *,
        stages: bool = True,
        thresholds: StageThresholds | None = None,
        events: Sequence[Event] = (),
        callbacks: Sequence[Callable] | Callable = (),
        motion: float | None = None,
    ):
        if ts is not None:
            ts = as_float_array("ts", ts, "an increasing array of times")
        self.ts = ts
        self.stages = _flag("stages", stages)
        if thresholds is None:
            thresholds = StageThresholds()
        elif not isinstance(thresholds, StageThresholds):
            raise TypeError(
                "thresholds must be a gradflow.StageThresholds, got "
                f"{type(thresholds).__name__}"
            )
        self.thresholds = thresholds
        self.events = _events(events)
        self.callbacks = _callbacks(callbacks)
        if motion is not None:
            motion = check_positive_finite("motion", motion)
            if motion >= 1:
                raise ValueError(
                    f"motion must be below 1 (a fraction of the parameters' size "
                    f"between saves), got motion = {motion}"
                )
        self.motion = motion


class Solver(eqx.Module):
    r"""How the flow $\dot\theta = -\nabla L(\theta)$ is solved.

    **Arguments:**

    - `method`: a name in `gradflow.SOLVERS` or a Diffrax solver instance; by
      default `gradflow.DEFAULT_SOLVER` (the stiff Rosenbrock-W solver
      `ros34pw2`; `docs/performance.md`).
    - `rtol`, `atol`: tolerances of the PID step-size controller; by default
      [`gradflow.default_tolerances`][], which ties `atol` to the RMS size of
      the start (saddle escapes grow from components that small).
    - `max_steps`: the most solver steps before giving up (the partial result
      is returned, not lost), checked between chunks of steps.
    - `dtype`: `"float64"` (the default) or `"float32"` (with a warning for
      `rtol` below 1e-6, which float32 cannot honour).

    `gf.Solver("tsit5")` and the name `"tsit5"` passed as `solver=` are the
    same.
    """

    method: Any = None
    rtol: float | None = None
    atol: float | None = None
    max_steps: int = DEFAULT_MAX_STEPS
    dtype: str = "float64"

    def __init__(
        self,
        method: str | dfx.AbstractSolver | None = None,
        *,
        rtol: float | None = None,
        atol: float | None = None,
        max_steps: int = DEFAULT_MAX_STEPS,
        dtype: str = "float64",
    ):
        resolve_solver(method)  # a clear error for an unknown name or type
        self.method = method
        if rtol is not None:
            rtol = check_positive_finite("rtol", rtol)
            if rtol >= 1:
                raise ValueError(f"rtol must be < 1, got rtol = {rtol}")
        self.rtol = rtol
        self.atol = None if atol is None else check_positive_finite("atol", atol)
        self.max_steps = check_integer("max_steps", max_steps, 1, echo_name=False)
        check_dtype(dtype)
        self.dtype = np.dtype(dtype).name if not isinstance(dtype, str) else dtype


class Run(eqx.Module):
    r"""How the host runs a solve (or a sweep, or SGD).

    **Arguments:**

    - `progress`: a progress bar when the run takes longer than 2 s.
    - `checkpoint`: a file path. The whole state of the run is written there
      atomically every `checkpoint_every` seconds of wall time, after each
      chunk with events and at the end; if the file exists, the call resumes
      from it to the same result as an uninterrupted run (bit for bit on one
      machine); a finished checkpoint returns its result at once. A
      checkpoint made by a different call is refused, naming what differs.
      Only `max_steps`, `progress` and `chunk_steps` may change between the
      runs (raise `max_steps` to continue a run that ran out of steps).
    - `checkpoint_every`: seconds between periodic checkpoint writes.
    - `chunk_steps`: steps per compiled chunk, i.e. how often the host looks
      in (progress, Ctrl-C, checkpoints); by default 1000 for small models and
      fewer for large ones. Results do not depend on it.
    - `devices` (sweeps): the devices to shard the members over (default: all
      of `jax.devices()`, every host's after `jax.distributed.initialize()`).
    - `batch_size` (sweeps): how many of a device's members step together
      under `vmap`; the groups go one after another. Default: all of them on
      a GPU or TPU; 1 on a CPU, which has no idle vector lanes for a batch to
      fill.
    """

    progress: bool = True
    checkpoint: Path | None = None
    checkpoint_every: float = DEFAULT_CHECKPOINT_EVERY
    chunk_steps: int | None = None
    devices: Any = None
    batch_size: int | None = None

    def __init__(
        self,
        *,
        progress: bool = True,
        checkpoint: str | os.PathLike | None = None,
        checkpoint_every: float = DEFAULT_CHECKPOINT_EVERY,
        chunk_steps: int | None = None,
        devices: Sequence[Any] | None = None,
        batch_size: int | None = None,
    ):
        self.progress = _flag("progress", progress)
        self.checkpoint = check_path(checkpoint)
        self.checkpoint_every = check_every(checkpoint_every)
        self.chunk_steps = (
            None
            if chunk_steps is None
            else check_integer("chunk_steps", chunk_steps, 1)
        )
        self.devices = None if devices is None else tuple(devices)
        self.batch_size = (
            None if batch_size is None else check_integer("batch_size", batch_size, 1)
        )


class SGD(eqx.Module):
    r"""How [`gradflow.train_sgd`][] trains.

    **Arguments:**

    - `lr`: the learning rate, and the time unit: step $k$ sits at
      $t = k \cdot \text{lr}$.
    - `batch_size`: examples per step; `None`: full-batch gradient descent
      on the population loss (every step the exact $\nabla L$; any
      [`gradflow.Problem`][], `docs/sgd.md`, "Modified flows").
    - `optimizer`: any Optax transformation; by default plain SGD at `lr`
      (time is still `lr * step`).
    - `num_sequences`: `None` draws fresh examples every step (online SGD); an
      integer $N$ fixes a dataset of $N$ examples reused by every step, each
      batch drawn without replacement ($N \ge$ `batch_size`).
    - `dtype`: `"float64"` (the default) or `"float32"`.
    """

    lr: float = 0.2
    batch_size: int | None = 512
    optimizer: Any = None
    num_sequences: int | None = None
    dtype: str = "float64"

    def __init__(
        self,
        lr: float = 0.2,
        batch_size: int | None = 512,
        *,
        optimizer: optax.GradientTransformation | None = None,
        num_sequences: int | None = None,
        dtype: str = "float64",
    ):
        self.lr = check_positive_finite("lr", lr)
        self.batch_size = (
            None if batch_size is None else check_integer("batch_size", batch_size, 1)
        )
        if optimizer is not None and not isinstance(
            optimizer, optax.GradientTransformation
        ):
            raise TypeError(
                "optimizer must be an optax.GradientTransformation, got "
                f"{type(optimizer).__name__}"
            )
        self.optimizer = optimizer
        if num_sequences is not None:
            num_sequences = check_integer("num_sequences", num_sequences, 1)
            if self.batch_size is None:
                raise ValueError(
                    f"num_sequences = {num_sequences} needs a batch_size: "
                    "batch_size = None is gradient descent on the population loss"
                )
            if num_sequences < self.batch_size:
                raise ValueError(
                    f"num_sequences = {num_sequences} is smaller than batch_size = "
                    f"{self.batch_size}; batches are drawn without replacement"
                )
        self.num_sequences = num_sequences
        check_dtype(dtype)
        self.dtype = np.dtype(dtype).name if not isinstance(dtype, str) else dtype


def as_saveat(saveat, entry: str | None = None) -> SaveAt:
    """`saveat` of an entry point: `None` (the defaults) or a `SaveAt`.
    `entry`: the name of an entry point that takes no motion saves
    (`gradflow.sweep`, `gradflow.train_sgd`), which refuses them."""
    if saveat is None:
        return SaveAt()
    if not isinstance(saveat, SaveAt):
        raise TypeError(
            f"saveat must be a gradflow.SaveAt, got {type(saveat).__name__}"
        )
    if entry is not None and saveat.motion is not None:
        raise ValueError(
            f"SaveAt(motion={saveat.motion}) is for gradflow.flow and integrate; "
            f"{entry} saves on its grid only: drop motion, or run the members you "
            "want drawn densely with gradflow.flow"
        )
    return saveat


def as_solver(solver) -> Solver:
    """`solver` of an entry point: `None` (the defaults), a name, a Diffrax
    solver instance or a `Solver`."""
    if solver is None:
        return Solver()
    if isinstance(solver, Solver):
        return solver
    if isinstance(solver, (str, dfx.AbstractSolver)):
        return Solver(solver)
    raise TypeError(
        "solver must be a name, a diffrax.AbstractSolver or a gradflow.Solver, got "
        f"{type(solver).__name__}"
    )


def as_sgd(sgd) -> SGD:
    """`sgd` of `train_sgd`: `None` (the defaults) or an `SGD`."""
    if sgd is None:
        return SGD()
    if not isinstance(sgd, SGD):
        raise TypeError(f"sgd must be a gradflow.SGD, got {type(sgd).__name__}")
    return sgd


def as_run(run, *, sweep: bool = False) -> Run:
    """`run` of an entry point: `None` (the defaults) or a `Run`; `devices`
    and `batch_size` only for a sweep."""
    if run is None:
        return Run()
    if not isinstance(run, Run):
        raise TypeError(f"run must be a gradflow.Run, got {type(run).__name__}")
    if not sweep:
        for name in ("devices", "batch_size"):
            if getattr(run, name) is not None:
                raise ValueError(
                    f"Run({name}=...) is for gf.sweep; a single run does not take "
                    f"it, got {name} = {getattr(run, name)!r}"
                )
    return run


__all__ = [
    "Run",
    "SGD",
    "SaveAt",
    "Solver",
    "as_run",
    "as_saveat",
    "as_sgd",
    "as_solver",
]
