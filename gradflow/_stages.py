r"""Stages of training and the events that bound them (SPEC section 4).

The definitions, with the reasoning behind each threshold, are in
`docs/stages.md`. Four dimensionless rates are watched, each a derivative per
unit of $\log t$ so that it reads the same on every plateau: the speed
$s = t |\nabla L|^2 / (\log d - H_{\text{cond}})$, the attention-entropy rate
$e$ (over $H(\pi)$), the attention-mass rate $\mu_k$ of each key token, and
the direction rate $\rho_j$ of $\log(\sigma_{j+1}/\sigma_1)$ of $W_0$. The
events are their threshold crossings:

- `saddle_escape` / `saddle_entry`: $s$ rises through `escape_speed` / falls
  through `entry_speed`;
- `focus_start`: $e$ falls through `-focus_rate`; the focus token is
  $k^* = \arg\max_k \mu_k$;
- `focus_end`: $\mu_{k^*}$ falls through 0 (the focus token's mass peaks);
- `new_direction_start` / `_end`: $\rho_j$ rises / falls through
  `direction_rate` (start only while $\sigma_{j+1}/\sigma_1$ <
  `direction_ratio`).

Stages are intervals between these events: `condensation` from the start
to the first saddle entry; `focus` from `focus_start` to `focus_end`;
`dilution` from `focus_end` to the next saddle entry (or the next focus);
`new_direction` from its start to its end, opening a new cycle. Stages of
different kinds may overlap (a new direction often opens while attention
refocuses).

The same state machine, [`StageDetector`][gradflow.StageDetector], is driven either by the events
located during the solve ([`gradflow.integrate_stages`][]) or by sampled curves
([`gradflow.detect_stages`][]).
"""

import copy
import math
from collections.abc import Sequence
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from ._chain import MarkovChain
from ._diagnostics import attention_entropy
from ._model import Params, attention, population_loss


_TINY = 1e-300


class StageThresholds(eqx.Module):
    """Thresholds of the stage detector (see `docs/stages.md` for each).

    **Arguments:**

    - `escape_speed`, `entry_speed`: a saddle is left when the speed $s$ rises
      above `escape_speed` and entered when it falls below `entry_speed`
      (hysteresis: `entry_speed < escape_speed`).
    - `focus_rate`: focus starts when the attention entropy falls faster than
      `focus_rate` (per unit $\\log t$, relative to $H(\\pi)$).
    - `direction_rate`: a new direction opens while $\\sigma_{j+1}/\\sigma_1$
      grows faster than $t^{\\text{direction\\_rate}}$.
    - `direction_ratio`: ... and only if $\\sigma_{j+1}/\\sigma_1$ is still below
      this (the direction is new, not one already open).
    - `min_mass_change`: a focus (dilution) is recorded only if the focus
      token's attention mass rose (fell) by at least this much.
    """

    escape_speed: float = 1e-2
    entry_speed: float = 5e-3
    focus_rate: float = 5e-2
    direction_rate: float = 1.0
    direction_ratio: float = 0.1
    min_mass_change: float = 0.02

    def __check_init__(self):
        for name in (
            "escape_speed",
            "entry_speed",
            "focus_rate",
            "direction_rate",
            "direction_ratio",
            "min_mass_change",
        ):
            value = getattr(self, name)
            if not (
                isinstance(value, (int, float)) and math.isfinite(value) and value > 0
            ):
                raise ValueError(
                    f"StageThresholds.{name} must be finite and > 0, got {value!r}"
                )
        if self.entry_speed >= self.escape_speed:
            raise ValueError(
                "StageThresholds.entry_speed must be < escape_speed (hysteresis), got "
                f"entry_speed = {self.entry_speed} and "
                f"escape_speed = {self.escape_speed}"
            )


BUILTIN_EVENTS = (
    "saddle_escape",
    "saddle_entry",
    "focus_start",
    "focus_end",
    "new_direction_start",
    "new_direction_end",
)


def _log_sv_ratios(W0: Float[Array, "m d"]) -> Float[Array, " n1"]:
    s = jnp.linalg.svd(W0, compute_uv=False)
    return jnp.log(jnp.maximum(s[1:], _TINY)) - jnp.log(jnp.maximum(s[0], _TINY))


