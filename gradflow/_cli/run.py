"""`gradflow run`: integrate a scenario, locate its stages, write files and figures."""

import argparse
import csv
import json
import sys
from pathlib import Path

from .common import (
    LIBRARY_NAMES,
    add_chain_arguments,
    add_chunk_steps_argument,
    add_subcommand,
    chain_from_args,
    fail,
    flag_names,
    flow_options,
)
from .preload import preload_figures
from .problems import add_problem_arguments, run_problem
from .report import add_output_arguments, check_outputs, write_outputs
from .sgd import (
    add_model_arguments,
    add_text_arguments,
    chain_from_text_args,
    model_from_args,
    text_description,
)


DEFAULTS = {"width": 8, "init_scale": 1e-3, "t1": 5_000.0}

STAGE_FIELDS = (
    "name",
    "cycle",
    "t_start",
    "t_end",
    "loss_start",
    "loss_end",
    "tokens",
    "token_labels",
    "complete",
    "mass_start",
    "mass_end",
    "sv_index",
)
EVENT_FIELDS = ("name", "t", "loss", "token", "located")


def register(subparsers) -> None:
    p = add_subcommand(
        subparsers,
        "run",
        help="integrate a scenario, find its stages, write files and figures",
        description=(
            "Integrate the population gradient flow of one scenario, locate its "
            "saddles while solving and its stages from the saved points "
            "(condensation, focus, dilution, new_direction, and the plateaus "
            "between the loss drops), print a stage table, and write into --out: "
            "trajectory.npz, stages.csv, events.csv, command.json (the command "
            "line that made them) and the figures (summary, embedding PCA, "
            "attention at the stage boundaries; PNG, and PDF with --pdf); with "
            "--animate an animation of the run and with --netcdf trajectory.nc "
            "(gradflow report RUN_DIR then writes its explorer). "
            "The defaults run the paper-like scenario sticky(6, 0.5, 0.5, 0.05), "
            "width 8, init scale 1e-3, through two full cycles (t1 = 5000); "
            "--t1 20000 follows the loss down to the conditional entropy. "
            "Compiled solves are kept in JAX's persistent compilation cache "
            "(~/.cache/gradflow/jax, or $JAX_COMPILATION_CACHE_DIR), so a second "
            "run of the same shapes starts without compiling."
        ),
    )
    add_chain_arguments(p)
    add_text_arguments(p)
    add_model_arguments(p)
    _add_flow_arguments(p)
    _add_checkpoint_arguments(p)
    _add_output_arguments(p)
    add_problem_arguments(p)
    p.set_defaults(func=run, flags={**flag_names(p), **LIBRARY_NAMES})


def _add_flow_arguments(parser: argparse.ArgumentParser) -> None:
    """The flow: initialisation, final time, solver, tolerances, saves."""
    g = parser.add_argument_group("flow")
    g.add_argument(
        "--width", type=int, default=DEFAULTS["width"], help="embedding width m"
    )
    g.add_argument(
        "--init-scale",
        type=float,
        default=DEFAULTS["init_scale"],
        help="standard deviation of the i.i.d. normal initialisation",
    )
    g.add_argument("--t1", type=float, default=DEFAULTS["t1"], help="final time")
    g.add_argument("--seed", type=int, default=0, help="seed of the initialisation")
    g.add_argument(
        "--solver",
        default=None,
        help="solver name (see gradflow.SOLVERS) (default: ros34pw2, gradflow's)",
    )
    g.add_argument(
        "--rtol",
        type=float,
        default=None,
        help="relative tolerance (default: the solver's, 1e-05 for ros34pw2)",
    )
    g.add_argument(
        "--atol",
        type=float,
        default=None,
        help="absolute tolerance (default: tied to the initial scale)",
    )
    g.add_argument(
        "--num-saves",
        type=int,
        default=798,
        help="number of save times (0, then log-spaced)",
    )
    g.add_argument(
        "--max-steps",
        type=int,
        default=None,
        help="the most solver steps; the partial trajectory is saved if they run "
        "out (default: gradflow's, 4000000)",
    )


def _add_checkpoint_arguments(parser: argparse.ArgumentParser) -> None:
    """Checkpoint file and how often it is written."""
    g = parser.add_argument_group("checkpoints")
    g.add_argument(
        "--checkpoint",
        metavar="PATH",
        type=Path,
        default=None,
        help="write the solver state to PATH (every --checkpoint-every seconds, at "
        "each event, at the end); if PATH exists, resume from it (see "
        "docs/reliability.md) (default: none, not resumable)",
    )
    g.add_argument(
        "--checkpoint-every",
        metavar="SECONDS",
        type=float,
        default=120.0,
        help="seconds of wall time between checkpoint writes",
    )
    add_chunk_steps_argument(g, "1000, fewer for large models")


