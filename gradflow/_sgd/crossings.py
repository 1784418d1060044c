r"""Where a loss curve crosses a level, and the level the first drop of a
flow reaches: shared by `gradflow.compare` and the ensemble comparison."""

import math

import numpy as np


def crossing_time(ts: np.ndarray, loss: np.ndarray, level: float) -> float:
    """The first time the loss falls to `level`, interpolated linearly in
    $\\log t$ between saves (in $t$ when the earlier save is at `t = 0`); `nan`
    if it never does."""
    below = np.flatnonzero(loss <= level)
    if below.size == 0:
        return math.nan
    i = int(below[0])
    if i == 0:
        return float(ts[0])
    t0, t1, l0, l1 = ts[i - 1], ts[i], loss[i - 1], loss[i]
    f = (l0 - level) / (l0 - l1) if l0 != l1 else 1.0
    if t0 > 0:
        return float(math.exp(math.log(t0) + f * (math.log(t1) - math.log(t0))))
    return float(t0 + f * (t1 - t0))


def first_drop_target(traj, levels: dict[str, tuple[str, float]]) -> float:
    r"""The level the flow's first drop reaches: the highest reference level of
    the problem clearly below the start (the paper's model: $H(\pi)$, below
    $\log d$), else the loss where the flow enters its first plateau after
    the start, else its final loss."""
    start, final = float(traj.loss[0]), float(traj.loss[-1])
    gap = 1e-3 * max(abs(start - final), 1e-300)
    below = [v for _, v in levels.values() if v < start - gap]
    if below:
        return max(below)
    for stage in traj.stages:
        if stage.name == "plateau" and stage.t_start > 0:
            return float(stage.loss_start)
    return final


__all__ = ["crossing_time", "first_drop_target"]
