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

import functools
import math
import os
import re
import time
import types
from pathlib import Path
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jaxtyping import Array, Float, Int, PRNGKeyArray

from ._chain import MarkovChain
from ._checkpoint import (
    DEFAULT_EVERY,
    Checkpointer,
    Interrupted,
    _digest,
    check_every,
    check_path,
    deferred_interrupt,
    pack_tree,
    unpack_tree,
)
from ._errors import show
from ._integrate import (
    _check_positive_finite,
    _check_ts,
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
from ._trajectory import AbstractResult, read_result, write_result


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
    updates, opt_state = optimizer.update(grads, opt_state, params)  # pyright: ignore[reportArgumentType]
    return optax.apply_updates(params, updates), opt_state, loss  # pyright: ignore[reportArgumentType]


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
    - `params`: [`gradflow.Params`][] with a leading time axis.
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


# ------------------------------------------------------------------ checkpoints

# Entries recorded by `_describe_optimizer` at most (a closure could hold a
# large structure; the fingerprint needs the hyperparameters, not everything).
_MAX_DESCRIBED = 400


def _describe_optimizer(obj, path: str = "", out=None, seen=None, depth: int = 0):
    """What an Optax transformation is made of, as `{path: value}`: the names of
    its functions and the numbers, strings and small arrays their closures hold
    (learning rates, momenta, a schedule's parameters), found by walking the
    closures. Unlike `repr(optimizer)`, which holds memory addresses, this is
    the same in every process, so a checkpoint can compare it."""
    out = {} if out is None else out
    seen = set() if seen is None else seen
    if depth > 16 or len(out) >= _MAX_DESCRIBED:
        return out
    if obj is None or isinstance(obj, (bool, int, float, str)):
        out[path] = obj
        return out
    if isinstance(obj, (type, np.dtype)):  # a class or a dtype: its name
        out[path] = str(obj)
        return out
    if isinstance(obj, (np.ndarray, np.generic, jax.Array)):
        a = np.asarray(obj)
        out[path] = a.tolist() if a.size <= 16 else f"sha256:{_digest(a)}"
        return out
    if id(obj) in seen:
        return out
    seen.add(id(obj))
    join = (lambda name: f"{path}.{name}") if path else (lambda name: name)
    if isinstance(obj, functools.partial):
        obj = (obj.func, obj.args, obj.keywords)
    if isinstance(obj, types.MethodType):
        out[f"{path}()"] = obj.__qualname__
        obj = obj.__func__
    if isinstance(obj, types.FunctionType):
        out[f"{path}()"] = obj.__qualname__
        for name, cell in zip(obj.__code__.co_freevars, obj.__closure__ or ()):
            try:
                value = cell.cell_contents
            except ValueError:  # an empty cell
                continue
            _describe_optimizer(value, join(name), out, seen, depth + 1)
        for i, value in enumerate(obj.__defaults__ or ()):
            _describe_optimizer(value, join(f"default{i}"), out, seen, depth + 1)
    elif isinstance(obj, tuple) and hasattr(obj, "_fields"):  # a NamedTuple
        for name in obj._fields:  # pyright: ignore[reportAttributeAccessIssue]
            _describe_optimizer(getattr(obj, name), join(name), out, seen, depth + 1)
    elif isinstance(obj, (tuple, list)):
        for i, value in enumerate(obj):
            _describe_optimizer(value, f"{path}[{i}]", out, seen, depth + 1)
    elif isinstance(obj, dict):
        for key in sorted(obj, key=str):
            _describe_optimizer(obj[key], f"{path}[{key!r}]", out, seen, depth + 1)
    else:
        out[path] = type(obj).__qualname__
    return out


def _optimizer_repr(optimizer) -> str:
    """`repr(optimizer)` without memory addresses (which differ between
    processes), at most 200 characters: `settings["optimizer"]`."""
    return re.sub(r" at 0x[0-9a-fA-F]+", "", repr(optimizer))[:200]


def _fingerprint(settings, optimizer, opt, params0, source, chain, steps):
    """The `(settings, inputs)` a checkpoint of this call must match."""
    settings = dict(settings)
    if optimizer is not None:
        # `settings["optimizer"]` names only the outer function of most Optax
        # optimizers (`chain`): compare what the optimizer is made of and the
        # structure of its state as well.
        described = _describe_optimizer(optimizer)
        settings.update({f"optimizer {k}": v for k, v in described.items()})
        state = jax.eval_shape(opt.init, params0)
        settings["optimizer state"] = str(jax.tree.structure(state))
        for key, leaf in jax.tree_util.tree_flatten_with_path(state)[0]:
            name = f"optimizer state{jax.tree_util.keystr(key)}"
            settings[name] = f"{np.dtype(leaf.dtype).name}{list(leaf.shape)}"
    inputs = {
        "chain.P": chain.P,
        "chain.pi": chain.pi,
        "save steps": steps,
        **{f"params0.{n}": getattr(params0, n) for n in _PARAM_NAMES},
    }
    if isinstance(source, TokenStream):
        inputs["text ids"] = source.ids
    return settings, inputs


def _checkpoint_state(done, saved, train, total, count, params, opt_state, key, end):
    """The loop's state as `(meta, arrays)` for `Checkpointer.write`. `end` is
    `None` while running, else `(ok, message)`. Everything the next steps
    depend on is here; the data do not need to be, since step `k` draws with
    `fold_in(key, k)` from a key made from `seed`."""
    meta = {
        "done": int(done),
        "num_saved": len(saved),
        "count": int(count),
        "finished": end is not None,
        "ok": True if end is None else bool(end[0]),
        "message": "" if end is None else end[1],
    }
    stacked = jax.tree.map(lambda *xs: np.stack(xs), *saved)
    arrays = {
        **pack_tree("params", params),
        **pack_tree("opt_state", opt_state),
        **pack_tree("saved", stacked),
        "train_loss": np.asarray(train, dtype=np.float64),
        "partial_sum": np.asarray(total, dtype=np.float64),
        "key_data": np.asarray(jax.random.key_data(key)),
    }
    return meta, arrays


def _restore(ckpt, steps, params0, opt_state, key):
    """The loop's state read back from `ckpt` (see `_checkpoint_state`), checked
    for consistency; a `ValueError` naming the file if it is not."""
    meta, arrays = ckpt.state
    try:
        done, num_saved, count = meta["done"], meta["num_saved"], meta["count"]
        if not all(isinstance(x, int) for x in (done, num_saved, count)):
            raise ValueError("non-integer step counts")
        if not 1 <= num_saved <= steps.size:
            raise ValueError(f"{num_saved} saves for a grid of {steps.size}")
        last = int(steps[num_saved - 1])
        if meta["finished"]:
            if done < last:
                raise ValueError(f"a finished run at step {done} < {last}")
        elif num_saved == steps.size or not (
            last <= done < steps[num_saved] and done - last == count
        ):
            raise ValueError(
                f"step {done} with {count} steps since the save at step {last}"
            )
        if not np.array_equal(arrays["key_data"], jax.random.key_data(key)):
            raise ValueError("its random key is not the one this call derives")
        train = [float(x) for x in arrays["train_loss"]]
        if len(train) != num_saved:
            raise ValueError(f"{len(train)} train losses for {num_saved} saves")
        like = jax.tree.map(
            lambda x: jax.ShapeDtypeStruct((num_saved, *x.shape), x.dtype), params0
        )
        stacked = unpack_tree("saved", arrays, like)
        saved = [jax.tree.map(lambda x, i=i: x[i], stacked) for i in range(num_saved)]
        params = jax.tree.map(jnp.asarray, unpack_tree("params", arrays, params0))
        opt_state = jax.tree.map(
            jnp.asarray, unpack_tree("opt_state", arrays, opt_state)
        )
        total = float(arrays["partial_sum"])
        end = (bool(meta["ok"]), str(meta["message"])) if meta["finished"] else None
    except (KeyError, TypeError, ValueError) as e:
        what = f"missing {e}" if isinstance(e, KeyError) else str(e)
        raise ValueError(
            f"checkpoint '{ckpt.path}' is inconsistent ({what}); delete it to start "
            "afresh"
        ) from None
    return done, saved, train, total, count, params, opt_state, end


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
    ts = _check_ts(ts, t1, slack=1e-12)
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
    checkpoint: str | os.PathLike | None = None,
    checkpoint_every: float = DEFAULT_EVERY,
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
    - `checkpoint`: a file path (`.npz`) or `None`. The state of the run
      (step, parameters, optimizer state, saves so far) is written there
      atomically every `checkpoint_every` seconds of wall time, when the run
      ends (finished or failed) and when it is interrupted. If the file exists,
      the run resumes from it and ends at the same result, bit for bit, as an
      uninterrupted run; a finished checkpoint returns its result without
      taking a step. A checkpoint written by a different call (other
      settings, chain, text, start, save times or optimizer) is refused.
    - `checkpoint_every`: seconds between periodic checkpoint writes (default
      120; `0` writes after every chunk of steps).

    **Returns:** a [`gradflow.SGDRun`][]. If the loss becomes non-finite the run
    stops: `ok` is `False` and `message` says where and what to change.
    `stats["resumed_from_step"]` is the step a checkpoint resumed from (`None`
    for a fresh run) and `stats["steps_run"]` the steps taken by this call.

    **Raises:**

    - `ValueError`/`TypeError` naming the argument and its value (`lr <= 0`,
      `context < 1`, `batch_size < 1`, a corpus shorter than `context + 1`,
      `checkpoint` a folder, ...), before anything is compiled;
    - `ValueError` naming the file if `checkpoint` is unreadable, was written
      by another call (listing each differing setting with both values, or the
      differing input) or by `gradflow.integrate`, also before compiling;
    - [`gradflow.Interrupted`][] (a `KeyboardInterrupt`) on Ctrl-C: the run
      stops after the current chunk of steps, writes its checkpoint and
      carries the partial run (`ok=False`) in `.result`. A second Ctrl-C
      aborts at once with a plain `KeyboardInterrupt`.

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
    if kind == "text" and len(source) < context + 2:  # pyright: ignore[reportArgumentType]
        raise ValueError(
            f"the corpus has {len(source)} tokens, too few for windows of context + 1 "  # pyright: ignore[reportArgumentType]
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
    checkpoint = check_path(checkpoint)
    checkpoint_every = check_every(checkpoint_every)
    params0, init_scale, width = initial_point(
        chain, init_scale, params, width, seed, jdtype
    )
    settings = {
        "source": kind if kind == "chain" else f"text:{source.source}",  # pyright: ignore[reportAttributeAccessIssue]
        "width": int(width),
        "init_scale": None if init_scale is None else float(init_scale),
        "seed": int(seed),
        "context": context,
        "batch_size": batch_size,
        "lr": lr,
        "t1": t1,
        "num_sequences": num_sequences,
        "optimizer": "sgd" if optimizer is None else _optimizer_repr(optimizer),
        "dtype": np.dtype(jdtype).name,
        "num_saves": int(steps.size),
    }
    opt = _DEFAULT_OPTIMIZER if optimizer is None else optimizer
    ckpt = None
    if checkpoint is not None:
        # Reads an existing file: a checkpoint of another call is refused here,
        # before anything is compiled.
        fp_settings, fp_inputs = _fingerprint(
            settings, optimizer, opt, params0, source, chain, steps
        )
        ckpt = Checkpointer(
            checkpoint, "train_sgd", fp_settings, fp_inputs, checkpoint_every
        )

    data_key = jax.random.fold_in(jax.random.key(int(seed)), 0x5EED)
    sample_key, step_key = jax.random.split(data_key)
    chain_dt = jax.tree.map(lambda x: x.astype(jdtype), chain)
    opt_state = opt.init(params0)  # pyright: ignore[reportArgumentType]
    if optimizer is None:
        opt_state.hyperparams["learning_rate"] = jnp.asarray(lr, jdtype)  # pyright: ignore[reportAttributeAccessIssue]

    if ckpt is not None and ckpt.state is not None:
        done, saved, train, total, count, params_now, opt_state, end = _restore(
            ckpt, steps, params0, opt_state, step_key
        )
        resumed_from = done
    else:
        done, count, total, end = 0, 0, 0.0, None
        saved, train, params_now = [params0], [], params0
        resumed_from = None
    ok, message = (True, "") if end is None else end
    was_finished, resumed_done, interrupted = end is not None, done, False
    if not train or (end is None and len(saved) < steps.size):
        if kind == "chain":
            sampler = ChainSampler(chain_dt, context)
        else:
            sampler = WindowSampler(jnp.asarray(source.ids, jnp.int32), context)  # pyright: ignore[reportArgumentType,reportAttributeAccessIssue]
        if num_sequences is not None:
            sampler = DatasetSampler(_draw(sampler, sample_key, num_sequences), context)  # pyright: ignore[reportArgumentType]
        if not train:
            train = [float(_first_batch_loss(params0, step_key, sampler, batch_size))]
    import tqdm

    bar = tqdm.tqdm(
        total=int(steps[-1]),
        initial=done,
        delay=2.0,
        disable=not progress,
        desc="gradflow sgd",
        unit="step",
    )
    try:
        with deferred_interrupt() as flag:
            while end is None and len(saved) < steps.size:
                target = int(steps[len(saved)])
                n = min(_CHUNK, target - done)
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
                if done == target:
                    finite = all(
                        bool(jnp.isfinite(x).all()) for x in jax.tree.leaves(params_now)
                    )
                    if not (math.isfinite(total) and finite):
                        ok = False
                        message = (
                            "the mini-batch loss or the parameters became non-finite "
                            f"between steps {done - count} and {done} (t <= "
                            f"{done * lr:.6g}); lower lr (now {lr}) or init_scale"
                        )
                        break
                    saved.append(params_now)
                    train.append(total / count)
                    total, count = 0.0, 0
                if flag.requested and len(saved) < steps.size:
                    interrupted = True
                    break
                if ckpt is not None and ckpt.due():
                    state = (done, saved, train, total, count, params_now, opt_state)
                    ckpt.write(*_checkpoint_state(*state, step_key, None))
    finally:
        bar.close()
    if ckpt is not None and not was_finished:
        # Always at the end (finished, failed or interrupted). A failed run is
        # recorded as finished, so that running the call again returns the
        # failure instead of repeating it.
        state = (done, saved, train, total, count, params_now, opt_state)
        end = None if interrupted else (ok, message)
        ckpt.write(*_checkpoint_state(*state, step_key, end))

    if interrupted:
        ok = False
        message = (
            f"interrupted at step {done} of {int(steps[-1])} (t = {done * lr:.6g})"
            + (
                f"; the checkpoint '{ckpt.path}' resumes it: run the same call "
                "again with the same checkpoint"
                if ckpt is not None
                else "; pass checkpoint=PATH (gradflow sgd: --checkpoint PATH) to "
                "make a run resumable"
            )
        )
    steps_saved = steps[: len(saved)]
    if interrupted and count > 0 and math.isfinite(total):
        if all(bool(jnp.isfinite(x).all()) for x in jax.tree.leaves(params_now)):
            # Keep what was computed since the last save: the iterate at the
            # interruption (off the save grid) and the mean loss up to it.
            saved.append(params_now)
            train.append(total / count)
            steps_saved = np.append(steps_saved, done)
    params_saved = jax.tree.map(lambda *xs: jnp.stack(xs), *saved)
    pop_loss, grad_norm = population_observables(params_saved, chain_dt)
    wall = time.perf_counter() - start_time
    stats = {
        "num_steps": int(done),
        "steps_run": int(done - resumed_done),
        "resumed_from_step": resumed_from,
        "wall_time": wall,
        "steps_per_second": (done - resumed_done) / wall if wall > 0 else float("nan"),
        "checkpoint": None if ckpt is None else str(ckpt.path),
        "checkpoint_writes": 0 if ckpt is None else ckpt.num_writes,
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
    run = _attach_stages(run)
    if interrupted:
        raise Interrupted(
            f"gradflow.train_sgd: {message}",
            result=run,
            checkpoint=None if ckpt is None else ckpt.path,
        )
    return run


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
