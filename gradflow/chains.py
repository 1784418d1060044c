"""Families of Markov chains (`gradflow.markov.chains`, the paper's model),
at their public path `gradflow.chains`: `sticky`, `zipf`, `random`,
`gaussian_logits`, `from_pi`, `from_text`."""

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
