"""Argument checks shared by the theory functions: one-line errors naming the
argument and its value, raised before anything is compiled."""

import math

import jax
import jax.numpy as jnp
import numpy as np

from .._chain import MarkovChain
from .._model import AnyParams, Params, param_arrays
from .._trajectory import Trajectory
from .._validate import check_finite_entries, is_number, show
from .._variants import VariantParams


def check_chain(chain) -> MarkovChain:
    if not isinstance(chain, MarkovChain):
        raise TypeError(
            f"chain must be a gradflow.MarkovChain, got {type(chain).__name__}"
        )
    return chain


# Dimensions of one point (no time axis) of each parameter.
_NDIM = {"W0": 2, "W1": 2, "WQ": 2, "WK": 2}
_VARIANT_NDIM = {"W0": 2, "W1": 2, "WQ": 4, "WK": 4, "WV": 4, "gain": 1, "bias": 1}


def check_point(params, chain: MarkovChain) -> AnyParams:
    if not isinstance(params, (Params, VariantParams)):
        raise TypeError(
            "params must be a gradflow.Params or gradflow.VariantParams, got "
            f"{type(params).__name__}"
        )
    ndims = _NDIM if isinstance(params, Params) else _VARIANT_NDIM
    for name, value in param_arrays(params).items():
        if np.ndim(value) != ndims[name]:
            raise ValueError(
                f"params.{name} must be {ndims[name]}-dimensional (one point, no time "
                f"axis), got shape {np.shape(value)}; index a trajectory's params "
                "as traj.params[i]"
            )
        check_finite_entries(f"params.{name}", value)
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
