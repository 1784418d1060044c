"""`gradflow run`: integrate a scenario, locate its stages, write files and figures."""

import argparse
import csv
import json
import sys
from pathlib import Path

import numpy as np

from .preload import preload_figures
from .sgd import (
    add_model_arguments,
    add_text_arguments,
    chain_from_text_args,
    model_from_args,
)


DEFAULTS = {
    "chain": "sticky",
    "d": 6,
    "top_mass": 0.5,
    "rho": 0.5,
    "delta": 0.05,
    "width": 8,
    "init_scale": 1e-3,
    "t1": 5_000.0,
}

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
    p = subparsers.add_parser(
        "run",
        help="integrate a scenario, find its stages, write files and figures",
        description=(
            "Integrate the population gradient flow of one scenario, locate its "
            "saddles while solving and its stages (condensation, focus, dilution, "
            "new_direction) from the saved points, print a stage table, and write "
            "into --out: "
            "trajectory.npz, stages.csv, events.csv and the figures (summary, "
            "embedding PCA, attention at the stage boundaries; PNG, and PDF with "
            "--pdf). "
            "The defaults run the paper-like scenario sticky(6, 0.5, 0.5, 0.05), "
            "width 8, init scale 1e-3, through two full cycles (t1 = 5000); "
            "--t1 20000 follows the loss down to the conditional entropy. "
            "Compiled solves are kept in JAX's persistent compilation cache "
            "(~/.cache/gradflow/jax, or $JAX_COMPILATION_CACHE_DIR), so a second "
            "run of the same shapes starts without compiling."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    _add_chain_arguments(p)
    add_text_arguments(p)
    add_model_arguments(p)
    _add_flow_arguments(p)
    _add_checkpoint_arguments(p)
    _add_output_arguments(p)
    p.set_defaults(func=run)


def _add_chain_arguments(parser: argparse.ArgumentParser) -> None:
    """The chain: a family and its parameters, or a transition matrix."""
    g = parser.add_argument_group("chain")
    g.add_argument(
        "--chain",
        choices=("sticky", "random", "zipf"),
        default=DEFAULTS["chain"],
        help="chain family (ignored with --transition-matrix)",
    )
    g.add_argument(
        "--transition-matrix",
        metavar="FILE.npy",
        type=Path,
        default=None,
        help="a (d, d) row-stochastic matrix saved with numpy.save, instead of --chain",
    )
    g.add_argument("--d", type=int, default=DEFAULTS["d"], help="vocabulary size")
    g.add_argument(
        "--top-mass",
        type=float,
        default=DEFAULTS["top_mass"],
        help="sticky: stationary probability of token 0",
    )
    g.add_argument(
        "--rho",
        type=float,
        default=DEFAULTS["rho"],
        help="sticky, zipf: extra probability of repeating the current token",
    )
    g.add_argument(
        "--delta",
        type=float,
        default=DEFAULTS["delta"],
        help="sticky: asymmetry among the rare tokens (0: exactly symmetric)",
    )
    g.add_argument(
        "--exponent", type=float, default=1.0, help="zipf, random: Zipf exponent"
    )
    g.add_argument(
        "--concentration",
        type=float,
        default=1.0,
        help="random: Dirichlet concentration of each row",
    )
    g.add_argument(
        "--chain-seed", type=int, default=0, help="random: seed of the chain"
    )


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
        help="solver name (see gradflow.SOLVERS); default: gradflow's default solver",
    )
    g.add_argument("--rtol", type=float, default=None, help="relative tolerance")
    g.add_argument(
        "--atol",
        type=float,
        default=None,
        help="absolute tolerance (default tied to the initial scale)",
    )
    g.add_argument(
        "--saves",
        type=int,
        default=798,
        help="number of save times (0, then log-spaced)",
    )
    g.add_argument(
        "--max-steps",
        type=int,
        default=None,
        help="the most solver steps (default gradflow's); the partial trajectory "
        "is saved if they run out",
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
        "docs/reliability.md)",
    )
    g.add_argument(
        "--checkpoint-every",
        metavar="SECONDS",
        type=float,
        default=120.0,
        help="seconds of wall time between checkpoint writes",
    )


def _add_output_arguments(parser: argparse.ArgumentParser) -> None:
    """Where the files go; figures and progress bar on or off."""
    g = parser.add_argument_group("output")
    g.add_argument(
        "--out", type=Path, default=Path("gradflow_run"), help="output directory"
    )
    g.add_argument("--no-figures", action="store_true", help="skip the figures")
    g.add_argument("--pdf", action="store_true", help="also write the figures as PDF")
    g.add_argument("--no-progress", action="store_true", help="no progress bar")


def _chain(args):
    import gradflow as gf

    text_chain = chain_from_text_args(args)
    if text_chain is not None:
        return text_chain, (
            f"bigram chain of {args.text} ({args.level} level, vocab_size "
            f"{args.vocab_size}, smoothing {args.smoothing})"
        )
    if args.transition_matrix is not None:
        path = args.transition_matrix
        if not path.exists():
            raise ValueError(f"--transition-matrix: no such file: '{path}'")
        try:
            P = np.load(path, allow_pickle=False)
        except Exception as e:
            raise ValueError(
                f"--transition-matrix: could not read '{path}' as a .npy array: {e}"
            ) from None
        return gf.MarkovChain(P), f"transition matrix from {path}"
    if args.chain == "sticky":
        chain = gf.chains.sticky(args.d, args.top_mass, args.rho, args.delta)
        return (
            chain,
            f"sticky(d={args.d}, top_mass={args.top_mass}, rho={args.rho}, "
            f"delta={args.delta})",
        )
    if args.chain == "zipf":
        return (
            gf.chains.zipf(args.d, args.exponent, args.rho),
            f"zipf(d={args.d}, exponent={args.exponent}, rho={args.rho})",
        )
    return (
        gf.chains.random(
            args.d,
            seed=args.chain_seed,
            concentration=args.concentration,
            exponent=args.exponent,
        ),
        f"random(d={args.d}, seed={args.chain_seed}, "
        f"concentration={args.concentration}, "
        f"exponent={args.exponent})",
    )


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


def format_stage_table(stages) -> str:
    """A plain-text table of stage records."""
    lines = [
        f"{'stage':<14} {'cycle':>5} {'t_start':>10} {'t_end':>10} "
        f"{'loss_start':>10} {'loss_end':>10}  tokens"
    ]
    for s in stages:
        tokens = ",".join(s.token_labels)
        flag = "" if s.complete else "  (still open at t1)"
        lines.append(
            f"{s.name:<14} {s.cycle:>5} "
            f"{s.t_start:>10.4g} {s.t_end:>10.4g} "
            f"{s.loss_start:>10.5f} {s.loss_end:>10.5f}  {tokens}{flag}"
        )
    return "\n".join(lines)


def run(args) -> int:
    import gradflow as gf

    interrupted = None
    if not args.no_figures:
        preload_figures()  # imported while the solve runs
    try:
        chain, description = _chain(args)
        model = model_from_args(args)
        if args.saves < 2:
            raise ValueError(f"--saves must be at least 2, got {args.saves}")
        ts = gf.default_save_times(args.t1, args.saves) if args.t1 > 0 else None
        extra = {} if args.max_steps is None else {"max_steps": args.max_steps}
        traj = gf.integrate(
            chain,
            args.init_scale,
            width=args.width,
            t1=args.t1,
            ts=ts,
            seed=args.seed,
            solver=args.solver,
            rtol=args.rtol,
            atol=args.atol,
            progress=not args.no_progress,
            checkpoint=args.checkpoint,
            checkpoint_every=args.checkpoint_every,
            model=model,
            **extra,
        )
    except (ValueError, TypeError, FileNotFoundError) as e:
        print(f"gradflow run: error: {e}", file=sys.stderr)
        return 2
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
    levels = gf.entropy_bounds(chain)
    print(f"chain: {description}; model: {model.label}")
    print(
        f"loss {traj.loss[0]:.5f} -> {traj.loss[-1]:.5f} at t = {traj.t_final:.6g} "
        f"(log d = {levels['log_d']:.5f}, H(pi) = {levels['unigram']:.5f}, "
        f"conditional entropy = {levels['conditional']:.5f})"
    )
    resumed = traj.stats.get("resumed_from")
    print(
        f"{traj.stats['num_steps']} steps, {len(traj.events)} events, "
        f"{traj.stats['wall_time']:.1f} s"
        + (
            ""
            if resumed is None
            else f" (resumed from the checkpoint at t = {resumed:.6g})"
        )
    )
    print(format_stage_table(traj.stages))
    written = ["trajectory.npz", "stages.csv", "events.csv"]
    if not args.no_figures:
        from .. import plot

        written += [p.name for p in plot.plot_all(traj, out, pdf=args.pdf)]
    print(f"wrote {', '.join(written)} to {out}/")
    if not traj.ok:
        print(
            f"gradflow run: error: {traj.message} (the partial trajectory is in "
            f"{out / 'trajectory.npz'})",
            file=sys.stderr,
        )
        return 1
    return 0
