r"""[`gradflow.train_sgd`][]: finite-sample SGD of any problem that samples
(SPEC sections 6 and 11), logged on the flow's time axis
$t = \text{lr} \times \text{step}$ and measured with the flow's metric: the
population loss of every saved iterate.

The paper's model trains on sequences of its chain (`source` a chain) or on
windows of a text (`source` a [`gradflow.text.TokenStream`][]); any
[`gradflow.Problem`][] with `sample` and `sample_loss` trains on its own
examples. The loop is `loop.py`'s, driven by the engine's one driver.
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

from .._core.validate import (
    check_dtype,
    check_integer,
    check_positive_finite,
    check_save_times,
    check_seed,
)
from .._engine.checkpoint import (
    DEFAULT_EVERY,
    Checkpointer,
    check_every,
    check_path,
)
from .._engine.driver import drive, interrupted, interrupted_message
from .._engine.problem import Problem
from .._engine.setup import check_chunk_steps, initial_point
from .._engine.solving import default_save_times
from .._engine.stages import StageThresholds
from ..problems._markov.chain import MarkovChain
from ..problems._markov.problem import markov_problem
from ..text._bigram import TokenStream
from .checkpoint import fingerprint, optimizer_repr
from .loop import CHUNK, FixedData, SGDJob, SGDState, init_sgd_state
from .run import SGDRun


# The layout of an SGD checkpoint (the state written whole); a checkpoint of
# an older layout is refused, naming this setting.
CHECKPOINT_LAYOUT = "sgd-state-2"

# Default optimizer: plain SGD with the learning rate held in the optimizer
# state (inject_hyperparams), so runs at different lr share one compilation.
_DEFAULT_OPTIMIZER = optax.inject_hyperparams(optax.sgd)(learning_rate=1.0)


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


def _problem_of(source, params, *, width, context, model) -> tuple[Problem, str]:
    """The problem SGD trains and the `source` setting: a problem as given,
    or the paper's model on a chain (sequences) or a text (windows)."""
    if isinstance(source, Problem):
        for name, value in dict(width=width, context=context, model=model).items():
            if value is not None:
                raise ValueError(
                    f"{name} is for a chain or a text source; a problem carries its "
                    f"own, got {name} = {value!r}"
                )
        if not source.samples:
            raise TypeError(
                f"source {type(source).__name__} defines no sample and sample_loss: "
                "gf.train_sgd needs both"
            )
        return source, "problem"
    if isinstance(source, TokenStream):
        chain, kind, text = source.chain, f"text:{source.source}", source
    elif isinstance(source, MarkovChain):
        chain, kind, text = source, "chain", None
    else:
        raise TypeError(
            "source must be a gradflow.MarkovChain, a gradflow.text.TokenStream "
            "(from gf.text.encode) or a gradflow.Problem, got "
            f"{type(source).__name__}"
        )
    context = 256 if context is None else check_integer("context", context, 1)
    if text is not None and len(text) < context + 2:
        raise ValueError(
            f"the corpus has {len(text)} tokens, too few for windows of context + 1 "
            f"= {context + 1} tokens (need at least {context + 2})"
        )
    problem = markov_problem(
        chain,
        width=16 if width is None else width,
        model=model,
        params=params,
        save_attention=False,
        context=context,
        text=text,
    )
    return problem, kind


def _check_num_samples(num_sequences, batch_size: int) -> int | None:
    if num_sequences is None:
        return None
    num_sequences = check_integer("num_sequences", num_sequences, 1)
    if num_sequences < batch_size:
        raise ValueError(
            f"num_sequences = {num_sequences} is smaller than batch_size = "
            f"{batch_size}; batches are drawn without replacement"
        )
    return num_sequences


class _Setup(eqx.Module):
    """Everything `train_sgd` checked and derived, before anything is compiled."""

    problem: Problem
    problem_dt: Problem
    params0: Any
    steps: np.ndarray
    settings: dict[str, Any]
    optimizer: optax.GradientTransformation
    opt_state: Any
    step_key: Any
    sample_key: Any
    ckpt: Checkpointer | None
    chunk: int
    start_time: float


