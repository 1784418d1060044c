"""A result's stages and events as `pandas.DataFrame`s: one row per record,
one column per field of [`gradflow.Stage`][] (and `duration`) or
[`gradflow.EventRecord`][]; for a sweep with each member's index, problem,
labels, init_scale, seed and start in front."""

import dataclasses

from .._core.records import EventRecord, Stage


STAGE_COLUMNS = (*(f.name for f in dataclasses.fields(Stage)), "duration")
EVENT_COLUMNS = tuple(f.name for f in dataclasses.fields(EventRecord))
# Integer fields that may be unset: pandas' nullable integers (not floats
# with NaN).
_OPTIONAL_INTEGERS = ("token", "sv_index", "rank")


def stage_rows(stages) -> list[dict]:
    return [{**dataclasses.asdict(s), "duration": s.duration} for s in stages]


def event_rows(events) -> list[dict]:
    return [dataclasses.asdict(e) for e in events]


def frame(rows: list[dict], columns):
    """A `DataFrame` of `rows` with `columns` (also when there is no row)."""
    import pandas as pd

    table = pd.DataFrame(rows, columns=list(columns))
    for name in _OPTIONAL_INTEGERS:
        if name in table:
            table[name] = table[name].astype("Int64")
    return table


def stages_frame(stages):
    """The stages, one row per stage (the columns of `gradflow.Stage`, tuples
    for `tokens` and `direction`, and `duration`)."""
    return frame(stage_rows(stages), STAGE_COLUMNS)


def events_frame(events):
    """The events, one row per event."""
    return frame(event_rows(events), EVENT_COLUMNS)


def members_frame(members, results, rows_of, columns):
    """One row per member and record (`rows_of(result)`), with the member's
    index, problem, labels, init_scale, seed and start in front."""
    labels = list(dict.fromkeys(k for m in members for k in m.labels))
    front = ["member", "problem", *labels, "init_scale", "seed", "start"]
    rows = []
    for m, result in zip(members, results, strict=True):
        head = {
            "member": m.index, "problem": m.problem, **m.labels,
            "init_scale": m.init_scale, "seed": m.seed, "start": m.start,
        }  # fmt: skip
        rows += [{**head, **r} for r in rows_of(result)]
    return frame(rows, [*front, *columns])


__all__ = [
    "EVENT_COLUMNS",
    "STAGE_COLUMNS",
    "event_rows",
    "events_frame",
    "members_frame",
    "stage_rows",
    "stages_frame",
]
