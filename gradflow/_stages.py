r"""Stages of training, found from curves saved along a trajectory
(SPEC section 4; definitions and thresholds in `docs/stages.md`).

Two pure pieces:

- [`gradflow.observe`][] `(t, params, chain)`: every observable the detector
  reads, at one point (jit- and vmap-able; the save function of
  `integrate(stages=True)`): loss, $|\nabla L|$, the $\pi$-weighted attention
  entropy, the attention mass per key token, all singular values and right
  singular vectors of $W_0$, and their exact rates per unit of $\log t$ (one
  `jax.jvp` along $-\nabla L$).
- [`gradflow.detect_stages`][] `(ts, observations, chain=...)`: the stages
  (typed [`gradflow.Stage`][] records) of those curves, on the host, with every
  boundary interpolated between save points.

[`gradflow.observe_params`][] evaluates `observe` over saved parameters (a
trajectory saved without stages, an SGD run), and
[`gradflow.stages_from_params`][] chains the two.
"""

from collections.abc import Mapping, Sequence
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from ._chain import MarkovChain
from ._diagnostics import point_diagnostics
from ._loop import save_buffer_size
from ._model import AnyParams, Params, attention_summary, population_loss
from ._records import EventRecord
from ._stage_types import STAGE_KINDS, Stage, StageThresholds


_TINY = 1e-300

# The keys detect_stages reads (observe returns more: the figures' scalars).
DETECTOR_KEYS = ("loss", "att_entropy", "att_mass", "sv_ratio", "right_sv_W0")


