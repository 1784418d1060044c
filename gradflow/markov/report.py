"""The paper's model's rows of the theory report (`docs/theory.md`): the
escape from the origin, the unigram plateau and the focus that leaves it,
against the closed forms of `predictions.py`; registered with
[`gradflow.theory.report_rows`][]."""

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .._result.trajectory import Trajectory
from ..theory._critical import CriticalPoint
from ..theory._linearize import linearize
from ..theory._report import (
    fit_rate,
    loss_crossing,
    report_row,
    report_rows,
    saddle_rows,
)
from .model import Params, attention, model_of
from .predictions import (
    focus_prediction,
    mode_focus_token,
    origin_escape_offset,
    origin_rate,
    unigram_point,
    unstable_amplitude,
)
from .problem import MarkovAttention, chain_of
from .variants import Model, VariantParams


# ---------------------------------------------------------------------------
# Measurements on a trajectory
# ---------------------------------------------------------------------------


def _origin_rows(traj: Trajectory) -> list[dict[str, Any]]:
    """The rows of the escape from the origin (empty if the linear regime has
    fewer than 3 saves)."""
    chain = chain_of(traj)
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
    rate, t_lo, t_hi, n = fit_rate(ts, growth, 10 * growth[0], 0.1)
    if n < 3:
        return rows
    rows.append(
        report_row(
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
        report_row(
            "origin escape time",
            math.log(1.0 / g0) / sigma + tau1,
            loss_crossing(ts, loss, level),
            f"log(1/|g0|)/sigma + tau1, |g0| = {g0:.3g}, tau1 = {tau1:.4g}; "
            f"measured: loss crosses {level:.5g}",
        )
    )
    i_end = int(np.flatnonzero(ts <= t_hi)[-1])
    U0, _, V0 = np.linalg.svd(np.asarray(P.W0[i_end]))
    U1, _, _ = np.linalg.svd(np.asarray(P.W1[i_end]))
    cos0 = abs(V0[0] @ pi) / np.linalg.norm(pi)
    cos1 = abs(U1[:, 0] @ u) / np.linalg.norm(u)
    rows.append(
        report_row("W0 alignment with pi", 1.0, cos0, f"at t = {ts[i_end]:.4g}")
    )
    rows.append(
        report_row("W1 alignment with pi - 1/d", 1.0, cos1, f"at t = {ts[i_end]:.4g}")
    )
    frozen = max(
        float(np.linalg.norm(P.WQ[i_end] - P.WQ[0]) / np.linalg.norm(P.WQ[0])),
        float(np.linalg.norm(P.WK[i_end] - P.WK[0]) / np.linalg.norm(P.WK[0])),
    )
    row = report_row(
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
    return report_row(
        "unigram plateau loss", H_pi, cp.loss, f"refined point near t = {cp.t:.4g}"
    )


def _unigram_rows(
    traj: Trajectory, points: list[CriticalPoint], k: int
) -> list[dict[str, Any]]:
    """The rows of the unigram plateau (`points[k]`) and of the focus that
    leaves it."""
    chain = chain_of(traj)
    pi = np.asarray(chain.pi)
    ts = np.asarray(traj.ts)
    P = traj.params
    H_pi = float(chain.unigram_entropy)
    cp = points[k]
    rows: list[dict[str, Any]] = [_plateau_row(cp, H_pi)]
    zc = np.log(pi) - np.log(pi).mean()
    U1, _, _ = np.linalg.svd(np.asarray(cp.params.W1))
    rows.append(
        report_row(
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
            report_row(
                "focus growth rate",
                lam,
                slope / 2,
                f"half slope of log|S| on t in [{ts[window[0]]:.4g}, "
                f"{ts[window[-1]]:.4g}], {window.size} saves",
            )
        )
    fp = focus_prediction(chain)
    rows.append(
        report_row(
            "focus rate (closed form)",
            fp["rate"],
            lam,
            "a^2 |gamma| against the Hessian at the balanced unigram point",
        )
    )
    rows.append(
        report_row(
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
    row = report_row(
        "focus token",
        fp["token"],
        measured_token,
        f"sign rule (kappa = {fp['kappa']:.3g}); measured: largest attention lift "
        f"gain, at t = {ts[gain_t]:.4g}",
    )
    row["rel_error"] = float(fp["token"] != measured_token)
    rows.append(row)
    rows.append(
        report_row(
            "focus token (Hessian mode)",
            fp["token"],
            mode_focus_token(chain, cp.params, cp.linearization),
            "token favoured by the unstable mode's scores",
        )
    )
    rows[-1]["rel_error"] = float(rows[-1]["predicted"] != rows[-1]["measured"])
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
    chain = chain_of(traj)
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
        rate, t_lo, t_hi, n = fit_rate(ts, growth, 10 * growth[0], 0.1)
        if n >= 3:
            rows.append(
                report_row(
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
    return rows + saddle_rows(traj, points, list(range(len(points))))


@report_rows.register
def _(problem: MarkovAttention, traj: Trajectory, points: list[CriticalPoint]):
    r"""The paper's model's rows (`docs/theory.md`):

    - `origin escape rate`: $\sigma = |\pi - 1/d||\pi|$ against the slope of
      $\log\sqrt{s_1(W_0)s_1(W_1)}$ ($s_1$: top singular value) while it grows
      from 10 times its initial value to 0.1 (linear regime).
    - `origin escape time`: $\sigma^{-1}\log(1/|g_0|) + \tau_1$ against the
      time the loss crosses halfway from $\log d$ to $H(\pi)$.
    - `W0 alignment with pi`, `W1 alignment with pi - 1/d`: cosines of the top
      singular vectors at the end of the linear regime (predicted 1).
    - `W1 alignment with log pi (unigram point)`: predicted 1.
    - `attention frozen`: $|W_{Q,K}(t) - W_{Q,K}(0)|/|W_{Q,K}(0)|$ at the
      end of the linear regime (predicted 0; `rel_error` is the measured value).
    - `unigram plateau loss`: $H(\pi)$ against the refined critical point.
    - `focus growth rate`: `unstable_rate` at the refined unigram critical
      point against half the slope of $\log|S|_F$, $S = (W_QW_0)^\top W_KW_0$,
      on the unigram plateau while $|S|_F < 0.1$.
    - `focus rate (closed form)`: $a^2|\gamma|$ against the Hessian.
    - `focus token`: the sign rule's token against the key token whose
      $\pi$-weighted attention mass gained most by the end of the focus.
    - `plateau k escape rate`: for each later saddle, as for every problem.

    For a model variant the closed forms above are the minimal model's and
    are not reported; its rows are those that hold for every model: `origin
    escape rate (Hessian at the origin)`, `unigram plateau loss`, and every
    saddle's escape rate (`docs/variants.md`).
    """
    del problem
    if not model_of(traj.params).minimal:
        return _variant_rows(traj, points)
    rows = _origin_rows(traj)
    H_pi = float(chain_of(traj).unigram_entropy)
    unigram = [
        k for k, p in enumerate(points) if abs(p.loss - H_pi) <= 1e-6 * max(1.0, H_pi)
    ]
    later = list(range(len(points)))
    if unigram:
        rows += _unigram_rows(traj, points, unigram[0])
        later = [j for j in later if j > unigram[0]]
    rows += saddle_rows(traj, points, later)
    return rows


__all__ = ["origin_point"]
