"""Families of Markov chains (`gradflow.markov.chains`, the paper's model),
at their public path `gradflow.chains`: `sticky`, `zipf`, `random`,
`gaussian_logits`, `from_pi`, `from_text`."""

from .markov.chains import *  # noqa: F403  (the public names, listed there once)
from .markov.chains import __all__ as __all__
