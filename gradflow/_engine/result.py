"""Results and their files: one schema for every result gradflow returns, one
writer and one reader (with one check of the file-format version).

[`AbstractResult`][] declares what a [`gradflow.Trajectory`][], a
[`gradflow.SGDRun`][] and each member of a [`gradflow.Sweep`][] hold: save
times, loss and $|\\nabla L|$ there, the parameters with a leading time axis,
the problem, settings and stats, whether the run succeeded, its stages,
events and extras. A result file is a `.npz` archive of those arrays plus
JSON metadata (the gradflow version, the file format, the problem's class and
configuration, the records); [`gradflow.load`][] reads any of them back as
its type.

Files of format 1 (gradflow 0.1.0, before problems existed) hold the paper's
model; they are read as the problem `gradflow.problems.MarkovAttention`.
"""

import json
import os
from pathlib import Path
from typing import Any, ClassVar

import equinox as eqx
import jax
import numpy as np

from .._core.files import (
    LOADERS,
    atomic_write,
    json_default,
    peek_format,
    read_npz_with_meta,
    version,
)
from .._core.records import EventRecord, Stage
from .problem import Problem, class_path, import_class


FORMAT_VERSION = 2
# Format 1 (gradflow 0.1.0) stored the paper's model without naming it.
LEGACY_PROBLEM = "gradflow.problems:MarkovAttention"


class AbstractResult(eqx.Module):
    """What every result shares (the fields a result file holds).

    - `ts`: save times, shape `(T,)`, increasing;
    - `loss`, `grad_norm`: the population loss and $|\\nabla L|$ at `ts`;
    - `params`: the problem's parameter PyTree with a leading time axis;
    - `problem`: the [`gradflow.Problem`][] (`None` for a file whose problem
      class cannot be imported here);
    - `settings`, `stats`: how it was run and what it cost;
    - `ok`, `message`: whether it succeeded, and what happened if not;
    - `stages`, `events`: [`gradflow.Stage`][] and [`gradflow.EventRecord`][]
      records; `extras`: arrays saved at every save time.
    """

    ts: eqx.AbstractVar[np.ndarray]
    loss: eqx.AbstractVar[np.ndarray]
    grad_norm: eqx.AbstractVar[np.ndarray]
    params: eqx.AbstractVar[Any]
    problem: eqx.AbstractVar[Problem | None]
    settings: eqx.AbstractVar[dict[str, Any]]
    stats: eqx.AbstractVar[dict[str, Any]]
    ok: eqx.AbstractVar[bool]
    message: eqx.AbstractVar[str]
    stages: eqx.AbstractVar[tuple]
    events: eqx.AbstractVar[tuple]
    extras: eqx.AbstractVar[dict[str, np.ndarray]]

    # The file format's name and the arrays of the result's own (beyond the
    # parameters, the problem and the extras), in the order written.
    format_name: ClassVar[str]
    own_arrays: ClassVar[tuple[str, ...]]

    @property
    def chain(self):
        """The problem's Markov chain (the paper's model and its variants)."""
        chain = getattr(self.problem, "chain", None)
        if chain is None:
            raise AttributeError(
                f"this result's problem ({_describe(self.problem)}) has no chain"
            )
        return chain

    @property
    def final_params(self):
        """The last saved parameters."""
        return self.at(-1)

    def at(self, i: int):
        """The parameters at save `i` (one point, no time axis)."""
        return jax.tree.map(lambda x: x[i], self.params)

    @property
    def t_final(self) -> float:
        """The last time reached (`settings["t1"]` when `ok`)."""
        return float(self.ts[-1])

    def __len__(self) -> int:
        return int(self.ts.shape[0])

    def save(self, path: str | os.PathLike) -> Path:
        """Writes the result to `path` (a `.npz` file), atomically: every
        array, the problem, settings, stats, stages, events and the gradflow
        version. Read it back with [`gradflow.load`][]."""
        meta, arrays = result_parts(self)
        problem_meta, problem_arrays = problem_parts(self.problem)
        meta = {**file_header(self.format_name), **meta, "problem": problem_meta}
        return write_file(path, meta, {**arrays, **problem_arrays})


def _describe(problem) -> str:
    return "none" if problem is None else problem.describe()


