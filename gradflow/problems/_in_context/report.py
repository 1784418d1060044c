r"""In-context regression's rows of the theory report and its symmetries
(`docs/problems.md`, section "In-context regression"): each plateau's level
against $L_S$, the escape from each saddle predicted by the closed form and
by `gf.linearize` at the exact saddle, and measured along the flow (the
slope of $\log|\nabla L|$ where the escape is exponential, the cubic law
where it is not); registered with [`gradflow.theory.report_rows`][] and
[`gradflow.theory.gauge_rank`][].

What is measured on a trajectory is public too:
[`in_context_learnt_times`][gradflow.theory.in_context_learnt_times] (when
each eigen-component reaches a fraction of its learnt value) and
[`in_context_cubic_rate`][gradflow.theory.in_context_cubic_rate] (the rate
of the cubic escape, $\lambda_j^2$ predicted).
"""

import math
from typing import Any

import jax
import numpy as np

from ..._core.validate import check_positive_finite
from ..._result.trajectory import Trajectory
from ...theory._critical import CriticalPoint, plateaus
from ...theory._linearize import gauge_rank, linearize
from ...theory._report import (
    fit_rate,
    flank_rate,
    report_row,
    report_rows,
    saddle_rows,
)
from .problem import InContextRegression, MergedHeads, SeparateHeads, attention_matrix
from .theory import (
    cubic_antiderivative,
    eigen_spectrum,
    in_context_aligned_start,
    in_context_learning_time,
    in_context_level,
    in_context_saddle,
    in_context_saddle_rate,
)


def _problem_of(traj) -> InContextRegression:
    if not isinstance(traj, Trajectory):
        raise TypeError(
            f"traj must be a gradflow.Trajectory, got {type(traj).__name__}"
        )
    if not isinstance(traj.problem, InContextRegression):
        raise TypeError(
            "traj must be a trajectory of a gradflow.problems.InContextRegression, "
            f"got one of {type(traj.problem).__name__}"
        )
    return traj.problem


def _learnt_values(problem: InContextRegression) -> np.ndarray:
    r"""$\gamma_i = 1/A_i$, largest eigenvalue first."""
    return 1 / eigen_spectrum(problem)[1]


def trajectory_modes(traj: Trajectory) -> np.ndarray:
    r"""$\operatorname{diag}(U^\top\Gamma U)$ at every save, shape `(saves, D)`:
    `traj.extras["modes"]`, or computed from the saved parameters."""
    if "modes" in traj.extras:
        return np.asarray(traj.extras["modes"])
    problem = _problem_of(traj)
    U = problem.eigen()[1]
    gammas = np.asarray(jax.vmap(attention_matrix)(traj.params))
    return np.einsum("di,tde,ei->ti", U, gammas, U)


def in_context_learnt_times(traj: Trajectory, fraction: float = 0.5) -> np.ndarray:
    r"""When each eigen-direction is learnt: the first save time at which
    $\tilde\Gamma_{ii} = (U^\top\Gamma U)_{ii}$ reaches `fraction` of its
    learnt value $\gamma_i = 1/A_i$, one time per direction (largest
    eigenvalue first; NaN where it never does). Between the bracketing saves
    it interpolates $F(\tilde\Gamma_{ii}^{1/3})$ linearly in $t$ ($F$ of
    [`in_context_learning_time`][gradflow.theory.in_context_learning_time],
    which the aligned flow makes exactly linear; extrapolated from the two
    saves before when the later save is within 1 % of $\gamma_i$, where the
    solver's error swamps $F$), linearly in $\tilde\Gamma_{ii}$ where $F$
    is undefined.

    **Arguments:** `traj`: a trajectory of a
    [`gradflow.problems.InContextRegression`][]; `fraction` in $(0, 1)$.
    """
    problem = _problem_of(traj)
    fraction = check_positive_finite("fraction", fraction)
    if fraction >= 1:
        raise ValueError(f"fraction must lie in (0, 1), got fraction = {fraction!r}")
    modes, ts = trajectory_modes(traj), np.asarray(traj.ts)
    gamma = _learnt_values(problem)
    out = np.full(gamma.size, math.nan)
    for i, g in enumerate(gamma):
        above = np.flatnonzero(modes[:, i] >= fraction * g)
        if above.size == 0 or above[0] == 0:
            continue
        k = int(above[0])
        out[i] = _crossing(ts, modes[:, i], k, fraction * g, g)
    return out


