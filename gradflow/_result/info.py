"""Typed settings and statistics of a flow (what `traj.settings` and
`traj.stats` hold): frozen records with `to_dict` (for files and tables) and
`from_dict` (which reads files of older versions, dropping keys they had and
these do not)."""

import dataclasses
from typing import Any

from .._core.records import Record


@dataclasses.dataclass(frozen=True)
class SolveSettings(Record):
    """The settings every solve of the flow records (a flow's, and those a
    sweep's members share): `t1`, `solver` (its name), `max_steps`, `dtype`,
    `num_saves`; `solver_options` (the fields of a solver instance that
    differ from its class's defaults, e.g. `{"jacobian_tol": 5.0}`, or
    `None`); `stages` (whether stages were detected), `thresholds` (the
    [`gradflow.StageThresholds`][] as a dict, with stages) and `events` (the
    user events' names)."""

    t1: float = 0.0
    solver: str = ""
    max_steps: int = 0
    dtype: str = "float64"
    num_saves: int = 0
    solver_options: dict[str, Any] | None = None
    stages: bool = True
    thresholds: dict[str, Any] | None = None
    events: tuple[str, ...] | None = None

    def __post_init__(self):
        # (tuples read back from JSON as lists)
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, list) and f.name != "labels":
                object.__setattr__(self, f.name, tuple(value))


@dataclasses.dataclass(frozen=True)
class FlowSettings(SolveSettings):
    """How a flow was solved: enough, with its problem, to run it again: the
    fields of every solve (`t1`, `solver`, `max_steps`, `dtype`, `num_saves`,
    `solver_options`, `stages`, `thresholds`, `events`) and its start and
    tolerances: `init_scale` (`None` for a given start), `seed`, `rtol`,
    `atol`; and `motion`, the `SaveAt(motion=...)` of its dense saves where
    the flow moves fast (`None`: the grid of `num_saves` only)."""

    init_scale: float | None = None
    seed: int = 0
    rtol: float = 0.0
    atol: float = 0.0
    motion: float | None = None


@dataclasses.dataclass(frozen=True)
class FlowStats(Record):
    """What a flow's solve cost.

    **Fields:** `num_steps`, `num_accepted_steps`, `num_rejected_steps`;
    `num_grad_evals` (gradient evaluations of the vector field; `None` where
    unknown), `num_hvps` (Hessian-vector products; `None` where unknown),
    `w_rank` (the eigenpairs a Rosenbrock-W solver's W tracked at the end: its
    rank, or where the rank is adaptive the rank reached; `None` for other
    solvers), `resumed_from` (the time a checkpoint was resumed from, or
    `None`) and `wall_time` (seconds of this call, compilation included).
    """

    num_steps: int = 0
    num_accepted_steps: int = 0
    num_rejected_steps: int = 0
    num_grad_evals: int | None = None
    num_hvps: int | None = None
    w_rank: int | None = None
    resumed_from: float | None = None
    wall_time: float = 0.0


__all__ = ["FlowSettings", "FlowStats", "SolveSettings"]
