r"""Population losses on gradflow's engine (`docs/problems.md`).

A problem is a [`gradflow.Problem`][]: an `eqx.Module` that holds its data
as arrays and defines its loss and a random start (and, as a
[`gradflow.SampledProblem`][], a sampler and the loss of a batch for SGD).
The built-in problems:

- [`MarkovAttention`][gradflow.problems.MarkovAttention]: the paper's
  one-layer attention model on a Markov chain, and its variants
  (`docs/model.md`, `docs/variants.md`; the package `gradflow.markov`).
- [`DeepLinear`][gradflow.problems.DeepLinear]: a deep linear network on a
  linear teacher (Saxe, McClelland and Ganguli 2014).
- [`Committee`][gradflow.problems.Committee]: the soft committee machine
  (Saad and Solla 1995).
"""

from .._problem.base import Problem as Problem
from ..markov.problem import MarkovAttention as MarkovAttention
from ._committee.problem import Committee as Committee
from ._deep_linear.problem import DeepLinear as DeepLinear


__all__ = ["Committee", "DeepLinear", "MarkovAttention", "Problem"]
