"""A problem in a file: written field by field, read back as the same object.

Every problem is an `eqx.Module`, so the engine saves any of them the same
way, without a hook: each field is an array (written as an array of the
file), a nested module (written the same way, recursively), a number,
string, flag, `None` or tuple of them (written into the JSON metadata), or a
function that can be imported by its name (`jax.numpy.tanh`, a function of
the user's module: written as its import path). The class is named by its
import path (`module:qualname`, at the shortest public module that exports
it), and read back by importing it and setting the fields (its `__init__` is
not called again: the object is the one saved). Any other field (a lambda, a
function defined inside another) is refused in one line naming it.

A problem whose class cannot be imported where the file is read (a class
defined in a script's `__main__`) is not read back: the reader then warns
and returns `None` for it.

Files written before this layout (format 2, where a problem gave its own
configuration) are read by readers that a problem's package registers with
[`register_legacy_problem`][gradflow._problem.files.register_legacy_problem].
"""

import dataclasses
import importlib
import math
import sys
from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._core.errors import show
from .base import Problem


_ARRAY, _MODULE, _TUPLE = "__array__", "__module__", "__tuple__"
_FUNCTION = "__function__"

# Readers of problems in files of older layouts, by class path (or
# "format-1" for gradflow 0.1.0's files, which held no problem class):
# `reader(config, arrays) -> Problem`.
LEGACY_PROBLEMS: dict[str, Callable[[dict, dict], Any]] = {}


def register_legacy_problem(key: str, reader: Callable[[dict, dict], Any]) -> None:
    """Lets files of older layouts be read: `reader(config, arrays)` builds
    the problem that a file of class path `key` (or `"format-1"`) holds."""
    LEGACY_PROBLEMS[key] = reader


def class_path(problem_or_class) -> str:
    """`module:qualname` of a problem's class, at the shortest module path
    that exports the class (`gradflow.problems:DeepLinear`, not the private
    module it is defined in), so that files survive moves of private
    modules."""
    cls = (
        problem_or_class
        if isinstance(problem_or_class, type)
        else type(problem_or_class)
    )
    return _object_path(cls)


def _object_path(obj) -> str:
    """`module:qualname` of a class or function, at the shortest module
    path that exports it."""
    parts = obj.__module__.split(".")
    if "." not in obj.__qualname__:
        for k in range(1, len(parts)):
            module = sys.modules.get(".".join(parts[:k]))
            if getattr(module, obj.__qualname__, None) is obj:
                return f"{'.'.join(parts[:k])}:{obj.__qualname__}"
    return f"{obj.__module__}:{obj.__qualname__}"


def _import(path: str) -> Any:
    module, _, qualname = path.partition(":")
    try:
        obj: Any = importlib.import_module(module)
        for part in qualname.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError):
        return None
    return obj


def import_class(path: str) -> type | None:
    """The class a file names (`module:qualname`), or `None` if it cannot be
    imported here (a class defined in a script's `__main__`)."""
    obj = _import(path)
    return obj if isinstance(obj, type) else None


