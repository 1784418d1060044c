r"""Typed records of what happened along a run: one kind of record (a frozen
dataclass with `to_dict` and `from_dict`), used by the solve, the stage
detectors, sweeps, the file format, the CSV writers and the plots.

- [`gradflow.EventRecord`][]: an instant (a condition crossing zero, located
  during the solve, or a stage boundary found after it);
- [`gradflow.Stage`][]: an interval of a trajectory (`docs/stages.md`);
- `gradflow.Member` (in the sweep's result) says which member of a sweep a
  trajectory is.
"""

import dataclasses
import math
import re
from collections.abc import Mapping
from typing import Any, ClassVar, TypeVar


_R = TypeVar("_R", bound="Record")


@dataclasses.dataclass(frozen=True)
class Record:
    """The base of every record: frozen, typed fields; `to_dict` gives a
    JSON-able dict (lists for tuples) and `from_dict` reads it back, also
    from a dict that lacks fields with defaults or holds unknown keys (files
    written by older versions) or that names a field by an older name."""

    # The keys of older files that name a field differently: old -> field.
    _renamed: ClassVar[Mapping[str, str]] = {}

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able dict of every field (tuples as lists)."""
        out = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            out[f.name] = list(value) if isinstance(value, tuple) else value
        return out

    @classmethod
    def from_dict(cls: type[_R], record: Mapping[str, Any]) -> _R:
        """A record from `to_dict`'s output (unknown keys are dropped; an
        older name of a field is read as the field unless both are there)."""
        if isinstance(record, cls):
            return record
        values = dict(record)
        for old, new in cls._renamed.items():
            if old in values and new not in values:
                values[new] = values.pop(old)
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in values.items() if k in names})


def _set(record, name: str, value) -> None:
    object.__setattr__(record, name, value)


def _optional(convert, value):
    return None if value is None else convert(value)


@dataclasses.dataclass(frozen=True)
class EventRecord(Record):
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

    def __post_init__(self):
        _set(self, "name", str(self.name))
        _set(self, "t", float(self.t))
        _set(self, "loss", math.nan if self.loss is None else float(self.loss))
        _set(self, "token", _optional(int, self.token))
        _set(self, "sv_index", _optional(int, self.sv_index))
        _set(self, "located", bool(self.located))

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able dict (for files and tables): `token` and `sv_index` only
        where they are set."""
        out: dict[str, Any] = {"name": self.name, "t": self.t, "loss": self.loss}
        if self.token is not None:
            out["token"] = self.token
        if self.sv_index is not None:
            out["sv_index"] = self.sv_index
        out["located"] = self.located
        return out


STAGE_KINDS = (
    "condensation",
    "plateau",
    "focus",
    "dilution",
    "new_direction",
    "drop",
    "rank",
)
"""The names a [`gradflow.Stage`][] can have (`docs/stages.md` defines each):
`plateau`, `drop` and `rank` are found for every problem; `condensation`,
`focus`, `dilution` and `new_direction` are the paper's model's own."""


