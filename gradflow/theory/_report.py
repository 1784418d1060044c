"""The theory report: predicted against measured, for every stage the
linearisation explains, and the rates measured on a trajectory."""

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .._core.threads import with_limited_blas_threads
from .._engine.result import Trajectory
from ..problems._markov.model import Params, attention, model_of
from ..problems._markov.variants import Model, VariantParams
from ._checks import check_trajectory
from ._critical import DEFAULT_PLATEAU_THRESHOLD, CriticalPoint, critical_points
from ._linearize import linearize
from ._predictions import (
    focus_prediction,
    mode_focus_token,
    origin_escape_offset,
    origin_rate,
    unigram_point,
    unstable_amplitude,
)


# ---------------------------------------------------------------------------
# Measurements on a trajectory
# ---------------------------------------------------------------------------


def _fit_rate(ts, values, lo, hi) -> tuple[float, float, float, int]:
    """Least-squares slope of log(values) on times where lo <= values <= hi,
    restricted to the first contiguous run. Returns (slope, t0, t1, n)."""
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
    rate, t0, t1, n = _fit_rate(ts, g, low * g[0], high * g[0])
    return {"rate": rate, "t0": t0, "t1": t1, "n": n}


def _loss_crossing(ts, loss, level) -> float:
    below = np.flatnonzero(loss <= level)
    if below.size == 0 or below[0] == 0:
        return float("nan")
    i = below[0]
    # linear interpolation in t between the bracketing saves
    f = (loss[i - 1] - level) / (loss[i - 1] - loss[i])
    return float(ts[i - 1] + f * (ts[i] - ts[i - 1]))


def _row(quantity, predicted, measured, note="") -> dict[str, Any]:
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


def _origin_rows(traj: Trajectory) -> list[dict[str, Any]]:
    """The rows of the escape from the origin (empty if the linear regime has
    fewer than 3 saves)."""
    chain = traj.chain
    pi = np.asarray(chain.pi)
    d = chain.d
    u = pi - 1.0 / d
    ts = np.asarray(traj.ts)
    loss = np.asarray(traj.loss)
    P = traj.params
    rows: list[dict[str, Any]] = []
    sigma = origin_rate(chain)
    s0 = np.linalg.svd(np.asarray(P.W0), compute_uv=False)[:, 0]
    s1 = np.linalg.svd(np.asarray(P.W1), compute_uv=False)[:, 0]
    growth = np.sqrt(s0 * s1)
    rate, t_lo, t_hi, n = _fit_rate(ts, growth, 10 * growth[0], 0.1)
    if n < 3:
        return rows
    rows.append(
        _row(
            "origin escape rate",
            sigma,
            rate,
            f"fit of log sqrt(s1(W0) s1(W1)) on t in [{t_lo:.4g}, {t_hi:.4g}], "
            f"{n} saves",
        )
    )
    level = 0.5 * (math.log(d) + float(chain.unigram_entropy))
    g0 = unstable_amplitude(chain, P[0])
    tau1 = origin_escape_offset(chain, level)
    rows.append(
        _row(
            "origin escape time",
            math.log(1.0 / g0) / sigma + tau1,
            _loss_crossing(ts, loss, level),
            f"log(1/|g0|)/sigma + tau1, |g0| = {g0:.3g}, tau1 = {tau1:.4g}; "
            f"measured: loss crosses {level:.5g}",
        )
    )
    i_end = int(np.flatnonzero(ts <= t_hi)[-1])
    U0, _, V0 = np.linalg.svd(np.asarray(P.W0[i_end]))
    U1, _, _ = np.linalg.svd(np.asarray(P.W1[i_end]))
    cos0 = abs(V0[0] @ pi) / np.linalg.norm(pi)
    cos1 = abs(U1[:, 0] @ u) / np.linalg.norm(u)
    rows.append(_row("W0 alignment with pi", 1.0, cos0, f"at t = {ts[i_end]:.4g}"))
    rows.append(
        _row("W1 alignment with pi - 1/d", 1.0, cos1, f"at t = {ts[i_end]:.4g}")
    )
    frozen = max(
        float(np.linalg.norm(P.WQ[i_end] - P.WQ[0]) / np.linalg.norm(P.WQ[0])),
        float(np.linalg.norm(P.WK[i_end] - P.WK[0]) / np.linalg.norm(P.WK[0])),
    )
    row = _row(
        "attention frozen",
        0.0,
        frozen,
        f"max relative change of WQ, WK to t = {ts[i_end]:.4g}",
    )
    row["rel_error"] = frozen
    rows.append(row)
    return rows


