"""The result of an SGD run (`SGDRun`): one of gradflow's results (the schema
and the file of `gradflow._engine.result`)."""

import os
from typing import Any, ClassVar

import equinox as eqx
import numpy as np

from .._engine.problem import Problem
from .._engine.result import AbstractResult, read_result, register_reader


class SGDRun(AbstractResult):
    r"""An SGD run on the flow's time axis.

    **Fields:**

    - `ts`: saved times $t = \text{lr} \times \text{step}$, shape `(T,)`.
    - `steps`: the step numbers at `ts`.
    - `population_loss`: the population loss $L(\theta)$ of each saved iterate
      (the same metric as `Trajectory.loss`); `loss` is an alias.
    - `grad_norm`: $|\nabla L|$ of the population loss at each saved iterate.
    - `train_loss`: the mean mini-batch loss of the steps since the previous
      save; at `ts[0]`, the loss of one batch at the start.
    - `params`: the problem's parameters with a leading time axis (for the
      paper's model a [`gradflow.Params`][], or a variant's
      [`gradflow.VariantParams`][], model in `settings["model"]`).
    - `problem`: the problem trained on (`run.chain`: for the paper's model
      the chain sampled from, or for text the bigram chain of the corpus).
    - `settings`, `stats`, `ok`, `message`, `stages`, `events`, `extras`: as
      in [`gradflow.Trajectory`][]. `stats` holds `num_steps` (steps done in
      all), `steps_run`, `wall_time` and `steps_per_second` (of this call:
      less than `num_steps` when it resumed from a checkpoint),
      `resumed_from_step` (`None` for a fresh run), `checkpoint` and
      `checkpoint_writes`.
    """

    ts: np.ndarray
    steps: np.ndarray
    population_loss: np.ndarray
    grad_norm: np.ndarray
    train_loss: np.ndarray
    params: Any
    problem: Problem | None
    settings: dict[str, Any]
    stats: dict[str, Any]
    ok: bool = True
    message: str = ""
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

    @property
    def loss(self) -> np.ndarray:  # pyright: ignore[reportIncompatibleVariableOverride]
        """The population loss (so that an `SGDRun` reads like a `Trajectory`)."""
        return self.population_loss

    def __repr__(self) -> str:
        s = self.settings
        status = "ok" if self.ok else f"FAILED: {self.message}"
        what = "none" if self.problem is None else self.problem.describe()
        context = f"context={s['context']}, " if "context" in s else ""
        return (
            f"SGDRun({what}, {s.get('source')}, {context}batch="
            f"{s.get('batch_size')}, lr={s.get('lr')}, N={s.get('num_sequences')}, "
            f"{len(self)} saves, t in [0, {self.t_final:g}], population loss "
            f"{self.population_loss[0]:.6g} -> {self.population_loss[-1]:.6g}, "
            f"{status})"
        )


def load_sgd(path: str | os.PathLike) -> SGDRun:
    """Loads an [`gradflow.SGDRun`][] written by `SGDRun.save` (also a file of
    gradflow 0.1.0).

    **Raises:** `FileNotFoundError` for a missing file; `ValueError` naming the
    file when it is not a gradflow SGD run (a trajectory, say), is truncated, or
    comes from a newer file format.
    """
    return read_result(SGDRun, path, "SGD-run")  # pyright: ignore[reportReturnType]


register_reader(SGDRun.format_name, load_sgd, "gradflow.load_sgd")

__all__ = ["SGDRun", "load_sgd"]
