"""Result files: one writer, one reader (with one check of the file-format
version) and one registry of readers, by format name, from which
[`gradflow.load`][] reads any kind of result file.

A result file is a `.npz` archive of a result's arrays plus JSON metadata:
the gradflow version, the file format, the problem (class and fields), the
settings, stats, result code and records. Each kind of result registers its
reader here ([`register_reader`][gradflow._result.files.register_reader]).

Files of format 1 (gradflow 0.1.0, before problems existed) and format 2
(problems with their own configuration) are read too: their problems by the
legacy readers that a problem's package registers
(`gradflow/_problem/files.py`).
"""

import json
import os
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import numpy as np

from .._core.files import (
    atomic_write,
    json_default,
    peek_format,
    read_npz_with_meta,
    version,
)
from .._core.records import EventRecord, Stage
from .._problem.files import LEGACY_PROBLEMS, problem_from_file, problem_to_file
from .codes import RESULTS, result_from_name, result_name


FORMAT_VERSION = 3


class _Reader:
    def __init__(self, read: Callable[[Any], Any], name: str, build=None):
        self.read, self.name, self.build = read, name, build


# The readers of result files: by format name, each kind of result (filled by
# the modules that define the kinds: trajectories, sweeps, SGD runs), and by
# file suffix (starting with a dot), the containers other than `.npz`
# (`.nc`: netCDF, `gradflow/_result/labelled.py`).
READERS: dict[str, _Reader] = {}


def register_reader(
    key: str,
    reader: Callable[[Any], Any],
    name: str,
    build: Callable[[Any, dict, dict], Any] | None = None,
) -> None:
    """Lets [`gradflow.load`][] read a kind of result file.

    - `key`: the format name a file declares, or a file suffix (`".nc"`)
      for a container read whatever the format it holds;
    - `reader(path)`: reads a file; `name`, its public name (named in the
      error for a misdirected file);
    - `build(path, meta, arrays)`: the result from a file's metadata and
      arrays (what `reader` does once the `.npz` archive is read), for the
      containers that hold the same metadata and arrays ([`build`][]).
    """
    READERS[key] = _Reader(reader, name, build)


def file_header(format_name: str) -> dict[str, Any]:
    return {
        "format": format_name,
        "format_version": FORMAT_VERSION,
        "gradflow_version": version(),
    }


def write_file(path, meta: dict, arrays: dict) -> Path:
    """Writes arrays and JSON metadata to a `.npz` file, atomically."""
    path = Path(path)
    arrays = dict(arrays)
    arrays["__gradflow__"] = np.array(json.dumps(meta, default=json_default))
    atomic_write(path, lambda f: np.savez(f, **arrays))  # pyright: ignore[reportArgumentType]
    return path


def result_parts(result, prefix: str = "") -> tuple[dict, dict]:
    """`(meta, arrays)` of one result, its arrays' names starting with
    `prefix` (a sweep writes many results into one file)."""
    meta = {
        "settings": result.settings.to_dict(),
        "stats": result.stats.to_dict(),
        "result": result_name(result.result),
        "detail": result.detail,
        "stages": [s.to_dict() for s in result.stages],
        "events": [e.to_dict() for e in result.events],
        "extras": sorted(result.extras),
    }
    arrays = {prefix + n: np.asarray(getattr(result, n)) for n in result.own_arrays}
    for path, leaf in jax.tree_util.tree_flatten_with_path(result.params)[0]:
        arrays[prefix + "params" + jax.tree_util.keystr(path)] = np.asarray(leaf)
    for k, v in result.extras.items():
        arrays[f"{prefix}extra_{k}"] = np.asarray(v)
    return meta, arrays


def file_parts(result) -> tuple[dict, dict]:
    """`(meta, arrays)` of one result's file: its header, the result's own
    parts and its problem's (what `save` writes)."""
    meta, arrays = result_parts(result)
    problem_meta, problem_arrays = problem_parts(result.problem)
    meta = {**file_header(result.format_name), **meta, "problem": problem_meta}
    return meta, {**arrays, **problem_arrays}