def _plateau_row(cp: CriticalPoint, H_pi: float) -> dict[str, Any]:
    """The unigram plateau's loss against its prediction H(pi)."""
    return _row(
        "unigram plateau loss", H_pi, cp.loss, f"refined point near t = {cp.t:.4g}"
    )


def _unigram_rows(
    traj: Trajectory, points: list[CriticalPoint], k: int
) -> list[dict[str, Any]]:
    """The rows of the unigram plateau (`points[k]`) and of the focus that
    leaves it."""
    chain = traj.chain
    pi = np.asarray(chain.pi)
    ts = np.asarray(traj.ts)
    P = traj.params
    H_pi = float(chain.unigram_entropy)
    cp = points[k]
    rows: list[dict[str, Any]] = [_plateau_row(cp, H_pi)]
    zc = np.log(pi) - np.log(pi).mean()
    U1, _, _ = np.linalg.svd(np.asarray(cp.params.W1))
    rows.append(
        _row(
            "W1 alignment with log pi - mean",
            1.0,
            abs(U1[:, 0] @ zc) / np.linalg.norm(zc),
            "top left singular vector of W1 at the unigram point",
        )
    )
    lam_refined = cp.linearization.unstable_rate
    # The unigram critical points form a manifold; the flow reaches its
    # balanced rank-one point (W0 W0^T - W1^T W1 is conserved while
    # attention is uniform, and ~0 from a small start), so the prediction
    # is the Hessian there. A point refined from a save is another point
    # of the manifold, with another rate: reported separately.
    lam = linearize(chain, unigram_point(chain, cp.params.m)).unstable_rate
    # measured: half the slope of log |S|_F on the plateau while |S| < 0.1
    S = jnp.einsum("tmi,tnm,tnk,tkj->tij", P.W0, P.WQ, P.WK, P.W0)
    Snorm = np.asarray(jnp.linalg.norm(S, axis=(1, 2)))
    # from the plateau's closest approach to the unigram point (where the
    # linearisation there applies) until |S| reaches 0.1 (still linear)
    window = np.flatnonzero((np.arange(len(ts)) >= cp.index) & (Snorm < 0.1))
    if window.size >= 3:
        window = window[: np.argmax(np.diff(np.r_[window, -10]) != 1) + 1]
    if window.size >= 3:
        slope = np.polyfit(ts[window], np.log(Snorm[window]), 1)[0]
        rows.append(
            _row(
                "focus growth rate",
                lam,
                slope / 2,
                f"half slope of log|S| on t in [{ts[window[0]]:.4g}, "
                f"{ts[window[-1]]:.4g}], {window.size} saves",
            )
        )
    fp = focus_prediction(chain)
    rows.append(
        _row(
            "focus rate (closed form)",
            fp["rate"],
            lam,
            "a^2 |gamma| against the Hessian at the balanced unigram point",
        )
    )
    rows.append(
        _row(
            "focus rate at refined plateau point",
            lam,
            lam_refined,
            f"Hessian at the critical point refined from t = {cp.t:.4g} "
            f"(distance {cp.distance:.3g}; not balanced)",
        )
    )
    # measured focus token: the key whose attention, relative to its prior
    # weight pi_k, rose most: argmax_k sum_i pi_i log(A[i, k] / pi_k)
    A = np.asarray(jax.vmap(lambda p: attention(p, chain))(P))
    lift = np.einsum("i,tik->tk", pi, np.log(A / pi[None, None, :]))
    # the focus stage: from the unigram point to the next plateau
    t_next = points[k + 1].t if k + 1 < len(points) else np.inf
    after = np.flatnonzero((ts >= cp.t) & (ts <= t_next))
    gain_t = after[np.argmax(np.max(lift[after], axis=1))] if after.size else -1
    measured_token = int(np.argmax(lift[gain_t]))
    row = _row(
        "focus token",
        fp["token"],
        measured_token,
        f"sign rule (kappa = {fp['kappa']:.3g}); measured: largest attention lift "
        f"gain, at t = {ts[gain_t]:.4g}",
    )
    row["rel_error"] = float(fp["token"] != measured_token)
    rows.append(row)
    rows.append(
        _row(
            "focus token (Hessian mode)",
            fp["token"],
            mode_focus_token(chain, cp.params, cp.linearization),
            "token favoured by the unstable mode's scores",
        )
    )
    rows[-1]["rel_error"] = float(rows[-1]["predicted"] != rows[-1]["measured"])
    return rows


