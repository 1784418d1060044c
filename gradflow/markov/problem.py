r"""The paper's model as a [`gradflow.Problem`][]: a one-layer (or variant)
attention model on an infinite stream of a Markov chain (`docs/model.md`,
`docs/variants.md`). Everything the engine needs of it lives here: its
closed-form loss and variants, its random start, its sampler for SGD
(sequences of the chain, or windows of a text), its observables and its four
stages (condensation, focus, dilution, new directions); and how the entry
points that take a problem also take a chain or a text
([`gradflow.as_problem`][])."""

from typing import Any, cast

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Int

from .._core.errors import show
from .._core.validate import check_integer, check_problem_of
from .._problem.adapt import as_problem
from .._problem.base import (
    Analysis,
    BoundedProblem,
    EnumeratedProblem,
    SampledProblem,
    StagedProblem,
)
from .._problem.files import register_legacy_problem
from .._problem.functions import astype, loss_levels, observe_saves, params_dtype
from .._result.labelled import ArrayNames, array_names
from .chain import MarkovChain, entropy_bounds
from .losses import batch_loss
from .model import (
    AnyParams,
    Params,
    attention_summary,
    check_point,
    draw_params,
    model_of,
    population_logits,
    population_loss,
)
from .samplers import ChainSampler, WindowSampler
from .stages import observe, stages_from_observations
from .text._bigram import TokenStream
from .variants import Model, VariantParams, as_model


# Above this vocabulary size the (d, d) attention matrix is not kept in
# `traj.extras` at every save time.
MAX_SAVED_ATTENTION_D = 64


def check_chain(chain, name: str = "chain") -> MarkovChain:
    if not isinstance(chain, MarkovChain):
        raise TypeError(
            f"{name} must be a gradflow.MarkovChain, got {type(chain).__name__}; "
            "wrap a transition matrix as gf.MarkovChain(P)"
        )
    return chain


# the attention at every save (for a variant: the last layer's, averaged over
# its heads; gf.attention_summary)
_attention_many = eqx.filter_jit(jax.vmap(attention_summary, in_axes=(0, None)))