def _prepare(source, params, **kw) -> _Setup:
    """Checks the arguments of `train_sgd` (one-line errors naming the
    argument), opens the checkpoint (refusing one of another call), and draws
    the keys."""
    start_time = time.perf_counter()
    problem, kind = _problem_of(
        source, params, width=kw["width"], context=kw["context"], model=kw["model"]
    )
    jdtype = check_dtype(kw["dtype"])
    batch_size = check_integer("batch_size", kw["batch_size"], 1)
    lr = check_positive_finite("lr", kw["lr"])
    t1 = check_positive_finite("t1", kw["t1"])
    seed = check_seed(kw["seed"])
    num_sequences = _check_num_samples(kw["num_sequences"], batch_size)
    optimizer = kw["optimizer"]
    if optimizer is not None and not isinstance(
        optimizer, optax.GradientTransformation
    ):
        raise TypeError(
            "optimizer must be an optax.GradientTransformation, got "
            f"{type(optimizer).__name__}"
        )
    steps = sgd_save_steps(kw["ts"], lr, t1)
    checkpoint = check_path(kw["checkpoint"])
    checkpoint_every = check_every(kw["checkpoint_every"])
    chunk = check_chunk_steps(kw["chunk_steps"]) or CHUNK
    problem_dt = problem.astype(jdtype)
    params0, init_scale = initial_point(
        problem_dt, init_scale=kw["init_scale"], params=params, seed=seed, dtype=jdtype
    )
    settings = {
        "source": kind,
        **problem.settings(params0),
        **problem.sample_settings(),
        "init_scale": None if init_scale is None else float(init_scale),
        "seed": int(seed),
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
            dict(settings, checkpoint_layout=CHECKPOINT_LAYOUT),
            optimizer=optimizer,
            opt=opt,
            params0=params0,
            problem=problem,
            steps=steps,
        )
        ckpt = Checkpointer(
            checkpoint, "train_sgd", fp_settings, fp_inputs, checkpoint_every
        )
    data_key = jax.random.fold_in(jax.random.key(int(seed)), 0x5EED)
    sample_key, step_key = jax.random.split(data_key)
    opt_state = opt.init(params0)  # pyright: ignore[reportArgumentType]
    if optimizer is None:
        opt_state.hyperparams["learning_rate"] = jnp.asarray(lr, jdtype)  # pyright: ignore[reportAttributeAccessIssue]
    return _Setup(
        problem=problem,
        problem_dt=problem_dt,
        params0=params0,
        steps=steps,
        settings=settings,
        optimizer=opt,
        opt_state=opt_state,
        step_key=step_key,
        sample_key=sample_key,
        ckpt=ckpt,
        chunk=chunk,
        start_time=start_time,
    )


@eqx.filter_jit
def _draw(problem, key, n: int):
    return problem.sample(key, n)


@eqx.filter_jit
def _first_batch_loss(source, params, key, batch_size: int):
    return source.sample_loss(params, source.sample(key, batch_size))


@eqx.filter_jit
def _population(problem, params):
    def one(p):
        loss, grad = jax.value_and_grad(problem.loss)(p)
        grad_sq = sum(jnp.sum(g**2) for g in jax.tree.leaves(grad))
        return loss, jnp.sqrt(grad_sq)

    return jax.vmap(one)(params)


_OBS_CHUNK = 64


def population_observables(problem: Problem, params) -> tuple[np.ndarray, np.ndarray]:
    r"""Population loss and $|\nabla L|$ of stacked parameters, in chunks of a
    fixed size (the last one padded) so that runs with different numbers of
    saves share one compilation."""
    T = jax.tree.leaves(params)[0].shape[0]
    losses, norms = [], []
    for i in range(0, T, _OBS_CHUNK):
        n = min(_OBS_CHUNK, T - i)

        def pad(x, i=i, n=n):
            x = x[i : i + n]
            return jnp.concatenate([x, jnp.repeat(x[-1:], _OBS_CHUNK - n, axis=0)])

        loss, norm = _population(problem, jax.tree.map(pad, params))
        losses.append(np.asarray(loss)[:n])
        norms.append(np.asarray(norm)[:n])
    return np.concatenate(losses), np.concatenate(norms)


def _source(setup: _Setup, num_sequences):
    """Fresh examples of the problem, or with `num_sequences` a fixed dataset
    of that many drawn once with the sample key."""
    if num_sequences is None:
        return setup.problem_dt
    data = _draw(setup.problem_dt, setup.sample_key, num_sequences)
    return FixedData(setup.problem_dt, data)


def _failure(state: SGDState, lr: float) -> str:
    done, count = int(state.step), int(state.count)
    return (
        "the mini-batch loss or the parameters became non-finite between steps "
        f"{done - count} and {done} (t <= {done * lr:.6g}); lower lr (now {lr}) or "
        "init_scale"
    )


