"""`gradflow report RUN_DIR`: the explorer of a run or a sweep, one
self-contained HTML file ([`gradflow.plot.report`][]); and what `run`,
`sweep` and `sgd` write on request beside their `.npz` file: the animation
(`gradflow run --animate`, [`gradflow.plot.animate`][]) and the netCDF file
(`--netcdf`, the result's `to_xarray()`; `docs/analysis.md`)."""

import sys
from pathlib import Path

from .common import add_subcommand, fail, flag_names


def register(subparsers) -> None:
    p = add_subcommand(
        subparsers,
        "report",
        help="write the explorer of a run or a sweep (one HTML file)",
        description=(
            "Write an explorer of a run or a sweep: one self-contained HTML file "
            "that opens offline in any browser. A run: its loss curve with the "
            "stages, a time slider and a play button over its views (for the "
            "paper's model the attention map and the embedding PCA), the stage "
            "table (a row moves the time to its stage), the events, the settings "
            "and the command that made it. A sweep: its phase diagram, each "
            "member opening its own view."
        ),
    )
    p.add_argument(
        "run_dir",
        metavar="RUN_DIR",
        type=Path,
        help="a folder written by gradflow run, sweep or sgd (--out), or a result "
        "file (.npz or .nc)",
    )
    p.add_argument(
        "--out",
        metavar="FILE",
        type=Path,
        default=None,
        help="the HTML file (default: RUN_DIR/report.html, or the result file's "
        "name with .html)",
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
    names = {**flag_names(p), "source": "RUN_DIR", "path": "--out"}
    p.set_defaults(func=main, flags=names)


def main(args) -> int:
    from ..plot import report

    try:
        path = report(args.run_dir, args.out, frames=args.frames, title=args.title)
    except (ValueError, TypeError, FileNotFoundError) as e:
        return fail("report", e, args.flags)
    print(f"wrote {path} ({path.stat().st_size / 1e3:.0f} kB)")
    return 0


# -- --animate and --netcdf of run, sweep and sgd -------------------------------


def add_output_arguments(parser, *, animate: bool) -> None:
    """`--netcdf`, and with `animate` `--animate [FILE]`."""
    parser.add_argument(
        "--netcdf",
        action="store_true",
        help="also write the result as a netCDF file beside its .npz (its "
        "to_xarray(); gradflow.load and xarray read it; needs gradflow[analysis])",
    )
    if animate:
        parser.add_argument(
            "--animate",
            metavar="FILE",
            nargs="?",
            const="animation.mp4",
            default=None,
            help="also write an animation of the run into --out: FILE, .mp4 (needs "
            "gradflow[analysis]) or .gif (default FILE: animation.mp4)",
        )


def check_outputs(args, out: Path | None) -> None:
    """What `--animate` and `--netcdf` will need, checked before anything is
    solved (one-line errors naming the flag): the animation's file (its
    suffix, a place it can be written) and encoder, the netCDF writer, and
    a folder to write in."""
    from .._result.labelled import check_netcdf
    from ..plot._animate import FORMATS, check_output, encoder

    if getattr(args, "netcdf", False):
        if out is None:
            raise ValueError("--netcdf needs --out, the folder to write the file in")
        try:
            check_netcdf()
        except ModuleNotFoundError as e:
            raise ModuleNotFoundError(f"--netcdf: {e}") from None
    if getattr(args, "animate", None) is not None and out is not None:
        path = out / args.animate
        encoder(check_output(path, FORMATS, "--animate"), "--animate")


def write_outputs(result, args, out: Path, stem: str) -> list[Path]:
    """Writes what `--netcdf` (`out/stem.nc`) and `--animate` ask for; returns
    the paths. A run of fewer than 2 saves has no animation (said on
    stderr)."""
    from .._result.labelled import write_netcdf

    written = []
    if getattr(args, "netcdf", False):
        written.append(write_netcdf(result, out / f"{stem}.nc"))
    if getattr(args, "animate", None) is not None:
        if len(result) < 2:
            print(
                f"gradflow {args.command}: --animate: no animation: the run has "
                f"{len(result)} save, at least 2 are needed",
                file=sys.stderr,
            )
        else:
            from ..plot import animate

            written.append(animate(result, out / args.animate))
    return written


__all__ = ["add_output_arguments", "check_outputs", "register", "write_outputs"]
