r"""User events: [`gradflow.Event`][] names a scalar condition of the state,
whose zero crossings a solve locates without stopping (`watch.py`).
[`gradflow.solve_with_events`][] (`solve.py`) solves any $\dot y = f(t, y, \text{args})$ with the loop of
[`gradflow.flow`][] (`gradflow/_loop/loop.py`): the conditions' zero
crossings are located by bisection on the solver's dense output inside the
compiled solve (`gradflow/_event/watch.py`), and the solve never stops or
restarts for them.
"""

from collections.abc import Callable

import equinox as eqx


class Event(eqx.Module):
    r"""A user event: a named scalar condition of the state.

    The event fires when `cond_fn(t, params, problem)` crosses zero: upward
    if `direction=True`, downward if `False`, either way if `None`. Its time
    is located by bisection on the solver's dense output, and the solve
    continues. Pass events in a [`gradflow.SaveAt`][].

    **Arguments:**

    - `name`: a label for the event record.
    - `cond_fn`: a JAX function `(t, params, problem) -> scalar` (for
      [`gradflow.solve_with_events`][], `(t, y, args) -> scalar`).
    - `direction`: `True`, `False` or `None` (see above).

    **Example:**

    ```python
    # When the loss falls through the unigram level H(pi) + 0.01.
    level = float(chain.unigram_entropy) + 0.01
    ev = gf.Event("below_unigram",
                  lambda t, p, problem: level - problem.loss(p), direction=True)
    traj = gf.integrate(chain, 1e-3, saveat=gf.SaveAt(events=[ev]))
    ```
    """

    name: str = eqx.field(static=True)
    cond_fn: Callable = eqx.field(static=True)
    direction: bool | None = eqx.field(static=True, default=None)

    def __check_init__(self):
        if not isinstance(self.name, str):
            raise TypeError(f"Event name must be a string, got {self.name!r}")
        if not self.name:
            raise ValueError(
                f"Event name must be a non-empty string, got {self.name!r}"
            )
        if not callable(self.cond_fn):
            raise TypeError(
                f"Event {self.name!r}: cond_fn must be callable, got "
                f"{type(self.cond_fn).__name__}"
            )
        if self.direction not in (None, True, False):
            raise ValueError(
                f"Event {self.name!r}: direction must be True, False or None, got "
                f"{self.direction!r}"
            )


__all__ = ["Event"]
