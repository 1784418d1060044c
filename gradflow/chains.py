r"""Families of Markov chains used in the study and the tests.

Every function returns a validated [`gradflow.MarkovChain`][].

- [`sticky`][gradflow.chains.sticky]: one frequent token, `d - 1` rare ones
  with a small asymmetry `delta`, and a probability `rho` of repeating the
  current token (the paper"s scenario).
- [`zipf`][gradflow.chains.zipf]: a Zipf-distributed vocabulary.
- [`random`][gradflow.chains.random]: random rows (Dirichlet) around a Zipf
  profile: a chain with genuine bigram structure.
- [`gaussian_logits`][gradflow.chains.gaussian_logits]: every row a softmax
  of Gaussian logits: dense bigram structure, no zero entries.
"""

from .markov.chains import (
    from_pi as from_pi,
    from_text as from_text,
    gaussian_logits as gaussian_logits,
    random as random,
    sticky as sticky,
    sticky_pi as sticky_pi,
    zipf as zipf,
    zipf_profile as zipf_profile,
)


__all__ = [
    "from_pi",
    "from_text",
    "gaussian_logits",
    "random",
    "sticky",
    "sticky_pi",
    "zipf",
    "zipf_profile",
]