class Trajectory(AbstractResult):
    """A solved population gradient flow (what [`gradflow.flow`][] and
    [`gradflow.integrate`][] return).

    **Fields:**

    - `ts`: save times, shape `(T,)`, increasing, starting at 0.
    - `loss`, `grad_norm`: the population loss and $|\\nabla L|$ at `ts`.
    - `params`: the problem's parameters with a leading time axis of length
      `T` (for the paper's model a [`gradflow.Params`][]: `traj.params[-1]` is
      the last point; for any problem `traj.at(-1)`).
    - `problem`: the [`gradflow.Problem`][] that was solved; `traj.chain` is
      its chain for the paper's model.
    - `settings`: every setting of the solve (init_scale, seed, t1, solver,
      tolerances, the problem's own such as width and model, ...), enough to
      re-run it; `solver_options` (present when a solver instance was passed
      with non-default fields) names them, e.g. `{"jacobian_tol": 5.0}`.
    - `stats`: `num_steps`, `num_accepted_steps`, `num_rejected_steps`,
      `num_grad_evals`, `num_hvps` (`None` where unknown), `w_rank` (the
      eigenpairs a Rosenbrock-W solver's W tracked at the end: its rank, or
      where the rank is adaptive the rank reached; `None` for other
      solvers), `resumed_from`
      (the time a checkpoint was resumed from, or `None`) and `wall_time`
      (seconds of this call, compilation included).
    - `ok`: whether the solve reached `t1` and followed the flow (its saved
      loss never rose); `message`: what happened if not, and what to change.
    - `stages`, `events`: tuples of records (filled by stage detection).
    - `extras`: further saved arrays (observables), keyed by name.
    """

    ts: np.ndarray
    loss: np.ndarray
    grad_norm: np.ndarray
    params: Any
    problem: Problem | None
    settings: dict[str, Any]
    stats: dict[str, Any]
    ok: bool = True
    message: str = ""
    stages: tuple = ()
    events: tuple = ()
    extras: dict[str, np.ndarray] = eqx.field(default_factory=dict)

    format_name: ClassVar[str] = "gradflow-trajectory"
    own_arrays: ClassVar[tuple[str, ...]] = ("ts", "loss", "grad_norm")

    def __repr__(self) -> str:
        status = "ok" if self.ok else f"FAILED: {self.message}"
        return (
            f"Trajectory({_describe(self.problem)}, {len(self)} saves, "
            f"t in [0, {self.t_final:g}], loss {self.loss[0]:.6g} -> "
            f"{self.loss[-1]:.6g}, {status})"
        )


# -- writing -------------------------------------------------------------------


def file_header(format_name: str) -> dict[str, Any]:
    return {
        "format": format_name,
        "format_version": FORMAT_VERSION,
        "gradflow_version": version(),
    }


def result_parts(result: AbstractResult, prefix: str = "") -> tuple[dict, dict]:
    """`(meta, arrays)` of one result, its arrays' names starting with
    `prefix` (a sweep writes many results into one file)."""
    meta = {
        "settings": result.settings,
        "stats": result.stats,
        "ok": bool(result.ok),
        "message": result.message,
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


def problem_parts(problem: Problem | None, prefix: str = "problem/"):
    """`(meta, arrays)` of a problem: its class, its `to_file` configuration,
    and its arrays under `prefix`."""
    if problem is None:
        return None, {}
    config, arrays = problem.to_file()
    meta = {"class": class_path(problem), "config": config}
    return meta, {prefix + k: np.asarray(v) for k, v in arrays.items()}


def write_file(path, meta: dict, arrays: dict) -> Path:
    """Writes arrays and JSON metadata to a `.npz` file, atomically."""
    path = Path(path)
    arrays = dict(arrays)
    arrays["__gradflow__"] = np.array(json.dumps(meta, default=json_default))
    atomic_write(path, lambda f: np.savez(f, **arrays))  # pyright: ignore[reportArgumentType]
    return path


# -- reading -------------------------------------------------------------------


def read_file(path, format_name: str, what: str) -> tuple[dict, dict]:
    """`(meta, arrays)` of a gradflow result file of `format_name`: the one
    reader and the one version check of every result file.

    **Raises:** `FileNotFoundError` for a missing file; `ValueError` naming the
    file when it is not a gradflow `what`, is truncated or damaged, or comes
    from a newer file format.
    """
    meta, arrays = read_npz_with_meta(path, format_name)
    found = meta.get("format_version")
    if not isinstance(found, int) or found > FORMAT_VERSION:
        raise ValueError(
            f"'{path}' was written with {what} format version {found} by "
            f"gradflow {meta.get('gradflow_version')}; this gradflow "
            f"({version()}) reads format versions <= {FORMAT_VERSION}: upgrade gradflow"
        )
    return meta, arrays


def read_problem(entry, arrays: dict, prefix: str = "problem/") -> Problem | None:
    """The problem a file describes (`problem_parts`), or `None` where its
    class cannot be imported here."""
    if entry is None:
        return None
    cls = import_class(entry["class"])
    if cls is None:
        return None
    own = {k[len(prefix) :]: v for k, v in arrays.items() if k.startswith(prefix)}
    return cls.from_file(entry["config"], own)


def legacy_problem(settings: dict, tokens, P, pi) -> Problem | None:
    """The problem of a format-1 file (the paper's model)."""
    entry = {
        "class": LEGACY_PROBLEM,
        "config": {
            "width": settings.get("width"),
            "model": settings.get("model"),
            "tokens": tokens,
            "context": settings.get("context"),  # an SGD run's sequence length
        },
    }
    return read_problem(entry, {"problem/P": P, "problem/pi": pi})


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
    meta: dict, arrays: dict, own: tuple, *, problem, legacy: bool, prefix=""
) -> dict[str, Any]:
    """The constructor arguments of a result read from a file: its `own`
    arrays and what every result shares. A `KeyError` for a missing entry."""
    fields = dict(
        **{name: arrays[prefix + name] for name in own},
        problem=problem,
        settings=meta["settings"],
        stats=meta["stats"],
        ok=bool(meta["ok"]),
        message=meta["message"],
        # files written before records were typed hold plain dicts
        stages=tuple(Stage.from_dict(s) for s in meta.get("stages", ())),
        events=tuple(EventRecord.from_dict(e) for e in meta.get("events", ())),
        extras={k: arrays[f"{prefix}extra_{k}"] for k in meta.get("extras", [])},
    )
    # last: the parameters' structure is traced from the problem's init, so an
    # incomplete file is refused before anything is traced
    return dict(fields, params=_params(problem, arrays, prefix, legacy))


