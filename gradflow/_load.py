"""[`gradflow.load`][]: reads any result file gradflow writes, whatever it
holds (a trajectory, a sweep, an SGD run), and returns the matching type.

The typed readers stay: [`gradflow.load_sweep`][] and [`gradflow.load_sgd`][]
(and `gradflow._trajectory.load`, which `gradflow theory` uses) refuse a file
of another kind, naming the reader that fits it.
"""

import os

from ._files import peek_format
from ._sgd_run import FORMAT_NAME as SGD_FORMAT, SGDRun, load_sgd
from ._sweep_result import FORMAT_NAME as SWEEP_FORMAT, Sweep, load_sweep
from ._trajectory import Trajectory, load as load_trajectory


def load(path: str | os.PathLike) -> Trajectory | Sweep | SGDRun:
    """Loads a file written by [`gradflow.Trajectory.save`][],
    [`gradflow.Sweep.save`][] or [`gradflow.SGDRun.save`][]: returns a
    `Trajectory`, a `Sweep` or an `SGDRun`, as the file says.

    **Raises:** `FileNotFoundError` if `path` does not exist; `ValueError`
    naming the file if it is not a gradflow result (a checkpoint, a foreign or
    damaged file), is truncated, or was written by an incompatible (newer)
    file-format version.
    """
    kind = peek_format(path)
    if kind == SWEEP_FORMAT:
        return load_sweep(path)
    if kind == SGD_FORMAT:
        return load_sgd(path)
    # a trajectory, and every error for a file that is not a gradflow result
    return load_trajectory(path)


__all__ = ["load"]
