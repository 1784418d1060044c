r"""The `Problem` protocol: what the engine needs to know about a population
loss (SPEC section 11).

A problem is an `eqx.Module` holding its data as array fields (traced: a new
problem of the same class and shapes reuses the compiled solve) and its
configuration as static fields. It defines the loss and a random start; for
SGD a sampler and the loss of a batch; optionally what to observe along a
trajectory. Everything else the engine asks of a problem has a default here
that a problem may refine (the paper's model refines most of them).

The engine (flow, sweep, the driver, checkpoints, results, SGD, the
linearisation) calls only what is declared here: it never imports a problem.
"""

import abc
import dataclasses
import importlib
import math
from typing import Any, ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, PRNGKeyArray, PyTree

from .._core.errors import show
from .._core.records import EventRecord, Stage, stage_events
from .stages import StageThresholds, generic_stages, matrix_spectra, observe_saves


class Analysis(eqx.Module):
    """What a problem makes of a solved trajectory ([`Problem.analyse`][]):
    its stages, their boundaries as event records, and arrays saved at every
    save time (`traj.extras`)."""

    stages: tuple[Stage, ...]
    events: tuple[EventRecord, ...]
    extras: dict[str, np.ndarray]


def _floating(x) -> bool:
    return isinstance(x, (jax.Array, np.ndarray)) and jnp.issubdtype(
        x.dtype, jnp.floating
    )


