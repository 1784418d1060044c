r"""Model variants beyond the paper (`docs/variants.md`, "The model in closed form"): several heads, a value
matrix, a residual stream, RMS or layer normalisation, two layers.

[`gradflow.Model`][] is the static description of a variant;
[`gradflow.VariantParams`][] its parameters, which carry the `Model` as a
static field, so every function of `(params, chain)` knows the architecture
from the parameters alone. `gf.Model()` is the paper's minimal model; its
parameters stay [`gradflow.Params`][] and its arithmetic is untouched.

One forward per model, [`_layer`][], shared by the population loss (infinite
context: keys are the vocabulary with prior weights $\pi$) and the
finite-context model (keys are positions, causal), both through the one
attention primitive `attention_weights` (`gradflow/markov/primitive.py`).
"""

from typing import Any, ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int

from .._core.errors import show
from .._core.random import scaled_normal
from .chain import MarkovChain
from .primitive import attention_weights


# The epsilon of the normalisations, inside the square root (`docs/variants.md`).
NORM_EPS = 1e-5
NORMS = (None, "rms", "layer")
MAX_LAYERS = 2


def _check_int(name: str, value, low: int, high: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"Model {name} must be an integer, got {name} = {show(value)}")
    if value < low or (high is not None and value > high):
        bound = f">= {low}" if high is None else f"between {low} and {high}"
        raise ValueError(f"Model {name} must be {bound}, got {name} = {value}")
    return int(value)


class Model(eqx.Module):
    r"""A static description of the architecture (`docs/variants.md`, "The model in closed form").

    **Arguments:**

    - `heads`: attention heads per layer, $H \ge 1$ (their outputs are summed,
      no $1/H$);
    - `layers`: 1 or 2 attention layers;
    - `value`: a value matrix $W_V$ per head ($V_h = W_V X$; otherwise $V_h = X$);
    - `residual`: a residual stream ($X \leftarrow X + Y$; otherwise $X \leftarrow Y$);
    - `norm`: `None`, `"rms"` or `"layer"`, applied to each column before $W_1$.

    `gf.Model()` is the paper's minimal model, whose parameters are
    [`gradflow.Params`][]; every other variant has [`gradflow.VariantParams`][].
    Hashable and comparable; `model.as_dict()` / `Model(**d)` round-trip.

    **Raises:** `TypeError`/`ValueError` naming the argument and its value.

    **Example:** `gf.Model(heads=2, value=True, residual=True, norm="rms")`.
    """

    MAX_LAYERS: ClassVar[int] = MAX_LAYERS

    heads: int = eqx.field(static=True, default=1)
    layers: int = eqx.field(static=True, default=1)
    value: bool = eqx.field(static=True, default=False)
    residual: bool = eqx.field(static=True, default=False)
    norm: str | None = eqx.field(static=True, default=None)

    def __check_init__(self):
        _check_int("heads", self.heads, 1)
        _check_int("layers", self.layers, 1, MAX_LAYERS)
        for name in ("value", "residual"):
            flag = getattr(self, name)
            if not isinstance(flag, (bool, np.bool_)):
                raise TypeError(
                    f"Model {name} must be True or False, got {name} = {show(flag)}"
                )
        if not (self.norm is None or isinstance(self.norm, str)) or (
            self.norm not in NORMS
        ):
            raise ValueError(
                f"Model norm must be one of None, 'rms', 'layer', got norm = "
                f"{show(self.norm)}"
            )

    @property
    def minimal(self) -> bool:
        """Whether this is the paper's model (parameters: [`gradflow.Params`][])."""
        return self == Model()

    def as_dict(self) -> dict[str, Any]:
        """The fields as a JSON-able dict (saved in a trajectory's settings)."""
        return {
            "heads": int(self.heads),
            "layers": int(self.layers),
            "value": bool(self.value),
            "residual": bool(self.residual),
            "norm": self.norm,
        }

    @property
    def label(self) -> str:
        """A short name: `"minimal"`, or the ingredients joined by `+`
        (`"heads=2+value+residual+norm=rms+layers=2"`)."""
        parts = []
        if self.heads != 1:
            parts.append(f"heads={self.heads}")
        if self.value:
            parts.append("value")
        if self.residual:
            parts.append("residual")
        if self.norm is not None:
            parts.append(f"norm={self.norm}")
        if self.layers != 1:
            parts.append(f"layers={self.layers}")
        return "+".join(parts) or "minimal"


def as_model(model) -> Model:
    """`None` (the minimal model), a [`gradflow.Model`][] or its `as_dict()`."""
    if model is None:
        return Model()
    if isinstance(model, Model):
        return model
    if isinstance(model, dict):
        unknown = sorted(set(model) - set(Model().as_dict()))
        if unknown:
            raise ValueError(f"model has unknown keys {unknown}, got model = {model}")
        return Model(**model)
    raise TypeError(f"model must be a gradflow.Model, got model = {show(model)}")


