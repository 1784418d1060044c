"""The type checker of jaxtyping's import hook in the tests (tests/conftest.py).

beartype, restricted to the jaxtyping array annotations (`Float[Array, "m d"]`,
and containers or unions of them): every gradflow function called from the
tests checks the shapes and dtypes of its array arguments and of the array it
returns against its annotation, and named dimensions must agree across the
arguments of one call (`d` of `A` and of `pi`). What is left out, on purpose:

- the array *kind*: gradflow takes NumPy arrays wherever it takes JAX arrays
  (inputs, saved trajectories), so `Float[Array, "d d"]` is checked as "a JAX
  or NumPy array of floats of shape (d, d)";
- other annotations (`float`, `int`, `MarkovChain`, ...): gradflow's public
  functions check those themselves, with one-line errors naming the argument
  (tests/test_errors.py), which a generic type error would pre-empt;
- the generated `__init__` of modules (`eqx.Module` fields): each validates
  its fields in `__check_init__` with its own messages.
"""

import functools
import operator
import types
import typing

import beartype
import jax
import jaxtyping
import numpy as np


def _is_array(hint) -> bool:
    return isinstance(hint, type) and issubclass(hint, jaxtyping.AbstractArray)


def _has_array(hint) -> bool:
    return _is_array(hint) or any(_has_array(a) for a in typing.get_args(hint))


def _widen(hint):
    """`hint` with each `X[jax.Array, dims]` turned into the same dtype and
    dims on a JAX array, a NumPy array or a NumPy scalar."""
    if _is_array(hint):
        if hint.array_type is jax.Array:
            return hint.dtype[jax.Array | np.ndarray | np.generic, hint.dim_str]
        return hint
    args = typing.get_args(hint)
    if not args:
        return hint
    origin = typing.get_origin(hint)
    widened = tuple(_widen(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return functools.reduce(operator.or_, widened)
    if origin in (tuple, list, dict):
        return origin[widened]
    return hint


def shapes_only(fn):
    """beartype on `fn` with only its array annotations kept (widened as above).

    jaxtyping passes a function it generated from the checked function's
    signature (same name and qualified name), so its annotations may be edited.
    """
    if getattr(fn, "__qualname__", "").endswith(".__init__"):
        return fn
    annotations = getattr(fn, "__annotations__", {})
    fn.__annotations__ = {k: _widen(v) for k, v in annotations.items() if _has_array(v)}
    return beartype.beartype(fn)
