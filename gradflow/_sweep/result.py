"""The result of [`gradflow.sweep`][]: a [`Sweep`][] of member trajectories,
with which problem, initial scale and seed each member is, a stage table,
and its file (written and read with the one result schema of
`gradflow/_result/files.py`)."""

import dataclasses
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import equinox as eqx
import numpy as np

from .._core.records import Record
from .._problem.base import Problem
from .._problem.functions import describe
from .._result import tables
from .._result.files import (
    legacy_problem,
    read_file,
    read_problem,
    register_reader,
    result_fields,
    write_file,
)
from .._result.info import SolveSettings
from .._result.labelled import is_netcdf_path, load_netcdf, write_netcdf
from .._result.trajectory import Trajectory
from .labelled import sweep_dataset
from .parts import FORMAT_NAME, sweep_parts


# Columns of `Sweep.table()` that labels may not take.
RESERVED_COLUMNS = (
    "member",
    "chain",
    "problem",
    "init_scale",
    "seed",
    "start",
    "ok",
    "message",
    "final_loss",
    "stage",
    "cycle",
    "t_start",
    "t_end",
    "loss_start",
    "loss_end",
    "tokens",
    "complete",
)
# The stage fields a table row carries (when the stage has them).
_STAGE_FIELDS = ("cycle", "t_start", "t_end", "loss_start", "loss_end", "complete")


@dataclasses.dataclass(frozen=True)
class Member(Record):
    """Which member of a sweep a trajectory is.

    - `index`: its position in the sweep (C order: problem, init_scale, seed);
    - `problem`: the index of its problem in the sweep's `problems`;
    - `init_scale`, `seed`: its random start (`None` when `params` were given);
    - `start`: the index of its starting point in `params` (`None` for a
      random start);
    - `labels`: the sweep's labels of its problem, e.g. `{"delta": 0.05}`.
    """

    index: int
    problem: int
    init_scale: float | None
    seed: int | None
    start: int | None = None
    labels: dict[str, Any] = dataclasses.field(default_factory=dict)

    # gradflow 0.1.0's files named the problem index `chain`
    _renamed: ClassVar[Mapping[str, str]] = {"chain": "problem"}


@dataclasses.dataclass(frozen=True)
class SweepSettings(SolveSettings):
    """The settings of a sweep: those its members share (`t1`, `solver`,
    `max_steps`, `dtype`, `num_saves`, `solver_options`, `stages`,
    `thresholds`, `events`, as in [`gradflow.FlowSettings`][]), its size
    (`num_members`, `num_problems`), what differs between members
    (`init_scale` per member and the `seeds`, `None` for given starts; `rtol`
    and `atol` per member) and the `labels` of the problem axis."""

    num_members: int = 0
    num_problems: int = 0
    init_scale: tuple[float, ...] | None = None
    seeds: tuple[int, ...] | None = None
    rtol: tuple[float, ...] = ()
    atol: tuple[float, ...] = ()
    labels: dict[str, list] = dataclasses.field(default_factory=dict)

    # gradflow 0.1.0's files counted the problems as `num_chains`
    _renamed: ClassVar[Mapping[str, str]] = {"num_chains": "num_problems"}


@dataclasses.dataclass(frozen=True)
class SweepStats(Record):
    """What a sweep cost: `num_members`, `num_devices`, `num_processes`,
    `padding` (members added to fill the devices), `batch_size`,
    `num_chunks`, each member's `num_steps`, whether it `resumed` from a
    checkpoint, and its `wall_time` (seconds, compilation included). A
    member's own `sw[i].stats.wall_time` is the whole sweep's (the members
    are solved together)."""

    num_members: int = 0
    num_devices: int = 0
    num_processes: int = 1
    padding: int = 0
    batch_size: int = 1
    num_chunks: int = 0
    num_steps: tuple[int, ...] = ()
    resumed: bool = False
    wall_time: float = 0.0

    def __post_init__(self):
        object.__setattr__(self, "num_steps", tuple(self.num_steps))


