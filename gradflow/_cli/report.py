"""`gradflow report RUN_DIR`: the explorer of a run or a sweep, one
self-contained HTML file ([`gradflow.plot.report`][]). What `run`, `sweep`
and `sgd` write on request beside their `.npz` file (`--animate`,
`--netcdf`) is shared with their other output options, in `common.py`."""

from pathlib import Path

from .common import (
    INPUT_ERRORS,
    add_subcommand,
    current_folder_on_path,
    fail,
    one_line_warnings,
    refuse_flag,
)
from .theory import SAVED_PROBLEM


def register(subparsers) -> None:
    p = add_subcommand(
        subparsers,
        "report",
        (
            "write the explorer of a run or a sweep (one HTML file)",
            "Write an explorer of a run or a sweep of any problem: one "
            "self-contained HTML file that opens offline in any browser. A run: "
            "its loss curve with the stages, a time slider and a play button over "
            "its problem's views (for the paper's model the attention map and the "
            "embedding PCA; mode strengths, overlaps or eigen-components for the "
            "other problems), the stage table (a row moves the time to its stage), "
            "the events, the settings and the command that made it. A sweep: its "
            "phase diagram, each member opening its own view. An existing --out "
            "file is refused unless --overwrite.",
        ),
        main,
    )
    p.add_argument(
        "run_dir",
        metavar="RUN_DIR",
        type=Path,
        help="a folder written by gradflow run, sweep or sgd (their --out; for a "
        "sweep of several groups, a group's subfolder), or a result file "
        "(.npz or .nc)",
    )
    g = p.add_argument_group("output")
    g.add_argument(
        "--out",
        metavar="FILE",
        type=Path,
        default=None,
        help="the HTML file (default: RUN_DIR/report.html, or the result file's "
        "name with .html)",
    )
    g.add_argument(
        "--overwrite", action="store_true", help="replace an existing --out file"
    )
    p.add_argument(
        "--frames",
        metavar="N",
        type=int,
        default=None,
        help="times on the slider (default: 150 for a run, 60 for each member of "
        "a sweep)",
    )
    p.add_argument(
        "--title", default=None, help="the page's title (default: the problem)"
    )
    refuse_flag(p, "--problem", "report", SAVED_PROBLEM.format("report"))
    # gradflow.plot.report(source, path) names its arguments in its errors
    p.set_defaults(library_names={"source": "RUN_DIR", "path": "--out"})


def _target(args) -> Path:
    """The file `report` will write (`--out`, or its default beside RUN_DIR),
    refused if it exists and `--overwrite` is not given."""
    from ..plot._explorer import OUTPUT

    source = Path(args.run_dir)
    if args.out is not None:
        target = args.out
    elif source.is_dir():
        target = source / OUTPUT
    else:
        target = source.with_suffix(".html")
    if target.is_file() and not args.overwrite:
        raise ValueError(
            f"--out: '{target}' exists; give --overwrite to replace it, or "
            "another --out"
        )
    return target


def main(args) -> int:
    from ..plot import report

    try:
        target = _target(args)
        # the problem's class imported as `gradflow run --problem` imports a
        # factory; a reader's warning (a class still not found) one line
        current_folder_on_path()
        with one_line_warnings("report"):
            path = report(args.run_dir, target, frames=args.frames, title=args.title)
    except INPUT_ERRORS as e:
        return fail(args, e)
    print(f"wrote {path} ({path.stat().st_size / 1e3:.0f} kB)")
    return 0


__all__ = ["register"]
