"""Closed-form predictions of the linearisation (`docs/theory.md`): the
origin's escape rate and time, the unigram point, and the focus rate and
token."""

import math

import diffrax as dfx
import jax
import jax.numpy as jnp
import numpy as np
import optimistix as optx

from .._core.validate import is_integer
from ..theory._linearize import Linearization
from .chain import MarkovChain
from .model import AnyParams, Params
from .problem import check_chain


# ---------------------------------------------------------------------------
# Closed-form predictions
# ---------------------------------------------------------------------------


def _minimal_only(name: str, params) -> None:
    if not isinstance(params, Params):
        raise ValueError(
            f"{name} is derived for the minimal model (gradflow.Params) only, got "
            f"{type(params).__name__} of model {getattr(params, 'model', '?')}"
        )


def origin_rate(chain: MarkovChain) -> float:
    r"""$\sigma = |\pi - \mathbf 1/d|\,|\pi|$: the growth rate at the origin."""
    pi = np.asarray(check_chain(chain).pi)
    return float(np.linalg.norm(pi - 1.0 / pi.size) * np.linalg.norm(pi))


def unigram_point(chain: MarkovChain, width: int) -> Params:
    r"""The balanced rank-one unigram critical point the flow reaches first.

    $W_0 = a\,e_1\hat p^\top$, $W_1 = w e_1^\top$, $W_Q = W_K = 0$ with
    $a|\pi|w = z^* = \log\pi - \overline{\log\pi}$ and $|w| = a$, so
    $a^2 = |z^*|/|\pi|$: the model predicts $\mathrm{softmax}(z^*) = \pi$
    for every query, and $L = H(\pi)$.
    """
    chain = check_chain(chain)
    if not is_integer(width) or width < 1:
        raise ValueError(f"width must be an integer >= 1, got width = {width!r}")
    pi = np.asarray(chain.pi)
    d = pi.size
    z = np.log(pi) - np.log(pi).mean()
    a = math.sqrt(np.linalg.norm(z) / np.linalg.norm(pi))
    w = z / (a * np.linalg.norm(pi))
    W0 = np.zeros((width, d))
    W0[0] = a * pi / np.linalg.norm(pi)
    W1 = np.zeros((d, width))
    W1[:, 0] = w
    zero = np.zeros((width, width))
    return Params(*(jnp.asarray(x) for x in (W0, W1, zero, zero)))


def focus_prediction(chain: MarkovChain) -> dict[str, float | int]:
    r"""Closed-form focus rate and direction at the unigram point.

    $\rho_i = (\pi - P_{i\cdot})\cdot\log\pi$, $\kappa = \sum_i\pi_i^2\rho_i$
    (a covariance under $\pi$, since $\sum_i \pi_i\rho_i = 0$),
    $\gamma = \kappa(\sum_l \pi_l^3 - |\pi|^4)/|\pi|^4$, and
    $\lambda = a^2|\gamma|$ with $a^2 = |\log\pi - \overline{\log\pi}|/|\pi|$.
    The growing mode has scores $S_{ik} \propto -\mathrm{sign}(\gamma)\,
    \pi_i\pi_k$: every query attends more to the most frequent token when
    $\kappa < 0$, to the least frequent one when $\kappa > 0$.

    **Returns:** `{"rate", "kappa", "gamma", "a2", "token"}` (`token` is -1
    when $\kappa = 0$ or $\pi$ is uniform: no focus).
    """
    chain = check_chain(chain)
    pi = np.asarray(chain.pi)
    P = np.asarray(chain.P)
    logpi = np.log(pi)
    rho = (pi[None, :] - P) @ logpi
    kappa = float(np.sum(pi**2 * rho))
    p2 = float(np.sum(pi**2))
    gamma = kappa * (float(np.sum(pi**3)) - p2**2) / p2**2
    z = logpi - logpi.mean()
    a2 = float(np.linalg.norm(z) / math.sqrt(p2))
    if gamma == 0:
        token = -1
    else:
        token = int(np.argmax(pi)) if gamma < 0 else int(np.argmin(pi))
    return {
        "rate": a2 * abs(gamma),
        "kappa": kappa,
        "gamma": gamma,
        "a2": a2,
        "token": token,
    }


