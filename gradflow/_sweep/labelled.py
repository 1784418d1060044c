"""A sweep as labelled arrays (`docs/analysis.md`): its members on their
swept axes, the problem axis `problem` (or its label, such as `delta`, when
the sweep has one label of distinct values; the problem index then a
coordinate on it), `init_scale`, `seed` (or `start` for given starting
points); axes of one value are kept as scalar coordinates. Members that do
not share the sweep's save times (not a prefix of them) go on a `member`
dimension with each member's own time coordinate `t(member, save)` instead.

The Dataset holds the sweep file's metadata and, in `gradflow_layout`,
where each member's and problem's arrays are, so that its netCDF file reads
back as the sweep (`gradflow/_result/labelled.py`).
"""

import math
from typing import Any

import numpy as np

from .._result.labelled import (
    ALSO,
    KEY,
    LAYOUT,
    META,
    OWN,
    PART,
    TIME,
    Namer,
    array_variables,
    dataset_attrs,
    import_xarray,
    problem_variables,
    to_json,
)
from .._result.trajectory import Trajectory
from .parts import sweep_parts


PROBLEM, MEMBER, SAVE = "problem", "member", "save"


def _axes(sw) -> list[str]:
    """The sweep's axes: the problem, then those of init_scale, seed and start
    that every member has."""
    return [PROBLEM] + [
        a
        for a in ("init_scale", "seed", "start")
        if sw.members and all(getattr(m, a) is not None for m in sw.members)
    ]


def _values(sw, axis: str) -> np.ndarray:
    return np.asarray([getattr(m, axis) for m in sw.members])


def _is_grid(sw, axes: list[str]) -> bool:
    """Whether the members fill the grid of the axes' values once each."""
    values = [_values(sw, a) for a in axes]
    combos = set(zip(*(v.tolist() for v in values), strict=True))
    return len(combos) == len(sw) == math.prod(len(np.unique(v)) for v in values)


def _members(arrays: dict, n: int) -> list[dict]:
    """Each member's arrays (the file's `m{i}/...`, without the prefix)."""
    out: list[dict] = [{} for _ in range(n)]
    for key, value in arrays.items():
        if key.startswith("m") and "/" in key:
            head, name = key.split("/", 1)
            if head[1:].isdigit():
                out[int(head[1:])][name] = value
    return out


def _stack(parts: list[dict], T: int) -> dict[str, np.ndarray]:
    """The members' arrays stacked on a leading member axis, each padded to
    `T` saves (NaN, or 0 for integers) and filled where a member lacks it
    (a member that failed before its observables were computed)."""
    out = {}
    for key in dict.fromkeys(k for p in parts for k in p):
        like = next(p[key] for p in parts if key in p)
        fill = np.nan if like.dtype.kind in "fc" else 0
        stacked = np.full((len(parts), T, *like.shape[1:]), fill, like.dtype)
        for i, p in enumerate(parts):
            if key not in p:
                continue
            if p[key].shape[1:] != like.shape[1:]:
                raise ValueError(
                    f"the sweep's members have different shapes of {key!r} "
                    f"({like.shape[1:]} and {p[key].shape[1:]}): convert each "
                    "member alone (sw[i].to_xarray())"
                )
            stacked[i, : p[key].shape[0]] = p[key]
        out[key] = stacked
    return out


def _problem_arrays(arrays: dict, n: int) -> dict[str, np.ndarray]:
    """The problems' arrays (`problem{c}/...`) stacked on a leading problem
    axis, by their path in a problem's file."""
    parts: list[dict] = [{} for _ in range(n)]
    for key, value in arrays.items():
        head, _, name = key.partition("/")
        if head.startswith("problem") and head[7:].isdigit():
            parts[int(head[7:])][name] = value
    out = {}
    for key in dict.fromkeys(k for p in parts for k in p):
        if (
            not all(key in p for p in parts)
            or len({np.shape(p[key]) for p in parts}) != 1
        ):
            raise ValueError(
                f"the sweep's problems have different arrays {key!r}: convert "
                "each member alone (sw[i].to_xarray())"
            )
        out[key] = np.stack([p[key] for p in parts])
    return out