class MarkovAttention(SampledProblem, StagedProblem, BoundedProblem, EnumeratedProblem):
    r"""The paper's model on a Markov chain: the population cross-entropy of
    `docs/model.md` (and of the variants of `docs/variants.md`) as a
    [`gradflow.Problem`][].

    **Arguments:**

    - `chain`: a [`gradflow.MarkovChain`][].
    - `width`: the embedding width $m$ of the random start.
    - `model`: a [`gradflow.Model`][] (default: the paper's minimal model,
      whose parameters are [`gradflow.Params`][]).
    - `save_attention`: save the `(d, d)` attention matrix at every save time
      in `traj.extras["attention"]` (default: when `d <= 64`).
    - `context`, `text`: for SGD ([`gradflow.train_sgd`][]): `sample` draws
      sequences of `context + 1` tokens of the chain (the first from $\pi$),
      or, with `text` (a [`gradflow.text.TokenStream`][] or its token ids),
      random windows of that text.

    `gf.integrate(chain, init_scale, width=..., model=...)` is exactly
    `gf.flow(gf.problems.MarkovAttention(chain, width=..., model=...),
    init_scale)`.

    **Example:**

    ```python
    problem = gf.problems.MarkovAttention(gf.chains.sticky(6, 0.5, 0.5, 0.05), width=8)
    traj = gf.flow(problem, 1e-3, t1=5000)
    ```
    """

    chain: MarkovChain
    width: int = eqx.field(static=True)
    model: Model = eqx.field(static=True)
    save_attention: bool | None = eqx.field(static=True)
    context: int = eqx.field(static=True)
    text: Int[Array, " n"] | None

    def __init__(
        self,
        chain: MarkovChain,
        width: int = 16,
        model: Model | None = None,
        *,
        save_attention: bool | None = None,
        context: int = 256,
        text: Any = None,
    ):
        self.chain = check_chain(chain)
        self.width = check_integer("width", width, 1, echo_name=False)
        self.model = as_model(model)
        if save_attention not in (None, True, False):
            raise TypeError(
                f"save_attention must be True, False or None, got {show(save_attention)}"
            )
        self.save_attention = save_attention
        self.context = check_integer("context", context, 1)
        ids = getattr(text, "ids", text)
        self.text = None if ids is None else jnp.asarray(ids, jnp.int32)

    # -- the protocol ------------------------------------------------------------

    def loss(self, params: AnyParams) -> Array:
        r"""The population loss, [`gradflow.population_loss`][]: from
        $d = 256$ on (the paper's model) in its blocked form with the
        hand-written gradient and Hessian-vector product (faster, and memory
        per intermediate $d \cdot$ block rather than $d^2$)."""
        return population_loss(params, self.chain)

    def init(self, key, init_scale: float) -> AnyParams:
        return draw_params(
            key,
            self.chain.d,
            self.width,
            init_scale,
            dtype=self.chain.P.dtype,
            model=self.model,
        )

    def sample(self, key, n: int) -> Int[Array, "n s1"]:
        """`n` sequences of `context + 1` tokens: of the chain, or windows of
        the text."""
        if self.text is None:
            return ChainSampler(self.chain, self.context)(key, n)
        return WindowSampler(ids=self.text, context=self.context)(key, n)

    def sample_loss(self, params: AnyParams, batch) -> Array:
        """The finite-context loss of a batch of sequences (`docs/model.md`)."""
        return batch_loss(params, batch)

    def example_weights(self) -> Array:
        r"""$\pi_i P_{iy}$, in the order of `example_losses`: the sample space
        of one example in the infinite-context limit (a query token $i$ and
        the next token $y$; `docs/sgd.md`, "The stochastic modified
        equation")."""
        return (self.chain.pi[:, None] * self.chain.P).reshape(-1)

    def example_losses(self, params: AnyParams) -> Array:
        r"""$\ell_{iy} = \operatorname{logsumexp}_{y'} Z_{y'i} - Z_{yi}$ for
        every query $i$ and next token $y$ (row-major in $(i, y)$), with the
        population logits $Z$: $\sum_{iy} \pi_i P_{iy} \ell_{iy}$ is the
        population loss (the dense form)."""
        Z = population_logits(params, self.chain)
        return (jax.nn.logsumexp(Z, axis=0)[:, None] - Z.T).reshape(-1)

    def observe(self, params: AnyParams) -> dict[str, Array]:
        """The observables of [`gradflow.markov.observe`][] (what the paper's stages
        and figures read)."""
        return observe(None, params, self.chain)

    def loss_scale(self) -> Array:
        r"""$\log d - H(P|\pi)$: the loss's whole range."""
        return jnp.log(self.chain.d) - self.chain.conditional_entropy

    def loss_floor(self) -> float:
        r"""The conditional entropy $H(P|\pi)$: the loss never goes below it."""
        return float(self.chain.conditional_entropy)

    def __str__(self) -> str:
        return f"d={self.chain.d}, m={self.width}"

    @property
    def saves_attention(self) -> bool:
        """Whether `analyse` keeps the attention matrix at every save."""
        if self.save_attention is None:
            return self.chain.d <= MAX_SAVED_ATTENTION_D
        return self.save_attention

    def analyse(self, ts, params, loss, *, thresholds, loss_scale) -> Analysis:
        """The paper's stages (condensation, plateau, focus, dilution,
        new_direction; `docs/stages.md`) on the observables of every save,
        and the attention matrices when kept."""
        del loss, loss_scale  # read from the observables, against the chain
        # observed in the dtype of the saves, detected against the chain as
        # given (float64)
        problem_dt = cast(MarkovAttention, astype(self, params_dtype(params)))
        obs = observe_saves(problem_dt, ts, params)
        stages, events = stages_from_observations(ts, obs, self.chain, thresholds)
        extras = dict(obs)
        if self.saves_attention:
            extras["attention"] = np.asarray(
                _attention_many(jax.tree.map(jax.device_put, params), problem_dt.chain)
            )
        return Analysis(stages=stages, events=events, extras=extras)