@dataclasses.dataclass(frozen=True)
class Stage(Record):
    r"""One stage of a trajectory (a frozen record; see `docs/stages.md`).

    **Fields:**

    - `name`: one of `STAGE_KINDS`. For every problem: `"plateau"` (a saddle:
      the loss falls slowly against its scale), `"drop"` (from one plateau's
      escape to the next plateau's entry) and `"rank"` (an instant: the number
      of singular values of a matrix parameter above `rank_tol` times its
      largest changed). The paper's model's own: `"condensation"`,
      `"focus"`, `"dilution"`, `"new_direction"`.
    - `cycle`: the cycle it belongs to (1 for the first; for the paper's model
      each new direction that opens while no other is opening starts the
      next; for the generic stages, the plateau it starts from).
    - `t_start`, `t_end`, `loss_start`, `loss_end`: its boundaries (times
      interpolated between save points) and the loss there.
    - `tokens`, `token_labels`: the tokens involved (`tuple[int, ...]`,
      `tuple[str, ...]`): for a focus the tokens the attention mass gathered
      on, largest gain first; for a dilution the tokens of its focus; for a
      new direction the two tokens its right singular vector pulls furthest
      apart (its largest entry, then its most negative one).
    - `complete`: `False` if the stage was still open at the last save.
    - `mass_start`, `mass_end`: for focus and dilution, the attention mass of
      `tokens` together at both ends (`None` otherwise).
    - `entropy_start`, `entropy_end`: the $\pi$-weighted attention entropy at
      both ends (focus and dilution; `None` otherwise).
    - `sv_index`: for a new direction, the 0-based index $k$ of the singular
      value $\sigma_{k+1}$ of $W_0$ that opens (1 for $\sigma_2$).
    - `ratio_start`, `ratio_end`: $\sigma_{k+1}/\sigma_1$ at both ends.
    - `direction`: that right singular vector at `t_end`, a tuple of `d`
      floats (shape `(d,)`), signed so its largest-magnitude entry is positive.
    - `leaf`, `rank`: for a `rank` record, the parameter (its path in the
      parameter PyTree, e.g. `"[0]"` or `".W0"`) and its new rank.
    """

    name: str
    cycle: int
    t_start: float
    t_end: float
    loss_start: float
    loss_end: float
    tokens: tuple[int, ...] = ()
    token_labels: tuple[str, ...] = ()
    complete: bool = True
    mass_start: float | None = None
    mass_end: float | None = None
    entropy_start: float | None = None
    entropy_end: float | None = None
    sv_index: int | None = None
    ratio_start: float | None = None
    ratio_end: float | None = None
    direction: tuple[float, ...] | None = None
    leaf: str | None = None
    rank: int | None = None

    def __post_init__(self):
        if self.name not in STAGE_KINDS:
            raise ValueError(
                f"Stage.name must be one of {STAGE_KINDS}, got {self.name!r}"
            )
        _set(self, "cycle", int(self.cycle))
        for f in ("t_start", "t_end", "loss_start", "loss_end"):
            _set(self, f, float(getattr(self, f)))
        for f in (
            "mass_start",
            "mass_end",
            "entropy_start",
            "entropy_end",
            "ratio_start",
            "ratio_end",
        ):
            _set(self, f, _optional(float, getattr(self, f)))
        _set(self, "tokens", tuple(int(k) for k in self.tokens))
        _set(self, "token_labels", tuple(str(k) for k in self.token_labels))
        _set(self, "complete", bool(self.complete))
        _set(self, "sv_index", _optional(int, self.sv_index))
        _set(self, "rank", _optional(int, self.rank))
        _set(self, "leaf", _optional(str, self.leaf))
        if self.direction is not None:
            _set(self, "direction", tuple(float(x) for x in self.direction))
        if len(self.token_labels) != len(self.tokens):
            raise ValueError(
                f"Stage.token_labels must have one label per token, got tokens = "
                f"{self.tokens} and token_labels = {self.token_labels}"
            )

    @property
    def duration(self) -> float:
        """`t_end - t_start`."""
        return self.t_end - self.t_start

    # the file format of 0.1.0 called `as_dict` on records
    def as_dict(self) -> dict[str, Any]:
        """The same as `to_dict`."""
        return self.to_dict()

    @classmethod
    def from_dict(cls, record: Mapping[str, Any]) -> "Stage":
        """A `Stage` from a dict: one written by `to_dict`, or a stage dict of a
        trajectory file written before stages were typed (unknown keys, such as
        the old private `counted`, are dropped)."""
        if isinstance(record, Stage):
            return record
        names = {f.name for f in dataclasses.fields(cls)}
        kwargs = {k: v for k, v in dict(record).items() if k in names}
        for f in ("t_end", "loss_end"):
            if kwargs.get(f) is None:
                kwargs[f] = math.nan
        kwargs["tokens"] = tuple(kwargs.get("tokens") or ())
        kwargs["token_labels"] = tuple(
            kwargs.get("token_labels") or [str(k) for k in kwargs["tokens"]]
        )
        return cls(**kwargs)


