"""The problems the command line knows: each built-in problem's plugin, which
lives beside the problem (its options, their defaults and how to build the
problem from them; `docs/extending.md`, "On the command line"). This module
only re-exports them; `problems.py` reads them.

The first is the default of `--problem`. A new built-in problem adds its
`cli.py` here, and nothing else of the command line changes.
"""

from ..markov import cli as markov
from ..problems._committee import cli as committee
from ..problems._deep_linear import cli as deep_linear
from ..problems._diagonal_linear import cli as diagonal_linear
from ..problems._in_context import cli as in_context


__all__ = ["markov", "deep_linear", "committee", "in_context", "diagonal_linear"]
