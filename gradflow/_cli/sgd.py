"""`gradflow sgd`: train a problem with SGD on its samples (the paper's
finite-context model on a chain or a text by default), optionally next to the
population flow from the same start.

Exit codes: 0 for a finished run; 1 when the run failed (a non-finite loss: the
partial run is saved into `--out` and the message printed); 2 for bad input
(one line on stderr); 130 when interrupted (Ctrl-C: the partial run is saved
into `--out`, the checkpoint, if any, resumes it).
"""

import argparse
import json
import math
import sys

from . import common
from .common import INPUT_ERRORS, SOLVER_FLAGS, Output, fail
from .problems import (
    add_problem_arguments,
    choose,
    levels_text,
    shown_defaults,
    shown_flow_defaults,
)


FILES = (
    "sgd_run.npz (gradflow.load_sgd), command.json and, with --flow, "
    "trajectory.npz and the comparison figure compare.png; with --netcdf "
    "sgd_run.nc (and trajectory.nc)"
)


def register(subparsers) -> None:
    parser = common.add_subcommand(
        subparsers,
        "sgd",
        (
            "SGD of a problem on its samples, on the flow's time axis",
            "Train a problem with SGD on its samples (the paper's finite-context "
            "model, docs/model.md, on sequences of a Markov chain or windows of a "
            "text, by default; any problem that samples: --problem deep-linear, "
            "committee, in-context or a factory), log it at t = lr * step and score "
            "each saved iterate with the population loss. With --flow, also "
            "integrate the population flow from the same start and compare, drop by "
            f"drop. With --out, write into that folder: {FILES} (and .pdf with "
            "--pdf).",
        ),
        main,
    )
    add_problem_arguments(parser, "sgd")
    common.add_flow_arguments(parser, "sgd", shown_flow_defaults("sgd"))
    g = parser.add_argument_group("SGD")
    g.add_argument(
        "--batch-size",
        type=int,
        default=None,
        help=f"samples per step (default: {shown_defaults('batch_size', 'sgd')})",
    )
    g.add_argument(
        "--lr",
        type=float,
        default=None,
        help=f"learning rate (default: {shown_defaults('lr', 'sgd')})",
    )
    g.add_argument(
        "--num-sequences",
        type=int,
        default=None,
        help="a fixed dataset of N samples (default: fresh ones each step)",
    )
    g.add_argument(
        "--optimizer",
        choices=("sgd", "momentum", "adam"),
        default="sgd",
        help="sgd, sgd with momentum 0.9, or adam at --lr",
    )
    g.add_argument(
        "--flow",
        action="store_true",
        help="also integrate the flow from the same start and compare",
    )
    g.add_argument(
        "--seeds",
        default=None,
        help="an ensemble: N SGD runs (data seeds 0..N-1) from the one start of "
        "--seed, against the flow and the modified flow (docs/sgd.md, Escape "
        "times; default: one run)",
    )
    g.add_argument(
        "--sde",
        action="store_true",
        help="with --seeds: also N paths of the stochastic modified equation "
        "(gradflow.sgd_sde), compared crossing by crossing (default: off)",
    )
    common.add_checkpoint_arguments(parser, "sgd")
    output = common.add_output_arguments(parser, "sgd", None, FILES)
    output.add_argument("--json", action="store_true", help="print the summary as JSON")


def _save_run(run, out: Output) -> str | None:
    if out.folder is None:
        return None
    return str(run.save(out.path("sgd_run.npz")))


def _write_netcdf(result, args, out: Output, stem: str, summary: dict) -> None:
    """`--netcdf`: `stem.nc` beside `stem.npz`, listed in the summary."""
    for path in common.write_analysis_outputs(result, args, out, stem):
        summary.setdefault("netcdf", []).append(str(path))


def _drops_line(c: dict) -> str:
    """The crossing-time error of every drop, half way down it."""
    drops = c.get("drops") or []
    if not drops:
        return "no drop of the flow to compare"
    parts = []
    for d in drops:
        err = d["rel_error"]
        shown = "never reached by SGD" if math.isinf(err) else f"{100 * err:.2g} %"
        parts.append(f"{shown} (t = {d['flow_crossing']:.4g})")
    return "crossing-time error of each drop, half way down: " + ", ".join(parts)


