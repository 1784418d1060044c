r"""Finite-N SGD of the finite-context model (SPEC section 6), logged on the
flow's time axis $t = \text{lr} \times \text{step}$ and measured with the flow's
metric: the population loss of every saved iterate.

Data come from a sampler, an `eqx.Module` holding its arrays as fields (so a
new chain or corpus of the same size reuses the compiled step):

- `ChainSampler`: fresh sequences from a [`gradflow.MarkovChain`][] (`x_1`
  from $\pi$, then $P$), drawn by inverse CDF with one `lax.scan` over
  positions, vectorised over the batch;
- `WindowSampler`: random windows of a token stream (real text);
- `DatasetSampler`: a fixed set of `N` sequences (finite-N), a batch drawn
  without replacement each step.
"""

import math
import time
from pathlib import Path
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jaxtyping import Array, Float, Int, PRNGKeyArray

from ._chain import MarkovChain
from ._errors import show
from ._integrate import (
    _check_positive_finite,
    _resolve_dtype,
    default_save_times,
    initial_point,
)
from ._model import (
    Params,
    _attention_weights,
    _check_seed,
    population_loss as _population_loss,
)
from ._text import TokenStream
from ._trajectory import read_result, write_result


FORMAT_NAME = "gradflow-sgd"
FORMAT_VERSION = 1
_PARAM_NAMES = ("W0", "W1", "WQ", "WK")
# Steps run inside one compiled call between progress-bar updates. Results do
# not depend on it: step k always uses the key fold_in(key, k).
_CHUNK = 2000


# --------------------------------------------------------------------- samplers


class AbstractSampler(eqx.Module):
    """Draws a batch of token sequences of length `context + 1`."""

    context: eqx.AbstractVar[int]

    def __call__(self, key: PRNGKeyArray, batch_size: int) -> Int[Array, "b s1"]:
        raise NotImplementedError


class ChainSampler(AbstractSampler):
    r"""Sequences of a Markov chain: $x_1 \sim \pi$, $x_{t+1} \sim P[x_t]$.

    Sampling is by inverse CDF: one uniform per token, drawn all at once; a
    `lax.scan` over the `context` positions advances the whole batch.
    """

    cdf_pi: Float[Array, " d"]
    cdf_P: Float[Array, "d d"]
    context: int = eqx.field(static=True)

    def __init__(self, chain: MarkovChain, context: int):
        self.cdf_pi = jnp.cumsum(chain.pi)
        self.cdf_P = jnp.cumsum(chain.P, axis=-1)
        self.context = int(context)

    def __call__(self, key, batch_size):
        d = self.cdf_pi.shape[0]
        u = jax.random.uniform(key, (self.context + 1, batch_size), self.cdf_pi.dtype)

        def pick(cdf, v):
            # Number of CDF entries below v; clipped so that rounding in the
            # last CDF entry (0.9999999...) can never produce token d.
            return jnp.minimum(jnp.sum(v[..., None] >= cdf, axis=-1), d - 1)

        x0 = pick(self.cdf_pi, u[0])

        def advance(x, v):
            nxt = pick(self.cdf_P[x], v)
            return nxt, nxt

        _, rest = jax.lax.scan(advance, x0, u[1:])
        return jnp.concatenate([x0[None], rest], axis=0).T.astype(jnp.int32)


class WindowSampler(AbstractSampler):
    """Windows of `context + 1` consecutive tokens of a stream, uniform starts."""

    ids: Int[Array, " n"]
    context: int = eqx.field(static=True)

    def __call__(self, key, batch_size):
        n = self.ids.shape[0]
        starts = jax.random.randint(key, (batch_size,), 0, n - self.context)
        return self.ids[starts[:, None] + jnp.arange(self.context + 1)]


class DatasetSampler(AbstractSampler):
    """A fixed dataset of `N` sequences; each batch is `batch_size` distinct
    sequences drawn uniformly (without replacement). With `batch_size = N` every
    step is a full-batch gradient step."""

    sequences: Int[Array, "N s1"]
    context: int = eqx.field(static=True)

    def __call__(self, key, batch_size):
        N = self.sequences.shape[0]
        if batch_size == N:
            return self.sequences
        index = jax.random.choice(key, N, (batch_size,), replace=False)
        return self.sequences[index]


# ------------------------------------------------------------------------- step


