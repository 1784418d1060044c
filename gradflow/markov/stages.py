r"""Stages of training, found from curves saved along a trajectory
(definitions and thresholds in `docs/stages.md`).

Two pure pieces:

- [`gradflow.markov.observe`][] `(t, params, chain)`: every observable the detector
  reads, at one point (jit- and vmap-able; the save function of
  `integrate(stages=True)`): loss, $|\nabla L|$, the $\pi$-weighted attention
  entropy, the attention mass per key token, all singular values and right
  singular vectors of $W_0$, and their exact rates per unit of $\log t$ (one
  `jax.jvp` along $-\nabla L$).
- [`gradflow.markov.detect_stages`][] `(ts, observations, chain=...)`: the stages
  (typed [`gradflow.Stage`][] records) of those curves, on the host, with every
  boundary interpolated between save points.

[`gradflow.markov.observe_params`][] evaluates `observe` over saved parameters (a
trajectory saved without stages, an SGD run), and
[`gradflow.markov.stages_from_params`][] chains the two (both in `problem.py`).
The curves, their rates and the plateaus are the engine's, shared with the
generic stages of every problem (`gradflow._stages`).
"""

from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from .._core.records import STAGE_KINDS, EventRecord, Stage, stage_events
from .._stages import Curves, StageThresholds, plateau_intervals
from .chain import MarkovChain
from .model import AnyParams, attention_summary, population_loss
from .observables import point_diagnostics


_TINY = 1e-300

# The keys detect_stages reads (observe returns more: the figures' scalars).
DETECTOR_KEYS = ("loss", "att_entropy", "att_mass", "sv_ratio", "right_sv_W0")


def observe(t, params: AnyParams, chain: MarkovChain) -> dict[str, Array]:
    r"""Every observable of one point that stage detection and the figures read.

    Pure, jit- and vmap-able, the save function of `integrate(stages=True)`.
    No `(d, d)` array is returned (the attention matrix is saved separately,
    when asked for). With $n = \min(m, d)$:

    | key | shape | meaning |
    | --- | --- | --- |
    | `loss`, `grad_norm` | `()` | $L$, $\lvert\nabla L\rvert$ |
    | `att_entropy` | `()` | $H_A = \sum_i \pi_i H(A_{i\cdot})$ |
    | `att_mass` | `(d,)` | $M_k = \sum_i \pi_i A_{ik}$: attention mass on key token $k$ |
    | `sv_W0` | `(n,)` | singular values of $W_0$, decreasing |
    | `sv_ratio` | `(n - 1,)` | $r_k = \sigma_{k+1}/\sigma_1$, $k = 1..n-1$ |
    | `right_sv_W0` | `(n, d)` | every right singular vector of $W_0$ (largest entry $> 0$) |

    plus the scalars of [`gradflow.markov.diagnostics`][] (norms, `sv_W1`, stable
    ranks, alignment cosines, `cos_v_pi`). `t` is accepted (the signature of
    a Diffrax save function) and unused: the detector takes its rates from
    the saved curves ([`gradflow.markov.detect_stages`][]).
    """
    del t
    loss, grad = jax.value_and_grad(population_loss)(params, chain)
    A = attention_summary(params, chain)
    out = point_diagnostics(params, chain, loss, grad, A)
    s = out["sv_W0"]
    out["sv_ratio"] = s[1:] / jnp.maximum(s[0], _TINY)
    return out


# -- detection on saved curves ------------------------------------------------


def _curves(ts, obs: Mapping[str, np.ndarray], chain, window: float) -> Curves:
    r"""The saved curves with the four rates per unit $\log t$ the stages are
    defined by: the speed of the loss (relative to its range $\log d -
    H(P|\pi)$), of the attention entropy (relative to $H(\pi)$), of the
    attention mass per token, and of $\log(\sigma_{k+1}/\sigma_1)$."""
    c = Curves(ts, obs, window)
    loss_range = np.log(chain.d) - float(chain.conditional_entropy)
    log_r = np.log(np.maximum(obs["sv_ratio"], _TINY))
    c.obs.update(
        speed=-c.rate(obs["loss"]) / loss_range,
        entropy_rate=c.rate(obs["att_entropy"]) / float(chain.unigram_entropy),
        mass_rate=c.rate(obs["att_mass"]),
        sv_rate=c.rate(log_r),
    )
    return c