class Sweep(eqx.Module):
    """Many solved trajectories of one [`gradflow.sweep`][] call.

    **Fields and properties:**

    - `len(sw)`, `sw[i]`: the number of members and member `i`'s
      [`gradflow.Trajectory`][] (what [`gradflow.flow`][] gives alone);
      iterating gives the trajectories;
    - `members`: one [`gradflow.Member`][] per member (problem index,
      init_scale, seed, labels);
    - `problems`: the sweep's problems; `labels`: the labels of the problem
      axis;
    - `ts`: the save times shared by all members;
    - `loss`: shape `(members, len(ts))`, the loss at every save time
      (`nan` past where a failed member stopped);
    - `ok`: a boolean array, one per member; `messages`: what went wrong;
    - `settings`: a [`gradflow.SweepSettings`][]; `stats`: a
      [`gradflow.SweepStats`][] (wall time, devices, padding, chunks and each
      member's steps).
    """

    trajectories: tuple[Trajectory, ...]
    members: tuple[Member, ...]
    problems: tuple[Problem | None, ...]
    labels: dict[str, tuple]
    ts: np.ndarray
    loss: np.ndarray
    settings: SweepSettings
    stats: SweepStats

    def __len__(self) -> int:
        return len(self.trajectories)

    def __getitem__(self, i) -> Trajectory:
        if isinstance(i, bool) or not isinstance(i, (int, np.integer)):
            raise TypeError(f"a sweep is indexed by an integer, got {i!r}")
        n = len(self.trajectories)
        if not -n <= int(i) < n:
            raise IndexError(f"member {i} out of range for a sweep of {n} members")
        return self.trajectories[int(i)]

    def __iter__(self):
        return iter(self.trajectories)

    @property
    def ok(self) -> np.ndarray:
        return np.array([t.ok for t in self.trajectories], dtype=bool)

    @property
    def messages(self) -> tuple[str, ...]:
        return tuple(t.message for t in self.trajectories)

    def __repr__(self) -> str:
        n_ok = int(self.ok.sum())
        what = describe(self.problems[0])
        return (
            f"Sweep({len(self)} members: {len(self.problems)} problems "
            f"({what}), {n_ok} ok, {len(self) - n_ok} failed, "
            f"{len(self.ts)} save times up to t = {float(self.ts[-1]):g})"
        )

    def table(self):
        """A pandas `DataFrame` with one row per member and stage (a member
        without stages has one row with `stage` empty): the member's index,
        problem, init_scale, seed and
        labels, `ok`, the final loss, and the stage's name, cycle, start and
        end (times and losses) and tokens."""
        import pandas as pd

        rows = []
        for member, traj in zip(self.members, self.trajectories, strict=True):
            base = {
                "member": member.index,
                "problem": member.problem,
                **member.labels,
                "init_scale": member.init_scale,
                "seed": member.seed,
                "start": member.start,
                "ok": traj.ok,
                "final_loss": float(traj.loss[-1]) if len(traj) else math.nan,
            }
            if not traj.stages:
                rows.append({**base, "stage": None})
            for stage in traj.stages:
                row = {**base, "stage": stage.name}
                for name in _STAGE_FIELDS:
                    row[name] = getattr(stage, name)
                row["tokens"] = " ".join(str(int(k)) for k in stage.tokens)
                rows.append(row)
        return pd.DataFrame(rows)

    def to_xarray(self):
        """The sweep as an `xarray.Dataset`, its members on their swept axes:
        the problem axis (`problem`, or its label such as `delta` where the
        sweep has one), `init_scale`, `seed`, then the time `t` and each
        array's own dimensions, e.g. `loss(delta, seed, t)`; axes of one
        value are scalar coordinates. Members that saved at other times go on
        a `member` dimension with their own times `t(member, save)`
        (`docs/analysis.md`). Written with xarray's `to_netcdf`, it reads
        back with [`gradflow.load`][] as this sweep."""
        return sweep_dataset(self)

    def stages_frame(self):
        """Every member's stages as a `pandas.DataFrame`, one row per member
        and stage, with the member's index, problem, labels, init_scale,
        seed and start in front (a member without stages has no row;
        `table()` gives it one)."""
        return tables.members_frame(
            self.members,
            self.trajectories,
            lambda t: tables.stage_rows(t.stages),
            tables.STAGE_COLUMNS,
        )

    def events_frame(self):
        """Every member's events as a `pandas.DataFrame`, one row per member
        and event, with the member's axes in front."""
        return tables.members_frame(
            self.members,
            self.trajectories,
            lambda t: tables.event_rows(t.events),
            tables.EVENT_COLUMNS,
        )

    def save(self, path: str | os.PathLike) -> Path:
        """Writes the whole sweep (every member's trajectory, the problems,
        members, labels, settings and the gradflow version) to one `.npz`
        file, atomically; where `path` ends in `.nc`, the netCDF file of
        [`to_xarray`][gradflow.Sweep.to_xarray] instead (needs
        `pip install "gradflow[analysis]"`). Read it back with
        [`gradflow.load_sweep`][] or [`gradflow.load`][]."""
        if is_netcdf_path(path):
            return write_netcdf(self, path)
        return write_file(path, *sweep_parts(self))


