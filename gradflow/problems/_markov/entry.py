r"""The paper's model's entry points, which take a Markov chain:
[`gradflow.integrate`][] (a thin call of [`gradflow.flow`][] on
[`gradflow.problems.MarkovAttention`][]) and [`gradflow.sweep`][] (which takes
chains as well as problems)."""

import os
from collections.abc import Callable, Sequence
from typing import Any

import diffrax as dfx
import numpy as np
from jaxtyping import ArrayLike

from ..._engine.flow import flow
from ..._engine.problem import Problem
from ..._engine.result import Trajectory
from ..._engine.solving import DEFAULT_CHECKPOINT_EVERY, DEFAULT_MAX_STEPS, DEFAULT_T1
from ..._engine.stages import StageThresholds
from ..._engine.sweep import sweep_problems
from ..._engine.sweep_result import Sweep
from .chain import MarkovChain
from .model import AnyParams, Params, param_arrays
from .problem import markov_problem
from .variants import Model, VariantParams


def integrate(
    chain: MarkovChain,
    init_scale: float | None = None,
    *,
    params: AnyParams | None = None,
    width: int = 16,
    t1: float = DEFAULT_T1,
    ts: ArrayLike | Sequence[float] | None = None,
    seed: int = 0,
    solver: str | dfx.AbstractSolver | None = None,
    rtol: float | None = None,
    atol: float | None = None,
    max_steps: int = DEFAULT_MAX_STEPS,
    progress: bool = True,
    dtype: str = "float64",
    stages: bool = True,
    events: Sequence[Any] = (),
    callbacks: Sequence[Callable] = (),
    thresholds: StageThresholds | None = None,
    save_attention: bool | None = None,
    checkpoint: str | os.PathLike | None = None,
    checkpoint_every: float = DEFAULT_CHECKPOINT_EVERY,
    model: Any = None,
    chunk_steps: int | None = None,
) -> Trajectory:
    r"""Solves the population gradient flow $\dot\theta = -\nabla L(\theta)$.

    `gf.integrate(chain, init_scale, width=..., model=..., ...)` is exactly
    `gf.flow(gf.problems.MarkovAttention(chain, width=..., model=...),
    init_scale, ...)`: the same steps and numbers, bit for bit.

    Starts either from a random point (`init_scale`: every entry i.i.d.
    $\mathcal{N}(0, \mathrm{init\_scale}^2)$, shapes set by `chain.d` and
    `width`) or from given `params`, and integrates to `t1` with an adaptive
    Diffrax solver. Time is gradient-descent time: step $k$ of GD at learning
    rate $\eta$ sits at $t = k\eta$.

    Loss, $|\nabla L|$ and parameters are saved at every save time. With
    `stages=True` (the default) the saddle escapes and entries are located
    *during* the solve by bisection on the solver's dense output, without
    stopping it, and after the solve the diagnostics of
    [`gradflow.diagnostics`][] are evaluated at every saved point (batched; in
    `traj.extras`) and the stages found on them (`traj.stages`, see
    `docs/stages.md`). The steps taken do not depend on `stages`, `events` or
    `callbacks`: a bare and an observed solve of the same call are the same
    solve.

    Importing gradflow enables JAX's float64 mode (`jax_enable_x64`); the flow
    is solved in float64 unless `dtype="float32"`.

    **Arguments:**

    - `chain`: a [`gradflow.MarkovChain`][].
    - `init_scale`: standard deviation of the random initialisation; give
      exactly one of `init_scale` and `params`.
    - `params`: a [`gradflow.Params`][] (or [`gradflow.VariantParams`][]) to
      start from.
    - `width`: the embedding width $m$ (ignored when `params` is given).
    - `t1`: final time.
    - `ts`: increasing save times in `[0, t1]`; by default
      [`gradflow.default_save_times`][] (`0` and 797 log-spaced times).
    - `seed`: seed of the random initialisation.
    - `solver`: a name in `gradflow.SOLVERS` or a Diffrax solver instance;
      by default `gradflow.DEFAULT_SOLVER` (see `docs/performance.md`).
    - `rtol`, `atol`: tolerances of the PID step-size controller; by default
      [`gradflow.default_tolerances`][], which ties `atol` to the RMS size of
      the initial parameters (saddle escapes grow from components that small).
    - `max_steps`: the most solver steps before giving up (partial results are
      returned, not lost). Checked between chunks of at most
      `min(1000, max_steps)` steps, so a run may take up to 999 steps more.
    - `progress`: show a progress bar when the solve takes longer than 2 s.
    - `dtype`: `"float64"` (default) or `"float32"`.
    - `stages`: locate saddles and stages while integrating (default `True`).
    - `events`: user [`gradflow.Event`][]s, located during the solve and
      recorded in `traj.events` like the saddle events.
    - `callbacks`: Python functions `fn(event, t, params)` called on the host
      for every event located during the solve, in time order (between chunks
      of steps: the solve does not wait for them), with the
      [`gradflow.EventRecord`][] and the parameters at the event.
    - `thresholds`: a [`gradflow.StageThresholds`][] (default thresholds when
      `None`); `save_attention`: save the `(d, d)` attention matrix at every
      save time (default: when `d <= 64`).
    - `checkpoint`: a file path. The whole state of the solve (parameters,
      solver and step-size-controller state, proposed next step, everything
      saved so far, the stage detector) is written there atomically every
      `checkpoint_every` seconds of wall time, after each event and at the
      end. If the file exists, the call resumes from it and ends at the same
      result as an uninterrupted run (bit for bit on one machine); a
      checkpoint made by a different call is refused, naming what differs.
      A finished checkpoint returns its result at once. Only `max_steps` and
      `progress` may change between the runs (raise `max_steps` to continue a
      run that ran out of steps). See `docs/errors.md`.
    - `checkpoint_every`: seconds between periodic checkpoint writes.
    - `chunk_steps`: steps per compiled chunk (how often the host looks in:
      progress, Ctrl-C, checkpoints); results do not depend on it.
    - `model`: a [`gradflow.Model`][] for the random start (default: the
      paper's model). Given `params` carry their model (a
      [`gradflow.VariantParams`][]); a `model` given with them must match.

    **Returns:** a [`gradflow.Trajectory`][]. If the solver stops early,
    `traj.ok` is `False`, `traj.message` says why and what to change, and the
    trajectory holds everything up to the last time reached.

    **Raises:** `ValueError`/`TypeError` naming the argument and its value for
    bad input (or a checkpoint of another call), before anything is compiled.
    [`gradflow.Interrupted`][] (a `KeyboardInterrupt`) on Ctrl-C: the solve
    stops after the current chunk of steps, writes the checkpoint, and the
    exception's `result` holds the trajectory so far.

    **Example:**

    ```python
    import gradflow as gf
    traj = gf.integrate(gf.chains.sticky(6, 0.5, 0.5, 0.05), 1e-3, width=8)
    traj.loss[-1], traj.chain.conditional_entropy
    for s in traj.stages:
        print(s.name, s.cycle, s.t_start, s.t_end, s.tokens)
    ```
    """
    problem = markov_problem(
        chain, width=width, model=model, params=params, save_attention=save_attention
    )
    return flow(
        problem,
        init_scale,
        params=params,
        seed=seed,
        t1=t1,
        ts=ts,
        solver=solver,
        rtol=rtol,
        atol=atol,
        stages=stages,
        events=events,
        callbacks=callbacks,
        checkpoint=checkpoint,
        progress=progress,
        max_steps=max_steps,
        dtype=dtype,
        thresholds=thresholds,
        checkpoint_every=checkpoint_every,
        chunk_steps=chunk_steps,
    )


