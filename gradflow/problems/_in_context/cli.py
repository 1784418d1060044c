r"""The command line's in-context problem: `gradflow run --problem in-context
--problem-arg KEY=VALUE ...` (the CLI's registry of problems calls
`problem_from_args` with the `--problem-arg` keywords, their values read
as JSON).

Keys: `D` (the inputs' dimension, default 3 or the number of `eigenvalues`),
`eigenvalues` (a JSON list of `D` positive numbers, the covariance's
spectrum in a diagonal basis; default $1, \frac12, \dots, 2^{1-D}$), `N`
(the context length, default 16), `heads` (default `D`), `key_dim` (the
rank of each head's key and query, default 1; `null` for merged key-query)
and `noise` (the labels' noise standard deviation, default 0). Every bad
value is one line naming the flag and the key, before anything is compiled.

The same function is a factory for today's `--problem MODULE:FUNCTION`
route: `gradflow run --problem gradflow.problems._in_context.cli:problem_from_args
--problem-arg N=32`.
"""

import math
from typing import Any

from .problem import InContextRegression


KEYS = ("D", "eigenvalues", "N", "heads", "key_dim", "noise")
FLAG = "--problem-arg"


def _integer(key: str, value, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(
            f"{FLAG} {key} must be an integer >= {low}, got {key}={value!r}"
        )
    return value


def _eigenvalues(value, D: int | None) -> list[float]:
    what = "a JSON list of positive numbers, e.g. eigenvalues=[1,0.5,0.25]"
    if not isinstance(value, list) or not value:
        raise ValueError(
            f"{FLAG} eigenvalues must be {what}, got eigenvalues={value!r}"
        )
    for x in value:
        if isinstance(x, bool) or not isinstance(x, (int, float)):
            raise ValueError(
                f"{FLAG} eigenvalues must be {what}, got eigenvalues={value!r}"
            )
        if not (math.isfinite(x) and x > 0):
            raise ValueError(
                f"{FLAG} eigenvalues must be positive and finite, got {x!r} in "
                f"eigenvalues={value!r}"
            )
    if D is not None and len(value) != D:
        raise ValueError(
            f"{FLAG} D={D} but eigenvalues has {len(value)} entries; give one or "
            "the other"
        )
    return [float(x) for x in value]


def problem_from_args(**args: Any) -> InContextRegression:
    """The in-context problem of the `--problem-arg` keywords (module
    docstring); a `ValueError` naming the flag and the key otherwise."""
    unknown = sorted(set(args) - set(KEYS))
    if unknown:
        raise ValueError(
            f"{FLAG}: in-context takes {', '.join(KEYS)}, got {unknown[0]!r}"
        )
    D = None if "D" not in args else _integer("D", args["D"], 1)
    if "eigenvalues" in args:
        lam = _eigenvalues(args["eigenvalues"], D)
    else:
        lam = [2.0**-i for i in range(3 if D is None else D)]
    N = _integer("N", args.get("N", 16), 1)
    heads = _integer("heads", args.get("heads", len(lam)), 1)
    key_dim = args.get("key_dim", 1)
    if key_dim is not None:
        key_dim = _integer("key_dim", key_dim, 1)
    noise = args.get("noise", 0.0)
    if (
        isinstance(noise, bool)
        or not isinstance(noise, (int, float))
        or not (math.isfinite(noise) and noise >= 0)
    ):
        raise ValueError(
            f"{FLAG} noise must be a finite number >= 0, got noise={noise!r}"
        )
    return InContextRegression(
        lam, context=N, heads=heads, key_dim=key_dim, noise=noise
    )


def describe_args(problem: InContextRegression) -> str:
    """The run's one-line description: the problem and its eigenvalues."""
    lam = " ".join(f"{x:g}" for x in problem.eigen()[0])
    return f"{problem}, covariance eigenvalues {lam}"


__all__ = ["KEYS", "describe_args", "problem_from_args"]