def context_counts(
    sequences: Int[Array, "b s1"], d: int, dtype=jnp.float64
) -> tuple[Int[Array, " b"], Float[Array, "b d"], Int[Array, " b"]]:
    """Splits sequences `x_1..x_{s+1}` into what the model sees: the query token
    `x_s`, the count of each token among `x_1..x_s`, and the target `x_{s+1}`."""
    context = sequences[:, :-1]
    counts = jnp.sum(jax.nn.one_hot(context, d, dtype=dtype), axis=1)
    return context[:, -1], counts, sequences[:, -1]


def counted_context_loss(
    params: Params,
    query: Int[Array, " b"],
    counts: Float[Array, "b d"],
    target: Int[Array, " b"],
) -> jax.Array:
    r"""The finite-context loss of SPEC section 2, computed from token counts.

    Positions holding the same token get the same score, so the softmax over
    the $s$ positions is a softmax over the $d$ tokens weighted by their counts
    $n_k$: $\alpha_k \propto n_k e^{S[q, k]}$, $h = W_0 \alpha$. This is the
    population formula with $\pi$ replaced by the context's own token counts,
    and it uses the same attention primitive. Equal to
    [`gradflow.finite_context_loss`][] on the same sequences (tested), but
    $O(b\,d\,m)$ instead of $O(b\,s\,m^2)$ with a scatter in the gradient.
    """
    E = params.W0
    alpha = _attention_weights(params.WQ, params.WK, E[:, query], E, jnp.log(counts))
    logits = params.W1 @ (E @ alpha.T)  # (d, b)
    logp = jax.nn.log_softmax(logits, axis=0)
    return -jnp.mean(jnp.take_along_axis(logp, target[None, :], axis=0))


def _loss(params: Params, batch) -> jax.Array:
    return counted_context_loss(
        params, *context_counts(batch, params.d, params.W0.dtype)
    )


def sgd_step(
    params: Params,
    opt_state,
    key: PRNGKeyArray,
    sampler: AbstractSampler,
    optimizer: optax.GradientTransformation,
    batch_size: int,
):
    """One step: draw a batch, take the gradient of the finite-context loss,
    apply the optimizer. Returns `(params, opt_state, batch_loss)`."""
    batch = sampler(key, batch_size)
    loss, grads = jax.value_and_grad(_loss)(params, batch)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss


@eqx.filter_jit
@eqx.debug.assert_max_traces(max_traces=None)  # counts traces (tested), no limit
def _advance(params, opt_state, key, start, num_steps, sampler, optimizer, batch_size):
    """Runs steps `start, ..., start + num_steps - 1` (a traced count: one compile
    for every chunk length). Returns the new state and the summed batch loss."""

    def body(i, carry):
        params, opt_state, total = carry
        params, opt_state, loss = sgd_step(
            params,
            opt_state,
            jax.random.fold_in(key, start + i),
            sampler,
            optimizer,
            batch_size,
        )
        return params, opt_state, total + loss

    zero = jnp.zeros((), params.W0.dtype)
    return jax.lax.fori_loop(0, num_steps, body, (params, opt_state, zero))


@eqx.filter_jit
def _draw(sampler, key, num):
    return sampler(key, num)


@eqx.filter_jit
def _first_batch_loss(params, key, sampler, batch_size):
    return _loss(params, sampler(key, batch_size))


@eqx.filter_jit
def _population_observables(params: Params, chain: MarkovChain):
    def one(p):
        loss, grad = jax.value_and_grad(_population_loss)(p, chain)
        grad_sq = sum(jnp.sum(g**2) for g in jax.tree.leaves(grad))
        return loss, jnp.sqrt(grad_sq)

    return jax.vmap(one)(params)


_OBS_CHUNK = 64


def _pad_rows(x):
    """Pads the leading axis to `_OBS_CHUNK` rows by repeating the last row."""
    extra = _OBS_CHUNK - x.shape[0]
    return jnp.concatenate([x, jnp.repeat(x[-1:], extra, axis=0)])


