r"""The theory report of any problem: predicted against measured rates
(`docs/theory.md`).

For every problem the report has a row per saddle the flow passed: the
escape rate that the linearisation at the refined critical point predicts
(its `unstable_rate`) against the rate measured on the trajectory (the slope
of $\log|\nabla L|$ on the flank after the plateau). A problem's package adds
its own rows (its closed forms) through the extension point
[`report_rows`][gradflow.theory.report_rows].
"""

import functools
import math
from typing import Any

import numpy as np

from .._core.threads import with_limited_blas_threads
from .._result.trajectory import Trajectory
from ._checks import check_trajectory
from ._critical import DEFAULT_PLATEAU_THRESHOLD, CriticalPoint, critical_points


def fit_rate(ts, values, lo, hi) -> tuple[float, float, float, int]:
    """Least-squares slope of `log(values)` against `ts` where
    `lo <= values <= hi`, on the first contiguous run of such saves.
    **Returns:** `(slope, t0, t1, n)` (NaN with fewer than 3 saves)."""
    ok = (values >= lo) & (values <= hi) & np.isfinite(values)
    idx = np.flatnonzero(ok)
    if idx.size == 0:
        return float("nan"), float("nan"), float("nan"), 0
    run = [idx[0]]
    for i in idx[1:]:
        if i != run[-1] + 1:
            break
        run.append(i)
    run = np.asarray(run)
    if run.size < 3:
        return float("nan"), float("nan"), float("nan"), int(run.size)
    slope = np.polyfit(ts[run], np.log(values[run]), 1)[0]
    return float(slope), float(ts[run[0]]), float(ts[run[-1]]), int(run.size)


def flank_rate(
    traj: Trajectory, index: int, low: float = 3.0, high: float = 10.0
) -> dict[str, float]:
    r"""The escape rate measured on the rising flank of $|\nabla L|$ after save
    `index` (a plateau's closest approach, where $|\nabla L| = g_{min}$).

    Near a saddle with top rate $\lambda$, $|\nabla L| \propto e^{\lambda t}$
    once the unstable mode dominates the decaying ones and while it is still
    small. The slope of $\log|\nabla L|$ is fitted on the first run of saves
    after `index` with $|\nabla L| \in [\text{low}\,g_{min},
    \text{high}\,g_{min}]$: above `low` the stable modes have decayed, below
    `high` the unstable amplitude is within a decade of its closest approach,
    so higher-order terms are small.

    **Returns:** `{"rate", "t0", "t1", "n"}` (`n` saves used; `rate` is NaN
    when fewer than 3 fit).
    """
    ts = np.asarray(traj.ts)[index:]
    g = np.asarray(traj.grad_norm)[index:]
    rate, t0, t1, n = fit_rate(ts, g, low * g[0], high * g[0])
    return {"rate": rate, "t0": t0, "t1": t1, "n": n}


def loss_crossing(ts, loss, level) -> float:
    """The first time `loss` falls to `level`, interpolated linearly in `t`
    between the bracketing saves (NaN if it never does, or starts below)."""
    below = np.flatnonzero(loss <= level)
    if below.size == 0 or below[0] == 0:
        return float("nan")
    i = below[0]
    # linear interpolation in t between the bracketing saves
    f = (loss[i - 1] - level) / (loss[i - 1] - loss[i])
    return float(ts[i - 1] + f * (ts[i] - ts[i - 1]))


def report_row(quantity, predicted, measured, note="") -> dict[str, Any]:
    """One row of a theory report, with the relative error of `measured`
    against `predicted` (NaN where it is undefined)."""
    predicted = float(predicted)
    measured = float(measured)
    if predicted != 0 and math.isfinite(predicted) and math.isfinite(measured):
        rel = abs(measured - predicted) / abs(predicted)
    else:
        rel = float("nan")
    return {
        "quantity": quantity,
        "predicted": predicted,
        "measured": measured,
        "rel_error": rel,
        "note": note,
    }


def saddle_rows(
    traj: Trajectory, points: list[CriticalPoint], later: list[int]
) -> list[dict[str, Any]]:
    """The escape-rate rows of the saddles `points[j]`, `j` in `later`: each
    refined saddle's `unstable_rate` against the slope of $\\log|\\nabla L|$
    on the flank after its plateau ([`flank_rate`][gradflow.theory.flank_rate])."""
    ts = np.asarray(traj.ts)
    rows: list[dict[str, Any]] = []
    for j in later:
        cp = points[j]
        if cp.kind != "saddle" or not cp.converged or cp.index >= len(ts) - 3:
            continue
        fr = flank_rate(traj, cp.index)
        if fr["n"] < 3:
            continue
        rows.append(
            report_row(
                f"plateau L={cp.loss:.5g} escape rate",
                cp.linearization.unstable_rate,
                fr["rate"],
                f"t* = {cp.t:.4g}, refined point {cp.distance:.2g} away; slope of "
                f"log|grad L| on t in [{fr['t0']:.4g}, {fr['t1']:.4g}], "
                f"{fr['n']} saves",
            )
        )
    return rows


@functools.singledispatch
def report_rows(
    problem, traj: Trajectory, points: list[CriticalPoint]
) -> list[dict[str, Any]]:
    """The rows of a theory report of `traj` (whose critical points are
    `points`): by default one escape-rate row per saddle
    ([`saddle_rows`][gradflow.theory.saddle_rows]). A problem's package
    registers its own (`report_rows.register(cls)`): the paper's model adds
    its closed forms for the escape from the origin, the unigram plateau and
    the focus."""
    del problem
    return saddle_rows(traj, points, list(range(len(points))))


@with_limited_blas_threads
def theory_report(
    traj: Trajectory,
    *,
    points: list[CriticalPoint] | None = None,
    threshold: float = DEFAULT_PLATEAU_THRESHOLD,
) -> list[dict[str, Any]]:
    r"""Predicted against measured, for every stage the linearisation explains.

    Rows are dicts `{"quantity", "predicted", "measured", "rel_error",
    "note"}`: for any problem, each saddle's escape rate (predicted: the
    top eigenvalue of $-\nabla^2 L$ at the refined critical point; measured:
    the slope of $\log|\nabla L|$ on the flank after its plateau); for the
    paper's model also its closed forms (`docs/theory.md`). Rows whose
    measurement is impossible on this trajectory are left out.

    **Arguments:** `traj`: a [`gradflow.Trajectory`][] (with its problem);
    `points`: its critical points (default [`gradflow.critical_points`][] of
    `traj` with `threshold`).

    **Returns:** the list of rows; [`format_report`][gradflow.theory.format_report]
    prints them as a table.
    """
    traj = check_trajectory(traj)
    if points is None:
        points = critical_points(traj, threshold=threshold)
    return report_rows(traj.problem, traj, points)


def format_report(rows: list[dict[str, Any]]) -> str:
    """The report as a fixed-width table."""
    head = (
        f"{'quantity':42s} {'predicted':>12s} {'measured':>12s} {'rel_error':>10s}"
        "  note"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(
            f"{r['quantity']:42s} {r['predicted']:12.6g} {r['measured']:12.6g} "
            f"{r['rel_error']:10.3g}  {r['note']}"
        )
    return "\n".join(lines)


__all__ = [
    "fit_rate",
    "flank_rate",
    "format_report",
    "loss_crossing",
    "report_row",
    "report_rows",
    "saddle_rows",
    "theory_report",
]