class AbstractParams(eqx.Module):
    """What every point of the paper's model (the minimal one's
    [`gradflow.Params`][], a variant's [`gradflow.VariantParams`][]) has: the
    embedding `W0` and the sizes read off it."""

    W0: eqx.AbstractVar[Float[Array, "*batch m d"]]

    @property
    def d(self) -> int:
        """Vocabulary size."""
        return self.W0.shape[-1]

    @property
    def m(self) -> int:
        """Width (embedding dimension)."""
        return self.W0.shape[-2]


class VariantParams(AbstractParams):
    r"""Parameters of a variant (`docs/variants.md`); the model is a static field.

    | field | shape | present when |
    | --- | --- | --- |
    | `W0` | `(m, d)` | always |
    | `W1` | `(d, m)` | always |
    | `WQ`, `WK` | `(layers, heads, m, m)` | always |
    | `WV` | `(layers, heads, m, m)` | `model.value` (else `None`) |
    | `gain` | `(m,)` | `model.norm` set (else `None`) |
    | `bias` | `(m,)` | `model.norm == "layer"` (else `None`) |
    | `model` | static | the [`gradflow.Model`][] |

    Arrays may carry leading batch axes (a trajectory's `params` has a leading
    time axis, indexed by `params[i]`), like [`gradflow.Params`][].

    **Example:** `gf.init_params(6, 8, 1e-3, model=gf.Model(heads=2))`.
    """

    W0: Float[Array, "*batch m d"]
    W1: Float[Array, "*batch d m"]
    WQ: Float[Array, "*batch layers heads m m"]
    WK: Float[Array, "*batch layers heads m m"]
    WV: Float[Array, "*batch layers heads m m"] | None
    gain: Float[Array, "*batch m"] | None
    bias: Float[Array, "*batch m"] | None
    model: Model = eqx.field(static=True)

    def __init__(self, W0, W1, WQ, WK, WV=None, *, gain=None, bias=None, model):
        self.W0, self.W1, self.WQ, self.WK = W0, W1, WQ, WK
        self.WV, self.gain, self.bias = WV, gain, bias
        self.model = model

    def __check_init__(self):
        if not isinstance(self.model, Model):
            raise TypeError(
                f"VariantParams model must be a gradflow.Model, got {show(self.model)}"
            )
        model = self.model
        want = {
            "WV": model.value,
            "gain": model.norm is not None,
            "bias": model.norm == "layer",
        }
        for name, present in want.items():
            value = getattr(self, name)
            if present and value is None:
                raise ValueError(f"VariantParams.{name} is required for {model}")
            if not present and value is not None:
                raise ValueError(f"VariantParams.{name} must be None for {model}")
        ndims = {"W0": 2, "W1": 2, "WQ": 4, "WK": 4, "WV": 4, "gain": 1, "bias": 1}
        shapes = {}
        for name, nd in ndims.items():
            value = getattr(self, name)
            if value is None:
                continue
            shape = getattr(value, "shape", None)
            if shape is None or len(shape) < nd:
                raise ValueError(
                    f"VariantParams.{name} must be an array with at least {nd} "
                    f"dimensions, got {type(value).__name__} with shape {shape}"
                )
            shapes[name] = tuple(shape)
        m, d = shapes["W0"][-2:]
        lh = (model.layers, model.heads)
        expected = {
            "W1": (d, m),
            "WQ": (*lh, m, m),
            "WK": (*lh, m, m),
            "WV": (*lh, m, m),
            "gain": (m,),
            "bias": (m,),
        }
        for name, shape in shapes.items():
            if name == "W0":
                continue
            end = expected[name]
            if shape[len(shape) - len(end) :] != end:
                raise ValueError(
                    f"VariantParams.{name} has shape {shape} but W0 has shape "
                    f"{shapes['W0']} (m = {m}, d = {d}) and the model has "
                    f"layers = {model.layers}, heads = {model.heads}, so {name} must "
                    f"end in {end}"
                )

    @property
    def num_parameters(self) -> int:
        """Number of scalar parameters of one (unbatched) point."""
        return num_parameters(self.model, self.d, self.m)

    def __getitem__(self, index) -> "VariantParams":
        """Indexes the leading (time) axis: `traj.params[-1]` is the last point."""
        return jax.tree.map(lambda x: x[index], self)


def num_parameters(model: Model, d: int, m: int) -> int:
    """Scalar parameters of `model` at vocabulary `d` and width `m`."""
    blocks = 3 if model.value else 2
    n = 2 * m * d + blocks * model.layers * model.heads * m * m
    n += m if model.norm is not None else 0
    n += m if model.norm == "layer" else 0
    return n


PARAM_NAMES = ("W0", "W1", "WQ", "WK", "WV", "gain", "bias")