def observe(t, params: Params, chain: MarkovChain) -> dict[str, Array]:
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

    plus the scalars of [`gradflow.diagnostics`][] (norms, `sv_W1`, stable
    ranks, alignment cosines, `cos_v_pi`). `t` is accepted (the signature of
    a Diffrax save function) and unused: the detector takes its rates from
    the saved curves ([`gradflow.detect_stages`][]).
    """
    del t
    loss, grad = jax.value_and_grad(population_loss)(params, chain)
    A = attention_summary(params, chain)
    out = point_diagnostics(params, chain, loss, grad, A)
    s = out["sv_W0"]
    out["sv_ratio"] = s[1:] / jnp.maximum(s[0], _TINY)
    return out


# A batch of `observe_params` holds at most this many entries per (d, d)
# intermediate (2**24 float64 entries: 128 MiB): 512 points up to d = 181, 64
# at d = 512, 16 at d = 1024.
OBSERVE_BATCH_ENTRIES = 2**24


@eqx.filter_jit
def _observe_many(ts, params: Params, chain: MarkovChain):
    # Module level, chain as an argument: one compilation per shape and dtype,
    # not one per call (or per chain).
    return jax.vmap(observe, in_axes=(0, 0, None))(ts, params, chain)


def observe_params(
    ts, params: AnyParams, chain: MarkovChain, *, batch: int = 512
) -> dict[str, np.ndarray]:
    r"""[`gradflow.observe`][] at every saved point: `params` with a leading
    time axis of length `len(ts)` (a trajectory's `traj.params`, an SGD run's).

    Evaluated in batches of at most `batch` saves and at most
    `OBSERVE_BATCH_ENTRIES / d**2` (so memory stays bounded at large `d`; the
    last batch padded, so one compilation serves every length above the batch,
    and one each bucket of `save_buffer_size` below). **Returns:** a dict of NumPy arrays with
    a leading time axis.
    """
    ts = np.asarray(ts, dtype=np.float64)
    if ts.ndim != 1 or ts.shape[0] != np.shape(params.W0)[0]:
        raise ValueError(
            f"ts must be one time per saved point: got ts of shape {ts.shape} and "
            f"params with {np.shape(params.W0)[0]} points"
        )
    dtype = jnp.asarray(params.W0).dtype
    chain_dt = jax.tree.map(lambda x: jnp.asarray(x, dtype), chain)
    T = ts.shape[0]
    # batches of a bucketed length (the last point repeated): one compilation
    # serves nearby numbers of saves, as for the solve's save buffer; and at
    # most OBSERVE_BATCH_ENTRIES / d^2 points, since each point holds a few
    # (d, d) intermediates (at d = 512 a batch of 320 peaked at 6.8 GB)
    d = int(np.shape(params.W0)[-1])
    size = min(batch, save_buffer_size(T), max(1, OBSERVE_BATCH_ENTRIES // d**2))
    chunks = []
    for lo in range(0, T, size):
        hi = min(lo + size, T)
        idx = np.minimum(np.arange(lo, lo + size), hi - 1)
        out = _observe_many(
            jnp.asarray(ts[idx], dtype),
            # gathered on the host (a device gather compiles once per shape)
            jax.tree.map(lambda x, i=idx: jnp.asarray(np.asarray(x)[i]), params),
            chain_dt,
        )
        chunks.append({k: np.asarray(v)[: hi - lo] for k, v in out.items()})
    return {k: np.concatenate([c[k] for c in chunks]) for k in chunks[0]}


# -- detection on saved curves ------------------------------------------------


def _log_time(ts: np.ndarray) -> np.ndarray:
    # t = 0 (the first save) sits one grid step before the first positive time
    u = np.log(np.where(ts > 0, ts, np.nan))
    if ts[0] <= 0 and ts.shape[0] > 2:
        u[0] = 2 * u[1] - u[2]
    return u


def secant_rate(u: np.ndarray, y: np.ndarray, window: float) -> np.ndarray:
    r"""$\frac{dy}{d\log t}$ at every save, as the secant over a window of
    `window` e-folds of $t$ centred on it (narrower at the two ends), with `y`
    interpolated linearly in $u = \log t$ between saves. Rates measured this
    way resolve what the saves resolve; an oscillation faster than the window
    (the attention entropy of late cycles oscillates with a period of about
    1 % of $t$, below the save spacing) averages out instead of aliasing."""
    lo = np.maximum(u - window / 2, u[0])
    hi = np.minimum(u + window / 2, u[-1])

    def interp(x):
        i = np.clip(np.searchsorted(u, x, side="right") - 1, 0, u.shape[0] - 2)
        f = (x - u[i]) / (u[i + 1] - u[i])
        f = f.reshape(f.shape + (1,) * (y.ndim - 1))
        return y[i] + f * (y[i + 1] - y[i])

    span = (hi - lo).reshape((-1,) + (1,) * (y.ndim - 1))
    return (interp(hi) - interp(lo)) / span


class _Curves:
    r"""Saved curves with interpolation between saves (linear in $\log t$),
    and the four rates per unit $\log t$ the stages are defined by."""

    def __init__(self, ts, obs: Mapping[str, np.ndarray], chain, window: float):
        self.ts = ts
        self.u = _log_time(ts)
        self.obs = dict(obs)
        self.window = window
        u = self.u.copy()
        if not np.isfinite(u[0]):  # two saves only after t = 0
            u[0] = u[1] - 1.0
        loss_range = np.log(chain.d) - float(chain.conditional_entropy)
        log_r = np.log(np.maximum(obs["sv_ratio"], _TINY))
        self.obs.update(
            speed=-secant_rate(u, obs["loss"], window) / loss_range,
            entropy_rate=secant_rate(u, obs["att_entropy"], window)
            / float(chain.unigram_entropy),
            mass_rate=secant_rate(u, obs["att_mass"], window),
            sv_rate=secant_rate(u, log_r, window),
        )

    def time(self, i: int, f: float) -> float:
        if f <= 0:
            return float(self.ts[i])
        if f >= 1:
            return float(self.ts[i + 1])
        if self.ts[i] <= 0:
            return float(self.ts[i] + f * (self.ts[i + 1] - self.ts[i]))
        return float(np.exp(self.u[i] + f * (self.u[i + 1] - self.u[i])))

    def position(self, u: float) -> tuple[int, float]:
        """`(i, f)` of the log time `u`."""
        i = int(
            np.clip(np.searchsorted(self.u, u, side="right") - 1, 0, len(self.u) - 2)
        )
        return i, float(np.clip((u - self.u[i]) / (self.u[i + 1] - self.u[i]), 0, 1))

    def refine_max(self, y: np.ndarray, p: tuple[int, float]) -> tuple[int, float]:
        r"""The maximum of the saved curve `y` near `p` (a zero of its secant
        rate, which an asymmetric peak shifts by a fraction of the window):
        the largest save within one window of `p`, refined by the parabola
        through it and its two neighbours (in $\log t$)."""
        u0 = self.u[p[0]] + p[1] * (self.u[p[0] + 1] - self.u[p[0]])
        near = np.flatnonzero(np.abs(self.u - u0) <= self.window)
        near = near[(near > 0) & (near < len(self.u) - 1)]
        if near.size == 0:
            return p
        j = int(near[np.argmax(y[near])])
        x = self.u[j - 1 : j + 2] - self.u[j]
        a, b, _ = np.polyfit(x, y[j - 1 : j + 2], 2)
        vertex = -b / (2 * a) if a < 0 else 0.0
        vertex = float(np.clip(vertex, x[0], x[2]))
        return self.position(self.u[j] + vertex)

    def at(self, y: np.ndarray, i: int, f: float):
        if f <= 0 or i + 1 >= y.shape[0]:
            return y[i]
        return y[i] + f * (y[i + 1] - y[i])

    def crossings(self, y: np.ndarray, level: float, up: bool, lo: int = 0):
        """`(i, f)` of every crossing of `level` by `y` (upwards or downwards),
        from save `lo` on: `y[i] <= level < y[i+1]` (or the mirror), at the
        fraction `f` of that interval."""
        z = (y - level) if up else (level - y)
        a, b = z[lo:-1], z[lo + 1 :]
        idx = np.flatnonzero((a <= 0) & (b > 0))
        return [(int(i) + lo, self._root(z, int(i) + lo)) for i in idx]

    def _root(self, z: np.ndarray, i: int) -> float:
        r"""Where `z` (with `z[i] <= 0 < z[i+1]`) crosses 0 in `[t_i, t_{i+1}]`,
        as a fraction of the interval in $\log t$: the root of the cubic through
        the saves `i-1 .. i+2` (quadratic or linear at the ends), kept only if
        it lies in the interval and the cubic is monotone there; otherwise the
        linear root."""
        linear = float(z[i] / (z[i] - z[i + 1]))
        j = np.arange(max(i - 1, 0), min(i + 3, z.shape[0]))
        if j.shape[0] < 3 or not np.isfinite(self.u[j]).all():
            return linear
        x = (self.u[j] - self.u[i]) / (self.u[i + 1] - self.u[i])
        coef = np.polyfit(x, z[j], j.shape[0] - 1)
        grid = np.linspace(0.0, 1.0, 9)
        vals = np.polyval(coef, grid)
        if not (np.diff(vals) >= 0).all():
            return linear
        lo, hi = 0.0, 1.0
        for _ in range(40):  # bisection on a monotone cubic
            mid = 0.5 * (lo + hi)
            if np.polyval(coef, mid) > 0:
                hi = mid
            else:
                lo = mid
        return 0.5 * (lo + hi)

    def first_crossing(self, y, level, up, after: tuple[int, float]):
        """The first crossing strictly after the point `after = (i, f)`."""
        i0, f0 = after
        for i, f in self.crossings(y, level, up, lo=i0):
            if (i, f) > (i0, f0):
                return i, f
        return None


def _key(c, p):
    return c.time(*p)


def _plateaus(c: _Curves, th: StageThresholds):
    """Hysteresis on the speed: `[(entry, escape or None)]` (as `(i, f)`), and
    the first escape (the start leaves the saddle at the origin)."""
    speed = c.obs["speed"]
    out, in_saddle, pos = [], True, (0, -1.0)
    first_escape = None
    entry = None
    while True:
        if in_saddle:
            nxt = c.first_crossing(speed, th.escape_speed, True, pos)
            if nxt is None:
                if entry is not None:
                    out.append((entry, None))
                return out, first_escape
            if entry is not None:
                out.append((entry, nxt))
            elif first_escape is None:
                first_escape = nxt
            in_saddle, pos, entry = False, nxt, None
        else:
            nxt = c.first_crossing(speed, th.entry_speed, False, pos)
            if nxt is None:
                return out, first_escape
            in_saddle, pos, entry = True, nxt, nxt


def _top_tokens(weights: np.ndarray, share: float) -> list[int]:
    """The fewest tokens, by weight, carrying `share` of the positive weight."""
    order = np.argsort(-weights, kind="stable")
    pos = np.maximum(weights[order], 0.0)
    total = pos.sum()
    if total <= 0:
        return []
    n = int(np.searchsorted(np.cumsum(pos), share * total - 1e-15 * total)) + 1
    return [int(k) for k in order[: min(n, int((pos > 0).sum()))]]


def _focus_episodes(c: _Curves, th: StageThresholds, H_pi: float):
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


def _bursts(c: _Curves, rho: np.ndarray, rate: float):
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


def _openings(c: _Curves, th: StageThresholds, k: int):
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
            f"observations lack {missing}: pass the dict of gradflow.observe "
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
    is read off in its own step, appending records (dicts of the fields of
    [`gradflow.Stage`][]); `stages()` sorts them into `Stage`s."""

    def __init__(
        self, c: _Curves, th: StageThresholds, chain: MarkovChain, labels: list[str]
    ):
        self.c, self.th, self.labels = c, th, labels
        self.H_pi = float(chain.unigram_entropy)
        self.log_d = float(np.log(chain.d))
        # an interval still open at the last save ends there
        self.last: Any = (c.ts.shape[0] - 1, 0.0)
        self.records: list[dict[str, Any]] = []
        self.cycle_starts: list[Any] = []

    def rec(self, name, cycle, a, b, tokens=(), *, complete=True, **extra):
        """Appends the stage `name` of `cycle` from `a` to `b` (`(i, f)`
        points; `b` is `None` while it is still open)."""
        c, loss = self.c, self.c.obs["loss"]
        b = self.last if b is None else b
        self.records.append(
            dict(
                name=name,
                cycle=cycle,
                t_start=c.time(*a),
                t_end=c.time(*b),
                loss_start=c.at(loss, *a),
                loss_end=c.at(loss, *b),
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
        plateaus, _ = _plateaus(self.c, self.th)
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
        records = sorted(
            self.records,
            key=lambda s: (s["t_start"], order[s["name"]], s.get("sv_index") or 0),
        )
        return tuple(Stage(**r) for r in records)


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
    - `observations`: the dict of [`gradflow.observe`][] at every time of `ts`
      (leading axis `T`), e.g. from [`gradflow.observe_params`][] or a
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
    run = _Detection(_Curves(times, obs, chain, th.rate_window), th, chain, labels)
    run.new_directions()  # first: they number the cycles
    entries = run.plateaus()
    run.focuses(entries)
    return run.stages()


_EVENT_NAMES = {
    "plateau": ("saddle_entry", "saddle_escape"),
    "focus": ("focus_start", "focus_end"),
    "new_direction": ("new_direction_start", "new_direction_end"),
}
# The names of the built-in events (stage boundaries); user events may not
# take them.
BUILTIN_EVENTS = tuple(n for pair in _EVENT_NAMES.values() for n in pair)


def stage_events(stages: Sequence[Stage]) -> tuple[EventRecord, ...]:
    """The boundaries of `stages` as [`gradflow.EventRecord`][]s (with
    `located=False`: their times are interpolated between saves), sorted by
    time: a plateau's start and end are `saddle_entry` and `saddle_escape`, a
    focus's `focus_start` and `focus_end` (with `token`, its first token), a
    new direction's `new_direction_start` and `new_direction_end` (with
    `sv_index`). An end still open at the last save is no event."""
    out = []
    for s in stages:
        names = _EVENT_NAMES.get(s.name)
        if names is None:
            continue
        extra: dict[str, Any] = {"located": False}
        if s.name == "focus" and s.tokens:
            extra["token"] = s.tokens[0]
        if s.name == "new_direction":
            extra["sv_index"] = s.sv_index
        out.append(EventRecord(names[0], s.t_start, s.loss_start, **extra))
        if s.complete:
            out.append(EventRecord(names[1], s.t_end, s.loss_end, **extra))
    out.sort(key=lambda e: e.t)
    return tuple(out)


def stages_from_params(
    ts,
    params: AnyParams,
    chain: MarkovChain,
    thresholds: StageThresholds | None = None,
) -> tuple[tuple[Stage, ...], tuple[EventRecord, ...], dict[str, np.ndarray]]:
    r"""Stages of any sequence of saved parameters (a flow saved without
    stages, an SGD run, ...): [`gradflow.observe_params`][] then
    [`gradflow.detect_stages`][].

    For SGD iterates the curves carry SGD's noise; the detector's rates are
    secants over `thresholds.rate_window` e-folds of $t$, which average it
    over that window. One compilation per shape: calling it again (another
    run, another chain of the same `d`) does not recompile.

    **Returns:** `(stages, events, observations)`: a tuple of
    [`gradflow.Stage`][], their boundaries as event records
    ([`gradflow.stage_events`][]), and the observations (NumPy arrays with a leading
    time axis).
    """
    obs = observe_params(ts, params, chain)
    stages = detect_stages(ts, obs, chain=chain, thresholds=thresholds)
    return stages, stage_events(stages), obs


__all__ = [
    "BUILTIN_EVENTS",
    "DETECTOR_KEYS",
    "detect_stages",
    "observe",
    "observe_params",
    "stage_events",
    "stages_from_params",
]
