r"""The saddle-to-saddle limit of diagonal linear networks (Pesme and
Flammarion, "Saddle-to-Saddle Dynamics in Diagonal Linear Networks",
NeurIPS 2023) for [`DiagonalLinear`][gradflow.problems.DiagonalLinear]; the
derivation is in `docs/problems.md`, section "Diagonal linear networks".

With $g(\beta) = \Sigma(\beta - \beta^*)$ and the rescaled time
$\tau = t/\log(1/\alpha)$ ($\alpha$ = `init_scale`), the flow's $\beta$
tends, as $\alpha \to 0$, to a piecewise-constant path through saddles,
driven by the dual variable $s(\tau) = -c\int_0^\tau g\,d\tau'$ ($c = 2$ for
$\beta = u^2 - v^2$, $c = 1$ for $\beta = u \odot v$), each $s_i \in [-1,
1]$: a coordinate is free to move (in the sign of $s_i$) only where
$|s_i| = 1$, and each saddle is the least loss under those sign constraints
(a non-negative least-squares problem, solved exactly by an active set).
"""

import dataclasses
import math

import numpy as np

from ..._problem.functions import loss_levels
from .problem import DiagonalLinear


@dataclasses.dataclass(frozen=True)
class Jump:
    r"""One jump of the saddle-to-saddle path: at the rescaled time `time`
    ($\tau = t/\log(1/\alpha)$) the path lands on the saddle `beta`, of loss
    `loss`; `learnt`: the coordinates whose dual variable reached $\pm1$
    at this jump, `unlearnt`: those nonzero at the previous saddle and zero
    at this one (indices from 0)."""

    time: float
    beta: np.ndarray
    loss: float
    learnt: tuple[int, ...] = ()
    unlearnt: tuple[int, ...] = ()


def dual_speed(problem: DiagonalLinear) -> float:
    r"""$c$ in $ds/d\tau = -c\,g$: 2 for $\beta = u^2 - v^2$ (from
    $u = v = \alpha$, $\beta_i = 2\alpha^2\sinh(2\log(1/\alpha)s_i)$), 1 for
    $\beta = u \odot v$ (whose halves $(u \pm v)/2$ follow the flow of
    $u^2 - v^2$ at half the speed)."""
    return 2.0 if problem.parametrisation == "u2-v2" else 1.0


def nonnegative_quadratic(Q: np.ndarray, b: np.ndarray, tol: float) -> np.ndarray:
    r"""$\arg\min_{x \ge 0} \frac12x^\top Qx - b^\top x$ for a symmetric
    positive-definite `Q`: the active-set method of Lawson and Hanson (NNLS)
    written on the normal equations, exact up to the solves of the free
    blocks. `tol`: the least gradient that frees a coordinate."""
    n = b.size
    x = np.zeros(n)
    free = np.zeros(n, bool)
    for _ in range(3 * n + 10):
        w = b - Q @ x
        candidates = np.flatnonzero(~free & (w > tol))
        if candidates.size == 0:
            break
        free[candidates[np.argmax(w[candidates])]] = True
        for _ in range(3 * n + 10):
            z = np.zeros(n)
            idx = np.flatnonzero(free)
            z[idx] = np.linalg.solve(Q[np.ix_(idx, idx)], b[idx])
            if (z[idx] > 0).all():
                x = z
                break
            bad = idx[z[idx] <= 0]
            ratios = x[bad] / (x[bad] - z[bad])
            x = x + float(ratios.min()) * (z - x)
            free[bad[np.argmin(ratios)]] = False
            free &= x > 0
            x[~free] = 0.0
    return x


def _saddle(sigma, star, sign: np.ndarray, tol: float) -> np.ndarray:
    r"""The least loss with $\beta_i$ of the sign `sign[i]` ($\pm1$) or zero
    (`sign[i] = 0`): on the free coordinates $F$, with $\gamma =
    \operatorname{sign}\odot\beta_F \ge 0$, minimise $\frac12\gamma^\top
    D\Sigma_{FF}D\gamma - \gamma^\top D(\Sigma\beta^*)_F$."""
    beta = np.zeros(star.size)
    idx = np.flatnonzero(sign != 0)
    if idx.size == 0:
        return beta
    d = sign[idx]
    Q = d[:, None] * sigma[np.ix_(idx, idx)] * d[None, :]
    b = d * (sigma @ star)[idx]
    beta[idx] = d * nonnegative_quadratic(Q, b, tol)
    return beta