def sweep_dataset(sw):
    """A sweep as an `xarray.Dataset`: its members on their swept axes
    (module docstring)."""
    xr = import_xarray()
    meta, arrays = sweep_parts(sw)
    axes, n, ts = _axes(sw), len(sw), np.asarray(sw.ts)
    shared = all(np.array_equal(t.ts, ts[: len(t)]) for t in sw)
    grid = shared and _is_grid(sw, axes)
    T = len(ts) if shared else max((len(t) for t in sw), default=0)
    stacked = _stack(_members(arrays, n), T)
    namer = Namer(sw.problems[0] if sw.problems else None)
    time = (TIME,) if shared else (SAVE,)
    namer.sizes[time[0]] = T
    own = Trajectory.own_arrays
    variables = array_variables(namer, stacked, (MEMBER,), time, own)
    for _, _, attrs in variables.values():
        attrs[PART] = MEMBER
    member_coords: dict[str, Any] = {}
    t_dims, t_values, t_attrs = variables.pop("ts")
    if shared:  # the sweep's times, each member's a prefix of them
        member_coords[TIME] = (TIME, ts, {**t_attrs, ALSO: "ts"})
    else:  # each member's own save times
        member_coords[TIME] = (t_dims, t_values, t_attrs)
        member_coords["sweep_t"] = ("sweep_t", ts, {KEY: "ts", "long_name": OWN["ts"]})
    if shared and np.array_equal(stacked["loss"], sw.loss, equal_nan=True):
        variables["loss"][2][ALSO] = "loss"  # the sweep's losses: the members'
    else:
        sweep_time = TIME if shared else "sweep_t"
        variables["sweep_loss"] = ((MEMBER, sweep_time), np.asarray(sw.loss),
                                   {ALSO: "loss"})  # fmt: skip
    for a in axes:
        name = a if grid or a != PROBLEM else f"{MEMBER}_{PROBLEM}"
        member_coords[name] = (MEMBER, _values(sw, a))
    variables["member_index"] = (MEMBER, np.arange(n), {})
    variables["num_saves"] = (MEMBER, np.array([len(t) for t in sw]), {})
    variables["ok"] = (MEMBER, np.asarray(sw.ok), {})
    ds = xr.Dataset(variables, coords=member_coords)
    if grid:
        ds = ds.set_index({MEMBER: axes}).unstack(MEMBER)
    problems = problem_variables(
        namer, _problem_arrays(arrays, len(sw.problems)), (PROBLEM,)
    )
    for _, _, attrs in problems.values():  # (each problem's, under its prefix)
        attrs[KEY], attrs[PART] = attrs[KEY].removeprefix("problem/"), PROBLEM
    coords: dict[str, Any] = {PROBLEM: np.arange(len(sw.problems))}
    coords.update({k: (PROBLEM, np.asarray(v)) for k, v in sw.labels.items()})
    coords.update(namer.coords())
    ds = ds.assign_coords(coords).assign(problems)
    if grid:
        ds = _tidy(ds, sw, axes)
    ds[META] = ((), to_json(meta), {"long_name": "the .npz file's metadata"})
    ds[LAYOUT] = ((), to_json(_layout(ds, sw, axes, grid)),
                  {"long_name": "where each member's arrays are"})  # fmt: skip
    ds.attrs.update(dataset_attrs(meta, sw.problems[0] if sw.problems else None))
    ds.attrs.update(gradflow_layout="grid" if grid else MEMBER, num_members=n)
    return ds


def _tidy(ds, sw, axes: list[str]):
    """Axes of one value as scalar coordinates; the problem axis named after
    its label where the sweep has one label of distinct values (`delta`);
    the swept axes first, then time and each array's own dimensions."""
    ds = ds.squeeze([a for a in axes if ds.sizes[a] == 1], drop=False)
    first = PROBLEM
    if len(sw.labels) == 1 and PROBLEM in ds.dims:
        ((label, values),) = sw.labels.items()
        if len(set(values)) == len(values):
            ds, first = ds.swap_dims({PROBLEM: label}), label
    order = [a for a in (first, *axes[1:], TIME) if a in ds.dims]
    return ds.transpose(*order, ...)


def _position(ds, axis: str, value) -> tuple[str, int] | None:
    """`(dim, position)` of `value` on the dimension that `axis` is (or is a
    coordinate of), `None` where that axis is not a dimension."""
    if axis not in ds.coords or ds[axis].ndim != 1:
        return None
    where = np.flatnonzero(ds[axis].values == value)
    return ds[axis].dims[0], int(where[0])


def _layout(ds, sw, axes: list[str], grid: bool) -> dict:
    """Where each member's arrays are (its prefix in the file, its positions
    in the Dataset, its number of saves) and each problem's."""
    members = []
    for i, (m, traj) in enumerate(zip(sw.members, sw, strict=True)):
        at = {MEMBER: i}
        if grid:
            found = [_position(ds, a, getattr(m, a)) for a in axes]
            at = dict(f for f in found if f is not None)
        members.append({"prefix": f"m{i}/", "at": at, "num_saves": len(traj)})
    problems = []
    for c in range(len(sw.problems)):
        found = _position(ds, PROBLEM, c)
        problems.append(
            {"prefix": f"problem{c}/", "at": dict([found] if found else [])}
        )
    member_dims = sorted({d for m in members for d in m["at"]})
    return {"members": members, "problems": problems, "member_dims": member_dims}


__all__ = ["sweep_dataset"]
