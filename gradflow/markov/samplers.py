r"""Samplers for SGD: each draws a batch of token sequences of length
`context + 1`, and is an `eqx.Module` holding its arrays as fields (so a new
chain or corpus of the same size reuses the compiled step):

- `ChainSampler`: fresh sequences from a [`gradflow.MarkovChain`][] (`x_1`
  from $\pi$, then $P$), drawn by inverse CDF with one `lax.scan` over
  positions, vectorised over the batch;
- `WindowSampler`: random windows of a token stream (real text);
- `DatasetSampler`: a fixed set of `N` sequences (finite-N), a batch drawn
  without replacement each step.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Int, PRNGKeyArray

from .chain import MarkovChain


class AbstractSampler(eqx.Module):
    """Draws a batch of token sequences of length `context + 1`."""

    context: eqx.AbstractVar[int]

    def __call__(self, key: PRNGKeyArray, batch_size: int) -> Int[Array, "b s1"]:
        raise NotImplementedError


class ChainSampler(AbstractSampler):
    r"""Sequences of a Markov chain: $x_1 \sim \pi$, $x_{t+1} \sim P[x_t]$.

    Sampling is by inverse CDF: one uniform per token, drawn all at once; a
    `lax.scan` over the `context` positions advances the whole batch.
    """

    cdf_pi: Float[Array, " d"]
    cdf_P: Float[Array, "d d"]
    context: int = eqx.field(static=True)

    def __init__(self, chain: MarkovChain, context: int):
        self.cdf_pi = jnp.cumsum(chain.pi)
        self.cdf_P = jnp.cumsum(chain.P, axis=-1)
        self.context = int(context)

    def __call__(self, key, batch_size):
        d = self.cdf_pi.shape[0]
        u = jax.random.uniform(key, (self.context + 1, batch_size), self.cdf_pi.dtype)

        def pick(cdf, v):
            # Number of CDF entries below v; clipped so that rounding in the
            # last CDF entry (0.9999999...) can never produce token d.
            return jnp.minimum(jnp.sum(v[..., None] >= cdf, axis=-1), d - 1)

        x0 = pick(self.cdf_pi, u[0])

        def advance(x, v):
            nxt = pick(self.cdf_P[x], v)
            return nxt, nxt

        _, rest = jax.lax.scan(advance, x0, u[1:])
        return jnp.concatenate([x0[None], rest], axis=0).T.astype(jnp.int32)


class WindowSampler(AbstractSampler):
    """Windows of `context + 1` consecutive tokens of a stream, uniform starts."""

    ids: Int[Array, " n"]
    context: int = eqx.field(static=True)

    def __call__(self, key, batch_size):
        n = self.ids.shape[0]
        starts = jax.random.randint(key, (batch_size,), 0, n - self.context)
        return self.ids[starts[:, None] + jnp.arange(self.context + 1)]


class DatasetSampler(AbstractSampler):
    """A fixed dataset of `N` sequences; each batch is `batch_size` distinct
    sequences drawn uniformly (without replacement). With `batch_size = N` every
    step is a full-batch gradient step."""

    sequences: Int[Array, "N s1"]
    context: int = eqx.field(static=True)

    def __call__(self, key, batch_size):
        N = self.sequences.shape[0]
        if batch_size == N:
            return self.sequences
        index = jax.random.choice(key, N, (batch_size,), replace=False)
        return self.sequences[index]


__all__ = [
    "AbstractSampler",
    "ChainSampler",
    "DatasetSampler",
    "WindowSampler",
]
