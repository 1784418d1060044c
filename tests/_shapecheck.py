"""The type checker of jaxtyping's import hook in the tests (tests/conftest.py).

beartype, restricted to the jaxtyping array annotations (`Float[Array, "m d"]`
and unions containing one): every gradflow function called from the tests
checks the shapes and dtypes of its array arguments and of its returned array
against its annotation, and named dimensions must agree across arguments
(`d` of `A` and of `pi`). Two things are left out on purpose:

- other annotations (`float`, `int`, `MarkovChain`, ...): gradflow's public
  functions check those themselves, with one-line errors naming the argument
  (tests/test_errors.py), which a generic type error would pre-empt;
- the generated `__init__` of modules (`eqx.Module` fields): each validates
  its fields in `__check_init__` with its own messages.
"""

import typing

import beartype
import jaxtyping


def _is_array_hint(hint) -> bool:
    if isinstance(hint, type) and issubclass(hint, jaxtyping.AbstractArray):
        return True
    return any(_is_array_hint(arg) for arg in typing.get_args(hint))


def shapes_only(fn):
    """beartype on `fn` with only its array annotations kept.

    jaxtyping passes a function it generated from the checked function's
    signature (same name and qualified name), so its annotations may be edited.
    """
    if getattr(fn, "__qualname__", "").endswith(".__init__"):
        return fn
    annotations = getattr(fn, "__annotations__", {})
    fn.__annotations__ = {k: v for k, v in annotations.items() if _is_array_hint(v)}
    return beartype.beartype(fn)