_EVENT_NAMES = {
    "plateau": ("saddle_entry", "saddle_escape"),
    "focus": ("focus_start", "focus_end"),
    "new_direction": ("new_direction_start", "new_direction_end"),
}
SADDLE_EVENTS = ("saddle_escape", "saddle_entry")
"""The events located during every solve with stages: a plateau's escape and
entry."""
# The names of the built-in events (stage boundaries); user events may not
# take them.
BUILTIN_EVENTS = tuple(n for pair in _EVENT_NAMES.values() for n in pair)


def stage_events(stages) -> tuple[EventRecord, ...]:
    """The boundaries of `stages` as [`gradflow.EventRecord`][]s (with
    `located=False`: their times are interpolated between saves), sorted by
    time: a plateau's start and end are `saddle_entry` and `saddle_escape`, a
    focus's `focus_start` and `focus_end` (with `token`, its first token), a
    new direction's `new_direction_start` and `new_direction_end` (with
    `sv_index`). An end still open at the last save is no event; the other
    kinds of stage (`condensation`, `dilution`, `drop`, `rank`) have none."""
    out = []
    for s in stages:
        names = _EVENT_NAMES.get(s.name)
        if names is None:
            continue
        extra: dict[str, Any] = {"located": False}
        if s.name == "focus" and s.tokens:
            extra["token"] = s.tokens[0]
        if s.name == "new_direction":
            extra["sv_index"] = s.sv_index
        out.append(EventRecord(names[0], s.t_start, s.loss_start, **extra))
        if s.complete:
            out.append(EventRecord(names[1], s.t_end, s.loss_end, **extra))
    out.sort(key=lambda e: e.t)
    return tuple(out)


def leaf_label(path: str | None) -> str:
    """A parameter leaf's name for people, from its path
    (`jax.tree_util.keystr`, as `Stage.leaf` and the observables hold it):
    a field by its name (`".W0"` -> `W0`), an index or key of the parameter
    PyTree after `params` (`"[0]"` -> `params[0]`, `"['a']"` -> `params['a']`),
    a single array `params`. A path stored as a dict key (a file read without
    its problem's class: `"['[0]']"`) is read as the path it names."""
    key: str = path or ""
    inner = re.fullmatch(r"\['(\[.*\]|\..*)'\](.*)", key)
    if inner:  # `['[0]']`: the key is itself a path
        key = inner.group(1) + inner.group(2)
    if key.startswith("."):
        return key[1:]
    return "params" + key


def stage_table(stages) -> str:
    """Stage records as a plain-text table, one row per stage: its name,
    cycle, start and end (times and losses), and where any stage has them
    the tokens involved (their labels) or the leaf and rank of a `rank`
    record; a stage still open at the last save is flagged. Losses are
    printed with 5 decimals, or with 6 significant digits where one is
    below 1e-3 (a loss that falls to 0)."""
    stages = tuple(stages)
    losses = [abs(x) for s in stages for x in (s.loss_start, s.loss_end)]
    fixed = all(x >= 1e-3 or x == 0 for x in losses if math.isfinite(x))
    fmt = ">10.5f" if fixed else ">12.6g"
    width = 10 if fixed else 12
    tokens = any(s.tokens for s in stages)
    ranks = any(s.name == "rank" for s in stages)
    extra = "  tokens" if tokens else ("  rank" if ranks else "")
    lines = [
        f"{'stage':<14} {'cycle':>5} {'t_start':>10} {'t_end':>10} "
        f"{'loss_start':>{width}} {'loss_end':>{width}}{extra}"
    ]
    for s in stages:
        if s.name == "rank":
            details = f"{leaf_label(s.leaf)}: {s.rank}"
        else:
            details = ",".join(s.token_labels)
        flag = "" if s.complete else "  (still open at t1)"
        lines.append(
            f"{s.name:<14} {s.cycle:>5} {s.t_start:>10.4g} {s.t_end:>10.4g} "
            f"{s.loss_start:{fmt}} {s.loss_end:{fmt}}  {details}{flag}"
        )
    return "\n".join(lines)


__all__ = [
    "BUILTIN_EVENTS",
    "SADDLE_EVENTS",
    "STAGE_KINDS",
    "EventRecord",
    "Record",
    "Stage",
    "leaf_label",
    "stage_events",
    "stage_table",
]
