"""`gradflow theory TRAJ.npz [--out DIR]`: the linearisation report of a saved
trajectory of any problem, printed as a table, with a figure (PNG; PDF with
`--pdf`) and the rows as JSON."""

import argparse
import json
import math
from pathlib import Path

from .common import (
    INPUT_ERRORS,
    add_subcommand,
    current_folder_on_path,
    existing_path,
    fail,
    one_line_warnings,
    refuse_flag,
)


# What `--problem` means to a command that reads a saved result.
SAVED_PROBLEM = (
    "gradflow {0} reads the problem from a saved run; run `gradflow run "
    "--problem P --out DIR` first, then `gradflow {0} DIR` from the same folder"
)


def register(subparsers) -> None:
    parser = add_subcommand(
        subparsers,
        "theory",
        (
            "predicted against measured: critical points, unstable rates, escapes",
            "Finds the plateaus of a saved trajectory of any problem (gradflow run "
            "writes trajectory.npz), refines the critical point each one shadows, "
            "linearises the flow there, and prints the theory's predictions (the "
            "unstable rates; for the paper's model also its closed forms) against "
            "what the trajectory measured. With --out, writes NAME.json and the "
            "figure NAME.png (and NAME.pdf with --pdf) into that folder, beside "
            "what is there (files of the same names are refused unless "
            "--overwrite).",
        ),
        run,
    )
    parser.add_argument(
        "trajectory",
        metavar="TRAJ.npz",
        help="an existing .npz file written by Trajectory.save, or the folder "
        "that gradflow run wrote (its --out), which holds trajectory.npz",
    )
    parser.add_argument(
        "--threshold",
        type=float,
        default=None,
        help="plateau threshold on the speed t|grad L|^2 / (the loss's height "
        "above its floor) (gradflow.theory.plateaus; default 0.1, and 0.01 against "
        "the loss scale for the paper's model)",
    )
    g = parser.add_argument_group("output")
    g.add_argument(
        "--out",
        metavar="DIR",
        type=Path,
        default=None,
        help="folder for NAME.json and NAME.png (default: none, print only)",
    )
    g.add_argument("--name", default="theory", help="file stem of the outputs in --out")
    g.add_argument(
        "--overwrite", action="store_true", help="replace NAME.* files in --out"
    )
    g.add_argument("--no-figures", action="store_true", help="skip the figure")
    g.add_argument("--pdf", action="store_true", help="also write the figure as PDF")
    refuse_flag(parser, "--problem", "theory", SAVED_PROBLEM.format("theory"))


def _load(path: Path):
    """The trajectory of `path`, its problem's class imported as `gradflow
    run --problem` imports a factory (the current folder on the import
    path), with any warning of the reader (a class that still cannot be
    imported) printed as one line."""
    import gradflow as gf

    current_folder_on_path()
    with one_line_warnings("theory"):
        traj = gf.load(path)
    if not isinstance(traj, gf.Trajectory):
        raise ValueError(
            f"TRAJ.npz: '{path}' holds a {type(traj).__name__}, not a trajectory "
            "(gradflow run writes trajectory.npz)"
        )
    return traj


def _check_out(args) -> None:
    if args.out is None:
        return
    if args.out.exists() and not args.out.is_dir():
        raise ValueError(f"--out: '{args.out}' is a file, not a folder")
    taken = sorted(p.name for p in args.out.glob(f"{args.name}.*"))
    if taken and not args.overwrite:
        raise ValueError(
            f"--out: '{args.out}' already holds {', '.join(taken)}; give "
            "--overwrite to replace them, or another --name or --out"
        )


