r"""Stage-wise linearisation of any problem: critical points of the population
loss, their unstable modes, and the theory's predictions checked against a
trajectory (`docs/theory.md`).

For every problem: [`linearize`][gradflow.theory.linearize] (the spectrum of
$-\nabla^2 L$ at a point, dense or Lanczos),
[`critical_points`][gradflow.theory.critical_points] (the critical points
the plateaus of a trajectory shadow, refined and classified),
[`theory_report`][gradflow.theory.theory_report] (each saddle's predicted
escape rate against the measured one) and continuation along a family of
problems. A problem's package adds its closed forms through the extension
points [`report_rows`][gradflow.theory.report_rows] and
[`gauge_rank`][gradflow.theory.gauge_rank].

The closed forms of the built-in problems are here too:

- the paper's model (notation $u = \pi - \mathbf 1/d$): at the **origin**
  $-\nabla^2 L(0)$ couples $x = W_0\hat p$ and $y = W_1^\top\hat u$ only,
  with eigenvalues $\pm\sigma$, $\sigma = |\pi - \mathbf 1/d|\,|\pi|$; at
  the **unigram point** the attention block decouples, with unstable rate
  $\lambda = a^2|\gamma|$ (`origin_rate`, `unigram_point`,
  `focus_prediction`, ...);
- the deep linear network (Saxe et al. 2014: `saxe_mode_strength`,
  `deep_linear_saddle`, ...), the soft committee machine (Saad and Solla
  1995: `committee_plateau`, ...) and in-context regression with linear
  attention (Zhang et al. 2025: `in_context_level`, `in_context_saddle`,
  ...);
- the diagonal linear network: the saddle-to-saddle limit path of Pesme
  and Flammarion (2023), `saddle_to_saddle`, and the same path measured on
  a trajectory, `diagonal_jumps`.
"""

# The generic theory first: the problems' modules below build on it.
# The closed forms of the built-in problems (re-exported at their public path).
from ..markov.geometry import (  # noqa: E402
    param_shapes as param_shapes,
    unflatten_params as unflatten_params,
)
from ..markov.predictions import (  # noqa: E402
    focus_prediction as focus_prediction,
    mode_focus_token as mode_focus_token,
    origin_escape_offset as origin_escape_offset,
    origin_rate as origin_rate,
    unigram_point as unigram_point,
    unstable_amplitude as unstable_amplitude,
)
from ..markov.report import origin_point as origin_point  # noqa: E402
from ..problems._committee.theory import (  # noqa: E402
    CommitteePlateau as CommitteePlateau,
    committee_plateau as committee_plateau,
    doubly_centred as doubly_centred,
    isotropic_norm as isotropic_norm,
)
from ..problems._deep_linear.theory import (  # noqa: E402
    balanced_start as balanced_start,
    deep_linear_saddle as deep_linear_saddle,
    deep_linear_saddle_rate as deep_linear_saddle_rate,
    saxe_learning_time as saxe_learning_time,
    saxe_mode_strength as saxe_mode_strength,
)
from ..problems._diagonal_linear.report import (  # noqa: E402
    diagonal_jumps as diagonal_jumps,
)
from ..problems._diagonal_linear.theory import (  # noqa: E402
    Jump as Jump,
    dual_speed as dual_speed,
    saddle_to_saddle as saddle_to_saddle,
)
from ..problems._in_context import (  # noqa: E402
    report as _in_context_report,
    theory as _in_context_theory,
)
from ..problems._in_context.report import *  # noqa: E402, F403
from ..problems._in_context.theory import *  # noqa: E402, F403
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
    gauge_rank as gauge_rank,
    lanczos as lanczos,
    linearize as linearize,
    unflatten_like as unflatten_like,
)
from ._report import (
    escape_rate as escape_rate,
    fit_rate as fit_rate,
    flank_rate as flank_rate,
    format_report as format_report,
    loss_crossing as loss_crossing,
    not_exponential_row as not_exponential_row,
    passed as passed,
    report_row as report_row,
    report_rows as report_rows,
    saddle_rows as saddle_rows,
    theory_report as theory_report,
)


__all__ = [
    "CommitteePlateau",
    "CriticalPoint",
    "Jump",
    "Linearization",
    "balanced_start",
    "diagonal_jumps",
    "dual_speed",
    "classify",
    "committee_plateau",
    "continue_critical_point",
    "critical_points",
    "deep_linear_saddle",
    "deep_linear_saddle_rate",
    "doubly_centred",
    "eigen_clusters",
    "escape_rate",
    "fit_rate",
    "flank_rate",
    "flatten_params",
    "focus_prediction",
    "format_report",
    "gauge_rank",
    "isotropic_norm",
    "lanczos",
    "linearize",
    "loss_crossing",
    "mode_focus_token",
    "not_exponential_row",
    "origin_escape_offset",
    "origin_point",
    "origin_rate",
    "param_shapes",
    "passed",
    "plateaus",
    "refine_critical_point",
    "report_row",
    "report_rows",
    "saddle_rows",
    "saddle_to_saddle",
    "saxe_learning_time",
    "saxe_mode_strength",
    "subspace_overlap",
    "theory_report",
    "track_cluster",
    "unflatten_like",
    "unflatten_params",
    "unigram_point",
    "unstable_amplitude",
]
# the in-context closed forms, by their modules' own lists
__all__ += _in_context_report.__all__
__all__ += _in_context_theory.__all__