def _reduced_loss(y, pi):
    a, w = y
    z = a * jnp.linalg.norm(pi) * w
    return jax.nn.logsumexp(z) - jnp.dot(pi, z)


def origin_escape_offset(chain: MarkovChain, level: float | None = None) -> float:
    r"""$\tau_1$: the order-one part of the escape time from the origin.

    The escape time to loss `level` (default: halfway from $\log d$ to
    $H(\pi)$) is $t_{esc} = \sigma^{-1}\log(1/|g_0|) + \tau_1$, where
    $g_0 = (W_0(0)\hat p + W_1(0)^\top\hat u)/\sqrt 2$ is the initial
    amplitude of the unstable mode. $\tau_1$ comes from the reduced flow
    on $W_0 = a\,v\hat p^\top$, $W_1 = wv^\top$ (exact while attention is
    uniform), started on the unstable mode at amplitude $\varepsilon$:
    $\tau_1 = T(\varepsilon) + \sigma^{-1}\log(\sqrt 2\,\varepsilon)$.
    """
    chain = check_chain(chain)
    pi = jnp.asarray(chain.pi)
    sigma = origin_rate(chain)
    if level is None:
        level = 0.5 * (math.log(chain.d) + float(chain.unigram_entropy))
    level = float(level)
    if not float(chain.unigram_entropy) < level < math.log(chain.d):
        raise ValueError(
            f"level must lie between H(pi) = {float(chain.unigram_entropy):.6g} and "
            f"log d = {math.log(chain.d):.6g}, got level = {level}"
        )
    eps = 1e-7
    u = pi - 1.0 / chain.d
    y0 = (jnp.asarray(eps), eps * u / jnp.linalg.norm(u))

    def field(t, y, args):
        g = jax.grad(_reduced_loss)(y, args)
        return jax.tree.map(jnp.negative, g)

    def cond(t, y, args, **kwargs):
        return _reduced_loss(y, args) - level

    t_max = 50.0 * (math.log(1 / eps) + 10) / sigma
    sol = dfx.diffeqsolve(
        dfx.ODETerm(field),
        dfx.Tsit5(),
        0.0,
        t_max,
        None,
        y0,
        args=pi,
        saveat=dfx.SaveAt(t1=True),
        stepsize_controller=dfx.PIDController(rtol=1e-11, atol=1e-14),
        event=dfx.Event(cond, optx.Newton(rtol=1e-12, atol=1e-12)),
        max_steps=100_000,
    )
    assert sol.ts is not None
    T = float(sol.ts[-1])
    return T + math.log(math.sqrt(2) * eps) / sigma


def unstable_amplitude(chain: MarkovChain, params: AnyParams) -> float:
    r"""$|g_0| = |W_0\hat p + W_1^\top\hat u|/\sqrt 2$ at `params` (the
    minimal model's unstable mode at the origin)."""
    _minimal_only("unstable_amplitude", params)
    pi = np.asarray(chain.pi)
    u = pi - 1.0 / pi.size
    x = np.asarray(params.W0) @ (pi / np.linalg.norm(pi))
    y = np.asarray(params.W1).T @ (u / np.linalg.norm(u))
    return float(np.linalg.norm(x + y) / math.sqrt(2))


def mode_focus_token(chain: MarkovChain, params: AnyParams, lin: Linearization) -> int:
    r"""The key token that the top unstable mode's attention scores favour.

    Along the mode the scores become $S = (\delta W_Q E)^\top(\delta W_K E)$
    (at $W_Q = W_K = 0$ the first-order terms vanish), and
    $\log(A_{ik}/\pi_k) = S_{ik} - \log Z_i$; the favoured key is
    $\arg\max_k \sum_i \pi_i S_{ik}$: the key whose attention relative to
    its prior weight $\pi_k$ rises most. (The absolute mass gain
    $\pi_k(S_{ik} - \bar S_i)$ can peak elsewhere when the scores favour rare
    tokens.)"""
    _minimal_only("mode_focus_token", params)
    mode = lin.modes[0]
    E = jnp.asarray(params.W0)
    S = (mode.WQ @ E).T @ (mode.WK @ E)
    return int(np.argmax(np.asarray(chain.pi @ S)))


__all__ = [
    "focus_prediction",
    "mode_focus_token",
    "origin_escape_offset",
    "origin_rate",
    "unigram_point",
    "unstable_amplitude",
]
