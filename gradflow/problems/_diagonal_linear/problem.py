r"""The diagonal linear network (`docs/problems.md`, "Diagonal linear
networks"): linear regression $x \mapsto \langle x, \beta\rangle$ with the
weights $\beta$ factored elementwise, $\beta = u^2 - v^2$ or $\beta = u
\odot v$, on Gaussian inputs $x \sim \mathcal N(0, \Sigma)$ and labels
$y = \langle x, \beta^*\rangle + \varepsilon$:

$$L(\beta) = \tfrac12(\beta - \beta^*)^\top\Sigma(\beta - \beta^*) +
\tfrac12\sigma^2,$$

written through the residual $\beta - \beta^*$, so it stays accurate to
its own size near the minimum. From a small start the flow passes a
sequence of saddles, one coordinate learnt (or unlearnt) at a time: the
saddle-to-saddle limit of Pesme and Flammarion (2023),
[`gradflow.theory.saddle_to_saddle`][].
"""

import math
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, PRNGKeyArray

from ..._core.custom_types import Scalar
from ..._core.errors import show
from ..._core.random import scaled_normal
from ..._core.validate import check_covariance, check_finite_entries, check_number
from ..._problem.base import BoundedProblem, ObservedProblem, SampledProblem
from ..._result.labelled import ArrayNames, array_names


PARAMETRISATIONS = ("u2-v2", "uv")


def check_diagonal_covariance(value) -> np.ndarray:
    """A `D x D` symmetric positive-definite matrix, or a vector of `D`
    positive variances (a diagonal covariance); a one-line error otherwise."""
    what = "a D x D matrix or a vector of D variances"
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(f"covariance must be {what}, got {show(value)}") from None
    if arr.ndim == 2:
        return check_covariance("covariance", arr)
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"covariance must be {what}, got shape {arr.shape}")
    check_finite_entries("covariance", arr)
    if not (arr > 0).all():
        i = int(np.flatnonzero(arr <= 0)[0])
        raise ValueError(
            f"covariance must have positive variances, got covariance[{i}] = "
            f"{arr[i]:.6g}"
        )
    return np.diag(arr)


def check_target(value, dimension: int) -> np.ndarray:
    r"""$\beta^*$: a finite vector of `dimension` numbers."""
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(
            f"target must be a vector of {dimension} numbers, got {show(value)}"
        ) from None
    if arr.shape != (dimension,):
        raise ValueError(
            f"target must be a vector of {dimension} numbers (one per row of the "
            f"covariance), got shape {arr.shape}"
        )
    return check_finite_entries("target", arr)


def check_noise(noise) -> float:
    """The labels' noise standard deviation: a finite number >= 0."""
    value = check_number("noise", noise)
    if not (math.isfinite(value) and value >= 0):
        raise ValueError(f"noise must be finite and >= 0, got noise = {show(noise)}")
    return value


def check_parametrisation(value) -> str:
    if value not in PARAMETRISATIONS:
        raise ValueError(
            f"parametrisation must be 'u2-v2' or 'uv', got parametrisation = "
            f"{show(value)}"
        )
    return str(value)