def _top_tokens(weights: np.ndarray, share: float) -> list[int]:
    """The fewest tokens, by weight, carrying `share` of the positive weight."""
    order = np.argsort(-weights, kind="stable")
    pos = np.maximum(weights[order], 0.0)
    total = pos.sum()
    if total <= 0:
        return []
    n = int(np.searchsorted(np.cumsum(pos), share * total - 1e-15 * total)) + 1
    return [int(k) for k in order[: min(n, int((pos > 0).sum()))]]


def _focus_episodes(c: Curves, th: StageThresholds, H_pi: float):
    """Each fall of the attention entropy: it starts when the entropy rate
    falls through `-focus_rate`, its tokens are read where the entropy falls
    fastest, and it ends where their mass peaks or the entropy bottoms out,
    whichever comes first. Returns dicts of `(i, f)` points and tokens."""
    e = c.obs["entropy_rate"]
    mass, rate = c.obs["att_mass"], c.obs["mass_rate"]
    H = c.obs["att_entropy"]
    T = e.shape[0]
    out, pos = [], (0, -1.0)
    while True:
        start = c.first_crossing(e, -th.focus_rate, False, pos)
        if start is None:
            return out
        bottom = c.first_crossing(e, 0.0, True, start)
        last = bottom[0] + 1 if bottom is not None else T - 1
        lo = start[0] + 1
        if lo > last:  # the whole fall lies between two saves
            lo = last
        steepest = lo + int(np.argmin(e[lo : last + 1]))
        tokens = _top_tokens(rate[steepest], th.token_share)
        end, complete = bottom, bottom is not None
        if tokens:
            peak = c.first_crossing(
                rate[:, tokens].sum(axis=1), 0.0, False, (steepest - 1, 1.0)
            )
            if peak is not None:
                peak = c.refine_max(mass[:, tokens].sum(axis=1), peak)
            if peak is not None and (bottom is None or peak < bottom):
                end, complete = peak, True
        if end is None:
            end = (T - 1, 0.0)
        gain = c.at(mass, *end) - c.at(mass, *start)
        tokens = sorted([k for k in tokens if gain[k] > 0], key=lambda k: -gain[k])
        drop = c.at(H, *start) - c.at(H, *end)
        out.append(
            dict(
                start=start,
                end=end,
                complete=complete,
                tokens=tokens,
                mass_gain=float(gain[tokens].sum()) if tokens else 0.0,
                entropy_drop=float(drop) / H_pi,
            )
        )
        pos = end if bottom is None or end > bottom else bottom
        if pos[0] >= T - 1:
            return out


def _bursts(c: Curves, rho: np.ndarray, rate: float):
    """Maximal intervals where `rho > rate`, as `(start, end or None)`."""
    ups = c.crossings(rho, rate, True)
    downs = c.crossings(rho, rate, False)
    out = []
    if rho[0] > rate:
        ups = [(0, 0.0)] + ups
    for a in ups:
        b = next((d for d in downs if d > a), None)
        if out and out[-1][1] is not None and a < out[-1][1]:
            continue
        out.append((a, b))
    return out


