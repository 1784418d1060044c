r"""The soft committee machine (`docs/problems.md`; Saad and Solla
1995): $K$ students learn a teacher committee of $M$ units from Gaussian
inputs.

Inputs $x \sim \mathcal N(0, I_N)$; the teacher's output is
$\sum_n g(v_n\cdot x)$, the students' $\sum_k g(w_k\cdot x)$, with
$g(h) = \operatorname{erf}(h/\sqrt2)$. For this $g$,
$E[g(a\cdot x)\,g(b\cdot x)] = \frac2\pi\arcsin\frac{a\cdot b}
{\sqrt{(1 + a\cdot a)(1 + b\cdot b)}}$, so the population loss
$L = \frac12 E[(\sum_k g(w_k\cdot x) - \sum_n g(v_n\cdot x))^2]$ is a function
of the order parameters $R = WV^\top$, $Q = WW^\top$ and $T = VV^\top$ alone.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, PRNGKeyArray

from ..._core.custom_types import Scalar
from ..._core.errors import show
from ..._core.random import scaled_normal
from ..._core.validate import as_float_array, check_finite_entries, check_integer
from ..._problem.base import BoundedProblem, ObservedProblem, SampledProblem
from ..._result.labelled import ArrayNames, array_names


ACTIVATIONS = ("erf",)


def erf_correlation(dot, norm_a, norm_b):
    r"""$E[g(a\cdot x)g(b\cdot x)] = \frac2\pi\arcsin\frac{a\cdot b}
    {\sqrt{(1 + |a|^2)(1 + |b|^2)}}$ for $g(h) = \operatorname{erf}(h/\sqrt2)$
    and $x \sim \mathcal N(0, I)$, from `dot` $= a\cdot b$, `norm_a`
    $= |a|^2$ and `norm_b` $= |b|^2$ (arrays that broadcast)."""
    return (2 / jnp.pi) * jnp.arcsin(dot / jnp.sqrt((1 + norm_a) * (1 + norm_b)))


def correlations(A: Float[Array, "k n"], B: Float[Array, "l n"]) -> Float[Array, "k l"]:
    """The matrix of [`erf_correlation`][] between the rows of `A` and `B`."""
    return erf_correlation(
        A @ B.T, jnp.sum(A**2, axis=1)[:, None], jnp.sum(B**2, axis=1)[None, :]
    )


def erf_activation(h):
    r"""$g(h) = \operatorname{erf}(h/\sqrt2)$."""
    return jax.lax.erf(h / jnp.sqrt(jnp.asarray(2.0, h.dtype)))


def check_teacher(teacher) -> np.ndarray:
    """The teacher's weights as a finite `(M, N)` float64 array, or a one-line
    error."""
    V = as_float_array("teacher", teacher, "an (M, N) matrix of numbers")
    if V.ndim != 2 or 0 in V.shape:
        raise ValueError(
            "teacher must be an (M, N) matrix (one row per teacher unit), got shape "
            f"{V.shape}"
        )
    return check_finite_entries("teacher", V)


class Committee(SampledProblem, ObservedProblem, BoundedProblem):
    r"""The soft committee machine of Saad and Solla (1995) as a population
    loss (`docs/problems.md`, "The soft committee machine"):
    $L(W) = \frac12 E_x[(\sum_k g(w_k\cdot x) - \sum_n g(v_n\cdot x))^2]$
    with $x \sim \mathcal N(0, I_N)$ and $g(h) = \operatorname{erf}(h/\sqrt2)$,
    in closed form.

    **Arguments:**

    - `teacher`: the teacher's weights $V$, shape `(M, N)` (row $n$ is $v_n$).
    - `students`: the number of student units $K$.
    - `activation`: `"erf"` (the activation with the closed form above).

    Parameters are the students' weights $W$, one array of shape
    `(students, N)`; the random start draws every entry i.i.d.
    $\mathcal N(0, \text{init\_scale}^2)$. For SGD, `sample` draws
    $x \sim \mathcal N(0, I_N)$ with the teacher's output $y$. `observe` saves
    the order parameters `"R"` $= WV^\top$ (shape `(K, M)`) and `"Q"`
    $= WW^\top$ (`(K, K)`), and the singular values `"svW"` of $W$ (whose
    `rank` records show the students specialising: all students alike is
    rank one); the teacher's $T = VV^\top$ is [`T`][gradflow.problems.Committee.T].

    **Example** (three students, three orthonormal teacher units):

    ```python
    problem = gf.problems.Committee(np.eye(3, 8), students=3)
    traj = gf.flow(problem, init_scale=1e-3, t1=5000)
    traj.extras["R"]  # (saves, 3, 3): equal entries on the plateau, then specialised
    ```
    """

    teacher: Float[Array, "M N"]
    students: int = eqx.field(static=True)
    activation: str = eqx.field(static=True)

    def __init__(self, teacher, students: int, activation: str = "erf"):
        V = check_teacher(teacher)
        self.students = check_integer("students", students, 1)
        if not isinstance(activation, str) or activation not in ACTIVATIONS:
            raise ValueError(
                f"activation must be one of {ACTIVATIONS} (the activations with a "
                f"closed-form loss), got {show(activation)}"
            )
        self.activation = activation
        self.teacher = jnp.asarray(V)

    # -- sizes and order parameters --------------------------------------------

    @property
    def inputs(self) -> int:
        """$N$, the input dimension."""
        return int(self.teacher.shape[1])

    @property
    def teachers(self) -> int:
        """$M$, the teacher's units."""
        return int(self.teacher.shape[0])

    @property
    def T(self) -> Float[Array, "M M"]:
        r"""The teacher's order parameters $T = VV^\top$."""
        return self.teacher @ self.teacher.T

    def order_parameters(self, W: Float[Array, "K N"]) -> tuple[Array, Array]:
        r"""`(R, Q)`: $R = WV^\top$ (student-teacher overlaps) and $Q = WW^\top$
        (student-student)."""
        return W @ self.teacher.T, W @ W.T

    # -- the protocol ----------------------------------------------------------

    def loss(self, params: Float[Array, "K N"]) -> Scalar:
        W, V = params, self.teacher
        return 0.5 * (
            jnp.sum(correlations(W, W))
            - 2 * jnp.sum(correlations(W, V))
            + jnp.sum(correlations(V, V))
        )

    def init(self, key: PRNGKeyArray, init_scale: float) -> Float[Array, "K N"]:
        shape = (self.students, self.inputs)
        return scaled_normal(key, shape, init_scale, self.teacher.dtype)

    def sample(self, key: PRNGKeyArray, n: int):
        """`n` examples `(x, y)`: $x \\sim \\mathcal N(0, I_N)$ (shape
        `(n, N)`) and the teacher's output $y = \\sum_n g(v_n\\cdot x)$
        (shape `(n,)`)."""
        x = jax.random.normal(key, (n, self.inputs), self.teacher.dtype)
        return x, jnp.sum(erf_activation(x @ self.teacher.T), axis=1)

    def sample_loss(self, params: Float[Array, "K N"], batch) -> Scalar:
        """$\\frac12$ the mean squared error of the batch, whose expectation is
        `loss`."""
        x, y = batch
        return 0.5 * jnp.mean((jnp.sum(erf_activation(x @ params.T), axis=1) - y) ** 2)

    def observe(self, params: Float[Array, "K N"]) -> dict[str, Array]:
        """`"R"`, `"Q"` and the singular values `"svW"` of $W$."""
        R, Q = self.order_parameters(params)
        out = {"R": R, "Q": Q}
        if min(params.shape) > 1:
            out["svW"] = jnp.linalg.svd(params, compute_uv=False)
        return out

    def loss_floor(self) -> float | None:
        """0 when the students can copy the teacher (`students >= M`: the
        loss is 0 at the teacher, the spare students at 0); unknown
        otherwise."""
        return 0.0 if self.students >= self.teachers else None

    def __str__(self) -> str:
        return f"Committee(K={self.students}, M={self.teachers}, N={self.inputs})"

    @classmethod
    def isotropic(
        cls,
        teachers: int,
        inputs: int,
        students: int,
        *,
        norm: float = 1.0,
        seed: int | None = None,
    ) -> "Committee":
        r"""Saad and Solla's isotropic teacher: `teachers` orthogonal rows of
        length `norm` in $\mathbb R^{\text{inputs}}$ ($T = \text{norm}^2 I$;
        the first unit vectors, or with `seed` random orthogonal ones), learnt
        by `students` students."""
        teacher = orthogonal_teacher(teachers, inputs, norm, seed=seed)
        return cls(teacher, students)


