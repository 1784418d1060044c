"""Checks of arguments: numbers, integers, positive finite values, seeds,
initial scales, save times and dtypes.

Each returns the value as a plain Python `float` or `int`, or raises a
one-line `TypeError` (wrong kind) or `ValueError` (right kind, bad value) that
names the argument and shows the value (see `docs/errors.md`). They run on
the host, before anything is compiled. A foundation: it imports nothing of
gradflow but the other foundations (`_errors`, `_custom_types`).
"""

import math
from typing import TypeVar

import jax
import jax.numpy as jnp
import numpy as np

from .errors import is_number, show


_T = TypeVar("_T")


def _got(name: str, value, echo_name: bool) -> str:
    return f"got {name} = {show(value)}" if echo_name else f"got {show(value)}"


def is_integer(value) -> bool:
    """Whether `value` is a Python or NumPy integer (not a bool, not a float
    that happens to be whole)."""
    return not isinstance(value, (bool, np.bool_)) and isinstance(
        value, (int, np.integer)
    )


def check_integer(name: str, value, least: int | None = None, *, echo_name=True) -> int:
    """`value` as an `int`; `TypeError` unless it is an integer, `ValueError` if
    it is below `least` (no bound when `None`).

    `echo_name` chooses the message form of the `TypeError`:
    `"width must be an integer, got width = 2.5"` (default) or
    `"width must be an integer, got 2.5"`.
    """
    if not is_integer(value):
        raise TypeError(f"{name} must be an integer, {_got(name, value, echo_name)}")
    if least is not None and value < least:
        raise ValueError(f"{name} must be >= {least}, got {name} = {value}")
    return int(value)


def check_seed(seed) -> int:
    """A random seed: any integer (`TypeError` otherwise)."""
    return check_integer("seed", seed)


def check_init_scale(init_scale) -> float:
    """The standard deviation of a random start, as a finite `float > 0`:
    `TypeError` unless it is a number, `ValueError` if it is non-finite or
    `<= 0`. A parameter point given in its place (`integrate(chain, params0)`)
    is told to go to `params=`."""
    if not is_number(init_scale):
        # A starting point (a PyTree of arrays, e.g. a gradflow.Params) given
        # in its place.
        leaves = (
            [] if isinstance(init_scale, (str, bytes)) else jax.tree.leaves(init_scale)
        )
        if leaves and any(np.ndim(x) > 0 for x in leaves):
            raise TypeError(
                f"init_scale must be a positive number, got a "
                f"{type(init_scale).__name__} (a starting point?); pass a starting "
                "point as params=..."
            )
        raise TypeError(f"init_scale must be a positive number, got {show(init_scale)}")
    value = float(init_scale)
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"init_scale must be finite and > 0, got {show(init_scale)}")
    return value


def check_number(name: str, value, *, echo_name: bool = True) -> float:
    """`value` as a `float`; `TypeError` unless it is a real scalar number (see
    `is_number`: not a bool, a string or an array). Finiteness is not checked."""
    if not is_number(value):
        raise TypeError(f"{name} must be a number, {_got(name, value, echo_name)}")
    return float(value)


def check_positive_finite(name: str, value, *, echo_name: bool = False) -> float:
    """`value` as a finite `float > 0`: `TypeError` unless it is a number,
    `ValueError` if it is non-finite or `<= 0`."""
    out = check_number(name, value, echo_name=echo_name)
    if not math.isfinite(out) or out <= 0:
        raise ValueError(f"{name} must be finite and > 0, got {name} = {show(value)}")
    return out


def check_finite_entries(name: str, value) -> np.ndarray:
    """`value` as a NumPy array; `ValueError` naming the first non-finite entry
    (`"params.W0 has a non-finite entry at (0, 1): nan"`)."""
    value = np.asarray(value)
    if not np.isfinite(value).all():
        i = tuple(int(k) for k in np.argwhere(~np.isfinite(value))[0])
        raise ValueError(f"{name} has a non-finite entry at {i}: {value[i]}")
    return value


