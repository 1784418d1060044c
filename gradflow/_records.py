"""Typed records of what happened along a solve (one schema each, used by the
solve, the file format, the CSV writers and the plots)."""

import math
from typing import Any

import equinox as eqx


class EventRecord(eqx.Module):
    r"""One event: a condition that crossed zero, located during the solve by
    bisection on the solver's dense output (or a stage boundary found after the
    solve).

    **Fields:**

    - `name`: the event's name (`"saddle_escape"`, `"saddle_entry"`, a user
      [`gradflow.Event`][]'s name, or a stage boundary such as `"focus_start"`);
    - `t`: its time; `loss`: the population loss there;
    - `token`: the token involved, if any (e.g. the focus token), else `None`;
    - `sv_index`: for a new direction's boundary, the index $k$ of the singular
      value $\sigma_{k+1}$ of $W_0$ that opens, else `None`;
    - `located`: `True` when the time was root-found on the solver's dense
      output during the solve, `False` when interpolated between saves.
    """

    name: str
    t: float
    loss: float
    token: int | None = None
    sv_index: int | None = None
    located: bool = True

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able dict (for files and tables)."""
        out: dict[str, Any] = {"name": self.name, "t": self.t, "loss": self.loss}
        if self.token is not None:
            out["token"] = self.token
        if self.sv_index is not None:
            out["sv_index"] = self.sv_index
        out["located"] = self.located
        return out

    @classmethod
    def from_dict(cls, record: dict[str, Any]) -> "EventRecord":
        """Reads [`gradflow.EventRecord.to_dict`][]'s output, and the event dicts of
        files written before records were typed."""
        token = record.get("token")
        sv_index = record.get("sv_index")
        loss = record.get("loss", math.nan)
        return cls(
            name=str(record["name"]),
            t=float(record["t"]),
            loss=math.nan if loss is None else float(loss),
            token=None if token is None else int(token),
            sv_index=None if sv_index is None else int(sv_index),
            located=bool(record.get("located", True)),
        )


__all__ = ["EventRecord"]