def monitor(t, params: Params, chain: MarkovChain) -> dict[str, Array]:
    r"""The dimensionless rates the stage detector reads, at one point.

    **Returns:** a dict with `loss`, `speed` $s$, `entropy_rate` $e$,
    `mass_rate` $\mu$ (shape `(d,)`), `sv_rate` $\rho$ (shape
    `(min(m, d) - 1,)`, entry `j` for $\sigma_{j+2}/\sigma_1$... i.e. entry 0 is
    $\sigma_2/\sigma_1$) and `sv_ratio` ($\sigma_{j+2}/\sigma_1$, same shape).
    Every derivative is exact: one `jax.jvp` along the velocity $-\nabla L$.
    """
    loss, grad = jax.value_and_grad(population_loss)(params, chain)
    velocity = jax.tree.map(jnp.negative, grad)
    grad_sq = sum(jnp.sum(g**2) for g in jax.tree.leaves(grad))

    def observe(p):
        A = attention(p, chain)
        return attention_entropy(A, chain.pi), chain.pi @ A, _log_sv_ratios(p.W0)

    (_, _, log_ratios), (dH, dM, dlogr) = jax.jvp(observe, (params,), (velocity,))
    loss_range = jnp.log(chain.d) - chain.conditional_entropy
    return {
        "loss": loss,
        "speed": t * grad_sq / loss_range,
        "entropy_rate": t * dH / chain.unigram_entropy,
        "mass_rate": t * dM,
        "sv_rate": t * dlogr,
        "sv_ratio": jnp.exp(log_ratios),
    }


def condition_values(
    mon: dict[str, Any], focus_token, direction_index, thresholds: StageThresholds
) -> list:
    """The six built-in conditions (in the order of `BUILTIN_EVENTS`), each
    firing when it rises through zero. Works on JAX and NumPy values alike."""
    th = thresholds
    sv_rate = mon["sv_rate"]
    # Width 1 (or d = 1 direction): no second singular value, so no new direction.
    rho = (
        sv_rate[..., direction_index]
        if sv_rate.shape[-1] > 0
        else -1.0 + 0 * mon["speed"]
    )
    return [
        mon["speed"] - th.escape_speed,
        th.entry_speed - mon["speed"],
        -th.focus_rate - mon["entropy_rate"],
        -mon["mass_rate"][..., focus_token],
        rho - th.direction_rate,
        th.direction_rate - rho,
    ]


