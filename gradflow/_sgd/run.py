"""The result of an SGD run (`SGDRun`): one of gradflow's results (the schema
and the file of `gradflow/_result/`)."""

import dataclasses
import os
from typing import Any, ClassVar

import equinox as eqx
import numpy as np

from .._core.records import Record
from .._problem.base import Problem
from .._result.base import AbstractResult, describe, status
from .._result.codes import RESULTS
from .._result.files import build_result, read_result, register_reader


@dataclasses.dataclass(frozen=True)
class SGDSettings(Record):
    """How an SGD run was made: `init_scale` (`None` for a given start),
    `seed`, `batch_size` (`None`: full-batch gradient descent), `lr`, `t1`, `num_sequences` (`None`: fresh examples
    every step), `optimizer` (its repr; `"sgd"` for the default), `dtype`,
    `num_saves`."""

    init_scale: float | None = None
    seed: int = 0
    batch_size: int | None = 0
    lr: float = 0.0
    t1: float = 0.0
    num_sequences: int | None = None
    optimizer: str = "sgd"
    dtype: str = "float64"
    num_saves: int = 0


@dataclasses.dataclass(frozen=True)
class SGDStats(Record):
    """What an SGD run cost: `num_steps` (steps done in all), `steps_run`,
    `wall_time` and `steps_per_second` (of this call: fewer than `num_steps`
    when it resumed from a checkpoint), `resumed_from_step` (`None` for a
    fresh run), `checkpoint` (its path) and `checkpoint_writes`."""

    num_steps: int = 0
    steps_run: int = 0
    resumed_from_step: int | None = None
    wall_time: float = 0.0
    steps_per_second: float = 0.0
    checkpoint: str | None = None
    checkpoint_writes: int = 0


class SGDRun(AbstractResult):
    r"""An SGD run on the flow's time axis.

    **Fields:**

    - `ts`: saved times $t = \text{lr} \times \text{step}$, shape `(T,)`.
    - `steps`: the step numbers at `ts`.
    - `population_loss`: the population loss $L(\theta)$ of each saved
      iterate (the same metric as `Trajectory.loss`); `loss` is an alias.
    - `grad_norm`: $|\nabla L|$ of the population loss at each saved iterate.
    - `train_loss`: the mean mini-batch loss of the steps since the previous
      save; at `ts[0]`, the loss of one batch at the start.
    - `params`: the problem's parameters with a leading time axis.
    - `problem`: the problem trained on (for the paper's model on a text, the
      model on the text's bigram chain).
    - `settings`: a [`gradflow.SGDSettings`][]; `stats`: a
      [`gradflow.SGDStats`][].
    - `result`, `ok`, `message`, `stages`, `events`, `extras`: as in
      [`gradflow.Trajectory`][].
    """

    ts: np.ndarray
    steps: np.ndarray
    population_loss: np.ndarray
    grad_norm: np.ndarray
    train_loss: np.ndarray
    params: Any
    problem: Problem | None
    settings: SGDSettings
    stats: SGDStats
    result: Any = eqx.field(default_factory=lambda: RESULTS.successful)
    detail: str = ""
    stages: tuple = ()
    events: tuple = ()
    extras: dict[str, np.ndarray] = eqx.field(default_factory=dict)

    format_name: ClassVar[str] = "gradflow-sgd"
    own_arrays: ClassVar[tuple[str, ...]] = (
        "ts",
        "steps",
        "population_loss",
        "grad_norm",
        "train_loss",
    )
    settings_type: ClassVar[type] = SGDSettings
    stats_type: ClassVar[type] = SGDStats

    @property
    def loss(self) -> np.ndarray:  # pyright: ignore[reportIncompatibleVariableOverride]
        """The population loss (so that an `SGDRun` reads like a `Trajectory`)."""
        return self.population_loss

    def __repr__(self) -> str:
        s = self.settings
        return (
            f"SGDRun({describe(self.problem)}, batch={s.batch_size}, lr={s.lr}, "
            f"N={s.num_sequences}, {len(self)} saves, t in [0, {self.t_final:g}], "
            f"population loss {self.population_loss[0]:.6g} -> "
            f"{self.population_loss[-1]:.6g}, {status(self)})"
        )


def load_sgd(path: str | os.PathLike) -> SGDRun:
    """Loads an [`gradflow.SGDRun`][] written by `SGDRun.save` (also a file of
    gradflow 0.1.0).

    **Raises:** `FileNotFoundError` for a missing file; `ValueError` naming the
    file when it is not a gradflow SGD run (a trajectory, say), is truncated, or
    comes from a newer file format.
    """
    return read_result(SGDRun, path, "SGD-run")  # pyright: ignore[reportReturnType]


register_reader(
    SGDRun.format_name,
    load_sgd,
    "gradflow.load_sgd",
    lambda path, meta, arrays: build_result(SGDRun, path, meta, arrays, "SGD-run"),
)

__all__ = ["SGDRun", "SGDSettings", "SGDStats", "load_sgd"]
