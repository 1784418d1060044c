r"""The theory report of any problem: predicted against measured rates
(`docs/theory.md`).

For every problem the report has a row per saddle the flow passed: the
escape rate that the linearisation at the refined critical point predicts
(its `unstable_rate`) against the rate measured on the trajectory (the growth
rate of the displacement from the saddle along its top unstable modes, while
the flow is linear there: [`escape_rate`][gradflow.theory.escape_rate]); and
for a critical point the flow leaves without an unstable direction (a
degenerate saddle, left through higher orders), a row that says the escape
is not exponential instead of a ratio. A problem's package adds its own rows
(its closed forms) through the extension point
[`report_rows`][gradflow.theory.report_rows].
"""

import functools
import math
from typing import Any

import jax.numpy as jnp
import numpy as np

from .._core.threads import with_limited_blas_threads
from .._problem.curvature import flat_grad, flat_hvp, flatten_params, shape_of
from .._problem.functions import loss_floor
from .._result.trajectory import Trajectory
from ._checks import check_point, check_trajectory
from ._critical import CriticalPoint, critical_points


# The flow counts as linear near a critical point while the gradient's
# linear model there, H (theta - theta*), is within this relative error.
LINEAR_TOL = 0.05
# The top unstable cluster: the modes within this fraction of the top rate.
TOP_CLUSTER = 1e-2


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


def escape_rate(
    traj: Trajectory, point: CriticalPoint, *, linear_tol: float = LINEAR_TOL
) -> dict[str, float]:
    r"""The escape rate from a saddle measured on the trajectory: the slope of
    $\log|P(\theta(t) - \theta^*)|$ against $t$, where $\theta^*$ is the
    refined saddle and $P$ projects on the top unstable modes of its
    linearisation (eigenvalues of $-\nabla^2L$ within 1 % of the top one),
    fitted on the saves from the plateau's closest approach (`point.index`)
    on, as long as the flow is linear along those modes: $|P(\nabla
    L(\theta) - H\xi)| \le$ `linear_tol` $|PH\xi|$, $\xi = \theta -
    \theta^*$.

    There the projected displacement obeys $P\dot\xi = \lambda P\xi$ to
    `linear_tol`: it grows as $e^{\lambda t}$, the stable and slower modes
    projected out (a fit of $\log|\nabla L|$ mixes them, and leaves the
    linear range where the flow passes the saddle at a distance). A flow that
    never comes that close gives no rate.

    **Returns:** `{"rate", "t0", "t1", "n", "modes"}` (`n` saves used, `rate`
    NaN when fewer than 3 fit; `modes` the size of the top cluster).
    """
    lin = point.linearization
    top = lin.unstable_subspace(TOP_CLUSTER)
    problem = traj.problem
    if problem is None:
        raise ValueError("escape_rate needs the trajectory's problem (its loss)")
    like = shape_of(point.params)
    x_star = flatten_params(point.params)
    times, amplitudes = [], []
    for i in range(point.index, len(traj)):
        x = flatten_params(check_point(traj.at(i), problem))
        d = np.asarray(x - x_star)
        hd = np.asarray(flat_hvp(x_star, problem, like, jnp.asarray(d)))
        g = np.asarray(flat_grad(x, problem, like))
        # linear along the top modes: their velocity -P grad L is -P H d
        scale = float(np.linalg.norm(top @ hd))
        if not scale > 0 or float(np.linalg.norm(top @ (g - hd))) > linear_tol * scale:
            break
        times.append(float(traj.ts[i]))
        amplitudes.append(float(np.linalg.norm(top @ d)))
    ts, amp = np.asarray(times), np.asarray(amplitudes)
    n = int(ts.size)
    if n < 3 or not (amp > 0).all():
        nan = float("nan")
        return {"rate": nan, "t0": nan, "t1": nan, "n": n, "modes": len(top)}
    rate = float(np.polyfit(ts, np.log(amp), 1)[0])
    return {"rate": rate, "t0": ts[0], "t1": ts[-1], "n": n, "modes": len(top)}


def passed(traj: Trajectory, points: list[CriticalPoint], j: int) -> bool:
    """Whether the flow passed critical point `j` (of `points`, those of
    `traj`): a later plateau lies lower, or the loss falls well below it by
    the last save."""
    cp = points[j]
    below = [p.loss for p in points[j + 1 :]]
    final = float(np.asarray(traj.loss)[-1])
    drop = 1e-3 * max(abs(cp.loss), 1e-12)
    return any(x < cp.loss - drop for x in below) or final < cp.loss - drop


def not_exponential_row(cp: CriticalPoint, note: str) -> dict[str, Any]:
    """The row of a critical point the flow leaves without an unstable
    direction: no exponential rate to compare (predicted 0, measured NaN,
    no relative error), and `note` says why."""
    return {
        "quantity": f"plateau L={cp.loss:.5g} escape: not exponential",
        "predicted": 0.0,
        "measured": float("nan"),
        "rel_error": float("nan"),
        "note": note,
    }


def saddle_rows(
    traj: Trajectory, points: list[CriticalPoint], later: list[int]
) -> list[dict[str, Any]]:
    """The escape rows of the critical points `points[j]`, `j` in `later`:
    each converged saddle's `unstable_rate` against the rate measured on the
    trajectory ([`escape_rate`][gradflow.theory.escape_rate]; left out where
    the flow never comes within the linear range), and for a point the flow
    leaves without an unstable direction (above the floor of the loss, where
    the problem gives one: no global minimum) a row saying the escape is not
    exponential."""
    ts = np.asarray(traj.ts)
    floor = loss_floor(traj.problem)
    rows: list[dict[str, Any]] = []
    for j in later:
        cp = points[j]
        if not cp.converged or cp.index >= len(ts) - 3:
            continue
        if cp.kind != "saddle":
            above = floor is None or cp.loss > floor + 1e-9
            if above and passed(traj, points, j):
                rows.append(
                    not_exponential_row(
                        cp,
                        f"t* = {cp.t:.4g}: no unstable direction at the refined point "
                        f"(top rate {cp.linearization.unstable_rate:.3g}, zero within "
                        f"{cp.linearization.tol:.2g}), yet the flow leaves it: higher "
                        "orders drive the escape, so there is no exponential rate",
                    )
                )
            continue
        er = escape_rate(traj, cp)
        if er["n"] < 3:
            continue
        rows.append(
            report_row(
                f"plateau L={cp.loss:.5g} escape rate",
                cp.linearization.unstable_rate,
                er["rate"],
                f"t* = {cp.t:.4g}, refined point {cp.distance:.2g} away; growth of "
                f"the displacement along the top {er['modes']} unstable mode(s) on t "
                f"in [{er['t0']:.4g}, {er['t1']:.4g}], {er['n']} saves within "
                f"{LINEAR_TOL:.0%} of the linearisation",
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
    threshold: float | None = None,
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
    "LINEAR_TOL",
    "escape_rate",
    "fit_rate",
    "flank_rate",
    "format_report",
    "loss_crossing",
    "not_exponential_row",
    "passed",
    "report_row",
    "report_rows",
    "saddle_rows",
    "theory_report",
]