def init_variant_params(key, d, m, init_scale, *, dtype, model: Model) -> VariantParams:
    """The variants' initialisation (`docs/variants.md`; arguments checked): every
    matrix entry i.i.d. $N(0, \\text{init\\_scale}^2)$, `gain` 1, `bias` 0."""
    k0, k1, kq, kk, kv = jax.random.split(key, 5)
    lh = (model.layers, model.heads)

    def normal(key, shape):
        return scaled_normal(key, shape, init_scale, dtype)

    return VariantParams(
        W0=normal(k0, (m, d)),
        W1=normal(k1, (d, m)),
        WQ=normal(kq, (*lh, m, m)),
        WK=normal(kk, (*lh, m, m)),
        WV=normal(kv, (*lh, m, m)) if model.value else None,
        gain=jnp.ones(m, dtype) if model.norm is not None else None,
        bias=jnp.zeros(m, dtype) if model.norm == "layer" else None,
        model=model,
    )


# --------------------------------------------------------------------------
# The forward pass: one attention layer, shared by both losses.


def _layer(
    params: VariantParams,
    layer: int,
    queries: Float[Array, "m q"],
    keys: Float[Array, "m n"],
    log_weights: Float[Array, "*q n"],
) -> tuple[Float[Array, "m q"], Float[Array, "heads q n"]]:
    r"""One layer: $Y = \sum_h V_h A_h^\top$ for the query columns, plus the
    queries themselves with a residual stream. Returns `(X_next, A)`."""
    WQ, WK = params.WQ[layer], params.WK[layer]
    A = jax.vmap(lambda q, k: attention_weights(q, k, queries, keys, log_weights))(
        WQ, WK
    )
    if params.WV is None:
        Y = jnp.sum(keys @ jnp.swapaxes(A, -1, -2), axis=0)
    else:
        V = params.WV[layer] @ keys  # (heads, m, n)
        Y = jnp.sum(V @ jnp.swapaxes(A, -1, -2), axis=0)
    return (queries + Y if params.model.residual else Y), A


def _normalise(params: VariantParams, X: Float[Array, "m q"]) -> Float[Array, "m q"]:
    """The normalisation $N$ of each column (`docs/variants.md`) (a no-op without norm)."""
    norm = params.model.norm
    if norm is None:
        return X
    assert params.gain is not None
    if norm == "rms":
        return params.gain[:, None] * X / jnp.sqrt(jnp.mean(X**2, axis=0) + NORM_EPS)
    centred = X - jnp.mean(X, axis=0)
    var = jnp.mean(centred**2, axis=0)
    assert params.bias is not None
    return (
        params.gain[:, None] * centred / jnp.sqrt(var + NORM_EPS) + params.bias[:, None]
    )


def variant_population_forward(
    params: VariantParams, chain: MarkovChain
) -> tuple[Float[Array, "d d"], Float[Array, "layers heads d d"]]:
    """`(Z, A)`: the population logits (column `i`: query token `i`) and the
    attention of every layer and head (`docs/variants.md`, "The model in closed form")."""
    X = params.W0
    log_pi = jnp.log(chain.pi)
    attentions = []
    for layer in range(params.model.layers):
        X, A = _layer(params, layer, X, X, log_pi)
        attentions.append(A)
    return params.W1 @ _normalise(params, X), jnp.stack(attentions)


def variant_finite_context_logits(
    params: VariantParams, context: Int[Array, "*batch s"]
) -> Float[Array, "*batch d"]:
    """The finite-context variant: each layer applied causally at every position
    (position `j` attends to `1..j`, itself included); the last position's
    output gives the next-token logits."""

    def one(tokens):
        X = params.W0[:, tokens]
        s = tokens.shape[-1]
        causal = jnp.where(
            jnp.arange(s)[None, :] <= jnp.arange(s)[:, None], 0.0, -jnp.inf
        ).astype(X.dtype)
        for layer in range(params.model.layers - 1):
            X, _ = _layer(params, layer, X, X, causal)
        # the last layer is needed at the last position only
        last, _ = _layer(
            params, params.model.layers - 1, X[:, -1:], X, jnp.zeros(s, X.dtype)
        )
        return (params.W1 @ _normalise(params, last))[:, 0]

    flat = context.reshape(-1, context.shape[-1])
    return jax.vmap(one)(flat).reshape(*context.shape[:-1], params.d)


def variant_counted_logits(
    params: VariantParams, query: Int[Array, " b"], counts: Float[Array, "b d"]
) -> Float[Array, "d b"]:
    r"""The finite-context logits of a **one-layer** variant from token counts.

    With one layer the last position's scores depend only on the key tokens,
    so the softmax over the $s$ positions is a softmax over the $d$ tokens
    weighted by their counts $n_k$ in the context: the population forward with
    $\pi$ replaced by the counts (the same `_layer`). Equal to
    [`variant_finite_context_logits`][] on the same sequences (tested). With
    two layers the first layer's output at a position depends on the prefix
    before it, not on the token alone, so this shortcut does not apply.
    """
    if params.model.layers != 1:
        raise ValueError(
            f"counted logits need a one-layer model, got layers = {params.model.layers}"
        )
    X = params.W0
    Y, _ = _layer(params, 0, X[:, query], X, jnp.log(counts))
    return params.W1 @ _normalise(params, Y)


__all__ = [
    "MAX_LAYERS",
    "NORMS",
    "NORM_EPS",
    "Model",
    "VariantParams",
    "as_model",
    "num_parameters",
]