def read_result(cls: type[AbstractResult], path, what: str) -> AbstractResult:
    """Reads a file written by `cls.save` (any format version this gradflow
    reads)."""
    meta, arrays = read_file(path, cls.format_name, what)
    try:
        legacy = meta["format_version"] < 2
        if legacy:
            problem = legacy_problem(
                meta["settings"], meta.get("tokens"), arrays["P"], arrays.get("pi")
            )
        else:
            problem = read_problem(meta.get("problem"), arrays)
        return cls(
            **result_fields(
                meta, arrays, cls.own_arrays, problem=problem, legacy=legacy
            )
        )
    except KeyError as e:
        raise ValueError(
            f"'{path}' is an incomplete gradflow {what}: missing {e}"
        ) from None


def load_trajectory(path: str | os.PathLike) -> Trajectory:
    """Loads a trajectory written by [`gradflow.Trajectory.save`][] (typed:
    any other kind of gradflow file is refused, naming its reader)."""
    return read_result(Trajectory, path, "trajectory")  # pyright: ignore[reportReturnType]


# The readers of each kind of result file, by format name: `gf.load` reads
# whatever a file holds. Other layers register their kinds (SGD runs).
READERS: dict[str, Any] = {"gradflow-trajectory": load_trajectory}


def register_reader(format_name: str, reader, name: str) -> None:
    """Lets [`gradflow.load`][] read a kind of result file; `name` is the
    typed reader's public name (used in the error for a misdirected file)."""
    READERS[format_name] = reader
    LOADERS[format_name] = name


def load(path: str | os.PathLike):
    """Loads any result file gradflow writes: a trajectory
    ([`gradflow.Trajectory.save`][]), a sweep ([`gradflow.Sweep.save`][]) or
    an SGD run ([`gradflow.SGDRun.save`][]), returned as its type. Files of
    gradflow 0.1.0 load too.

    **Raises:** `FileNotFoundError` if `path` does not exist; `ValueError`
    naming the file if it is not a gradflow result (a checkpoint, a foreign or
    damaged file), is truncated, or was written by an incompatible (newer)
    file-format version.
    """
    reader = READERS.get(peek_format(path) or "", load_trajectory)
    # (a trajectory's reader also gives every error for a file that is not a
    # gradflow result)
    return reader(path)


__all__ = [
    "AbstractResult",
    "FORMAT_VERSION",
    "READERS",
    "Trajectory",
    "load",
    "load_trajectory",
    "problem_parts",
    "read_file",
    "read_problem",
    "read_result",
    "register_reader",
    "result_fields",
    "result_parts",
    "write_file",
]
