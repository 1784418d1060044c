r"""The compiled chunk of a solve, exported (`jax.export`) and reloaded: a
warm start of the main job does not trace the solve again.

JAX's persistent compilation cache keeps executables, keyed by the lowered
program; to find one, every run traces and lowers its functions again. For
the chunk of a solve ([`run_chunk`][gradflow._loop.loop.run_chunk], the
largest program by far) that is seconds (`benchmarks/startup.py --parts`).
With [`enable`][] (the command line calls it), the first call of a chunk of a
given configuration exports the traced program to a file, and later processes
load it from there (deserialising a program costs milliseconds) and compile it
through the persistent cache like any other.

The file's key must change whenever the program could: it hashes gradflow's
own source files, the versions of JAX, jaxlib, Diffrax, Equinox, Lineax and
Optimistix, the structure of the inputs with their shapes and dtypes, and a
description of every non-array part (solver settings, functions), of
gradflow's, Diffrax's, Equinox's or JAX's own classes only (a problem class of
the user's is named in a treedef by its name alone, not its code, so its
calls are not exported). A function
is described by its module, name, code (bytecode and constants, nested code
included), defaults and closure; a configuration holding a function that is
not gradflow's, Diffrax's, Equinox's or JAX's own (a user's event condition,
say) is not exported: its behaviour may depend on state no key can see. Such
calls, calls under a transformation (a sweep's `vmap`) and any failure to
export take the ordinary path, `jax.jit`.

A chunk returns its state, so its output has the structure of its last
input. A function whose output has another structure (the loop's initial
state, built from the start) is exported with that structure beside it, in a
file of its own (`{key}.treedef`, pickled): a later process unflattens the
loaded program's outputs with it and traces nothing. A treedef is kept only
where it comes back equal to itself (its static parts, such as Equinox's
`MISSING` sentinel, are pickled by reference when they are constants of their
module).
"""

import hashlib
import importlib.metadata
import io
import pickle
import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import equinox as eqx
import jax
import numpy as np


_DIR: Path | None = None
_SOURCE: str | None = None
_LOADED: dict[str, tuple[Callable, Any]] = {}
_TRUSTED = ("gradflow", "diffrax", "equinox", "jax", "jaxlib", "lineax", "optimistix")
_PACKAGES = ("jax", "jaxlib", "diffrax", "equinox", "lineax", "optimistix", "numpy")


class _Unkeyable(Exception):
    """A part of the configuration that no key can describe."""


def enable(path: str | Path | None) -> None:
    """Keep exported chunks in `path` (`None`: stop)."""
    global _DIR
    _DIR = None if path is None else Path(path)


def enabled() -> bool:
    return _DIR is not None


def folder() -> Path | None:
    """Where exported chunks are kept (`None`: off)."""
    return _DIR


def _source_hash() -> str:
    """A hash of gradflow's own source files (computed once per process)."""
    global _SOURCE
    if _SOURCE is None:
        root = Path(__file__).resolve().parents[1]
        h = hashlib.sha256()
        for path in sorted(root.rglob("*.py")):
            h.update(str(path.relative_to(root)).encode())
            h.update(path.read_bytes())
        for name in _PACKAGES:
            try:
                h.update(f"{name}={importlib.metadata.version(name)}".encode())
            except importlib.metadata.PackageNotFoundError:
                h.update(f"{name}=none".encode())
        _SOURCE = h.hexdigest()
    return _SOURCE


def _describe_code(code: types.CodeType) -> str:
    consts = tuple(
        _describe_code(c) if isinstance(c, types.CodeType) else repr(c)
        for c in code.co_consts
    )
    return repr((code.co_name, code.co_code.hex(), consts, code.co_names))