def problem_parts(problem, prefix: str = "problem/") -> tuple[Any, dict]:
    """`(meta, arrays)` of a problem (`None`: none), its arrays under
    `prefix`."""
    if problem is None:
        return None, {}
    meta, arrays = problem_to_file(problem)
    return meta, {prefix + k: np.asarray(v) for k, v in arrays.items()}


def read_file(path, format_name: str, what: str) -> tuple[dict, dict]:
    """`(meta, arrays)` of a gradflow result file of `format_name`: the one
    reader and the one version check of every result file.

    **Raises:** `FileNotFoundError` for a missing file; `ValueError` naming the
    file when it is not a gradflow `what`, is truncated or damaged, or comes
    from a newer file format.
    """
    names = {k: r.name for k, r in READERS.items() if not k.startswith(".")}
    meta, arrays = read_npz_with_meta(path, format_name, names)
    check_version(path, meta, what)
    return meta, arrays


def check_version(path, meta: dict, what: str) -> None:
    """A `ValueError` naming the file when its format version is newer than
    this gradflow reads."""
    found = meta.get("format_version")
    if not isinstance(found, int) or found > FORMAT_VERSION:
        raise ValueError(
            f"'{path}' was written with {what} format version {found} by "
            f"gradflow {meta.get('gradflow_version')}; this gradflow "
            f"({version()}) reads format versions <= {FORMAT_VERSION}: upgrade gradflow"
        )


def build(path, meta: dict, arrays: dict):
    """The result a file's metadata and arrays hold (in the layout of the
    `.npz` file), by the `build` its format registered: how a container
    other than `.npz` (a netCDF file) is read back as the result it came
    from, by the same code as the `.npz` file."""
    format_name = meta.get("format")
    reader = READERS.get(format_name) if isinstance(format_name, str) else None
    if reader is None or reader.build is None:
        raise ValueError(f"'{path}' holds an unknown gradflow format {format_name!r}")
    check_version(path, meta, "gradflow result")
    return reader.build(path, meta, arrays)


def read_problem(path, entry, arrays: dict, prefix: str = "problem/"):
    """The problem a file describes (`problem_parts`), or `None` (with a
    warning saying why) where its class cannot be imported here."""
    if entry is None:
        return None
    own = {k[len(prefix) :]: v for k, v in arrays.items() if k.startswith(prefix)}
    problem = problem_from_file(entry, own)
    if problem is None:
        warnings.warn(
            f"'{path}': {unimportable(entry['class'])}, so the result is loaded "
            "without it (problem=None; the theory and the figures need it). "
            "Define the class at the top level of a module of its own (say "
            "myproblem.py, on the Python path), import it from there, and save "
            "the result again",
            UserWarning,
            stacklevel=4,
        )
    return problem


def unimportable(class_path: str) -> str:
    """Why a file's problem class (`module:qualname`) cannot be imported
    here, in words."""
    module, _, qualname = class_path.partition(":")
    if module == "__main__":
        why = "it was defined in a script run as __main__, which another run cannot import"
    elif "<locals>" in qualname:
        why = "it was defined inside a function"
    else:
        why = f"the module {module} or its class {qualname} is not found here"
    return f"its problem's class {class_path} cannot be imported ({why})"


def legacy_problem(path, settings: dict, tokens, P, pi):
    """The problem of a format-1 file (gradflow 0.1.0 held one model)."""
    reader = LEGACY_PROBLEMS.get("format-1")
    if reader is None:
        return None
    config = {k: settings.get(k) for k in ("width", "model", "context")}
    return reader(dict(config, tokens=tokens), {"P": P, "pi": pi})


def _code(meta: dict):
    """`(code, detail)` of a result's metadata; files before result codes
    stored `ok` and `message` (their kind of failure is read off the
    message)."""
    if "result" in meta:
        return result_from_name(meta["result"]), meta.get("detail", "")
    if meta["ok"]:
        return RESULTS.successful, ""
    message = meta.get("message", "")
    for key, code in (
        ("maximum number of steps", RESULTS.max_steps_reached),
        ("loss rose", RESULTS.loss_rose),
        ("interrupted", RESULTS.interrupted),
        ("non-finite", RESULTS.nonfinite),
    ):
        if key in message:
            return code, message
    return RESULTS.solver_failed, message


