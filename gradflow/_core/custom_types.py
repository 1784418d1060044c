"""Type aliases shared across gradflow (jaxtyping shapes: `d` vocabulary, `m` width)."""

from typing import Any, TypeAlias

import numpy as np
from jaxtyping import Array, ArrayLike, Float, Int, Shaped


ArrayLikeMatrix: TypeAlias = ArrayLike | np.ndarray | Any
RealScalarLike: TypeAlias = float | int | np.floating | np.integer

Transition: TypeAlias = Float[Array, "d d"]
Distribution: TypeAlias = Float[Array, " d"]
Embedding: TypeAlias = Float[Array, "m d"]
Projection: TypeAlias = Float[Array, "d m"]
Square: TypeAlias = Float[Array, "m m"]
Attention: TypeAlias = Float[Array, "d d"]
Tokens: TypeAlias = Int[Array, "*batch s"]
Scalar: TypeAlias = Shaped[Array, ""]

# The fields of `gradflow.Params`, in order: how saved files, checkpoints and
# flat parameter vectors name and order the four weight matrices.
PARAM_NAMES = ("W0", "W1", "WQ", "WK")

__all__ = [
    "Array",
    "ArrayLikeMatrix",
    "Attention",
    "Distribution",
    "Embedding",
    "Float",
    "Int",
    "PARAM_NAMES",
    "Projection",
    "RealScalarLike",
    "Scalar",
    "Square",
    "Tokens",
    "Transition",
]
