"""Concrete Rosenbrock-W tableaus."""

from typing import ClassVar

import numpy as np

from .base import AbstractRosenbrockW, RosenbrockWTableau


# Rang and Angermann (2005), "New Rosenbrock W-methods of order 3 for partial
# differential algebraic equations of index 1", BIT 45, table ROS34PW2.
_ros34pw2 = RosenbrockWTableau(
    alpha=np.array(
        [
            [0.0, 0.0, 0.0, 0.0],
            [8.7173304301691801e-01, 0.0, 0.0, 0.0],
            [8.4457060015369423e-01, -1.1299064236484185e-01, 0.0, 0.0],
            [0.0, 0.0, 1.0, 0.0],
        ]
    ),
    gamma_lower=np.array(
        [
            [0.0, 0.0, 0.0, 0.0],
            [-8.7173304301691801e-01, 0.0, 0.0, 0.0],
            [-9.0338057013044082e-01, 5.4180672388095326e-02, 0.0, 0.0],
            [
                2.4212380706095346e-01,
                -1.2232505839045147e00,
                5.4526025533510214e-01,
                0.0,
            ],
        ]
    ),
    gamma=4.3586652150845900e-01,
    b=np.array(
        [
            2.4212380706095346e-01,
            -1.2232505839045147e00,
            1.5452602553351020e00,
            4.3586652150845900e-01,
        ]
    ),
    b_hat=np.array(
        [3.7810903145819369e-01, -9.6042292212423178e-02, 0.5, 2.1793326075422950e-01]
    ),
    order=3,
)

# Verwer, Spee, Blom and Hundsdorfer (1999), "A second-order Rosenbrock method
# applied to photochemical dispersion problems", SIAM J. Sci. Comput. 20: ROS2,
# gamma = 1 + 1/sqrt(2), order 2 for any W; embedded: the first stage alone
# (linearly implicit Euler, order 1).
# In the form above: alpha_21 = 1, gamma_21 = -2 gamma, b = (1/2, 1/2).
_g2 = 1.0 + 1.0 / np.sqrt(2.0)
_ros2 = RosenbrockWTableau(
    alpha=np.array([[0.0, 0.0], [1.0, 0.0]]),
    gamma_lower=np.array([[0.0, 0.0], [-2.0 * _g2, 0.0]]),
    gamma=float(_g2),
    b=np.array([0.5, 0.5]),
    b_hat=np.array([1.0, 0.0]),
    order=2,
)


class ROS34PW2(AbstractRosenbrockW):
    r"""ROS34PW2 (Rang and Angermann 2005): a 4-stage, L-stable Rosenbrock-W
    method of order 3 for *any* W-matrix, with an embedded order-2 solution for
    step-size control. Four vector-field evaluations per step (stage 1 reuses
    $f(y_0)$ from the previous step).

    See [`gradflow.solvers.AbstractRosenbrockW`][] for the fields (`rank`,
    `refresh_every`, `jacobian_tol`, `power_iterations`, `carry_basis`).

    **Example:**

    ```python
    import diffrax as dfx
    import gradflow as gf
    solver = gf.solvers.ROS34PW2()                 # dense eigendecomposition
    big = gf.solvers.ROS34PW2(rank=32)             # 32 dominant eigenpairs
    traj = gf.integrate(gf.chains.sticky(), 1e-3, width=8, solver=solver)
    ```
    """

    tableau: ClassVar[RosenbrockWTableau] = _ros34pw2


class ROS2(AbstractRosenbrockW):
    r"""ROS2 (Verwer et al. 1999): a 2-stage, L-stable Rosenbrock-W method of
    order 2 for any W-matrix, $\gamma = 1 + 1/\sqrt2$, with the linearly
    implicit Euler stage as embedded order-1 solution. Two vector-field
    evaluations per step. Cheap per step; for loose tolerances.
    """

    tableau: ClassVar[RosenbrockWTableau] = _ros2


__all__ = ["ROS2", "ROS34PW2"]