def _crossing(ts, m, k: int, target: float, g: float) -> float:
    r"""Where `m` reaches `target` between saves `k - 1` and `k`: linear in
    $F(m^{1/3})$ when both saves lie in $(0, 0.99\gamma)$; from saves `k - 2`,
    `k - 1` (extrapolated in $F$) when save `k` is nearly learnt (there the
    solver's relative error, magnified by $1/(\gamma - m)$, swamps $F$);
    linear in `m` where $F$ is undefined."""
    cube = g ** (1 / 3)

    def F(x):
        return cubic_antiderivative(np.cbrt(x), cube)

    if 0 < m[k - 1] and m[k] < 0.99 * g:
        i, j = k - 1, k
    elif k >= 2 and 0 < m[k - 2] < m[k - 1] < 0.99 * g:
        i, j = k - 2, k - 1
    else:
        f = (target - m[k - 1]) / (m[k] - m[k - 1])
        return float(ts[k - 1] + f * (ts[k] - ts[k - 1]))
    f = (F(target) - F(m[i])) / (F(m[j]) - F(m[i]))
    return float(ts[i] + f * (ts[j] - ts[i]))


def in_context_cubic_rate(
    traj: Trajectory,
    direction: int,
    *,
    start: int = 0,
    low: float = 1e-3,
    high: float = 0.5,
) -> dict[str, float]:
    r"""The rate of the cubic escape of eigen-direction `direction` (from 0,
    largest eigenvalue first), measured on a trajectory.

    A free head escaping along direction $j$ is balanced and aligned,
    $c = v = k_j = q_j$, and obeys $\dot c = \lambda_j^2c^2(1 -
    c^3/\gamma_j)$ (`docs/problems.md`), so $F(\tilde\Gamma_{jj}^{1/3})$ grows
    linearly in $t$ at the rate $\lambda_j^2$, where $F$ is the antiderivative
    of [`in_context_learning_time`][gradflow.theory.in_context_learning_time].
    The slope is fitted on the first run of saves from save `start` with
    $\tilde\Gamma_{jj}/\gamma_j \in$ [`low`, `high`].

    **Returns:** `{"rate", "t0", "t1", "n"}` (`n` saves used; `rate` NaN
    when fewer than 3 fit); the prediction is $\lambda_j^2$.
    """
    problem = _problem_of(traj)
    D = problem.dimension
    if isinstance(direction, bool) or not isinstance(direction, (int, np.integer)):
        raise TypeError(f"direction must be an integer, got direction = {direction!r}")
    if not 0 <= direction < D:
        raise ValueError(f"direction must lie in [0, {D}), got direction = {direction}")
    gamma = float(_learnt_values(problem)[direction])
    ts = np.asarray(traj.ts)[start:]
    f = trajectory_modes(traj)[start:, direction] / gamma
    # the first run of saves inside the window, then F on it (positive values)
    _, t0, t1, n = fit_rate(ts, f, low, high)
    if n < 3:
        return {"rate": math.nan, "t0": t0, "t1": t1, "n": n}
    run = (ts >= t0) & (ts <= t1)
    F = cubic_antiderivative(np.cbrt(f[run] * gamma), gamma ** (1 / 3))
    rate = float(np.polyfit(ts[run], F, 1)[0])
    return {"rate": rate, "t0": t0, "t1": t1, "n": n}


# ---------------------------------------------------------------------------
# The rows
# ---------------------------------------------------------------------------