def _openings(c: Curves, th: StageThresholds, k: int):
    """The openings of $r_k = \\sigma_{k+1}/\\sigma_1$: each upward crossing of
    `direction_open` after the ratio was below `direction_low`, widened to the
    growth bursts ($\rho_k >$ `direction_rate`) around its two ends; plus a
    burst still running at the end that started below `direction_low`."""
    r, rho = c.obs["sv_ratio"][:, k], c.obs["sv_rate"][:, k]
    bursts = _bursts(c, rho, th.direction_rate)

    def burst_at(p):
        for a, b in bursts:
            if a <= p and (b is None or p <= b):
                return a, b
        return None

    out = []
    highs = c.crossings(r, th.direction_open, True)
    lows = c.crossings(r, th.direction_low, True)
    done = (0, -1.0)
    for hi in highs:
        lo = max((p for p in lows if done < p <= hi), default=None)
        if lo is None:
            continue  # it was not below direction_low since the last opening
        b_lo, b_hi = burst_at(lo), burst_at(hi)
        start = b_lo[0] if b_lo is not None else lo
        end = b_hi[1] if b_hi is not None else hi
        if b_hi is not None and b_hi[1] is None:
            end = None
        out.append((start, end, lo, hi))
        done = hi
        if end is None:
            return out
    # a direction opening at the last save: a burst that began below
    # direction_low and is still running
    if bursts and bursts[-1][1] is None:
        a = bursts[-1][0]
        if a > done and c.at(r, *a) < th.direction_low:
            out.append((a, None, None, None))
    return out


def _check_observations(ts, observations, chain):
    missing = [k for k in DETECTOR_KEYS if k not in observations]
    if missing:
        raise ValueError(
            f"observations lack {missing}: pass the dict of gradflow.markov.observe "
            "(or observe_params) evaluated at every time of ts"
        )
    ts = np.asarray(ts, dtype=np.float64)
    if ts.ndim != 1 or ts.shape[0] < 3 or not (np.diff(ts) > 0).all():
        raise ValueError(
            f"ts must hold at least three strictly increasing times, got shape "
            f"{ts.shape}"
        )
    obs = {k: np.asarray(observations[k], dtype=np.float64) for k in DETECTOR_KEYS}
    for k, v in obs.items():
        if v.shape[:1] != ts.shape:
            raise ValueError(
                f"observations[{k!r}] must have one entry per time of ts "
                f"({ts.shape[0]}), got shape {v.shape}"
            )
    d = obs["att_mass"].shape[1]
    if d != chain.d:
        raise ValueError(f"observations have {d} tokens but chain has d = {chain.d}")
    # a solve that stopped early pads its saves with non-finite values
    keep = np.isfinite(obs["loss"])
    if not keep.all():
        n = int(np.argmin(keep))
        ts = ts[:n]
        obs = {k: v[:n] for k, v in obs.items()}
        if ts.shape[0] < 3:
            raise ValueError("observations hold fewer than three finite saves")
    return ts, obs


def _check_detect_arguments(ts, observations, chain, thresholds, labels):
    """`(thresholds, ts, observations, labels)` of `detect_stages`, checked in
    the order of its arguments' errors: thresholds, chain, observations,
    labels."""
    th = StageThresholds() if thresholds is None else thresholds
    if not isinstance(th, StageThresholds):
        raise TypeError(
            f"thresholds must be a gradflow.StageThresholds, got {type(th).__name__}"
        )
    if not isinstance(chain, MarkovChain):
        raise TypeError(
            f"chain must be a gradflow.MarkovChain, got {type(chain).__name__}"
        )
    ts, obs = _check_observations(ts, observations, chain)
    if labels is None:
        labels = chain.tokens or [str(k) for k in range(chain.d)]
    labels = [str(x) for x in labels]
    if len(labels) != chain.d:
        raise ValueError(f"labels must have d = {chain.d} entries, got {len(labels)}")
    return th, ts, obs, labels


