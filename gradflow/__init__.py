"""gradflow: the exact population gradient flow of any population loss (a
`gf.Problem`), first of all a one-layer Transformer on Markov-chain data.

Importing gradflow turns on JAX's float64 mode (`jax_enable_x64`): saddle
escapes grow from components of size `init_scale`, which float32 resolves badly.
On a CPU it also asks JAX for one device per core, if JAX has not started yet
and the user has not chosen (`gradflow/_core/devices.py`;
`GRADFLOW_CPU_DEVICES=1` keeps one device): sweeps use every core.

The core (any problem): `flow`, `sweep`, `train_sgd`, `compare`, the theory
(`linearize`, `critical_points`, `theory_report`), results and files, and the
options they share (`SaveAt`, `Solver`, `Run`, `SGD`). The paper's model is the
package `gradflow.markov`, built on the core like a user's model; its everyday
names are here too (`integrate`, `MarkovChain`, `Params`, `Model`, ...).
"""

import jax

from ._core.devices import use_every_core as _use_every_core


jax.config.update("jax_enable_x64", True)
_use_every_core()

# The core, then the problems' packages: the theory's public module re-exports
# their closed forms, so it is imported before them (each `isort: split`
# keeps this order).
from . import solvers as solvers, theory as theory  # noqa: E402
from ._core.pages import (  # noqa: E402
    LoadGuard as LoadGuard,
    replace_between_markers as replace_between_markers,
)
from ._core.records import (  # noqa: E402
    STAGE_KINDS as STAGE_KINDS,
    EventRecord as EventRecord,
    Stage as Stage,
    stage_events as stage_events,
    stage_table as stage_table,
)
from ._event.events import Event as Event  # noqa: E402
from ._event.solve import (  # noqa: E402
    SegmentedSolution as SegmentedSolution,
    solve_with_events as solve_with_events,
)
from ._flow.flow import GradientFlow as GradientFlow, flow as flow  # noqa: E402
from ._flow.solving import (  # noqa: E402
    DEFAULT_SOLVER as DEFAULT_SOLVER,
    DEFAULT_T1 as DEFAULT_T1,
    SOLVERS as SOLVERS,
    count_grad_evals as count_grad_evals,
    count_hvps as count_hvps,
    default_save_times as default_save_times,
    default_tolerances as default_tolerances,
)
from ._loop.driver import Interrupted as Interrupted  # noqa: E402
from ._options import (  # noqa: E402
    SGD as SGD,
    Run as Run,
    SaveAt as SaveAt,
    Solver as Solver,
)
from ._problem.adapt import as_problem as as_problem  # noqa: E402
from ._problem.base import (  # noqa: E402
    Analysis as Analysis,
    BoundedProblem as BoundedProblem,
    EnumeratedProblem as EnumeratedProblem,
    FieldProblem as FieldProblem,
    ObservedProblem as ObservedProblem,
    Problem as Problem,
    SampledProblem as SampledProblem,
    StagedProblem as StagedProblem,
)
from ._problem.functions import (  # noqa: E402
    generic_analysis as generic_analysis,
    loss_levels as loss_levels,
)
from ._result.codes import RESULTS as RESULTS  # noqa: E402
from ._result.files import load as load  # noqa: E402
from ._result.info import (  # noqa: E402
    FlowSettings as FlowSettings,
    FlowStats as FlowStats,
)
from ._result.labelled import (  # noqa: E402
    ArrayNames as ArrayNames,
    array_names as array_names,
)
from ._result.trajectory import Trajectory as Trajectory  # noqa: E402
from ._sgd.compare import Comparison as Comparison, compare as compare  # noqa: E402
from ._sgd.ensemble import EnsembleComparison as EnsembleComparison  # noqa: E402
from ._sgd.modified import (  # noqa: E402
    ModifiedLoss as ModifiedLoss,
    modified_loss as modified_loss,
)
from ._sgd.run import (  # noqa: E402
    SGDRun as SGDRun,
    SGDSettings as SGDSettings,
    SGDStats as SGDStats,
    load_sgd as load_sgd,
)
from ._sgd.sde import SDESolver as SDESolver, sgd_sde as sgd_sde  # noqa: E402
from ._sgd.train import train_sgd as train_sgd  # noqa: E402
from ._stages import (  # noqa: E402
    StageThresholds as StageThresholds,
    matrix_spectra as matrix_spectra,
)
from ._sweep.result import (  # noqa: E402
    Member as Member,
    Sweep as Sweep,
    SweepSettings as SweepSettings,
    SweepStats as SweepStats,
    load_sweep as load_sweep,
)
from ._sweep.sweep import sweep as sweep  # noqa: E402


# isort: split
# The paper's model (the package gradflow.markov) and the other problems.
from . import (  # noqa: E402
    chains as chains,
    markov as markov,
    problems as problems,
    text as text,  # noqa: E402
)
from .markov import (  # noqa: E402
    MarkovChain as MarkovChain,
    Model as Model,
    Params as Params,
    VariantParams as VariantParams,
    attention as attention,
    finite_context_loss as finite_context_loss,
    init_params as init_params,
    integrate as integrate,
    population_loss as population_loss,
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
    "Analysis",
    "array_names",
    "ArrayNames",
    "as_problem",
    "attention",
    "BoundedProblem",
    "chains",
    "compare",
    "Comparison",
    "count_grad_evals",
    "count_hvps",
    "critical_points",
    "CriticalPoint",
    "default_save_times",
    "DEFAULT_SOLVER",
    "DEFAULT_T1",
    "default_tolerances",
    "EnsembleComparison",
    "EnumeratedProblem",
    "Event",
    "EventRecord",
    "FieldProblem",
    "finite_context_loss",
    "flow",
    "FlowSettings",
    "FlowStats",
    "generic_analysis",
    "GradientFlow",
    "init_params",
    "integrate",
    "Interrupted",
    "Linearization",
    "linearize",
    "load",
    "load_sgd",
    "load_sweep",
    "LoadGuard",
    "loss_levels",
    "markov",
    "MarkovChain",
    "matrix_spectra",
    "Member",
    "Model",
    "modified_loss",
    "ModifiedLoss",
    "ObservedProblem",
    "Params",
    "population_loss",
    "Problem",
    "problems",
    "replace_between_markers",
    "RESULTS",
    "Run",
    "SampledProblem",
    "SaveAt",
    "SDESolver",
    "SegmentedSolution",
    "SGD",
    "SGDRun",
    "SGDSettings",
    "SGDStats",
    "sgd_sde",
    "solve_with_events",
    "Solver",
    "solvers",
    "SOLVERS",
    "Stage",
    "stage_events",
    "stage_table",
    "STAGE_KINDS",
    "StagedProblem",
    "StageThresholds",
    "Sweep",
    "sweep",
    "SweepSettings",
    "SweepStats",
    "text",
    "theory",
    "theory_report",
    "train_sgd",
    "Trajectory",
    "VariantParams",
]


from ._core.files import version as _installed_version  # noqa: E402


__version__ = _installed_version()