class StageDetector:
    """The state machine that turns events into stages.

    Drive it with [`StageDetector.fire`][gradflow.StageDetector.fire] (an event name, its time and the
    monitored values there) and read `stages`, `events` and `active()` (which
    built-in conditions are switched on now). `focus_token` and
    `direction_index` are the data the conditions need.

    **Arguments:**

    - `d`: vocabulary size; `num_directions`: how many ratios
      $\\sigma_{j+1}/\\sigma_1$ exist (`min(m, d) - 1`).
    - `t0`, `loss0`: where the trajectory starts; `log_d`, `unigram`: the loss
      levels $\\log d$ and $H(\\pi)$ (condensation is only recorded for a start
      closer to $\\log d$ than to $H(\\pi)$).
    - `thresholds`: a [`gradflow.StageThresholds`][].
    - `labels`: token labels (for the records).
    """

    def __init__(
        self,
        d: int,
        num_directions: int,
        *,
        t0: float,
        loss0: float,
        log_d: float,
        unigram: float,
        thresholds: StageThresholds,
        labels: Sequence[str] | None = None,
    ):
        self.d = d
        self.num_directions = num_directions
        self.thresholds = thresholds
        self.labels = list(labels) if labels is not None else [str(k) for k in range(d)]
        self.stages: list[dict] = []
        self.events: list[dict] = []
        self.in_saddle = True
        self.cycle = 1
        self.focus_token = 0
        self.direction_index = 0
        self.open: dict[str, dict] = {}
        if loss0 > 0.5 * (log_d + unigram):
            self._open("condensation", t0, loss0, [])

    # -- checkpoints -----------------------------------------------------------

    _STATE = (
        "stages",
        "events",
        "in_saddle",
        "cycle",
        "focus_token",
        "direction_index",
        "open",
    )

    def state_dict(self) -> dict:
        """The detector's mutable state, JSON-able (for checkpoints)."""
        return copy.deepcopy({k: getattr(self, k) for k in self._STATE})

    def load_state_dict(self, state: dict) -> None:
        """Restores a state from [`StageDetector.state_dict`][gradflow.StageDetector.state_dict]."""
        missing = [k for k in self._STATE if k not in state]
        if missing:
            raise ValueError(f"stage detector state lacks {missing}")
        for k in self._STATE:
            setattr(self, k, copy.deepcopy(state[k]))

    # -- records ---------------------------------------------------------------

    def _open(self, name, t, loss, tokens, **extra):
        self.open[name] = {
            "name": name,
            "cycle": self.cycle,
            "t_start": float(t),
            "t_end": math.nan,
            "loss_start": float(loss),
            "loss_end": math.nan,
            "tokens": [int(k) for k in tokens],
            "token_labels": [self.labels[int(k)] for k in tokens],
            "complete": False,
            **extra,
        }

    def _close(self, name, t, loss, **extra):
        stage = self.open.pop(name, None)
        if stage is None:
            return
        stage.update(t_end=float(t), loss_end=float(loss), complete=True, **extra)
        if stage.pop("counted", True):
            self.stages.append(stage)

    def finish(self, t, loss, info: dict | None = None) -> list[dict]:
        """Closes the stages still open at the end (`complete = False`) and
        returns all stages sorted by start time."""
        for name in list(self.open):
            stage = self.open.pop(name)
            stage.update(t_end=float(t), loss_end=float(loss))
            if name == "new_direction" and info is not None:
                stage.update(self._direction_info(info))
            if name in ("focus", "dilution") and info is not None:
                mass = float(np.asarray(info["att_mass"])[self.focus_token])
                stage["mass_end"] = mass
                change = mass - stage["mass_start"]
                if name == "dilution":
                    change = -change
                if change < self.thresholds.min_mass_change:
                    stage["counted"] = False
            if stage.pop("counted", True):
                self.stages.append(stage)
        self.stages.sort(key=lambda s: (s["t_start"], s["name"]))
        return self.stages

    # -- machine ---------------------------------------------------------------

    def active(self) -> np.ndarray:
        """Which of `BUILTIN_EVENTS` can fire now."""
        has_dir = self.direction_index < self.num_directions
        return np.array(
            [
                self.in_saddle,
                not self.in_saddle,
                "focus" not in self.open,
                "focus" in self.open,
                has_dir and "new_direction" not in self.open,
                has_dir and "new_direction" in self.open,
            ]
        )

    def _direction_info(self, info):
        v = info.get("right_sv", info.get("right_sv_W0"))
        j = self.direction_index + 1
        if v is None or j >= len(v):
            return {}
        v = np.asarray(v[j])
        # The two tokens the new direction pulls furthest apart.
        tokens = [int(np.argmax(v)), int(np.argmin(v))]
        return {
            "tokens": [int(k) for k in tokens],
            "token_labels": [self.labels[int(k)] for k in tokens],
            "direction": [float(x) for x in v],
        }

    def fire(self, name: str, t: float, info: dict) -> dict:
        """Applies one built-in event. `info` holds the monitored values at `t`
        (`loss`, `mass_rate`, `att_mass`, `sv_ratio`, optionally
        `right_sv`). Returns the event record."""
        loss = float(info["loss"])
        record = {"name": name, "t": float(t), "loss": loss}
        if name == "saddle_escape":
            self.in_saddle = False
        elif name == "saddle_entry":
            self.in_saddle = True
            self._close("condensation", t, loss)
            self._end_dilution(t, info)
        elif name == "focus_start":
            k = int(np.argmax(np.asarray(info["mass_rate"])))
            self._close("condensation", t, loss)
            self._end_dilution(t, info)
            self.focus_token = k
            mass = float(np.asarray(info["att_mass"])[k])
            self._open("focus", t, loss, [k], mass_start=mass)
            record["token"] = k
        elif name == "focus_end":
            k = self.focus_token
            mass = float(np.asarray(info["att_mass"])[k])
            stage = self.open.get("focus", {})
            # A focus that moved less than min_mass_change of attention mass onto
            # its token is drift, not a stage; it opens no dilution either.
            counted = (
                mass - stage.get("mass_start", -np.inf)
                >= self.thresholds.min_mass_change
            )
            if not counted:
                stage["counted"] = False
                record["name"] = "focus_drift_end"
            self._close("focus", t, loss, mass_end=mass)
            if counted:
                self._open("dilution", t, loss, [k], mass_start=mass)
                # A dilution belongs to its focus's cycle, even if a new
                # direction opened the next cycle meanwhile.
                self.open["dilution"]["cycle"] = stage["cycle"]
            record["token"] = k
        elif name == "new_direction_start":
            j = self.direction_index
            ratio = float(np.asarray(info["sv_ratio"])[j])
            counted = ratio < self.thresholds.direction_ratio
            record["sv_ratio"] = ratio
            if counted:
                self.cycle += 1
            else:
                record["name"] = "sv_growth_start"
            self._open("new_direction", t, loss, [], counted=counted, sv_index=j + 1)
        elif name == "new_direction_end":
            stage = self.open.get("new_direction", {})
            j = self.direction_index
            if stage.get("counted", True) and (
                float(np.asarray(info["sv_ratio"])[j]) < self.thresholds.direction_ratio
            ):
                # The growth paused before the direction opened (ratio still
                # below direction_ratio): the stage stays open; the condition
                # fires again when the growth resumes and then slows down.
                record["name"] = "new_direction_pause"
                self.events.append(record)
                return record
            if not stage.get("counted", True):
                record["name"] = "sv_growth_end"
            self._close("new_direction", t, loss, **self._direction_info(info))
            self.direction_index += 1
            j = self.direction_index
            # The next direction may already be opening (it started while this
            # one was still growing): then its stage starts now.
            if (
                j < self.num_directions
                and float(np.asarray(info["sv_rate"])[j])
                > self.thresholds.direction_rate
            ):
                self.events.append(record)
                return self.fire("new_direction_start", t, info)
        else:
            raise ValueError(
                f"unknown built-in event {name!r}; one of {BUILTIN_EVENTS}"
            )
        self.events.append(record)
        return record

    def _end_dilution(self, t, info):
        stage = self.open.get("dilution")
        if stage is not None:
            mass = float(np.asarray(info["att_mass"])[self.focus_token])
            if stage["mass_start"] - mass < self.thresholds.min_mass_change:
                stage["counted"] = False
            self._close("dilution", t, float(info["loss"]), mass_end=mass)