class _Detection:
    """One run of the detector over a trajectory's curves: each kind of stage
    is read off in its own step, appending [`gradflow.Stage`][] records;
    `stages()` sorts them."""

    def __init__(
        self, c: Curves, th: StageThresholds, chain: MarkovChain, labels: list[str]
    ):
        self.c, self.th, self.labels = c, th, labels
        self.H_pi = float(chain.unigram_entropy)
        self.log_d = float(np.log(chain.d))
        # an interval still open at the last save ends there
        self.last: Any = (c.ts.shape[0] - 1, 0.0)
        self.records: list[Stage] = []
        self.cycle_starts: list[Any] = []

    def rec(self, name, cycle, a, b, tokens=(), *, complete=True, **extra):
        """Appends the stage `name` of `cycle` from `a` to `b` (`(i, f)`
        points; `b` is `None` while it is still open)."""
        b = self.last if b is None else b
        self.records.append(
            self.c.stage(
                name,
                self.c.obs["loss"],
                a,
                b,
                cycle=cycle,
                tokens=tuple(tokens),
                token_labels=tuple(self.labels[k] for k in tokens),
                complete=complete,
                **extra,
            )
        )

    def cycle_at(self, p) -> int:
        return 1 + sum(1 for s in self.cycle_starts if s <= p)

    def new_directions(self) -> None:
        """The openings of every singular-value ratio, numbered into cycles
        (overlapping openings share a cycle)."""
        c, th, last = self.c, self.th, self.last
        directions = []
        n = c.obs["sv_ratio"].shape[1]
        V = c.obs["right_sv_W0"]
        for k in range(n):
            for a, b, _, _ in _openings(c, th, k):
                directions.append((a, b, k))
        directions.sort(key=lambda x: (x[0], x[2]))
        T = c.ts.shape[0]
        open_until, cycles = None, []
        for a, b, _ in directions:
            if open_until is None or a > open_until:  # a new cycle
                self.cycle_starts.append(a)
            cycles.append(len(self.cycle_starts) + 1)
            if b is None:
                open_until = (T, 0.0)
            else:
                open_until = b if open_until is None else max(open_until, b)
        for (a, b, k), cyc in zip(directions, cycles):
            v = c.at(V[:, k + 1], *(last if b is None else b))
            tokens = [int(np.argmax(v)), int(np.argmin(v))]
            r = c.obs["sv_ratio"][:, k]
            self.rec(
                "new_direction",
                cyc,
                a,
                b,
                tokens,
                complete=b is not None,
                sv_index=k + 1,
                ratio_start=c.at(r, *a),
                ratio_end=c.at(r, *(last if b is None else b)),
                direction=tuple(v),
            )

    def plateaus(self) -> list:
        r"""The condensation (if the loss starts nearer $\log d$ than $H(\pi)$)
        and the plateaus; returns the plateau entries."""
        plateaus, _ = plateau_intervals(self.c, self.c.obs["speed"], self.th)
        entries = [p[0] for p in plateaus]
        if self.c.obs["loss"][0] > 0.5 * (self.log_d + self.H_pi):
            end = entries[0] if entries else None
            self.rec("condensation", 1, (0, 0.0), end, complete=end is not None)
        for a, b in plateaus:
            self.rec("plateau", self.cycle_at(a), a, b, complete=b is not None)
        return entries

    def focuses(self, entries: list) -> None:
        """The focuses large enough to record, each followed by its dilution
        (up to the next plateau entry or focus) if its tokens lost mass."""
        c, th, last = self.c, self.th, self.last
        mass, H = c.obs["att_mass"], c.obs["att_entropy"]
        focuses = [
            f
            for f in _focus_episodes(c, th, self.H_pi)
            if f["tokens"]
            and f["entropy_drop"] >= th.min_entropy_drop
            and f["mass_gain"] >= th.min_mass_change
        ]
        for j, f in enumerate(focuses):
            G = f["tokens"]
            a, b = f["start"], f["end"]
            cyc = self.cycle_at(a)
            self.rec(
                "focus",
                cyc,
                a,
                b,
                G,
                complete=f["complete"],
                mass_start=c.at(mass, *a)[G].sum(),
                mass_end=c.at(mass, *b)[G].sum(),
                entropy_start=c.at(H, *a),
                entropy_end=c.at(H, *b),
            )
            if not f["complete"]:
                continue
            stops = [p for p in entries if p > b]
            if j + 1 < len(focuses):
                stops.append(focuses[j + 1]["start"])
            stop = min(stops) if stops else None
            m0 = c.at(mass, *b)[G].sum()
            m1 = c.at(mass, *(last if stop is None else stop))[G].sum()
            if m0 - m1 >= th.min_mass_change:
                self.rec(
                    "dilution",
                    cyc,
                    b,
                    stop,
                    G,
                    complete=stop is not None,
                    mass_start=m0,
                    mass_end=m1,
                    entropy_start=c.at(H, *b),
                    entropy_end=c.at(H, *(last if stop is None else stop)),
                )

    def stages(self) -> tuple[Stage, ...]:
        """The records as `Stage`s, sorted by start time (ties: in the order
        of `STAGE_KINDS`, then by singular-value index)."""
        order = {name: i for i, name in enumerate(STAGE_KINDS)}
        return tuple(
            sorted(
                self.records,
                key=lambda s: (s.t_start, order[s.name], s.sv_index or 0),
            )
        )