def integrate_stages(
    chain: MarkovChain, init_scale: float | None = None, **kwargs
) -> Trajectory:
    """[`gradflow.integrate`][] with `stages=True` (its default): kept as a name
    for scripts that want to say so explicitly. Takes the same arguments."""
    if kwargs.get("stages") is False:
        raise ValueError(
            "integrate_stages always locates stages; use gf.integrate(..., stages=False)"
        )
    kwargs.pop("stages", None)
    return integrate(chain, init_scale, stages=True, **kwargs)


def _check_chains(chains) -> tuple[MarkovChain, ...]:
    if isinstance(chains, MarkovChain):
        return (chains,)
    if isinstance(chains, (str, bytes)) or not isinstance(chains, Sequence):
        raise TypeError(
            "chains must be a gradflow.MarkovChain, a gradflow.Problem or a sequence "
            f"of them, got {type(chains).__name__}"
        )
    chains = tuple(chains)
    if not chains:
        raise ValueError("chains must hold at least one chain, got an empty sequence")
    for i, c in enumerate(chains):
        if not isinstance(c, MarkovChain):
            raise TypeError(
                f"chains[{i}] must be a gradflow.MarkovChain, got {type(c).__name__}"
            )
        if c.d != chains[0].d:
            raise ValueError(
                f"the chains of a sweep must share d: chains[{i}] has d = {c.d}, "
                f"chains[0] has d = {chains[0].d} (sweep each d separately)"
            )
    return chains


