r"""`gradflow.integrate_stages`: the flow solved with its diagnostics, saddles and
stages located while integrating."""

import contextlib
from collections.abc import Callable, Sequence
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ._chain import MarkovChain, entropy_bounds
from ._diagnostics import diagnostics
from ._events import Event, solve_with_events
from ._integrate import (
    GradientFlow,
    _checkpointer,
    _counters,
    _failure_message,
    _interrupted,
    _meter_factory,
    _outcome,
    _Setup,
)
from ._model import Params
from ._progress import shared_progress_bar
from ._stages import (
    BUILTIN_EVENTS,
    StageDetector,
    StageThresholds,
    condition_values,
    monitor,
)
from ._trajectory import Trajectory


# Above this vocabulary size the (d, d) attention matrix is not saved at every
# save time (it is still saved at every event).
MAX_SAVED_ATTENTION_D = 64


class _FlowArgs(eqx.Module):
    chain: MarkovChain
    focus_token: jax.Array
    direction_index: jax.Array


class _Field(eqx.Module):
    def __call__(self, t, y, args: _FlowArgs):
        return GradientFlow()(t, y, args.chain)


class _Conditions(eqx.Module):
    """The built-in conditions (one `monitor` evaluation) then the user's."""

    thresholds: StageThresholds = eqx.field(static=True)
    user: tuple[Callable, ...] = eqx.field(static=True)

    def __call__(self, t, y, args: _FlowArgs):
        mon = monitor(t, y, args.chain)
        values = condition_values(
            mon, args.focus_token, args.direction_index, self.thresholds
        )
        values = values + [
            jnp.asarray(fn(t, y, args.chain), mon["speed"].dtype) for fn in self.user
        ]
        return jnp.stack([jnp.asarray(v, mon["speed"].dtype) for v in values])


class _Save(eqx.Module):
    attention: bool = eqx.field(static=True)

    def __call__(self, t, y, args: _FlowArgs):
        out = diagnostics(y, args.chain)
        if not self.attention:
            del out["attention"]
        mon = monitor(t, y, args.chain)
        out.update({f"{k}": v for k, v in mon.items() if k not in out})
        out["params"] = y
        return out


@eqx.filter_jit
def _event_info(t, y: Params, chain: MarkovChain) -> dict[str, Any]:
    out = diagnostics(y, chain)
    out.update({k: v for k, v in monitor(t, y, chain).items() if k not in out})
    return out


@eqx.filter_jit
def _save_point(save, t, y, args):
    return save(t, y, args)


def _check_events(events) -> tuple[Event, ...]:
    if isinstance(events, Event):
        events = (events,)
    events = tuple(events)
    names: set[str] = set(BUILTIN_EVENTS)
    for e in events:
        if not isinstance(e, Event):
            raise TypeError(
                f"events must be gradflow.Event objects, got {type(e).__name__}"
            )
        if e.name in names:
            raise ValueError(
                f"event name {e.name!r} is used twice (or is a built-in name)"
            )
        names.add(e.name)
    return events


def _check_callbacks(callbacks) -> tuple[Callable, ...]:
    if callable(callbacks):
        callbacks = (callbacks,)
    callbacks = tuple(callbacks)
    for c in callbacks:
        if not callable(c):
            raise TypeError(f"callbacks must be callables, got {type(c).__name__}")
    return callbacks


def _check_thresholds(thresholds) -> StageThresholds:
    if thresholds is None:
        return StageThresholds()
    if not isinstance(thresholds, StageThresholds):
        raise TypeError(
            "thresholds must be a gradflow.StageThresholds, got "
            f"{type(thresholds).__name__}"
        )
    return thresholds


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
    from ._integrate import integrate

    return integrate(chain, init_scale, stages=True, **kwargs)