def detect_stages(
    ts: Float[Array, " T"],
    observations: Mapping[str, Any],
    *,
    chain: MarkovChain,
    thresholds: StageThresholds | None = None,
    labels: Sequence[str] | None = None,
) -> tuple[Stage, ...]:
    r"""The stages of a trajectory, from the observations saved along it.

    Pure host code (NumPy): every boundary is a threshold crossing of a saved
    curve, located by linear interpolation (in $\log t$) between the two saves
    around it. The definitions are in `docs/stages.md`; in short:

    - `condensation`: from the start (if the loss starts nearer $\log d$ than
      $H(\pi)$) to the first plateau;
    - `plateau`: from the speed $s$ falling through `entry_speed` to its rising
      through `escape_speed`;
    - `focus`: from the entropy rate falling through `-focus_rate` to the peak
      of the attention mass of its tokens (or the entropy's minimum, if that
      comes first), recorded if the entropy fell by `min_entropy_drop`
      $H(\pi)$ and the mass of its tokens rose by `min_mass_change`;
    - `dilution`: from a focus's end to the next plateau or focus, recorded if
      the mass of the focus tokens fell by `min_mass_change`;
    - `new_direction`: for every $k$, each opening of $\sigma_{k+1}/\sigma_1$
      of $W_0$ from below `direction_low` to above `direction_open`, widened
      to the growth bursts ($\rho_k >$ `direction_rate`) around it.

    **Arguments:**

    - `ts`: the save times, shape `(T,)`, strictly increasing.
    - `observations`: the dict of [`gradflow.markov.observe`][] at every time of `ts`
      (leading axis `T`), e.g. from [`gradflow.markov.observe_params`][] or a
      trajectory's `extras`. Non-finite trailing saves (a solve that stopped
      early) are ignored.
    - `chain`: the [`gradflow.MarkovChain`][] (its $H(\pi)$ and $\log d$).
    - `thresholds`: a [`gradflow.StageThresholds`][] (defaults when `None`).
    - `labels`: token labels (default `chain.tokens`, else `"0"`, `"1"`, ...).

    **Returns:** a tuple of [`gradflow.Stage`][], sorted by start time.
    """
    # `times`: `ts` as float64, cut where the saves stop being finite
    th, times, obs, labels = _check_detect_arguments(
        ts, observations, chain, thresholds, labels
    )
    run = _Detection(_curves(times, obs, chain, th.rate_window), th, chain, labels)
    run.new_directions()  # first: they number the cycles
    entries = run.plateaus()
    run.focuses(entries)
    return run.stages()


def stages_from_observations(
    ts, observations: Mapping[str, Any], chain: MarkovChain, thresholds=None
) -> tuple[tuple[Stage, ...], tuple[EventRecord, ...]]:
    """`(stages, events)`: [`gradflow.markov.detect_stages`][] and the stages'
    boundaries as event records ([`gradflow.stage_events`][])."""
    stages = detect_stages(ts, observations, chain=chain, thresholds=thresholds)
    return stages, stage_events(stages)


__all__ = [
    "DETECTOR_KEYS",
    "detect_stages",
    "observe",
    "stage_events",
    "stages_from_observations",
]