def _plateau_saves(traj: Trajectory) -> list[tuple[int, float, float]]:
    r"""`(best, t_start, t_end)` of each plateau: its save of least
    $|\nabla L|$ and its extent, of the `plateau` stages, else of
    `gf.theory.plateaus`."""
    ts, g = np.asarray(traj.ts), np.asarray(traj.grad_norm)
    stages = [s for s in traj.stages if s.name == "plateau"]
    if not stages:
        return [(best, ts[a], ts[b]) for a, best, b in plateaus(traj)]
    out = []
    for s in stages:
        inside = np.flatnonzero((ts >= s.t_start) & (ts <= s.t_end))
        if inside.size:
            out.append((int(inside[np.argmin(g[inside])]), s.t_start, s.t_end))
    return out


def _learnt(modes: np.ndarray, gamma: np.ndarray) -> tuple[int, ...]:
    """The directions more than half learnt."""
    return tuple(int(i) for i in np.flatnonzero(modes > 0.5 * gamma))


def _name(S) -> str:
    return "{" + ", ".join(str(i + 1) for i in S) + "}"


def _saddle_ok(problem: InContextRegression, S) -> bool:
    if problem.merged:
        return not S
    return len(S) <= problem.heads


def _escape_rows(problem, traj, *, plateau, S, nxt, points) -> list[dict[str, Any]]:
    """The rows of the escape from the saddle `S` (its plateau `(best,
    t_start, t_end)`) towards the directions `nxt`; `points`: the refined
    critical points of the trajectory."""
    rows: list[dict[str, Any]] = []
    if not _saddle_ok(problem, S):
        return rows
    best, t_start, t_end = plateau
    rate = in_context_saddle_rate(problem, S)
    lin = linearize(problem, in_context_saddle(problem, S))
    row = report_row(
        f"saddle {_name(S)}: escape rate, Hessian",
        rate,
        lin.unstable_rate + 0.0,
        "closed form against gf.linearize at the exact saddle",
    )
    if rate == 0:
        scale = float(np.abs(lin.eigenvalues).max()) or 1.0
        row["rel_error"] = abs(lin.unstable_rate) / scale
        row["note"] += "; error: over the largest |eigenvalue| (no exponential escape)"
    rows.append(row)
    if rate > 0:
        near = [
            j
            for j, cp in enumerate(points)
            if max(t_start, cp.t_start) <= min(t_end, cp.t_end)
            and cp.kind == "saddle"
            and cp.converged
        ]
        near.sort(key=lambda j: abs(points[j].t - float(traj.ts[best])))
        for j in near[:1]:
            cp = points[j]
            row = report_row(
                f"saddle {_name(S)}: escape rate, refined plateau point",
                rate,
                cp.linearization.unstable_rate,
                f"gf.critical_points near t = {cp.t:.4g}, {cp.distance:.2g} away",
            )
            if row["rel_error"] > 1e-3:
                row["note"] += (
                    "; another critical point of the same level (two directions "
                    "on one head, a free head's v != 0) has another rate"
                )
            rows.append(row)
            rows += saddle_rows(traj, points, [j])
        if not near:
            fr = flank_rate(traj, best)
            if fr["n"] >= 3:
                rows.append(
                    report_row(
                        f"saddle {_name(S)}: escape rate along the flow",
                        rate,
                        fr["rate"],
                        f"slope of log|grad L| on t in [{fr['t0']:.4g}, "
                        f"{fr['t1']:.4g}], {fr['n']} saves",
                    )
                )
    elif len(nxt) == 1:
        j = nxt[0]
        lam = problem.eigen()[0]
        cr = in_context_cubic_rate(traj, j, start=best)
        if cr["n"] >= 3:
            rows.append(
                report_row(
                    f"saddle {_name(S)}: cubic escape of direction {j + 1}",
                    lam[j] ** 2,
                    cr["rate"],
                    f"lambda_{j + 1}^2 against the slope of F(Gamma_jj^(1/3)) on t in "
                    f"[{cr['t0']:.4g}, {cr['t1']:.4g}], {cr['n']} saves",
                )
            )
    return rows


