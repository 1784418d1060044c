"""Argument checks shared by the theory functions: one-line errors naming the
argument and its value, raised before anything is compiled."""

import math

import jax
import jax.numpy as jnp
import numpy as np

from .._chain import MarkovChain
from .._custom_types import PARAM_NAMES
from .._model import Params
from .._trajectory import Trajectory
from .._validate import check_finite_entries, is_number, show


def check_chain(chain) -> MarkovChain:
    if not isinstance(chain, MarkovChain):
        raise TypeError(
            f"chain must be a gradflow.MarkovChain, got {type(chain).__name__}"
        )
    return chain


def check_point(params, chain: MarkovChain) -> Params:
    if not isinstance(params, Params):
        raise TypeError(
            f"params must be a gradflow.Params, got {type(params).__name__}"
        )
    for name in PARAM_NAMES:
        if np.ndim(getattr(params, name)) != 2:
            raise ValueError(
                f"params.{name} must be 2-dimensional (one point, no time axis), got "
                f"shape {np.shape(getattr(params, name))}; index a trajectory's params "
                "as traj.params[i]"
            )
        check_finite_entries(f"params.{name}", getattr(params, name))
    if params.d != chain.d:
        raise ValueError(
            f"params are for d = {params.d} tokens but the chain has d = {chain.d}"
        )
    return jax.tree.map(lambda x: jnp.asarray(x, jnp.float64), params)


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
    "check_chain",
    "check_method",
    "check_point",
    "check_rel_tol",
    "check_trajectory",
]
