"""Solvers for the stiff gradient flow: linearly implicit Rosenbrock-W methods
that keep the Jacobian in eigen-form and reuse it over many steps.

All are `diffrax.AbstractSolver`s: pass them to `diffrax.diffeqsolve` or to
[`gradflow.integrate`][] (`solver="ros34pw2"` or an instance).
"""

from .base import (
    AbstractRosenbrockW as AbstractRosenbrockW,
    RosenbrockWState as RosenbrockWState,
    RosenbrockWTableau as RosenbrockWTableau,
)
from .rosw import ROS2 as ROS2, ROS34PW2 as ROS34PW2


__all__ = [
    "ROS2",
    "ROS34PW2",
    "AbstractRosenbrockW",
    "RosenbrockWState",
    "RosenbrockWTableau",
]
