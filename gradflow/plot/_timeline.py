r"""The times an animation or the explorer shows, and the state between saves.

[`frame_times`][gradflow.plot.frame_times] paces the frames by stage rather than by time. The stage
boundaries cut the run's log-time axis into intervals; each interval gets
`EQUAL_SHARE` of the frames as an equal share, so that a short focus is on
screen as long as it needs, and the rest in proportion to its *progress*:
two thirds the share of the loss's whole fall that happens in it, one third
its share of $\log t$ (a plateau, where the loss hardly moves but the
weights do, keeps some frames). Within an interval the frames are spread
evenly in progress: dense where the loss falls, sparse where it rests.
[`interpolate`][gradflow.plot.interpolate] gives saved arrays (or a parameter PyTree) at any time,
linearly between the two saves around it.
"""

import jax
import numpy as np


# Boundaries closer than this fraction of the log-time range are merged.
_MERGE = 0.005
# Each interval's equal share of the frames; and in the progress measure,
# the weight of the loss's fall against that of log t.
EQUAL_SHARE = 0.4
LOSS_WEIGHT = 2 / 3


def first_positive(ts) -> float:
    """The first save time above 0 (a log-time axis starts there)."""
    ts = np.asarray(ts, dtype=float)
    positive = ts[ts > 0]
    return float(positive[0]) if positive.size else 1.0


def boundaries(result) -> np.ndarray:
    """The times that cut the run into intervals: its first positive and last
    save, and every stage's start and end in between (close ones merged)."""
    ts = np.asarray(result.ts, dtype=float)
    lo, hi = first_positive(ts), float(ts[-1])
    cuts = [lo, hi]
    for s in result.stages:
        for t in (s.t_start, s.t_end):
            if np.isfinite(t) and lo < t < hi:
                cuts.append(float(t))
    cuts = np.unique(cuts)
    span = np.log(hi / lo) if hi > lo else 1.0
    keep = [cuts[0]]
    for t in cuts[1:]:
        if np.log(t / keep[-1]) > _MERGE * span:
            keep.append(t)
    if keep[-1] != hi:
        keep[-1] = hi
    return np.asarray(keep)


def progress(result) -> tuple[np.ndarray, np.ndarray]:
    r"""`(log t, p)` at the positive save times: `p` rises from 0 to 1,
    `LOSS_WEIGHT` of it with the loss's fall (|change| summed) and the rest
    with $\log t$."""
    ts = np.asarray(result.ts, dtype=float)
    loss = np.asarray(result.loss, dtype=float)
    keep = (ts > 0) & np.isfinite(loss)
    log_t, loss = np.log(ts[keep]), loss[keep]
    fall = np.concatenate([[0.0], np.cumsum(np.abs(np.diff(loss)))])
    span = log_t - log_t[0]
    p = (1 - LOSS_WEIGHT) * span / (span[-1] or 1.0)
    p = p + LOSS_WEIGHT * (
        fall / fall[-1] if fall[-1] > 0 else span / (span[-1] or 1.0)
    )
    return log_t, p


def frame_times(result, n: int) -> np.ndarray:
    r"""`n` increasing times from the first positive save of `result` to its
    last, paced by stage rather than uniform in time: the stage boundaries
    cut the log-time axis into intervals; each interval gets an equal share
    of `EQUAL_SHARE` (0.4) of the frames, so that a short stage is on
    screen as long as it needs, and the rest in proportion to its progress
    (two thirds its share of the loss's fall, one third its share of
    $\log t$); within an interval the frames are spread evenly in progress.
    The frames of [`animate`][gradflow.plot.animate] and of the explorer's
    slider."""
    cuts = boundaries(result)
    if cuts.size < 2 or cuts[-1] <= cuts[0] or n < 2:
        return np.full(n, float(np.asarray(result.ts)[-1]))
    log_t, p = progress(result)
    at_cuts = np.interp(np.log(cuts), log_t, p)
    gains = np.diff(at_cuts)
    k = gains.size
    weight = EQUAL_SHARE / k + (1 - EQUAL_SHARE) * gains / (at_cuts[-1] - at_cuts[0])
    counts = np.maximum(1, np.floor(weight * (n - 1)).astype(int))
    while counts.sum() > n - 1:  # (the minimum of one frame per interval)
        counts[np.argmax(counts)] -= 1
    counts[np.argmax(weight)] += (n - 1) - counts.sum()
    parts = []
    for j, c in enumerate(counts):
        lo, hi = at_cuts[j], at_cuts[j + 1]
        if hi > lo:  # evenly in progress (progress rises strictly with log t)
            targets = lo + (hi - lo) * np.arange(c) / c
            parts.append(np.exp(np.interp(targets, p, log_t)))
        else:
            parts.append(np.geomspace(cuts[j], cuts[j + 1], c, endpoint=False))
    times = np.concatenate([*parts, cuts[-1:]])
    times[0] = cuts[0]  # (exactly: exp(log(t)) may round)
    return times


def interpolate(ts, values, times):
    r"""`values` (arrays with a leading save axis, or a PyTree of them, saved
    at `ts`) at `times`, linear in $t$ between the two saves around each
    (clipped to the saved range): the state of a run between its saves."""
    ts = np.asarray(ts, dtype=float)
    times = np.clip(np.asarray(times, dtype=float), ts[0], ts[-1])
    i = np.clip(np.searchsorted(ts, times, side="right") - 1, 0, len(ts) - 2)
    gap = ts[i + 1] - ts[i]
    f = np.where(gap > 0, (times - ts[i]) / np.where(gap > 0, gap, 1.0), 0.0)

    def one(x):
        x = np.asarray(x)
        w = f.reshape((-1,) + (1,) * (x.ndim - 1))
        return (1 - w) * x[i] + w * x[i + 1]

    return jax.tree.map(one, values)


def active_stages(stages, t: float) -> list:
    """The stages under way at `t` (instants such as `rank` left out)."""
    out = []
    for s in stages:
        end = s.t_end if np.isfinite(s.t_end) else np.inf
        if s.name != "rank" and s.t_start <= t <= end and end > s.t_start:
            out.append(s)
    return out


def stage_caption(stages, t: float) -> str:
    """What is under way at `t`: `"focus (cycle 1) + new direction (cycle
    2)"`, or `"between stages"`."""
    names = [f"{s.name.replace('_', ' ')} (cycle {s.cycle})"
             for s in active_stages(stages, t)]  # fmt: skip
    # (two directions opening in one cycle are named once)
    return " + ".join(dict.fromkeys(names)) if names else "between stages"


__all__ = [
    "EQUAL_SHARE",
    "active_stages",
    "boundaries",
    "first_positive",
    "frame_times",
    "interpolate",
    "progress",
    "stage_caption",
]
