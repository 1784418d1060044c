r"""The attention primitive and the cross-entropies that every model shares.

One softmax-attention function, [`attention_weights`][], is used by the
paper's one-layer model ([`gradflow.Params`][], `model.py`) and by every
variant ([`gradflow.VariantParams`][], `variants.py`), in both the closed-form
population loss (a $\pi$-weighted softmax over the vocabulary) and the
finite-context model (a softmax over positions). This module sits below both.
"""

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Int

from .._core.custom_types import Scalar
from .chain import MarkovChain
from .custom_types import Square


def attention_weights(
    WQ: Square,
    WK: Square,
    queries: Float[Array, "m q"],
    keys: Float[Array, "m n"],
    log_weights: Float[Array, "*q n"],
) -> Float[Array, "q n"]:
    r"""Softmax attention of each query over the keys, with log prior weights.

    $\alpha[i, k] \propto w_k \exp((W_Q q_i) \cdot (W_K k_k))$, computed as a
    softmax of scores plus $\log w_k$: stable for any score size, and exactly
    zero weight where $w_k = 0$ (a causal mask is $\log w = -\infty$).
    """
    scores = (WQ @ queries).T @ (WK @ keys)
    return jax.nn.softmax(scores + log_weights, axis=-1)


def population_cross_entropy(Z: Float[Array, "d d"], chain: MarkovChain) -> Scalar:
    r"""$\sum_i \pi_i [\operatorname{logsumexp}_y Z_{yi} - \sum_y P_{iy} Z_{yi}]$
    for logits `Z` whose column `i` belongs to query token `i`."""
    per_query = jax.nn.logsumexp(Z, axis=0) - jnp.sum(chain.P.T * Z, axis=0)
    return jnp.dot(chain.pi, per_query)


def mean_nll(logits: Float[Array, "*batch d"], targets: Int[Array, "*batch"]) -> Scalar:
    """Mean of $-\\log \\mathrm{softmax}(\\text{logits})[\\text{target}]$."""
    logp = jax.nn.log_softmax(logits, axis=-1)
    nll = -jnp.take_along_axis(logp, targets[..., None], axis=-1)[..., 0]
    return jnp.mean(nll)


__all__ = ["attention_weights", "mean_nll", "population_cross_entropy"]
