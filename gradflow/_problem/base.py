r"""The problem protocol: what the engine needs to know about a population loss.

A problem is an `eqx.Module` that holds its data as array fields (traced, so
a new problem of the same class and shapes reuses the compiled solve) and its
configuration as static fields. It follows Equinox's abstract/final pattern:
the classes here declare abstract methods only, and a problem implements
them; it overrides nothing else. A problem mixes in the capabilities it has:

- [`gradflow.Problem`][]: `loss` and `init` (every problem);
- [`gradflow.SampledProblem`][]: `sample` and `sample_loss` (SGD);
- [`gradflow.ObservedProblem`][]: `observe` (arrays saved along a run);
- [`gradflow.BoundedProblem`][]: `loss_floor` (the infimum of the loss);
- [`gradflow.StagedProblem`][]: its own stages (`loss_scale`, `analyse`);
- [`gradflow.EnumeratedProblem`][]: its whole sample space, weighted
  (`example_weights`, `example_losses`: the exact gradient noise of
  [`gradflow.sgd_sde`][]);
- [`gradflow.FieldProblem`][]: its own vector field (`vector_field`), followed
  instead of $-\nabla L$ (a modified flow, [`gradflow.modified_loss`][]).

Everything else the engine does with a problem (checking a given start,
casting to a dtype, describing it, saving it to a file) is an engine function
over any problem (`gradflow/_problem/functions.py`, `files.py`), not a hook.
The engine calls only what is declared here: it imports no problem.
"""

import abc
from typing import Any

import equinox as eqx
import numpy as np
from jaxtyping import Array, PRNGKeyArray, PyTree

from .._core.records import EventRecord, Stage


class Problem(eqx.Module):
    r"""A population loss $L(\theta)$ on the engine: subclass it, define `loss`
    and `init`, and every tool of gradflow works on it: [`gradflow.flow`][],
    [`gradflow.sweep`][], [`gradflow.linearize`][],
    [`gradflow.critical_points`][], [`gradflow.theory_report`][],
    checkpoints and files. Add [`gradflow.SampledProblem`][] for
    [`gradflow.train_sgd`][], [`gradflow.ObservedProblem`][] to save
    observables along a run.

    Hold the problem's data as array fields (they are traced, so a new problem
    of the same class and shapes reuses the compiled solve) and its
    configuration (sizes, names) as `eqx.field(static=True)`.

    **Abstract methods:**

    - `loss(params) -> scalar`: the population loss; `params` is any PyTree
      of float arrays.
    - `init(key, init_scale) -> params`: a random start of scale `init_scale`
      (e.g. every entry i.i.d. $\mathcal N(0, \text{init\_scale}^2)$).

    **Example** (matrix factorisation, $L = \frac12\|UV^\top - M\|_F^2$; the
    whole file is `examples/user_problem.py`):

    ```python
    class Factorisation(gf.Problem):
        M: jax.Array
        rank: int = eqx.field(static=True)

        def loss(self, params):
            U, V = params
            return 0.5 * jnp.sum((U @ V.T - self.M) ** 2)

        def init(self, key, init_scale):
            ku, kv = jax.random.split(key)
            n, m = self.M.shape
            return (init_scale * jax.random.normal(ku, (n, self.rank)),
                    init_scale * jax.random.normal(kv, (m, self.rank)))

    traj = gf.flow(Factorisation(M, rank=3), init_scale=1e-4, t1=100)
    ```
    """

    @abc.abstractmethod
    def loss(self, params: PyTree) -> Array:
        """The population loss at one point."""

    @abc.abstractmethod
    def init(self, key: PRNGKeyArray, init_scale: float) -> PyTree:
        """A random starting point of scale `init_scale`."""


class SampledProblem(Problem):
    """A problem that can be trained by SGD ([`gradflow.train_sgd`][]): it
    draws i.i.d. examples and gives the loss of a batch, whose expectation is
    `loss`.

    **Abstract methods:**

    - `sample(key, n) -> batch`: `n` i.i.d. examples (a PyTree with a leading
      axis of length `n`);
    - `sample_loss(params, batch) -> scalar`: the loss of a batch drawn by
      `sample`.
    """

    @abc.abstractmethod
    def sample(self, key: PRNGKeyArray, n: int) -> PyTree:
        """`n` i.i.d. examples with a leading axis of length `n`."""

    @abc.abstractmethod
    def sample_loss(self, params: PyTree, batch: PyTree) -> Array:
        """The loss of a batch drawn by `sample`."""


