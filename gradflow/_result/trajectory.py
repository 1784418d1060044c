"""A solved gradient flow: [`gradflow.Trajectory`][] and its file."""

import os
from typing import Any, ClassVar

import equinox as eqx
import numpy as np

from .._problem.base import Problem
from .base import AbstractResult, describe, status
from .codes import RESULTS
from .files import build_result, read_result, register_reader
from .info import FlowSettings, FlowStats


class Trajectory(AbstractResult):
    """A solved population gradient flow (what [`gradflow.flow`][] and
    [`gradflow.integrate`][] return).

    **Fields:**

    - `ts`: save times, shape `(T,)`, increasing, starting at 0.
    - `loss`, `grad_norm`: the population loss and $|\\nabla L|$ at `ts`.
    - `params`: the problem's parameters with a leading time axis of length
      `T` (for the paper's model a [`gradflow.Params`][]: `traj.params[-1]` is
      the last point; for any problem `traj.at(-1)`).
    - `problem`: the [`gradflow.Problem`][] that was solved (for the paper's
      model `traj.problem.chain` is its chain).
    - `settings`: a [`gradflow.FlowSettings`][]: every setting of the solve
      (init_scale, seed, t1, solver, tolerances, ...); with the problem,
      enough to run it again.
    - `stats`: a [`gradflow.FlowStats`][]: steps, gradient evaluations,
      Hessian-vector products, wall time.
    - `result`: a [`gradflow.RESULTS`][] code; `ok` (it reached `t1` and
      followed the flow: its saved loss never rose) and `message` (what
      happened if not, and what to change) derive from it.
    - `stages`, `events`: tuples of records (filled by stage detection).
    - `extras`: further saved arrays (observables), keyed by name.
    """

    ts: np.ndarray
    loss: np.ndarray
    grad_norm: np.ndarray
    params: Any
    problem: Problem | None
    settings: FlowSettings
    stats: FlowStats
    result: Any = eqx.field(default_factory=lambda: RESULTS.successful)
    detail: str = ""
    stages: tuple = ()
    events: tuple = ()
    extras: dict[str, np.ndarray] = eqx.field(default_factory=dict)

    format_name: ClassVar[str] = "gradflow-trajectory"
    own_arrays: ClassVar[tuple[str, ...]] = ("ts", "loss", "grad_norm")
    settings_type: ClassVar[type] = FlowSettings
    stats_type: ClassVar[type] = FlowStats

    def __repr__(self) -> str:
        return (
            f"Trajectory({describe(self.problem)}, {len(self)} saves, "
            f"t in [0, {self.t_final:g}], loss {self.loss[0]:.6g} -> "
            f"{self.loss[-1]:.6g}, {status(self)})"
        )


def load_trajectory(path: str | os.PathLike) -> Trajectory:
    """Loads a trajectory written by [`gradflow.Trajectory.save`][] (typed:
    any other kind of gradflow file is refused, naming its reader)."""
    return read_result(Trajectory, path, "trajectory")  # pyright: ignore[reportReturnType]


register_reader(
    Trajectory.format_name,
    load_trajectory,
    "gradflow.load",
    lambda path, meta, arrays: build_result(
        Trajectory, path, meta, arrays, "trajectory"
    ),
)

__all__ = ["Trajectory", "load_trajectory"]
