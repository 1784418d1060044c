r"""Population losses on gradflow's engine (SPEC section 11).

A problem is a [`gradflow.Problem`][]: an `eqx.Module` that holds its data
as arrays and defines its loss and a random start (and, for SGD, a sampler
and the loss of a batch). The built-in problems:

- [`MarkovAttention`][gradflow.problems.MarkovAttention]: the paper's
  one-layer attention model on a Markov chain, and its variants (SPEC
  sections 2, 3 and 9).
- [`DeepLinear`][gradflow.problems.DeepLinear]: a deep linear network on a
  linear teacher (Saxe, McClelland and Ganguli 2014).
- [`Committee`][gradflow.problems.Committee]: the soft committee machine
  (Saad and Solla 1995).
- [`InContextRegression`][gradflow.problems.InContextRegression]: in-context
  linear regression with linear attention (Zhang, Singh, Latham and Saxe
  2025).
"""

from .._engine.problem import Problem as Problem
from ._committee import Committee as Committee
from ._deep_linear import DeepLinear as DeepLinear
from ._in_context.problem import InContextRegression as InContextRegression
from ._markov.problem import MarkovAttention as MarkovAttention


__all__ = [
    "Committee",
    "DeepLinear",
    "InContextRegression",
    "MarkovAttention",
    "Problem",
]
