"""gradflow: the exact population gradient flow of a one-layer Transformer on
Markov-chain data.

Importing gradflow turns on JAX's float64 mode (`jax_enable_x64`): saddle
escapes grow from components of size `init_scale`, which float32 resolves badly.
"""

import jax


jax.config.update("jax_enable_x64", True)

from . import (  # noqa: E402
    chains as chains,
    solvers as solvers,
    text as text,
    theory as theory,
)
from ._chain import (  # noqa: E402
    MarkovChain as MarkovChain,
    entropy_bounds as entropy_bounds,
    stationary_distribution as stationary_distribution,
)
from ._checkpoint import Interrupted as Interrupted  # noqa: E402
from ._compare import Comparison as Comparison, compare as compare  # noqa: E402
from ._diagnostics import (  # noqa: E402
    attention_entropy as attention_entropy,
    diagnostic_rates as diagnostic_rates,
    diagnostics as diagnostics,
)
from ._events import (  # noqa: E402
    Event as Event,
    SegmentedSolution as SegmentedSolution,
    solve_with_events as solve_with_events,
)
from ._integrate import (  # noqa: E402
    DEFAULT_SOLVER as DEFAULT_SOLVER,
    SOLVERS as SOLVERS,
    GradientFlow as GradientFlow,
    default_save_times as default_save_times,
    default_tolerances as default_tolerances,
    integrate as integrate,
    integrate_stages as integrate_stages,
)
from ._load import load as load  # noqa: E402
from ._model import (  # noqa: E402
    Params as Params,
    attention as attention,
    attention_summary as attention_summary,
    finite_context_logits as finite_context_logits,
    finite_context_loss as finite_context_loss,
    init_params as init_params,
    population_logits as population_logits,
    population_loss as population_loss,
)
from ._records import EventRecord as EventRecord  # noqa: E402
from ._sgd import train_sgd as train_sgd  # noqa: E402
from ._sgd_run import SGDRun as SGDRun, load_sgd as load_sgd  # noqa: E402
from ._stage_types import (  # noqa: E402
    STAGE_KINDS as STAGE_KINDS,
    Stage as Stage,
    StageThresholds as StageThresholds,
)
from ._stages import (  # noqa: E402
    detect_stages as detect_stages,
    observe as observe,
    observe_params as observe_params,
    stage_events as stage_events,
    stages_from_params as stages_from_params,
)
from ._sweep import sweep as sweep  # noqa: E402
from ._sweep_result import (  # noqa: E402
    Member as Member,
    Sweep as Sweep,
    load_sweep as load_sweep,
)
from ._trajectory import Trajectory as Trajectory  # noqa: E402
from ._variants import Model as Model, VariantParams as VariantParams  # noqa: E402
from .theory import (  # noqa: E402
    CriticalPoint as CriticalPoint,
    Linearization as Linearization,
    critical_points as critical_points,
    linearize as linearize,
    theory_report as theory_report,
)


# The public names: what the API reference documents (docs/_hooks.py reads this
# list) and what `from gradflow import *` gives.
__all__ = [
    "attention",
    "attention_entropy",
    "attention_summary",
    "chains",
    "compare",
    "Comparison",
    "critical_points",
    "CriticalPoint",
    "default_save_times",
    "DEFAULT_SOLVER",
    "default_tolerances",
    "detect_stages",
    "diagnostic_rates",
    "diagnostics",
    "entropy_bounds",
    "Event",
    "EventRecord",
    "finite_context_logits",
    "finite_context_loss",
    "GradientFlow",
    "init_params",
    "integrate",
    "integrate_stages",
    "Interrupted",
    "Linearization",
    "linearize",
    "load",
    "load_sgd",
    "load_sweep",
    "MarkovChain",
    "Member",
    "Model",
    "observe",
    "observe_params",
    "Params",
    "population_logits",
    "population_loss",
    "SegmentedSolution",
    "SGDRun",
    "solve_with_events",
    "solvers",
    "SOLVERS",
    "Stage",
    "stage_events",
    "STAGE_KINDS",
    "stages_from_params",
    "StageThresholds",
    "stationary_distribution",
    "Sweep",
    "sweep",
    "text",
    "theory",
    "theory_report",
    "train_sgd",
    "Trajectory",
    "VariantParams",
]


from ._files import version as _installed_version  # noqa: E402


__version__ = _installed_version()
