"""Result codes: how a run ended, as an enumeration (the way `diffrax.RESULTS`
works). Every result carries one (`result.result`); its `ok` and `message`
are derived from it.

An item is a JAX value (it can live in a compiled loop's state); on the host
`bool(code == gf.RESULTS.successful)` compares two of them, and
[`result_name`][gradflow._result.codes.result_name] gives a code's name (how
files store it).
"""

import equinox as eqx
import numpy as np


class RESULTS(eqx.Enumeration):
    """How a run (a flow, a sweep member, an SGD run) ended.

    - `successful`: it reached `t1`, following the flow;
    - `max_steps_reached`: it ran out of solver steps (`max_steps`);
    - `nonfinite`: a value became infinite or NaN;
    - `dt_min_reached`: the step size fell below the solver's minimum;
    - `step_collapsed`: the step size collapsed (a step rejected with a size
      below the round-off of $t$, or 100 steps rejected in a row): the solve
      cannot go on, most often because the flow blows up in finite time (a
      loss unbounded below); the solve ends at once, keeping what it computed;
    - `implicit_solve_failed`: the inner linear or nonlinear solve of an
      implicit solver failed;
    - `loss_rose`: the saved loss rose, which the exact gradient flow never
      does: the solve lost the flow;
    - `interrupted`: stopped by Ctrl-C (the partial result is kept);
    - `solver_failed`: any other failure the solver reported;
    - `no_saves`: no save time was reached with a finite loss, so the result
      holds no point at all.
    """

    successful = ""
    max_steps_reached = "the maximum number of solver steps was reached"
    nonfinite = "a value became non-finite"
    dt_min_reached = "the step size fell below the solver's minimum"
    implicit_solve_failed = "the implicit solver's inner solve failed"
    loss_rose = "the saved loss rose: the solve lost the gradient flow"
    interrupted = "the run was interrupted"
    solver_failed = "the solver failed"
    step_collapsed = "the step size collapsed: the flow may blow up here"
    no_saves = "no save time was reached with a finite loss"


# Equinox's class of an item (it has no public name).
_Item = type(RESULTS.successful)


class _Code(_Item):  # pyright: ignore[reportGeneralTypeIssues]
    """An item of [`RESULTS`][gradflow.RESULTS] that prints as its name
    (`RESULTS.successful`), not as Equinox's `module.RESULTS<message>` (whose
    message is empty for `successful`)."""

    def __repr__(self) -> str:
        try:
            return f"RESULTS.{result_name(self)}"
        except (TypeError, ValueError):  # traced or batched: Equinox's own
            return super().__repr__()


# Equinox makes the items when the class is made; give them the class above.
# Equality, `RESULTS[code]` (the message) and files are unchanged: an item is
# still an `EnumerationItem` of `RESULTS` with the same value.
RESULTS._name_to_item = {  # pyright: ignore[reportAttributeAccessIssue]
    name: _Code(item._value, RESULTS)  # pyright: ignore[reportCallIssue]
    for name, item in RESULTS._name_to_item.items()
}


def result_name(code) -> str:
    """The name of a result code (`"successful"`, `"max_steps_reached"`, ...)."""
    value = int(np.asarray(code._value))
    for name, item in RESULTS._name_to_item.items():
        if int(np.asarray(item._value)) == value:
            return name
    raise ValueError(f"not a gradflow result code: {code!r}")


def result_from_name(name: str):
    """The result code of a name (how files store it)."""
    try:
        return RESULTS._name_to_item[name]
    except KeyError:
        raise ValueError(f"unknown result code {name!r}") from None


def is_successful(code) -> bool:
    """Whether a result code is `successful` (on the host)."""
    return bool(np.asarray(code == RESULTS.successful))


__all__ = ["RESULTS", "is_successful", "result_from_name", "result_name"]