def _interp(a, i, f):
    a = np.asarray(a)
    return a[i] + f * (a[i + 1] - a[i]) if f > 0 else a[i]


def detect_stages(
    ts: Float[Array | np.ndarray, " T"],
    *,
    loss,
    speed,
    entropy_rate,
    mass_rate,
    sv_rate,
    sv_ratio,
    att_mass,
    right_sv=None,
    log_d: float,
    unigram: float,
    thresholds: StageThresholds | None = None,
    labels: Sequence[str] | None = None,
) -> tuple[list[dict], list[dict]]:
    r"""Stages of sampled curves: the event machine run on piecewise-linear data.

    Runs the same [`StageDetector`][gradflow.StageDetector] as [`gradflow.integrate_stages`][], with
    each event time found by linear interpolation between samples instead of a
    root find on the solver's interpolant. Useful on saved trajectories and on
    synthetic curves.

    **Arguments:** the monitored curves at times `ts` (shape `(T,)`):
    `loss`, `speed`, `entropy_rate` of shape `(T,)`; `mass_rate`, `att_mass` of
    shape `(T, d)`; `sv_rate`, `sv_ratio` of shape `(T, n)`; optionally
    `right_sv` of shape `(T, k, d)`. `log_d`, `unigram`: the loss levels
    $\log d$ and $H(\pi)$.

    **Returns:** `(stages, events)`, lists of dicts.
    """
    ts = np.asarray(ts, dtype=np.float64)
    T = ts.shape[0]
    curves = {
        "loss": np.asarray(loss, dtype=np.float64),
        "speed": np.asarray(speed, dtype=np.float64),
        "entropy_rate": np.asarray(entropy_rate, dtype=np.float64),
        "mass_rate": np.asarray(mass_rate, dtype=np.float64),
        "sv_rate": np.asarray(sv_rate, dtype=np.float64),
        "sv_ratio": np.asarray(sv_ratio, dtype=np.float64),
        "att_mass": np.asarray(att_mass, dtype=np.float64),
    }
    if right_sv is not None:
        curves["right_sv"] = np.asarray(right_sv, dtype=np.float64)
    for name, value in curves.items():
        if value.shape[:1] != (T,):
            raise ValueError(
                f"{name} must have {T} samples along its first axis (one per time), "
                f"got shape {value.shape}"
            )
    if T < 2 or not (np.diff(ts) > 0).all():
        raise ValueError("ts must hold at least two strictly increasing times")
    thresholds = StageThresholds() if thresholds is None else thresholds
    d = curves["mass_rate"].shape[1]
    det = StageDetector(
        d,
        curves["sv_rate"].shape[1],
        t0=ts[0],  # pyright: ignore[reportArgumentType]
        loss0=curves["loss"][0],
        log_d=log_d,
        unigram=unigram,
        thresholds=thresholds,
        labels=labels,
    )
    mask = det.active()
    last = max(curves["sv_rate"].shape[1] - 1, 0)  # (conditions past it are off)

    def at(i, f):
        return {k: _interp(v, i, f) for k, v in curves.items()}

    def conds(i, f):
        return np.array(
            condition_values(
                at(i, f), det.focus_token, min(det.direction_index, last), thresholds
            ),
            dtype=np.float64,
        )

    i, f = 0, 0.0
    skip = None
    while i < T - 1:
        old = conds(i, f)
        new = conds(i + 1, 0.0)
        can = mask & (old <= 0) & (new > 0)
        if skip is not None and skip[0] == i:
            can[skip[1]] = False
        if not can.any():
            i, f = i + 1, 0.0
            continue
        # Root of each crossing condition on this (linear) piece; the earliest wins.
        frac = np.where(can, old / np.where(can, old - new, 1.0), np.inf)
        k = int(np.argmin(frac))
        f_event = f + (1.0 - f) * float(frac[k])
        t_event = ts[i] + f_event * (ts[i + 1] - ts[i])
        det.fire(BUILTIN_EVENTS[k], t_event, at(i, f_event))  # pyright: ignore[reportArgumentType]
        mask = det.active()
        # Restarting on its own root must not fire it again: off for the rest
        # of this piece (after it, it must first cross back).
        if f_event >= 1.0:
            i, f = i + 1, 0.0
        else:
            f = f_event
        skip = (i, k)
    stages = det.finish(ts[-1], curves["loss"][-1], at(T - 2, 1.0) if T > 1 else None)
    return stages, det.events


