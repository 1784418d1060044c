r"""The one-layer attention model: parameters, the closed-form population loss
(`docs/model.md`, "Population loss") and the finite-context model
(`docs/model.md`, "Model (finite context)"), and the public entry points that
serve every model variant (`docs/variants.md`, "The model in closed form").

Both losses share one attention primitive, `attention_weights`
(`gradflow/markov/primitive.py`), so the population loss is exactly
the finite-context model with the softmax over positions replaced by a
$\pi$-weighted softmax over the vocabulary. The functions here take either
[`gradflow.Params`][] (the paper's model, whose arithmetic is kept exactly) or
[`gradflow.VariantParams`][] (`variants.py`), which carry their
[`gradflow.Model`][].
"""

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int

from .._core.custom_types import Scalar
from .._core.errors import show
from .._core.random import scaled_normal, split_key
from .._core.validate import check_finite_entries, check_init_scale, check_seed
from .blocked import BLOCKED_MIN_D, blocked_population_loss
from .chain import MarkovChain
from .custom_types import Attention
from .primitive import attention_weights, mean_nll, population_cross_entropy
from .variants import (
    PARAM_NAMES,
    AbstractParams,
    Model,
    VariantParams,
    as_model,
    init_variant_params,
    variant_finite_context_logits,
    variant_population_forward,
)


class Params(AbstractParams):
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
    def num_parameters(self) -> int:
        """Number of scalar parameters of one (unbatched) point."""
        m, d = self.m, self.d
        return 2 * m * d + 2 * m * m

    def __getitem__(self, index) -> "Params":
        """Indexes the leading (time) axis: `traj.params[-1]` is the last point."""
        return jax.tree.map(lambda x: x[index], self)


AnyParams = Params | VariantParams


def init_params(
    d: int,
    width: int = 16,
    init_scale: float = 1e-3,
    seed: int = 0,
    *,
    dtype=jnp.float64,
    model: Model | None = None,
) -> AnyParams:
    r"""Random initialisation: every entry i.i.d. $\mathcal{N}(0, \text{init\_scale}^2)$.

    **Arguments:**

    - `d`: vocabulary size; `width`: $m$; `init_scale`: standard deviation > 0;
    - `seed`: integer seed of `jax.random.key`; `dtype`: float64 by default;
    - `model`: a [`gradflow.Model`][]; `None` or `gf.Model()` is the paper's
      model. A variant's normalisation `gain` starts at 1 and `bias` at 0
      (`docs/variants.md`, "The model in closed form").

    **Returns:** a [`gradflow.Params`][] for the minimal model (the same numbers
    as before variants existed), else a [`gradflow.VariantParams`][].
    """
    if isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d < 2:
        raise ValueError(f"d must be an integer >= 2, got d = {show(d)}")
    if isinstance(width, bool) or not isinstance(width, (int, np.integer)) or width < 1:
        raise ValueError(f"width must be an integer >= 1, got width = {show(width)}")
    init_scale = check_init_scale(init_scale)
    seed = check_seed(seed)
    model = as_model(model)
    try:
        floating = jnp.issubdtype(dtype, jnp.floating)
    except TypeError:
        floating = False
    if not floating:
        raise TypeError(f"dtype must be a floating dtype, got dtype = {show(dtype)}")
    return draw_params(
        jax.random.key(seed), d, width, init_scale, dtype=dtype, model=model
    )


def draw_params(key, d: int, width: int, init_scale: float, *, dtype, model: Model):
    """The random start of `init_params` from a key (arguments already
    checked): the same numbers as `init_params(..., seed)` with
    `key = jax.random.key(seed)`."""
    m = int(width)
    if not model.minimal:
        return init_variant_params(key, d, m, init_scale, dtype=dtype, model=model)
    k0, k1, kq, kk = split_key(key, 4)

    def normal(key, shape):
        return scaled_normal(key, shape, init_scale, dtype)

    return Params(
        W0=normal(k0, (m, d)),
        W1=normal(k1, (d, m)),
        WQ=normal(kq, (m, m)),
        WK=normal(kk, (m, m)),
    )


def model_of(params: AnyParams) -> Model:
    """The [`gradflow.Model`][] of a point: `gf.Model()` for [`gradflow.Params`][]."""
    if isinstance(params, Params):
        return Model()
    return _variant(params).model


def param_arrays(params: AnyParams) -> dict[str, Any]:
    """`{name: array}` of the parameters that are present (for saving)."""
    return {
        name: getattr(params, name)
        for name in PARAM_NAMES
        if getattr(params, name, None) is not None
    }