def _add_output_arguments(parser: argparse.ArgumentParser) -> None:
    """Where the files go; figures and progress bar on or off."""
    g = parser.add_argument_group("output")
    g.add_argument(
        "--out",
        metavar="DIR",
        type=Path,
        default=Path("gradflow_run"),
        help="output folder",
    )
    g.add_argument("--no-figures", action="store_true", help="skip the figures")
    g.add_argument("--pdf", action="store_true", help="also write the figures as PDF")
    add_output_arguments(g, animate=True)
    g.add_argument(
        "--no-progress",
        action="store_true",
        help="no progress bars (reading a text, solving)",
    )


def _chain(args):
    text_chain = chain_from_text_args(args)
    if text_chain is not None:
        return text_chain, text_description(args)
    return chain_from_args(args)


def _cell(value):
    if isinstance(value, (list, tuple)):
        return " ".join(str(v) for v in value)
    if isinstance(value, float):
        return repr(value)
    return "" if value is None else str(value)


def write_csv(path: Path, rows, fields) -> None:
    """Writes records (typed records with `to_dict`, or dicts) to `path` as CSV
    with the given columns."""
    from .._core.files import atomic_write

    def write(f):
        import io

        text = io.StringIO()
        w = csv.writer(text)
        w.writerow(fields)
        for r in rows:
            r = r.to_dict() if hasattr(r, "to_dict") else r
            w.writerow([_cell(r.get(k)) for k in fields])
        f.write(text.getvalue().encode())

    atomic_write(path, write)


def run(args) -> int:
    try:
        check_outputs(args, args.out)
    except (ValueError, ModuleNotFoundError) as e:
        return fail("run", e, args.flags)
    if args.problem is not None:  # any other problem: gradflow/_cli/problems.py
        return run_problem(args)
    # The figure code is imported on a thread while the solve runs; the
    # command waits for it on every way out, so no import outlives the command
    # (CPython 3.11's parser state is not safe against a parse on another
    # thread: a test session that calls the command saw spurious SystemErrors).
    loader = None if args.no_figures else preload_figures()
    try:
        return _run_chain(args)
    finally:
        if loader is not None:
            loader.join()


def _run_chain(args) -> int:
    import gradflow as gf

    interrupted = None
    try:
        chain, description = _chain(args)
        model = model_from_args(args)
        if args.num_saves < 2:
            raise ValueError(f"--num-saves must be at least 2, got {args.num_saves}")
        saveat, solver, run = flow_options(args)
        traj = gf.integrate(
            chain,
            args.init_scale,
            width=args.width,
            model=model,
            seed=args.seed,
            t1=args.t1,
            saveat=saveat,
            solver=solver,
            run=run,
        )
    except (ValueError, TypeError, FileNotFoundError) as e:
        return fail("run", e, args.flags)
    except gf.Interrupted as e:
        # Ctrl-C: keep what was computed (the figures are skipped).
        interrupted, traj = e, e.result
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    traj.save(out / "trajectory.npz")
    write_csv(out / "stages.csv", traj.stages, STAGE_FIELDS)
    write_csv(out / "events.csv", traj.events, EVENT_FIELDS)
    (out / "command.json").write_text(json.dumps({"argv": sys.argv[1:]}, indent=1))
    if interrupted is not None:
        print(
            f"gradflow run: interrupted: {traj.message}; the partial trajectory is "
            f"in {out / 'trajectory.npz'}",
            file=sys.stderr,
        )
        return 130
    levels = gf.markov.entropy_bounds(chain)
    print(f"chain: {description}; model: {model.label}")
    print(
        f"loss {traj.loss[0]:.5f} -> {traj.loss[-1]:.5f} at t = {traj.t_final:.6g} "
        f"(log d = {levels['log_d']:.5f}, H(pi) = {levels['unigram']:.5f}, "
        f"conditional entropy = {levels['conditional']:.5f})"
    )
    resumed = traj.stats.resumed_from
    print(
        f"{traj.stats.num_steps} steps, {len(traj.events)} events, "
        f"{traj.stats.wall_time:.1f} s"
        + (
            ""
            if resumed is None
            else f" (resumed from the checkpoint at t = {resumed:.6g})"
        )
    )
    print(gf.stage_table(traj.stages))
    written = ["trajectory.npz", "stages.csv", "events.csv", "command.json"]
    if not args.no_figures:
        import gradflow.plot as plot

        written += [
            p.name for p in plot.plot_all(traj, out, title=description, pdf=args.pdf)
        ]
    written += [p.name for p in write_outputs(traj, args, out, "trajectory")]
    print(f"wrote {', '.join(written)} to {out}/")
    if not traj.ok:
        print(
            f"gradflow run: error: {traj.message} (the partial trajectory is in "
            f"{out / 'trajectory.npz'})",
            file=sys.stderr,
        )
        return 1
    return 0
