r"""[`gradflow.train_sgd`][]: finite-sample SGD of any
[`gradflow.SampledProblem`][], logged on the flow's time axis
$t = \text{lr} \times \text{step}$ and measured with the flow's metric: the
population loss of every saved iterate (`docs/sgd.md`).

A problem trains on its own examples (`sample`, `sample_loss`); other
objects that describe a problem are turned into one by
[`gradflow.as_problem`][] (the paper's chains and texts). The loop is
`loop.py`'s, driven by the engine's one driver.
"""

import math
import time
from typing import Any, cast

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax

from .._core.validate import (
    check_dtype,
    check_positive_finite,
    check_save_times,
    check_seed,
)
from .._flow.setup import initial_point
from .._flow.solving import default_save_times
from .._loop.checkpoint import Checkpointer, problem_inputs
from .._loop.driver import drive, interrupted, interrupted_message
from .._options import SGD, Run, SaveAt, as_run, as_saveat, as_sgd
from .._problem.adapt import as_problem
from .._problem.base import Problem, SampledProblem
from .._problem.files import configuration, fingerprint as problem_fingerprint
from .._problem.functions import (
    analyse,
    astype,
    check_problem,
    check_sampled,
    problem_loss_scale,
)
from .._result.codes import RESULTS
from .checkpoint import fingerprint, optimizer_repr
from .loop import CHUNK, FixedData, Population, SGDJob, SGDState, init_sgd_state
from .run import SGDRun, SGDSettings, SGDStats


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


class _Setup(eqx.Module):
    """Everything `train_sgd` checked and derived, before anything is compiled."""

    problem: Problem
    problem_dt: Problem
    params0: Any
    steps: np.ndarray
    settings: SGDSettings
    sgd: SGD
    saveat: SaveAt
    run: Run
    optimizer: optax.GradientTransformation
    opt_state: Any
    step_key: Any
    sample_key: Any
    ckpt: Checkpointer | None
    chunk: int
    start_time: float


def _prepare(problem, params, *, init_scale, seed, t1, sgd, saveat, run, options):
    """Checks the arguments of `train_sgd` (one-line errors naming the
    argument), opens the checkpoint (refusing one of another call), and draws
    the keys."""
    start_time = time.perf_counter()
    sgd, run = as_sgd(sgd), as_run(run)
    saveat = as_saveat(saveat, entry="gradflow.train_sgd")
    problem = as_problem(problem, params=params, **options)
    # full-batch gradient descent needs only the population loss
    problem = (
        check_problem(problem) if sgd.batch_size is None else check_sampled(problem)
    )
    jdtype = check_dtype(sgd.dtype)
    t1 = check_positive_finite("t1", t1)
    seed = check_seed(seed)
    steps = sgd_save_steps(saveat.ts, sgd.lr, t1)
    problem_dt = astype(problem, jdtype)
    params0, init_scale = initial_point(
        problem_dt, init_scale=init_scale, params=params, seed=seed, dtype=jdtype
    )
    optimizer = sgd.optimizer
    settings = SGDSettings(
        init_scale=None if init_scale is None else float(init_scale),
        seed=int(seed),
        batch_size=sgd.batch_size,
        lr=sgd.lr,
        t1=t1,
        num_sequences=sgd.num_sequences,
        optimizer="sgd" if optimizer is None else optimizer_repr(optimizer),
        dtype=np.dtype(jdtype).name,
        num_saves=int(steps.size),
    )
    opt = _DEFAULT_OPTIMIZER if optimizer is None else optimizer
    ckpt = None
    if run.checkpoint is not None:
        # Reads an existing file: a checkpoint of another call is refused here,
        # before anything is compiled.
        fp_settings, fp_inputs = fingerprint(
            dict(
                settings.to_dict(),
                **configuration(problem),
                checkpoint_layout=CHECKPOINT_LAYOUT,
            ),
            optimizer=optimizer,
            opt=opt,
            params0=params0,
            problem_arrays=problem_inputs(problem_fingerprint(problem)),
            steps=steps,
        )
        ckpt = Checkpointer(
            run.checkpoint, "train_sgd", fp_settings, fp_inputs, run.checkpoint_every
        )
    data_key = jax.random.fold_in(jax.random.key(int(seed)), 0x5EED)
    sample_key, step_key = jax.random.split(data_key)
    opt_state = opt.init(params0)  # pyright: ignore[reportArgumentType]
    if optimizer is None:
        opt_state.hyperparams["learning_rate"] = jnp.asarray(sgd.lr, jdtype)  # pyright: ignore[reportAttributeAccessIssue]
    return _Setup(
        problem=problem,
        problem_dt=problem_dt,
        params0=params0,
        steps=steps,
        settings=settings,
        sgd=sgd,
        saveat=saveat,
        run=run,
        optimizer=opt,
        opt_state=opt_state,
        step_key=step_key,
        sample_key=sample_key,
        ckpt=ckpt,
        chunk=run.chunk_steps or CHUNK,
        start_time=start_time,
    )


