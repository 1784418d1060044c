"""The result of an SGD run (`SGDRun`) and its file format."""

from pathlib import Path
from typing import Any

import equinox as eqx
import numpy as np

from ._chain import MarkovChain
from ._model import AnyParams
from ._trajectory import AbstractResult, read_result, write_result


FORMAT_NAME = "gradflow-sgd"
FORMAT_VERSION = 1


class SGDRun(AbstractResult):
    r"""An SGD run on the flow's time axis.

    **Fields:**

    - `ts`: saved times $t = \text{lr} \times \text{step}$, shape `(T,)`.
    - `steps`: the step numbers at `ts`.
    - `population_loss`: the population loss $L(\theta)$ of each saved iterate
      against `chain` (the same metric as `Trajectory.loss`); `loss` is an alias.
    - `grad_norm`: $|\nabla L|$ of the population loss at each saved iterate.
    - `train_loss`: the mean mini-batch (finite-context) loss of the steps
      since the previous save; at `ts[0]`, the loss of one batch at the start.
    - `params`: [`gradflow.Params`][] (or a variant's
      [`gradflow.VariantParams`][], model in `settings["model"]`) with a
      leading time axis.
    - `chain`: the chain sampled from, or for text the bigram chain of the
      corpus.
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
    params: AnyParams
    chain: MarkovChain
    settings: dict[str, Any]
    stats: dict[str, Any]
    ok: bool = True
    message: str = ""
    stages: tuple = ()
    events: tuple = ()
    extras: dict[str, np.ndarray] = eqx.field(default_factory=dict)

    @property
    def loss(self) -> np.ndarray:
        """The population loss (so that an `SGDRun` reads like a `Trajectory`)."""
        return self.population_loss

    def __repr__(self) -> str:
        s = self.settings
        status = "ok" if self.ok else f"FAILED: {self.message}"
        return (
            f"SGDRun(d={self.chain.d}, m={self.params.m}, {s.get('source')}, "
            f"context={s.get('context')}, batch={s.get('batch_size')}, "
            f"lr={s.get('lr')}, N={s.get('num_sequences')}, {len(self)} saves, "
            f"t in [0, {self.t_final:g}], population loss "
            f"{self.population_loss[0]:.6g} -> {self.population_loss[-1]:.6g}, "
            f"{status})"
        )

    def save(self, path) -> Path:
        """Writes the run to a `.npz` file (atomically), with its chain, settings,
        stats, stages, events and the gradflow version; read it back with
        [`gradflow.load_sgd`][]."""
        arrays = {
            "ts": np.asarray(self.ts),
            "steps": np.asarray(self.steps),
            "population_loss": np.asarray(self.population_loss),
            "grad_norm": np.asarray(self.grad_norm),
            "train_loss": np.asarray(self.train_loss),
        }
        return write_result(path, self, FORMAT_NAME, FORMAT_VERSION, arrays)


def load_sgd(path) -> SGDRun:
    """Loads an [`gradflow.SGDRun`][] written by `SGDRun.save`.

    **Raises:** `FileNotFoundError` for a missing file; `ValueError` naming the
    file when it is not a gradflow SGD run (a trajectory, say), is truncated, or
    comes from a newer file format.
    """
    own = ("ts", "steps", "population_loss", "grad_norm", "train_loss")
    return SGDRun(**read_result(path, FORMAT_NAME, FORMAT_VERSION, "SGD-run", own))


__all__ = [
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "SGDRun",
    "load_sgd",
]