# Dimensions of one point (no time axis) of each parameter.
_NDIM = {"W0": 2, "W1": 2, "WQ": 2, "WK": 2}
_VARIANT_NDIM = {"W0": 2, "W1": 2, "WQ": 4, "WK": 4, "WV": 4, "gain": 1, "bias": 1}


def check_point(params, chain: MarkovChain, dtype=jnp.float64) -> AnyParams:
    """One point of the paper's model (or a variant) for `chain`: no time
    axis, `d` tokens, finite; returned in `dtype`. A one-line `TypeError` or
    `ValueError` naming what is wrong otherwise (the one check of a given
    point, for flows, SGD and the theory)."""
    if not isinstance(params, (Params, VariantParams)):
        raise TypeError(
            "params must be a gradflow.Params or gradflow.VariantParams, got "
            f"{type(params).__name__}"
        )
    ndims = _NDIM if isinstance(params, Params) else _VARIANT_NDIM
    for name, value in param_arrays(params).items():
        if np.ndim(value) != ndims[name]:
            raise ValueError(
                f"params.{name} must be {ndims[name]}-dimensional (one point, no time "
                f"axis), got shape {np.shape(value)}; index a trajectory's params "
                "as traj.params[i]"
            )
    if params.d != chain.d:
        raise ValueError(
            f"params are for d = {params.d} tokens (W0 has shape {params.W0.shape}) "
            f"but the chain has d = {chain.d}"
        )
    for name, value in param_arrays(params).items():
        check_finite_entries(f"params.{name}", value)
    return jax.tree.map(lambda x: jnp.asarray(x, dtype=dtype), params)


def _variant(params) -> VariantParams:
    if not isinstance(params, VariantParams):
        raise TypeError(
            "params must be a gradflow.Params or gradflow.VariantParams, got "
            f"{type(params).__name__}"
        )
    return params


def attention(
    params: AnyParams, chain: MarkovChain
) -> Attention | Float[Array, "layers heads d d"]:
    r"""The population attention matrix $A$ (`docs/model.md`, "Population loss").

    $A[i, k] = \pi_k e^{S[i, k]} / \sum_l \pi_l e^{S[i, l]}$ with
    $S = (W_Q W_0)^\top (W_K W_0)$: row `i` is how a query token `i` spreads its
    attention over key tokens in an infinitely long context.

    For [`gradflow.VariantParams`][]: the attention of every layer and head,
    shape `(layers, heads, d, d)`, each computed from that layer's input
    (`docs/variants.md`, "The model in closed form"); [`gradflow.markov.attention_summary`][] gives one
    `(d, d)`
    matrix.
    """
    if not isinstance(params, Params):
        _, A = variant_population_forward(_variant(params), chain)
        return A
    E = params.W0
    return attention_weights(params.WQ, params.WK, E, E, jnp.log(chain.pi))


def attention_summary(params: AnyParams, chain: MarkovChain) -> Attention:
    r"""One `(d, d)` attention matrix for diagnostics and stage detection.

    For [`gradflow.Params`][] it is [`gradflow.attention`][] itself. For a
    variant it is the **last layer's attention averaged over its heads**,
    $\bar A = \frac1H \sum_h A^{(L)}_h$: the layer whose output feeds $W_1$,
    and a row-stochastic matrix, so its $\pi$-weighted entropy and key masses
    mean what they mean for the minimal model. The entropy of the average is at
    least the average of the heads' entropies: one head focusing while another
    stays uniform shows as a weaker focus.
    """
    if isinstance(params, Params):
        return attention(params, chain)
    return jnp.mean(attention(params, chain)[-1], axis=0)


def population_logits(params: AnyParams, chain: MarkovChain) -> Float[Array, "d d"]:
    """$Z = W_1 W_0 A^\\top$: column `i` holds the next-token logits for query `i`
    (for a variant: $Z = W_1 N(X_L)$, `docs/variants.md`, "The model in closed form")."""
    if not isinstance(params, Params):
        Z, _ = variant_population_forward(_variant(params), chain)
        return Z
    H = params.W0 @ attention(params, chain).T
    return params.W1 @ H


