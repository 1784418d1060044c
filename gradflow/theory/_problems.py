r"""Closed forms of the literature for the problems beyond the paper (SPEC
section 11): the deep linear network (Saxe, McClelland and Ganguli 2014) and
the soft committee machine (Saad and Solla 1995).

**Deep linear network**, $\Sigma_{xx} = I$, $\Sigma_{yx} = U\operatorname{diag}
(s)V^\top$, $s_1 > s_2 > \dots$:

- From the balanced decoupled start $W_1 = R\operatorname{diag}(\sqrt{u_0})
  V^\top$, $W_2 = U\operatorname{diag}(\sqrt{u_0})R^\top$ ($R$ with orthonormal
  columns) the product stays $U\operatorname{diag}(u)V^\top$ with
  $\dot u_a = 2u_a(s_a - u_a)$, so
  $u_a(t) = s_a e^{2s_at}/(e^{2s_at} - 1 + s_a/u_{0,a})$
  ([`saxe_mode_strength`][gradflow.theory.saxe_mode_strength]).
- The critical points the flow passes are the partial solutions with the
  $k$ strongest modes learnt ([`deep_linear_saddle`][
  gradflow.theory.deep_linear_saddle]), at $L = \frac12\sum_{b>k}s_b^2$. With
  two layers, $-\nabla^2L$ there has the eigenvalues $\pm s_j$ ($j > k$),
  each once per free hidden direction, and $-(s_a \mp s_j)$ ($a \le k < j$)
  and $-2s_a$: the unstable rate is $s_{k+1}$ while a hidden direction is free
  ([`deep_linear_saddle_rate`][gradflow.theory.deep_linear_saddle_rate]).
  With three layers or more the Hessian vanishes on every unlearnt mode
  (the product of three or more small factors): the rate is 0 and the
  escape is polynomial, not exponential.

**Soft committee machine**, $K$ students, an isotropic teacher of $M$
orthogonal units of norm $\tau$ ($T = \tau^2 I$), $g = \operatorname{erf}(\cdot
/\sqrt2)$:

- The symmetric plateau: every student $w_k = \alpha\sum_n v_n/\tau$, so
  $R_{kn} = \tau\alpha$, $Q_{kl} = M\alpha^2$, where $x = \alpha^2$ is the
  positive root of
  $K^2(M(1 + \tau^2) - \tau^2)x^2 + (K^2(1 + \tau^2) - 2M\tau^2)x - \tau^2 = 0$
  (the stationarity of $L$ along the symmetric line; for $K = M$, $\tau = 1$
  this is Saad and Solla's $\alpha^2 = 1/(K(2K - 1))$).
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

from .._core.errors import show
from ..problems._committee import Committee
from ..problems._deep_linear import DeepLinear, is_identity


# ---------------------------------------------------------------------------
# Deep linear network
# ---------------------------------------------------------------------------


def saxe_mode_strength(t, s, u0):
    r"""Saxe et al.'s mode strength $u(t) = s e^{2st}/(e^{2st} - 1 + s/u_0)$ of
    a two-layer linear network from the balanced decoupled start (written as
    $s/(1 + (s/u_0 - 1)e^{-2st})$, which does not overflow). Arrays
    broadcast: `t` of shape `(T, 1)` and `s`, `u0` of shape `(k,)` give
    `(T, k)`."""
    t, s, u0 = (np.asarray(x, dtype=np.float64) for x in (t, s, u0))
    return s / (1 + (s / u0 - 1) * np.exp(-2 * s * t))


def saxe_learning_time(s, u0, fraction: float = 0.5):
    r"""The time at which Saxe's mode strength reaches `fraction` of $s$:
    $t = \log\big((s/u_0 - 1)/(1/f - 1)\big)/(2s)$, about
    $\log(s/u_0)/(2s)$: inversely proportional to the mode's strength."""
    s, u0 = np.asarray(s, dtype=np.float64), np.asarray(u0, dtype=np.float64)
    if not 0 < fraction < 1:
        raise ValueError(f"fraction must lie in (0, 1), got fraction = {fraction!r}")
    return np.log((s / u0 - 1) / (1 / fraction - 1)) / (2 * s)


def _check_deep_linear(problem, name: str) -> DeepLinear:
    if not isinstance(problem, DeepLinear):
        raise TypeError(
            f"{name} takes a gradflow.problems.DeepLinear, got {type(problem).__name__}"
        )
    return problem