def _later_rows(
    traj: Trajectory, points: list[CriticalPoint], later: list[int]
) -> list[dict[str, Any]]:
    """The escape-rate rows of the later saddles (`points[j]`, `j` in `later`)."""
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
            _row(
                f"plateau L={cp.loss:.5g} escape rate",
                cp.linearization.unstable_rate,
                fr["rate"],
                f"t* = {cp.t:.4g}, refined point {cp.distance:.2g} away; slope of "
                f"log|grad L| on t in [{fr['t0']:.4g}, {fr['t1']:.4g}], "
                f"{fr['n']} saves",
            )
        )
    return rows


def origin_point(model: Model, d: int, m: int):
    r"""The origin of a model: every matrix 0, a normalisation's `gain` 1 and
    `bias` 0 (a critical point with $L = \log d$ for every variant)."""
    if model.minimal:
        return Params(*(jnp.zeros(s) for s in ((m, d), (d, m), (m, m), (m, m))))
    lh = (model.layers, model.heads)
    return VariantParams(
        W0=jnp.zeros((m, d)),
        W1=jnp.zeros((d, m)),
        WQ=jnp.zeros((*lh, m, m)),
        WK=jnp.zeros((*lh, m, m)),
        WV=jnp.zeros((*lh, m, m)) if model.value else None,
        gain=jnp.ones(m) if model.norm is not None else None,
        bias=jnp.zeros(m) if model.norm == "layer" else None,
        model=model,
    )


def _variant_rows(
    traj: Trajectory, points: list[CriticalPoint]
) -> list[dict[str, Any]]:
    """The rows that apply to every model variant: the escape rate from the
    origin predicted by the Hessian there (not the minimal model's closed
    form), the unigram plateau's loss, and each saddle's escape rate."""
    chain = traj.chain
    model = model_of(traj.params)
    P = traj.params
    ts = np.asarray(traj.ts)
    rows: list[dict[str, Any]] = []
    origin = origin_point(model, chain.d, P.m)
    lin0 = linearize(chain, origin)
    if model.norm is None and lin0.num_unstable > 0:
        s0 = np.linalg.svd(np.asarray(P.W0), compute_uv=False)[:, 0]
        s1 = np.linalg.svd(np.asarray(P.W1), compute_uv=False)[:, 0]
        growth = np.sqrt(s0 * s1)
        rate, t_lo, t_hi, n = _fit_rate(ts, growth, 10 * growth[0], 0.1)
        if n >= 3:
            rows.append(
                _row(
                    "origin escape rate (Hessian at the origin)",
                    lin0.unstable_rate,
                    rate,
                    f"fit of log sqrt(s1(W0) s1(W1)) on t in [{t_lo:.4g}, "
                    f"{t_hi:.4g}], {n} saves",
                )
            )
    H_pi = float(chain.unigram_entropy)
    for cp in points:
        if abs(cp.loss - H_pi) <= 1e-6 * max(1.0, H_pi):
            rows.append(_plateau_row(cp, H_pi))
            break
    return rows + _later_rows(traj, points, list(range(len(points))))