class DiagonalLinear(SampledProblem, ObservedProblem, BoundedProblem):
    r"""A diagonal linear network: the population least-squares loss
    $L = \frac12(\beta - \beta^*)^\top\Sigma(\beta - \beta^*) +
    \frac12\sigma^2$ of the linear predictor $\langle x, \beta\rangle$ with
    $\beta = u^2 - v^2$ (`"u2-v2"`) or $\beta = u \odot v$ (`"uv"`)
    (`docs/problems.md`, "Diagonal linear networks").

    **Arguments:**

    - `covariance`: the inputs' covariance $\Sigma$, a `D x D` symmetric
      positive-definite matrix or a vector of `D` variances (diagonal).
    - `target`: the teacher $\beta^*$, `D` numbers.
    - `parametrisation`: `"u2-v2"` ($\beta = u^2 - v^2$, the start
      $u = v = \text{init\_scale}\cdot\mathbf 1$, deterministic: $\beta(0) =
      0$) or `"uv"` ($\beta = u \odot v$, every entry of the start i.i.d.
      $\mathcal N(0, \text{init\_scale}^2)$).
    - `noise`: the labels' noise standard deviation $\sigma$ (the loss's
      floor $\sigma^2/2$).

    Parameters are a tuple `(u, v)` of `D`-vectors. `observe` saves
    $\beta$ (`"beta"`). For SGD, `sample` draws $x \sim \mathcal N(0,
    \Sigma)$, $y = \langle x, \beta^*\rangle + \sigma\varepsilon$.

    **Example** (the staircase of $\beta^* = (5, 0, 1, 0, 0.2)$: plateaus at
    $L = 13.02$, $0.52$ and $0.02$):

    ```python
    problem = gf.problems.DiagonalLinear(np.ones(5), [5.0, 0, 1, 0, 0.2])
    traj = gf.flow(problem, init_scale=1e-4, t1=60)
    gf.theory.saddle_to_saddle(problem)  # the limit path: jumps, saddles, levels
    ```
    """

    covariance: Float[Array, "d d"]
    target: Float[Array, " d"]
    noise: Float[Array, ""]
    cholesky: Float[Array, "d d"]
    parametrisation: str = eqx.field(static=True)

    def __init__(self, covariance, target, parametrisation="u2-v2", noise=0.0):
        sigma = check_diagonal_covariance(covariance)
        self.parametrisation = check_parametrisation(parametrisation)
        star = check_target(target, sigma.shape[0])
        self.noise = jnp.asarray(check_noise(noise), dtype=jnp.float64)
        self.covariance = jnp.asarray(sigma)
        self.target = jnp.asarray(star)
        self.cholesky = jnp.asarray(np.linalg.cholesky(sigma))

    @property
    def dimension(self) -> int:
        """$D$, the number of coordinates."""
        return int(self.covariance.shape[0])

    def beta(self, params) -> Array:
        r"""$\beta$ of a point `(u, v)` (leading batch axes allowed)."""
        u, v = params
        return u * u - v * v if self.parametrisation == "u2-v2" else u * v

    # -- the protocol ----------------------------------------------------------

    def loss(self, params) -> Scalar:
        r = self.beta(params) - self.target
        return 0.5 * jnp.dot(r, self.covariance @ r) + 0.5 * self.noise**2

    def init(self, key: PRNGKeyArray, init_scale: float):
        dtype = self.covariance.dtype
        d = self.dimension
        if self.parametrisation == "u2-v2":
            ones = jnp.full((d,), init_scale, dtype)
            return ones, ones
        ku, kv = jax.random.split(key)
        return (
            scaled_normal(ku, (d,), init_scale, dtype),
            scaled_normal(kv, (d,), init_scale, dtype),
        )

    def sample(self, key: PRNGKeyArray, n: int):
        r"""`n` examples `(x, y)`: $x \sim \mathcal N(0, \Sigma)$, $y =
        \langle x, \beta^*\rangle + \sigma\varepsilon$; shapes `(n, D)` and
        `(n,)`."""
        kx, ke = jax.random.split(key)
        dtype = self.covariance.dtype
        x = jax.random.normal(kx, (n, self.dimension), dtype) @ self.cholesky.T
        eps = jax.random.normal(ke, (n,), dtype)
        return x, x @ self.target + self.noise.astype(dtype) * eps

    def sample_loss(self, params, batch) -> Scalar:
        """$\\frac12$ the mean squared error of the batch, whose expectation is
        `loss`."""
        x, y = batch
        return 0.5 * jnp.mean((x @ self.beta(params) - y) ** 2)

    def observe(self, params) -> dict[str, Array]:
        r"""$\beta$ (`"beta"`)."""
        return {"beta": self.beta(params)}

    def loss_floor(self) -> float:
        r"""$\sigma^2/2$: the loss at $\beta = \beta^*$."""
        return 0.5 * float(self.noise) ** 2

    def __str__(self) -> str:
        noise = f", noise={float(self.noise):g}" if float(self.noise) > 0 else ""
        return f"DiagonalLinear(D={self.dimension}, {self.parametrisation}{noise})"


@array_names.register
def _(problem: DiagonalLinear) -> ArrayNames:
    """`u`, `v` and `beta` on `coordinate`; the covariance and its Cholesky
    factor on `(coordinate, coordinate_2)`, the target on `coordinate`."""
    square = ("coordinate", "coordinate_2")
    extras: dict[str, Any] = {"beta": ("coordinate",)}
    return ArrayNames(
        params={"[0]": ("u", ("coordinate",)), "[1]": ("v", ("coordinate",))},
        extras=extras,
        problem={
            "covariance": ("covariance", square),
            "target": ("target", ("coordinate",)),
            "noise": ("noise", ()),
            "cholesky": ("cholesky", square),
        },
        coords={"coordinate": np.arange(1, problem.dimension + 1)},
    )


__all__ = [
    "PARAMETRISATIONS",
    "DiagonalLinear",
    "check_diagonal_covariance",
    "check_parametrisation",
    "check_target",
]