def _check_param_batch(params, d: int) -> None:
    """A batch of starting points of the paper's model (leading member axis)."""
    if not isinstance(params, (Params, VariantParams)):
        raise TypeError(
            "params must be a gradflow.Params or gradflow.VariantParams with a "
            f"leading member axis, got {type(params).__name__}"
        )
    shape = np.shape(param_arrays(params)["W0"])
    if len(shape) != 3:
        raise ValueError(
            f"params.W0 must be 3-dimensional (members, ...), got shape {shape}; "
            "give one starting point to gf.integrate, or stack starting points"
        )
    if shape[2] != d:
        raise ValueError(
            f"params are for d = {shape[2]} tokens but the chains have d = {d}"
        )


def _is_problems(chains) -> bool:
    return isinstance(chains, Problem) or (
        isinstance(chains, Sequence)
        and not isinstance(chains, (str, bytes))
        and len(chains) > 0
        and all(isinstance(c, Problem) for c in chains)
    )


def problems_of(chains, *, width, model, params, save_attention) -> tuple[Any, str]:
    """`(problems, axis)` of a sweep: given problems as they are, or the
    paper's model on each chain; `axis` names them in error messages."""
    if _is_problems(chains):
        given = dict(width=width, model=model, save_attention=save_attention)
        for name, value in given.items():
            if value is not None:
                raise ValueError(
                    f"{name} is for sweeps of chains; a problem carries its own, got "
                    f"{name} = {value!r}"
                )
        return chains, "problems"
    chains = _check_chains(chains)
    if params is not None:
        _check_param_batch(params, chains[0].d)
    problems = [
        markov_problem(
            c,
            width=16 if width is None else width,
            model=model,
            params=params,
            save_attention=save_attention,
        )
        for c in chains
    ]
    return problems, "chains"


