r"""Closed forms of the literature for the soft committee machine (Saad and
Solla 1995; `docs/problems.md`, "The soft committee machine").

**Soft committee machine**, $K$ students, an isotropic teacher of $M$
orthogonal units of norm $\tau$ ($T = \tau^2 I$), $g = \operatorname{erf}(\cdot
/\sqrt2)$:

- The symmetric plateau: every student $w_k = \alpha\sum_n v_n/\tau$, so
  $R_{kn} = \tau\alpha$, $Q_{kl} = M\alpha^2$, where $x = \alpha^2$ is the
  positive root of
  $K^2(M(1 + \tau^2) - \tau^2)x^2 + (K^2(1 + \tau^2) - 2M\tau^2)x - \tau^2 = 0$
  (the stationarity of $L$ along the symmetric line; for $K = M$, $\tau = 1$
  this is Saad and Solla"s $\alpha^2 = 1/(K(2K - 1))$).
- Its unstable (specialisation) modes: $\delta W = \varepsilon D\,V/\tau$ with
  $D$ doubly centred (rows and columns summing to zero), one eigenvalue of
  multiplicity $(K - 1)(M - 1)$:
  $\lambda = \tau^2 G_{cc} + 2M G_a - 2K F_a$, with $F(c, a, b)$ and
  $G(c, a) = F(c, a, \tau^2)$ the correlation
  $\frac2\pi\arcsin(c/\sqrt{(1 + a)(1 + b)})$ and its derivatives at the
  plateau ([`committee_plateau`][gradflow.theory.committee_plateau]).
"""

import math

import equinox as eqx
import jax.numpy as jnp
import numpy as np

from ..._core.errors import show
from .problem import Committee


class CommitteePlateau(eqx.Module):
    r"""The symmetric plateau of a soft committee machine with an isotropic
    teacher ([`committee_plateau`][gradflow.theory.committee_plateau]).

    **Fields:** `alpha` (every student is $\alpha\sum_n v_n/\tau$), `R`
    ($R_{kn} = \tau\alpha$), `Q` ($Q_{kl} = M\alpha^2$, every entry), `loss`,
    `rate` (the specialisation rate $\lambda$, `nan` when $K = 1$ or
    $M = 1$), `multiplicity` ($(K - 1)(M - 1)$) and `params` (the point $W$).
    """

    alpha: float
    R: float
    Q: float
    loss: float
    rate: float
    multiplicity: int
    params: jnp.ndarray


# one compilation per problem class and shape (not one per primitive)
_loss = eqx.filter_jit(lambda problem, params: problem.loss(params))


def _f_derivatives(z: float) -> tuple[float, float]:
    """$f"(z)$, $f""(z)$ of $f = \\frac2\\pi\\arcsin$."""
    root = math.sqrt(1 - z * z)
    return 2 / math.pi / root, 2 / math.pi * z / root**3


def isotropic_norm(problem: Committee) -> float:
    r"""$\tau$ when the teacher"s rows are orthogonal with one norm $\tau$
    ($T = \tau^2 I$); `ValueError` otherwise."""
    V = np.asarray(problem.teacher)  # NumPy: nothing compiled for the check
    T = V @ V.T
    tau2 = float(np.mean(np.diag(T)))
    if tau2 <= 0 or np.abs(T - tau2 * np.eye(T.shape[0])).max() > 1e-10 * tau2:
        raise ValueError(
            "the closed form is derived for an isotropic teacher (orthogonal rows "
            f"of one norm, T = tau^2 I), got T with diagonal "
            f"{show(np.diag(T).tolist())}"
        )
    return math.sqrt(tau2)


def committee_plateau(problem: Committee) -> CommitteePlateau:
    r"""The symmetric plateau of the soft committee machine in closed form
    (see the module docstring): the point, its loss and its specialisation
    rate. Needs an isotropic teacher ($T = \tau^2 I$).

    **Returns:** a [`CommitteePlateau`][gradflow.theory.CommitteePlateau].
    """
    if not isinstance(problem, Committee):
        raise TypeError(
            "committee_plateau takes a gradflow.problems.Committee, got "
            f"{type(problem).__name__}"
        )
    tau = isotropic_norm(problem)
    K, M = problem.students, problem.teachers
    t2 = tau * tau
    a2 = K * K * (M * (1 + t2) - t2)
    a1 = K * K * (1 + t2) - 2 * M * t2
    x = (-a1 + math.sqrt(a1 * a1 + 4 * a2 * t2)) / (2 * a2)
    alpha, q = math.sqrt(x), M * x
    # F at (q, q, q): z = q / (1 + q); G at (tau alpha, q): z = ...
    zF = q / (1 + q)
    zG = tau * alpha / math.sqrt((1 + q) * (1 + t2))
    F1, _ = _f_derivatives(zF)
    G1, G2 = _f_derivatives(zG)
    F_a = -F1 * zF / (2 * (1 + q))
    G_a = -G1 * zG / (2 * (1 + q))
    G_cc = G2 / ((1 + q) * (1 + t2))
    rate = t2 * G_cc + 2 * M * G_a - 2 * K * F_a if K > 1 and M > 1 else math.nan
    V = np.asarray(problem.teacher)
    W = np.tile(alpha * V.sum(axis=0) / tau, (K, 1))
    params = jnp.asarray(W)
    return CommitteePlateau(
        alpha=alpha,
        R=tau * alpha,
        Q=q,
        loss=float(_loss(problem, params)),
        rate=rate,
        multiplicity=(K - 1) * (M - 1),
        params=params,
    )


def doubly_centred(R) -> np.ndarray:
    r"""The doubly centred part $P_K R P_M$ of order parameters $R$ (shape
    `(..., K, M)`): what specialisation grows; zero on the symmetric
    plateau."""
    R = np.asarray(R)
    return (
        R
        - R.mean(axis=-1, keepdims=True)
        - R.mean(axis=-2, keepdims=True)
        + R.mean(axis=(-2, -1), keepdims=True)
    )


__all__ = ["CommitteePlateau", "committee_plateau", "doubly_centred", "isotropic_norm"]
