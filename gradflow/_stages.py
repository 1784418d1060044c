r"""Stages of any problem, found on the curves saved along a trajectory after
the solve (`docs/problems.md`, "Generic stages"), and the pieces every stage detector shares.

- [`gradflow.StageThresholds`][]: the detectors' thresholds, one place for
  their defaults.
- `Curves`: saved curves of a trajectory with interpolation between saves
  (linear in $\log t$), secant rates per unit $\log t$, threshold
  crossings located between saves, and the stage record between two points.
- `plateau_intervals`: the candidate saddles of a trajectory, by hysteresis
  on its speed $s = -\frac{dL}{d\log t}/\ell$ (the same rule as the saddle
  events located during the solve).
- `stages_and_rests`: the stages of every problem: `plateau` (a candidate
  that a saddle test keeps: the flow near a critical point with an unstable
  direction), `drop` (from one plateau to the next) and `rank` (a change in
  the number of singular values of a matrix parameter above `rank_tol` times
  its largest), and the candidates that the saddle test dropped.
- `observe_saves`: a problem's observables at every saved point, batched.

The paper's model adds its own stages on top of these
(`gradflow.markov.stages`).
"""

import dataclasses
import math
from collections.abc import Callable, Mapping
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ._core.records import Stage


def _positive(name: str, value) -> None:
    if isinstance(value, bool) or not (
        isinstance(value, (int, float)) and math.isfinite(value) and value > 0
    ):
        raise ValueError(
            f"StageThresholds.{name} must be finite and > 0, got {value!r}"
        )


class StageThresholds(eqx.Module):
    r"""Thresholds of the stage detector, the one place for their defaults
    (shared by [`gradflow.flow`][], `integrate`, [`gradflow.markov.detect_stages`][],
    SGD runs and sweeps). Each is justified by measurements across chain
    families in `docs/stages.md`.

    **Arguments:**

    - `rate_window`: every rate is a secant over this many e-folds of $t$
      (0.03: about the spacing of the default 400 log-spaced saves).
    - `escape_speed`, `entry_speed`: a plateau (saddle) is left when the
      speed $s = -\frac{dL}{d\log t}/\ell$ rises above `escape_speed` and
      entered when it falls below `entry_speed` (hysteresis: `entry_speed <
      escape_speed`); $\ell$ is the problem's loss scale
      ([`gradflow.StagedProblem.loss_scale`][]; $\log d - H_{\text{cond}}$ for the
      paper's model).
    - `level_escape_speed`, `level_entry_speed`: the same hysteresis for the
      generic stages and the saddle events of every problem that is not a
      [`gradflow.StagedProblem`][], whose speed is scale-free: the loss's
      fall per unit $\log t$ against its own level above the floor,
      $s = -\frac{d\log(L - L_{\text{floor}})}{d\log t}$ (`loss_level`;
      `docs/stages.md`, "Scale-free plateaus"): a plateau is entered where the
      loss falls by less than 10 % of its height per e-fold of $t$, left where
      it falls by more than 20 % (measured: at most 0.09 on the plateaus of
      the staircases of `docs/stages.md`, at least 2.7 at the peak of their
      drops).
    - `focus_rate`: a focus starts when the attention entropy falls faster
      than `focus_rate` (per unit $\log t$, relative to $H(\pi)$).
    - `min_entropy_drop`: a focus is recorded only if the entropy fell by at
      least this fraction of $H(\pi)$; a dilution only if it rose back by
      at least this fraction.
    - `min_mass_change`: ... and only if the attention mass of its tokens
      rose (fell) by at least this much.
    - `token_share`: the focus tokens are the fewest tokens, by gain, that
      carry this share of the attention mass gained in the focus.
    - `direction_rate`: a new direction opens while $\sigma_{k+1}/\sigma_1$
      grows faster than $t^{\text{direction\_rate}}$.
    - `direction_low`, `direction_open`: a new direction is an opening of
      $\sigma_{k+1}/\sigma_1$ from below `direction_low` to above
      `direction_open` (from small to order one).
    - `direction_ratio`: read only by the solve-time event machine that
      `integrate` still uses (a direction starts only while the ratio is below
      it); the detector on saved curves does not use it.
    - `rank_tol`: for the generic `rank` records of every problem: a singular
      value of a matrix parameter counts towards its rank when it exceeds
      `rank_tol` times the largest one.
    - `saddle_growth`: for the generic stages of every problem: a slow stretch
      of the flow is a plateau (a saddle) only if the top growth rate
      $\lambda_u$ of the flow linearised at its closest approach to a
      critical point (the largest eigenvalue of $-\nabla^2 L$ there), times
      the stretch's end time, is at least `saddle_growth`: the unstable
      direction grows by at least that many e-folds over it. A minimum (no
      $\lambda_u > 0$: a convex loss anywhere, the end of learning) or a
      direction that grows too slowly to matter is no saddle
      (`docs/stages.md`).
    """

    rate_window: float = 0.03
    escape_speed: float = 1e-2
    entry_speed: float = 5e-3
    level_escape_speed: float = 0.2
    level_entry_speed: float = 0.1
    focus_rate: float = 5e-2
    min_entropy_drop: float = 1e-2
    min_mass_change: float = 0.02
    token_share: float = 0.8
    direction_rate: float = 1.0
    direction_low: float = 0.05
    direction_open: float = 0.3
    direction_ratio: float = 0.1
    rank_tol: float = 0.1
    saddle_growth: float = 0.1

    def __check_init__(self):
        for f in dataclasses.fields(self):
            _positive(f.name, getattr(self, f.name))
        for entry, escape in (
            ("entry_speed", "escape_speed"),
            ("level_entry_speed", "level_escape_speed"),
        ):
            if getattr(self, entry) >= getattr(self, escape):
                raise ValueError(
                    f"StageThresholds.{entry} must be < {escape} (hysteresis), got "
                    f"{entry} = {getattr(self, entry)} and "
                    f"{escape} = {getattr(self, escape)}"
                )
        if self.token_share > 1 or self.rank_tol >= 1:
            name = "token_share" if self.token_share > 1 else "rank_tol"
            bound = "<= 1" if name == "token_share" else "< 1"
            raise ValueError(
                f"StageThresholds.{name} must be {bound}, got {getattr(self, name)!r}"
            )
        if self.direction_open <= self.direction_low:
            raise ValueError(
                "StageThresholds.direction_open must be > direction_low, got "
                f"direction_open = {self.direction_open} and "
                f"direction_low = {self.direction_low}"
            )

    def speeds(self, level: bool) -> tuple[float, float]:
        """`(escape, entry)`: the speeds of the saddle hysteresis, for the
        scale-free speed (`level`) or the one against the loss scale."""
        if level:
            return self.level_escape_speed, self.level_entry_speed
        return self.escape_speed, self.entry_speed


