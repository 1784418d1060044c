r"""The deep linear network (`docs/problems.md`): the population loss of
$x \mapsto W_L \cdots W_1 x$ fitted to a linear teacher, the setting of Saxe,
McClelland and Ganguli (2014).

With the product $W = W_L \cdots W_1$ and the least-squares map
$W^* = \Sigma_{yx}\Sigma_{xx}^{-1}$,

$$L = \tfrac12\operatorname{tr}\big((W - W^*)\,\Sigma_{xx}\,(W - W^*)^\top\big),$$

zero at $W^*$; the gradient with respect to the product is
$W\Sigma_{xx} - \Sigma_{yx}$. The loss is written through the residual
$W - W^*$ (not expanded), so it stays accurate to its own size near the
minimum, where the flow ends.
"""

from functools import reduce
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, PRNGKeyArray

from ..._core.custom_types import Scalar
from ..._core.errors import show
from ..._core.random import scaled_normal
from ..._core.validate import check_covariance, check_matrix, is_integer
from ..._problem.base import BoundedProblem, ObservedProblem, SampledProblem
from ..._result.labelled import ArrayNames, array_names
from ..._stages import matrix_spectra


def check_hidden(hidden) -> tuple[int, ...]:
    """A non-empty tuple of hidden widths (integers >= 1)."""
    if not isinstance(hidden, (tuple, list)):
        hint = f" (one hidden layer: hidden=({hidden},))" if is_integer(hidden) else ""
        raise TypeError(
            f"hidden must be a tuple of hidden-layer widths, got {show(hidden)}{hint}"
        )
    if not hidden or not all(is_integer(h) and h >= 1 for h in hidden):
        raise ValueError(
            "hidden must be a non-empty tuple of integers >= 1, got "
            f"{show(tuple(hidden))}"
        )
    return tuple(int(h) for h in hidden)


def product(params) -> Array:
    """$W = W_L \\cdots W_1$ of a point `(W_1, ..., W_L)` (leading batch axes
    allowed)."""
    return reduce(lambda acc, w: w @ acc, params[1:], params[0])