def _result(
    setup: _Setup, state: SGDState, *, interrupted_: bool, resumed, steps_run
) -> SGDRun:
    """The run: the saved iterates scored with the population loss. An
    interrupted run keeps what was computed since the last save: the iterate
    at the interruption (off the save grid) and the mean loss up to it."""
    s = setup.settings
    n = int(state.num_saved)
    steps = setup.steps[:n]
    saved = jax.tree.map(lambda x: np.asarray(x)[:n], state.saved)
    train = np.asarray(state.train)[:n]
    total, count = float(state.total), int(state.count)
    if interrupted_ and count > 0 and math.isfinite(total):
        if all(np.isfinite(np.asarray(x)).all() for x in jax.tree.leaves(state.params)):
            saved = jax.tree.map(
                lambda a, b: np.concatenate([a, np.asarray(b)[None]]),
                saved,
                state.params,
            )
            train = np.append(train, total / count)
            steps = np.append(steps, int(state.step))
    pop_loss, grad_norm = population_observables(setup.problem_dt, saved)
    ok = not bool(state.failed) and not interrupted_
    message = _failure(state, s["lr"]) if bool(state.failed) else ""
    wall = time.perf_counter() - setup.start_time
    ckpt = setup.ckpt
    stats = {
        "num_steps": int(state.step),
        "steps_run": int(steps_run),
        "resumed_from_step": resumed,
        "wall_time": wall,
        "steps_per_second": steps_run / wall if wall > 0 else float("nan"),
        "checkpoint": None if ckpt is None else str(ckpt.path),
        "checkpoint_writes": 0 if ckpt is None else ckpt.num_writes,
    }
    # (pyright reads the base's abstract `loss` as a field; it is a property)
    run = SGDRun(  # pyright: ignore[reportCallIssue]
        ts=steps.astype(np.float64) * s["lr"],
        steps=steps,
        population_loss=np.asarray(pop_loss, dtype=np.float64),
        grad_norm=np.asarray(grad_norm, dtype=np.float64),
        train_loss=np.asarray(train, dtype=np.float64),
        params=saved,
        problem=setup.problem,
        settings=s,
        stats=stats,
        ok=ok,
        message=message,
    )
    if len(run) < 3:
        return run
    analysis = setup.problem.analyse(
        run.ts,
        run.params,
        run.population_loss,
        thresholds=StageThresholds(),
        loss_scale=_scale(setup.problem_dt, run.population_loss[0]),
    )
    extras = {
        k: v for k, v in analysis.extras.items() if k not in ("loss", "grad_norm")
    }
    return eqx.tree_at(
        lambda r: (r.stages, r.events, r.extras),
        run,
        (tuple(analysis.stages), tuple(analysis.events), extras),
    )


def _scale(problem: Problem, first_loss: float) -> float:
    scale = problem.loss_scale()
    if scale is None:
        return abs(first_loss) if first_loss != 0 else 1.0
    return float(scale)


def _train(setup: _Setup, progress: bool) -> SGDRun:
    """Runs (or resumes, or returns a finished checkpoint's) training."""
    s, ckpt = setup.settings, setup.ckpt
    resumed, source = None, None
    if ckpt is not None and ckpt.state is not None:
        like = init_sgd_state(setup.params0, setup.opt_state, setup.steps.size, 0.0)
        state = jax.tree.map(jnp.asarray, ckpt.restore("state", like))
        resumed = int(state.step)
    else:
        source = _source(setup, s["num_sequences"])
        first = _first_batch_loss(
            source, setup.params0, setup.step_key, s["batch_size"]
        )
        state = init_sgd_state(setup.params0, setup.opt_state, setup.steps.size, first)
    if source is None:
        # the data are drawn only for a run that has steps to take (a
        # finished checkpoint returns its result at once)
        running = int(state.num_saved) < setup.steps.size and not bool(state.failed)
        source = _source(setup, s["num_sequences"]) if running else setup.problem_dt
    job = SGDJob(
        setup.steps,
        setup.step_key,
        source=source,
        optimizer=setup.optimizer,
        batch_size=s["batch_size"],
        chunk=setup.chunk,
    )
    start = int(state.step)
    driven = drive(
        job,
        state,
        total=float(setup.steps[-1]),
        start=float(start),
        description="gradflow sgd",
        progress=progress,
        checkpoint=ckpt,
    )
    state = driven.state
    run = _result(
        setup,
        state,
        interrupted_=driven.interrupted,
        resumed=resumed,
        steps_run=int(state.step) - start,
    )
    if driven.interrupted:
        what = (
            f"gradflow.train_sgd: interrupted at step {int(state.step)} of "
            f"{int(setup.steps[-1])} (t = {int(state.step) * s['lr']:.6g})"
        )
        message = interrupted_message(what, ckpt)
        run = eqx.tree_at(lambda r: r.message, run, message)
        raise interrupted(message, run, ckpt)
    return run


