r"""Stage-wise linearisation: critical points of the population loss, their
unstable modes, and the theory's predictions checked against a trajectory.

Notation of SPEC section 3: $u = \pi - \mathbf 1/d$, $\hat p = \pi/|\pi|$,
$\hat u = u/|u|$. The derivations are in `docs/theory.md`; in short:

- **Origin.** $-\nabla^2 L(0)$ couples $x = W_0\hat p$ and $y = W_1^\top\hat u$
  only: $\dot x = \sigma y$, $\dot y = \sigma x$ with
  $\sigma = |\pi - \mathbf 1/d|\,|\pi|$ (eigenvalues $\pm\sigma$, each $m$
  times; every other eigenvalue is zero).
- **Unigram point** $W_0 = a\,v\hat p^\top$, $W_1 = w v^\top$, $W_Q = W_K = 0$,
  $a\,|\pi|\,w = \log\pi - \overline{\log\pi}$: the attention block decouples
  and is a bilinear form with unstable rate
  $\lambda = a^2|\gamma|$, $\gamma = \kappa\,(\sum_l\pi_l^3 - |\pi|^4)/|\pi|^4$,
  $\kappa = \sum_i \pi_i^2 \rho_i$, $\rho_i = (\pi - P_{i\cdot})\cdot\log\pi$;
  attention focuses on $\arg\max\pi$ when $\kappa < 0$ and on $\arg\min\pi$
  when $\kappa > 0$.

The work lives in one private module per concept: `_linearize` (flat views of
the loss, Hessian, Lanczos, `linearize`), `_critical` (plateaus, refinement,
`critical_points`), `_continuation` (continuation in a chain parameter),
`_predictions` (closed forms), `_problems` (the closed forms of the literature
for the deep linear network and the soft committee machine) and `_report`
(`theory_report`); those of in-context regression live beside the problem
(`gradflow/problems/_in_context/theory.py`) and are re-exported here.
"""

from ..problems._in_context.theory import (
    in_context_aligned_start as in_context_aligned_start,
    in_context_learning_time as in_context_learning_time,
    in_context_level as in_context_level,
    in_context_minimiser as in_context_minimiser,
    in_context_saddle as in_context_saddle,
    in_context_saddle_rate as in_context_saddle_rate,
    in_context_saddle_spectrum as in_context_saddle_spectrum,
    in_context_staircase as in_context_staircase,
)
from ._continuation import (
    continue_critical_point as continue_critical_point,
    eigen_clusters as eigen_clusters,
    subspace_overlap as subspace_overlap,
    track_cluster as track_cluster,
)
from ._critical import (
    CriticalPoint as CriticalPoint,
    classify as classify,
    critical_points as critical_points,
    plateaus as plateaus,
    refine_critical_point as refine_critical_point,
)
from ._linearize import (
    Linearization as Linearization,
    flatten_params as flatten_params,
    lanczos as lanczos,
    linearize as linearize,
    param_shapes as param_shapes,
    unflatten_params as unflatten_params,
)
from ._predictions import (
    focus_prediction as focus_prediction,
    mode_focus_token as mode_focus_token,
    origin_escape_offset as origin_escape_offset,
    origin_rate as origin_rate,
    unigram_point as unigram_point,
    unstable_amplitude as unstable_amplitude,
)
from ._problems import (
    CommitteePlateau as CommitteePlateau,
    balanced_start as balanced_start,
    committee_plateau as committee_plateau,
    deep_linear_saddle as deep_linear_saddle,
    deep_linear_saddle_rate as deep_linear_saddle_rate,
    doubly_centred as doubly_centred,
    saxe_learning_time as saxe_learning_time,
    saxe_mode_strength as saxe_mode_strength,
)
from ._report import (
    flank_rate as flank_rate,
    format_report as format_report,
    origin_point as origin_point,
    theory_report as theory_report,
)


__all__ = [
    "CommitteePlateau",
    "CriticalPoint",
    "Linearization",
    "balanced_start",
    "classify",
    "committee_plateau",
    "continue_critical_point",
    "critical_points",
    "deep_linear_saddle",
    "deep_linear_saddle_rate",
    "doubly_centred",
    "eigen_clusters",
    "flank_rate",
    "flatten_params",
    "focus_prediction",
    "format_report",
    "in_context_aligned_start",
    "in_context_learning_time",
    "in_context_level",
    "in_context_minimiser",
    "in_context_saddle",
    "in_context_saddle_rate",
    "in_context_saddle_spectrum",
    "in_context_staircase",
    "lanczos",
    "linearize",
    "mode_focus_token",
    "origin_escape_offset",
    "origin_point",
    "origin_rate",
    "param_shapes",
    "plateaus",
    "refine_critical_point",
    "saxe_learning_time",
    "saxe_mode_strength",
    "subspace_overlap",
    "theory_report",
    "track_cluster",
    "unflatten_params",
    "unigram_point",
    "unstable_amplitude",
]
