r"""The paper's model: a one-layer attention Transformer (and its variants)
on an infinite stream of a Markov chain, built on gradflow's core through its
public protocol, as a user's model would be (`docs/model.md`).

Everything about it lives in this package: chains (`gradflow.chains`), the
parameters and variants, the closed-form population loss (and its blocked
form at large vocabularies), the finite-context loss for SGD, the
observables and the four stages (condensation, focus, dilution, new
directions; `docs/stages.md`), [`integrate`][gradflow.integrate], the closed
forms of the theory (`gradflow.theory`), its figures (`gradflow.plot`) and
real text (`gradflow.text`). The everyday names are also at the top level
(`gf.integrate`, `gf.MarkovChain`, `gf.Params`, `gf.Model`,
`gf.population_loss`, ...).
"""

from .blocked import (
    BLOCKED_MIN_D as BLOCKED_MIN_D,
    default_block as default_block,
    default_hvp_block as default_hvp_block,
)
from .chain import (
    MarkovChain as MarkovChain,
    entropy_bounds as entropy_bounds,
    stationary_distribution as stationary_distribution,
)
from .entry import integrate as integrate, integrate_stages as integrate_stages
from .geometry import (
    embedding_direction as embedding_direction,
    linear_solution as linear_solution,
    manifold_distance as manifold_distance,
    manifold_gauge as manifold_gauge,
    manifold_mask as manifold_mask,
    onto_manifold as onto_manifold,
    score_alignment as score_alignment,
    score_matrix as score_matrix,
    tangent_basis as tangent_basis,
    tangent_shares as tangent_shares,
)
from .model import (
    Params as Params,
    attention as attention,
    attention_summary as attention_summary,
    finite_context_logits as finite_context_logits,
    finite_context_loss as finite_context_loss,
    init_params as init_params,
    population_logits as population_logits,
    population_loss as population_loss,
)
from .observables import (
    attention_entropy as attention_entropy,
    diagnostic_rates as diagnostic_rates,
    diagnostics as diagnostics,
)
from .problem import (
    MarkovAttention as MarkovAttention,
    observe_params as observe_params,
    stages_from_params as stages_from_params,
)
from .report import origin_point as origin_point
from .stages import detect_stages as detect_stages, observe as observe
from .variants import Model as Model, VariantParams as VariantParams


__all__ = [
    "MarkovAttention",
    "MarkovChain",
    "Model",
    "Params",
    "VariantParams",
    "attention",
    "attention_entropy",
    "attention_summary",
    "BLOCKED_MIN_D",
    "default_block",
    "default_hvp_block",
    "detect_stages",
    "diagnostic_rates",
    "diagnostics",
    "embedding_direction",
    "entropy_bounds",
    "finite_context_logits",
    "finite_context_loss",
    "init_params",
    "integrate",
    "integrate_stages",
    "linear_solution",
    "manifold_distance",
    "manifold_gauge",
    "manifold_mask",
    "observe",
    "observe_params",
    "onto_manifold",
    "origin_point",
    "population_logits",
    "population_loss",
    "score_alignment",
    "score_matrix",
    "stages_from_params",
    "stationary_distribution",
    "tangent_basis",
    "tangent_shares",
]