def population_loss(
    params: AnyParams, chain: MarkovChain, *, block: int | str | None = None
) -> Scalar:
    r"""The population cross-entropy in closed form (`docs/model.md`,
    "Population loss"; for the variants, `docs/variants.md`).

    $$L(\theta) = \sum_i \pi_i \Big[\operatorname{logsumexp}_y Z_{yi}
    - \sum_y P_{iy} Z_{yi}\Big], \qquad Z = W_1 W_0 A^\top.$$

    The limit of the finite-context loss as the number of sequences and the
    context length go to infinity. $L(0) = \log d$, $L \ge$ the chain's
    conditional entropy. Pure and jit-able; differentiate it with `jax.grad`.
    Takes [`gradflow.Params`][] or any variant's [`gradflow.VariantParams`][]
    (then $Z = W_1 N(X_L)$, `docs/variants.md`, "The model in closed form").

    `block` (the paper's model only) chooses how it is computed:

    - `None` (default): the dense form below $d = 256$ (every recorded
      result, bit for bit), the blocked form from $d = 256$ on (blocks of
      about $2^{18} / d$ query tokens for the loss and its gradient,
      $2^{17} / d$ for Hessian-vector products, at least 128 up to
      $d = 2048$);
    - an integer $\ge 1$: the blocked form with this many query tokens per
      block (`docs/model.md`, "The blocked form"): no intermediate is larger
      than `block x d`, `jax.grad` runs a hand-written backward pass, and
      Hessian-vector products (`jax.jvp` or `jax.linearize` of the
      gradient, `jax.hessian`) a hand-written one, blocked too. Equal to the
      dense form to round-off, not bit for bit; derivatives with respect to
      the chain are those of the dense form;
    - `"dense"`: the dense form, differentiated by JAX, at any $d$ (its
      intermediates are $d \times d$).

    Variants always use the dense form.
    """
    dense = isinstance(block, str) and block == "dense"
    if isinstance(block, str) and not dense:
        raise ValueError(
            f"block must be an integer >= 1 or 'dense', got block = {show(block)}"
        )
    if not isinstance(params, Params):
        if block is not None and not dense:
            raise ValueError(
                f"block is for the paper's model (gradflow.Params), got block = "
                f"{show(block)} with {type(params).__name__} of {model_of(params)}"
            )
        return population_cross_entropy(population_logits(params, chain), chain)
    if block is None:
        if chain.d < BLOCKED_MIN_D:
            return population_cross_entropy(population_logits(params, chain), chain)
        return blocked_population_loss(params, chain)
    if dense:
        return population_cross_entropy(population_logits(params, chain), chain)
    if isinstance(block, bool) or not isinstance(block, (int, np.integer)) or block < 1:
        raise ValueError(
            f"block must be an integer >= 1 or 'dense', got block = {show(block)}"
        )
    return blocked_population_loss(params, chain, int(block))


def finite_context_logits(
    params: AnyParams, context: Int[Array, "*batch s"]
) -> Float[Array, "*batch d"]:
    """Next-token logits of the finite-context model (`docs/model.md`, "Model (finite context)").

    The last token of each context queries every position `1..s` (itself
    included) with uniform prior weight; no value matrix. For a variant, every
    layer runs causally at every position (`docs/variants.md`, "The model in closed form").
    """
    if not isinstance(params, Params):
        return variant_finite_context_logits(_variant(params), context)

    def one(tokens):
        E = params.W0
        keys = E[:, tokens]
        query = keys[:, -1:]
        alpha = attention_weights(
            params.WQ, params.WK, query, keys, jnp.zeros(tokens.shape[-1], E.dtype)
        )
        h = keys @ alpha[0]
        return params.W1 @ h

    flat = context.reshape(-1, context.shape[-1])
    return jax.vmap(one)(flat).reshape(*context.shape[:-1], params.d)


def finite_context_loss(
    params: AnyParams, sequences: Int[Array, "*batch s1"]
) -> Scalar:
    r"""Mean cross-entropy of the finite-context model on token sequences.

    Each sequence `x_1..x_{s+1}` contributes $-\log
    \mathrm{softmax}(W_1 h)[x_{s+1}]$ with context `x_1..x_s`. As the number of
    sequences and `s` grow, this converges to
    [`gradflow.population_loss`][] for sequences drawn from the chain.
    """
    logits = finite_context_logits(params, sequences[..., :-1])
    return mean_nll(logits, sequences[..., -1])


__all__ = [
    "AnyParams",
    "check_point",
    "draw_params",
    "Params",
    "attention",
    "attention_summary",
    "finite_context_logits",
    "finite_context_loss",
    "init_params",
    "model_of",
    "population_logits",
    "population_loss",
]
