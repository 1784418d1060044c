"""Exact continuation of an adaptive solve across separate Diffrax calls.

A Diffrax solve that stops (at an event, at a chunk boundary, or because the
process was killed after a checkpoint) can be continued *bit for bit* if the
next call starts with the same state, the same solver state (e.g. the
first-same-as-last derivative), the same step-size-controller state **and the
same proposed next step**. Diffrax returns the first three
(`SaveAt(solver_state=True, controller_state=True)`), but not the proposed step;
[`ResumableController`][] records it in its own state so it can be passed back
as `dt0`.

The same wrapper ends a solve whose step size has collapsed (a rejected step
proposing a step below the round-off of $t$, or `MAX_REJECTIONS` rejections
in a row): Diffrax would otherwise retry steps that cannot move $t$ until
`max_steps` (4 million rejected steps, half a minute, for a flow that blows
up in finite time). It reports Diffrax's `dt_min_reached` (gradflow's
controller sets no `dtmin`, so nothing else reports it) and sets the flag
that [`collapsed`][] reads; the host turns it into
`gradflow.RESULTS.step_collapsed`.
"""

from collections.abc import Callable

import diffrax as dfx
import jax.numpy as jnp
from jaxtyping import PyTree


# A rejected step that proposes a step this many units of round-off of t (or
# fewer) cannot make progress: the step size has collapsed.
COLLAPSE_ULPS = 64
# Rejections in a row that end a solve (a collapse at t = 0, where the
# round-off of t is no measure).
MAX_REJECTIONS = 100


class ResumableController(dfx.AbstractAdaptiveStepSizeController):
    """Wraps an adaptive step-size controller and records its proposed next step.

    The state is `(inner_state, next_dt, rejections, collapsed)`: restart a
    solve with `dt0=next_dt, controller_state=state` to continue exactly where
    it stopped; `rejections` counts the steps rejected in a row and
    `collapsed` says whether the step size collapsed (see the module
    docstring), which ends the solve with `dt_min_reached`.

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
        none = jnp.zeros((), jnp.int32)
        return tnext, (state, jnp.asarray(tnext - t0), none, jnp.asarray(False))

    def adapt_step_size(
        self, t0, t1, y0, y1_candidate, args, y_error, error_order, controller_state
    ):
        inner_state, _, rejections, _ = controller_state
        keep, tprev, tnext, jump, inner_state, result = self.controller.adapt_step_size(
            t0, t1, y0, y1_candidate, args, y_error, error_order, inner_state
        )
        dt = tnext - tprev
        rejections = jnp.where(keep, 0, rejections + 1)
        eps = jnp.finfo(jnp.result_type(dt)).eps
        # Only a rejected step: an accepted one that ends at t1 may propose a
        # tiny step, and the solve ends there anyway.
        collapsed = ~keep & (
            (dt <= COLLAPSE_ULPS * eps * jnp.abs(tprev))
            | (rejections >= MAX_REJECTIONS)
        )
        result = dfx.RESULTS.where(collapsed, dfx.RESULTS.dt_min_reached, result)
        state = (inner_state, dt, rejections, collapsed)
        return keep, tprev, tnext, jump, state, result


def next_step(controller_state) -> jnp.ndarray:
    """The step a [`ResumableController`][] proposed last (to pass as `dt0`)."""
    return controller_state[1]


def collapsed(controller_state) -> jnp.ndarray:
    """Whether a [`ResumableController`][] ended its solve because the step
    size collapsed."""
    return controller_state[3]


__all__ = [
    "COLLAPSE_ULPS",
    "MAX_REJECTIONS",
    "ResumableController",
    "collapsed",
    "next_step",
]
