r"""`gradflow.flow`: the gradient flow $\dot\theta = -\nabla L(\theta)$ of any
[`gradflow.Problem`][], solved with Diffrax.

One solve path: a checked call ([`FlowSetup`][]), what is watched during the
solve ([`Observer`][]), the compiled chunks driven by the host
(`loop.LoopJob` on `driver.drive`), and the one place a
[`gradflow.Trajectory`][] is built from a finished solve ([`build_trajectory`][],
which the sweep uses for each of its members).
"""

import dataclasses
import time
from typing import cast

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree
from jaxtyping import PyTree

from .._core.records import SADDLE_EVENTS, EventRecord
from .._event.observe import Observer, save_point
from .._event.watch import Watch, WatchState
from .._loop import exported
from .._loop.checkpoint import Checkpointer, pack_tree, problem_inputs
from .._loop.driver import drive, interrupted, interrupted_message
from .._loop.loop import (
    Crossing,
    LoopJob,
    LoopState,
    Spec,
    chunk_steps_for,
    init_state,
    make_controller,
    restore_state,
    save_buffer_times,
)
from .._loop.resume import collapsed
from .._options import Run, SaveAt, Solver
from .._problem.base import FieldProblem, Problem, StagedProblem
from .._problem.curvature import start_speed
from .._problem.files import configuration, fingerprint
from .._problem.functions import analyse, problem_loss_scale, speed_floor
from .._result.codes import RESULTS
from .._result.info import FlowStats
from .._result.trajectory import Trajectory
from .setup import FlowSetup, prepare, with_start
from .solving import (
    DEFAULT_T1,
    check_descent,
    collapse_message,
    count_grad_evals,
    count_hvps,
    failure_message,
    result_code,
    w_rank,
)


# The layout of a flow's checkpoints (the loop state written whole); a
# checkpoint of an older layout is refused, naming this setting.
CHECKPOINT_LAYOUT = "loop-state-5"


class GradientFlow(eqx.Module):
    r"""The vector field $f(t, \theta; \text{problem}) = -\nabla_\theta L(\theta)$,
    or a [`gradflow.FieldProblem`][]'s own `vector_field` (chosen when the
    solve is traced, by the problem's class).

    The problem is passed as Diffrax `args` (data, not a closure), so solving a
    new problem of the same class and shapes reuses the compiled solve.
    """

    def __call__(self, t, y: PyTree, args: Problem) -> PyTree:
        del t
        if isinstance(args, FieldProblem):
            return args.vector_field(y)
        grad = jax.grad(args.loss)(y)
        return jax.tree.map(jnp.negative, grad)


def _loss_at(problem: Problem, y: PyTree):
    return problem.loss(y)


_loss_jit = eqx.filter_jit(_loss_at)


def _loss(problem: Problem, y: PyTree):
    """The loss at `y`, compiled (where exported programs are on, the command
    line's warm start loads the traced program: `gradflow/_loop/exported.py`)."""
    out = exported.call("loss", _loss_at, problem, y, same_structure=False)
    return _loss_jit(problem, y) if out is None else out


_save_point = eqx.filter_jit(save_point)


def make_observer(setup: FlowSetup) -> Observer:
    """What a flow watches during its solve (its `SaveAt`): with stages, the
    saddles, whose speed is measured against the loss's level above its
    floor (`speed_floor`; a [`gradflow.StagedProblem`][]: against its loss
    scale, or where it gives none the loss at the start), starting in a saddle only
    if the start is near a critical point (its `start_speed` at most
    `escape_speed`; `gradflow/_problem/curvature.py`)."""
    saveat = setup.saveat
    scale, still, floor = None, None, None
    if saveat.stages:
        given = problem_loss_scale(setup.problem_dt)
        start = None
        if given is None or not isinstance(setup.problem_dt, StagedProblem):
            start = float(_loss(setup.problem_dt, setup.params0))
            level = speed_floor(setup.problem_dt, start)
            if level is not None:
                floor = jnp.asarray(level, setup.dtype)
        if given is None:
            assert start is not None
            scale = jnp.asarray(abs(start) if start != 0 else 1.0, setup.dtype)
            ell = float(scale)
        else:
            ell = float(given)
        if setup.at_start is not None:
            q0 = start_speed(setup.at_start, ell)
            still = jax.device_put(np.asarray(q0 <= saveat.thresholds.escape_speed))
    return Observer(
        stages=saveat.stages,
        thresholds=saveat.thresholds,
        events=saveat.events,
        scale=scale,
        still=still,
        floor=floor,
    )


