"""The run explorer: [`report`][gradflow.plot.report] writes one
self-contained HTML page of a run or a sweep (`page.html`, `explorer.css` and `explorer.js` of this
package, with the data embedded as JSON).

The page is a small hand-written script over embedded data, not a plotting
library's: plotly.js alone is about 3.5 MB and bokeh's scripts about 1 MB
(and a Python dependency), where the page's own script and style are about
27 kB, so the file's size is the data's. It draws with SVG and a canvas
(the heat maps), fetches nothing, and opens offline.
"""

import json
import os
import shlex
from importlib import resources
from pathlib import Path

import numpy as np

from ..._core.files import atomic_write, json_default, version
from ..._problem.functions import describe
from ..._result.base import AbstractResult
from ..._result.files import load
from ..._sweep.result import Sweep
from .._animate import check_output, check_result, run_kind
from . import data


# The result files of a run folder, in the order they are looked for.
RUN_FILES = ("trajectory.npz", "sweep.npz", "sgd_run.npz")
OUTPUT = "report.html"
# An ensemble folder (`gradflow sgd --seeds N [--sde]`) beside its flow's
# trajectory.npz: the SGD runs, and optionally the SDE's paths and the
# modified flow (the page shows their loss curves and the crossing table).
ENSEMBLE_RUNS = "sgd_run_*.npz"
ENSEMBLE_FILES = ("sde.npz", "modified_flow.npz")


def _asset(name: str) -> str:
    return (resources.files(__name__) / name).read_text(encoding="utf-8")


def _result_file(folder: Path) -> Path:
    """The result file of a run folder, or a one-line error naming it."""
    for name in RUN_FILES:
        if (folder / name).exists():
            return folder / name
    raise FileNotFoundError(
        f"source: '{folder}' holds no gradflow result ({', '.join(RUN_FILES)}); "
        "give the folder that gradflow run, sweep or sgd wrote (their --out), "
        "or a result file"
    )


def _command(folder: Path) -> str | None:
    """The command line that wrote a run folder (its `command.json`, beside
    the result file)."""
    if not (folder / "command.json").exists():
        return None
    argv = json.loads((folder / "command.json").read_text()).get("argv")
    if not isinstance(argv, list):
        return None
    return " ".join(["gradflow", *(shlex.quote(str(a)) for a in argv)])


def _ensemble(file: Path, traj) -> dict | None:
    """The SGD and SDE ensembles of the folder of a flow's `trajectory.npz`
    (`gradflow sgd --seeds N [--sde]`): their loss curves and crossing table
    (`data.ensemble_data`), or `None` for a folder without an ensemble."""
    from ..._sgd.compare import DEFAULT_LEVELS
    from ..._sgd.ensemble import compare_ensembles

    folder = file.parent
    named = [(p.stem.removeprefix("sgd_run_"), p) for p in folder.glob(ENSEMBLE_RUNS)]
    runs = sorted((int(seed), p) for seed, p in named if seed.isdigit())
    if file.name != RUN_FILES[0] or not runs:
        return None
    sde, modified = (load(folder / n) if (folder / n).exists() else None
                     for n in ENSEMBLE_FILES)  # fmt: skip
    cmp = compare_ensembles(traj, [load(p) for _, p in runs], sde, modified=modified,
                            fractions=DEFAULT_LEVELS)  # fmt: skip
    ts = np.asarray(traj.ts, dtype=float)
    out = data.ensemble_data(cmp, (float(ts[ts > 0].min()), float(ts.max())))
    out["seeds"] = [s for s, _ in runs]
    return out


def _where(source) -> tuple[Path | None, Path | None]:
    """`(result file, default output)` of what `report` was given (`None`
    for a result object), checked to exist, before anything is read."""
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        if path.is_dir():
            return _result_file(path), path / OUTPUT
        if not path.exists():
            raise FileNotFoundError(f"source: no such file or folder: '{path}'")
        return path, path.with_suffix(".html")
    if not isinstance(source, (AbstractResult, Sweep)):
        raise TypeError(
            "source must be a run folder, a result file or a gradflow result "
            f"(Trajectory, SGDRun, Sweep), got {type(source).__name__}"
        )
    return None, None