@eqx.filter_jit
def _draw(problem, key, n: int):
    return problem.sample(key, n)


@eqx.filter_jit
def _first_batch_loss(source, params, key, batch_size: int | None):
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
    of that many drawn once with the sample key, or (`batch_size=None`) the
    population loss itself."""
    if setup.sgd.batch_size is None:
        return Population(setup.problem_dt)
    if num_sequences is None:
        return setup.problem_dt
    sampled = cast(SampledProblem, setup.problem_dt)  # (checked by _prepare)
    data = _draw(sampled, setup.sample_key, num_sequences)
    return FixedData(sampled, data)


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
    code, detail = RESULTS.successful, ""
    if bool(state.failed):
        code, detail = RESULTS.nonfinite, _failure(state, s.lr)
    elif interrupted_:
        code = RESULTS.interrupted
    wall = time.perf_counter() - setup.start_time
    ckpt = setup.ckpt
    stats = SGDStats(
        num_steps=int(state.step),
        steps_run=int(steps_run),
        resumed_from_step=resumed,
        wall_time=wall,
        steps_per_second=steps_run / wall if wall > 0 else float("nan"),
        checkpoint=None if ckpt is None else str(ckpt.path),
        checkpoint_writes=0 if ckpt is None else ckpt.num_writes,
    )
    # (pyright reads the base's abstract `loss` as a field; it is a property)
    run = SGDRun(  # pyright: ignore[reportCallIssue]
        ts=steps.astype(np.float64) * s.lr,
        steps=steps,
        population_loss=np.asarray(pop_loss, dtype=np.float64),
        grad_norm=np.asarray(grad_norm, dtype=np.float64),
        train_loss=np.asarray(train, dtype=np.float64),
        params=saved,
        problem=setup.problem,
        settings=s,
        stats=stats,
        result=code,
        detail=detail,
    )
    if len(run) < 3 or not setup.saveat.stages:
        return run
    analysis = analyse(
        setup.problem,
        run.ts,
        run.params,
        run.population_loss,
        thresholds=setup.saveat.thresholds,
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
    scale = problem_loss_scale(problem)
    if scale is None:
        return abs(first_loss) if first_loss != 0 else 1.0
    return float(scale)


def _train(setup: _Setup) -> SGDRun:
    """Runs (or resumes, or returns a finished checkpoint's) training."""
    s, ckpt = setup.settings, setup.ckpt
    resumed, source = None, None
    if ckpt is not None and ckpt.state is not None:
        like = init_sgd_state(setup.params0, setup.opt_state, setup.steps.size, 0.0)
        state = jax.tree.map(jnp.asarray, ckpt.restore("state", like))
        resumed = int(state.step)
    else:
        source = _source(setup, s.num_sequences)
        first = _first_batch_loss(source, setup.params0, setup.step_key, s.batch_size)
        state = init_sgd_state(setup.params0, setup.opt_state, setup.steps.size, first)
    if source is None:
        # the data are drawn only for a run that has steps to take (a
        # finished checkpoint returns its result at once)
        running = int(state.num_saved) < setup.steps.size and not bool(state.failed)
        source = _source(setup, s.num_sequences) if running else setup.problem_dt
    job = SGDJob(
        setup.steps,
        setup.step_key,
        source=source,
        optimizer=setup.optimizer,
        batch_size=s.batch_size,
        chunk=setup.chunk,
    )
    start = int(state.step)
    driven = drive(
        job,
        state,
        total=float(setup.steps[-1]),
        start=float(start),
        description="gradflow sgd",
        progress=setup.run.progress,
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
            f"{int(setup.steps[-1])} (t = {int(state.step) * s.lr:.6g})"
        )
        message = interrupted_message(what, ckpt)
        run = eqx.tree_at(lambda r: r.detail, run, message)
        raise interrupted(message, run, ckpt)
    return run


def train_sgd(
    problem: Any,
    params: Any = None,
    *,
    init_scale: float | None = None,
    seed: int = 0,
    t1: float = 300.0,
    sgd: SGD | None = None,
    saveat: SaveAt | None = None,
    run: Run | None = None,
    **problem_options,
) -> SGDRun:
    r"""Trains a model with Optax on finite samples and logs it on the flow's
    time axis.

    Step $k$ sits at $t = k \cdot \text{lr}$, so a run and [`gradflow.flow`][]
    (or [`gradflow.integrate`][]) from the same `params` share one time axis;
    each saved iterate is scored with the problem's population loss, so they
    share one metric.

    **Arguments:**

    - `problem`: a [`gradflow.SampledProblem`][] (it draws its own examples
      and gives the loss of a batch; with `SGD(batch_size=None)`, full-batch
      gradient descent on the population loss, any [`gradflow.Problem`][]); or anything [`gradflow.as_problem`][]
      turns into one with `problem_options`: a [`gradflow.MarkovChain`][]
      (the paper's finite-context model on sequences of `context + 1`
      tokens, $x_1 \sim \pi$, then $P$) or a [`gradflow.text.TokenStream`][]
      (windows of real text; the population loss is that of its bigram
      chain), with `width`, `model` and `context` (default 256).
    - `params`: parameters to start from; or `init_scale` for the problem's
      random start. Give exactly one.
    - `seed`: seeds the initialisation (the same start as a flow's) and the
      data.
    - `t1`: final time.
    - `sgd`: a [`gradflow.SGD`][]: learning rate, batch size, optimizer,
      dataset size, dtype.
    - `saveat`: a [`gradflow.SaveAt`][]: save times in `[0, t1]` (rounded to
      whole steps; default the flow's log grid), stages of the saved iterates
      and their thresholds.
    - `run`: a [`gradflow.Run`][]: the progress bar, a checkpoint (the state
      of the run is written there atomically every `checkpoint_every`
      seconds, when the run ends and when it is interrupted; an existing file
      is resumed from, to the same result bit for bit; a checkpoint of a
      different call is refused), the chunk size.

    **Returns:** a [`gradflow.SGDRun`][] with the stages of its saved iterates.
    If the loss becomes non-finite the run stops: its `result` is
    `RESULTS.nonfinite` and `message` says where and what to change.
    `stats.resumed_from_step` is the step a checkpoint resumed from (`None`
    for a fresh run) and `stats.steps_run` the steps taken by this call.

    **Raises:**

    - `ValueError`/`TypeError` naming the argument and its value (a problem
      that does not sample, `t1` shorter than one step, a corpus shorter than
      `context + 1`, ...), before anything is compiled;
    - `ValueError` naming the file if the checkpoint is unreadable, was written
      by another call (listing each differing setting with both values, or the
      differing input) or by a flow, also before compiling;
    - [`gradflow.Interrupted`][] (a `KeyboardInterrupt`) on Ctrl-C: the run
      stops after the current chunk of steps, writes its checkpoint and
      carries the partial run in `.result`. A second Ctrl-C aborts at once
      with a plain `KeyboardInterrupt`.

    **Example:**

    ```python
    chain = gf.chains.sticky(6, 0.5, 0.5, 0.05)
    p0 = gf.init_params(chain.d, width=8, init_scale=1e-3)
    run = gf.train_sgd(chain, p0, t1=300, sgd=gf.SGD(lr=0.2, batch_size=512))
    traj = gf.integrate(chain, params=p0, t1=300, saveat=gf.SaveAt(ts=run.ts))
    gf.compare(traj, run).loss_gap
    ```
    """
    setup = _prepare(
        problem, params, init_scale=init_scale, seed=seed, t1=t1, sgd=sgd,
        saveat=saveat, run=run, options=problem_options,
    )  # fmt: skip
    return _train(setup)


__all__ = ["population_observables", "sgd_save_steps", "train_sgd"]
