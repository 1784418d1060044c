"""Type aliases shared across gradflow."""

from typing import Any, TypeAlias

import numpy as np
from jaxtyping import Array, ArrayLike, Shaped


ArrayLikeMatrix: TypeAlias = ArrayLike | np.ndarray | Any
RealScalarLike: TypeAlias = float | int | np.floating | np.integer
Scalar: TypeAlias = Shaped[Array, ""]

__all__ = ["ArrayLikeMatrix", "RealScalarLike", "Scalar"]
