"""Real text for the paper's model (`gradflow.markov.text`), at its public
path `gradflow.text`: local corpora read in bounded memory, tokenised by
word, character or byte-level BPE, and their bigram chains."""

from ..markov.text import *  # noqa: F403  (the public names, listed there once)
from ..markov.text import __all__ as __all__