def _loss(sigma, star, noise, beta) -> float:
    r = beta - star
    return 0.5 * float(r @ sigma @ r) + 0.5 * noise**2


def saddle_to_saddle(problem: DiagonalLinear, *, max_jumps: int | None = None):
    r"""The saddle-to-saddle path of a diagonal linear network as
    `init_scale` $\alpha \to 0$, in the rescaled time $\tau = t/\log(1/\alpha)$
    (Pesme and Flammarion 2023; `docs/problems.md`, "Diagonal linear
    networks"): a list of [`Jump`][gradflow.theory.Jump]s, the first at
    $\tau = 0$, $\beta = 0$, the last at the minimiser (where $g = 0$).

    With $g_k = \Sigma(\beta_k - \beta^*)$ at the current saddle $\beta_k$,
    the dual variable moves as $s(\tau) = s_k - c(\tau - \tau_k)g_k$ ($c$ of
    [`dual_speed`][gradflow.theory.dual_speed]); the next jump is the first
    $\tau$ at which a coordinate not pinned in that direction reaches
    $s_i = \pm1$; the next saddle minimises $L$ subject to $\beta_i \ge 0$
    where $s_i = 1$, $\beta_i \le 0$ where $s_i = -1$, $\beta_i = 0$
    elsewhere; a coordinate on the boundary whose new value is 0 and whose
    gradient pushes $s_i$ inwards leaves the boundary (it is unlearnt).
    Float64 NumPy.
    """
    if not isinstance(problem, DiagonalLinear):
        raise TypeError(
            "saddle_to_saddle takes a gradflow.problems.DiagonalLinear, got "
            f"{type(problem).__name__}"
        )
    sigma = np.asarray(problem.covariance, np.float64)
    star = np.asarray(problem.target, np.float64)
    noise = float(problem.noise)
    c = dual_speed(problem)
    D = star.size
    scale = max(float(np.abs(sigma @ star).max()), 1e-300)
    tol = 1e-12 * scale
    limit = 4 * D + 20 if max_jumps is None else int(max_jumps)
    beta, s, tau = np.zeros(D), np.zeros(D), 0.0
    jumps = [Jump(0.0, beta.copy(), _loss(sigma, star, noise, beta))]
    for _ in range(limit):
        g = sigma @ (beta - star)
        rate = -c * np.where(np.abs(g) > tol, g, 0.0)
        pinned = (np.abs(s) >= 1) & (np.sign(rate) == np.sign(s))
        moving = (rate != 0) & ~pinned
        if not moving.any():
            break
        bound = np.where(rate > 0, 1.0, -1.0)
        wait = np.full(D, math.inf)
        wait[moving] = (bound[moving] - s[moving]) / rate[moving]
        step = float(wait.min())
        if not math.isfinite(step):
            break
        hit = np.flatnonzero(wait <= step + 1e-12 * max(1.0, step))
        previous = beta
        s = np.clip(s + step * rate, -1.0, 1.0)
        s[hit] = bound[hit]
        tau += step
        sign = np.where(np.abs(s) >= 1, np.sign(s), 0.0)
        beta = _saddle(sigma, star, sign, tol)
        left = np.flatnonzero((previous != 0) & (beta == 0))
        jumps.append(
            Jump(
                tau,
                beta.copy(),
                _loss(sigma, star, noise, beta),
                learnt=tuple(int(i) for i in hit),
                unlearnt=tuple(int(i) for i in left),
            )
        )
    return jumps


@loss_levels.register
def _(problem: DiagonalLinear) -> dict[str, tuple[str, float]]:
    """The levels of the saddle-to-saddle path, the start first, the floor
    last."""
    jumps = saddle_to_saddle(problem)
    return {
        ("start" if k == 0 else f"S{k}"): (
            "$L(0)$" if k == 0 else f"saddle {k}",
            float(j.loss),
        )
        for k, j in enumerate(jumps)
    }


__all__ = ["Jump", "dual_speed", "saddle_to_saddle"]