class DeepLinear(SampledProblem, ObservedProblem, BoundedProblem):
    r"""A deep linear network on a linear teacher: the population loss
    $L = \frac12\operatorname{tr}((W - W^*)\Sigma_{xx}(W - W^*)^\top)$ of
    $x \mapsto W_L\cdots W_1 x$, with $W^* = \Sigma_{yx}\Sigma_{xx}^{-1}$
    (`docs/problems.md`, "Deep linear networks").

    **Arguments:**

    - `sigma_xx`: the input covariance $\Sigma_{xx} = E[xx^\top]$, shape
      `(n_in, n_in)`, symmetric positive definite.
    - `sigma_yx`: the input-output covariance $\Sigma_{yx} = E[yx^\top]$,
      shape `(n_out, n_in)`.
    - `hidden`: the hidden widths, a tuple `(h_1, ..., h_{L-1})`.

    Parameters are a tuple `(W_1, ..., W_L)`, `W_1` of shape
    `(hidden[0], n_in)`, `W_L` of shape `(n_out, hidden[-1])`; the random
    start draws every entry i.i.d. $\mathcal N(0, \text{init\_scale}^2)$.
    For SGD, `sample` draws $x \sim \mathcal N(0, \Sigma_{xx})$ and
    $y = W^* x$. `observe` saves, besides the singular values of every layer,
    the mode strengths `"modes"`: $u_a = u_a^\top W v_a$ for the singular
    vectors $u_a, v_a$ of $\Sigma_{yx}$ (largest first), the coordinates in
    which Saxe et al. solve the flow.

    **Example** (Saxe's setting: whitened inputs, one hidden layer):

    ```python
    s = np.array([3.0, 2.0, 1.0])
    problem = gf.problems.DeepLinear(np.eye(3), np.diag(s), hidden=(3,))
    traj = gf.flow(problem, init_scale=1e-4, t1=20)
    traj.extras["modes"]  # (saves, 3): each mode rises from ~0 to s_a in turn
    ```
    """

    sigma_xx: Float[Array, "n_in n_in"]
    sigma_yx: Float[Array, "n_out n_in"]
    hidden: tuple[int, ...] = eqx.field(static=True)

    def __init__(self, sigma_xx, sigma_yx, hidden):
        sxx = check_covariance("sigma_xx", sigma_xx)
        syx = check_matrix("sigma_yx", sigma_yx)
        if syx.shape[1] != sxx.shape[0]:
            raise ValueError(
                f"sigma_yx must have shape (n_out, {sxx.shape[0]}) (one column per "
                f"input, as sigma_xx), got shape {syx.shape}"
            )
        self.hidden = check_hidden(hidden)
        self.sigma_xx = jnp.asarray(sxx)
        self.sigma_yx = jnp.asarray(syx)

    # -- sizes and closed forms ------------------------------------------------

    @property
    def n_in(self) -> int:
        return int(self.sigma_xx.shape[0])

    @property
    def n_out(self) -> int:
        return int(self.sigma_yx.shape[0])

    @property
    def depth(self) -> int:
        """The number of weight matrices $L$ (`len(hidden) + 1`)."""
        return len(self.hidden) + 1

    def shapes(self) -> tuple[tuple[int, int], ...]:
        """The shapes of `(W_1, ..., W_L)`."""
        sizes = (self.n_in, *self.hidden, self.n_out)
        return tuple((b, a) for a, b in zip(sizes[:-1], sizes[1:], strict=True))

    def target(self) -> Float[Array, "n_out n_in"]:
        r"""The least-squares map $W^* = \Sigma_{yx}\Sigma_{xx}^{-1}$."""
        return jnp.linalg.solve(self.sigma_xx, self.sigma_yx.T).T

    def modes(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        r"""`(U, s, Vt)`: the singular value decomposition
        $\Sigma_{yx} = U\operatorname{diag}(s)V^\top$ (NumPy, `s` descending)."""
        U, s, Vt = np.linalg.svd(np.asarray(self.sigma_yx), full_matrices=False)
        return U, s, Vt

    def whitened_modes(self) -> np.ndarray:
        r"""The singular values of $\Sigma_{yx}\Sigma_{xx}^{-1/2}$, descending:
        the strengths the flow learns (they are those of $\Sigma_{yx}$ when
        $\Sigma_{xx} = I$)."""
        lam, E = np.linalg.eigh(np.asarray(self.sigma_xx))
        inv_sqrt = (E / np.sqrt(lam)) @ E.T
        return np.linalg.svd(np.asarray(self.sigma_yx) @ inv_sqrt, compute_uv=False)

    # -- the protocol ----------------------------------------------------------

    def loss(self, params) -> Scalar:
        D = product(params) - self.target()
        return 0.5 * jnp.sum((D @ self.sigma_xx) * D)

    def init(self, key: PRNGKeyArray, init_scale: float):
        keys = jax.random.split(key, self.depth)
        dtype = self.sigma_xx.dtype
        return tuple(
            scaled_normal(k, shape, init_scale, dtype)
            for k, shape in zip(keys, self.shapes(), strict=True)
        )

    def sample(self, key: PRNGKeyArray, n: int):
        """`n` examples `(x, y)`: $x \\sim \\mathcal N(0, \\Sigma_{xx})$,
        $y = W^* x$; shapes `(n, n_in)` and `(n, n_out)`."""
        z = jax.random.normal(key, (n, self.n_in), self.sigma_xx.dtype)
        x = z @ jnp.linalg.cholesky(self.sigma_xx).T
        return x, x @ self.target().T

    def sample_loss(self, params, batch) -> Scalar:
        """$\\frac12$ the mean squared error of the batch, whose expectation is
        `loss`."""
        x, y = batch
        return 0.5 * jnp.mean(jnp.sum((x @ product(params).T - y) ** 2, axis=1))

    def observe(self, params) -> dict[str, Array]:
        """The singular values of every layer (the generic `rank` records) and
        the mode strengths `"modes"` ($u_a^\\top W v_a$ in the SVD basis of
        $\\Sigma_{yx}$)."""
        out = matrix_spectra(params)
        U, _, Vt = jnp.linalg.svd(self.sigma_yx, full_matrices=False)
        out["modes"] = jnp.einsum("ia,ij,aj->a", U, product(params), Vt)
        return out

    def loss_floor(self) -> float:
        r"""The least loss of a product of rank at most $r = \min(\text{hidden})$:
        $\frac12\sum_{a > r}\hat s_a^2$ over the singular values $\hat s_a$ of
        $\Sigma_{yx}\Sigma_{xx}^{-1/2}$ (Eckart-Young in the metric of
        $\Sigma_{xx}$); 0 when the network can represent $W^*$."""
        tail = self.whitened_modes()[min(self.hidden) :]
        return 0.5 * float(np.sum(tail**2))

    def __str__(self) -> str:
        widths = "-".join(str(n) for n in (self.n_in, *self.hidden, self.n_out))
        return f"DeepLinear({widths})"

    @classmethod
    def random(
        cls, singular_values, *, n_in: int, n_out: int, hidden, seed: int = 0
    ) -> "DeepLinear":
        r"""Saxe's setting with random singular bases: $\Sigma_{xx} = I$ and
        $\Sigma_{yx} = U\operatorname{diag}(s)V^\top$, $U$ and $V$ the first
        columns of Haar-random orthogonal matrices of seed `seed`
        (`singular_values`: at most `min(n_in, n_out)` of them)."""
        return random_deep_linear(
            singular_values, n_in=n_in, n_out=n_out, hidden=hidden, seed=seed
        )


def random_deep_linear(
    singular_values, *, n_in: int, n_out: int, hidden, seed: int = 0
) -> DeepLinear:
    r"""Saxe's setting with random singular bases: $\Sigma_{xx} = I$ and
    $\Sigma_{yx} = U\operatorname{diag}(s)V^\top$ with $U$, $V$ the first
    columns of Haar-random orthogonal matrices of seed `seed`.

    **Arguments:** `singular_values` ($s$, at most `min(n_in, n_out)` of
    them); `n_in`, `n_out`: the sizes; `hidden`: the hidden widths.
    """
    s = np.asarray(singular_values, dtype=np.float64)
    k = s.size
    if s.ndim != 1 or k == 0 or k > min(n_in, n_out) or not np.isfinite(s).all():
        raise ValueError(
            "singular_values must be a 1-D array of at most min(n_in, n_out) = "
            f"{min(n_in, n_out)} finite numbers, got {show(singular_values)}"
        )
    rng = np.random.default_rng(seed)
    U = np.linalg.qr(rng.standard_normal((n_out, n_out)))[0][:, :k]
    V = np.linalg.qr(rng.standard_normal((n_in, n_in)))[0][:, :k]
    return DeepLinear(np.eye(n_in), (U * s) @ V.T, hidden)


@array_names.register
def _(problem: DeepLinear) -> ArrayNames:
    """The layers `W1, ..., WL` between the `input`, `hidden1`, ... and
    `output` dimensions, the mode strengths on `mode`."""
    sizes = ("input", *(f"hidden{j + 1}" for j in range(len(problem.hidden))), "output")
    params: dict[str, tuple[str, tuple[str, ...]]] = {}
    extras: dict[str, Any] = {"modes": ("mode",)}
    for j in range(problem.depth):
        params[f"[{j}]"] = (f"W{j + 1}", (sizes[j + 1], sizes[j]))
        extras[f"sv[{j}]"] = (f"sv_W{j + 1}", (f"sv_W{j + 1}_index",))
    return ArrayNames(
        params=params,
        extras=extras,
        problem={
            "sigma_xx": ("sigma_xx", ("input", "input_2")),
            "sigma_yx": ("sigma_yx", ("output", "input")),
        },
        coords={"mode": np.arange(1, min(problem.n_in, problem.n_out) + 1)},
    )


def is_identity(matrix) -> bool:
    """Whether a covariance is the identity (to rounding)."""
    M = np.asarray(matrix)
    return bool(np.abs(M - np.eye(M.shape[0])).max() <= 1e-12)


__all__ = [
    "DeepLinear",
    "check_hidden",
    "is_identity",
    "product",
    "random_deep_linear",
]
