"""The paper's model: a one-layer attention model on a Markov chain, and its variants (SPEC sections 1-9)."""