class EnumeratedProblem(Problem):
    r"""A problem whose loss is a finite weighted sum over its sample space,
    $L(\theta) = \sum_k w_k \ell_k(\theta)$ ($w_k \ge 0$, $\sum_k w_k = 1$):
    one example is $k$ with probability $w_k$. The covariance of one
    example's gradient, $\Sigma = \sum_k w_k (\nabla\ell_k - \nabla
    L)(\nabla\ell_k - \nabla L)^\top$, is then exact
    ([`gradflow.sgd_sde`][], `docs/sgd.md`, "The stochastic modified
    equation"); the paper's model gives its infinite-context limit.

    **Abstract methods:**

    - `example_weights() -> Float[Array, " K"]`: $w_k$;
    - `example_losses(params) -> Float[Array, " K"]`: $\ell_k(\theta)$.
    """

    @abc.abstractmethod
    def example_weights(self) -> Array:
        """The probability of each example of the sample space."""

    @abc.abstractmethod
    def example_losses(self, params: PyTree) -> Array:
        """The loss of each example of the sample space, at one point."""


class ObservedProblem(Problem):
    """A problem with observables: arrays computed from one point and saved
    at every save time of a run (`traj.extras`), which figures and stages
    read.

    A problem that is not an `ObservedProblem` saves the singular values of
    each matrix parameter ([`gradflow.matrix_spectra`][]), from which the
    generic `rank` records are found; include them in `observe`'s result to
    keep those records.

    **Abstract method:** `observe(params) -> dict[str, Array]` (one point in,
    arrays out).
    """

    @abc.abstractmethod
    def observe(self, params: PyTree) -> dict[str, Array]:
        """What to save at every save time, from one point."""


class BoundedProblem(Problem):
    """A problem whose infimum of the loss is known: the theory calls a
    critical point at that level a global minimum, and figures draw the loss
    above it.

    **Abstract method:** `loss_floor() -> float | None` (`None` where a
    configuration of the problem leaves it unknown).
    """

    @abc.abstractmethod
    def loss_floor(self) -> float | None:
        """The infimum of the loss, or `None` where it is not known."""


class FieldProblem(Problem):
    r"""A problem whose flow follows a vector field of its own instead of
    $-\nabla L$: $\dot\theta = f(\theta)$, while `loss` stays what is
    saved, watched and reported along the run (the metric). A modified flow
    of gradient descent ([`gradflow.modified_loss`][], `docs/sgd.md`) is one:
    at order 2 its field is not the gradient of any loss.

    The engine solves $\dot\theta = f(\theta)$ with the same solvers,
    saves and events as a gradient flow; a problem that is not a
    `FieldProblem` keeps $f = -\nabla L$, bit for bit.

    **Abstract method:** `vector_field(params) -> PyTree` ($f$ at one point,
    of the structure of `params`).
    """

    @abc.abstractmethod
    def vector_field(self, params: PyTree) -> PyTree:
        """The flow's vector field at one point."""


class Analysis(eqx.Module):
    """What is made of a solved trajectory after its solve (by the generic
    stages, or a [`gradflow.StagedProblem`][]'s `analyse`): its stages, their
    boundaries as event records, arrays saved at every save time
    (`traj.extras`), and `rests`: the `(t_start, t_end)` of every stretch
    where the flow slowed down as on a plateau but passed no saddle (a rest
    at a minimum, a slow stable stretch; `docs/stages.md`), inside which the
    saddle events located during the solve are dropped (default: none)."""

    stages: tuple[Stage, ...]
    events: tuple[EventRecord, ...]
    extras: dict[str, np.ndarray]
    rests: tuple[tuple[float, float], ...] = ()


class StagedProblem(ObservedProblem):
    r"""A problem with stages of its own, found on its observables after the
    solve (the paper's model: condensation, focus, dilution, new directions),
    instead of the generic `plateau`, `drop` and `rank` records.

    **Abstract methods:**

    - `loss_scale() -> scalar | None`: the scale $\ell$ against which the
      loss's fall is measured to tell a plateau (a saddle) from a drop, the
      speed $s = -\frac{dL}{d\log t}/\ell$; `None`: the loss at the start.
      The saddle events located during the solve use it.
    - `analyse(ts, params, loss, *, thresholds, loss_scale) -> Analysis`: the
      stages of a solved trajectory (its saves: `params` with a leading time
      axis), their boundaries, and the arrays to keep (`extras`).
      [`gradflow.generic_analysis`][] is the generic one, to build on.
    """

    @abc.abstractmethod
    def loss_scale(self) -> Any:
        """$\\ell$, or `None` for the loss at the start."""

    @abc.abstractmethod
    def analyse(
        self,
        ts: np.ndarray,
        params: PyTree,
        loss: np.ndarray,
        *,
        thresholds: Any,
        loss_scale: float,
    ) -> Analysis:
        """The stages of a solved trajectory."""


__all__ = [
    "Analysis",
    "BoundedProblem",
    "EnumeratedProblem",
    "FieldProblem",
    "ObservedProblem",
    "Problem",
    "SampledProblem",
    "StagedProblem",
]
