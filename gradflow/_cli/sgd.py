"""`gradflow sgd`: train the finite-context model with SGD on a chain or a text,
optionally next to the population flow from the same start.

Exit codes: 0 for a finished run; 1 when the run failed (a non-finite loss: the
partial run is saved into `--out` and the message printed); 2 for bad input
(one line on stderr); 130 when interrupted (Ctrl-C: the partial run is saved
into `--out`, the checkpoint, if any, resumes it).

Also home of the options shared with `gradflow run`: the text options
([`add_text_arguments`][], [`chain_from_text_args`][]) and the model variant
([`add_model_arguments`][], [`model_from_args`][]).
"""

import argparse
import json
import sys
from pathlib import Path

from .common import (
    LIBRARY_NAMES,
    add_chain_arguments,
    add_chunk_steps_argument,
    add_subcommand,
    chain_from_args,
    existing_path,
    fail,
    flag_names,
)
from .report import add_output_arguments, check_outputs, write_outputs


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds the model variant (`docs/variants.md`): `--heads H`, `--layers L`,
    `--value`, `--residual`, `--norm {none,rms,layer}` (default: the paper's
    model). Values are checked by [`model_from_args`][] (one-line errors)."""
    group = parser.add_argument_group(
        "model variant (default: the paper's one-layer model; docs/variants.md)"
    )
    group.add_argument(
        "--heads", default="1", metavar="H", help="attention heads per layer (>= 1)"
    )
    group.add_argument(
        "--layers", default="1", metavar="L", help="attention layers (1 or 2)"
    )
    group.add_argument("--value", action="store_true", help="a value matrix per head")
    group.add_argument("--residual", action="store_true", help="a residual stream")
    group.add_argument(
        "--norm",
        default="none",
        metavar="{none,rms,layer}",
        help="normalisation of each column before W1",
    )


def _int_flag(flag: str, text, low: int, high: int | None = None) -> int:
    try:
        value = int(str(text))
    except ValueError:
        value = None
    if value is None or value < low or (high is not None and value > high):
        bound = f">= {low}" if high is None else f"{low} or {high}"
        if high is not None and high - low > 1:
            bound = f"between {low} and {high}"
        raise ValueError(f"{flag} must be an integer {bound}, got {text!r}")
    return value


def model_from_args(args: argparse.Namespace):
    """The [`gradflow.Model`][] of [`add_model_arguments`][]'s flags; a
    `ValueError` naming the flag for a bad value."""
    import gradflow as gf

    heads = _int_flag("--heads", args.heads, 1)
    layers = _int_flag("--layers", args.layers, 1, gf.Model.MAX_LAYERS)
    norm = str(args.norm).lower()
    if norm not in ("none", "rms", "layer"):
        raise ValueError(f"--norm must be one of none, rms, layer, got {args.norm!r}")
    return gf.Model(
        heads=heads,
        layers=layers,
        value=bool(args.value),
        residual=bool(args.residual),
        norm=None if norm == "none" else norm,
    )


def add_text_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds `--text PATH`, `--vocab-size K`, `--level`, `--tail` and `--smoothing`.

    `--text` takes a path that must exist (a file, or a folder read
    recursively, see `gf.text.load`), or the keyword `builtin` for the built-in
    corpus; never a string of text (the Python API takes that).
    """
    group = parser.add_argument_group("real text (instead of a synthetic chain)")
    group.add_argument(
        "--text",
        metavar="PATH",
        default=None,
        help="an existing UTF-8 file or folder (WikiText wiki.train.raw, "
        "TinyStories .txt), or 'builtin' for Python's documentation topics; uses "
        "its bigram chain (default: none, a synthetic chain)",
    )
    group.add_argument(
        "--vocab-size",
        metavar="K",
        type=int,
        default=30,
        help="keep the K-1 most frequent tokens plus <other>",
    )
    group.add_argument(
        "--level",
        choices=("word", "char", "bpe"),
        default="word",
        help="tokenise by word, character, or byte-level BPE trained on the text "
        "to --vocab-size tokens",
    )
    group.add_argument(
        "--tail",
        choices=("other", "drop"),
        default="other",
        help="tokens outside the vocabulary: one <other> token, or removed from "
        "the stream",
    )
    group.add_argument(
        "--smoothing",
        type=_smoothing,
        default="auto",
        help="pseudo-count added to every bigram count, or 'auto' (pseudo-counts "
        "1 %% of the bigram counts)",
    )


def _smoothing(value: str):
    """`--smoothing`: 'auto' or a number (checked by `gf.text.encode`)."""
    if value == "auto":
        return value
    try:
        return float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--smoothing must be 'auto' or a number, got {value!r}"
        ) from None


