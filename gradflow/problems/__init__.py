r"""Population losses on gradflow's engine (SPEC section 11).

A problem is a [`gradflow.Problem`][]: an `eqx.Module` that holds its data
as arrays and defines its loss and a random start (and, for SGD, a sampler
and the loss of a batch). The built-in problems:

- [`MarkovAttention`][gradflow.problems.MarkovAttention]: the paper's
  one-layer attention model on a Markov chain, and its variants (SPEC
  sections 2, 3 and 9).
"""

from .._engine.problem import Problem as Problem
from ._markov.problem import MarkovAttention as MarkovAttention


__all__ = ["MarkovAttention", "Problem"]
