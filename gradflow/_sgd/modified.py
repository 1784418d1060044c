r"""[`gradflow.modified_loss`][]: the modified flow of gradient descent at a
finite learning rate (backward error analysis, `docs/sgd.md`, "Modified
flows").

Gradient descent $\theta_{k+1} = \theta_k - h \nabla L(\theta_k)$ is explicit
Euler for $\dot\theta = f = -g$, $g = \nabla L$, $H = \nabla^2 L$. Its
iterates lie, to $O(h^{K+1})$ over a fixed time, on the flow of the modified
field $\tilde f = f + h f_1 + \dots + h^K f_K$ with

$$f_1 = -\tfrac12 f'f = -\tfrac12 Hg = -\nabla\big(\tfrac14|g|^2\big), \qquad
f_2 = \tfrac13 f'f'f + \tfrac1{12} f''(f, f)
    = -\nabla\big(\tfrac1{12} g^\top H g\big) - \tfrac16 H^2 g .$$

$H^2 g$ is in general not a gradient, so the order-2 flow is a vector field,
not the gradient flow of a loss: the problem is a
[`gradflow.FieldProblem`][] whose `loss` is the original population loss
(the metric every run is reported in) and whose `vector_field` is
$\tilde f$; `modified(params)` is the loss whose gradient is the gradient
part of $-\tilde f$.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, PyTree

from .._core.validate import check_integer, check_positive_finite
from .._problem.adapt import as_problem
from .._problem.base import (
    Analysis,
    BoundedProblem,
    FieldProblem,
    Problem,
    StagedProblem,
)
from .._problem.functions import (
    analyse,
    check_problem,
    loss_floor,
    loss_levels,
    observe,
    problem_loss_scale,
)


ORDERS = (0, 1, 2)


def _dot(a: PyTree, b: PyTree) -> Array:
    pairs = zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True)
    return jnp.sum(jnp.stack([jnp.vdot(x, y) for x, y in pairs]))


def _axpy(*terms) -> PyTree:
    """$\\sum_j c_j v_j$ for `terms = ((c_1, v_1), ...)`."""
    return jax.tree.map(lambda *xs: sum(c * x for (c, _), x in zip(terms, xs, strict=True)), *(v for _, v in terms))  # fmt: skip


def modified_field(problem: Problem, lr, order: int, params: PyTree) -> PyTree:
    r"""The modified vector field $\tilde f$ of gradient descent at step `lr`
    up to `order` (0: $-g$; 1: $-g - \frac h2 Hg$; 2: that
    $- h^2 (\frac13 H^2 g + \frac1{12} \nabla^3 L[g, g])$), by
    Hessian-vector products (one per order, and one more for the third
    derivative)."""
    grad = jax.grad(problem.loss)
    g = grad(params)
    if order == 0:
        return jax.tree.map(jnp.negative, g)
    hvp = lambda p, v: jax.jvp(grad, (p,), (v,))[1]  # noqa: E731
    Hg = hvp(params, g)
    if order == 1:
        return _axpy((-1.0, g), (-lr / 2, Hg))
    H2g = hvp(params, Hg)
    # the third derivative along g twice: the change of H g (g held fixed)
    # along g
    Tgg = jax.jvp(lambda p: hvp(p, g), (params,), (g,))[1]
    h2 = lr * lr
    return _axpy((-1.0, g), (-lr / 2, Hg), (-h2 / 3, H2g), (-h2 / 12, Tgg))


class ModifiedLoss(FieldProblem, StagedProblem, BoundedProblem):
    r"""The modified flow of gradient descent at step `lr` on a problem
    (`docs/sgd.md`, "Modified flows"): built by [`gradflow.modified_loss`][].

    `loss` is the original problem's population loss (so a modified flow, a
    flow and a GD run are reported in one metric); `vector_field` is the
    modified field $\tilde f$; `modified(params)` the modified loss
    ($L + \frac h4 |\nabla L|^2$ at order 1, plus
    $\frac{h^2}{12} \nabla L^\top H \nabla L$ at order 2, whose flow leaves
    out the non-gradient part $-\frac{h^2}6 H^2 \nabla L$). Observables,
    stages, the loss scale, floor and reference levels are the original
    problem's.
    """

    problem: Problem
    lr: Float[Array, ""]
    order: int = eqx.field(static=True)

    def __init__(self, problem: Problem, lr, order: int = 1):
        self.problem = check_problem(problem)
        lr = check_positive_finite("lr", lr)
        order = check_integer("order", order, 0)
        if order not in ORDERS:
            raise ValueError(f"order must be one of {ORDERS}, got {order}")
        self.order = order
        # an array (traced): flows at another lr reuse the compiled solve
        self.lr = jnp.asarray(lr)

    def loss(self, params: PyTree) -> Array:
        return self.problem.loss(params)

    def init(self, key, init_scale: float) -> PyTree:
        return self.problem.init(key, init_scale)

    def vector_field(self, params: PyTree) -> PyTree:
        return modified_field(self.problem, self.lr, self.order, params)

    def modified(self, params: PyTree) -> Array:
        r"""The modified loss: the gradient part of $-\tilde f$."""
        loss, g = jax.value_and_grad(self.problem.loss)(params)
        if self.order == 0:
            return loss
        out = loss + self.lr / 4 * _dot(g, g)
        if self.order == 2:
            Hg = jax.jvp(jax.grad(self.problem.loss), (params,), (g,))[1]
            out = out + self.lr**2 / 12 * _dot(g, Hg)
        return out

    def observe(self, params: PyTree) -> dict[str, Array]:
        return observe(self.problem, params)

    def loss_scale(self):
        return problem_loss_scale(self.problem)

    def analyse(self, ts, params, loss, *, thresholds, loss_scale) -> Analysis:
        return analyse(
            self.problem, ts, params, loss, thresholds=thresholds, loss_scale=loss_scale
        )

    def loss_floor(self) -> float | None:
        return loss_floor(self.problem)

    def __str__(self) -> str:
        return f"{self.problem} (modified flow of GD, lr={float(self.lr):g}, order {self.order})"


@loss_levels.register(ModifiedLoss)
def _(problem: ModifiedLoss) -> dict[str, tuple[str, float]]:
    return loss_levels(problem.problem)


def modified_loss(
    problem, lr: float, order: int = 1, **problem_options
) -> ModifiedLoss:
    r"""The modified flow of gradient descent at step `lr`: the flow that GD's
    iterates $\theta_k$ follow at $t = k \cdot$ `lr` to $O(\text{lr}^{K+1})$
    (`docs/sgd.md`, "Modified flows").

    **Arguments:**

    - `problem`: a [`gradflow.Problem`][], or anything
      [`gradflow.as_problem`][] turns into one with `problem_options` (a
      chain, with `width`, `model`).
    - `lr`: the learning rate $h > 0$.
    - `order`: $K$: 1 (default), $\tilde f = -\nabla L - \frac h2 H\nabla L$,
      the gradient flow of $L + \frac h4|\nabla L|^2$; 2, adding
      $-h^2(\frac13 H^2 \nabla L + \frac1{12}\nabla^3 L[\nabla L, \nabla L])$
      (not a gradient); 0, the plain flow.

    **Returns:** a [`gradflow.FieldProblem`][] that every entry point takes
    like the original problem ([`gradflow.flow`][], [`gradflow.sweep`][],
    `gradflow run --lr-correction LR --order K`); its `loss` is the original
    population loss, its flow the modified one.

    **Raises:** `ValueError` naming `lr` or `order` and the value.

    **Example:**

    ```python
    problem = gf.problems.MarkovAttention(gf.chains.sticky(6, 0.5, 0.5, 0.05), width=8)
    traj = gf.flow(gf.modified_loss(problem, 0.2), 1e-3, t1=300)
    ```
    """
    return ModifiedLoss(as_problem(problem, **problem_options), lr, order)


__all__ = ["ModifiedLoss", "modified_field", "modified_loss"]
