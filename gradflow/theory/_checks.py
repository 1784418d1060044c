"""Argument checks shared by the theory functions: one-line errors naming the
argument and its value, raised before anything is compiled."""

import math

import jax.numpy as jnp
import numpy as np

from .._core.validate import is_number, show
from .._engine.problem import Problem
from .._engine.result import Trajectory
from ..problems._markov.chain import MarkovChain
from ..problems._markov.model import Params, model_of as params_model
from ..problems._markov.problem import MarkovAttention
from ..problems._markov.variants import VariantParams


def check_chain(chain) -> MarkovChain:
    if not isinstance(chain, MarkovChain):
        raise TypeError(
            f"chain must be a gradflow.MarkovChain, got {type(chain).__name__}"
        )
    return chain


def as_problem(problem, params=None) -> Problem:
    """A `gf.Problem` as it is; a chain as the paper's model on it, of the
    width and model of `params` (when they are a point of it)."""
    if isinstance(problem, Problem):
        return problem
    if not isinstance(problem, MarkovChain):
        raise TypeError(
            "problem must be a gradflow.Problem or a gradflow.MarkovChain, got "
            f"{type(problem).__name__}"
        )
    width, model = 16, None
    if isinstance(params, (Params, VariantParams)) and np.ndim(params.W0) >= 2:
        width, model = max(1, int(np.shape(params.W0)[-2])), params_model(params)
    return MarkovAttention(problem, width, model, save_attention=False)


def check_point(params, problem: Problem):
    """One point of the problem (no time axis, finite), in float64: the
    problem's own check (`Problem.check_params`)."""
    return problem.check_params(params, jnp.float64)


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
    "check_chain",
    "check_method",
    "check_point",
    "check_rel_tol",
    "check_trajectory",
]