# -- curves -------------------------------------------------------------------


def log_time(ts: np.ndarray) -> np.ndarray:
    r"""$u = \log t$ of save times; `t = 0` (the first save) sits one grid step
    before the first positive time."""
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


# A point between saves: `(i, f)`, the fraction `f` of the way (in log t) from
# save `i` to save `i + 1`.
Point = tuple[int, float]


class Curves:
    r"""Saved curves with interpolation between saves (linear in $\log t$).

    `obs` holds curves with a leading time axis (a detector adds its derived
    rates to it); `rate(y)` is the secant rate of a curve per unit $\log t$
    over `window` e-folds."""

    def __init__(self, ts, obs: Mapping[str, np.ndarray], window: float):
        self.ts = ts
        self.u = log_time(ts)
        self.obs = dict(obs)
        self.window = window

    def rate(self, y: np.ndarray) -> np.ndarray:
        r"""$dy/d\log t$ at every save (the secant rate over `window`
        e-folds of $t$)."""
        u = self.u.copy()
        if not np.isfinite(u[0]):  # two saves only after t = 0
            u[0] = u[1] - 1.0
        return secant_rate(u, y, self.window)

    def time(self, i: int, f: float) -> float:
        if f <= 0:
            return float(self.ts[i])
        if f >= 1:
            return float(self.ts[i + 1])
        if self.ts[i] <= 0:
            return float(self.ts[i] + f * (self.ts[i + 1] - self.ts[i]))
        return float(np.exp(self.u[i] + f * (self.u[i + 1] - self.u[i])))

    def position(self, u: float) -> Point:
        """`(i, f)` of the log time `u`."""
        i = int(
            np.clip(np.searchsorted(self.u, u, side="right") - 1, 0, len(self.u) - 2)
        )
        return i, float(np.clip((u - self.u[i]) / (self.u[i + 1] - self.u[i]), 0, 1))

    def refine_max(self, y: np.ndarray, p: Point) -> Point:
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

    def stage(self, name: str, loss: np.ndarray, a: Point, b: Point, **fields) -> Stage:
        """The [`gradflow.Stage`][] `name` from `a` to `b` (`(i, f)` points):
        its times and the `loss` curve's values there, with its other
        `fields` (`cycle`, ...)."""
        return Stage(
            name=name,
            t_start=self.time(*a),
            t_end=self.time(*b),
            loss_start=self.at(loss, *a),
            loss_end=self.at(loss, *b),
            **fields,
        )

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

    def first_crossing(self, y, level, up, after: Point) -> Point | None:
        """The first crossing strictly after the point `after = (i, f)`."""
        i0, f0 = after
        for i, f in self.crossings(y, level, up, lo=i0):
            if (i, f) > (i0, f0):
                return i, f
        return None


