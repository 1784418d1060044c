"""What the explorer page shows, as JSON-able data: a run's loss curve,
stages, events, settings and its views at every frame (`views.py`, paced as
the animation's: `frame_times`), and for a sweep every member's and
the phase diagram's values.

Heat maps travel as bytes (each entry quantised to 255 levels of its colour
scale, base64), the rest as numbers of 5 significant digits: a page stays
small (the views of the paper's model show at most 16 tokens' attention).
"""

import base64
import math

import numpy as np

from ..._core.records import leaf_label
from ..._problem.functions import describe
from .._base import STAGE_COLORS
from .._timeline import frame_times, interpolate, stage_caption
from .._views import Bars, Heatmap, Scatter, View, views


DIGITS = 5
LEVELS = 255  # quantisation levels of a heat map; the byte 255 is "no value"


def rounded(values, digits: int = DIGITS):
    """`values` (array-like) as nested lists of floats with `digits`
    significant digits; NaN and infinities as `None`."""
    a = np.asarray(values, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        mag = np.where(a != 0, np.floor(np.log10(np.abs(a))), 0)
        scale = 10.0 ** (digits - 1 - mag)
        out = np.round(a * scale) / scale
    out = np.where(np.isfinite(a), out, np.nan)
    return _nan_to_none(out.tolist())


def _nan_to_none(x):
    if isinstance(x, list):
        return [_nan_to_none(v) for v in x]
    return None if isinstance(x, float) and not math.isfinite(x) else x


def colour_table(cmap: str, n: int = LEVELS) -> list[str]:
    """`n` colours of a matplotlib colour map, as `#rrggbb`."""
    from matplotlib import colormaps

    rgb = (colormaps[cmap](np.linspace(0, 1, n))[:, :3] * 255).round().astype(int)
    return ["#" + "".join(f"{int(v):02x}" for v in c) for c in rgb]


def _heatmap(view: Heatmap) -> dict:
    lo, hi = float(view.vmin), float(view.vmax)
    hi = hi if hi > lo else lo + 1.0
    x = np.asarray(view.values, dtype=float)
    if view.log:
        x, lo, hi = np.log(np.clip(x, lo, hi)), math.log(lo), math.log(hi)
    with np.errstate(invalid="ignore"):
        q = np.clip(np.round((x - lo) / (hi - lo) * (LEVELS - 1)), 0, LEVELS - 1)
    q = np.where(np.isfinite(x), q, LEVELS).astype(np.uint8)
    return {
        "type": "heatmap", "title": view.title, "rows": view.rows, "cols": view.cols,
        "xlabel": view.xlabel, "ylabel": view.ylabel, "vmin": view.vmin,
        "vmax": view.vmax, "log": view.log, "shape": list(q.shape),
        "data": base64.b64encode(q.tobytes()).decode("ascii"),
        "colors": colour_table(view.cmap),
    }  # fmt: skip


def _scatter(view: Scatter) -> dict:
    return {
        "type": "scatter", "title": view.title, "labels": view.labels,
        "colors": view.colors, "named": view.named, "captions": view.captions,
        "points": rounded(view.points, 4), "xlabel": view.xlabel,
        "ylabel": view.ylabel, "limit": view.limit,
    }  # fmt: skip


def _bars(view: Bars) -> dict:
    return {
        "type": "bars", "title": view.title, "labels": view.labels,
        "colors": view.colors, "values": rounded(view.values, 4),
        "ylim": list(view.ylim), "ylabel": view.ylabel, "log": view.log,
        "reference": view.reference,
    }  # fmt: skip


def view_data(view: View) -> dict:
    """One view as the page draws it."""
    if isinstance(view, Heatmap):
        return _heatmap(view)
    if isinstance(view, Scatter):
        return _scatter(view)
    return _bars(view)


def _stage_row(s) -> dict:
    return {
        "name": s.name, "cycle": s.cycle, "t_start": s.t_start,
        "t_end": s.t_end if math.isfinite(s.t_end) else None,
        "loss_start": s.loss_start,
        "loss_end": s.loss_end if math.isfinite(s.loss_end) else None,
        "tokens": ", ".join(s.token_labels), "complete": s.complete,
        "rank": f"{leaf_label(s.leaf)}: {s.rank}" if s.name == "rank" else "",
    }  # fmt: skip


def _event_row(e) -> dict:
    loss = e.loss if math.isfinite(e.loss) else None
    return {"name": e.name, "t": e.t, "loss": loss, "token": e.token,
            "located": e.located}  # fmt: skip


def run_data(result, frames: int, title: str) -> dict:
    """A run's page data: loss curve (positive times), stages, events, its
    views at `frames` times paced by stage, settings and stats."""
    ts = np.asarray(result.ts, dtype=float)
    loss = np.asarray(result.loss, dtype=float)
    keep = (ts > 0) & np.isfinite(loss)
    times = frame_times(result, frames)
    problem = result.problem
    return {
        "title": title,
        "problem": describe(problem),
        "ok": bool(result.ok),
        "message": result.message,
        "t": rounded(ts[keep], 7),
        "loss": rounded(loss[keep], 7),
        "stages": [_stage_row(s) for s in result.stages],
        "events": [_event_row(e) for e in result.events],
        "frames": {
            "t": rounded(times, 6),
            "loss": rounded(interpolate(ts, loss, times), 7),
            "caption": [stage_caption(result.stages, float(t)) for t in times],
        },
        "views": [view_data(v) for v in views(problem, result, times)],
        "settings": result.settings.to_dict(),
        "stats": result.stats.to_dict(),
    }


# -- an ensemble: SGD runs and the SDE around the flow -----------------------------

BAND = (0.1, 0.9)  # the SDE's band: these quantiles of its members at each time


def markdown_rows(text: str) -> dict:
    """A Markdown table (`EnsembleComparison.table()`) as `{"columns",
    "rows"}`: the page shows the very cells of `escapes.md`."""
    lines = [line.strip().strip("|") for line in text.strip().splitlines()]
    columns = [c.strip() for c in lines[0].split(" | ")]
    rows = [
        dict(zip(columns, (c.strip() for c in line.split(" | ")), strict=True))
        for line in lines[2:]
    ]
    return {"columns": columns, "rows": rows}


def ensemble_data(cmp, t_range: tuple[float, float]) -> dict:
    """An [`EnsembleComparison`][gradflow.EnsembleComparison]'s loss curves
    as the loss panel draws them (times in `t_range`, the flow's positive
    times): each SGD run's population loss, the SDE's band (the quantiles
    `BAND` of its members and their median; not every path), the modified
    flow's loss; and its crossing table."""
    import warnings

    lo, hi = t_range

    def within(ts):
        ts = np.asarray(ts, dtype=float)
        return (ts >= lo) & (ts <= hi)

    keep = within(cmp.sgd_ts)
    out = {
        "sgd": {
            "t": rounded(cmp.sgd_ts[keep], 7),
            "loss": [rounded(loss[keep], 5) for loss in cmp.sgd_loss],
        },
        "sde": None,
        "modified": None,
        "band": [round(100 * q) for q in BAND],
        "table": markdown_rows(cmp.table()),
    }
    if len(cmp.sde_loss):
        keep = within(cmp.sde_ts)
        with warnings.catch_warnings():
            # (a time where every member failed is a gap in the band)
            warnings.simplefilter("ignore", RuntimeWarning)
            q = np.nanquantile(cmp.sde_loss[:, keep], (BAND[0], 0.5, BAND[1]), axis=0)
        out["sde"] = {"t": rounded(cmp.sde_ts[keep], 7), "members": len(cmp.sde_loss),
                      "lo": rounded(q[0], 5), "median": rounded(q[1], 5),
                      "hi": rounded(q[2], 5)}  # fmt: skip
    if cmp.modified_loss is not None:
        keep = within(cmp.ts)
        out["modified"] = {"t": rounded(cmp.ts[keep], 7),
                           "loss": rounded(cmp.modified_loss[keep], 7)}  # fmt: skip
    return out


# -- sweeps ----------------------------------------------------------------------


def escape_time(traj) -> float:
    """The first located saddle escape (from the starting point's saddle)."""
    for e in traj.events:
        if e.name == "saddle_escape":
            return float(e.t)
    return math.nan


def plateau_length(traj) -> float:
    """The length of the first complete plateau after the start (the first
    saddle reached along the flow)."""
    for s in traj.stages:
        if s.name == "plateau" and s.t_start > 0 and s.complete:
            return float(s.t_end - s.t_start)
    return math.nan


def first_stage_start(name: str):
    def value(traj) -> float:
        return next((float(s.t_start) for s in traj.stages if s.name == name), math.nan)

    return value


PHASE_VALUES = {
    "escape time (first saddle escape)": escape_time,
    "plateau length (first plateau after the start)": plateau_length,
    "start of the first focus": first_stage_start("focus"),
    "start of the first new direction": first_stage_start("new_direction"),
    "final loss": lambda traj: float(traj.loss[-1]) if len(traj) else math.nan,
}


def _axes(sw) -> list[tuple[str, list]]:
    """The sweep's axes with more than one value, each member's value: the
    problem axis by its first label where it has one (`delta`)."""
    out = []
    if sw.labels:
        name = next(iter(sw.labels))
        out.append((name, [m.labels[name] for m in sw.members]))
    else:
        out.append(("problem", [m.problem for m in sw.members]))
    for name in ("init_scale", "seed", "start"):
        out.append((name, [getattr(m, name) for m in sw.members]))
    return [(n, v) for n, v in out if None not in v and len(set(v)) > 1]


def phase_data(sw) -> dict:
    """The phase diagram: each value over the grid of the swept axes (x: the
    first axis, y: the others together), one cell per member."""
    axes = _axes(sw)
    n = len(sw)
    xs = axes[0][1] if axes else [0] * n
    ys = [", ".join(f"{name} {v[i]:.4g}" if isinstance(v[i], float) else f"{name} {v[i]}"
                    for name, v in axes[1:]) or "all" for i in range(n)]  # fmt: skip
    values = {}
    for name, fn in PHASE_VALUES.items():
        got = [fn(t) for t in sw]
        if any(math.isfinite(v) for v in got):
            values[name] = rounded(got, 6)
    return {
        "x_name": axes[0][0] if axes else "member",
        "y_name": ", ".join(name for name, _ in axes[1:]) or "",
        "x": [float(x) if isinstance(x, (int, float)) else str(x) for x in xs],
        "y": ys,
        "values": values,
        "colors": colour_table("viridis"),
        "members": [
            {"index": m.index, "labels": m.labels, "init_scale": m.init_scale,
             "seed": m.seed, "ok": bool(t.ok)}
            for m, t in zip(sw.members, sw, strict=True)
        ],
    }  # fmt: skip


def sweep_data(sw, frames: int, title: str) -> dict:
    """A sweep's page data: the phase diagram and every member's run data."""
    runs = []
    for m, traj in zip(sw.members, sw, strict=True):
        label = ", ".join(f"{k} = {v:g}" if isinstance(v, float) else f"{k} = {v}"
                          for k, v in m.labels.items())  # fmt: skip
        start = f"seed {m.seed}" if m.seed is not None else f"start {m.start}"
        what = f"member {m.index}: {label + ', ' if label else ''}{start}"
        runs.append(run_data(traj, frames, f"{title} · {what}") if len(traj) >= 2
                    else None)  # fmt: skip
    return {"phase": phase_data(sw), "members": runs,
            "settings": sw.settings.to_dict(), "stats": sw.stats.to_dict()}  # fmt: skip


STAGE_COLOURS = dict(STAGE_COLORS)

__all__ = [
    "BAND",
    "PHASE_VALUES",
    "STAGE_COLOURS",
    "ensemble_data",
    "markdown_rows",
    "rounded",
    "run_data",
    "sweep_data",
]