def _describe(value: Any, depth: int = 0) -> str:
    """A description of a non-array leaf that determines what it computes."""
    if depth > 8:
        raise _Unkeyable("too deep")
    if value is None or isinstance(value, (bool, int, float, str, complex)):
        return repr(value)
    if isinstance(value, (np.dtype, type)):
        module = getattr(value, "__module__", "")
        if isinstance(value, type) and module.split(".")[0] not in _TRUSTED:
            raise _Unkeyable(f"a class of {module}")
        return repr(value)
    if isinstance(value, np.ndarray) or isinstance(value, np.generic):
        return f"ndarray{value.shape}{value.dtype}:{hashlib.sha256(np.ascontiguousarray(value).tobytes()).hexdigest()}"
    if isinstance(value, (tuple, list)):
        return (
            type(value).__name__
            + "("
            + ",".join(_describe(v, depth + 1) for v in value)
            + ")"
        )
    if isinstance(value, dict):
        items = sorted((repr(k), _describe(v, depth + 1)) for k, v in value.items())
        return "dict(" + ",".join(f"{k}:{v}" for k, v in items) + ")"
    if isinstance(value, types.MethodType):
        return (
            "method("
            + _describe(value.__func__, depth + 1)
            + ","
            + _describe(value.__self__, depth + 1)
            + ")"
        )
    if isinstance(value, types.FunctionType):
        module = value.__module__ or ""
        if module.split(".")[0] not in _TRUSTED:
            raise _Unkeyable(f"a function of {module}")
        cells = tuple(
            _describe(c.cell_contents, depth + 1) for c in value.__closure__ or ()
        )
        defaults = _describe(value.__defaults__, depth + 1)
        return f"fn({module}.{value.__qualname__},{_describe_code(value.__code__)},{defaults},{cells})"
    if isinstance(value, eqx.Module) or hasattr(value, "__dataclass_fields__"):
        module = type(value).__module__
        if module.split(".")[0] not in _TRUSTED:
            raise _Unkeyable(f"an object of {module}")
        leaves, treedef = jax.tree.flatten(value)
        return f"{type(value).__qualname__}({treedef}:{_describe(leaves, depth + 1)})"
    module = type(value).__module__
    if module.split(".")[0] in _TRUSTED and hasattr(value, "__wrapped__"):
        return "wrapped(" + _describe(value.__wrapped__, depth + 1) + ")"
    if module.split(".")[0] in ("jax", "jaxlib") and isinstance(
        value, jax.tree_util.Partial
    ):
        return _describe((value.func, value.args, value.keywords), depth + 1)
    raise _Unkeyable(f"a {type(value).__qualname__}")


def _node_types(treedef) -> list[type]:
    """The classes of a PyTree's inner nodes (modules, dataclasses, ...)."""
    data = treedef.node_data()
    own = [] if data is None else [data[0]]
    return own + [t for child in treedef.children() for t in _node_types(child)]


def _key(name: str, tree) -> tuple[str, list, Any, Any]:
    """`(key, array leaves, their treedef, static part)` of a call's inputs."""
    dynamic, static = eqx.partition(tree, eqx.is_array)
    leaves, treedef = jax.tree.flatten(dynamic)
    static_leaves, static_def = jax.tree.flatten(static)
    # A class of the user's (a problem of their module) is named in the
    # treedef by its name alone, not by its code: a loss edited between two
    # runs would find the program of the old one. Its calls are not exported.
    for cls in _node_types(static_def):
        module = getattr(cls, "__module__", "") or ""
        if module.split(".")[0] not in (*_TRUSTED, "builtins", "collections"):
            raise _Unkeyable(f"a class of {module}")
    h = hashlib.sha256()
    h.update(name.encode())
    h.update(_source_hash().encode())
    h.update(str(treedef).encode())
    h.update(str(static_def).encode())
    h.update(_describe(static_leaves).encode())
    for x in leaves:
        h.update(f"{x.shape}{x.dtype}{getattr(x, 'weak_type', False)}".encode())
    h.update(jax.default_backend().encode())
    return h.hexdigest()[:32], leaves, treedef, static


