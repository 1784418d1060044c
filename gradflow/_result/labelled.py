r"""Results as labelled arrays (`xarray.Dataset`) and netCDF files
(`docs/analysis.md`).

A [`gradflow.Trajectory`][] or [`gradflow.SGDRun`][] becomes a Dataset on a
time coordinate `t`: the loss and $|\nabla L|$, every parameter leaf and
every observable with named dimensions ([`gradflow.array_names`][]: for the
paper's model `token`, `width`, `query`, `key`, ... with the token labels of
a text), the problem's arrays, and as attributes the settings, the stats,
the problem and the gradflow version. A sweep's Dataset is made in
`gradflow/_sweep/labelled.py`.

Every variable keeps the name its array has in the `.npz` file (its
`gradflow_key` attribute) and the Dataset holds the file's metadata (the
variable `gradflow_meta`, JSON), so a Dataset written with xarray's own
`to_netcdf` reads back with [`gradflow.load`][] as the result it came from,
equal to the `.npz` file: `load_netcdf` rebuilds the file's metadata and
arrays and hands them to the reader registry's `build`, the code that reads
the `.npz` file. A Dataset of many results (a sweep) says in the variable
`gradflow_layout` where each member's and each problem's arrays are.
xarray is imported on first use (`pip install "gradflow[analysis]"`).
"""

import dataclasses
import functools
import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from .._core.files import json_default
from .._problem.functions import describe
from .files import build, file_parts, register_reader


# The attributes of a variable: the name of its array in the `.npz` file;
# whose array it is in a file of many results ("member": each member's, at
# the positions `gradflow_layout` gives, "problem": each problem's); and the
# array of the whole file it also gives, its members stacked (a sweep's
# `loss`).
KEY, PART, ALSO = "gradflow_key", "gradflow_part", "gradflow_also"
# The variables holding the file's metadata and the layout of many results
# (variables, not attributes: an HDF5 attribute holds at most 64 KiB).
META, LAYOUT = "gradflow_meta", "gradflow_layout"
TIME = "t"
# The arrays every result holds beyond the parameters, with a description.
OWN = {
    "ts": "gradient-flow time t (SGD: t = lr * step)",
    "loss": "population loss L",
    "population_loss": "population loss L of each saved iterate",
    "grad_norm": "norm of the population loss's gradient |grad L|",
    "train_loss": "mean mini-batch loss of the steps since the previous save",
    "steps": "SGD step",
}
INSTALL = 'pip install "gradflow[analysis]"'

Dims = tuple[str, ...]


def import_xarray():
    """xarray, or a one-line error saying how to install it."""
    try:
        import xarray
    except ImportError:
        raise ModuleNotFoundError(
            f"labelled arrays and netCDF files need xarray: {INSTALL}"
        ) from None
    return xarray


def check_netcdf() -> None:
    """A one-line `ModuleNotFoundError` unless xarray and a netCDF4 engine
    (h5netcdf or netCDF4) are installed: what writing a `.nc` file needs,
    checked before anything is computed."""
    import_xarray()
    import importlib.util

    if not any(importlib.util.find_spec(m) for m in ("h5netcdf", "netCDF4")):
        raise ModuleNotFoundError(
            f"writing a netCDF file needs h5netcdf (or netCDF4): {INSTALL}"
        )


# -- the names of a problem's arrays -------------------------------------------


@dataclasses.dataclass(frozen=True)
class ArrayNames:
    """The names a problem gives its arrays in labelled arrays (all
    optional; what is not named gets the generic names).

    - `params`: by leaf path (`jax.tree_util.keystr`, e.g. `".W0"`, `"[0]"`,
      `""` for a single array), `(variable name, dims)`;
    - `extras`: by observable key, the dims (after the time axis), or
      `(variable name, dims)`;
    - `problem`: by the path of the problem's array in its file (`"chain.P"`),
      `(variable name, dims)`;
    - `coords`: coordinates by name: a 1-D array (the coordinate of the
      dimension of that name) or `(dim, values)` (a coordinate on `dim`,
      e.g. the token labels of a text).
    """

    params: Mapping[str, tuple[str, Dims]] = dataclasses.field(default_factory=dict)
    extras: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    problem: Mapping[str, tuple[str, Dims]] = dataclasses.field(default_factory=dict)
    coords: Mapping[str, Any] = dataclasses.field(default_factory=dict)


@functools.singledispatch
def array_names(problem) -> ArrayNames:
    """The names of `problem`'s arrays in a result's `to_xarray()`: an
    extension point keyed by the problem's class
    (`array_names.register(cls)`, returning a [`gradflow.ArrayNames`][]).
    By default none, so every array gets the generic names: a parameter
    leaf `params` and its path (`params_W`), an observable its key, the
    dimensions `NAME_dim_0`, ... The paper's model names its token, width,
    query and key dimensions; the deep linear network its input, hidden and
    output ones; the committee machine its students and teachers."""
    del problem
    return ArrayNames()