def stream_from_text_args(args: argparse.Namespace):
    """The [`gradflow.text.TokenStream`][] named by the text options, or `None`
    when `--text` was not given. `--text` must name an existing path (or be
    `builtin`): a mistyped path is an error, never read as text."""
    if getattr(args, "text", None) is None:
        return None
    import gradflow.text as text

    source = None
    if args.text != "builtin":
        source = existing_path("--text", args.text, allow=("builtin",))
    return text.encode(
        source,
        args.vocab_size,
        level=args.level,
        smoothing=args.smoothing,
        tail=getattr(args, "tail", "other"),
        progress=not getattr(args, "no_progress", False),
    )


def text_description(args: argparse.Namespace) -> str:
    """One line naming the text options' corpus and settings, for output and
    figure titles."""
    corpus = "the built-in corpus" if args.text == "builtin" else f"'{args.text}'"
    return (
        f"bigram chain of {corpus} ({args.level} level, vocab size "
        f"{args.vocab_size}, tail {args.tail}, smoothing {args.smoothing})"
    )


def chain_from_text_args(args: argparse.Namespace):
    """The bigram [`gradflow.MarkovChain`][] named by the text options, or
    `None` when `--text` was not given."""
    stream = stream_from_text_args(args)
    return None if stream is None else stream.chain


def register(subparsers) -> None:
    parser = add_subcommand(
        subparsers,
        "sgd",
        help="SGD of the finite-context model, on the flow's time axis",
        description=(
            "Train the finite-context model (docs/model.md) with SGD on sequences of "
            "a Markov chain or windows of a text; log it at t = lr * step and score "
            "each saved iterate with the population loss. With --flow, also "
            "integrate the population flow from the same start and compare. With "
            "--out, write into that folder: sgd_run.npz (gradflow.load_sgd), "
            "command.json and, with --flow, trajectory.npz and the comparison "
            "figure compare.png/.pdf."
        ),
    )
    add_chain_arguments(parser)
    add_text_arguments(parser)
    add_model_arguments(parser)
    g = parser.add_argument_group("model and SGD")
    g.add_argument("--width", type=int, default=8, help="embedding width m")
    g.add_argument(
        "--init-scale",
        type=float,
        default=1e-3,
        help="standard deviation of the i.i.d. normal initialisation",
    )
    g.add_argument("--seed", type=int, default=0, help="initialisation and data seed")
    g.add_argument("--context", type=int, default=256, help="context length s")
    g.add_argument("--batch-size", type=int, default=512, help="sequences per step")
    g.add_argument("--lr", type=float, default=0.2, help="learning rate")
    g.add_argument("--t1", type=float, default=300.0, help="final time lr * steps")
    g.add_argument(
        "--num-sequences",
        type=int,
        default=None,
        help="a fixed dataset of N sequences (default: fresh ones each step)",
    )
    g.add_argument(
        "--optimizer",
        choices=("sgd", "momentum", "adam"),
        default="sgd",
        help="sgd, sgd with momentum 0.9, or adam at --lr",
    )
    g.add_argument(
        "--dtype",
        choices=("float64", "float32"),
        default="float64",
        help="floating-point type",
    )
    o = parser.add_argument_group("output")
    o.add_argument(
        "--out",
        metavar="DIR",
        type=Path,
        default=None,
        help="output folder for sgd_run.npz, command.json and, with --flow, "
        "trajectory.npz and compare.png/.pdf (default: none, nothing written)",
    )
    add_output_arguments(o, animate=False)
    o.add_argument(
        "--flow",
        action="store_true",
        help="also integrate the flow from the same start and compare",
    )
    o.add_argument(
        "--checkpoint",
        metavar="PATH",
        type=Path,
        default=None,
        help="checkpoint file (.npz) of the SGD run: written every "
        "--checkpoint-every seconds, at the end and on Ctrl-C; if it exists, the "
        "run resumes from it (the same command continues to the same result). "
        "With --flow, the flow is not checkpointed (default: none, not resumable)",
    )
    o.add_argument(
        "--checkpoint-every",
        metavar="SECONDS",
        type=float,
        default=120.0,
        help="seconds of wall time between checkpoint writes",
    )
    add_chunk_steps_argument(o, "2000")
    o.add_argument("--json", action="store_true", help="print the summary as JSON")
    o.add_argument("--no-figures", action="store_true", help="skip the figure")
    o.add_argument(
        "--no-progress",
        action="store_true",
        help="no progress bars (reading a text, SGD, the flow)",
    )
    parser.set_defaults(func=main, flags={**flag_names(parser), **LIBRARY_NAMES})


def _save_run(run, out: Path | None) -> Path | None:
    if out is None:
        return None
    out.mkdir(parents=True, exist_ok=True)
    return run.save(out / "sgd_run.npz")


