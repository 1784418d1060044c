r"""Observables measured along a trajectory (`docs/stages.md`).

[`gradflow.markov.diagnostics`][] maps one point $\theta$ to the reduced quantities that
the stage detector and the figures read: the loss and $|\nabla L|$, matrix
norms, singular values, alignment cosines, the attention matrix and its
$\pi$-weighted entropy, and the attention mass per key token. It is a pure,
jit-able function of `(params, chain)`, used as Diffrax's `SaveAt(fn=...)` so a
long solve stores these numbers rather than every state.

[`gradflow.markov.diagnostic_rates`][] gives the exact time derivatives of the
quantities that define stage boundaries, along the flow $\dot\theta =
-\nabla L$, by one forward-mode product (`jax.jvp`) through the observable: the
event functions find their roots, so no finite differences of saved curves are
involved.
"""

from typing import Any

import jax
import jax.numpy as jnp
from jax.scipy.special import xlogy
from jaxtyping import Array, Float

from .._core.custom_types import Scalar
from .chain import MarkovChain
from .model import AnyParams, Params, attention_summary, population_loss


# Singular values below this fraction of sigma_1 are treated as zero in the
# ratio sigma_2 / sigma_1 (only to keep its derivative finite at W0 = 0).
_TINY = 1e-300


def _unit(x: Float[Array, " n"]) -> Float[Array, " n"]:
    return x / jnp.linalg.norm(x)


def attention_entropy(A: Float[Array, "d d"], pi: Float[Array, " d"]) -> Scalar:
    r"""$\sum_i \pi_i H(A_{i\cdot})$: how spread out attention is, on average
    over queries drawn from $\pi$. At $W_Q = W_K = 0$ it equals $H(\pi)$."""
    return -jnp.dot(pi, jnp.sum(xlogy(A, A), axis=-1))


def _sv_ratio(W0: Float[Array, "m d"]) -> Scalar:
    s = jnp.linalg.svd(W0, compute_uv=False)
    return s[1] / jnp.maximum(s[0], _TINY)


def _att_entropy(params: Params, chain: MarkovChain) -> Scalar:
    return attention_entropy(attention_summary(params, chain), chain.pi)


def diagnostics(params: Params, chain: MarkovChain) -> dict[str, Any]:
    r"""The observables of one point $\theta$ (no time axis).

    **Returns:** a dict of arrays:

    | key | shape | meaning |
    | --- | --- | --- |
    | `loss`, `grad_norm` | `()` | $L(\theta)$, $|\nabla L(\theta)|$ |
    | `norm_W0`, `norm_W1`, `norm_WQ`, `norm_WK` | `()` | Frobenius norms |
    | `sv_W0`, `sv_W1` | `(min(m, d),)` | singular values, decreasing |
    | `stable_rank_W0`, `_W1` | `()` | $|W|_F^2 / \sigma_1^2$ |
    | `sv_ratio_W0` | `()` | $\sigma_2 / \sigma_1$ of $W_0$ |
    | `cos_W0_pi` | `()` | $|W_0 \hat\pi| / |W_0|_F$ (1: rows parallel to $\pi$) |
    | `cos_W1_u` | `()` | $|\hat u^\top W_1| / |W_1|_F$, $u = \pi - 1/d$ (1: aligned) |
    | `right_sv_W0` | `(min(m, d), d)` | every right singular vector of $W_0$ (max entry > 0) |
    | `cos_v_pi` | `(min(m, d),)` | $|v_k \cdot \hat\pi|$ for those vectors |
    | `attention` | `(d, d)` | $A$ (`docs/model.md`); for a variant [`gradflow.markov.attention_summary`][] |
    | `att_entropy` | `()` | $\sum_i \pi_i H(A_{i\cdot})$ |
    | `att_mass` | `(d,)` | $\sum_i \pi_i A_{ik}$: attention mass on key token $k$ |
    """
    loss, grad = jax.value_and_grad(population_loss)(params, chain)
    A = attention_summary(params, chain)
    return {**point_diagnostics(params, chain, loss, grad, A), "attention": A}


