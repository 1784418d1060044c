r"""SGD's loop: one typed state advanced by a pure compiled chunk, driven by the
host driver shared with the flow and the sweep (`gradflow._loop.driver`).

[`SGDState`][] holds everything a run carries between chunks: the step, the
parameters and the optimizer's state, the iterates saved so far (a fixed
`(S, ...)` buffer with a count), the mean mini-batch loss of each save
interval, the partial sum since the last save (in float64, step by step, so
that it does not depend on the chunks) and whether the run failed. A chunk
([`sgd_chunk`][]) takes at most `chunk` steps and never passes the next save
step; at a save step it records the iterate, or marks the run failed if
the loss or the parameters became non-finite. Step $k$ draws its batch with
`fold_in(key, k)`, so a run is the same whatever its chunks.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jaxtyping import Array, Bool, Float, Int, PRNGKeyArray, PyTree

from .._loop.checkpoint import pack_tree
from .._loop.driver import Job
from .._problem.base import Problem, SampledProblem


# Steps run inside one compiled call between looks of the host (progress,
# Ctrl-C, checkpoints). Results do not depend on it.
CHUNK = 2000


class FixedData(eqx.Module):
    """A fixed dataset of `N` examples drawn once from a problem (finite-N
    SGD): each batch is `batch_size` distinct examples drawn uniformly
    (without replacement). With `batch_size = N` every step is a full-batch
    gradient step."""

    problem: SampledProblem
    data: PyTree

    def sample(self, key: PRNGKeyArray, n: int) -> PyTree:
        N = jax.tree.leaves(self.data)[0].shape[0]
        if n == N:
            return self.data
        index = jax.random.choice(key, N, (n,), replace=False)
        return jax.tree.map(lambda x: x[index], self.data)

    def sample_loss(self, params, batch) -> Array:
        return self.problem.sample_loss(params, batch)


class Population(eqx.Module):
    r"""The population loss as a source of batches: full-batch gradient
    descent (`SGD(batch_size=None)`). Its "batch" is empty and its loss is
    the problem's population loss, so a step is $\theta - \text{lr}\,
    \nabla L(\theta)$ for any [`gradflow.Problem`][]."""

    problem: Problem

    def sample(self, key: PRNGKeyArray, n) -> Array:
        del key, n
        return jnp.zeros(0)

    def sample_loss(self, params, batch) -> Array:
        del batch
        return self.problem.loss(params)


def sgd_step(params, opt_state, key, *, source, optimizer, batch_size: int | None):
    """One step: draw a batch from `source` (a problem, or a `FixedData`),
    take the gradient of its loss, apply the optimizer. Returns
    `(params, opt_state, batch_loss)`."""
    batch = source.sample(key, batch_size)
    loss, grads = jax.value_and_grad(source.sample_loss)(params, batch)
    # (optax types parameters as its own array-tree alias, not an eqx.Module)
    updates, opt_state = optimizer.update(grads, opt_state, params)  # pyright: ignore[reportArgumentType]
    return optax.apply_updates(params, updates), opt_state, loss  # pyright: ignore[reportArgumentType]


class SGDState(eqx.Module):
    """Everything an SGD run carries from one chunk of steps to the next, and
    what its checkpoint holds (see the module docstring)."""

    step: Int[Array, ""]
    params: PyTree
    opt_state: PyTree
    saved: PyTree
    train: Float[Array, " S"]
    num_saved: Int[Array, ""]
    total: Float[Array, ""]
    count: Int[Array, ""]
    failed: Bool[Array, ""]


def init_sgd_state(params0, opt_state, num_saves: int, first_loss) -> SGDState:
    """The state at step 0: the start saved, the loss of one batch there."""
    saved = jax.tree.map(
        lambda x: jnp.zeros((num_saves, *x.shape), x.dtype).at[0].set(x), params0
    )
    zero = jnp.zeros((), jnp.int64 if jax.config.jax_enable_x64 else jnp.int32)  # pyright: ignore[reportAttributeAccessIssue]
    train = (
        jnp.zeros(num_saves, jnp.float64)
        .at[0]
        .set(jnp.asarray(first_loss, jnp.float64))
    )
    return SGDState(
        step=zero,
        params=params0,
        opt_state=opt_state,
        saved=saved,
        train=train,
        num_saved=zero + 1,
        total=jnp.zeros((), jnp.float64),
        count=zero,
        failed=jnp.zeros((), bool),
    )


def _finite(tree) -> Array:
    return jnp.all(jnp.stack([jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(tree)]))


@eqx.filter_jit
def sgd_chunk(
    state: SGDState,
    steps,
    key,
    *,
    source,
    optimizer,
    batch_size: int | None,
    chunk: int,
):
    """Advances `state` by at most `chunk` steps, up to the next save step
    (`steps[state.num_saved]`), recording the iterate there (or failing)."""
    target = steps[state.num_saved]
    n = jnp.minimum(chunk, target - state.step)

    def body(i, carry):
        params, opt_state, total = carry
        params, opt_state, loss = sgd_step(
            params,
            opt_state,
            jax.random.fold_in(key, state.step + i),
            source=source,
            optimizer=optimizer,
            batch_size=batch_size,
        )
        # summed step by step in float64 from the last save on: the same
        # bits whatever the chunks (a sum per chunk would depend on them)
        return params, opt_state, total + loss.astype(jnp.float64)

    params, opt_state, total = jax.lax.fori_loop(
        0, n, body, (state.params, state.opt_state, state.total)
    )
    count = state.count + n
    step = state.step + n
    at_save = step == target
    finite = jnp.isfinite(total) & _finite(params)
    save = at_save & finite
    i = state.num_saved
    saved = jax.tree.map(
        lambda buf, x: jnp.where(save, buf.at[i].set(x), buf), state.saved, params
    )
    mean = total / count.astype(total.dtype)
    train = jnp.where(save, state.train.at[i].set(mean), state.train)
    return SGDState(
        step=step,
        params=params,
        opt_state=opt_state,
        saved=saved,
        train=train,
        num_saved=i + save.astype(i.dtype),
        total=jnp.where(save, 0.0, total),
        count=jnp.where(save, 0, count),
        failed=state.failed | (at_save & ~finite),
    )


class SGDJob(Job):
    """An SGD run's chunks for the driver: run while saves remain and nothing
    failed; checkpoint the state whole."""

    def __init__(self, steps: np.ndarray, key, *, source, optimizer, batch_size, chunk):
        self.steps = steps
        self.steps_j = jnp.asarray(np.append(steps, steps[-1]))  # (a guard entry)
        self.key = key
        self.kw = dict(source=source, optimizer=optimizer, batch_size=batch_size)
        self.chunk = int(chunk)

    def running(self, state: SGDState) -> bool:
        return int(state.num_saved) < self.steps.size and not bool(state.failed)

    def advance(self, state: SGDState) -> SGDState:
        return sgd_chunk(state, self.steps_j, self.key, chunk=self.chunk, **self.kw)

    def progress(self, state: SGDState):
        return float(state.step), None

    def snapshot(self, state: SGDState):
        return {"step": int(state.step)}, pack_tree("state", state)


__all__ = [
    "CHUNK",
    "FixedData",
    "Population",
    "SGDJob",
    "SGDState",
    "init_sgd_state",
    "sgd_chunk",
    "sgd_step",
]