LOSS_RESOLUTION = 1e5
r"""The loss level that the speed is judged against never falls below this
many machine epsilons (of the loss's dtype) times the loss scale $\ell$:
below it, the loss's fall is round-off, not a stage."""


def loss_level(loss, scale, floor, eps: float):
    r"""The level $\lambda$ against which the loss's fall is judged, the
    speed being $s = -\frac{dL}{d\log t}/\lambda = t|\nabla L|^2/\lambda$
    (`docs/stages.md`, "Scale-free plateaus"): the height of the loss above
    its floor, $\lambda = \min(\ell, \max(L - L_{\text{floor}},\;
    10^5\,\epsilon\,\ell))$, so that a plateau of a staircase is told from a
    drop wherever the loss stands; the constant $\ell$ where `floor` is
    `None` (a [`gradflow.StagedProblem`][] judges its loss against its own
    scale). NumPy or JAX arrays alike."""
    if floor is None:
        return scale
    xp = np if isinstance(loss, (np.ndarray, float, np.floating)) else jnp
    low = LOSS_RESOLUTION * eps * scale
    return xp.minimum(scale, xp.maximum(loss - floor, low))


def plateau_intervals(
    c: Curves,
    speed: np.ndarray,
    th: StageThresholds,
    *,
    start_still: bool = True,
    level: bool = False,
) -> tuple[list[tuple[Point, Point | None]], Point | None]:
    """Hysteresis on the speed: `[(entry, escape or None)]` of every plateau
    entered after the start, and the first escape (a flow that starts still
    starts on the plateau it leaves first; with `start_still=False`, one
    already moving, there is no first escape: `None`). `level`: the speed is
    the scale-free one, read against `level_escape_speed` and
    `level_entry_speed` (else `escape_speed`, `entry_speed`)."""
    escape, entry_speed = th.speeds(level)
    out, in_saddle, pos = [], start_still, (0, -1.0)
    first_escape = None
    entry = None
    while True:
        if in_saddle:
            nxt = c.first_crossing(speed, escape, True, pos)
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
            nxt = c.first_crossing(speed, entry_speed, False, pos)
            if nxt is None:
                return out, first_escape
            in_saddle, pos, entry = True, nxt, nxt


# -- the generic stages ---------------------------------------------------------


def _stage(c: Curves, loss, name: str, *, cycle: int, a: Point, b: Point | None):
    last = (c.ts.shape[0] - 1, 0.0)
    end = last if b is None else b
    return c.stage(name, loss, a, end, cycle=cycle, complete=b is not None)


def _rank_changes(c: Curves, loss, name: str, sv: np.ndarray, tol: float):
    """A `rank` record at every crossing of `tol` by a ratio
    $\\sigma_k/\\sigma_1$ of the singular values `sv` (shape `(T, n)`) that
    changes the count of those above it; the first save's rank is the start."""
    ratio = sv / np.maximum(sv[:, :1], 1e-300)
    rank = np.sum(ratio > tol, axis=1)
    changes = []
    for k in range(1, sv.shape[1]):
        for up in (True, False):
            changes += [(p, up) for p in c.crossings(ratio[:, k], tol, up)]
    out, current = [], int(rank[0])
    for p, up in sorted(changes):
        current += 1 if up else -1
        out.append(c.stage("rank", loss, p, p, cycle=0, leaf=name, rank=current))
    return out


# A candidate plateau's saddle test: `(lo, hi, t_end)` (the saves it spans
# and its end time) -> True (a saddle), False (no saddle), None (cannot tell:
# kept).
SaddleTest = Callable[[int, int, float], bool | None]


