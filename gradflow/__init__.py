"""gradflow: the exact population gradient flow of any population loss (a
`gf.Problem`), first of all a one-layer Transformer on Markov-chain data.

Importing gradflow turns on JAX's float64 mode (`jax_enable_x64`): saddle
escapes grow from components of size `init_scale`, which float32 resolves badly.
On a CPU it also asks JAX for one device per core, if JAX has not started yet
and the user has not chosen (`gradflow/_core/devices.py`;
`GRADFLOW_CPU_DEVICES=1` keeps one device): sweeps use every core.
"""

import jax

from ._core.devices import use_every_core as _use_every_core


jax.config.update("jax_enable_x64", True)
_use_every_core()

from . import (  # noqa: E402
    chains as chains,
    problems as problems,
    solvers as solvers,
    text as text,
    theory as theory,
)
from ._core.records import (  # noqa: E402
    STAGE_KINDS as STAGE_KINDS,
    EventRecord as EventRecord,
    Stage as Stage,
    stage_events as stage_events,
)
from ._engine.driver import Interrupted as Interrupted  # noqa: E402
from ._engine.events import (  # noqa: E402
    Event as Event,
    SegmentedSolution as SegmentedSolution,
    solve_with_events as solve_with_events,
)
from ._engine.flow import GradientFlow as GradientFlow, flow as flow  # noqa: E402
from ._engine.problem import Problem as Problem  # noqa: E402
from ._engine.result import Trajectory as Trajectory, load as load  # noqa: E402
from ._engine.solving import (  # noqa: E402
    DEFAULT_SOLVER as DEFAULT_SOLVER,
    SOLVERS as SOLVERS,
    default_save_times as default_save_times,
    default_tolerances as default_tolerances,
)
from ._engine.stages import StageThresholds as StageThresholds  # noqa: E402
from ._engine.sweep_result import (  # noqa: E402
    Member as Member,
    Sweep as Sweep,
    load_sweep as load_sweep,
)
from ._sgd.compare import Comparison as Comparison, compare as compare  # noqa: E402
from ._sgd.run import SGDRun as SGDRun, load_sgd as load_sgd  # noqa: E402
from ._sgd.train import train_sgd as train_sgd  # noqa: E402
from .problems._markov.chain import (  # noqa: E402
    MarkovChain as MarkovChain,
    entropy_bounds as entropy_bounds,
    stationary_distribution as stationary_distribution,
)
from .problems._markov.diagnostics import (  # noqa: E402
    attention_entropy as attention_entropy,
    diagnostic_rates as diagnostic_rates,
    diagnostics as diagnostics,
)
from .problems._markov.entry import (  # noqa: E402
    integrate as integrate,
    integrate_stages as integrate_stages,
    sweep as sweep,
)
from .problems._markov.model import (  # noqa: E402
    Params as Params,
    attention as attention,
    attention_summary as attention_summary,
    finite_context_logits as finite_context_logits,
    finite_context_loss as finite_context_loss,
    init_params as init_params,
    population_logits as population_logits,
    population_loss as population_loss,
)
from .problems._markov.problem import (  # noqa: E402
    observe_params as observe_params,
    stages_from_params as stages_from_params,
)
from .problems._markov.stages import (  # noqa: E402
    detect_stages as detect_stages,
    observe as observe,
)
from .problems._markov.variants import (  # noqa: E402
    Model as Model,
    VariantParams as VariantParams,
)
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
    "flow",
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
    "Problem",
    "problems",
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


from ._core.files import version as _installed_version  # noqa: E402


__version__ = _installed_version()