def _problems(path, meta, arrays) -> tuple:
    if meta["format_version"] < 2:
        return tuple(
            legacy_problem(path, t["settings"], tok, P, pi)
            for t, P, pi, tok in zip(
                _first_settings(meta),
                arrays["P"],
                arrays["pi"],
                meta["tokens"],
                strict=True,
            )
        )
    return tuple(
        read_problem(path, entry, arrays, f"problem{c}/")
        for c, entry in enumerate(meta["problems"])
    )


def _first_settings(meta) -> list:
    """For each chain of a format-1 sweep, the settings of a member on it."""
    out = {}
    for m, t in zip(meta["members"], meta["trajectories"], strict=True):
        out.setdefault(m["chain"], t)
    return [out[c] for c in range(len(meta["tokens"]))]


def load_sweep(path: str | os.PathLike) -> Sweep:
    """Loads a sweep written by [`gradflow.Sweep.save`][] (also a file of
    gradflow 0.1.0, and a sweep's netCDF file, `.nc`).

    **Raises:** `FileNotFoundError` if `path` does not exist; `ValueError`
    naming the file if it is not a gradflow sweep, is truncated, or was
    written by a newer file-format version.
    """
    if is_netcdf_path(path):
        sweep = load_netcdf(path)
        if not isinstance(sweep, Sweep):
            raise ValueError(
                f"'{path}' is not a gradflow sweep: it holds a "
                f"{type(sweep).__name__} (read it with gradflow.load)"
            )
        return sweep
    meta, arrays = read_file(path, FORMAT_NAME, "sweep")
    return sweep_from_parts(path, meta, arrays)


def sweep_from_parts(path, meta: dict, arrays: dict) -> Sweep:
    """A sweep from a file's metadata and arrays (a `ValueError` naming the
    file for a missing entry): what `load_sweep` does once the `.npz`
    archive is read, and a netCDF file's reader too."""
    try:
        legacy = meta["format_version"] < 2
        problems = _problems(path, meta, arrays)
        members = tuple(Member.from_dict(m) for m in meta["members"])
        trajs = tuple(
            Trajectory(
                **result_fields(
                    Trajectory,
                    t,
                    arrays,
                    problem=problems[member.problem],
                    legacy=legacy,
                    prefix=f"m{i}/",
                )
            )
            for i, (member, t) in enumerate(
                zip(members, meta["trajectories"], strict=True)
            )
        )
        return Sweep(
            trajectories=trajs,
            members=members,
            problems=problems,
            labels={k: tuple(v) for k, v in meta["labels"].items()},
            ts=arrays["ts"],
            loss=arrays["loss"],
            settings=SweepSettings.from_dict(meta["settings"]),
            stats=SweepStats.from_dict(meta["stats"]),
        )
    except KeyError as e:
        raise ValueError(
            f"'{path}' is an incomplete gradflow sweep: missing {e}"
        ) from None


register_reader(FORMAT_NAME, load_sweep, "gradflow.load_sweep", sweep_from_parts)

__all__ = [
    "Member",
    "RESERVED_COLUMNS",
    "Sweep",
    "SweepSettings",
    "SweepStats",
    "load_sweep",
    "sweep_from_parts",
    "sweep_parts",
]
