r"""Observers: what a solve watches while it runs.

A solve of the flow always saves the same things at every save time (loss,
$|\nabla L|$, parameters: see [`save_point`][]); an [`Observer`][] adds the
conditions located *during* the solve (a vector of values whose zero
crossings are events, see `watch.py`): with `stages=True` the saddle escape
and entry (`docs/stages.md`) (the speed $s = t |\nabla L|^2 / \lambda$,
$\lambda$ the loss's level above its floor, or the problem's loss scale
$\ell$ for a [`gradflow.StagedProblem`][], rising through `escape_speed`, falling
through `entry_speed`, with hysteresis; a start near a critical point starts
in the saddle, armed to escape, one that is not starts moving, armed to
enter: `still`), then the user's
[`gradflow.Event`][]s. What is made of the saves after the solve (the
stages) is the problem's `analyse`.

The bare observer (`stages=False`, no events) watches nothing: the solve then
runs the unwrapped solver.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float

from .._core.records import SADDLE_EVENTS
from .._problem.base import Problem
from .._problem.functions import problem_loss_scale
from .._stages import StageThresholds, loss_level
from .events import Event
from .watch import UP, direction_code


def save_point(t, y, problem: Problem) -> dict:
    """What every solve of the flow saves at each save time."""
    loss, grad = jax.value_and_grad(problem.loss)(y)
    grad_norm = jnp.sqrt(sum(jnp.sum(g**2) for g in jax.tree.leaves(grad)))
    return {"loss": loss, "grad_norm": grad_norm, "params": y}


def saddle_speed(t, y, problem: Problem, scale, field=None, *, floor=None):
    r"""$s = t |\nabla L|^2 / \lambda$: the loss's fall per unit of $\log t$,
    relative to its level $\lambda$ above `floor` (small on a plateau;
    `gradflow._stages.loss_level`), or to its scale $\ell$ where `floor` is
    `None`. `field`: the flow's vector field $-\nabla L$ at `y` if already
    computed."""
    grad = jax.grad(problem.loss)(y) if field is None else field
    grad_sq = sum(jnp.sum(g**2) for g in jax.tree.leaves(grad))
    if floor is None:
        return t * grad_sq / scale
    loss = problem.loss(y)
    eps = float(jnp.finfo(jnp.result_type(loss)).eps)
    return t * grad_sq / loss_level(loss, scale, floor, eps)


class Observer(eqx.Module):
    r"""What a solve of the flow watches (see the module docstring).

    **Arguments:**

    - `stages`: watch the saddles during the solve and find the stages after.
    - `thresholds`: a [`gradflow.StageThresholds`][].
    - `events`: user [`gradflow.Event`][]s.
    - `scale`: the loss scale $\ell$ where the problem gives none
      (a problem that is not a [`gradflow.StagedProblem`][], or whose
      `loss_scale()` is `None`): the loss at the start (data, so a
      sweep's members each carry their own).
    - `floor`: the floor above which the speed judges the loss's level
      (`gradflow._problem.functions.speed_floor`; data); `None`: the
      speed is judged against the constant scale.
    - `still`: whether the flow starts near a critical point (in a saddle,
      where the first saddle event is an escape) or not (moving, where it is
      an entry): data, decided on the start before the solve
      (`gradflow/_problem/curvature.py`, `start_speed`); `None`: in a saddle.
    """

    stages: bool = eqx.field(static=True)
    thresholds: StageThresholds = eqx.field(static=True)
    events: tuple[Event, ...] = eqx.field(static=True, default=())
    scale: Float[Array, ""] | None = None
    still: Bool[Array, ""] | None = None
    floor: Float[Array, ""] | None = None

    @property
    def names(self) -> tuple[str, ...]:
        builtin = SADDLE_EVENTS if self.stages else ()
        return builtin + tuple(e.name for e in self.events)

    @property
    def directions(self) -> tuple[int, ...]:
        builtin = (UP, UP) if self.stages else ()
        return builtin + tuple(direction_code(e.direction) for e in self.events)

    @property
    def rearm_by(self) -> tuple[int, ...]:
        # Escape and entry re-arm each other: a saddle is left once before it
        # is entered again (hysteresis, entry_speed < escape_speed).
        builtin = (1, 0) if self.stages else ()
        return builtin + (-1,) * len(self.events)

    @property
    def armed0(self) -> tuple[bool, ...] | Bool[Array, " K"]:
        """Which conditions can fire first: a flow that starts still (in a
        saddle) can escape, one that starts moving can enter a saddle."""
        if not self.stages or self.still is None:
            builtin = (True, False) if self.stages else ()
            return builtin + (True,) * len(self.events)
        # built on the host and put on the device: five tiny programs
        # fewer for a process to compile or load
        still = np.asarray(self.still, bool)
        rest = np.ones((len(self.events),), bool)
        return jax.device_put(np.concatenate([np.stack([still, ~still]), rest]))

    @property
    def watches(self) -> bool:
        return bool(self.names)

    @property
    def uses_field(self) -> bool:
        """The saddle speed is built on the gradient: take the solver's."""
        return self.stages

    def __call__(self, t, y, problem: Problem, field=None):
        values = []
        if self.stages:
            scale = problem_loss_scale(problem)
            s = saddle_speed(
                t,
                y,
                problem,
                self.scale if scale is None else scale,
                field,
                floor=self.floor,
            )
            escape, entry = self.thresholds.speeds(self.floor is not None)
            values += [s - escape, entry - s]
        values += [jnp.asarray(e.cond_fn(t, y, problem)) for e in self.events]
        if not values:  # a watch that records motion saves only
            return jnp.zeros((0,))
        dtype = jnp.result_type(*values)
        return jnp.stack([jnp.asarray(v, dtype).reshape(()) for v in values])


__all__ = ["Observer", "SADDLE_EVENTS", "saddle_speed", "save_point"]