def function_path(value) -> str | None:
    """The import path (`module:qualname`) of a function that importing
    that path gives back (`jax.numpy:tanh`, a module-level function of a
    user's module), else `None` (a lambda, a nested function, a bound
    method, a function of `__main__`)."""
    if isinstance(value, type) or not callable(value):
        return None
    module = getattr(value, "__module__", None)
    qualname = getattr(value, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(qualname, str):
        return None
    if module == "__main__" or "<" in qualname:
        return None
    path = _object_path(value)
    return path if _import(path) is value else None


def _plain(value) -> bool:
    if value is None or isinstance(value, (bool, int, str)):
        return True
    return isinstance(value, float) and math.isfinite(value)


def _encode(obj: eqx.Module, prefix: str, arrays: dict) -> dict[str, Any]:
    fields = {}
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        name = prefix + f.name
        if isinstance(value, (jax.Array, np.ndarray)):
            arrays[name] = np.asarray(value)
            fields[f.name] = {_ARRAY: name}
        elif isinstance(value, eqx.Module):
            fields[f.name] = {
                _MODULE: class_path(value),
                "fields": _encode(value, name + ".", arrays),
            }
        elif isinstance(value, tuple) and all(_plain(v) for v in value):
            fields[f.name] = {_TUPLE: list(value)}
        elif _plain(value):
            fields[f.name] = value
        elif (path := function_path(value)) is not None:
            fields[f.name] = {_FUNCTION: path}
        else:
            qualname = getattr(value, "__qualname__", None)
            shown = f"function {qualname}" if callable(value) and qualname else None
            raise TypeError(
                f"{type(obj).__name__}.{f.name} = {shown or show(value)} cannot be "
                "saved: a "
                "problem's fields must be arrays, equinox modules, numbers, "
                "strings, flags, None, tuples of them, or functions importable "
                "by name (module-level, not a lambda)"
            )
    return fields


def problem_to_file(problem: eqx.Module) -> tuple[dict[str, Any], dict[str, Any]]:
    """`(meta, arrays)` of a problem: `meta` is JSON-able (its class and
    fields), `arrays` holds its arrays by field path (`chain.P`)."""
    arrays: dict[str, np.ndarray] = {}
    fields = _encode(problem, "", arrays)
    return {"class": class_path(problem), "fields": fields}, arrays


def _build(cls: type, fields: dict, arrays: dict):
    obj = object.__new__(cls)
    for name, value in fields.items():
        object.__setattr__(obj, name, _decode(value, arrays))
    return obj


def _decode(value, arrays: dict):
    if isinstance(value, dict) and _ARRAY in value:
        return jnp.asarray(arrays[value[_ARRAY]])
    if isinstance(value, dict) and _MODULE in value:
        cls = import_class(value[_MODULE])
        if cls is None:
            raise LookupError(value[_MODULE])
        return _build(cls, value["fields"], arrays)
    if isinstance(value, dict) and _TUPLE in value:
        return tuple(value[_TUPLE])
    if isinstance(value, dict) and _FUNCTION in value:
        function = _import(value[_FUNCTION])
        if function is None:
            raise LookupError(value[_FUNCTION])
        return function
    return value


def problem_from_file(meta: dict[str, Any], arrays: dict[str, Any]):
    """The problem `problem_to_file` wrote, or `None` where its class (or a
    nested module's) cannot be imported here. Files of an older layout are
    read by a registered legacy reader."""
    cls = import_class(meta["class"])
    if cls is None:
        return None
    if "fields" not in meta:  # format 2: the problem's own configuration
        reader = LEGACY_PROBLEMS.get(meta["class"])
        if reader is not None:
            return reader(meta["config"], arrays)
        fields = {f.name for f in dataclasses.fields(cls)}
        kwargs: dict[str, Any] = {k: jnp.asarray(v) for k, v in arrays.items()}
        for k, v in meta["config"].items():
            kwargs[k] = tuple(v) if isinstance(v, list) else v
        return cls(**{k: v for k, v in kwargs.items() if k in fields})
    try:
        return _build(cls, meta["fields"], arrays)
    except LookupError:
        return None


def fingerprint(problem: Problem) -> dict[str, np.ndarray]:
    """The arrays that a checkpoint of a run of `problem` must match."""
    return problem_to_file(problem)[1]


def configuration(problem: Problem) -> dict[str, Any]:
    """What else a checkpoint of a run of `problem` must match: its class
    (`"problem"`) and every field that is not an array, nested modules'
    included (`"problem model.heads"`), as JSON-able values. (A field such as
    the paper's model's `context` changes the run without changing an array.)"""
    meta, _ = problem_to_file(problem)
    out: dict[str, Any] = {"problem": meta["class"]}

    def walk(fields: dict[str, Any], prefix: str) -> None:
        for name, value in fields.items():
            key = f"problem {prefix}{name}"
            if isinstance(value, dict) and _ARRAY in value:
                continue
            if isinstance(value, dict) and _MODULE in value:
                out[key] = value[_MODULE]
                walk(value["fields"], f"{prefix}{name}.")
            elif isinstance(value, dict) and _TUPLE in value:
                out[key] = value[_TUPLE]
            elif isinstance(value, dict) and _FUNCTION in value:
                out[key] = value[_FUNCTION]
            else:
                out[key] = value

    walk(meta["fields"], "")
    return out


__all__ = [
    "LEGACY_PROBLEMS",
    "class_path",
    "configuration",
    "fingerprint",
    "function_path",
    "import_class",
    "problem_from_file",
    "problem_to_file",
    "register_legacy_problem",
]
