r"""Observers: what a solve watches while it runs and what is made of it after.

A solve of the flow always saves the same things at every save time (loss,
$|\nabla L|$, parameters: see [`save_point`][]); an [`Observer`][] adds

- the conditions located *during* the solve (a vector of values whose zero
  crossings are events, see `_watch.py`): with `stages=True` the saddle escape
  and entry of SPEC section 4 (the speed
  $s = t |\nabla L|^2 / (\log d - H_{\text{cond}})$ rising through
  `escape_speed`, falling through `entry_speed`, with hysteresis), then the
  user's [`gradflow.Event`][]s;
- the stage detection *after* the solve, on the observables evaluated at the
  saved parameters, batched over the saves.

The bare observer (`stages=False`, no events) watches nothing: the solve then
runs the unwrapped solver.
"""

import equinox as eqx
import jax
import jax.numpy as jnp

from ._chain import MarkovChain
from ._events import Event
from ._model import Params, population_loss
from ._stages import StageThresholds
from ._watch import UP, direction_code


SADDLE_EVENTS = ("saddle_escape", "saddle_entry")


def save_point(t, y: Params, chain: MarkovChain) -> dict:
    """What every solve of the flow saves at each save time."""
    loss, grad = jax.value_and_grad(population_loss)(y, chain)
    grad_norm = jnp.sqrt(sum(jnp.sum(g**2) for g in jax.tree.leaves(grad)))
    return {"loss": loss, "grad_norm": grad_norm, "params": y}


def saddle_speed(t, y: Params, chain: MarkovChain, field=None):
    r"""$s = t |\nabla L|^2 / (\log d - H_{\text{cond}})$: the loss's fall per
    unit of $\log t$, relative to its range (small on a plateau). `field`: the
    flow's vector field $-\nabla L$ at `y` if already computed."""
    grad = jax.grad(population_loss)(y, chain) if field is None else field
    grad_sq = sum(jnp.sum(g**2) for g in jax.tree.leaves(grad))
    return t * grad_sq / (jnp.log(chain.d) - chain.conditional_entropy)


class Observer(eqx.Module):
    """What a solve of the flow watches (see the module docstring).

    **Arguments:**

    - `stages`: watch the saddles during the solve and find the stages after.
    - `thresholds`: a [`gradflow.StageThresholds`][].
    - `events`: user [`gradflow.Event`][]s.
    """

    stages: bool = eqx.field(static=True)
    thresholds: StageThresholds = eqx.field(static=True)
    events: tuple[Event, ...] = eqx.field(static=True, default=())

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
    def armed0(self) -> tuple[bool, ...]:
        # A flow starts on the plateau at the origin: in a saddle.
        builtin = (True, False) if self.stages else ()
        return builtin + (True,) * len(self.events)

    @property
    def watches(self) -> bool:
        return bool(self.names)

    @property
    def uses_field(self) -> bool:
        """The saddle speed is built on the gradient: take the solver's."""
        return self.stages

    def __call__(self, t, y: Params, chain: MarkovChain, field=None):
        values = []
        if self.stages:
            s = saddle_speed(t, y, chain, field)
            th = self.thresholds
            values += [s - th.escape_speed, th.entry_speed - s]
        values += [jnp.asarray(e.cond_fn(t, y, chain)) for e in self.events]
        dtype = jnp.result_type(*values)
        return jnp.stack([jnp.asarray(v, dtype).reshape(()) for v in values])


__all__ = ["Observer", "SADDLE_EVENTS", "saddle_speed", "save_point"]
