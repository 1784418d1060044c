"""[`gradflow.as_problem`][]: how an entry point that takes a problem also
takes other objects that describe one (the paper's package registers its
Markov chains and token streams: `gf.sweep(chains, ...)`)."""

import functools

from .._core.errors import show
from .base import Problem


@functools.singledispatch
def as_problem(obj, *, params=None, **options) -> Problem:
    """The problem that `obj` describes, made with `options`.

    A [`gradflow.Problem`][] is returned as it is (it takes no options: a
    problem carries its own). Other types are registered by the packages
    that define them, with `as_problem.register(cls)`: the paper's
    [`gradflow.MarkovChain`][] becomes a
    [`gradflow.problems.MarkovAttention`][] (options `width`, `model`,
    `save_attention`), a [`gradflow.text.TokenStream`][] the same model on its
    bigram chain, sampling windows of the text (option `context`).

    `params` is the starting point given to the call (one point, or a batch
    with a leading member axis for a sweep), or `None`: a registered function
    may read sizes from it (the paper's model its width and variant).

    **Raises:** `TypeError` for an object of no registered type; `ValueError`
    for an option the problem does not take.
    """
    del params
    raise TypeError(
        "expected a gradflow.Problem (or an object that describes one, such as a "
        f"gradflow.MarkovChain), got {type(obj).__name__}"
        + (f" with options {sorted(options)}" if options else "")
    )


@as_problem.register
def _(obj: Problem, *, params=None, **options) -> Problem:
    del params
    for name, value in options.items():
        raise ValueError(
            f"{name} is not an option of a {type(obj).__name__}: a problem carries "
            f"its own configuration, got {name} = {show(value)}"
        )
    return obj


__all__ = ["as_problem"]