def _summary_lines(run, description: str, levels: str, summary: dict) -> list[str]:
    """The printed summary: no Python reprs, one fact a line."""
    s = run.settings
    lines = [
        f"SGD of {description}: batch {s.batch_size}, lr {s.lr:g}, t1 = "
        f"{run.ts[-1]:g} ({run.stats.num_steps} steps in "
        f"{run.stats.wall_time:.1f} s)",
        f"population loss {run.population_loss[0]:.6g} -> "
        f"{run.population_loss[-1]:.6g}"
        + (f" ({levels})" if levels else "")
        + f"; last mini-batch loss {run.train_loss[-1]:.6g}",
    ]
    if "compare" in summary:
        c = summary["compare"]
        lines.append("against the flow: " + _drops_line(c))
        lines.append(
            f"  mean |loss gap| after the first drop {c['mean_abs_gap_after']:.5g} "
            f"(max {c['max_abs_gap_after']:.4g})"
        )
    for key in ("saved", "netcdf", "figure"):
        if key in summary:
            value = summary[key]
            value = ", ".join(value) if isinstance(value, list) else value
            lines.append(f"wrote {value}")
    return lines


def _check(args: argparse.Namespace) -> None:
    if args.sde and args.seeds is None:
        raise ValueError("--sde compares an ensemble: add --seeds N")
    if args.seeds is not None:
        try:
            args.seeds = int(args.seeds)
        except ValueError:
            raise ValueError(f"--seeds must be a count, got {args.seeds!r}") from None
        if args.seeds < 2:
            raise ValueError(f"--seeds must be at least 2, got {args.seeds}")
        if args.checkpoint is not None:
            raise ValueError("--checkpoint is for one run; drop it with --seeds")
        args.flow = True
    if not args.flow:
        for dest in SOLVER_FLAGS:
            if getattr(args, dest) is not None:
                flag = "--" + dest.replace("_", "-")
                raise ValueError(
                    f"{flag} applies to the flow of --flow (SGD has no solver); "
                    "add --flow"
                )


def _sgd(args):
    import optax

    import gradflow as gf

    optimizer = {
        "sgd": None,
        "momentum": optax.sgd(args.lr, momentum=0.9),
        "adam": optax.adam(args.lr),
    }[args.optimizer]
    return gf.SGD(
        args.lr,
        args.batch_size,
        optimizer=optimizer,
        num_sequences=args.num_sequences,
        dtype=args.dtype,
    )


def main(args: argparse.Namespace) -> int:
    import gradflow as gf

    try:
        _check(args)
        choice = choose(args, "sgd")
        choice.fill_defaults(args, "sgd")
        ((problem, description),) = choice.build()
        if args.num_saves < 2:
            raise ValueError(f"--num-saves must be at least 2, got {args.num_saves}")
        common.check_start_and_time(args)
        sgd = _sgd(args)
        out = common.open_output(args, resuming=common.is_file(args.checkpoint))
        if args.seeds is not None:
            return _ensembles(args, (problem, description), choice.plugin, sgd, out)
        run = gf.train_sgd(
            problem,
            init_scale=args.init_scale,
            seed=args.seed,
            t1=args.t1,
            sgd=sgd,
            saveat=gf.SaveAt(
                gf.default_save_times(args.t1, args.num_saves) if args.t1 > 0 else None,
                stages=not args.no_stages,
            ),
            run=common.run_options(args),
        )
    except INPUT_ERRORS as e:
        return fail(args, e)
    except gf.Interrupted as e:
        # The message starts "gradflow.train_sgd: interrupted at step k of n
        # (t = ...)"; the rest speaks of Python arguments, so say the same for
        # the command line.
        what = e.result.message.split(";")[0]
        where = [what.removeprefix("gradflow.train_sgd: ")]
        saved = _save_run(e.result, out)
        out.finish()
        if saved is not None:
            where.append(f"partial run saved to {saved}")
        else:
            where.append("partial run not saved (no --out)")
        if e.checkpoint is not None:
            where.append(f"checkpoint {e.checkpoint}: run the same command to resume")
        else:
            where.append("not resumable (no --checkpoint)")
        print("gradflow sgd: " + "; ".join(where), file=sys.stderr)
        return 130
    if not run.ok:
        saved = _save_run(run, out)
        out.finish()
        where = f"; partial run saved to {saved}" if saved is not None else ""
        print(f"gradflow sgd: run failed: {run.message}{where}", file=sys.stderr)
        return 1
    levels = gf.loss_levels(problem)
    summary = {
        "problem": description,
        "final_population_loss": float(run.population_loss[-1]),
        "final_train_loss": float(run.train_loss[-1]),
        "levels": {name: value for name, (_, value) in levels.items()},
        "settings": run.settings.to_dict(),
        "stats": run.stats.to_dict(),
    }
    saved = _save_run(run, out)
    if saved is not None:
        summary["saved"] = saved
    _write_netcdf(run, args, out, "sgd_run", summary)
    if args.flow:
        code = _compare(args, run, choice.plugin, (description, out), summary)
        if code:
            return code
    out.finish()
    if args.json:
        print(json.dumps(summary, indent=1, default=str))
    else:
        text = levels_text(choice.plugin, problem)
        print("\n".join(_summary_lines(run, description, text, summary)))
    return 0