def stages_and_rests(
    ts,
    loss,
    observations: Mapping[str, Any],
    *,
    loss_scale: float,
    thresholds,
    start_still: bool | None = None,
    saddle: SaddleTest | None = None,
    floor: float | None = None,
) -> tuple[tuple[Stage, ...], tuple[tuple[float, float], ...]]:
    r"""The stages every problem has (`docs/problems.md`), from curves saved along a
    trajectory, and the `(t_start, t_end)` of every candidate plateau that the
    saddle test dropped (the saddle events located during the solve inside
    them are dropped too). The stages:

    - `plateau`: from the speed $s = -\frac{dL}{d\log t}/\lambda$ (the loss's
      fall per unit $\log t$ against its level $\lambda$ above `floor`,
      `loss_level`; the loss scale $\ell$ where `floor` is `None`) falling through
      `entry_speed` to its rising through `escape_speed`, where `saddle`
      finds a saddle there; a flow that starts still (`start_still`: a start
      near a critical point, `gradflow/_problem/curvature.py`; `None`: the
      speed at the first save at most `escape_speed`) starts on its first
      plateau, at `ts[0]`;
    - `drop`: from a plateau's end to the next plateau's start (or the last
      save, or where the flow comes to rest at a point that is no saddle); a
      flow that does not start on a plateau (a start that is no critical
      point: the soft committee machine's origin, a convex quadratic) begins
      with a drop, of cycle 0;
    - `rank`: for every observation `sv<path>` (the singular values of a
      matrix parameter, as the default [`gradflow.ObservedProblem.observe`][] saves
      them), each time the number of them above `rank_tol` times the largest
      changes, with `leaf` the parameter's path and `rank` the new count.

    `saddle(lo, hi, t_end)` tests each candidate (the saves `lo..hi` it
    spans, its end time): `False` drops it (a slow stretch that is no saddle
    belongs to the drop around it), `True` or `None` (cannot tell) keeps it;
    without `saddle` every candidate is kept.

    `cycle` numbers the plateaus (a drop has its plateau's); a rank record has
    the cycle of the plateau or drop it falls in. Non-finite trailing saves (a
    solve that stopped early) are ignored.
    """
    th = thresholds
    kind = np.asarray(loss).dtype
    eps = float(np.finfo(kind).eps) if kind.kind == "f" else 2.2e-16
    ts, loss = np.asarray(ts, np.float64), np.asarray(loss, np.float64)
    n = int(np.argmin(np.isfinite(loss))) if not np.isfinite(loss).all() else ts.size
    ts, loss = ts[:n], loss[:n]
    if ts.size < 3:
        return (), ()
    c = Curves(ts, {}, th.rate_window)
    scale = max(float(loss_scale), 1e-300)
    speed = -c.rate(loss) / loss_level(loss, scale, floor, eps)
    escape = th.speeds(floor is not None)[0]
    still = bool(speed[0] <= escape) if start_still is None else start_still
    later, first_escape = plateau_intervals(
        c, speed, th, start_still=still, level=floor is not None
    )
    candidates: list[tuple[Point, Point | None]] = list(later)
    if still:
        candidates.insert(0, ((0, 0.0), first_escape))
    plateaus: list[tuple[Point, Point | None]] = []
    rests: list[tuple[Point, Point | None]] = []
    last: Point = (ts.size - 1, 0.0)
    for a, b in candidates:
        end = last if b is None else b
        if (
            saddle is None
            or saddle(a[0], min(end[0] + 1, ts.size - 1), c.time(*end)) is not False
        ):
            plateaus.append((a, b))
        else:
            rests.append((a, b))
    # A drop ends at the next plateau, or where the flow comes to rest at no
    # saddle at the end (a minimum), or at the last save.
    rest_at_end = rests[-1][0] if rests and rests[-1][1] is None else None
    out = []
    if not plateaus or plateaus[0][0] != (0, 0.0):
        end = plateaus[0][0] if plateaus else rest_at_end
        out.append(_stage(c, loss, "drop", cycle=0, a=(0, 0.0), b=end))
    for k, (a, b) in enumerate(plateaus, start=1):
        out.append(_stage(c, loss, "plateau", cycle=k, a=a, b=b))
        if b is None:
            break
        nxt = plateaus[k][0] if k < len(plateaus) else rest_at_end
        out.append(_stage(c, loss, "drop", cycle=k, a=b, b=nxt))
    out = [s for s in out if not (s.name == "drop" and s.t_end <= s.t_start)]
    starts = [s.t_start for s in out]
    for key, value in observations.items():
        if key.startswith("sv") and np.ndim(value) == 2:
            for r in _rank_changes(
                c, loss, key[2:], np.asarray(value, np.float64)[:n], th.rank_tol
            ):
                # the cycle of the plateau or drop the record falls in
                j = int(np.searchsorted(starts, r.t_start, "right"))
                cycle = out[max(j - 1, 0)].cycle
                out.append(dataclasses.replace(r, cycle=int(cycle)))
    order = {"plateau": 0, "drop": 1, "rank": 2}
    stages = tuple(sorted(out, key=lambda s: (s.t_start, order[s.name])))
    times = tuple((c.time(*a), c.time(*(last if b is None else b))) for a, b in rests)
    return stages, times


# -- observables at the saved points ------------------------------------------


def matrix_spectra(params) -> dict[str, jax.Array]:
    """`{"sv" + path: singular values}` of every 2-D leaf of a parameter PyTree
    (one point): what the generic `rank` records read."""
    out = {}
    for path, leaf in jax.tree_util.tree_flatten_with_path(params)[0]:
        if jnp.ndim(leaf) == 2 and min(jnp.shape(leaf)) > 1:
            key = "sv" + jax.tree_util.keystr(path)
            out[key] = jnp.linalg.svd(leaf, compute_uv=False)
    return out


__all__ = [
    "Curves",
    "StageThresholds",
    "LOSS_RESOLUTION",
    "log_time",
    "loss_level",
    "matrix_spectra",
    "plateau_intervals",
    "secant_rate",
    "stages_and_rests",
]