__all__ = [
    "BUILTIN_EVENTS",
    "StageDetector",
    "StageThresholds",
    "condition_values",
    "detect_stages",
    "monitor",
]


def stages_from_params(
    ts,
    params: Params,
    chain: MarkovChain,
    thresholds: StageThresholds | None = None,
) -> tuple[list[dict], list[dict], dict[str, np.ndarray]]:
    r"""Stages of any sequence of saved parameters (a flow, an SGD run, ...).

    Evaluates [`gradflow.diagnostics`][] and [`gradflow.monitor`][] at every
    saved point (`params` with a leading time axis) and runs
    [`gradflow.detect_stages`][] on the sampled curves. The rates are those of
    the population flow at the saved points (exact `jax.jvp` along
    $-\nabla L$), so for SGD iterates they describe the drift SGD follows on
    average, not its noise.

    **Returns:** `(stages, events, curves)`: lists of dicts, and the
    diagnostics and rates as NumPy arrays with a leading time axis.
    """
    from ._chain import entropy_bounds
    from ._diagnostics import diagnostics

    ts_j = jnp.asarray(ts, dtype=jnp.float64)
    params = jax.tree.map(jnp.asarray, params)
    chain_dt = jax.tree.map(lambda x: x.astype(params.W0.dtype), chain)
    ts_j = ts_j.astype(params.W0.dtype)

    @jax.jit
    def observe(t, p, c):
        out = diagnostics(p, c)
        out.update({k: v for k, v in monitor(t, p, c).items() if k not in out})
        return out

    curves = jax.tree.map(
        np.asarray, jax.vmap(observe, in_axes=(0, 0, None))(ts_j, params, chain_dt)
    )
    levels = entropy_bounds(chain)
    stages, events = detect_stages(
        np.asarray(ts, dtype=np.float64),
        loss=curves["loss"],
        speed=curves["speed"],
        entropy_rate=curves["entropy_rate"],
        mass_rate=curves["mass_rate"],
        sv_rate=curves["sv_rate"],
        sv_ratio=curves["sv_ratio"],
        att_mass=curves["att_mass"],
        right_sv=curves["right_sv_W0"],
        log_d=levels["log_d"],
        unigram=levels["unigram"],
        thresholds=thresholds,
        labels=chain.tokens,
    )
    return stages, events, curves