def _compare(args, run, plugin, where: tuple[str, Output], summary: dict) -> int:
    """The flow from the run's start (in float64: with --dtype float32 the
    run drew its start in float32), compared with the run; 130 on Ctrl-C.
    The flow's problem is the run's, less what only sampling needs (the
    plugin's `flow_problem`, if it has one)."""
    import jax
    import numpy as np

    import gradflow as gf

    description, out = where
    problem = getattr(plugin, "flow_problem", lambda p: p)(run.problem)
    try:
        start = jax.tree.map(lambda x: np.asarray(x, np.float64), run.at(0))
        extra = {} if args.max_steps is None else {"max_steps": args.max_steps}
        traj = gf.flow(
            problem,
            params=start,
            t1=float(run.ts[-1]),
            saveat=gf.SaveAt(run.ts, stages=not args.no_stages),
            solver=gf.Solver(args.solver, rtol=args.rtol, atol=args.atol, **extra),
            run=gf.Run(progress=not args.no_progress),
        )
    except INPUT_ERRORS as e:
        out.finish()
        return fail(args, e)
    except KeyboardInterrupt:
        out.finish()
        saved = summary.get("saved")
        note = f"; the SGD run is saved to {saved}" if saved is not None else ""
        print(f"gradflow sgd: interrupted during the flow{note}", file=sys.stderr)
        return 130
    cmp = gf.compare(traj, run)
    summary["compare"] = cmp.summary()
    if out.folder is not None:
        traj.save(out.path("trajectory.npz"))
        _write_netcdf(traj, args, out, "trajectory", summary)
        if not args.no_figures:
            formats = ("png", "pdf") if args.pdf else ("png",)
            paths = cmp.save_figure(
                out.root / "compare", title=description, formats=formats
            )
            out.record(*paths)
            summary["figure"] = [str(p) for p in paths]
    return 0


def _ensembles(args, made, plugin, sgd, out: Output) -> int:
    """`--seeds N [--sde]`: N SGD runs from one start (and N paths of the
    stochastic modified equation), the flow and the modified flow from that
    start, their crossing times side by side."""
    import jax
    import numpy as np

    import gradflow as gf

    from .._sgd.compare import modified_flow

    problem, description = made
    saveat = gf.SaveAt(gf.default_save_times(args.t1, args.num_saves), stages=False)
    quiet = gf.Run(progress=not args.no_progress)
    start = problem.init(jax.random.key(args.seed), args.init_scale)
    start = jax.tree.map(lambda x: np.asarray(x, np.float64), start)
    runs = [
        gf.train_sgd(
            problem, start, seed=s, t1=args.t1, sgd=sgd, saveat=saveat, run=quiet
        )  # fmt: skip
        for s in range(args.seeds)
    ]
    sde = None
    if args.sde:
        sde = gf.sgd_sde(problem, start, seeds=range(args.seeds), t1=args.t1,
                         sgd=sgd, saveat=saveat, run=quiet)  # fmt: skip
    flow_problem = getattr(plugin, "flow_problem", lambda p: p)(problem)
    extra = {} if args.max_steps is None else {"max_steps": args.max_steps}
    traj = gf.flow(
        flow_problem, params=start, t1=float(runs[0].ts[-1]),
        saveat=gf.SaveAt(runs[0].ts), run=quiet,
        solver=gf.Solver(args.solver, rtol=args.rtol, atol=args.atol, **extra),
    )  # fmt: skip
    # gf.compare(..., modified=True)'s modified flow, kept for the explorer
    modified = modified_flow(traj, sgd.lr)
    cmp = gf.compare(traj, runs, sde=sde, modified=modified)
    assert isinstance(cmp, gf.EnsembleComparison)
    table = cmp.table()
    summary = {"problem": description, "ensembles": cmp.summary()}
    if out.folder is not None:
        for s, run in zip(range(args.seeds), runs, strict=True):
            run.save(out.path(f"sgd_run_{s}.npz"))
        if sde is not None:
            sde.save(out.path("sde.npz"))
        traj.save(out.path("trajectory.npz"))
        modified.save(out.path("modified_flow.npz"))
        out.path("escapes.md").write_text(table + "\n")
        if not args.no_figures:
            formats = ("png", "pdf") if args.pdf else ("png",)
            out.record(*cmp.save_figure(out.root / "compare", title=description,
                                        formats=formats))  # fmt: skip
    out.finish()
    if args.json:
        print(json.dumps(summary, indent=1, default=str))
    else:
        print(f"{args.seeds} SGD runs" + (" and SDE paths" if sde else "")
              + f" of {description}, batch {sgd.batch_size}, lr {sgd.lr:g}, one start")  # fmt: skip
        print(table)
        if out.folder is not None:
            print(f"wrote {out.names()} to {out.root}/")
    return 0