def orthogonal_teacher(teachers: int, inputs: int, norm: float = 1.0, *, seed=None):
    r"""A teacher of `teachers` orthogonal rows of length `norm` in
    $\mathbb R^{\text{inputs}}$ ($T = \text{norm}^2 I$, Saad and Solla's
    isotropic teacher): the first rows of the identity, or with `seed` of a
    Haar-random orthogonal matrix."""
    M = check_integer("teachers", teachers, 1)
    N = check_integer("inputs", inputs, M)
    if seed is None:
        return norm * np.eye(M, N)
    rng = np.random.default_rng(seed)
    return norm * np.linalg.qr(rng.standard_normal((N, N)))[0][:, :M].T


@array_names.register
def _(problem: Committee) -> ArrayNames:
    """The students' weights `W(student, input)`, the order parameters
    `R(student, teacher)` and `Q(student, student_2)`."""
    del problem
    return ArrayNames(
        params={"": ("W", ("student", "input"))},
        extras={
            "R": ("student", "teacher"),
            "Q": ("student", "student_2"),
            "svW": ("sv",),
        },
        problem={"teacher": ("teacher_weights", ("teacher", "input"))},
    )


__all__ = [
    "ACTIVATIONS",
    "Committee",
    "check_teacher",
    "correlations",
    "erf_activation",
    "erf_correlation",
    "orthogonal_teacher",
]