def as_float_array(name: str, value, what: str) -> np.ndarray:
    """`value` as a float64 NumPy array, or a one-line `TypeError`: `{name}
    must be {what}, got ...` (a string, a ragged list, objects)."""
    try:
        return np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be {what}, got {show(value)}") from None


def check_save_times(ts, t1: float, slack: float = 0.0) -> np.ndarray:
    """Save times: a finite, strictly increasing 1-D array in `[0, t1]` (up to
    a relative `slack` at `t1`)."""
    ts = as_float_array("ts", ts, "an increasing array of times")
    if ts.ndim != 1 or ts.size == 0:
        raise ValueError(
            f"ts must be a non-empty 1-D array of times, got shape {ts.shape}"
        )
    if not np.isfinite(ts).all():
        raise ValueError(f"ts must be finite, got {ts[~np.isfinite(ts)][0]}")
    if ts.size > 1 and not (np.diff(ts) > 0).all():
        i = int(np.flatnonzero(np.diff(ts) <= 0)[0])
        raise ValueError(
            f"ts must be strictly increasing, but ts[{i}] = {ts[i]} and "
            f"ts[{i + 1}] = {ts[i + 1]}"
        )
    if ts[0] < 0 or ts[-1] > t1 * (1 + slack):
        raise ValueError(
            f"ts must lie in [0, t1] = [0, {t1}], got values from {ts[0]} to {ts[-1]}"
        )
    return ts


def check_dtype(dtype):
    """`"float64"` or `"float32"` (a name or a dtype) as `jnp.float64` or
    `jnp.float32`."""
    try:
        name = np.dtype(dtype).name if not isinstance(dtype, str) else dtype
    except TypeError:
        name = None
    if name not in ("float64", "float32"):
        raise ValueError(f"dtype must be 'float64' or 'float32', got {show(dtype)}")
    return jnp.float64 if name == "float64" else jnp.float32


def check_matrix(name: str, value) -> np.ndarray:
    """`value` as a finite, non-empty 2-D float64 NumPy array, or a one-line
    error."""
    out = as_float_array(name, value, "a matrix of numbers")
    if out.ndim != 2 or 0 in out.shape:
        raise ValueError(f"{name} must be a non-empty matrix, got shape {out.shape}")
    return check_finite_entries(name, out)


def check_covariance(name: str, value) -> np.ndarray:
    """A symmetric positive-definite matrix (symmetrised), or a one-line error
    naming the first asymmetric pair or the smallest eigenvalue."""
    S = check_matrix(name, value)
    if S.shape[0] != S.shape[1]:
        raise ValueError(f"{name} must be a square matrix, got shape {S.shape}")
    gap = np.abs(S - S.T)
    # symmetric up to rounding: a covariance estimated in floating point
    if gap.max() > 1e-10 * max(np.abs(S).max(), 1e-300):
        i, j = (int(k) for k in np.unravel_index(np.argmax(gap), S.shape))
        raise ValueError(
            f"{name} must be symmetric, but {name}[{i}, {j}] = {S[i, j]:.6g} and "
            f"{name}[{j}, {i}] = {S[j, i]:.6g}"
        )
    S = 0.5 * (S + S.T)
    low = float(np.linalg.eigvalsh(S)[0])
    if not low > 1e-12 * float(np.abs(S).max()):
        raise ValueError(
            f"{name} must be positive definite, got smallest eigenvalue {low:.6g}"
        )
    return S


def check_problem_of(problem, cls: type[_T], what: str) -> _T:
    """The `problem` of a result, or a one-line `TypeError` unless it is a
    `cls`: "expected `what` (the result it must be, e.g. "a trajectory of a
    gradflow.problems.DeepLinear"), got one of" the problem's type."""
    if not isinstance(problem, cls):
        raise TypeError(f"expected {what}, got one of {type(problem).__name__}")
    return problem


__all__ = [
    "as_float_array",
    "check_covariance",
    "check_matrix",
    "check_dtype",
    "check_finite_entries",
    "check_init_scale",
    "check_integer",
    "check_number",
    "check_positive_finite",
    "check_problem_of",
    "check_save_times",
    "check_seed",
    "is_integer",
    "is_number",
    "show",
]
