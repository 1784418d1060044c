r"""The one-layer attention model: parameters, the closed-form population loss
(SPEC section 3) and the finite-context model (SPEC section 2).

Both losses share one attention primitive, [`_attention_weights`][], so the
population loss is exactly the finite-context model with the softmax over
positions replaced by a $\pi$-weighted softmax over the vocabulary.
"""

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int

from ._chain import MarkovChain
from ._custom_types import Attention, Scalar, Square
from ._errors import is_number, show


class Params(eqx.Module):
    r"""Parameters $\theta = (W_0, W_1, W_Q, W_K)$ of the one-layer model.

    | field | shape | role |
    | --- | --- | --- |
    | `W0` | `(m, d)` | embedding: column `k` is token `k`'s embedding |
    | `W1` | `(d, m)` | output projection |
    | `WQ` | `(m, m)` | query matrix |
    | `WK` | `(m, m)` | key matrix |

    No value matrix, no residual path, no layer norm, no $1/\sqrt{m}$.
    Arrays may carry leading batch axes (a trajectory's `params` has a leading
    time axis); the trailing two axes must have the shapes above.

    **Example:** `gf.Params(W0, W1, WQ, WK)` or `gf.Params(W0=..., W1=..., ...)`.
    """

    W0: Float[Array, "*batch m d"]
    W1: Float[Array, "*batch d m"]
    WQ: Float[Array, "*batch m m"]
    WK: Float[Array, "*batch m m"]

    def __check_init__(self):
        shapes = {}
        for name in ("W0", "W1", "WQ", "WK"):
            value = getattr(self, name)
            shape = getattr(value, "shape", None)
            if shape is None or len(shape) < 2:
                raise ValueError(
                    f"Params.{name} must be an array with at least 2 dimensions, "
                    f"got {type(value).__name__} with shape {shape}"
                )
            shapes[name] = tuple(shape)
        m, d = shapes["W0"][-2:]
        expected = {"W1": (d, m), "WQ": (m, m), "WK": (m, m)}
        for name, want in expected.items():
            if shapes[name][-2:] != want:
                raise ValueError(
                    f"Params.{name} has shape {shapes[name]} but W0 has shape "
                    f"{shapes['W0']} (m = {m}, d = {d}), so {name} must end in {want}"
                )

    @property
    def d(self) -> int:
        """Vocabulary size."""
        return self.W0.shape[-1]

    @property
    def m(self) -> int:
        """Width (embedding dimension)."""
        return self.W0.shape[-2]

    @property
    def num_parameters(self) -> int:
        """Number of scalar parameters of one (unbatched) point."""
        m, d = self.m, self.d
        return 2 * m * d + 2 * m * m

    def __getitem__(self, index) -> "Params":
        """Indexes the leading (time) axis: `traj.params[-1]` is the last point."""
        return jax.tree.map(lambda x: x[index], self)


def init_params(
    d: int,
    width: int = 16,
    init_scale: float = 1e-3,
    seed: int = 0,
    dtype=jnp.float64,
) -> Params:
    r"""Random initialisation: every entry i.i.d. $\mathcal{N}(0, \mathrm{init\_scale}^2)$.

    **Arguments:**

    - `d`: vocabulary size; `width`: $m$; `init_scale`: standard deviation > 0;
    - `seed`: integer seed of `jax.random.key`; `dtype`: float64 by default.

    **Returns:** a [`gradflow.Params`][].
    """
    if isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d < 2:
        raise ValueError(f"d must be an integer >= 2, got d = {show(d)}")
    if isinstance(width, bool) or not isinstance(width, (int, np.integer)) or width < 1:
        raise ValueError(f"width must be an integer >= 1, got width = {show(width)}")
    init_scale = _check_init_scale(init_scale)
    seed = _check_seed(seed)
    try:
        floating = jnp.issubdtype(dtype, jnp.floating)
    except TypeError:
        floating = False
    if not floating:
        raise TypeError(f"dtype must be a floating dtype, got dtype = {show(dtype)}")
    k0, k1, kq, kk = jax.random.split(jax.random.key(seed), 4)
    m = int(width)

    def normal(key, shape):
        return init_scale * jax.random.normal(key, shape, dtype=dtype)

    return Params(
        W0=normal(k0, (m, d)),
        W1=normal(k1, (d, m)),
        WQ=normal(kq, (m, m)),
        WK=normal(kk, (m, m)),
    )