def population_observables(params: Params, chain: MarkovChain):
    """Population loss and $|\nabla L|$ of stacked parameters, in chunks of a
    fixed size (the last one padded) so that runs with different numbers of
    saves share one compilation."""
    T = params.W0.shape[0]
    losses, norms = [], []
    for i in range(0, T, _OBS_CHUNK):
        n = min(_OBS_CHUNK, T - i)
        chunk = jax.tree.map(lambda x, i=i, n=n: _pad_rows(x[i : i + n]), params)
        loss, norm = _population_observables(chunk, chain)
        losses.append(np.asarray(loss)[:n])
        norms.append(np.asarray(norm)[:n])
    return np.concatenate(losses), np.concatenate(norms)


# Default optimizer: plain SGD with the learning rate held in the optimizer
# state (inject_hyperparams), so runs at different lr share one compilation.
_DEFAULT_OPTIMIZER = optax.inject_hyperparams(optax.sgd)(learning_rate=1.0)


# ------------------------------------------------------------------------ result


class SGDRun(eqx.Module):
    r"""An SGD run on the flow's time axis.

    **Fields:**

    - `ts`: saved times $t = \text{lr} \times \text{step}$, shape `(T,)`.
    - `steps`: the step numbers at `ts`.
    - `population_loss`: the population loss $L(\theta)$ of each saved iterate
      against `chain` (the same metric as `Trajectory.loss`); `loss` is an alias.
    - `grad_norm`: $|\nabla L|$ of the population loss at each saved iterate.
    - `train_loss`: the mean mini-batch (finite-context) loss of the steps
      since the previous save; at `ts[0]`, the loss of one batch at the start.
    - `params`: [`gradflow.Params`][] with a leading time axis.
    - `chain`: the chain sampled from, or for text the bigram chain of the
      corpus.
    - `settings`, `stats` (`num_steps`, `wall_time`, `steps_per_second`),
      `ok`, `message`, `stages`, `events`, `extras`: as in
      [`gradflow.Trajectory`][].
    """

    ts: np.ndarray
    steps: np.ndarray
    population_loss: np.ndarray
    grad_norm: np.ndarray
    train_loss: np.ndarray
    params: Params
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

    @property
    def final_params(self) -> Params:
        return self.params[-1]

    @property
    def t_final(self) -> float:
        return float(self.ts[-1])

    def __len__(self) -> int:
        return int(self.ts.shape[0])

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


def _attach_stages(run: SGDRun) -> SGDRun:
    """Fills `stages`, `events` and `extras` from the saved iterates, with the
    same detector as a `Trajectory` ([`gradflow.stages_from_params`][])."""
    from ._stages import stages_from_params

    stages, events, curves = stages_from_params(run.ts, run.params, run.chain)
    extras = dict(run.extras)
    extras.update({k: v for k, v in curves.items() if k not in ("loss", "grad_norm")})
    return eqx.tree_at(
        lambda r: (r.stages, r.events, r.extras),
        run,
        (tuple(stages), tuple(events), extras),
    )


# ------------------------------------------------------------------- train_sgd


