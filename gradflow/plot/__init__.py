r"""Figures of trajectories, sweeps and comparisons (matplotlib; PNG and
PDF). Importing gradflow does not import matplotlib: the figures import it
when drawn.

For any problem:

- [`plot_all`][gradflow.plot.plot_all]: writes every figure of a trajectory
  (what `gradflow run` draws): the problem's [`figures`][gradflow.plot.figures],
  by default the generic
  [`problem_summary_figure`][gradflow.plot.problem_summary_figure];
- [`phase_diagram`][gradflow.plot.phase_diagram] and
  [`sweep_summary`][gradflow.plot.sweep_summary]: a sweep;
- [`save_figure`][gradflow.plot.save_figure], [`shade_stages`][gradflow.plot.shade_stages],
  [`STAGE_COLORS`][gradflow.plot.STAGE_COLORS]: the pieces to draw your own.

The paper's model: [`summary_figure`][gradflow.plot.summary_figure] (six
panels: loss against $\log d$, $H(\pi)$ and the conditional entropy, norms,
attention entropy, attention mass per key token, singular values of $W_0$,
alignment cosines), [`pca_figure`][gradflow.plot.pca_figure] (the token
embeddings on their top two principal directions) and
[`attention_figure`][gradflow.plot.attention_figure] (the attention at each
stage boundary). The deep linear network:
[`mode_strength_figure`][gradflow.plot.mode_strength_figure],
[`learning_time_figure`][gradflow.plot.learning_time_figure]. The committee
machine: [`order_parameter_figure`][gradflow.plot.order_parameter_figure],
[`committee_phase_diagram`][gradflow.plot.committee_phase_diagram]. In-context
regression: [`staircase_figure`][gradflow.plot.staircase_figure] (the loss on
the predicted levels, the eigen-components against the minimiser's). The
diagonal linear network:
[`saddle_path_figure`][gradflow.plot.saddle_path_figure] (the loss and
$\beta$ in the rescaled time, over the saddle-to-saddle limit).

Runs to watch and to show (`docs/analysis.md`):

- [`animate`][gradflow.plot.animate]: a run as an MP4 or GIF, its loss curve
  with a moving marker over the problem's [`views`][gradflow.plot.views] (for
  the paper's model the attention map and the embedding PCA), frames paced
  by stage ([`frame_times`][gradflow.plot.frame_times]);
- [`report`][gradflow.plot.report]: a self-contained HTML explorer of a run
  or a sweep (a time slider, the stage table, a sweep's phase diagram);
- [`Heatmap`][gradflow.plot.Heatmap], [`Scatter`][gradflow.plot.Scatter],
  [`Bars`][gradflow.plot.Bars], [`interpolate`][gradflow.plot.interpolate]:
  the pieces of a problem's own views.
"""

# The problems' figures and views: each module registers its problem's with
# `figures` or `views` when imported (the `views` modules are imported for
# that alone).
from ..markov import views as _markov_views  # noqa: F401
from ..markov.plot import (  # noqa: E402
    TOP_ATTENTION as TOP_ATTENTION,
    TOP_TOKENS as TOP_TOKENS,
    attention_figure as attention_figure,
    pca_figure as pca_figure,
    summary_figure as summary_figure,
    token_label as token_label,
    top_tokens as top_tokens,
)
from ..problems._committee import views as _committee_views  # noqa: F401
from ..problems._committee.plot import (  # noqa: E402
    committee_phase_diagram as committee_phase_diagram,
    committee_plateau_length as committee_plateau_length,
    order_parameter_figure as order_parameter_figure,
)
from ..problems._deep_linear import views as _deep_linear_views  # noqa: F401
from ..problems._deep_linear.plot import (  # noqa: E402
    half_times as half_times,
    learning_time_figure as learning_time_figure,
    mode_strength_figure as mode_strength_figure,
)
from ..problems._diagonal_linear.plot import (  # noqa: E402
    saddle_path_figure as saddle_path_figure,
)
from ..problems._in_context import views as _in_context_views  # noqa: F401
from ..problems._in_context.plot import (  # noqa: E402
    staircase_figure as staircase_figure,
)
from ._animate import animate as animate
from ._base import (
    STAGE_COLORS as STAGE_COLORS,
    check_trajectory as check_trajectory,
    legend_beside as legend_beside,
    positive_time as positive_time,
    pyplot as pyplot,
    save_figure as save_figure,
    shade_stages as shade_stages,
    stage_label as stage_label,
)
from ._explorer import report as report
from ._problem import (
    GENERIC_SHADES as GENERIC_SHADES,
    figures as figures,
    plot_all as plot_all,
    problem_summary_figure as problem_summary_figure,
)
from ._sweep import (
    member_value as member_value,
    phase_diagram as phase_diagram,
    sweep_summary as sweep_summary,
)
from ._timeline import (
    frame_times as frame_times,
    interpolate as interpolate,
    stage_caption as stage_caption,
)
from ._views import (
    GREY as GREY,
    PALETTE as PALETTE,
    Bars as Bars,
    Heatmap as Heatmap,
    Scatter as Scatter,
    views as views,
)


plot_problem = plot_all
"""The old name of [`plot_all`][gradflow.plot.plot_all] for problems beyond
the paper's model (it draws every problem's figures now)."""

__all__ = [
    "Bars",
    "GENERIC_SHADES",
    "GREY",
    "Heatmap",
    "PALETTE",
    "Scatter",
    "animate",
    "frame_times",
    "interpolate",
    "report",
    "stage_caption",
    "views",
    "STAGE_COLORS",
    "TOP_ATTENTION",
    "TOP_TOKENS",
    "check_trajectory",
    "attention_figure",
    "committee_phase_diagram",
    "committee_plateau_length",
    "figures",
    "half_times",
    "learning_time_figure",
    "legend_beside",
    "member_value",
    "mode_strength_figure",
    "order_parameter_figure",
    "pca_figure",
    "phase_diagram",
    "plot_all",
    "plot_problem",
    "positive_time",
    "problem_summary_figure",
    "pyplot",
    "save_figure",
    "shade_stages",
    "stage_label",
    "saddle_path_figure",
    "staircase_figure",
    "summary_figure",
    "sweep_summary",
    "token_label",
    "top_tokens",
]