def _layers(problem: DeepLinear, strengths: np.ndarray):
    """The balanced decoupled point whose product is
    $U\\operatorname{diag}(\\text{strengths})V^\\top$ in the whitened basis:
    each layer carries $\\text{strengths}^{1/L}$ on the first hidden units
    (hidden unit $a$ carries mode $a$)."""
    k = strengths.size
    if k > min(problem.hidden):
        raise ValueError(
            f"{k} modes need hidden widths >= {k}, got hidden = {problem.hidden}"
        )
    lam, E = np.linalg.eigh(np.asarray(problem.sigma_xx))
    inv_sqrt = (E / np.sqrt(lam)) @ E.T
    U, _, Vt = np.linalg.svd(np.asarray(problem.sigma_yx) @ inv_sqrt)
    root = np.abs(strengths) ** (1.0 / problem.depth)
    layers = []
    for a, (rows, cols) in enumerate(problem.shapes()):
        W = np.zeros((rows, cols))
        if a == 0:
            W[:k] = root[:, None] * (Vt[:k] @ inv_sqrt)
        elif a == problem.depth - 1:
            W[:, :k] = U[:, :k] * (np.sign(strengths) * root)
        else:
            W[np.arange(k), np.arange(k)] = root
        layers.append(jnp.asarray(W))
    return tuple(layers)


def balanced_start(problem: DeepLinear, u0) -> tuple:
    r"""Saxe's balanced decoupled start: the point whose product is
    $U\operatorname{diag}(u_0)V^\top$ (the SVD of $\Sigma_{yx}$; with
    $\Sigma_{xx} \ne I$ that of $\Sigma_{yx}\Sigma_{xx}^{-1/2}$, then times
    $\Sigma_{xx}^{-1/2}$), with every layer carrying $u_0^{1/L}$ on its first
    hidden units (the $R$ of SPEC section 11 is the identity's first
    columns). For two layers and $\Sigma_{xx} = I$ this is
    $W_1 = \operatorname{diag}(\sqrt{u_0})V^\top$,
    $W_2 = U\operatorname{diag}(\sqrt{u_0})$, from which each mode follows
    [`saxe_mode_strength`][gradflow.theory.saxe_mode_strength].

    **Arguments:** `problem`: a [`gradflow.problems.DeepLinear`][]; `u0`: a
    number (every mode) or one initial strength per mode (at most
    `min(hidden)` of them, the strongest modes first).
    """
    problem = _check_deep_linear(problem, "balanced_start")
    n = min(problem.n_in, problem.n_out, min(problem.hidden))
    given = u0
    u0 = np.asarray(u0, dtype=np.float64)
    u0 = np.full(n, float(u0)) if u0.ndim == 0 else u0
    if u0.ndim != 1 or not (np.isfinite(u0).all() and (u0 > 0).all()):
        shown = np.asarray(given).tolist() if np.ndim(given) else given
        raise ValueError(f"u0 must be positive and finite, got {show(shown)}")
    return _layers(problem, u0)


def deep_linear_saddle(problem: DeepLinear, k: int) -> tuple[tuple, float]:
    r"""The critical point with the $k$ strongest modes learnt (balanced),
    and its loss $\frac12\sum_{b>k}\hat s_b^2$ ($\hat s$: the singular values
    of $\Sigma_{yx}\Sigma_{xx}^{-1/2}$). `k = 0` is the origin.

    **Returns:** `(params, loss)`.
    """
    problem = _check_deep_linear(problem, "deep_linear_saddle")
    s = problem.whitened_modes()
    if not (isinstance(k, int) and 0 <= k <= min(s.size, min(problem.hidden))):
        raise ValueError(
            f"k must be an integer in [0, {min(s.size, min(problem.hidden))}], "
            f"got k = {k!r}"
        )
    return _layers(problem, s[:k]), 0.5 * float(np.sum(s[k:] ** 2))


def deep_linear_saddle_rate(problem: DeepLinear, k: int) -> float:
    r"""The predicted unstable rate (largest eigenvalue of $-\nabla^2 L$) at
    [`deep_linear_saddle`][gradflow.theory.deep_linear_saddle]`(problem, k)`:
    $s_{k+1}$ for two layers (0 when no hidden direction is free or every
    mode is learnt), 0 for three layers or more (a degenerate saddle: the
    Hessian vanishes on the unlearnt modes). Derived for
    $\Sigma_{xx} = I$; `ValueError` otherwise."""
    problem = _check_deep_linear(problem, "deep_linear_saddle_rate")
    if not is_identity(problem.sigma_xx):
        raise ValueError(
            "deep_linear_saddle_rate is derived for sigma_xx = I (whitened inputs), "
            "got another sigma_xx"
        )
    s = problem.whitened_modes()
    if problem.depth > 2 or k >= s.size or k >= problem.hidden[0]:
        return 0.0
    return float(s[k])


# ---------------------------------------------------------------------------
# Soft committee machine
# ---------------------------------------------------------------------------


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
    """$f'(z)$, $f''(z)$ of $f = \\frac2\\pi\\arcsin$."""
    root = math.sqrt(1 - z * z)
    return 2 / math.pi / root, 2 / math.pi * z / root**3


def isotropic_norm(problem: Committee) -> float:
    r"""$\tau$ when the teacher's rows are orthogonal with one norm $\tau$
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


__all__ = [
    "CommitteePlateau",
    "balanced_start",
    "committee_plateau",
    "deep_linear_saddle",
    "deep_linear_saddle_rate",
    "doubly_centred",
    "isotropic_norm",
    "saxe_learning_time",
    "saxe_mode_strength",
]