def _summary_lines(run, chain, width: int, summary: dict) -> list[str]:
    """The printed summary: no Python reprs, one fact a line."""
    import gradflow as gf

    s = run.settings
    levels = gf.markov.entropy_bounds(chain)
    lines = [
        f"SGD of the finite-context model: d = {chain.d}, width {width}, "
        f"context {run.problem.context}, batch {s.batch_size}, lr "
        f"{s.lr:g}, t1 = {run.ts[-1]:g} ({run.stats.num_steps} steps in "
        f"{run.stats.wall_time:.1f} s)",
        f"population loss {run.population_loss[0]:.6f} -> "
        f"{run.population_loss[-1]:.6f} (log d = {levels['log_d']:.5f}, H(pi) = "
        f"{levels['unigram']:.5f}, conditional entropy "
        f"{levels['conditional']:.5f}); last mini-batch loss "
        f"{run.train_loss[-1]:.6f}",
    ]
    if "compare" in summary:
        c = summary["compare"]
        lines.append(
            f"against the flow: largest relative crossing-time error "
            f"{c['max_crossing_rel_error']:.3f}, mean |loss gap| after the first "
            f"drop {c['mean_abs_gap_after']:.5f} (max {c['max_abs_gap_after']:.4f})"
        )
    for key in ("saved", "figure"):
        if key in summary:
            value = summary[key]
            value = ", ".join(value) if isinstance(value, list) else value
            lines.append(f"wrote {value}")
    return lines


def main(args: argparse.Namespace) -> int:
    import jax
    import numpy as np
    import optax

    import gradflow as gf

    try:
        check_outputs(args, args.out)
    except (ValueError, ModuleNotFoundError) as e:
        return fail("sgd", e, args.flags)
    try:
        stream = stream_from_text_args(args)
        if stream is not None:
            source, chain = stream, stream.chain
            description = text_description(args)
        else:
            chain, description = chain_from_args(args)
            source = chain
        optimizer = {
            "sgd": None,
            "momentum": optax.sgd(args.lr, momentum=0.9),
            "adam": optax.adam(args.lr),
        }[args.optimizer]
        model = model_from_args(args)
        # the random start drawn by train_sgd (after its checks, so bad input
        # is refused before anything is compiled); the flow below starts from
        # the run's first saved point
        sgd = gf.SGD(
            args.lr,
            args.batch_size,
            optimizer=optimizer,
            num_sequences=args.num_sequences,
            dtype=args.dtype,
        )
        run = gf.train_sgd(
            source,
            init_scale=args.init_scale,
            seed=args.seed,
            t1=args.t1,
            sgd=sgd,
            run=gf.Run(
                progress=not args.no_progress,
                checkpoint=args.checkpoint,
                checkpoint_every=args.checkpoint_every,
                chunk_steps=args.chunk_steps,
            ),
            width=args.width,
            model=model,
            context=args.context,
        )
    except (ValueError, TypeError, FileNotFoundError) as e:
        return fail("sgd", e, args.flags)
    except gf.Interrupted as e:
        # The message starts "gradflow.train_sgd: interrupted at step k of n
        # (t = ...)"; the rest speaks of Python arguments, so say the same for
        # the command line.
        what = e.result.message.split(";")[0]
        where = [what.removeprefix("gradflow.train_sgd: ")]
        saved = _save_run(e.result, args.out)
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
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "command.json").write_text(
            json.dumps({"argv": sys.argv[1:]}, indent=1)
        )
    if not run.ok:
        saved = _save_run(run, args.out)
        where = f"; partial run saved to {saved}" if saved is not None else ""
        print(f"gradflow sgd: run failed: {run.message}{where}", file=sys.stderr)
        return 1
    summary = {
        "chain": description,
        "final_population_loss": float(run.population_loss[-1]),
        "final_train_loss": float(run.train_loss[-1]),
        "entropy_bounds": gf.markov.entropy_bounds(chain),
        "settings": run.settings.to_dict(),
        "stats": run.stats.to_dict(),
    }
    saved = _save_run(run, args.out)
    if saved is not None:
        extra = write_outputs(run, args, saved.parent, "sgd_run")
        summary["saved"] = ", ".join(str(p) for p in (saved, *extra))
    if args.flow:
        try:
            # the flow from the run's own start (in float64: with --dtype
            # float32 the run drew its start in float32)
            start = jax.tree.map(lambda x: np.asarray(x, np.float64), run.at(0))
            traj = gf.integrate(
                chain,
                params=start,
                t1=float(run.ts[-1]),
                saveat=gf.SaveAt(run.ts),
                run=gf.Run(progress=not args.no_progress),
            )
        except KeyboardInterrupt:
            where = f"; the SGD run is saved to {saved}" if saved is not None else ""
            print(f"gradflow sgd: interrupted during the flow{where}", file=sys.stderr)
            return 130
        cmp = gf.compare(traj, run)
        summary["compare"] = cmp.summary()
        if args.out is not None:
            traj.save(args.out / "trajectory.npz")
            if not args.no_figures:
                png, pdf = cmp.save_figure(args.out / "compare", title=description)[:2]
                summary["figure"] = [str(png), str(pdf)]
    if args.json:
        print(json.dumps(summary, indent=1, default=str))
    else:
        print("\n".join(_summary_lines(run, chain, args.width, summary)))
    return 0
