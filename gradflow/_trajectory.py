"""Solved trajectories: the result of [`gradflow.integrate`][], saved and loaded
with their chain, settings and gradflow version."""

import json
import os
from pathlib import Path
from typing import Any

import equinox as eqx
import numpy as np

from ._chain import MarkovChain
from ._files import as_record, atomic_write, json_default, read_npz_with_meta, version
from ._model import Params, param_arrays, params_from_arrays
from ._records import EventRecord
from ._stage_types import Stage


FORMAT_NAME = "gradflow-trajectory"
FORMAT_VERSION = 1


# The function that reads each kind of gradflow file, named in the error for
# a file handed to the wrong loader.
class AbstractResult(eqx.Module):
    """What a [`gradflow.Trajectory`][] and a [`gradflow.SGDRun`][] share:
    save times `ts` and parameters `params` with a leading time axis."""

    ts: eqx.AbstractVar[np.ndarray]
    params: eqx.AbstractVar[Params]

    @property
    def final_params(self) -> Params:
        """The last saved parameters."""
        return self.params[-1]

    @property
    def t_final(self) -> float:
        """The last time reached (`settings["t1"]` when `ok`)."""
        return float(self.ts[-1])

    def __len__(self) -> int:
        return int(self.ts.shape[0])


class Trajectory(AbstractResult):
    """A solved population gradient flow.

    **Fields:**

    - `ts`: save times, shape `(T,)`, increasing, starting at 0.
    - `loss`, `grad_norm`: the population loss and $|\\nabla L|$ at `ts`.
    - `params`: a [`gradflow.Params`][] with a leading time axis of length `T`;
      `traj.params[-1]` is the last saved point.
    - `chain`: the [`gradflow.MarkovChain`][] that was solved.
    - `settings`: every setting of the solve (width, init_scale, seed, t1,
      solver, tolerances, ...), enough to re-run it; `solver_options` (present
      when a solver instance was passed with non-default fields) names them,
      e.g. `{"jacobian_tol": 5.0}`.
    - `stats`: `num_steps`, `num_accepted_steps`, `num_rejected_steps`,
      `num_grad_evals`,
      `num_hvps` (`None` where unknown), `resumed_from` (the time a
      checkpoint was resumed from, or `None`) and `wall_time` (seconds of this
      call, compilation included).
    - `ok`: whether the solve reached `t1` and followed the flow (its saved
      loss never rose); `message`: what happened if not, and what to change.
    - `stages`, `events`: tuples of records (filled by stage detection).
    - `extras`: further saved arrays (diagnostics), keyed by name.
    """

    ts: np.ndarray
    loss: np.ndarray
    grad_norm: np.ndarray
    params: Params
    chain: MarkovChain
    settings: dict[str, Any]
    stats: dict[str, Any]
    ok: bool = True
    message: str = ""
    stages: tuple = ()
    events: tuple = ()
    extras: dict[str, np.ndarray] = eqx.field(default_factory=dict)

    def __repr__(self) -> str:
        status = "ok" if self.ok else f"FAILED: {self.message}"
        return (
            f"Trajectory(d={self.chain.d}, m={self.params.m}, {len(self)} saves, "
            f"t in [0, {self.t_final:g}], loss {self.loss[0]:.6g} -> "
            f"{self.loss[-1]:.6g}, {status})"
        )

    def save(self, path: str | os.PathLike) -> Path:
        """Writes the trajectory to `path` (a `.npz` file), atomically.

        Everything is stored: arrays, chain, settings, stats, stages, events and
        the gradflow version. Read it back with [`gradflow.load`][].
        """
        arrays = {
            "ts": np.asarray(self.ts),
            "loss": np.asarray(self.loss),
            "grad_norm": np.asarray(self.grad_norm),
        }
        return write_result(path, self, FORMAT_NAME, FORMAT_VERSION, arrays)


def write_result(path, result, format_name: str, format_version: int, arrays) -> Path:
    """Writes a result (a `Trajectory`, an `SGDRun`: anything with `chain`,
    `params`, `settings`, `stats`, `ok`, `message`, `stages`, `events`,
    `extras`) to a `.npz` file, atomically: its own `arrays` plus the chain,
    the parameters, the extras and JSON metadata with the gradflow version."""
    path = Path(path)
    meta = {
        "format": format_name,
        "format_version": format_version,
        "gradflow_version": version(),
        "settings": result.settings,
        "stats": result.stats,
        "ok": bool(result.ok),
        "message": result.message,
        "tokens": list(result.chain.tokens) if result.chain.tokens else None,
        "stages": [as_record(s) for s in result.stages],
        "events": [as_record(e) for e in result.events],
        "extras": sorted(result.extras),
    }
    arrays = {
        **arrays,
        "P": np.asarray(result.chain.P),
        "pi": np.asarray(result.chain.pi),
        **{
            f"params_{n}": np.asarray(v) for n, v in param_arrays(result.params).items()
        },
        **{f"extra_{k}": np.asarray(v) for k, v in result.extras.items()},
    }
    arrays["__gradflow__"] = np.array(json.dumps(meta, default=json_default))
    atomic_write(path, lambda f: np.savez(f, **arrays))
    return path


def read_result(
    path, format_name: str, format_version: int, what: str, own: tuple
) -> dict[str, Any]:
    """Reads a file written by [`write_result`][] into the constructor arguments
    of a result: the `own` arrays plus what every result shares (chain, params,
    settings, stats, ok, message, stages, events, extras).

    **Raises:** `FileNotFoundError` for a missing file; `ValueError` naming the
    file when it is not a gradflow `what`, is truncated or incomplete, or comes
    from a newer file format.
    """
    meta, arrays = read_npz_with_meta(path, format_name)
    found = meta.get("format_version")
    if not isinstance(found, int) or found > format_version:
        raise ValueError(
            f"'{path}' was written with {what} format version {found} by "
            f"gradflow {meta.get('gradflow_version')}; this gradflow "
            f"({version()}) reads format versions <= {format_version}: upgrade gradflow"
        )
    try:
        # pi is stored so that the loaded chain is bit-identical (files
        # without it get pi solved again)
        chain = MarkovChain(arrays["P"], tokens=meta.get("tokens"), pi=arrays.get("pi"))
        return dict(
            **{name: arrays[name] for name in own},
            chain=chain,
            # the model (in the settings since variants exist; minimal if absent)
            params=params_from_arrays(
                arrays, meta["settings"].get("model"), prefix="params_"
            ),
            settings=meta["settings"],
            stats=meta["stats"],
            ok=bool(meta["ok"]),
            message=meta["message"],
            # Files written before records were typed hold plain dicts.
            stages=tuple(Stage.from_dict(s) for s in meta.get("stages", ())),
            events=tuple(EventRecord.from_dict(e) for e in meta.get("events", ())),
            extras={k: arrays[f"extra_{k}"] for k in meta.get("extras", [])},
        )
    except KeyError as e:
        raise ValueError(
            f"'{path}' is an incomplete gradflow {what}: missing {e}"
        ) from None


def load(path: str | os.PathLike) -> Trajectory:
    """Loads a trajectory written by [`gradflow.Trajectory.save`][].

    **Raises:** `FileNotFoundError` if `path` does not exist; `ValueError` naming
    the file if it is not a gradflow trajectory, is truncated, or was written
    by an incompatible (newer) file-format version.
    """
    return Trajectory(
        **read_result(
            path, FORMAT_NAME, FORMAT_VERSION, "trajectory", ("ts", "loss", "grad_norm")
        )
    )