@loss_levels.register
def _(problem: MarkovAttention) -> dict[str, tuple[str, float]]:
    """$\\log d$, $H(\\pi)$ (the first plateau) and $H(P|\\pi)$ (the floor)."""
    levels = entropy_bounds(problem.chain)
    return {
        "log_d": (r"$\log d$", levels["log_d"]),
        "unigram": (r"$H(\pi)$", levels["unigram"]),
        "conditional": (r"$H(P|\pi)$", levels["conditional"]),
    }


# The model's token dimensions: each gets the token index as its coordinate
# and, for a text, `DIM_label` with the tokens' strings.
TOKEN_DIMS = ("token", "next_token", "query_token", "key_token")


@array_names.register
def _(problem: MarkovAttention) -> ArrayNames:
    """The token (`token`, `query_token`, `key_token`), width (`width`,
    `query`, `key`, `value`) and singular-value (`sv`) dimensions, with the
    token labels of a text as coordinates (`token_label`, ...)."""
    chain, m = problem.chain, problem.width
    d = chain.d
    lead: tuple[str, ...] = () if problem.model.minimal else ("layer", "head")
    params = {
        ".W0": ("W0", ("width", "token")),
        ".W1": ("W1", ("token", "width")),
        ".WQ": ("WQ", (*lead, "query", "width")),
        ".WK": ("WK", (*lead, "key", "width")),
        ".WV": ("WV", (*lead, "value", "width")),
        ".gain": ("gain", ("width",)),
        ".bias": ("bias", ("width",)),
    }
    extras = {
        "attention": ("query_token", "key_token"),
        "att_mass": ("key_token",),
        "sv_W0": ("sv",),
        "sv_W1": ("sv",),
        "cos_v_pi": ("sv",),
        "sv_ratio": ("sv_ratio_k",),
        "right_sv_W0": ("sv", "token"),
    }
    n = min(m, d)
    coords: dict[str, Any] = {
        "width": np.arange(m),
        "sv": np.arange(1, n + 1),  # sigma_1, sigma_2, ...
        "sv_ratio_k": np.arange(2, n + 1),  # sigma_k / sigma_1
        "query": np.arange(m),
        "key": np.arange(m),
        "value": np.arange(m),
        "layer": np.arange(problem.model.layers),
        "head": np.arange(problem.model.heads),
    }
    labels = np.asarray([chain.label(k) for k in range(d)], dtype=str)
    for dim in TOKEN_DIMS:
        coords[dim] = np.arange(d)
        if chain.tokens is not None:
            coords[f"{dim}_label"] = (dim, labels)
    arrays = {"chain.P": ("P", ("token", "next_token")), "chain.pi": ("pi", ("token",))}
    return ArrayNames(params=params, extras=extras, problem=arrays, coords=coords)


def markov_problem(
    chain, *, width, model, params=None, save_attention=None, context=256, text=None
) -> MarkovAttention:
    """The problem of a call given a chain (`integrate`, `sweep`, `train_sgd`):
    its width and model from given `params` (a point or a batch), checked
    against a `model` given with them."""
    check_chain(chain)
    width = check_integer("width", width, 1, echo_name=False)
    if isinstance(params, (Params, VariantParams)):
        model = None if model is None else as_model(model)
        if model is not None and model != model_of(params):
            raise ValueError(
                f"model = {model} but params are for {model_of(params)}; give one or "
                "the other (params carry their model)"
            )
        width, model = int(np.shape(params.W0)[-2]), model_of(params)
    return MarkovAttention(
        chain, width, model, save_attention=save_attention, context=context, text=text
    )


@as_problem.register(MarkovChain)
@as_problem.register(TokenStream)
def _(
    obj,
    *,
    params=None,
    width: int = 16,
    model: Model | None = None,
    save_attention: bool | None = None,
    context: int = 256,
) -> MarkovAttention:
    """A chain: the paper's model on it; a text: the same model on its bigram
    chain, sampling windows of the text (for SGD). Its width and model are
    read from given `params`."""
    text = obj if isinstance(obj, TokenStream) else None
    if text is not None:
        context = check_integer("context", context, 1)
        if len(text) < context + 2:
            raise ValueError(
                f"the corpus has {len(text)} tokens, too few for windows of "
                f"context + 1 = {context + 1} tokens (need at least {context + 2})"
            )
    return markov_problem(
        obj if text is None else text.chain,
        width=width,
        model=model,
        params=params,
        save_attention=save_attention,
        context=context,
        text=text,
    )


