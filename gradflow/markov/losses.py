r"""The losses of SGD: the finite-context loss of a batch (from token counts),
the training objective, and the population loss and $|\nabla L|$ of saved
iterates, the flow's metric."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int

from .chain import MarkovChain
from .model import AnyParams, Params, population_loss
from .primitive import attention_weights, mean_nll
from .variants import (
    VariantParams,
    variant_counted_logits,
    variant_finite_context_logits,
)


def context_counts(
    sequences: Int[Array, "b s1"], d: int, dtype=jnp.float64
) -> tuple[Int[Array, " b"], Float[Array, "b d"], Int[Array, " b"]]:
    """Splits sequences `x_1..x_{s+1}` into what the model sees: the query token
    `x_s`, the count of each token among `x_1..x_s`, and the target `x_{s+1}`."""
    context = sequences[:, :-1]
    counts = jnp.sum(jax.nn.one_hot(context, d, dtype=dtype), axis=1)
    return context[:, -1], counts, sequences[:, -1]


def counted_context_loss(
    params: Params,
    query: Int[Array, " b"],
    counts: Float[Array, "b d"],
    target: Int[Array, " b"],
) -> jax.Array:
    r"""The finite-context loss (`docs/model.md`, "Model (finite context)"), computed from token counts.

    Positions holding the same token get the same score, so the softmax over
    the $s$ positions is a softmax over the $d$ tokens weighted by their counts
    $n_k$: $\alpha_k \propto n_k e^{S[q, k]}$, $h = W_0 \alpha$. This is the
    population formula with $\pi$ replaced by the context's own token counts,
    and it uses the same attention primitive. Equal to
    [`gradflow.finite_context_loss`][] on the same sequences (tested), but
    $O(b\,d\,m)$ instead of $O(b\,s\,m^2)$ with a scatter in the gradient.
    """
    E = params.W0
    alpha = attention_weights(params.WQ, params.WK, E[:, query], E, jnp.log(counts))
    logits = params.W1 @ (E @ alpha.T)  # (d, b)
    logp = jax.nn.log_softmax(logits, axis=0)
    return -jnp.mean(jnp.take_along_axis(logp, target[None, :], axis=0))


def batch_loss(params: AnyParams, batch) -> jax.Array:
    """The finite-context loss of a batch of sequences: the training objective.

    From token counts ([`counted_context_loss`][]) for the minimal model and
    every one-layer variant; a two-layer variant runs the full causal
    finite-context forward (its first layer's output at a position depends on
    the whole prefix, so counts do not determine it)."""
    if isinstance(params, VariantParams):
        if params.model.layers == 1:
            query, counts, target = context_counts(batch, params.d, params.W0.dtype)
            logits = variant_counted_logits(params, query, counts)  # (d, b)
            return mean_nll(logits.T, target)
        return mean_nll(
            variant_finite_context_logits(params, batch[:, :-1]), batch[:, -1]
        )
    return counted_context_loss(
        params, *context_counts(batch, params.d, params.W0.dtype)
    )


@eqx.filter_jit
def _population_observables(params: AnyParams, chain: MarkovChain):
    def one(p):
        loss, grad = jax.value_and_grad(population_loss)(p, chain)
        grad_sq = sum(jnp.sum(g**2) for g in jax.tree.leaves(grad))
        return loss, jnp.sqrt(grad_sq)

    return jax.vmap(one)(params)


_OBS_CHUNK = 64


def _pad_rows(x):
    """Pads the leading axis to `_OBS_CHUNK` rows by repeating the last row."""
    extra = _OBS_CHUNK - x.shape[0]
    return jnp.concatenate([x, jnp.repeat(x[-1:], extra, axis=0)])


def population_observables(params: AnyParams, chain: MarkovChain):
    r"""Population loss and $|\nabla L|$ of stacked parameters, in chunks of a
    fixed size (the last one padded) so that runs with different numbers of
    saves share one compilation."""
    T = params.W0.shape[0]
    losses, norms = [], []
    for i in range(0, T, _OBS_CHUNK):
        n = min(_OBS_CHUNK, T - i)
        chunk = jax.tree.map(lambda x, i=i, n=n: _pad_rows(x[i : i + n]), params)
        loss, norm = _population_observables(chunk, chain)
        losses.append(np.asarray(loss)[:n])
        norms.append(np.asarray(norm)[:n])
    return np.concatenate(losses), np.concatenate(norms)


__all__ = [
    "batch_loss",
    "context_counts",
    "counted_context_loss",
    "population_observables",
]
