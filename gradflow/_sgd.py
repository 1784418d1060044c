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
from typing import Any

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
from ._integrate import default_save_times, initial_point
from ._model import AnyParams, model_of
from ._sgd_checkpoint import (
    LoopState,
    checkpoint_state,
    fingerprint,
    optimizer_repr,
    restore_state,
)
from ._sgd_loss import batch_loss, population_observables
from ._sgd_run import SGDRun
from ._sgd_samplers import AbstractSampler, ChainSampler, DatasetSampler, WindowSampler
from ._validate import (
    check_dtype,
    check_integer,
    check_positive_finite,
    check_save_times,
    check_seed,
)
from .text._bigram import TokenStream


# Steps run inside one compiled call between progress-bar updates. Results do
# not depend on it: step k always uses the key fold_in(key, k).
_CHUNK = 2000


def sgd_step(
    params: AnyParams,
    opt_state,
    key: PRNGKeyArray,
    *,
    sampler: AbstractSampler,
    optimizer: optax.GradientTransformation,
    batch_size: int,
):
    """One step: draw a batch, take the gradient of the finite-context loss,
    apply the optimizer. Returns `(params, opt_state, batch_loss)`."""
    batch = sampler(key, batch_size)
    loss, grads = jax.value_and_grad(batch_loss)(params, batch)
    # (optax types parameters as its own array-tree alias, not an eqx.Module)
    updates, opt_state = optimizer.update(grads, opt_state, params)  # pyright: ignore[reportArgumentType]
    return optax.apply_updates(params, updates), opt_state, loss  # pyright: ignore[reportArgumentType]


