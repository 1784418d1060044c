r"""Finite-N SGD of the finite-context model (SPEC section 6), logged on the
flow's time axis $t = \text{lr} \times \text{step}$ and measured with the flow's
metric: the population loss of every saved iterate.

This module is the training loop (`train_sgd`, `sgd_step`, the compiled chunk
of steps). Its pieces live by concept: the samplers in `_sgd_samplers.py`, the
finite-context and population losses in `_sgd_loss.py`, the result and its
file format in `_sgd_run.py`, the checkpointed state in `_sgd_checkpoint.py`.
"""

import math
import os
import time
from typing import cast

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jaxtyping import PRNGKeyArray

from ._chain import MarkovChain
from ._checkpoint import (
    DEFAULT_EVERY,
    Checkpointer,
    Interrupted,
    check_every,
    check_path,
    deferred_interrupt,
)
from ._errors import show
from ._integrate import (
    _check_positive_finite,
    _check_ts,
    _resolve_dtype,
    default_save_times,
    initial_point,
)
from ._model import AnyParams, Params, _check_seed
from ._sgd_checkpoint import (
    checkpoint_state,
    fingerprint,
    optimizer_repr,
    restore_state,
)
from ._sgd_loss import batch_loss, population_observables
from ._sgd_run import SGDRun
from ._sgd_samplers import AbstractSampler, ChainSampler, DatasetSampler, WindowSampler
from ._text import TokenStream


# Steps run inside one compiled call between progress-bar updates. Results do
# not depend on it: step k always uses the key fold_in(key, k).
_CHUNK = 2000


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
    loss, grads = jax.value_and_grad(batch_loss)(params, batch)
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
    return batch_loss(params, sampler(key, batch_size))


# Default optimizer: plain SGD with the learning rate held in the optimizer
# state (inject_hyperparams), so runs at different lr share one compilation.
_DEFAULT_OPTIMIZER = optax.inject_hyperparams(optax.sgd)(learning_rate=1.0)


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
    ts = _check_ts(ts, t1, slack=1e-12)
    steps = np.unique(np.clip(np.rint(ts / lr).astype(np.int64), 0, last))
    return steps if steps[0] == 0 else np.concatenate([[0], steps])


def train_sgd(
    source: MarkovChain | TokenStream,
    params: AnyParams | None = None,
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
    if kind == "text" and len(cast(TokenStream, source)) < context + 2:
        raise ValueError(
            f"the corpus has {len(cast(TokenStream, source))} tokens, too few for "
            f"windows of context + 1 = {context + 1} tokens "
            f"(need at least {context + 2})"
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
        "source": kind
        if kind == "chain"
        else f"text:{cast(TokenStream, source).source}",
        "width": int(width),
        "init_scale": None if init_scale is None else float(init_scale),
        "seed": int(seed),
        "context": context,
        "batch_size": batch_size,
        "lr": lr,
        "t1": t1,
        "num_sequences": num_sequences,
        "optimizer": "sgd" if optimizer is None else optimizer_repr(optimizer),
        "dtype": np.dtype(jdtype).name,
        "num_saves": int(steps.size),
    }
    opt = _DEFAULT_OPTIMIZER if optimizer is None else optimizer
    ckpt = None
    if checkpoint is not None:
        # Reads an existing file: a checkpoint of another call is refused here,
        # before anything is compiled.
        fp_settings, fp_inputs = fingerprint(
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
        done, saved, train, total, count, params_now, opt_state, end = restore_state(
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
            assert isinstance(source, TokenStream)
            sampler = WindowSampler(jnp.asarray(source.ids, jnp.int32), context)  # pyright: ignore[reportArgumentType]
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
                    ckpt.write(*checkpoint_state(*state, step_key, None))
    finally:
        bar.close()
    if ckpt is not None and not was_finished:
        # Always at the end (finished, failed or interrupted). A failed run is
        # recorded as finished, so that running the call again returns the
        # failure instead of repeating it.
        state = (done, saved, train, total, count, params_now, opt_state)
        end = None if interrupted else (ok, message)
        ckpt.write(*checkpoint_state(*state, step_key, end))

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
    "sgd_save_steps",
    "sgd_step",
    "train_sgd",
]