def clean(key: str) -> str:
    """`key` as a variable name: letters, digits and `_` (`sv[0]` -> `sv_0`,
    `params['W']` -> `params_W`)."""
    return re.sub(r"[^0-9A-Za-z_]+", "_", key).strip("_") or "value"


class Namer:
    """Applies a problem's `ArrayNames` with the generic fallback, and keeps
    each dimension one size (a dimension met with a second size is renamed
    `VARIABLE_DIM`)."""

    def __init__(self, problem) -> None:
        self.names = array_names(problem) if problem is not None else ArrayNames()
        self.sizes: dict[str, int] = {}
        self.used: set[str] = set()

    def _unique(self, name: str) -> str:
        base, k = name, 1
        while name in self.used:
            k += 1
            name = f"{base}_{k}"
        self.used.add(name)
        return name

    def _dims(self, name: str, dims: Dims | None, shape) -> Dims:
        if dims is None or len(dims) != len(shape):
            dims = tuple(f"{name}_dim_{j}" for j in range(len(shape)))
        out = []
        for dim, n in zip(dims, shape, strict=True):
            if self.sizes.setdefault(dim, int(n)) != int(n):
                dim = f"{name}_{dim}"
                self.sizes.setdefault(dim, int(n))
            out.append(dim)
        return tuple(out)

    def param(self, path: str, shape) -> tuple[str, Dims]:
        """`(name, dims)` of the parameter leaf at `path` (one point's shape)."""
        default = ("params_" + clean(path)) if path else "params"
        name, dims = self.names.params.get(path, (default, None))
        name = self._unique(name)
        return name, self._dims(name, dims, shape)

    def extra(self, key: str, shape) -> tuple[str, Dims]:
        """`(name, dims)` of the observable `key` (one point's shape)."""
        entry = self.names.extras.get(key)
        name, dims = clean(key), entry
        if isinstance(entry, tuple) and len(entry) == 2 and isinstance(entry[1], tuple):
            name, dims = entry
        name = self._unique(name)
        return name, self._dims(name, dims, shape)

    def problem(self, key: str, shape) -> tuple[str, Dims]:
        """`(name, dims)` of the problem's array at path `key`."""
        name, dims = self.names.problem.get(key, ("problem_" + clean(key), None))
        name = self._unique(name)
        return name, self._dims(name, dims, shape)

    def coords(self) -> dict[str, Any]:
        """The coordinates of the dimensions in use (those of the names whose
        dimension was used with the coordinate's length)."""
        out = {}
        for name, value in self.names.coords.items():
            dim, values = (name, value) if not isinstance(value, tuple) else value
            values = np.asarray(values)
            if self.sizes.get(dim) == values.shape[0]:
                out[name] = (dim, values)
        return out


# -- a result as a Dataset ---------------------------------------------------------


def to_json(value) -> str:
    return json.dumps(value, default=json_default)


def array_variables(namer: Namer, arrays: dict, lead: Dims, time: Dims, own) -> dict:
    """`{name: (dims, values, attrs)}` of a result's arrays (`own`, the
    parameters `params...`, the observables `extra_...`), each on
    `lead + time` and its named dimensions."""
    out = {}
    skip = len(lead) + len(time)
    for key, value in arrays.items():
        shape = value.shape[skip:]
        attrs: dict[str, Any] = {KEY: key}
        if key in own:
            name, dims = ("step" if key == "steps" else key), ()
            if key in OWN:
                attrs["long_name"] = OWN[key]
        elif key.startswith("params"):
            name, dims = namer.param(key[len("params") :], shape)
        elif key.startswith("extra_"):
            name, dims = namer.extra(key[len("extra_") :], shape)
        else:  # pragma: no cover (result_parts writes no other arrays)
            raise ValueError(f"unexpected result array {key!r}")
        out[name] = ((*lead, *time, *dims), value, attrs)
    return out


def problem_variables(namer: Namer, arrays: dict, lead: Dims = ()) -> dict:
    """The problem's arrays (by their path in its file) as variables."""
    out = {}
    for key, value in arrays.items():
        name, dims = namer.problem(key, np.shape(value)[len(lead) :])
        out[name] = ((*lead, *dims), value, {KEY: "problem/" + key})
    return out


def dataset_attrs(meta: dict, problem) -> dict[str, Any]:
    """A Dataset's attributes: what was run (the problem, its scalar
    settings as `problem_NAME`), by which gradflow, how (the settings, also
    one attribute each for numbers and strings) and how it went."""
    settings = meta.get("settings") or {}
    attrs: dict[str, Any] = {
        "gradflow_version": meta["gradflow_version"],
        "gradflow_format": meta["format"],
        "problem": describe(problem),
        "problem_class": "" if problem is None else type(problem).__qualname__,
        "settings": to_json(settings),
        "stats": to_json(meta.get("stats") or {}),
    }
    if "result" in meta:
        attrs["result"] = meta["result"]
        attrs["detail"] = meta.get("detail", "")
    fields = (meta.get("problem") or {}).get("fields") or {}
    for source, prefix in ((fields, "problem_"), (settings, "")):
        for k, v in source.items():
            if isinstance(v, (int, float, str)) and not isinstance(v, bool):
                attrs.setdefault(prefix + k, v)
    return attrs