def right_singular_vectors(W0: Float[Array, "m d"]):
    """`(s, v)`: the singular values of `W0` (decreasing) and every right singular
    vector as a row of `v` (shape `(min(m, d), d)`), each signed so that its
    largest-magnitude entry is positive (the sign of a singular vector is
    arbitrary; this makes saved vectors comparable from one save to the next)."""
    _, s, v = jnp.linalg.svd(W0, full_matrices=False)
    sign = jnp.sign(jnp.take_along_axis(v, jnp.argmax(jnp.abs(v), axis=1)[:, None], 1))
    return s, v * jnp.where(sign == 0, 1.0, sign)


def point_diagnostics(params: AnyParams, chain: MarkovChain, loss, grad, A):
    """The observables of `diagnostics` except the attention matrix itself."""
    grad_norm = jnp.sqrt(sum(jnp.sum(g**2) for g in jax.tree.leaves(grad)))
    W0, W1 = params.W0, params.W1
    s0, v = right_singular_vectors(W0)
    s1 = jnp.linalg.svd(W1, compute_uv=False)
    pi_hat = _unit(chain.pi)
    u_hat = _unit(chain.pi - 1.0 / chain.d)
    fro0, fro1 = jnp.linalg.norm(W0), jnp.linalg.norm(W1)
    return {
        "loss": loss,
        "grad_norm": grad_norm,
        "norm_W0": fro0,
        "norm_W1": fro1,
        "norm_WQ": jnp.linalg.norm(params.WQ),
        "norm_WK": jnp.linalg.norm(params.WK),
        "sv_W0": s0,
        "sv_W1": s1,
        "stable_rank_W0": fro0**2 / jnp.maximum(s0[0] ** 2, _TINY),
        "stable_rank_W1": fro1**2 / jnp.maximum(s1[0] ** 2, _TINY),
        "sv_ratio_W0": s0[1] / jnp.maximum(s0[0], _TINY)
        if s0.shape[0] > 1
        else 0.0 * loss,
        "cos_W0_pi": jnp.linalg.norm(W0 @ pi_hat) / jnp.maximum(fro0, _TINY),
        "cos_W1_u": jnp.linalg.norm(u_hat @ W1) / jnp.maximum(fro1, _TINY),
        "right_sv_W0": v,
        "cos_v_pi": jnp.abs(v @ pi_hat),
        "att_entropy": attention_entropy(A, chain.pi),
        "att_mass": chain.pi @ A,
    }


def diagnostic_rates(params: Params, chain: MarkovChain) -> dict[str, Scalar]:
    r"""Exact time derivatives along the flow $\dot\theta = -\nabla L(\theta)$.

    **Returns:** a dict of scalars:

    - `loss`: $\dot L = -|\nabla L|^2$;
    - `att_entropy`: $\frac{d}{dt} \sum_i \pi_i H(A_{i\cdot})$;
    - `log_sv_ratio_W0`: $\frac{d}{dt} \log(\sigma_2/\sigma_1)$ of $W_0$.

    Each is one Jacobian-vector product of the observable with the velocity
    $-\nabla L$, so it is as accurate as the state itself.
    """
    grad = jax.grad(population_loss)(params, chain)
    velocity = jax.tree.map(jnp.negative, grad)

    def observe(p):
        return {
            "att_entropy": _att_entropy(p, chain),
            "log_sv_ratio_W0": jnp.log(jnp.maximum(_sv_ratio(p.W0), _TINY)),
        }

    _, rates = jax.jvp(observe, (params,), (velocity,))
    rates["loss"] = -sum(jnp.sum(g**2) for g in jax.tree.leaves(grad))
    return rates


__all__ = [
    "attention_entropy",
    "diagnostic_rates",
    "diagnostics",
    "point_diagnostics",
    "right_singular_vectors",
]