def _aligned_rows(problem, traj) -> list[dict[str, Any]]:
    """From the aligned balanced start: each direction's half-learning time
    against the closed form."""
    if problem.merged:
        return []
    p0 = jax.tree.map(lambda x: np.asarray(x)[0], traj.params)
    k = min(problem.heads, problem.dimension)
    c0 = np.asarray(p0.v)[:k]
    if not (c0 > 0).all():
        return []
    start = in_context_aligned_start(problem, c0)
    leaves = zip(jax.tree.leaves(start), jax.tree.leaves(p0), strict=True)
    if any(not np.allclose(a, b, rtol=0, atol=1e-12 * c0.max()) for a, b in leaves):
        return []
    gamma = _learnt_values(problem)[:k]
    if (c0**3 >= 0.5 * gamma).any():
        return []
    predicted = in_context_learning_time(problem, c0, 0.5)
    measured = in_context_learnt_times(traj, 0.5)[:k]
    return [
        report_row(
            f"direction {j + 1} half learnt (aligned start)",
            predicted[j],
            measured[j],
            f"(F(g/2^(1/3)) - F(c0))/lambda^2, c0 = {c0[j]:.3g}",
        )
        for j in range(k)
        if math.isfinite(measured[j])
    ]


@report_rows.register
def _(
    problem: InContextRegression, traj: Trajectory, points: list[CriticalPoint]
) -> list[dict[str, Any]]:
    r"""In-context regression's rows (`docs/problems.md`), for each plateau of
    the trajectory (its save of least $|\nabla L|$, the directions $S$ more
    than half learnt there):

    - `plateau k level, directions S`: $L_S$ against the loss there;
    - `saddle S: escape rate, Hessian`: the closed-form rate against
      `gf.linearize` at the exact saddle (0 for separate key and query with
      $r = 1$: `rel_error` is then the top eigenvalue over the largest
      $|\text{eigenvalue}|$);
    - where the rate is positive ($r \ge 2$ past the origin, the merged
      origin): the rate at the refined plateau point and the slope of
      $\log|\nabla L|$ after the plateau;
    - `saddle S: cubic escape of direction j` where it is 0: $\lambda_j^2$
      against [`in_context_cubic_rate`][gradflow.theory.in_context_cubic_rate]
      from the plateau on;
    - `level at the end, directions S`: $L_S$ against the loss at the last
      save, where the run comes to rest after its last drop (the drop
      complete) at no plateau;
    - at the end, the learnt components $\tilde\Gamma_{ii}$ against
      $\gamma_i$ (the largest relative error);
    - from the aligned balanced start, each direction's half-learning time
      against [`in_context_learning_time`][gradflow.theory.in_context_learning_time].

    Where the rate is positive, the refined critical point of the plateau
    (of `points`) adds its Hessian's rate against the closed form (the flow
    may pass another critical point of the same level) and against the
    slope along the flow ([`saddle_rows`][gradflow.theory.saddle_rows]).
    With $r = 1$ the refined points of the degenerate saddles slide along
    their flat directions and are not used.
    """
    modes, loss = trajectory_modes(traj), np.asarray(traj.loss)
    gamma = _learnt_values(problem)
    saves = _plateau_saves(traj)
    rows: list[dict[str, Any]] = []
    for k, (best, t_start, t_end) in enumerate(saves):
        S = _learnt(modes[best], gamma)
        rows.append(
            report_row(
                f"plateau {k + 1} level, directions {_name(S)}",
                in_context_level(problem, S),
                loss[best],
                f"loss at the least |grad L|, t = {traj.ts[best]:.4g}",
            )
        )
        after = saves[k + 1][0] if k + 1 < len(saves) else len(loss) - 1
        nxt = tuple(i for i in _learnt(modes[after], gamma) if i not in S)
        if nxt:
            plateau = (best, t_start, t_end)
            rows += _escape_rows(
                problem, traj, plateau=plateau, S=S, nxt=nxt, points=points
            )
    S = _learnt(modes[-1], gamma)
    moves = [s for s in traj.stages if s.name in ("plateau", "drop")]
    at_rest = bool(moves) and moves[-1].name == "drop" and moves[-1].complete
    if at_rest and (not saves or _learnt(modes[saves[-1][0]], gamma) != S):
        # the rest after the last drop is no plateau (a plateau is a rest
        # near a saddle, and this one is past the last drop): its level
        rows.append(
            report_row(
                f"level at the end, directions {_name(S)}",
                in_context_level(problem, S),
                loss[-1],
                f"loss at the last save, t = {traj.ts[-1]:.4g}",
            )
        )
    if S:
        err = np.abs(modes[-1, list(S)] / gamma[list(S)] - 1).max()
        row = report_row(
            f"learnt components at the end, directions {_name(S)}",
            1.0,
            1.0 + err,
            "largest |Gamma_ii / gamma_i - 1| at the last save",
        )
        rows.append(row)
    return rows + _aligned_rows(problem, traj)