def _check_init_scale(init_scale) -> float:
    if isinstance(init_scale, Params):
        raise TypeError(
            "init_scale must be a positive number, got a gradflow.Params; pass a "
            "starting point as params=..."
        )
    if not is_number(init_scale):
        raise TypeError(f"init_scale must be a positive number, got {show(init_scale)}")
    value = float(init_scale)
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"init_scale must be finite and > 0, got {show(init_scale)}")
    return value


def _check_seed(seed) -> int:
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"seed must be an integer, got seed = {show(seed)}")
    return int(seed)


def _attention_weights(
    WQ: Square,
    WK: Square,
    queries: Float[Array, "m q"],
    keys: Float[Array, "m n"],
    log_weights: Float[Array, "*q n"],
) -> Float[Array, "q n"]:
    r"""Softmax attention of each query over the keys, with log prior weights.

    $\alpha[i, k] \propto w_k \exp((W_Q q_i) \cdot (W_K k_k))$, computed as a
    softmax of scores plus $\log w_k$: stable for any score size, and exactly
    zero weight where $w_k = 0$.
    """
    scores = (WQ @ queries).T @ (WK @ keys)
    return jax.nn.softmax(scores + log_weights, axis=-1)


def attention(params: Params, chain: MarkovChain) -> Attention:
    r"""The population attention matrix $A$ (SPEC section 3).

    $A[i, k] = \pi_k e^{S[i, k]} / \sum_l \pi_l e^{S[i, l]}$ with
    $S = (W_Q W_0)^\top (W_K W_0)$: row `i` is how a query token `i` spreads its
    attention over key tokens in an infinitely long context.
    """
    E = params.W0
    return _attention_weights(params.WQ, params.WK, E, E, jnp.log(chain.pi))


def population_logits(params: Params, chain: MarkovChain) -> Float[Array, "d d"]:
    """$Z = W_1 W_0 A^\\top$: column `i` holds the next-token logits for query `i`."""
    H = params.W0 @ attention(params, chain).T
    return params.W1 @ H


def population_loss(params: Params, chain: MarkovChain) -> Scalar:
    r"""The population cross-entropy in closed form (SPEC section 3).

    $$L(\theta) = \sum_i \pi_i \Big[\operatorname{logsumexp}_y Z_{yi}
    - \sum_y P_{iy} Z_{yi}\Big], \qquad Z = W_1 W_0 A^\top.$$

    The limit of the finite-context loss as the number of sequences and the
    context length go to infinity. $L(0) = \log d$, $L \ge$ the chain's
    conditional entropy. Pure and jit-able; differentiate it with `jax.grad`.
    """
    Z = population_logits(params, chain)
    per_query = jax.nn.logsumexp(Z, axis=0) - jnp.sum(chain.P.T * Z, axis=0)
    return jnp.dot(chain.pi, per_query)


def finite_context_logits(
    params: Params, context: Int[Array, "*batch s"]
) -> Float[Array, "*batch d"]:
    """Next-token logits of the finite-context model of SPEC section 2.

    The last token of each context queries every position `1..s` (itself
    included) with uniform prior weight; no value matrix.
    """

    def one(tokens):
        E = params.W0
        keys = E[:, tokens]
        query = keys[:, -1:]
        alpha = _attention_weights(
            params.WQ, params.WK, query, keys, jnp.zeros(tokens.shape[-1], E.dtype)
        )
        h = keys @ alpha[0]
        return params.W1 @ h

    flat = context.reshape(-1, context.shape[-1])
    return jax.vmap(one)(flat).reshape(*context.shape[:-1], params.d)


def finite_context_loss(params: Params, sequences: Int[Array, "*batch s1"]) -> Scalar:
    r"""Mean cross-entropy of the finite-context model on token sequences.

    Each sequence `x_1..x_{s+1}` contributes $-\log
    \mathrm{softmax}(W_1 h)[x_{s+1}]$ with context `x_1..x_s`. As the number of
    sequences and `s` grow, this converges to
    [`gradflow.population_loss`][] for sequences drawn from the chain.
    """
    logits = finite_context_logits(params, sequences[..., :-1])
    targets = sequences[..., -1]
    logp = jax.nn.log_softmax(logits, axis=-1)
    nll = -jnp.take_along_axis(logp, targets[..., None], axis=-1)[..., 0]
    return jnp.mean(nll)


__all__ = [
    "Params",
    "attention",
    "finite_context_logits",
    "finite_context_loss",
    "init_params",
    "population_logits",
    "population_loss",
]
