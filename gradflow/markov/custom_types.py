"""Type aliases of the paper's model (jaxtyping shapes: `d` the vocabulary,
`m` the width)."""

from typing import TypeAlias

from jaxtyping import Array, Float, Int


Transition: TypeAlias = Float[Array, "d d"]
Distribution: TypeAlias = Float[Array, " d"]
Embedding: TypeAlias = Float[Array, "m d"]
Projection: TypeAlias = Float[Array, "d m"]
Square: TypeAlias = Float[Array, "m m"]
Attention: TypeAlias = Float[Array, "d d"]
Tokens: TypeAlias = Int[Array, "*batch s"]

__all__ = [
    "Attention",
    "Distribution",
    "Embedding",
    "Projection",
    "Square",
    "Tokens",
    "Transition",
]
