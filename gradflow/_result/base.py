"""What every result gradflow returns shares: [`AbstractResult`][], the one
schema of a [`gradflow.Trajectory`][], a [`gradflow.SGDRun`][] and each member
of a [`gradflow.Sweep`][]."""

import os
from pathlib import Path
from typing import Any, ClassVar

import equinox as eqx
import jax
import numpy as np

from .._core.errors import is_number, show
from .._core.records import Record
from .._problem.base import Problem
from .._problem.functions import describe
from . import tables
from .codes import RESULTS, is_successful
from .files import file_parts, write_file
from .labelled import is_netcdf_path, result_dataset, write_netcdf


class AbstractResult(eqx.Module):
    """What every result shares (the fields a result file holds).

    - `ts`: save times, shape `(T,)`, increasing;
    - `loss`, `grad_norm`: the population loss and $|\\nabla L|$ at `ts`;
    - `params`: the problem's parameter PyTree with a leading time axis;
    - `problem`: the [`gradflow.Problem`][] (`None` for a file whose problem
      class cannot be imported here);
    - `settings`, `stats`: how it was run and what it cost (typed records);
    - `result`: a [`gradflow.RESULTS`][] code, how the run ended; `detail`:
      one line on where, why and what to change, for a failure;
    - `ok`, `message`: derived from `result` (and `detail`);
    - `stages`, `events`: [`gradflow.Stage`][] and [`gradflow.EventRecord`][]
      records; `extras`: arrays saved at every save time.
    """

    ts: eqx.AbstractVar[np.ndarray]
    loss: eqx.AbstractVar[np.ndarray]
    grad_norm: eqx.AbstractVar[np.ndarray]
    params: eqx.AbstractVar[Any]
    problem: eqx.AbstractVar[Problem | None]
    settings: eqx.AbstractVar[Record]
    stats: eqx.AbstractVar[Record]
    result: eqx.AbstractVar[Any]
    detail: eqx.AbstractVar[str]
    stages: eqx.AbstractVar[tuple]
    events: eqx.AbstractVar[tuple]
    extras: eqx.AbstractVar[dict[str, np.ndarray]]

    # The file format's name, the arrays of the result's own (beyond the
    # parameters, the problem and the extras) in the order written, and the
    # record types of its settings and stats.
    format_name: ClassVar[str]
    own_arrays: ClassVar[tuple[str, ...]]
    settings_type: ClassVar[type[Record]]
    stats_type: ClassVar[type[Record]]

    @property
    def ok(self) -> bool:
        """Whether the run succeeded (`result` is `RESULTS.successful`)."""
        return is_successful(self.result)

    @property
    def message(self) -> str:
        """What happened, for a failed run (`""` when `ok`): the `detail`, or
        the result code's own text."""
        if self.ok:
            return ""
        return self.detail or RESULTS[self.result]

    @property
    def final_params(self):
        """The last saved parameters."""
        return self.at(-1)

    def at(self, i: int):
        """The parameters at save `i` (one point, no time axis): `i` is an
        integer in `[-len(self), len(self))`, as for a list; a float or an
        index out of range is a one-line error (for a time, a
        [`gradflow.Trajectory`][] has `at_time`)."""
        n = len(self)
        if isinstance(i, (bool, np.bool_)) or not isinstance(i, (int, np.integer)):
            hint = (
                f"; for the point at the time t = {i}, use traj.at_time({i})"
                if is_number(i) and hasattr(self, "at_time")
                else ""
            )
            raise TypeError(f"at takes a save index (an integer), got {show(i)}{hint}")
        if not -n <= int(i) < n:
            raise IndexError(
                f"save index {int(i)} is out of range: the result has {n} saves "
                f"(indices 0 to {n - 1}, or -{n} to -1)"
            )
        return jax.tree.map(lambda x: x[int(i)], self.params)

    @property
    def t_final(self) -> float:
        """The last time reached (`settings.t1` when `ok`; NaN without saves)."""
        return float(self.ts[-1]) if len(self) else float("nan")

    def __len__(self) -> int:
        return int(self.ts.shape[0])

    def to_xarray(self):
        """The result as an `xarray.Dataset` on the time coordinate `t`: the
        loss, $|\\nabla L|$, every parameter leaf and observable with named
        dimensions ([`gradflow.array_names`][]), the problem's arrays, and the
        settings, stats, problem and gradflow version as attributes. Written
        with xarray's `to_netcdf`, it reads back with [`gradflow.load`][] as
        this result (`docs/analysis.md`; needs
        `pip install "gradflow[analysis]"`)."""
        return result_dataset(self)

    def stages_frame(self):
        """The stages as a `pandas.DataFrame`, one row per stage (the fields
        of [`gradflow.Stage`][] and its `duration`)."""
        return tables.stages_frame(self.stages)

    def events_frame(self):
        """The events as a `pandas.DataFrame`, one row per event (the fields
        of [`gradflow.EventRecord`][])."""
        return tables.events_frame(self.events)

    def save(self, path: str | os.PathLike) -> Path:
        """Writes the result to `path` (a `.npz` file), atomically: every
        array, the problem, settings, stats, result code, stages, events and
        the gradflow version. Where `path` ends in `.nc` it is the netCDF
        file of [`to_xarray`][gradflow.Trajectory.to_xarray] instead (needs
        `pip install "gradflow[analysis]"`). Read either back with
        [`gradflow.load`][]."""
        if is_netcdf_path(path):
            return write_netcdf(self, path)
        return write_file(path, *file_parts(self))


def status(result: AbstractResult) -> str:
    """`ok`, or `FAILED: ` and the message (for `repr`)."""
    return "ok" if result.ok else f"FAILED: {result.message}"


__all__ = ["AbstractResult", "describe", "status"]
