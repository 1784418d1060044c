"""Exact continuation of an adaptive solve across separate Diffrax calls.

A Diffrax solve that stops (at an event, at a chunk boundary, or because the
process was killed after a checkpoint) can be continued *bit for bit* if the
next call starts with the same state, the same solver state (e.g. the
first-same-as-last derivative), the same step-size-controller state **and the
same proposed next step**. Diffrax returns the first three
(`SaveAt(solver_state=True, controller_state=True)`), but not the proposed step;
[`ResumableController`][] records it in its own state so it can be passed back
as `dt0`.
"""

from collections.abc import Callable

import diffrax as dfx
import jax.numpy as jnp
from jaxtyping import PyTree


class ResumableController(dfx.AbstractAdaptiveStepSizeController):
    """Wraps an adaptive step-size controller and records its proposed next step.

    The state is `(inner_state, next_dt)`; restart a solve with
    `dt0=next_dt, controller_state=state` to continue exactly where it stopped.

    **Arguments:**

    - `controller`: the wrapped controller (a `diffrax.PIDController`).
    """

    controller: dfx.AbstractAdaptiveStepSizeController

    @property
    def rtol(self):
        return self.controller.rtol

    @property
    def atol(self):
        return self.controller.atol

    @property
    def norm(self) -> Callable[[PyTree], jnp.ndarray]:
        return self.controller.norm  # pyright: ignore[reportReturnType]

    def wrap(self, direction):
        return ResumableController(self.controller.wrap(direction))  # pyright: ignore[reportCallIssue]

    def init(self, terms, t0, t1, y0, dt0, args, func, error_order):
        tnext, state = self.controller.init(
            terms, t0, t1, y0, dt0, args, func, error_order
        )
        return tnext, (state, jnp.asarray(tnext - t0))

    def adapt_step_size(
        self, t0, t1, y0, y1_candidate, args, y_error, error_order, controller_state
    ):
        inner_state, _ = controller_state
        keep, tprev, tnext, jump, inner_state, result = self.controller.adapt_step_size(
            t0, t1, y0, y1_candidate, args, y_error, error_order, inner_state
        )
        return keep, tprev, tnext, jump, (inner_state, tnext - tprev), result


def next_step(controller_state) -> jnp.ndarray:
    """The step a [`ResumableController`][] proposed last (to pass as `dt0`)."""
    return controller_state[1]


__all__ = ["ResumableController", "next_step"]