def sweep(
    chains: MarkovChain | Sequence[MarkovChain] | Problem | Sequence[Problem],
    *,
    init_scale: float | Sequence[float] | None = None,
    params: Any = None,
    seeds: int | Sequence[int] = 0,
    width: int | None = None,
    t1: float = DEFAULT_T1,
    ts=None,
    devices=None,
    labels: dict[str, Sequence] | None = None,
    solver=None,
    rtol: float | None = None,
    atol: float | None = None,
    max_steps: int = DEFAULT_MAX_STEPS,
    progress: bool = True,
    dtype: str = "float64",
    stages: bool = True,
    events: Sequence[Any] = (),
    thresholds: Any = None,
    save_attention: bool | None = None,
    checkpoint: str | os.PathLike | None = None,
    checkpoint_every: float = DEFAULT_CHECKPOINT_EVERY,
    model: Model | None = None,
    batch_size: int | None = None,
    chunk_steps: int | None = None,
) -> Sweep:
    r"""Integrates many gradient flows in one call (SPEC section 10).

    `chains` is a chain or a sequence of chains of equal `d` (each member then
    solves the paper's model, [`gradflow.problems.MarkovAttention`][], on
    its chain with `width` and `model`), or a problem or a sequence of
    problems of one class with equal parameter shapes (SPEC section 11).

    The members are the Cartesian product of `chains`, `init_scale` and
    `seeds` in C order: member `(c * n_init + k) * n_seeds + s` is chain `c`,
    initial scale `k`, seed `s` (`sw.members[i]` says which). Alternatively
    `params` gives a batch of starting points (a [`gradflow.Params`][] with a
    leading member axis): then member `c * n_params + k` starts chain `c` from
    point `k`. Each member is the trajectory [`gradflow.integrate`][] gives
    alone with the same arguments (same initial point, same default
    tolerances); `sw[i]` is that [`gradflow.Trajectory`][].

    All members are solved together: one compiled solve, sharded over
    `devices` (the member axis is padded to a multiple of the device count by
    repeating member 0; the padding is dropped); on each device its members
    go `batch_size` at a time through one `vmap`ped loop (each has its own
    step sizes, events and failure). A member that fails (out of
    steps, non-finite) keeps its partial trajectory and message and does not
    stop the others. Members share `d`, `width`, the solver, `t1` and the save
    times (see `docs/sweeps.md`).

    **Arguments:**

    - `chains`: a [`gradflow.MarkovChain`][] or a sequence of chains of equal
      `d`; or a [`gradflow.Problem`][] or a sequence of problems of one class
      and equal parameter shapes (then `width`, `model` and `save_attention`
      are the problems' own and are not given).
    - `init_scale`: a number or a sequence (give this or `params`).
    - `params`: starting points with a leading member axis (instead of
      `init_scale` and `seeds`).
    - `seeds`: an int (one seed) or a sequence of seeds, e.g. `range(8)`.
    - `width` (default 16), `t1`, `ts`, `solver`, `rtol`, `atol`, `max_steps`, `dtype`,
      `stages`, `events`, `thresholds`, `save_attention`, `model`: as for
      [`gradflow.integrate`][], for every member (`model`: a
      [`gradflow.Model`][], one for the whole sweep; `params` carry theirs).
    - `devices`: the devices to shard the members over (default: all of
      `jax.devices()`, every host's after `jax.distributed.initialize()`).
    - `labels`: names for the chain axis, e.g. `{"delta": deltas}` (one value
      per chain), carried into `sw.members`, `sw.table()` and the plots.
    - `batch_size`: how many of a device's members step together under
      `vmap`; the groups go one after another (`jax.lax.map`). Default: all
      of them on a GPU or TPU; 1 on a CPU, which has no idle vector lanes for
      a batch to fill (a member then costs only its own steps, where in a
      batch it waits, computed and discarded, for the slowest member).
    - `progress`: a progress bar over members x time.
    - `chunk_steps`: steps per compiled chunk (see [`gradflow.flow`][]).
    - `checkpoint`, `checkpoint_every`: one file for the whole sweep, written
      every `checkpoint_every` seconds, after each chunk with events and at
      the end; a killed sweep run again with the same call resumes from it to
      the same result.

    **Returns:** a [`gradflow.Sweep`][].

    **Raises:** `ValueError`/`TypeError` naming the argument and its value for
    bad input, before anything is compiled; [`gradflow.Interrupted`][] on
    Ctrl-C (its `result` is the partial sweep).

    **Example:**

    ```python
    import numpy as np
    import gradflow as gf
    deltas = np.linspace(0, 0.1, 5)
    sw = gf.sweep([gf.chains.sticky(6, 0.5, 0.5, x) for x in deltas],
                  init_scale=1e-3, seeds=range(4), width=8, t1=2000,
                  labels={"delta": deltas})
    sw.table()
    ```
    """
    problems, axis = problems_of(
        chains, width=width, model=model, params=params, save_attention=save_attention
    )
    return sweep_problems(
        problems, init_scale=init_scale, params=params, seeds=seeds, t1=t1, ts=ts,
        devices=devices, labels=labels, solver=solver, rtol=rtol, atol=atol,
        max_steps=max_steps, progress=progress, dtype=dtype, stages=stages,
        events=events, thresholds=thresholds, checkpoint=checkpoint,
        checkpoint_every=checkpoint_every, batch_size=batch_size,
        chunk_steps=chunk_steps, axis=axis,
    )  # fmt: skip


__all__ = ["integrate", "integrate_stages", "problems_of", "sweep"]
