r"""The stage record and the detector's thresholds: the two types every stage
consumer shares (the detector, `integrate`, SGD runs, sweeps, the CSV writer,
the figures, `compare` and the file format). Definitions: `docs/stages.md`."""

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

import equinox as eqx


STAGE_KINDS = ("condensation", "plateau", "focus", "dilution", "new_direction")
"""The names a [`gradflow.Stage`][] can have (`docs/stages.md` defines each)."""


@dataclasses.dataclass(frozen=True)
class Stage:
    r"""One stage of a trajectory (a frozen record; see `docs/stages.md`).

    **Fields:**

    - `name`: one of `STAGE_KINDS`: `"condensation"`, `"plateau"`, `"focus"`,
      `"dilution"`, `"new_direction"`.
    - `cycle`: the cycle it belongs to (1 for the first; each new direction
      that opens while no other is opening starts the next).
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

    def __post_init__(self):
        if self.name not in STAGE_KINDS:
            raise ValueError(
                f"Stage.name must be one of {STAGE_KINDS}, got {self.name!r}"
            )
        set_ = object.__setattr__
        set_(self, "cycle", int(self.cycle))
        for f in ("t_start", "t_end", "loss_start", "loss_end"):
            set_(self, f, float(getattr(self, f)))
        for f in ("mass_start", "mass_end", "entropy_start", "entropy_end"):
            v = getattr(self, f)
            set_(self, f, None if v is None else float(v))
        for f in ("ratio_start", "ratio_end"):
            v = getattr(self, f)
            set_(self, f, None if v is None else float(v))
        set_(self, "tokens", tuple(int(k) for k in self.tokens))
        set_(self, "token_labels", tuple(str(k) for k in self.token_labels))
        set_(self, "complete", bool(self.complete))
        if self.sv_index is not None:
            set_(self, "sv_index", int(self.sv_index))
        if self.direction is not None:
            set_(self, "direction", tuple(float(x) for x in self.direction))
        if len(self.token_labels) != len(self.tokens):
            raise ValueError(
                f"Stage.token_labels must have one label per token, got tokens = "
                f"{self.tokens} and token_labels = {self.token_labels}"
            )

    @property
    def duration(self) -> float:
        """`t_end - t_start`."""
        return self.t_end - self.t_start

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able dict (lists for the tuples); `Stage.from_dict` inverts it."""
        out = dataclasses.asdict(self)
        out["tokens"] = list(self.tokens)
        out["token_labels"] = list(self.token_labels)
        if self.direction is not None:
            out["direction"] = list(self.direction)
        return out

    # the file format calls `as_dict` on records
    as_dict = to_dict

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


def _positive(name: str, value) -> None:
    if isinstance(value, bool) or not (
        isinstance(value, (int, float)) and math.isfinite(value) and value > 0
    ):
        raise ValueError(
            f"StageThresholds.{name} must be finite and > 0, got {value!r}"
        )


class StageThresholds(eqx.Module):
    r"""Thresholds of the stage detector, the one place for their defaults
    (shared by `integrate`, [`gradflow.detect_stages`][], SGD runs and sweeps).
    Each is justified by measurements across chain families in
    `docs/stages.md`.

    **Arguments:**

    - `rate_window`: every rate is a secant over this many e-folds of $t$
      (0.03: about the spacing of the default 400 log-spaced saves).
    - `escape_speed`, `entry_speed`: a plateau (saddle) is left when the
      speed $s = -\frac{dL}{d\log t}/(\log d - H_{\text{cond}})$ rises above
      `escape_speed` and entered when it falls below `entry_speed`
      (hysteresis: `entry_speed < escape_speed`).
    - `focus_rate`: a focus starts when the attention entropy falls faster
      than `focus_rate` (per unit $\log t$, relative to $H(\pi)$).
    - `min_entropy_drop`: a focus is recorded only if the entropy fell by at
      least this fraction of $H(\pi)$; a dilution only if it rose back by
      at least this fraction.
    - `min_mass_change`: ... and only if the attention mass of its tokens
      rose (fell) by at least this much.
    - `token_share`: the focus tokens are the fewest tokens, by gain, that
      carry this share of the attention mass gained in the focus.
    - `direction_rate`: a new direction opens while $\sigma_{k+1}/\sigma_1$
      grows faster than $t^{\text{direction\_rate}}$.
    - `direction_low`, `direction_open`: a new direction is an opening of
      $\sigma_{k+1}/\sigma_1$ from below `direction_low` to above
      `direction_open` (from small to order one).
    - `direction_ratio`: read only by the solve-time event machine that
      `integrate` still uses (a direction starts only while the ratio is below
      it); the detector on saved curves does not use it.
    """

    rate_window: float = 0.03
    escape_speed: float = 1e-2
    entry_speed: float = 5e-3
    focus_rate: float = 5e-2
    min_entropy_drop: float = 1e-2
    min_mass_change: float = 0.02
    token_share: float = 0.8
    direction_rate: float = 1.0
    direction_low: float = 0.05
    direction_open: float = 0.3
    direction_ratio: float = 0.1

    def __check_init__(self):
        for f in dataclasses.fields(self):
            _positive(f.name, getattr(self, f.name))
        if self.entry_speed >= self.escape_speed:
            raise ValueError(
                "StageThresholds.entry_speed must be < escape_speed (hysteresis), got "
                f"entry_speed = {self.entry_speed} and "
                f"escape_speed = {self.escape_speed}"
            )
        if self.token_share > 1:
            raise ValueError(
                f"StageThresholds.token_share must be <= 1, got {self.token_share!r}"
            )
        if self.direction_open <= self.direction_low:
            raise ValueError(
                "StageThresholds.direction_open must be > direction_low, got "
                f"direction_open = {self.direction_open} and "
                f"direction_low = {self.direction_low}"
            )


__all__ = ["STAGE_KINDS", "Stage", "StageThresholds"]