def result_dataset(result):
    """A trajectory or SGD run as an `xarray.Dataset` on the time `t`
    (module docstring)."""
    xr = import_xarray()
    meta, arrays = file_parts(result)
    namer = Namer(result.problem)
    namer.sizes[TIME] = len(result)
    own = {k: v for k, v in arrays.items() if not k.startswith("problem/")}
    variables = array_variables(namer, own, (), (TIME,), result.own_arrays)
    problem = {k[8:]: v for k, v in arrays.items() if k.startswith("problem/")}
    variables.update(problem_variables(namer, problem))
    coords = {TIME: variables.pop("ts")}
    if "step" in variables:
        coords["step"] = variables.pop("step")
    coords.update(namer.coords())
    variables[META] = ((), to_json(meta), {"long_name": "the .npz file's metadata"})
    return xr.Dataset(
        variables, coords=coords, attrs=dataset_attrs(meta, result.problem)
    )


# -- reading back ------------------------------------------------------------------


def _at(da, at: dict) -> np.ndarray:
    """`da` at the positions `at` on the dimensions it has."""
    return np.asarray(da.isel({d: i for d, i in at.items() if d in da.dims}).values)


def parts_from_dataset(ds) -> tuple[dict, dict]:
    """`(meta, arrays)` of the `.npz` file a Dataset of `to_xarray` holds:
    each variable's array under its `gradflow_key` (for many results, each
    member's and problem's under their prefixes, at their positions)."""
    if META not in ds.variables:
        raise ValueError(
            f"it holds no {META!r} (it was not written from a gradflow result's "
            "to_xarray())"
        )
    meta = json.loads(str(ds[META].values))
    layout = json.loads(str(ds[LAYOUT].values)) if LAYOUT in ds.variables else {}
    members, problems = layout.get("members", []), layout.get("problems", [])
    member_dims = set(layout.get("member_dims", []))
    arrays: dict[str, np.ndarray] = {}
    for name in ds.variables:
        da = ds[name]
        key, part, also = (da.attrs.get(a) for a in (KEY, PART, ALSO))
        if key is not None and part == "member":
            for m in members:
                arrays[m["prefix"] + key] = _at(da, m["at"])[: m["num_saves"]]
        elif key is not None and part == "problem":
            for p in problems:
                arrays[p["prefix"] + key] = _at(da, p["at"])
        elif key is not None:
            arrays[key] = np.asarray(da.values)
        if also is not None:
            stack = member_dims & set(da.dims)
            arrays[also] = (
                np.stack([_at(da, m["at"]) for m in members])
                if stack
                else np.asarray(da.values)
            )
    return meta, arrays


def load_netcdf(path: str | os.PathLike):
    """Reads a netCDF file written from a result's `to_xarray()` (with
    xarray's `to_netcdf`) back as that result: what [`gradflow.load`][] does
    for a `.nc` file.

    **Raises:** `FileNotFoundError` for a missing file; `ValueError` naming
    the file when it is not a netCDF file of a gradflow result.
    """
    xr = import_xarray()
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no such file: '{path}'")
    try:
        ds = xr.load_dataset(path)
    except Exception as e:
        reason = " ".join(f"{type(e).__name__}: {e}".split())
        raise ValueError(
            f"'{path}' could not be read as a netCDF file ({reason})"
        ) from None
    try:
        meta, arrays = parts_from_dataset(ds)
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(
            f"'{path}' is not a gradflow result's netCDF file: {e}"
        ) from None
    return build(path, meta, arrays)


def is_netcdf_path(path) -> bool:
    """Whether `save` writes `path` as netCDF: its name ends in `.nc`."""
    return Path(path).suffix.lower() == ".nc"


def write_netcdf(result, path: str | os.PathLike) -> Path:
    """Writes `result.to_xarray()` to the netCDF file `path` with xarray's
    writer, atomically (through a temporary file in the same folder): what
    the command line's `--netcdf` writes beside the `.npz` file."""
    check_netcdf()
    path = Path(path)
    dataset = result.to_xarray()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        dataset.to_netcdf(tmp)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    return path


register_reader(".nc", load_netcdf, "gradflow.load")

__all__ = [
    "ArrayNames",
    "Namer",
    "array_names",
    "array_variables",
    "check_netcdf",
    "dataset_attrs",
    "import_xarray",
    "is_netcdf_path",
    "load_netcdf",
    "parts_from_dataset",
    "problem_variables",
    "result_dataset",
    "write_netcdf",
]
