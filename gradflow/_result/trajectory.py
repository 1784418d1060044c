"""A solved gradient flow: [`gradflow.Trajectory`][] and its file."""

import math
import os
from typing import Any, ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._core.errors import is_number, show
from .._problem.base import Problem
from .._problem.functions import astype, params_dtype
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
        if not len(self):
            return f"Trajectory({describe(self.problem)}, 0 saves, {status(self)})"
        return (
            f"Trajectory({describe(self.problem)}, {len(self)} saves, "
            f"t in [0, {self.t_final:g}], loss {self.loss[0]:.6g} -> "
            f"{self.loss[-1]:.6g}, {status(self)})"
        )

    def at_time(self, t: float):
        r"""The parameters at time `t` (one point, no time axis).

        At a save time, that save's point exactly. Between two saves $t_i <
        t < t_{i+1}$, the cubic Hermite interpolant through the two saved
        points with the flow's velocities $-\nabla L$ there: it matches the
        flow's value and slope at both ends, so its error is of fourth order
        in the spacing $h = t_{i+1} - t_i$, about $h^4|\theta^{(4)}|/384$
        (far below the solver's tolerance on the default log grid, whose
        spacing is 1.45 % of $t$, except where the flow turns within a save
        spacing; for exact points there, solve with those save times). It
        needs the problem (two gradient evaluations); a trajectory loaded
        without its problem gives the saves only, and between them an error
        naming the nearest ones.

        **Raises:** `ValueError` for a `t` outside `[ts[0], ts[-1]]` (naming
        that range) or between saves without the problem (naming them);
        `TypeError` for a `t` that is not a number.
        """
        if not is_number(t) or not math.isfinite(float(t)):
            raise TypeError(f"at_time takes a finite time, got {show(t)}")
        t = float(t)
        ts = np.asarray(self.ts, np.float64)
        if not len(self) or not ts[0] <= t <= ts[-1]:
            span = f"[{ts[0]:g}, {ts[-1]:g}]" if len(self) else "empty (no saves)"
            raise ValueError(f"t = {t:g} lies outside the saved times: {span}")
        i = int(np.searchsorted(ts, t))
        if ts[i] == t:
            return self.at(i)
        if self.problem is None:
            raise ValueError(
                f"t = {t:g} lies between save {i - 1} (t = {ts[i - 1]:g}) and save "
                f"{i} (t = {ts[i]:g}); interpolating needs the flow's velocity, "
                "and this trajectory has no problem: use traj.at(i) at a save"
            )
        a, b = self.at(i - 1), self.at(i)
        problem = astype(self.problem, params_dtype(a))
        va, vb = _velocity(problem, a), _velocity(problem, b)
        h = ts[i] - ts[i - 1]
        s = (t - ts[i - 1]) / h
        w = (
            2 * s**3 - 3 * s**2 + 1,
            s**3 - 2 * s**2 + s,
            3 * s**2 - 2 * s**3,
            s**3 - s**2,
        )
        return jax.tree.map(
            lambda x0, v0, x1, v1: np.asarray(
                w[0] * x0 + w[1] * h * v0 + w[2] * x1 + w[3] * h * v1,
                np.asarray(x0).dtype,
            ),
            a,
            va,
            b,
            vb,
        )


@eqx.filter_jit
def _velocity(problem: Problem, params):
    return jax.tree.map(jnp.negative, jax.grad(problem.loss)(params))


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