def loss_scale(setup: FlowSetup, observer: Observer) -> float:
    """$\\ell$ of the flow (the problem's, or the loss at the start)."""
    scale = problem_loss_scale(setup.problem_dt)
    if scale is None:
        scale = observer.scale
        if scale is None:
            scale = _loss(setup.problem_dt, setup.params0)
    return float(scale)


def solve_spec(setup: FlowSetup, observer: Observer) -> Spec:
    solver = setup.solver
    motion = setup.saveat.motion
    if observer.watches or motion is not None:
        solver = Watch(
            cast(dfx.AbstractAdaptiveSolver, solver),
            observer,
            directions=observer.directions,
            rearm_by=observer.rearm_by,
            armed0=observer.armed0,
            uses_field=observer.uses_field,
            motion=motion,
        )
    chunk = setup.run.chunk_steps or chunk_steps_for(setup.params0)
    if motion is not None:
        # never more motion saves in a chunk than the buffer holds
        w = cast(Watch, solver)
        chunk = min(chunk, w.motion_capacity // w.motion_samples)
    return Spec(
        vector_field=GradientFlow(),
        solver=solver,
        controller=make_controller(setup.rtol, setup.atol),
        save_fn=save_point,
        chunk_steps=int(min(chunk, setup.max_steps)),
    )


def event_record(observer: Observer, crossing: Crossing, problem) -> EventRecord:
    # (device_put: jnp.asarray of host arrays compiles once per shape)
    loss = float(_loss(problem, jax.tree.map(jax.device_put, crossing.y)))
    return EventRecord(name=observer.names[crossing.index], t=crossing.t, loss=loss)


def _checkpointer(setup: FlowSetup) -> Checkpointer | None:
    """The checkpoint of a flow (or `None`), read and checked against the call
    before anything is compiled."""
    if setup.run.checkpoint is None:
        return None
    inputs = {
        **problem_inputs(fingerprint(setup.problem)),
        "ts": setup.ts,
        **pack_tree("params0", setup.params0),
    }
    settings = dict(
        setup.settings.to_dict(),
        **configuration(setup.problem),
        checkpoint_layout=CHECKPOINT_LAYOUT,
    )
    return Checkpointer(
        setup.run.checkpoint, "integrate", settings, inputs, setup.run.checkpoint_every
    )


def solve(
    setup: FlowSetup, observer: Observer, checkpoint: Checkpointer | None = None
) -> Trajectory:
    """The one solve path of [`gradflow.flow`][]: a checked call, an
    `Observer`, the host driving the chunks; returns the
    [`gradflow.Trajectory`][]. `checkpoint`: the flow's checkpoint, read and
    checked before its start was (`start_flow`)."""
    spec = solve_spec(setup, observer)
    problem = setup.problem_dt
    # The save buffer has a bucketed length, at least 1,024 for a small model
    # (one compilation for nearby numbers of saves); `_saves` reads the first
    # len(setup.ts).
    ts = save_buffer_times(spec, setup.ts, setup.params0, problem, setup.dtype)
    t1 = jnp.asarray(setup.t1, setup.dtype)
    state = init_state(
        spec,
        y0=setup.params0,
        args=problem,
        t0=jnp.asarray(0.0, setup.dtype),
        t1=t1,
        ts=ts,
    )

    def on_event(record, crossing):
        for fn in setup.saveat.callbacks:
            fn(record, crossing.t, crossing.y)

    job = LoopJob(
        spec,
        problem,
        ts,
        t1,
        max_steps=setup.max_steps,
        record=lambda c: event_record(observer, c, problem),
        on_event=on_event,
    )
    resumed_from = None
    if checkpoint is not None and checkpoint.state is not None:
        meta = checkpoint.state[0]
        state = jax.tree.map(jnp.asarray, restore_state(checkpoint, state))
        job.records = [EventRecord.from_dict(r) for r in meta["events"]]
        arrays = checkpoint.state[1]
        if "dense_t" in arrays:
            job.dense_t = [np.asarray(arrays["dense_t"])]
            job.dense_y = [np.asarray(arrays["dense_y"])]
        resumed_from = float(state.t)
    driven = drive(
        job,
        state,
        total=setup.t1,
        start=float(state.t),
        progress=setup.run.progress,
        checkpoint=checkpoint,
    )
    outcome = Outcome(
        state=driven.state,
        records=job.records,
        out_of_steps=job.out_of_steps,
        interrupted=driven.interrupted,
        resumed_from=resumed_from,
        dense=job.dense(),
    )
    traj = build_trajectory(setup, observer=observer, outcome=outcome)
    if driven.interrupted:
        message = interrupted_message(
            f"interrupted at t = {traj.t_final:.6g} of t1 = {setup.t1:.6g}", checkpoint
        )
        traj = eqx.tree_at(lambda r: r.detail, traj, message)
        raise interrupted(message, traj, checkpoint)
    return traj


@dataclasses.dataclass(frozen=True)
class Outcome:
    """Where one solve stopped (host side): its final loop state, its located
    events, why it stopped, and its motion saves (`(times, flat points)`,
    empty without `SaveAt(motion=...)`)."""

    state: LoopState
    records: list[EventRecord]
    out_of_steps: bool
    interrupted: bool
    resumed_from: float | None
    dense: tuple[np.ndarray, np.ndarray] = (np.zeros(0), np.zeros((0, 0)))


def _saves(setup: FlowSetup, state: LoopState, ok: bool):
    """The saved points reached, as NumPy arrays, and `(count, first time)` of
    those left out for a loss that is not finite; a failed solve also keeps
    its last finite state, so no computed work is lost (the one rule for the
    last point)."""
    n = setup.ts.shape[0]  # the save buffer may be longer (save_buffer_times)
    filled = np.asarray(state.filled)[:n]
    saved = jax.tree.map(lambda x: np.asarray(x)[:n][filled], state.saved)
    ts_out = setup.ts[filled]
    keep = np.isfinite(saved["loss"])
    dropped = (int(np.sum(~keep)), float(ts_out[~keep][0]) if not keep.all() else 0.0)
    saved = jax.tree.map(lambda x: x[keep], saved)
    ts_out = ts_out[keep]
    t_final = float(state.t)
    if not ok and (ts_out.size == 0 or t_final > ts_out[-1]):
        last = jax.tree.map(
            np.asarray,
            _save_point(jnp.asarray(t_final, setup.dtype), state.y, setup.problem_dt),
        )
        if np.isfinite(last["loss"]):
            saved = jax.tree.map(lambda a, b: np.concatenate([a, b[None]]), saved, last)
            ts_out = np.append(ts_out, t_final)
    return ts_out, saved, dropped


def _with_motion_saves(setup: FlowSetup, ts_out, saved, dense):
    """The saves with the motion saves (`SaveAt(motion=...)`) merged in, in
    time order: what every save holds evaluated at each recorded point; a
    time already on the grid keeps the grid's save."""
    times, flat = dense
    if not times.size:
        return ts_out, saved
    unravel = ravel_pytree(setup.params0)[1]
    fresh = ~np.isin(times, ts_out)
    points = [
        jax.tree.map(
            np.asarray,
            _save_point(
                jnp.asarray(t, setup.dtype), unravel(jnp.asarray(y)), setup.problem_dt
            ),
        )
        for t, y in zip(times[fresh], flat[fresh], strict=True)
    ]
    keep = [i for i, p in enumerate(points) if np.isfinite(p["loss"])]
    if not keep:
        return ts_out, saved
    extra = jax.tree.map(lambda *xs: np.stack(xs), *[points[i] for i in keep])
    ts_all = np.concatenate([ts_out, times[fresh][keep]])
    order = np.argsort(ts_all, kind="stable")
    merged = jax.tree.map(
        lambda a, b: np.concatenate([a, b.astype(a.dtype)])[order], saved, extra
    )
    return ts_all[order], merged


def _no_success_without_saves(code, detail: str, ts_out, dropped):
    """`(code, detail)` once the saves are known: a solve that reached `t1`
    but saved a loss that is not finite is `nonfinite`, and one that kept no
    point at all is `no_saves` (never a success)."""
    count, t_bad = dropped
    if code == RESULTS.successful and count:
        code = RESULTS.nonfinite
        detail = (
            f"the loss was not finite at {count} save(s) from t = {t_bad:.6g} on, "
            "though the solver reached t1 with a finite gradient; those saves are "
            "left out. Check the loss's value where it is flat (a NaN or "
            "infinite value behind a stop_gradient, say)"
        )
    if ts_out.size == 0:
        why = detail or RESULTS[code]
        code = RESULTS.no_saves
        detail = f"no save time was reached with a finite loss: {why}"
    return code, detail


def _code(setup: FlowSetup, state: LoopState, outcome: Outcome):
    """`(code, detail)` of a finished solve: how it ended and, if it failed,
    one line on where, why and what to change."""
    if outcome.interrupted:
        return RESULTS.interrupted, ""
    if outcome.out_of_steps:
        code = RESULTS.max_steps_reached
    else:
        code = result_code(state.solver_result)
    if code == RESULTS.successful:
        return code, ""
    t = float(state.t)
    if code == RESULTS.dt_min_reached and bool(collapsed(state.controller_state)):
        return RESULTS.step_collapsed, _collapse_detail(setup, state)
    return code, failure_message(code, t, setup.t1, setup.max_steps)


def _size(params) -> float:
    return float(np.sqrt(sum(np.sum(np.square(x)) for x in jax.tree.leaves(params))))


def _collapse_detail(setup: FlowSetup, state: LoopState) -> str:
    last = _loss(setup.problem_dt, jax.tree.map(jnp.asarray, state.y))
    return collapse_message(
        float(state.t),
        setup.t1,
        loss=float(last),
        size=_size(jax.tree.map(np.asarray, state.y)),
        loss0=float(_loss(setup.problem_dt, setup.params0)),
        size0=_size(jax.tree.map(np.asarray, setup.params0)),
    )


def in_rest(record: EventRecord, rests, window: float) -> bool:
    """Whether a saddle event located during the solve falls in one of the
    analysis's `rests` (stretches that passed no saddle), widened by `window`
    e-folds of $t$ on each side (the located and the interpolated boundary of
    one crossing differ by a fraction of the rate window)."""
    if record.name not in SADDLE_EVENTS:
        return False
    grow = float(np.exp(window))
    return any(lo / grow <= record.t <= hi * grow for lo, hi in rests)


def build_trajectory(
    setup: FlowSetup, *, observer: Observer, outcome: Outcome
) -> Trajectory:
    """The one place a [`gradflow.Trajectory`][] is built from a finished solve
    (a solo flow's or a sweep member's)."""
    state = outcome.state
    code, detail = _code(setup, state, outcome)
    ts_out, saved, dropped = _saves(setup, state, bool(code == RESULTS.successful))
    ts_out, saved = _with_motion_saves(setup, ts_out, saved, outcome.dense)
    code, detail = _no_success_without_saves(code, detail, ts_out, dropped)
    if code == RESULTS.successful:
        detail = check_descent(ts_out, saved["loss"], setup.rtol)
        if detail:
            code = RESULTS.loss_rose
    stages, events, extras = (), tuple(outcome.records), {}
    # (stage rates need three saves at least)
    if observer.stages and ts_out.size >= 3:
        analysis = analyse(
            setup.problem,
            ts_out,
            saved["params"],
            saved["loss"],
            thresholds=observer.thresholds,
            loss_scale=loss_scale(setup, observer),
        )
        stages = analysis.stages
        extras = {
            k: np.asarray(v)
            for k, v in analysis.extras.items()
            if k not in ("loss", "grad_norm")
        }
        # The plateau boundaries are the saddle events located during the
        # solve (but those where the analysis found the flow passing no
        # saddle); the other stage boundaries are interpolated between saves.
        derived = [e for e in analysis.events if e.name not in SADDLE_EVENTS]
        located = [
            e
            for e in outcome.records
            if not in_rest(e, analysis.rests, observer.thresholds.rate_window)
        ]
        events = tuple(sorted(located + derived, key=lambda e: e.t))
    return Trajectory(
        ts=ts_out,
        loss=saved["loss"],
        grad_norm=saved["grad_norm"],
        params=saved["params"],
        problem=setup.problem,
        settings=setup.settings,
        stats=_stats(setup, state, outcome),
        result=code,
        detail=detail,
        stages=stages,
        events=events,
        extras=extras,
    )


def _stats(setup: FlowSetup, state: LoopState, outcome: Outcome) -> FlowStats:
    solver = setup.solver
    inner = state.solver_state
    if isinstance(inner, WatchState):
        inner = inner.inner
    steps = {
        "num_steps": int(state.num_steps),
        "num_accepted_steps": int(state.num_accepted_steps),
        "num_rejected_steps": int(state.num_rejected_steps),
    }
    return FlowStats(
        **steps,
        # The event conditions' own gradients (one per step and per bisection
        # iteration) are not counted: this is the vector field's count.
        num_grad_evals=count_grad_evals(solver, steps, inner),
        num_hvps=count_hvps(solver, inner),
        w_rank=w_rank(solver, inner),
        resumed_from=outcome.resumed_from,
        wall_time=time.perf_counter() - setup.start,
    )


def flow(
    problem: Problem,
    init_scale: float | None = None,
    *,
    params: PyTree | None = None,
    seed: int = 0,
    t1: float = DEFAULT_T1,
    saveat: SaveAt | None = None,
    solver: Solver | str | dfx.AbstractSolver | None = None,
    run: Run | None = None,
) -> Trajectory:
    r"""Solves the gradient flow $\dot\theta = -\nabla L(\theta)$ of a problem.

    Starts either from a random point (`problem.init` with the key of `seed`
    and scale `init_scale`) or from given `params`, and integrates to `t1`
    with an adaptive Diffrax solver (by default gradflow's stiff
    Rosenbrock-W solver). Time is gradient-descent time: step $k$ of GD at
    learning rate $\eta$ sits at $t = k\eta$.

    Loss, $|\nabla L|$ and parameters are saved at every save time. By
    default the saddle escapes and entries are located *during* the solve,
    and after the solve the stages are found on the saves (for every problem
    `plateau`, `drop` and `rank` records; a [`gradflow.StagedProblem`][] such
    as the paper's model finds its own; `docs/stages.md`).

    **Arguments:**

    - `problem`: a [`gradflow.Problem`][].
    - `init_scale`: the scale of the random start; give exactly one of
      `init_scale` and `params`.
    - `params`: a point to start from (the structure of `problem.init`'s).
    - `seed`: seed of the random start (`jax.random.key(seed)`).
    - `t1`: final time.
    - `saveat`: a [`gradflow.SaveAt`][]: save times, stages, thresholds,
      user events and callbacks (the defaults when `None`).
    - `solver`: a [`gradflow.Solver`][] (method, tolerances, `max_steps`,
      dtype), or just a solver's name or a Diffrax solver instance.
    - `run`: a [`gradflow.Run`][]: progress bar, checkpoint, chunk size.

    **Returns:** a [`gradflow.Trajectory`][] whose `params` is the problem's
    PyTree with a leading time axis. Its `result` is a [`gradflow.RESULTS`][]
    code: if the solver stops early, `traj.ok` is `False`, `traj.message`
    says why and what to change, and the trajectory holds everything up to
    the last time reached.

    **Raises:** `ValueError`/`TypeError` naming the argument and its value for
    bad input (or a checkpoint of another call), before anything is compiled.
    [`gradflow.Interrupted`][] (a `KeyboardInterrupt`) on Ctrl-C: the solve
    stops after the current chunk of steps, writes the checkpoint, and the
    exception's `result` holds the trajectory so far.

    **Example:**

    ```python
    import gradflow as gf
    problem = gf.problems.DeepLinear.random([3.0, 1.0, 0.3], n_in=5, n_out=4)
    traj = gf.flow(problem, 1e-3, t1=200)
    for s in traj.stages:
        print(s.name, s.cycle, s.t_start, s.t_end)
    ```
    """
    setup = prepare(
        problem,
        init_scale=init_scale,
        params=params,
        t1=t1,
        seed=seed,
        saveat=saveat,
        solver=solver,
        run=run,
    )
    setup, checkpoint = start_flow(setup)
    return solve(setup, make_observer(setup), checkpoint)


def start_flow(setup: FlowSetup) -> tuple[FlowSetup, Checkpointer | None]:
    """The checkpoint of a prepared flow (a checkpoint of another call refused
    before anything is compiled), then its start checked
    ([`with_start`][gradflow._flow.setup.with_start])."""
    checkpoint = _checkpointer(setup)
    return with_start(setup), checkpoint


__all__ = [
    "CHECKPOINT_LAYOUT",
    "GradientFlow",
    "Outcome",
    "build_trajectory",
    "event_record",
    "flow",
    "in_rest",
    "make_observer",
    "solve",
    "solve_spec",
    "start_flow",
]