def _check_int(name: str, value, least: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an integer, got {name} = {show(value)}")
    if value < least:
        raise ValueError(f"{name} must be >= {least}, got {name} = {value}")
    return int(value)


def sgd_save_steps(ts, lr: float, t1: float) -> np.ndarray:
    """Step numbers for save times: `round(t / lr)`, deduplicated, with step 0.

    `ts=None` maps the flow's log grid ([`gradflow.default_save_times`][]) to
    steps, so an SGD run and a flow share save times wherever steps allow.
    """
    last = int(math.floor(t1 / lr + 1e-9))
    if last < 1:
        raise ValueError(
            f"t1 = {t1} is shorter than one step of lr = {lr}: no SGD step would run"
        )
    if ts is None:
        ts = default_save_times(t1)
    try:
        ts = np.asarray(ts, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(
            f"ts must be an increasing array of times, got {show(ts)}"
        ) from None
    if ts.ndim != 1 or ts.size == 0:
        raise ValueError(
            f"ts must be a non-empty 1-D array of times, got shape {ts.shape}"
        )
    if not np.isfinite(ts).all():
        raise ValueError(f"ts must be finite, got {ts[~np.isfinite(ts)][0]}")
    if ts.size > 1 and not (np.diff(ts) > 0).all():
        i = int(np.flatnonzero(np.diff(ts) <= 0)[0])
        raise ValueError(
            f"ts must be strictly increasing, but ts[{i}] = {ts[i]} and "
            f"ts[{i + 1}] = {ts[i + 1]}"
        )
    if ts.min() < 0 or ts.max() > t1 * (1 + 1e-12):
        raise ValueError(
            f"ts must lie in [0, t1] = [0, {t1}], got values from {ts.min()} to "
            f"{ts.max()}"
        )
    steps = np.unique(np.clip(np.rint(ts / lr).astype(np.int64), 0, last))
    return steps if steps[0] == 0 else np.concatenate([[0], steps])


def train_sgd(
    source: MarkovChain | TokenStream,
    params: Params | None = None,
    *,
    init_scale: float | None = None,
    width: int = 16,
    seed: int = 0,
    context: int = 256,
    batch_size: int = 512,
    lr: float = 0.2,
    t1: float = 300.0,
    num_sequences: int | None = None,
    optimizer: optax.GradientTransformation | None = None,
    ts=None,
    progress: bool = True,
    dtype: str = "float64",
) -> SGDRun:
    r"""Trains the finite-context model (SPEC section 2) with Optax and logs it on
    the flow's time axis.

    Step $k$ sits at $t = k \cdot \text{lr}$, so a run and
    [`gradflow.integrate`][] from the same `params` share one time axis; each
    saved iterate is scored with [`gradflow.population_loss`][] against the
    chain, so they share one metric.

    **Arguments:**

    - `source`: a [`gradflow.MarkovChain`][] (sequences of `context + 1`
      tokens, $x_1 \sim \pi$, then $P$) or a [`gradflow.text.TokenStream`][]
      (windows of real text; the population loss is that of its bigram chain).
    - `params`: parameters to start from; or `init_scale` (and `width`, `seed`)
      for the random start of [`gradflow.init_params`][]. Give exactly one.
    - `seed`: seeds the initialisation (same as `integrate`) and the data.
    - `context`: $s$, tokens seen by the attention; `batch_size`: sequences
      per step; `lr`: learning rate (and the time unit); `t1`: final time.
    - `num_sequences`: `None` draws fresh sequences every step (online SGD);
      an integer $N$ fixes a dataset of $N$ sequences (or windows) reused by
      every step, each batch drawn without replacement ($N \ge$ `batch_size`).
    - `optimizer`: any Optax transformation; default `optax.sgd(lr)`. Time is
      still `lr * step`.
    - `ts`: save times in `[0, t1]`, rounded to whole steps; default the flow's
      log grid.
    - `progress`: a tqdm bar (shown after 2 s); `dtype`: `"float64"` or
      `"float32"`.

    **Returns:** a [`gradflow.SGDRun`][]. If the loss becomes non-finite the run
    stops: `ok` is `False` and `message` says where and what to change.

    **Raises:** `ValueError`/`TypeError` naming the argument and its value
    (`lr <= 0`, `context < 1`, `batch_size < 1`, a corpus shorter than
    `context + 1`, ...), before anything is compiled.

    **Example:**

    ```python
    chain = gf.chains.sticky(6, 0.5, 0.5, 0.05)
    p0 = gf.init_params(chain.d, width=8, init_scale=1e-3)
    run = gf.train_sgd(chain, p0, context=256, batch_size=512, lr=0.2, t1=300)
    traj = gf.integrate(chain, params=p0, t1=300, ts=run.ts)
    gf.compare(traj, run).loss_gap
    ```
    """
    start_time = time.perf_counter()
    if isinstance(source, TokenStream):
        chain = source.chain
        kind = "text"
    elif isinstance(source, MarkovChain):
        chain = source
        kind = "chain"
    else:
        raise TypeError(
            "source must be a gradflow.MarkovChain or a gradflow.text.TokenStream "
            f"(from gf.text.encode), got {type(source).__name__}"
        )
    jdtype = _resolve_dtype(dtype)
    context = _check_int("context", context)
    batch_size = _check_int("batch_size", batch_size)
    lr = _check_positive_finite("lr", lr)
    t1 = _check_positive_finite("t1", t1)
    width = _check_int("width", width)
    seed = _check_seed(seed)
    if num_sequences is not None:
        num_sequences = _check_int("num_sequences", num_sequences)
        if num_sequences < batch_size:
            raise ValueError(
                f"num_sequences = {num_sequences} is smaller than batch_size = "
                f"{batch_size}; batches are drawn without replacement"
            )
    if kind == "text" and len(source) < context + 2:
        raise ValueError(
            f"the corpus has {len(source)} tokens, too few for windows of context + 1 "
            f"= {context + 1} tokens (need at least {context + 2})"
        )
    if optimizer is not None and not isinstance(
        optimizer, optax.GradientTransformation
    ):
        raise TypeError(
            "optimizer must be an optax.GradientTransformation, got "
            f"{type(optimizer).__name__}"
        )
    steps = sgd_save_steps(ts, lr, t1)
    params0, init_scale, width = initial_point(
        chain, init_scale, params, width, seed, jdtype
    )

    data_key = jax.random.fold_in(jax.random.key(int(seed)), 0x5EED)
    sample_key, step_key = jax.random.split(data_key)
    chain_dt = jax.tree.map(lambda x: x.astype(jdtype), chain)
    if kind == "chain":
        sampler = ChainSampler(chain_dt, context)
    else:
        sampler = WindowSampler(jnp.asarray(source.ids, jnp.int32), context)
    if num_sequences is not None:
        sampler = DatasetSampler(_draw(sampler, sample_key, num_sequences), context)

    if optimizer is None:
        opt = _DEFAULT_OPTIMIZER
        opt_state = opt.init(params0)
        opt_state.hyperparams["learning_rate"] = jnp.asarray(lr, jdtype)
    else:
        opt = optimizer
        opt_state = opt.init(params0)

    saved = [params0]
    train = [float(_first_batch_loss(params0, step_key, sampler, batch_size))]
    params_now, done = params0, 0
    ok, message = True, ""
    import tqdm

    bar = tqdm.tqdm(
        total=int(steps[-1]),
        delay=2.0,
        disable=not progress,
        desc="gradflow sgd",
        unit="step",
    )
    try:
        for target in steps[1:]:
            total, count = 0.0, 0
            while done < target:
                n = int(min(_CHUNK, target - done))
                params_now, opt_state, chunk_sum = _advance(
                    params_now,
                    opt_state,
                    step_key,
                    jnp.asarray(done),
                    jnp.asarray(n),
                    sampler,
                    opt,
                    batch_size,
                )
                total += float(chunk_sum)
                count += n
                done += n
                bar.update(n)
            finite = all(
                bool(jnp.isfinite(x).all()) for x in jax.tree.leaves(params_now)
            )
            if not (math.isfinite(total) and finite):
                ok = False
                message = (
                    "the mini-batch loss or the parameters became non-finite "
                    "between steps "
                    f"{done - count} and {done} (t <= {done * lr:.6g}); lower lr "
                    f"(now {lr}) or init_scale"
                )
                break
            saved.append(params_now)
            train.append(total / count)
    finally:
        bar.close()

    params_saved = jax.tree.map(lambda *xs: jnp.stack(xs), *saved)
    pop_loss, grad_norm = population_observables(params_saved, chain_dt)
    steps_saved = steps[: len(saved)]
    wall = time.perf_counter() - start_time
    settings = {
        "source": kind if kind == "chain" else f"text:{source.source}",
        "width": int(width),
        "init_scale": None if init_scale is None else float(init_scale),
        "seed": int(seed),
        "context": context,
        "batch_size": batch_size,
        "lr": lr,
        "t1": t1,
        "num_sequences": num_sequences,
        "optimizer": "sgd" if optimizer is None else repr(optimizer)[:200],
        "dtype": np.dtype(jdtype).name,
        "num_saves": int(steps.size),
    }
    stats = {
        "num_steps": int(done),
        "wall_time": wall,
        "steps_per_second": done / wall if wall > 0 else float("nan"),
    }
    run = SGDRun(
        ts=steps_saved.astype(np.float64) * lr,
        steps=steps_saved,
        population_loss=np.asarray(pop_loss, dtype=np.float64),
        grad_norm=np.asarray(grad_norm, dtype=np.float64),
        train_loss=np.asarray(train, dtype=np.float64),
        params=jax.tree.map(np.asarray, params_saved),
        chain=chain,
        settings=settings,
        stats=stats,
        ok=ok,
        message=message,
    )
    return _attach_stages(run)


__all__ = [
    "ChainSampler",
    "DatasetSampler",
    "SGDRun",
    "WindowSampler",
    "context_counts",
    "counted_context_loss",
    "load_sgd",
    "sgd_step",
    "train_sgd",
]