def _params(problem, arrays: dict, prefix: str, legacy: bool):
    """The saved parameters, in the structure of the problem's (a dict by
    path where the problem is unknown)."""
    if problem is None:
        start = prefix + "params"
        return {k[len(start) :]: v for k, v in arrays.items() if k.startswith(start)}
    like = jax.eval_shape(lambda: problem.init(jax.random.key(0), 1.0))
    leaves = []
    for path, _ in jax.tree_util.tree_flatten_with_path(like)[0]:
        name = jax.tree_util.keystr(path)
        key = prefix + ("params_" + name.lstrip(".") if legacy else "params" + name)
        leaves.append(arrays[key])
    return jax.tree.unflatten(jax.tree.structure(like), leaves)


def result_fields(
    cls, meta: dict, arrays: dict, *, problem, legacy: bool, prefix=""
) -> dict[str, Any]:
    """The constructor arguments of a result of class `cls` read from a file:
    its own arrays and what every result shares. A `KeyError` for a missing
    entry."""
    code, detail = _code(meta)
    fields = dict(
        **{name: arrays[prefix + name] for name in cls.own_arrays},
        problem=problem,
        settings=cls.settings_type.from_dict(meta["settings"]),
        stats=cls.stats_type.from_dict(meta["stats"]),
        result=code,
        detail=detail,
        # files written before records were typed hold plain dicts
        stages=tuple(Stage.from_dict(s) for s in meta.get("stages", ())),
        events=tuple(EventRecord.from_dict(e) for e in meta.get("events", ())),
        extras={k: arrays[f"{prefix}extra_{k}"] for k in meta.get("extras", [])},
    )
    # last: the parameters' structure is traced from the problem's init, so an
    # incomplete file is refused before anything is traced
    return dict(fields, params=_params(problem, arrays, prefix, legacy))


def read_result(cls, path, what: str):
    """Reads a file written by `cls.save` (any format version this gradflow
    reads)."""
    meta, arrays = read_file(path, cls.format_name, what)
    return build_result(cls, path, meta, arrays, what)


def build_result(cls, path, meta: dict, arrays: dict, what: str):
    """A result of class `cls` from a file's metadata and arrays (a
    `ValueError` naming the file for a missing entry)."""
    try:
        legacy = meta["format_version"] < 2
        # the entries every result holds, before the problem is built (which
        # runs JAX): an incomplete file is refused before anything is compiled
        for key in ("settings", "stats"):
            meta[key]
        if legacy:
            problem = legacy_problem(
                path,
                meta["settings"],
                meta.get("tokens"),
                arrays["P"],
                arrays.get("pi"),
            )
        else:
            problem = read_problem(path, meta.get("problem"), arrays)
        return cls(**result_fields(cls, meta, arrays, problem=problem, legacy=legacy))
    except KeyError as e:
        raise ValueError(
            f"'{path}' is an incomplete gradflow {what}: missing {e}"
        ) from None


def load(path: str | os.PathLike):
    """Loads any result file gradflow writes: a trajectory
    ([`gradflow.Trajectory.save`][]), a sweep ([`gradflow.Sweep.save`][]) or
    an SGD run ([`gradflow.SGDRun.save`][]), returned as its type. Files of
    gradflow 0.1.0 load too, and so do netCDF files (`.nc`) written from a
    result's `to_xarray()` (`docs/analysis.md`).

    **Raises:** `FileNotFoundError` if `path` does not exist; `ValueError`
    naming the file if it is not a gradflow result (a checkpoint, a foreign or
    damaged file), is truncated, or was written by an incompatible (newer)
    file-format version.
    """
    suffix = Path(path).suffix.lower() if isinstance(path, (str, os.PathLike)) else ""
    reader = READERS.get(suffix) if suffix.startswith(".") else None
    reader = reader or READERS.get(peek_format(path) or "")
    # (a trajectory's reader also gives every error for a file that is not a
    # gradflow result)
    return (reader or READERS["gradflow-trajectory"]).read(path)


__all__ = [
    "FORMAT_VERSION",
    "READERS",
    "build",
    "build_result",
    "check_version",
    "file_parts",
    "file_header",
    "legacy_problem",
    "load",
    "problem_parts",
    "read_file",
    "read_problem",
    "read_result",
    "register_reader",
    "result_fields",
    "result_parts",
    "write_file",
]
