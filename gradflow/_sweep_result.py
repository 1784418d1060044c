"""The result of [`gradflow.sweep`][]: a [`Sweep`][] of member trajectories,
with which chain, initial scale and seed each member is, a stage table, and a
file format."""

import dataclasses
import json
import math
import os
from pathlib import Path
from typing import Any, cast

import equinox as eqx
import numpy as np

from ._chain import MarkovChain
from ._files import as_record, atomic_write, json_default, read_npz_with_meta, version
from ._model import Params, param_arrays, params_from_arrays
from ._records import EventRecord
from ._stage_types import Stage
from ._trajectory import Trajectory


FORMAT_NAME = "gradflow-sweep"
FORMAT_VERSION = 1
# Columns of `Sweep.table()` that labels may not take.
RESERVED_COLUMNS = (
    "member",
    "chain",
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


def stage_field(stage, name: str, default=None) -> Any:
    """One field of a stage record: the one accessor through which sweeps,
    tables and plots read stages (typed records with attributes, or the dicts
    of files written before stages were typed)."""
    if isinstance(stage, dict):
        return stage.get(name, default)
    return getattr(stage, name, default)


@dataclasses.dataclass(frozen=True)
class Member:
    """Which member of a sweep a trajectory is.

    - `index`: its position in the sweep (C order: chain, init_scale, seed);
    - `chain`: the index of its chain in the sweep's `chains`;
    - `init_scale`, `seed`: its random start (`None` when `params` were given);
    - `start`: the index of its starting point in `params` (`None` for a
      random start);
    - `labels`: the sweep's labels of its chain, e.g. `{"delta": 0.05}`.
    """

    index: int
    chain: int
    init_scale: float | None
    seed: int | None
    start: int | None = None
    labels: dict[str, Any] = dataclasses.field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, record: dict[str, Any]) -> "Member":
        return cls(**record)


