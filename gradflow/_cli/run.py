"""`gradflow run`: integrate one problem's flow, locate its stages, write files
and figures."""

import sys

from . import common
from .common import INPUT_ERRORS, fail, write_csv
from .preload import preload_figures
from .problems import (
    GENERIC_EVENT_FIELDS,
    GENERIC_STAGE_FIELDS,
    add_problem_arguments,
    choose,
    levels_text,
    shown_flow_defaults,
)


FILES = (
    "trajectory.npz, stages.csv, events.csv, command.json and the figures; with "
    "--netcdf trajectory.nc, with --animate the animation (gradflow report "
    "RUN_DIR then writes the run's explorer)"
)


def register(subparsers) -> None:
    p = common.add_subcommand(
        subparsers,
        "run",
        (
            "integrate a problem's flow, find its stages, write files and figures",
            "Integrate the population gradient flow of one problem (by default the "
            "paper's model on the chain sticky(6, 0.5, 0.5, 0.05), width 8, init "
            "scale 1e-3, through two full cycles; --problem deep-linear, committee, "
            "in-context or a factory of your own), locate its saddles while solving "
            "and its stages from the saved points, print a stage table, and write "
            f"into --out: {FILES} (PNG; PDF too with --pdf). Each problem's default "
            "--t1 ends a little after its last drop. Compiled solves are kept in "
            "JAX's persistent compilation cache (~/.cache/gradflow/jax, or "
            "$JAX_COMPILATION_CACHE_DIR), so a second run of the same shapes starts "
            "without compiling.",
        ),
        run,
    )
    add_problem_arguments(p, "run")
    common.add_flow_arguments(p, "run", shown_flow_defaults("run"))
    common.add_lr_correction_arguments(p)
    common.add_checkpoint_arguments(p, "run")
    common.add_output_arguments(p, "run", "gradflow_run", FILES)


def run(args) -> int:
    # The figure code is imported on a thread while the solve runs; the
    # command waits for it on every way out, so no import outlives the command
    # (CPython 3.11's parser state is not safe against a parse on another
    # thread: a test session that calls the command saw spurious SystemErrors).
    # With --animate or --netcdf the command imports the animation's and
    # xarray's modules on this thread before the solve: no preload then (two
    # threads would parse modules at once).
    extra = args.animate is not None or args.netcdf
    loader = None if args.no_figures or extra else preload_figures()
    try:
        return _run(args)
    finally:
        if loader is not None:
            loader.join()


def _run(args) -> int:
    import equinox as eqx

    import gradflow as gf

    interrupted = None
    try:
        choice = choose(args, "run")
        choice.fill_defaults(args, "run")
        ((problem, description),) = common.lr_corrected(args, choice.build())
        saveat, solver, options = common.flow_options(args)
        out = common.open_output(args, resuming=common.is_file(args.checkpoint))
        traj = gf.flow(
            problem,
            args.init_scale,
            seed=args.seed,
            t1=args.t1,
            saveat=saveat,
            solver=solver,
            run=options,
        )
    except INPUT_ERRORS as e:
        return fail(args, e)
    except gf.Interrupted as e:
        # Ctrl-C during the solve: keep what was computed (no figures)
        interrupted, traj = e, e.result
    plugin = choice.plugin
    trajectory = out.path("trajectory.npz")
    traj.save(trajectory)
    write_csv(
        out.path("stages.csv"),
        traj.stages,
        getattr(plugin, "STAGE_FIELDS", GENERIC_STAGE_FIELDS),
    )
    write_csv(
        out.path("events.csv"),
        traj.events,
        getattr(plugin, "EVENT_FIELDS", GENERIC_EVENT_FIELDS),
    )
    if interrupted is not None:
        out.finish()
        # the library's message up to its advice, which names Python's
        # `checkpoint=` (here: the flag)
        what = traj.message.split(";")[0]
        resume = (
            f"the checkpoint {interrupted.checkpoint} holds the state: run the same "
            "command to resume"
            if interrupted.checkpoint is not None
            else "not resumable (give --checkpoint PATH to be able to resume)"
        )
        print(
            f"gradflow run: {what}; the partial trajectory is in {trajectory}; "
            + resume,
            file=sys.stderr,
        )
        return 130
    print(f"problem: {description}")
    levels = levels_text(plugin, getattr(problem, "problem", problem))
    print(
        f"loss {traj.loss[0]:.6g} -> {traj.loss[-1]:.6g} at t = {traj.t_final:.6g}"
        + (f" ({levels})" if levels else "")
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
    if not args.no_figures:
        import gradflow.plot as plot

        # the original problem's figures, of the modified flow's points
        shown = traj
        if isinstance(traj.problem, gf.ModifiedLoss):
            shown = eqx.tree_at(lambda t: t.problem, traj, traj.problem.problem)
        out.record(*plot.plot_all(shown, out.root, title=description, pdf=args.pdf))
    common.write_analysis_outputs(traj, args, out, "trajectory")
    out.finish()
    print(f"wrote {out.names()} to {out.root}/")
    if not traj.ok:
        print(
            f"gradflow run: error: {traj.message} (the partial trajectory is in "
            f"{trajectory})",
            file=sys.stderr,
        )
        return 1
    return 0