def report(
    source,
    path: str | os.PathLike | None = None,
    *,
    frames: int | None = None,
    title: str | None = None,
) -> Path:
    """Writes an explorer of a run or a sweep: one self-contained HTML file
    that opens offline in any browser.

    For a run: the loss curve with the stages shaded; a time slider and a
    play button moving a marker along it and updating the problem's views
    at that time (for the paper's model the attention map, the embeddings
    on their principal directions, the attention mass per key token and the
    singular values of $W_0$: the problem's [`views`][gradflow.plot.views];
    the frames paced by stage, as [`animate`][gradflow.plot.animate]'s); the
    stage table (clicking a row moves the
    time to that stage), the events, the settings, the stats and the
    command line that made the run. For the folder of an ensemble (`gradflow
    sgd --seeds N [--sde]`: `sgd_run_<seed>.npz` beside the flow's
    `trajectory.npz`, with `sde.npz` and `modified_flow.npz` if there): the
    stochastic modified equation's band (10 %–90 % of its paths at each
    time, and their median) around the flow's loss, the modified flow
    dashed, each SGD run's population loss on top, and the crossing table
    of [`gradflow.EnsembleComparison`][] (`docs/sgd.md`, "Escape times").
    For a sweep: a phase diagram of a value
    (the first escape time, the first plateau's length, the start of the
    first focus or new direction, the final loss) over the swept axes, each
    member's cell opening that member's view.

    **Arguments:**

    - `source`: a run folder written by `gradflow run`, `gradflow sweep` or
      `gradflow sgd` (its `trajectory.npz`, `sweep.npz` or `sgd_run.npz`, and
      `command.json`; an ensemble's as above), a result file (`.npz` or
      `.nc`), or a result
      ([`gradflow.Trajectory`][], [`gradflow.SGDRun`][],
      [`gradflow.Sweep`][]).
    - `path`: the HTML file (default: `report.html` in the run folder, or
      the result file's name with `.html`; required for a result object).
    - `frames`: times on the slider (default 150 for a run, 60 for each
      member of a sweep).
    - `title`: the page's title (default: the problem).

    **Returns:** the path written.

    **Raises:** `FileNotFoundError` for a `source` folder without a result
    (or a missing file); `TypeError` for anything not a result; `ValueError`
    for a run with fewer than 2 saves or a `path` that is not `.html` or
    cannot be written; all before anything is computed.

    **Example:**

    ```python
    from gradflow import plot

    plot.report("runs/default")  # runs/default/report.html
    plot.report(traj, "explorer.html")
    ```
    """
    # (everything is checked before the source is read: reading a result
    # file builds its problem, which runs JAX)
    file, default = _where(source)
    if path is None and default is None:
        raise ValueError("path is required when source is a result object")
    out = check_output(default if path is None else path, (".html",))
    result = source if file is None else load(file)
    command = None if file is None else _command(file.parent)
    sweep = isinstance(result, Sweep)
    if not sweep:
        check_result(result, "report", "source")
    if frames is not None and (isinstance(frames, bool) or not isinstance(frames, int)
                               or frames < 2):  # fmt: skip
        raise ValueError(f"frames must be an integer >= 2, got {frames!r}")
    problem = (result.problems or (None,))[0] if sweep else result.problem
    what = describe(problem)
    title = title or (f"sweep of {len(result)} members ({what})" if sweep
                      else f"{run_kind(result)} of {what}")  # fmt: skip
    page = {
        "kind": "sweep" if sweep else "run",
        "title": title,
        "subtitle": f"gradflow {version()}",
        "command": command,
        "stage_colors": data.STAGE_COLOURS,
    }
    if sweep:
        page["sweep"] = data.sweep_data(result, frames or 60, title)
    else:
        page["run"] = data.run_data(result, frames or 150, title)
        ensemble = None if file is None else _ensemble(file, result)
        if ensemble is not None:
            page["run"]["ensemble"] = ensemble
    html = _page(page, title)
    atomic_write(out, lambda f: f.write(html.encode("utf-8")))
    return out


def _page(page: dict, title: str) -> str:
    import html

    # "</" cannot close the script element holding the data
    payload = json.dumps(
        page, default=json_default, allow_nan=False, separators=(",", ":")
    )
    payload = payload.replace("</", "<\\/")
    text = _asset("page.html")
    for key, value in (
        ("{{style}}", _asset("explorer.css")),
        ("{{script}}", _asset("explorer.js")),
        ("{{title}}", html.escape(title)),
        ("{{version}}", html.escape(version())),
    ):
        text = text.replace(key, value)
    return text.replace("{{data}}", payload)


__all__ = ["ENSEMBLE_FILES", "ENSEMBLE_RUNS", "OUTPUT", "RUN_FILES", "report"]