class Sweep(eqx.Module):
    """Many solved trajectories of one [`gradflow.sweep`][] call.

    **Fields and properties:**

    - `len(sw)`, `sw[i]`: the number of members and member `i`'s
      [`gradflow.Trajectory`][] (what [`gradflow.integrate`][] gives alone);
      iterating gives the trajectories;
    - `members`: one [`gradflow.Member`][] per member (chain index, init_scale, seed,
      labels);
    - `chains`: the sweep's chains; `labels`: the labels of the chain axis;
    - `ts`: the save times shared by all members;
    - `loss`: shape `(members, len(ts))`, the loss at every save time
      (`nan` past where a failed member stopped);
    - `ok`: a boolean array, one per member; `messages`: what went wrong;
    - `settings`: the call's settings; `stats`: wall time, devices, padding,
      chunks and each member's steps. A member's own `sw[i].stats["wall_time"]`
      is the whole sweep's (the members are solved together).
    """

    trajectories: tuple[Trajectory, ...]
    members: tuple[Member, ...]
    chains: tuple[MarkovChain, ...]
    labels: dict[str, tuple]
    ts: np.ndarray
    loss: np.ndarray
    settings: dict[str, Any]
    stats: dict[str, Any]

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
        return (
            f"Sweep({len(self)} members: {len(self.chains)} chains (d = "
            f"{self.chains[0].d}), {n_ok} ok, {len(self) - n_ok} failed, "
            f"{len(self.ts)} save times up to t = {float(self.ts[-1]):g})"
        )

    def table(self):
        """A pandas `DataFrame` with one row per member and stage (a member
        without stages has one row with `stage` empty): the member's index,
        chain, init_scale, seed and labels, `ok`, the final loss, and the
        stage's name, cycle, start and end (times and losses) and tokens."""
        import pandas as pd

        rows = []
        for member, traj in zip(self.members, self.trajectories, strict=True):
            base = {
                "member": member.index,
                "chain": member.chain,
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
                row = {**base, "stage": stage_field(stage, "name")}
                for name in _STAGE_FIELDS:
                    row[name] = stage_field(stage, name)
                tokens = stage_field(stage, "tokens", ())
                row["tokens"] = " ".join(str(int(k)) for k in tokens or ())
                rows.append(row)
        return pd.DataFrame(rows)

    def save(self, path: str | os.PathLike) -> Path:
        """Writes the whole sweep (every member's trajectory, the chains,
        members, labels, settings and the gradflow version) to one `.npz`
        file, atomically. Read it back with [`gradflow.load_sweep`][]."""
        path = Path(path)
        arrays: dict[str, np.ndarray] = {
            "ts": np.asarray(self.ts),
            "loss": np.asarray(self.loss),
            "P": np.stack([np.asarray(c.P) for c in self.chains]),
            "pi": np.stack([np.asarray(c.pi) for c in self.chains]),
        }
        trajs = []
        for i, traj in enumerate(self.trajectories):
            p = f"m{i}/"
            arrays[p + "ts"] = np.asarray(traj.ts)
            arrays[p + "loss"] = np.asarray(traj.loss)
            arrays[p + "grad_norm"] = np.asarray(traj.grad_norm)
            for n, v in param_arrays(traj.params).items():
                arrays[p + "params_" + n] = np.asarray(v)
            for k, v in traj.extras.items():
                arrays[p + "extra_" + k] = np.asarray(v)
            trajs.append(
                {
                    "settings": traj.settings,
                    "stats": traj.stats,
                    "ok": bool(traj.ok),
                    "message": traj.message,
                    "stages": [as_record(s) for s in traj.stages],
                    "events": [as_record(e) for e in traj.events],
                    "extras": sorted(traj.extras),
                }
            )
        meta = {
            "format": FORMAT_NAME,
            "format_version": FORMAT_VERSION,
            "gradflow_version": version(),
            "settings": self.settings,
            "stats": self.stats,
            "members": [m.to_dict() for m in self.members],
            "labels": {k: list(v) for k, v in self.labels.items()},
            "tokens": [list(c.tokens) if c.tokens else None for c in self.chains],
            "trajectories": trajs,
        }
        arrays["__gradflow__"] = np.array(json.dumps(meta, default=json_default))
        atomic_write(path, lambda f: np.savez(f, **arrays))  # pyright: ignore[reportArgumentType]
        return path


def _stages_from_file(records: list) -> tuple:
    return tuple(Stage.from_dict(r) for r in records)


def load_sweep(path: str | os.PathLike) -> Sweep:
    """Loads a sweep written by [`gradflow.Sweep.save`][].

    **Raises:** `FileNotFoundError` if `path` does not exist; `ValueError`
    naming the file if it is not a gradflow sweep, is truncated, or was
    written by a newer file-format version.
    """
    meta, arrays = read_npz_with_meta(path, FORMAT_NAME)
    found = meta.get("format_version")
    if not isinstance(found, int) or found > FORMAT_VERSION:
        raise ValueError(
            f"'{path}' was written with sweep format version {found} by gradflow "
            f"{meta.get('gradflow_version')}; this gradflow ({version()}) reads "
            f"format versions <= {FORMAT_VERSION}: upgrade gradflow"
        )
    try:
        chains = tuple(
            MarkovChain(P, tokens=tok, pi=pi)
            for P, pi, tok in zip(
                arrays["P"], arrays["pi"], meta["tokens"], strict=True
            )
        )
        members = tuple(Member.from_dict(m) for m in meta["members"])
        trajs = []
        for i, (member, t) in enumerate(
            zip(members, meta["trajectories"], strict=True)
        ):
            p = f"m{i}/"
            trajs.append(
                Trajectory(
                    ts=arrays[p + "ts"],
                    loss=arrays[p + "loss"],
                    grad_norm=arrays[p + "grad_norm"],
                    params=cast(
                        Params,
                        params_from_arrays(
                            arrays, t["settings"].get("model"), p + "params_"
                        ),
                    ),
                    chain=chains[member.chain],
                    settings=t["settings"],
                    stats=t["stats"],
                    ok=bool(t["ok"]),
                    message=t["message"],
                    stages=_stages_from_file(t["stages"]),
                    events=tuple(EventRecord.from_dict(e) for e in t["events"]),
                    extras={k: arrays[p + "extra_" + k] for k in t["extras"]},
                )
            )
        return Sweep(
            trajectories=tuple(trajs),
            members=members,
            chains=chains,
            labels={k: tuple(v) for k, v in meta["labels"].items()},
            ts=arrays["ts"],
            loss=arrays["loss"],
            settings=meta["settings"],
            stats=meta["stats"],
        )
    except KeyError as e:
        raise ValueError(
            f"'{path}' is an incomplete gradflow sweep: missing {e}"
        ) from None


__all__ = ["Member", "Sweep", "load_sweep", "stage_field"]