@eqx.filter_jit
@eqx.debug.assert_max_traces(max_traces=None)  # counts traces (tested), no limit
def _advance(
    params, opt_state, key, start, num_steps, *, sampler, optimizer, batch_size
):
    """Runs steps `start, ..., start + num_steps - 1` (a traced count: one compile
    for every chunk length). Returns the new state and the summed batch loss."""

    def body(i, carry):
        params, opt_state, total = carry
        params, opt_state, loss = sgd_step(
            params,
            opt_state,
            jax.random.fold_in(key, start + i),
            sampler=sampler,
            optimizer=optimizer,
            batch_size=batch_size,
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
    ts = check_save_times(ts, t1, slack=1e-12)
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
    model=None,
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
    - `params`: parameters to start from; or `init_scale` (and `width`, `seed`,
      `model`) for the random start of [`gradflow.init_params`][]. Give
      exactly one.
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
    - `model`: a [`gradflow.Model`][] for the random start (default: the
      paper's model); given `params` carry their model, and a `model` given
      with them must match. The finite-context model of a variant is that of
      SPEC section 9 (each layer causal at every position); the model is saved
      in `settings["model"]` and is part of the checkpoint's fingerprint.

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
    setup = _prepare(
        source,
        params,
        init_scale=init_scale,
        width=width,
        seed=seed,
        context=context,
        batch_size=batch_size,
        lr=lr,
        t1=t1,
        num_sequences=num_sequences,
        optimizer=optimizer,
        ts=ts,
        dtype=dtype,
        checkpoint=checkpoint,
        checkpoint_every=checkpoint_every,
        model=model,
    )
    return _train(setup, progress)


class _Setup(eqx.Module):
    """Everything `train_sgd` checked and derived, before anything is compiled.
    `settings` holds the checked arguments; `optimizer` is the one used (the
    default when none was given) and `opt_state` its initial state."""

    source: MarkovChain | TokenStream
    chain: MarkovChain
    chain_dt: MarkovChain
    params0: AnyParams
    steps: np.ndarray
    settings: dict[str, Any]
    optimizer: optax.GradientTransformation
    opt_state: Any
    step_key: PRNGKeyArray
    sample_key: PRNGKeyArray
    ckpt: Checkpointer | None
    start_time: float


def _prepare(
    source,
    params,
    *,
    init_scale,
    width,
    seed,
    context,
    batch_size,
    lr,
    t1,
    num_sequences,
    optimizer,
    ts,
    dtype,
    checkpoint,
    checkpoint_every,
    model=None,
) -> _Setup:
    """Checks the arguments of `train_sgd` (one-line errors naming the
    argument), opens the checkpoint (refusing one of another call), and draws
    the keys."""
    start_time = time.perf_counter()
    chain, kind = _check_source(source)
    jdtype = check_dtype(dtype)
    context = check_integer("context", context, 1)
    batch_size = check_integer("batch_size", batch_size, 1)
    lr = check_positive_finite("lr", lr)
    t1 = check_positive_finite("t1", t1)
    width = check_integer("width", width, 1)
    seed = check_seed(seed)
    num_sequences = _check_data(source, context, batch_size, num_sequences)
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
        chain,
        init_scale=init_scale,
        params=params,
        width=width,
        seed=seed,
        dtype=jdtype,
        model=model,
    )
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
        "optimizer": "sgd" if optimizer is None else optimizer_repr(optimizer),
        "dtype": np.dtype(jdtype).name,
        "num_saves": int(steps.size),
        "model": model_of(params0).as_dict(),
    }
    opt = _DEFAULT_OPTIMIZER if optimizer is None else optimizer
    ckpt = None
    if checkpoint is not None:
        # Reads an existing file: a checkpoint of another call is refused here,
        # before anything is compiled.
        fp_settings, fp_inputs = fingerprint(
            settings,
            optimizer=optimizer,
            opt=opt,
            params0=params0,
            source=source,
            chain=chain,
            steps=steps,
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
    return _Setup(
        source=source,
        chain=chain,
        chain_dt=chain_dt,
        params0=params0,
        steps=steps,
        settings=settings,
        optimizer=opt,
        opt_state=opt_state,
        step_key=step_key,
        sample_key=sample_key,
        ckpt=ckpt,
        start_time=start_time,
    )


def _check_source(source) -> tuple[MarkovChain, str]:
    """The chain behind `source` and its kind, `"chain"` or `"text"`."""
    if isinstance(source, TokenStream):
        return source.chain, "text"
    if isinstance(source, MarkovChain):
        return source, "chain"
    raise TypeError(
        "source must be a gradflow.MarkovChain or a gradflow.text.TokenStream "
        f"(from gf.text.encode), got {type(source).__name__}"
    )


def _check_data(source, context: int, batch_size: int, num_sequences) -> int | None:
    """`num_sequences` checked against `batch_size`, and a text long enough for
    one window of `context + 1` tokens."""
    if num_sequences is not None:
        num_sequences = check_integer("num_sequences", num_sequences, 1)
        if num_sequences < batch_size:
            raise ValueError(
                f"num_sequences = {num_sequences} is smaller than batch_size = "
                f"{batch_size}; batches are drawn without replacement"
            )
    if isinstance(source, TokenStream) and len(source) < context + 2:
        raise ValueError(
            f"the corpus has {len(source)} tokens, too few for windows of context + 1 "
            f"= {context + 1} tokens (need at least {context + 2})"
        )
    return num_sequences


def _train(setup: _Setup, progress: bool) -> SGDRun:
    """Runs (or resumes, or returns a finished checkpoint's) training."""
    s, steps, ckpt = setup.settings, setup.steps, setup.ckpt
    if ckpt is not None and ckpt.state is not None:
        state, end = restore_state(
            ckpt, steps, setup.params0, setup.opt_state, setup.step_key
        )
        resumed_from = state.done
    else:
        params0 = setup.params0
        state = LoopState(0, [params0], [], 0.0, 0, params0, setup.opt_state)
        end, resumed_from = None, None
    resumed_done, interrupted, sampler = state.done, False, None
    if not state.train or (end is None and len(state.saved) < steps.size):
        sampler = _make_sampler(
            setup.source,
            setup.chain_dt,
            context=s["context"],
            num_sequences=s["num_sequences"],
            key=setup.sample_key,
        )
        if not state.train:
            first = _first_batch_loss(
                setup.params0, setup.step_key, sampler, s["batch_size"]
            )
            state.train = [float(first)]
    if end is None:
        message, interrupted = _run_chunks(
            state,
            steps=steps,
            step=(sampler, setup.optimizer, s["batch_size"]),
            key=setup.step_key,
            lr=s["lr"],
            ckpt=ckpt,
            progress=progress,
        )
        ok = not message
    else:
        ok, message = end
    if interrupted:
        ok = False
        message = _interrupted_message(state.done, int(steps[-1]), s["lr"], ckpt)
    run = _result(
        state,
        steps,
        interrupted=interrupted,
        chain=setup.chain,
        chain_dt=setup.chain_dt,
        settings=s,
        ok=ok,
        message=message,
        ckpt=ckpt,
        resumed_from=resumed_from,
        resumed_done=resumed_done,
        start_time=setup.start_time,
    )
    run = _attach_stages(run)
    if interrupted:
        raise Interrupted(
            f"gradflow.train_sgd: {message}",
            result=run,
            checkpoint=None if ckpt is None else ckpt.path,
        )
    return run


def _make_sampler(source, chain_dt, *, context, num_sequences, key) -> AbstractSampler:
    """Fresh sequences of the chain or windows of the text; with
    `num_sequences`, a fixed dataset of that many drawn once with `key`."""
    if isinstance(source, TokenStream):
        # (pyright reads the base class's abstract `context` as the first field)
        sampler = WindowSampler(jnp.asarray(source.ids, jnp.int32), context)  # pyright: ignore[reportArgumentType]
    else:
        sampler = ChainSampler(chain_dt, context)
    if num_sequences is not None:
        sampler = DatasetSampler(_draw(sampler, key, num_sequences), context)
    return sampler


def _run_chunks(state: LoopState, *, steps, step, key, lr, ckpt, progress):
    """Takes chunks of steps from `state` (updated in place) until the last save
    step, a non-finite loss or iterate at a save step, or Ctrl-C; writes the
    periodic checkpoints and one at the end. `step` is `(sampler, optimizer,
    batch_size)`.

    **Returns:** `(message, interrupted)`; `message` is `""` unless the run
    failed.
    """
    import tqdm

    sampler, optimizer, batch_size = step
    message, interrupted = "", False
    bar = tqdm.tqdm(
        total=int(steps[-1]),
        initial=state.done,
        delay=2.0,
        disable=not progress,
        desc="gradflow sgd",
        unit="step",
    )
    try:
        with deferred_interrupt() as flag:
            while len(state.saved) < steps.size:
                target = int(steps[len(state.saved)])
                n = min(_CHUNK, target - state.done)
                state.params, state.opt_state, chunk_sum = _advance(
                    state.params,
                    state.opt_state,
                    key,
                    jnp.asarray(state.done),
                    jnp.asarray(n),
                    sampler=sampler,
                    optimizer=optimizer,
                    batch_size=batch_size,
                )
                state.total += float(chunk_sum)
                state.count += n
                state.done += n
                bar.update(n)
                if state.done == target:
                    if not (math.isfinite(state.total) and _finite(state.params)):
                        done, count = state.done, state.count
                        message = (
                            "the mini-batch loss or the parameters became non-finite "
                            f"between steps {done - count} and {done} (t <= "
                            f"{done * lr:.6g}); lower lr (now {lr}) or init_scale"
                        )
                        break
                    state.saved.append(state.params)
                    state.train.append(state.total / state.count)
                    state.total, state.count = 0.0, 0
                if flag.requested and len(state.saved) < steps.size:
                    interrupted = True
                    break
                if ckpt is not None and ckpt.due():
                    ckpt.write(*checkpoint_state(state, key, None))
    finally:
        bar.close()
    if ckpt is not None:
        # Always at the end (finished, failed or interrupted). A failed run is
        # recorded as finished, so that running the call again returns the
        # failure instead of repeating it.
        end = None if interrupted else (not message, message)
        ckpt.write(*checkpoint_state(state, key, end))
    return message, interrupted


def _interrupted_message(done: int, last: int, lr: float, ckpt) -> str:
    return f"interrupted at step {done} of {last} (t = {done * lr:.6g})" + (
        f"; the checkpoint '{ckpt.path}' resumes it: run the same call "
        "again with the same checkpoint"
        if ckpt is not None
        else "; pass checkpoint=PATH (gradflow sgd: --checkpoint PATH) to "
        "make a run resumable"
    )


def _result(
    state: LoopState,
    steps,
    *,
    interrupted,
    chain,
    chain_dt,
    settings,
    ok,
    message,
    ckpt,
    resumed_from,
    resumed_done,
    start_time,
) -> SGDRun:
    """The run: the saved iterates scored with the population loss, and the
    stats of this call. An interrupted run keeps what was computed since the
    last save: the iterate at the interruption (off the save grid) and the mean
    loss up to it."""
    lr = settings["lr"]
    steps_saved = steps[: len(state.saved)]
    if interrupted and state.count > 0 and math.isfinite(state.total):
        if _finite(state.params):
            state.saved.append(state.params)
            state.train.append(state.total / state.count)
            steps_saved = np.append(steps_saved, state.done)
    params_saved = jax.tree.map(lambda *xs: jnp.stack(xs), *state.saved)
    pop_loss, grad_norm = population_observables(params_saved, chain_dt)
    wall = time.perf_counter() - start_time
    stats = {
        "num_steps": int(state.done),
        "steps_run": int(state.done - resumed_done),
        "resumed_from_step": resumed_from,
        "wall_time": wall,
        "steps_per_second": (state.done - resumed_done) / wall
        if wall > 0
        else float("nan"),
        "checkpoint": None if ckpt is None else str(ckpt.path),
        "checkpoint_writes": 0 if ckpt is None else ckpt.num_writes,
    }
    run = SGDRun(
        ts=steps_saved.astype(np.float64) * lr,
        steps=steps_saved,
        population_loss=np.asarray(pop_loss, dtype=np.float64),
        grad_norm=np.asarray(grad_norm, dtype=np.float64),
        train_loss=np.asarray(state.train, dtype=np.float64),
        params=jax.tree.map(np.asarray, params_saved),
        chain=chain,
        settings=settings,
        stats=stats,
        ok=ok,
        message=message,
    )
    return run


def _finite(params) -> bool:
    return all(bool(jnp.isfinite(x).all()) for x in jax.tree.leaves(params))


__all__ = [
    "sgd_save_steps",
    "sgd_step",
    "train_sgd",
]
