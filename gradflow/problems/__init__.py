r"""Population losses on gradflow's engine (`docs/problems.md`), and what a
problem's author builds one with (`docs/extending.md`).

A problem is a [`gradflow.Problem`][]: an `eqx.Module` that holds its data
as arrays and defines its loss and a random start; it mixes in the
capabilities it has ([`gradflow.SampledProblem`][] for SGD,
[`gradflow.ObservedProblem`][], [`gradflow.BoundedProblem`][],
[`gradflow.StagedProblem`][]). The built-in problems:

- [`MarkovAttention`][gradflow.problems.MarkovAttention]: the paper's
  one-layer attention model on a Markov chain, and its variants
  (`docs/model.md`, `docs/variants.md`; the package `gradflow.markov`).
- [`DeepLinear`][gradflow.problems.DeepLinear]: a deep linear network on a
  linear teacher (Saxe, McClelland and Ganguli 2014).
- [`Committee`][gradflow.problems.Committee]: the soft committee machine
  (Saad and Solla 1995).
- [`DiagonalLinear`][gradflow.problems.DiagonalLinear]: a diagonal linear
  network, $\beta = u^2 - v^2$ or $u \odot v$, on linear regression: the
  saddle-to-saddle dynamics of Pesme and Flammarion (2023).
- [`InContextRegression`][gradflow.problems.InContextRegression]: in-context
  linear regression with linear attention (Zhang, Singh, Latham and Saxe
  2025).

The engine's functions over any problem, for a problem's own code:
[`astype`][gradflow.problems.astype], [`check_start`][gradflow.problems.check_start],
[`describe`][gradflow.problems.describe], [`observe_saves`][gradflow.problems.observe_saves],
[`params_dtype`][gradflow.problems.params_dtype],
[`register_legacy_problem`][gradflow.problems.register_legacy_problem]; and the
pieces of the generic stage detector, to build a
[`gradflow.StagedProblem`][]'s own: [`Curves`][gradflow.problems.Curves],
[`plateau_intervals`][gradflow.problems.plateau_intervals].
"""

from .._problem.base import Problem as Problem
from .._problem.files import register_legacy_problem as register_legacy_problem
from .._problem.functions import (
    astype as astype,
    check_start as check_start,
    describe as describe,
    observe_saves as observe_saves,
    params_dtype as params_dtype,
)
from .._stages import Curves as Curves, plateau_intervals as plateau_intervals
from ..markov.problem import MarkovAttention as MarkovAttention
from ._committee.problem import Committee as Committee
from ._deep_linear.problem import DeepLinear as DeepLinear
from ._diagonal_linear.problem import DiagonalLinear as DiagonalLinear
from ._in_context.problem import InContextRegression as InContextRegression


__all__ = [
    "Committee",
    "Curves",
    "DeepLinear",
    "DiagonalLinear",
    "InContextRegression",
    "MarkovAttention",
    "Problem",
    "astype",
    "check_start",
    "describe",
    "observe_saves",
    "params_dtype",
    "plateau_intervals",
    "register_legacy_problem",
]