# ---------------------------------------------------------------------------
# Symmetries
# ---------------------------------------------------------------------------


def _separate_tangents(v, K, Q) -> list[np.ndarray]:
    H, r, _ = K.shape
    out = []
    for h in range(H):

        def tangent(dv=None, dK=None, dQ=None, h=h):
            tv, tK, tQ = np.zeros_like(v), np.zeros_like(K), np.zeros_like(Q)
            if dv is not None:
                tv[h] = dv
            if dK is not None:
                tK[h] = dK
            if dQ is not None:
                tQ[h] = dQ
            return np.concatenate([tv, tK.ravel(), tQ.ravel()])

        out.append(tangent(dv=v[h], dK=-K[h]))  # v up, K down
        for a in range(r):
            for b in range(r):
                X = np.zeros((r, r))
                X[a, b] = 1.0
                out.append(tangent(dK=X @ K[h], dQ=-X.T @ Q[h]))  # K -> GK, Q -> G^-T Q
    return out


@gauge_rank.register
def _(problem: InContextRegression, params) -> int:
    r"""The dimension of the orbit of the loss's continuous symmetries at
    `params`. $L$ depends on the heads through $\Gamma = \sum_h v_hK_h^\top
    Q_h$ only, which is invariant, head by head, under $(v_h, K_h, Q_h) \to
    (av_h, a^{-1}K_h, Q_h)$ and $(K_h, Q_h) \to (GK_h, G^{-\top}Q_h)$,
    $G \in GL(r)$ (merged: $(v_h, W_h) \to (av_h, a^{-1}W_h)$); the rank of
    these orbits' tangents at the point ($1 + r^2$ per head in general
    position, 0 for a head at zero)."""
    if isinstance(params, SeparateHeads):
        v, K, Q = (
            np.asarray(x, dtype=np.float64) for x in (params.v, params.K, params.Q)
        )
        tangents = _separate_tangents(v, K, Q)
    elif isinstance(params, MergedHeads):
        v, W = np.asarray(params.v, np.float64), np.asarray(params.W, np.float64)
        tangents = []
        for h in range(v.size):
            tv, tW = np.zeros_like(v), np.zeros_like(W)
            tv[h], tW[h] = v[h], -W[h]
            tangents.append(np.concatenate([tv, tW.ravel()]))
    else:
        del problem
        return -1
    T = np.stack(tangents)
    s = np.linalg.svd(T, compute_uv=False)
    if s.size == 0 or s[0] == 0:
        return 0
    return int(np.sum(s > 1e-9 * s[0]))


__all__ = ["in_context_cubic_rate", "in_context_learnt_times"]
