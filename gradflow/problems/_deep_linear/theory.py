r"""Closed forms of the literature for the deep linear network (Saxe,
McClelland and Ganguli 2014; `docs/problems.md`, "Deep linear networks").

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
"""

import jax.numpy as jnp
import numpy as np

from ..._core.errors import show
from .problem import DeepLinear, is_identity


def saxe_mode_strength(t, s, u0):
    r"""Saxe et al."s mode strength $u(t) = s e^{2st}/(e^{2st} - 1 + s/u_0)$ of
    a two-layer linear network from the balanced decoupled start (written as
    $s/(1 + (s/u_0 - 1)e^{-2st})$, which does not overflow). Arrays
    broadcast: `t` of shape `(T, 1)` and `s`, `u0` of shape `(k,)` give
    `(T, k)`."""
    t, s, u0 = (np.asarray(x, dtype=np.float64) for x in (t, s, u0))
    return s / (1 + (s / u0 - 1) * np.exp(-2 * s * t))


def saxe_learning_time(s, u0, fraction: float = 0.5):
    r"""The time at which Saxe"s mode strength reaches `fraction` of $s$:
    $t = \log\big((s/u_0 - 1)/(1/f - 1)\big)/(2s)$, about
    $\log(s/u_0)/(2s)$: inversely proportional to the mode"s strength."""
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
    r"""Saxe"s balanced decoupled start: the point whose product is
    $U\operatorname{diag}(u_0)V^\top$ (the SVD of $\Sigma_{yx}$; with
    $\Sigma_{xx} \ne I$ that of $\Sigma_{yx}\Sigma_{xx}^{-1/2}$, then times
    $\Sigma_{xx}^{-1/2}$), with every layer carrying $u_0^{1/L}$ on its first
    hidden units (the orthogonal $R$ of Saxe's start, `docs/problems.md`, is the identity's first
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


__all__ = [
    "balanced_start",
    "deep_linear_saddle",
    "deep_linear_saddle_rate",
    "saxe_learning_time",
    "saxe_mode_strength",
]