def call(name: str, fn: Callable, *args, same_structure: bool = True) -> Any:
    """`fn(*args)` (a pure function) through an exported program when
    [`enable`][] is on and the call can be keyed; `None` otherwise (the
    caller takes its ordinary path). `same_structure`: the output has the
    structure of the last argument (as a chunk returns its state); `False`:
    its structure is kept beside the exported program."""
    if _DIR is None:
        return None
    tracer = jax.core.Tracer  # pyright: ignore[reportAttributeAccessIssue]
    if any(isinstance(x, tracer) for x in jax.tree.leaves(args)):
        return None
    try:
        key, leaves, treedef, static = _key(name, args)
    except _Unkeyable:
        return None
    loaded = _LOADED.get(key)
    if loaded is None:
        loaded = _load_or_export(
            key, fn, leaves, treedef, static, same_structure=same_structure
        )
        if loaded is None:
            return None
        _LOADED[key] = loaded
    run, out_def = loaded
    if out_def is None:
        out_def = jax.tree.structure(args[-1])
    return jax.tree.unflatten(out_def, run(*leaves))


class _Pickler(pickle.Pickler):
    """Pickles a module-level constant of its class's own module (Equinox's
    `MISSING` in a Module's treedef) by reference, so that it comes back as
    the same object: a copy would not compare equal."""

    def persistent_id(self, obj):
        if isinstance(obj, (type, str, bytes, int, float, bool, tuple, type(None))):
            return None
        module = sys.modules.get(type(obj).__module__)
        if module is None:
            return None
        for attr, value in vars(module).items():
            if value is obj:
                return (module.__name__, attr)
        return None


class _Unpickler(pickle.Unpickler):
    def persistent_load(self, pid):
        module, attr = pid
        return getattr(sys.modules[module], attr)


def _dump_treedef(treedef) -> bytes | None:
    """`treedef` pickled, if it comes back equal to itself; else `None`."""
    try:
        buf = io.BytesIO()
        _Pickler(buf).dump(treedef)
        data = buf.getvalue()
        if _load_treedef(data) != treedef:
            return None
    except Exception:  # noqa: BLE001  (not picklable: not exported)
        return None
    return data


def _load_treedef(data: bytes):
    return _Unpickler(io.BytesIO(data)).load()


def _write(path: Path, data: bytes | bytearray) -> None:
    """Writes `path` whole or not at all (another process may read it)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{np.random.randint(1 << 30)}")
        tmp.write_bytes(data)
        tmp.replace(path)
    except OSError:
        pass


def _load_or_export(
    key, fn, leaves, treedef, static, *, same_structure
) -> tuple[Callable, Any] | None:
    """The loaded (or newly exported) program of `key` and its output's
    treedef (`None` where it is the last argument's)."""
    assert _DIR is not None
    path = _DIR / f"{key}.jaxexport"
    tree_path = _DIR / f"{key}.treedef"
    exported = None
    out_def = None
    if path.exists():
        try:
            if not same_structure:
                out_def = _load_treedef(tree_path.read_bytes())
            exported = jax.export.deserialize(bytearray(path.read_bytes()))
        except Exception:  # noqa: BLE001  (a damaged or missing file: export again)
            exported = None
    if exported is None:
        out_defs = []

        def flat(*xs):
            args = eqx.combine(jax.tree.unflatten(treedef, xs), static)
            out_leaves, out_tree = jax.tree.flatten(fn(*args))
            out_defs.append(out_tree)
            return out_leaves

        avals = [jax.ShapeDtypeStruct(x.shape, x.dtype) for x in leaves]
        try:
            exported = jax.export.export(jax.jit(flat))(*avals)
            data = exported.serialize()
        except Exception:  # noqa: BLE001  (not exportable: the ordinary path)
            return None
        if not same_structure:
            out_def = out_defs[-1]
            tree_data = _dump_treedef(out_def)
            if tree_data is None:
                return None
            _write(tree_path, tree_data)
        _write(path, data)
    return jax.jit(exported.call), out_def


__all__ = ["call", "enable", "enabled"]