def solve_with_stages(
    setup: _Setup,
    *,
    events: Sequence[Event] = (),
    callbacks: Sequence[Callable] = (),
    thresholds: StageThresholds | None = None,
    save_attention: bool | None = None,
    progress: bool = True,
) -> Trajectory:
    r"""The flow of a validated [`_Setup`][] with its diagnostics, saddles and
    stages located while integrating (the body of `integrate(stages=True)`).

    - the diagnostics of [`gradflow.diagnostics`][] and the rates of
      [`gradflow.monitor`][] are saved at every save time (`SaveAt(fn=...)`,
      so a long run stores numbers, not states), in `traj.extras`;
    - the built-in events (saddle entry and escape, focus start and end, a new
      direction opening and closing) are located *during* the solve by a root
      find on the solver's dense output, and the solve continues after each
      (see [`gradflow.solve_with_events`][]);
    - `traj.stages` and `traj.events` hold the records (dicts); the stages are
      defined in `docs/stages.md`. `extras` also holds, per event, `event_t`,
      `event_attention` and `event_W0`.
    """
    user_events = _check_events(events)
    callbacks = _check_callbacks(callbacks)
    thresholds = _check_thresholds(thresholds)
    chain, chain_dt, params0 = setup.chain, setup.chain_dt, setup.params0
    jdtype, t1, max_steps, ts_np = setup.dtype, setup.t1, setup.max_steps, setup.ts
    solver_obj = setup.solver
    if save_attention is None:
        save_attention = chain.d <= MAX_SAVED_ATTENTION_D
    settings = {
        **setup.settings,
        "stages": True,
        "thresholds": {
            k: getattr(thresholds, k)
            for k in (
                "escape_speed",
                "entry_speed",
                "focus_rate",
                "direction_rate",
                "direction_ratio",
                "min_mass_change",
            )
        },
        "events": [e.name for e in user_events],
        "save_attention": bool(save_attention),
    }
    checkpoint = _checkpointer(setup, settings)

    levels = entropy_bounds(chain)
    loss0 = float(_event_info(jnp.asarray(0.0, jdtype), params0, chain_dt)["loss"])
    n_dir = min(params0.m, chain.d) - 1
    detector = StageDetector(
        chain.d,
        n_dir,
        t0=0.0,
        loss0=loss0,
        log_d=levels["log_d"],
        unigram=levels["unigram"],
        thresholds=thresholds,
        labels=chain.tokens,
    )
    args = _FlowArgs(chain_dt, jnp.asarray(np.int64(0)), jnp.asarray(np.int64(0)))
    condition = _Conditions(thresholds, tuple(e.cond_fn for e in user_events))
    directions = [True] * len(BUILTIN_EVENTS) + [e.direction for e in user_events]
    names = list(BUILTIN_EVENTS) + [e.name for e in user_events]
    n_user = len(user_events)
    event_arrays: dict[str, list] = {"t": [], "attention": [], "W0": []}

    def on_event(record, t, y, a):
        info = jax.tree.map(
            np.asarray, _event_info(jnp.asarray(t, jdtype), y, chain_dt)
        )
        if record["index"] < len(BUILTIN_EVENTS):
            out = detector.fire(record["name"], t, info)
        else:
            out = {"name": record["name"], "t": float(t), "loss": float(info["loss"])}
            detector.events.append(out)
        record.update(out)
        event_arrays["t"].append(float(t))
        event_arrays["attention"].append(info["attention"])
        event_arrays["W0"].append(np.asarray(y.W0))
        for fn in callbacks:
            fn(out, float(t), y)
        # The conditions read the focus token and direction index from args.
        new_args = _FlowArgs(
            chain_dt,
            jnp.asarray(np.int64(detector.focus_token)),
            jnp.asarray(np.int64(min(detector.direction_index, max(n_dir - 1, 0)))),
        )
        return np.concatenate(
            [detector.active(), np.ones(n_user, dtype=bool)]
        ), new_args

    def get_state():
        meta = {"detector": detector.state_dict(), "event_t": event_arrays["t"]}
        arrays = {
            f"event_{k}/{i}": np.asarray(a)
            for k in ("attention", "W0")
            for i, a in enumerate(event_arrays[k])
        }
        return meta, arrays

    def set_state(meta, arrays):
        detector.load_state_dict(meta["detector"])
        event_arrays["t"] = [float(t) for t in meta["event_t"]]
        for k in ("attention", "W0"):
            event_arrays[k] = [
                arrays[f"event_{k}/{i}"] for i in range(len(event_arrays["t"]))
            ]

    bar = shared_progress_bar() if progress else contextlib.nullcontext()
    with bar:
        sol = solve_with_events(
            _Field(),
            params0,
            args,
            t0=0.0,
            t1=t1,
            ts=ts_np,
            save_fn=_Save(bool(save_attention)),
            condition=condition,
            directions=directions,
            names=names,
            active=np.concatenate([detector.active(), np.ones(n_user, dtype=bool)]),
            on_event=on_event,
            solver=solver_obj,
            rtol=setup.rtol,
            atol=setup.atol,
            max_steps=max_steps,
            meter_factory=_meter_factory(progress, t1),
            counters=_counters(solver_obj),
            checkpoint=checkpoint,
            checkpoint_state=(get_state, set_state),
        )
    saved = sol.saved
    keep = np.isfinite(np.asarray(saved["loss"]))
    saved = jax.tree.map(lambda x: np.asarray(x)[keep], saved)
    ts_out = sol.ts[keep]
    final_info = jax.tree.map(
        np.asarray, _event_info(jnp.asarray(sol.t_final, jdtype), sol.y_final, chain_dt)
    )
    stages = detector.finish(sol.t_final, float(final_info["loss"]), final_info)
    message = ""
    if not sol.ok:
        message = _failure_message(sol.result, sol.t_final, t1, max_steps)
        if ts_out.size == 0 or sol.t_final > ts_out[-1]:
            last = jax.tree.map(
                np.asarray,
                _save_point(
                    _Save(bool(save_attention)), sol.t_final, sol.y_final, args
                ),
            )
            saved = jax.tree.map(lambda a, b: np.concatenate([a, b[None]]), saved, last)
            ts_out = np.append(ts_out, sol.t_final)
    ok, message, stats = _outcome(sol, ts_out, saved["loss"], setup, message)
    params_saved = saved.pop("params")
    extras = {
        k: np.asarray(v) for k, v in saved.items() if k not in ("loss", "grad_norm")
    }
    d = chain.d
    extras["event_t"] = np.asarray(event_arrays["t"], dtype=np.float64)
    extras["event_attention"] = (
        np.stack(event_arrays["attention"])
        if event_arrays["t"]
        else np.zeros((0, d, d))
    )
    extras["event_W0"] = (
        np.stack(event_arrays["W0"])
        if event_arrays["t"]
        else np.zeros((0, params0.m, d))
    )
    traj = Trajectory(
        ts=ts_out,
        loss=saved["loss"],
        grad_norm=saved["grad_norm"],
        params=params_saved,
        chain=chain,
        settings=settings,
        stats=stats,
        ok=ok,
        message=message,
        stages=tuple(stages),
        events=tuple(detector.events),
        extras=extras,
    )
    if sol.interrupted:
        raise _interrupted(traj, checkpoint)
    return traj