def run(args: argparse.Namespace) -> int:
    from ..theory import critical_points, format_report, theory_report

    try:
        if args.threshold is not None and not (
            math.isfinite(args.threshold) and args.threshold > 0
        ):
            raise ValueError(
                f"--threshold must be finite and > 0, got {args.threshold}"
            )
        _check_out(args)
        path = existing_path("TRAJ.npz", args.trajectory)
        if path.is_dir() and (path / "trajectory.npz").is_file():
            path = path / "trajectory.npz"  # a run's folder
        traj = _load(path)
        points = critical_points(traj, threshold=args.threshold)
        rows = theory_report(traj, points=points)
    except INPUT_ERRORS as e:
        return fail(args, e)
    print(repr(traj))
    print("critical points:")
    for cp in points:
        print(
            f"  t = {cp.t:10.4g}  L = {cp.loss:.8g}  |grad| = {cp.grad_norm:.2e}  "
            f"{cp.kind:10s} unstable rate = {cp.linearization.unstable_rate:.6g}  "
            f"({cp.linearization.num_unstable} unstable)"
            + ("" if cp.converged else "  [refinement did not converge]")
        )
    print()
    print(format_report(rows))
    if args.out is not None:
        out = args.out
        out.mkdir(parents=True, exist_ok=True)
        paths = []
        if not args.no_figures:
            formats = ("png", "pdf") if args.pdf else ("png",)
            paths = plot_report(traj, points, rows, out / args.name, formats)
        with open(out / f"{args.name}.json", "w") as f:
            json.dump(
                {"rows": rows, "critical_points": [cp.as_dict() for cp in points]},
                f,
                indent=1,
                default=str,
            )
        paths.append(out / f"{args.name}.json")
        print("\nwrote", ", ".join(str(p) for p in paths))
    return 0


def plot_report(traj, points, rows, stem: Path, formats=("png", "pdf")) -> list[Path]:
    """Loss and |grad L| against time with the refined critical points, and
    the predicted escape rates drawn as slopes on the measured |grad L|."""
    import numpy as np

    import gradflow as gf
    import gradflow.plot as plot

    from .._problem.functions import describe
    from ..theory import flank_rate

    plt = plot.pyplot()

    ts = np.asarray(traj.ts)
    keep = ts > 0
    fig, (ax0, ax1) = plt.subplots(2, 1, figsize=(7.5, 6.5), sharex=True)
    ax0.plot(ts[keep], traj.loss[keep], color="k", lw=1.5, label="loss $L(t)$")
    styles = (":", "--", "-.", (0, (1, 3)))
    levels = {} if traj.problem is None else gf.loss_levels(traj.problem)
    for j, (name, value) in enumerate(levels.values()):
        ax0.axhline(value, color="grey", ls=styles[j % 4], lw=0.8, label=name)
    for cp in points:
        t = max(cp.t, ts[keep][0])
        color = "C3" if cp.kind == "saddle" else "C2"
        face = color if cp.converged else "none"
        ax0.plot(t, cp.loss, "o", ms=6, color=color, mfc=face)
    # legend entries only for the markers drawn
    kinds = {cp.kind == "saddle" for cp in points}
    if True in kinds:
        ax0.plot([], [], "o", color="C3", label="refined saddle")
    if False in kinds:
        ax0.plot([], [], "o", color="C2", label="refined minimum / degenerate")
    if any(not cp.converged for cp in points):
        ax0.plot([], [], "o", color="k", mfc="none", label="refinement not converged")
    ax0.set_ylabel("population loss")
    ax0.legend(fontsize=7, loc="lower left")
    ax1.loglog(ts[keep], traj.grad_norm[keep], color="k", lw=1.2, label=r"$|\nabla L|$")
    first = True
    for cp in points:
        if cp.kind != "saddle" or not cp.converged or cp.index >= len(ts) - 3:
            continue
        fr = flank_rate(traj, cp.index)
        if fr["n"] < 3:
            continue
        lam = cp.linearization.unstable_rate
        tt = np.linspace(fr["t0"], fr["t1"], 20)
        g0 = np.interp(fr["t0"], ts, traj.grad_norm)
        ax1.plot(
            tt,
            g0 * np.exp(lam * (tt - tt[0])) * 2.0,
            color="C3",
            lw=2,
            label=r"predicted $e^{\lambda_{max} t}$ (offset $\times 2$)"
            if first
            else None,
        )
        first = False
    ax1.set_xlabel("gradient-flow time $t$")
    ax1.set_ylabel(r"$|\nabla L|$")
    ax1.legend(fontsize=7, loc="lower left")
    fig.suptitle(f"gradflow theory: {describe(traj.problem)}", fontsize=10)
    fig.tight_layout()
    return plot.save_figure(fig, stem, formats)