@with_limited_blas_threads
def theory_report(
    traj: Trajectory,
    *,
    points: list[CriticalPoint] | None = None,
    threshold: float = DEFAULT_PLATEAU_THRESHOLD,
) -> list[dict[str, Any]]:
    r"""Predicted against measured, for every stage the linearisation explains.

    Rows (`{"quantity", "predicted", "measured", "rel_error", "note"}`):

    - `origin escape rate`: $\sigma = |\pi - 1/d||\pi|$ against the slope of
      $\log\sqrt{s_1(W_0)s_1(W_1)}$ ($s_1$: top singular value) while it grows
      from 10 times its initial value to 0.1 (linear regime).
    - `origin escape time`: $\sigma^{-1}\log(1/|g_0|) + \tau_1$ against the
      time the loss crosses halfway from $\log d$ to $H(\pi)$.
    - `W0 alignment with pi`, `W1 alignment with pi - 1/d`: cosines of the top
      singular vectors at the end of the linear regime (predicted 1).
    - `W1 alignment with log pi (unigram point)`: predicted 1 (see
      `docs/theory.md`).
    - `attention frozen`: $|W_{Q,K}(t) - W_{Q,K}(0)|/|W_{Q,K}(0)|$ at the
      end of the linear regime (predicted 0; `rel_error` is the measured value).
    - `unigram plateau loss`: $H(\pi)$ against the refined critical point.
    - `focus growth rate`: `unstable_rate` at the refined unigram critical
      point (the balanced one the flow reaches, `unigram_point`) against half
      the slope of $\log|S|_F$, $S = (W_QW_0)^\top W_KW_0$,
      on the unigram plateau while $|S|_F < 0.1$.
    - `focus rate (closed form)`: $a^2|\gamma|$ against the Hessian.
    - `focus token`: the sign rule's token against the key token whose
      $\pi$-weighted attention mass gained most by the end of the focus.
    - `plateau k escape rate`: for each later saddle, `unstable_rate` against
      the slope of $\log|\nabla L|$ on its rising flank.

    Rows whose measurement is impossible on this trajectory (too short, no
    such plateau) are left out.

    For a model variant ([`gradflow.Model`][] other than the minimal one) the
    closed forms above (the origin's $\sigma = |\pi - 1/d||\pi|$ and escape
    time, the alignments with $\pi$, the unigram point, the focus rate and
    token) are the minimal model's and are not reported. The rows are the
    ones that hold for every model: `origin escape rate (Hessian at the
    origin)` (the top eigenvalue of $-\nabla^2 L$ at the origin against the
    same fit, when there is a linear regime and no normalisation, whose linear
    regime ends at $|x|^2/m \approx \epsilon$), `unigram plateau loss`, and
    every saddle's escape rate (`docs/variants.md`).
    """
    traj = check_trajectory(traj)
    if points is None:
        points = critical_points(traj, threshold=threshold)
    if not model_of(traj.params).minimal:
        return _variant_rows(traj, points)
    rows = _origin_rows(traj)
    H_pi = float(traj.chain.unigram_entropy)
    unigram = [
        k for k, p in enumerate(points) if abs(p.loss - H_pi) <= 1e-6 * max(1.0, H_pi)
    ]
    later = list(range(len(points)))
    if unigram:
        rows += _unigram_rows(traj, points, unigram[0])
        later = [j for j in later if j > unigram[0]]
    rows += _later_rows(traj, points, later)
    return rows


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
    "flank_rate",
    "origin_point",
    "format_report",
    "theory_report",
]