class Problem(eqx.Module):
    r"""A population loss $L(\theta)$ on the engine: subclass it, define `loss`
    and `init` (and `sample`, `sample_loss` for SGD), and every tool of
    gradflow works on it: [`gradflow.flow`][], [`gradflow.sweep`][],
    [`gradflow.train_sgd`][], [`gradflow.linearize`][],
    [`gradflow.critical_points`][], checkpoints and files.

    Hold the problem's data as array fields (they are traced, so a new problem
    of the same class and shapes reuses the compiled solve) and its
    configuration (sizes, names) as `eqx.field(static=True)`.

    **Required:**

    - `loss(params) -> scalar`: the population loss; `params` is any PyTree
      of float arrays.
    - `init(key, init_scale) -> params`: a random start of scale `init_scale`
      (e.g. every entry i.i.d. $\mathcal N(0, \text{init\_scale}^2)$).

    **Optional:**

    - `sample(key, n) -> batch`: `n` i.i.d. examples (a PyTree with a leading
      axis of length `n`), and `sample_loss(params, batch) -> scalar`: the loss
      of a batch, whose expectation is `loss`. Both are needed by
      [`gradflow.train_sgd`][].
    - `observe(params) -> dict[str, Array]`: what to save at every save time
      after the solve (`traj.extras`). The default saves the singular values
      of every matrix parameter (`"sv" + path`), from which the `rank` records
      of the generic stages are found: call `super().observe(params)` in an
      override to keep them.

    **Refinements** (defaults that fit most problems): `loss_scale`,
    `check_params`, `astype`, `settings`, `sample_settings`, `describe`,
    `loss_floor`,
    `analyse`, `to_file` and `from_file`, `fingerprint_inputs`,
    `event_args`, `max_observe_batch`, `initial_size`.

    **Example** (matrix factorisation, $L = \frac12\|UV^\top - M\|_F^2$):

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

    # The file format's name for the class (`module:qualname`), written with
    # every result so that `gf.load` can rebuild the problem.
    file_class: ClassVar[str | None] = None

    @abc.abstractmethod
    def loss(self, params: PyTree) -> Array:
        """The population loss at one point."""

    @abc.abstractmethod
    def init(self, key: PRNGKeyArray, init_scale: float) -> PyTree:
        """A random starting point of scale `init_scale`."""

    def sample(self, key: PRNGKeyArray, n: int) -> PyTree:
        """`n` i.i.d. examples with a leading axis of length `n` (for SGD)."""
        raise TypeError(
            f"{type(self).__name__} defines no sample(key, n): define sample and "
            "sample_loss to train it with gf.train_sgd"
        )

    def sample_loss(self, params: PyTree, batch: PyTree) -> Array:
        """The loss of a batch drawn by `sample` (for SGD)."""
        raise TypeError(
            f"{type(self).__name__} defines no sample_loss(params, batch): define "
            "sample and sample_loss to train it with gf.train_sgd"
        )

    def observe(self, params: PyTree) -> dict[str, Array]:
        """What to save at every save time after the solve (one point in,
        arrays out). Default: the singular values of every matrix parameter,
        which the generic `rank` records read."""
        return matrix_spectra(params)

    # -- refinements -----------------------------------------------------------

    @property
    def samples(self) -> bool:
        """Whether the problem defines `sample` and `sample_loss` (SGD)."""
        cls = type(self)
        return (
            cls.sample is not Problem.sample
            and cls.sample_loss is not Problem.sample_loss
        )

    def loss_scale(self) -> Array | None:
        r"""The scale $\ell$ the loss's fall is measured against to tell a
        plateau (a saddle) from a drop: the speed $s = -\frac{dL}{d\log t}/\ell$
        is small on a plateau. `None` (the default): the loss at the start of
        the flow (the whole range of a loss whose minimum is 0)."""
        return None

    def loss_floor(self) -> float | None:
        """The infimum of the loss where it is known (the theory then calls a
        critical point at that level a global minimum); `None` by default."""
        return None

    def event_args(self) -> Any:
        """What a user [`gradflow.Event`][]'s `cond_fn(t, params, args)`
        receives as `args` (default: the problem itself)."""
        return self

    def initial_size(self, params: PyTree) -> float:
        """The RMS size of a starting point (the default `atol` is tied to it:
        saddle escapes grow from components that small)."""
        leaves = [np.ravel(np.asarray(x)) for x in jax.tree.leaves(params)]
        return float(np.sqrt(np.mean(np.concatenate(leaves) ** 2)))

    def check_params(self, params: PyTree, dtype) -> PyTree:
        """A given starting point, checked (one point with the structure and
        shapes of `init`'s, finite) and cast to `dtype`; a one-line
        `TypeError`/`ValueError` naming what is wrong otherwise."""
        like = jax.eval_shape(lambda: self.init(jax.random.key(0), 1.0))
        want, got = jax.tree.structure(like), jax.tree.structure(params)
        if want != got:
            raise TypeError(
                f"params must have the structure of {type(self).__name__}.init's "
                f"result, {want}, got {got}"
            )
        paths = jax.tree_util.tree_flatten_with_path(params)[0]
        for (path, value), ref in zip(paths, jax.tree.leaves(like), strict=True):
            name = "params" + jax.tree_util.keystr(path)
            if np.shape(value) != ref.shape:
                raise ValueError(
                    f"{name} must have shape {ref.shape} (one point), got shape "
                    f"{np.shape(value)}"
                )
            value = np.asarray(value)
            if not np.isfinite(value).all():
                i = tuple(int(k) for k in np.argwhere(~np.isfinite(value))[0])
                raise ValueError(f"{name} has a non-finite entry at {i}: {value[i]}")
        return jax.tree.map(lambda x: jnp.asarray(x, dtype=dtype), params)

    def astype(self, dtype) -> "Problem":
        """The problem with its floating arrays in `dtype` (the dtype of a
        solve)."""
        return jax.tree.map(lambda x: x.astype(dtype) if _floating(x) else x, self)

    def settings(self, params0: PyTree) -> dict[str, Any]:
        """The problem's own entries of a result's `settings` (JSON-able), for a
        run that starts from `params0`. Default: none."""
        del params0
        return {}

    def sample_settings(self) -> dict[str, Any]:
        """The settings of `sample`, recorded with an SGD run (JSON-able).
        Default: none."""
        return {}

    def describe(self) -> str:
        """A short description for `repr` of results and figure titles."""
        return type(self).__name__

    def max_observe_batch(self) -> int:
        """The most saved points `observe` is evaluated on at once (a bound
        on memory for large models)."""
        return 512

    def analyse(
        self,
        ts: np.ndarray,
        params: PyTree,
        loss: np.ndarray,
        *,
        thresholds: StageThresholds,
        loss_scale: float,
    ) -> Analysis:
        """What is made of a solved trajectory after the solve: `observe` at
        every saved point (`extras`, in the dtype of the saves) and the
        generic stages on them (`plateau`, `drop`, `rank`; see
        `gradflow._engine.stages`). `loss_scale` is the flow's $\\ell$
        ([`loss_scale`][gradflow.Problem.loss_scale]). Called on the problem
        as given (not cast to the solve's dtype)."""
        extras = observe_saves(self.astype(params_dtype(params)), ts, params)
        stages = generic_stages(
            ts, loss, extras, loss_scale=loss_scale, thresholds=thresholds
        )
        return Analysis(stages=stages, events=stage_events(stages), extras=extras)

    # -- files -----------------------------------------------------------------

    def to_file(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """`(config, arrays)`: the problem as JSON-able settings and arrays,
        from which `from_file` rebuilds it. The default takes every field: an
        array goes to `arrays`, a number, string, flag or tuple of them to
        `config`; a problem with other fields overrides both."""
        config, arrays = {}, {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, (jax.Array, np.ndarray)):
                arrays[f.name] = np.asarray(value)
            elif _jsonable(value):
                config[f.name] = list(value) if isinstance(value, tuple) else value
            else:
                raise TypeError(
                    f"{type(self).__name__}.{f.name} = {show(value)} is neither an "
                    "array nor a number, string or tuple of them: define to_file "
                    "and from_file to save this problem"
                )
        return config, arrays

    @classmethod
    def from_file(cls, config: dict[str, Any], arrays: dict[str, np.ndarray]):
        """The inverse of `to_file`."""
        fields = {f.name for f in dataclasses.fields(cls)}
        kwargs: dict[str, Any] = {k: jnp.asarray(v) for k, v in arrays.items()}
        for k, v in config.items():
            kwargs[k] = tuple(v) if isinstance(v, list) else v
        return cls(**{k: v for k, v in kwargs.items() if k in fields})

    def fingerprint_inputs(self) -> dict[str, np.ndarray]:
        """The arrays a checkpoint of a run of this problem must match."""
        return self.to_file()[1]


def params_dtype(params):
    """The floating dtype of saved parameters (a solve's dtype)."""
    return jnp.result_type(*jax.tree.leaves(params))


def _jsonable(value) -> bool:
    if value is None or isinstance(value, (bool, int, float, str)):
        return not (isinstance(value, float) and not math.isfinite(value))
    if isinstance(value, tuple):
        return all(_jsonable(v) for v in value)
    return False


def class_path(problem_or_class) -> str:
    """`module:qualname` of a problem's class (how files name it)."""
    cls = (
        problem_or_class
        if isinstance(problem_or_class, type)
        else type(problem_or_class)
    )
    return cls.file_class or f"{cls.__module__}:{cls.__qualname__}"


def import_class(path: str) -> type[Problem] | None:
    """The problem class a file names (`module:qualname`), or `None` if it
    cannot be imported here (a class defined in a script's `__main__`)."""
    module, _, qualname = path.partition(":")
    try:
        obj: Any = importlib.import_module(module)
        for part in qualname.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError):
        return None
    return obj if isinstance(obj, type) and issubclass(obj, Problem) else None


def check_problem(problem, name: str = "problem") -> Problem:
    """A `TypeError` naming the argument unless it is a `gf.Problem`."""
    if not isinstance(problem, Problem):
        raise TypeError(
            f"{name} must be a gradflow.Problem (e.g. gf.problems.MarkovAttention"
            f"(chain)), got {type(problem).__name__}"
        )
    return problem


__all__ = [
    "Analysis",
    "params_dtype",
    "Problem",
    "check_problem",
    "class_path",
    "import_class",
]