def train_sgd(
    source: MarkovChain | TokenStream | Problem,
    params: Any = None,
    *,
    init_scale: float | None = None,
    width: int | None = None,
    seed: int = 0,
    context: int | None = None,
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
    chunk_steps: int | None = None,
) -> SGDRun:
    r"""Trains a model with Optax on finite samples and logs it on the flow's
    time axis.

    Step $k$ sits at $t = k \cdot \text{lr}$, so a run and [`gradflow.flow`][]
    (or [`gradflow.integrate`][]) from the same `params` share one time axis;
    each saved iterate is scored with the problem's population loss, so they
    share one metric.

    **Arguments:**

    - `source`: a [`gradflow.MarkovChain`][] (the paper's finite-context model
      of SPEC section 2 on sequences of `context + 1` tokens, $x_1 \sim \pi$,
      then $P$), a [`gradflow.text.TokenStream`][] (windows of real text; the
      population loss is that of its bigram chain), or any
      [`gradflow.Problem`][] that defines `sample` and `sample_loss` (its own
      examples and the loss of a batch).
    - `params`: parameters to start from; or `init_scale` (and for a chain or
      a text `width`, `model`) for the problem's random start. Give exactly
      one.
    - `seed`: seeds the initialisation (the same start as a flow's) and the
      data.
    - `context`: $s$, tokens seen by the attention (chains and texts, default
      256); `batch_size`: examples per step; `lr`: learning rate (and the time
      unit); `t1`: final time.
    - `num_sequences`: `None` draws fresh examples every step (online SGD); an
      integer $N$ fixes a dataset of $N$ examples (sequences, windows) reused
      by every step, each batch drawn without replacement ($N \ge$
      `batch_size`).
    - `optimizer`: any Optax transformation; default `optax.sgd(lr)`. Time is
      still `lr * step`.
    - `ts`: save times in `[0, t1]`, rounded to whole steps; default the flow's
      log grid.
    - `progress`: a progress bar (shown after 2 s); `dtype`: `"float64"` or
      `"float32"`.
    - `checkpoint`: a file path (`.npz`) or `None`. The state of the run
      (step, parameters, optimizer state, saves so far) is written there
      atomically every `checkpoint_every` seconds of wall time, when the run
      ends (finished or failed) and when it is interrupted. If the file exists,
      the run resumes from it and ends at the same result, bit for bit, as an
      uninterrupted run; a finished checkpoint returns its result without
      taking a step. A checkpoint written by a different call (other
      settings, problem, text, start, save times or optimizer) is refused.
    - `checkpoint_every`: seconds between periodic checkpoint writes (default
      120; `0` writes after every chunk of steps).
    - `model`: a [`gradflow.Model`][] for the random start of the paper's model
      (default: the minimal one); given `params` carry their model, and a
      `model` given with them must match.
    - `chunk_steps`: steps per compiled chunk (how often the host looks in);
      results do not depend on it.

    **Returns:** a [`gradflow.SGDRun`][] with the stages of its saved iterates
    (the problem's `analyse`). If the loss becomes non-finite the run stops:
    `ok` is `False` and `message` says where and what to change.
    `stats["resumed_from_step"]` is the step a checkpoint resumed from (`None`
    for a fresh run) and `stats["steps_run"]` the steps taken by this call.

    **Raises:**

    - `ValueError`/`TypeError` naming the argument and its value (`lr <= 0`,
      `context < 1`, `batch_size < 1`, a corpus shorter than `context + 1`,
      `checkpoint` a folder, ...), before anything is compiled;
    - `ValueError` naming the file if `checkpoint` is unreadable, was written
      by another call (listing each differing setting with both values, or the
      differing input) or by a flow, also before compiling;
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
        chunk_steps=chunk_steps,
    )
    return _train(setup, progress)


__all__ = ["population_observables", "sgd_save_steps", "train_sgd"]
