"""Argument checks shared by the theory functions: one-line errors naming the
argument and its value, raised before anything is compiled."""

import math

import jax.numpy as jnp

from .._core.validate import is_number, show
from .._problem.adapt import as_problem as _adapt
from .._problem.base import Problem
from .._problem.functions import check_start
from .._result.trajectory import Trajectory


def as_problem(problem, params=None) -> Problem:
    """A `gf.Problem` as it is; anything else through
    [`gradflow.as_problem`][] (a chain: the paper's model on it, of the width
    and variant of `params`), with a one-line error naming the argument."""
    try:
        return _adapt(problem, params=params)
    except TypeError as e:
        raise TypeError(f"problem: {e}") from None


def check_point(params, problem: Problem):
    """One point of the problem (no time axis, finite), in float64."""
    return check_start(problem, params, jnp.float64)


def check_trajectory(traj) -> Trajectory:
    if not isinstance(traj, Trajectory):
        raise TypeError(
            f"traj must be a gradflow.Trajectory, got {type(traj).__name__}"
        )
    if len(traj) < 3:
        raise ValueError(f"traj has {len(traj)} saved points; need at least 3")
    return traj


def check_method(method) -> str:
    if not isinstance(method, str) or method not in ("auto", "dense", "lanczos"):
        raise ValueError(
            f"method must be 'auto', 'dense' or 'lanczos', got {show(method)}"
        )
    return method


def check_rel_tol(tol) -> float:
    if not is_number(tol):
        raise TypeError(f"tol must be a number in (0, 1), got tol = {show(tol)}")
    tol = float(tol)
    if not math.isfinite(tol) or not 0 < tol < 1:
        raise ValueError(f"tol must lie in (0, 1), got tol = {tol}")
    return tol


__all__ = [
    "as_problem",
    "check_method",
    "check_point",
    "check_rel_tol",
    "check_trajectory",
]