def chain_of(result) -> MarkovChain:
    """The chain of a result (a trajectory, sweep member or SGD run) of the
    paper's model, or a `TypeError` saying what the result is of."""
    problem = check_problem_of(
        getattr(result, "problem", None),
        MarkovAttention,
        "a result of the paper's model (gradflow.problems.MarkovAttention)",
    )
    return problem.chain


def check_start(problem: MarkovAttention, params, dtype) -> AnyParams:
    """A given point of the paper's model for `problem`: the checks of
    [`check_point`][gradflow.markov.model.check_point] (its messages name
    the paper's parameters), and its width and model against the problem's."""
    point = check_point(params, problem.chain, dtype)
    if model_of(point) != problem.model or point.m != problem.width:
        raise ValueError(
            f"params are for width {point.m} and {model_of(point)}, the problem "
            f"for width {problem.width} and {problem.model}"
        )
    return point


def _legacy(config, arrays) -> MarkovAttention:
    """The paper's model of a file of format 1 or 2 (its own configuration;
    `pi` is stored so that the loaded chain is bit-identical, and files
    without it get `pi` solved again)."""
    chain = MarkovChain(arrays["P"], tokens=config.get("tokens"), pi=arrays.get("pi"))
    return MarkovAttention(
        chain,
        width=config.get("width") or 16,
        model=config.get("model"),
        save_attention=config.get("save_attention"),
        context=config.get("context") or 256,
    )


register_legacy_problem("gradflow.problems:MarkovAttention", _legacy)
register_legacy_problem("format-1", _legacy)


def observe_params(
    ts, params: AnyParams, chain: MarkovChain, *, batch: int = 512
) -> dict[str, np.ndarray]:
    r"""[`gradflow.markov.observe`][] at every saved point: `params` with a
    leading time axis of length `len(ts)` (a trajectory's `traj.params`, an
    SGD run's).

    Evaluated in batches as [`gradflow.problems.observe_saves`][] does (at
    most `batch` saves, and `2**24 / d**2` at large `d`, so memory stays
    bounded). **Returns:** a dict of NumPy arrays with a leading time axis.
    """
    ts = np.asarray(ts, dtype=np.float64)
    if ts.ndim != 1 or ts.shape[0] != np.shape(params.W0)[0]:
        raise ValueError(
            f"ts must be one time per saved point: got ts of shape {ts.shape} and "
            f"params with {np.shape(params.W0)[0]} points"
        )
    dtype = jnp.result_type(params.W0)  # (jnp.asarray compiles a copy per length)
    chain_dt = jax.tree.map(lambda x: jnp.asarray(x, dtype), chain)
    problem = MarkovAttention(
        chain_dt, int(np.shape(params.W0)[-2]), model_of(params), save_attention=False
    )
    return observe_saves(problem, ts, params, batch=batch)


def stages_from_params(
    ts, params: AnyParams, chain: MarkovChain, thresholds=None
) -> tuple[tuple, tuple, dict[str, np.ndarray]]:
    r"""Stages of any sequence of saved parameters (a flow saved without
    stages, an SGD run, ...): [`gradflow.markov.observe_params`][] then
    [`gradflow.markov.detect_stages`][].

    For SGD iterates the curves carry SGD's noise; the detector's rates are
    secants over `thresholds.rate_window` e-folds of $t$, which average it
    over that window. One compilation per shape: calling it again (another
    run, another chain of the same `d`) does not recompile.

    **Returns:** `(stages, events, observations)`: a tuple of
    [`gradflow.Stage`][], their boundaries as event records
    ([`gradflow.stage_events`][]), and the observations (NumPy arrays with a
    leading time axis).
    """
    obs = observe_params(ts, params, chain)
    stages, events = stages_from_observations(ts, obs, chain, thresholds)
    return stages, events, obs


__all__ = [
    "MAX_SAVED_ATTENTION_D",
    "MarkovAttention",
    "chain_of",
    "check_chain",
    "check_start",
    "markov_problem",
    "observe_params",
    "stages_from_params",
]
