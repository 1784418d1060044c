"""`gradflow sgd`: train the finite-context model with SGD on a chain or a text,
optionally next to the population flow from the same start.

Exit codes: 0 for a finished run; 1 when the run failed (a non-finite loss: the
partial run is saved to `--out` and the message printed); 2 for bad input
(one line on stderr); 130 when interrupted (Ctrl-C: the partial run is saved
to `--out`, the checkpoint, if any, resumes it).

Also home of the options shared with `gradflow run`: the text options
([`add_text_arguments`][], [`chain_from_text_args`][]) and the model variant
([`add_model_arguments`][], [`model_from_args`][]).
"""

import argparse
import json
import sys
from pathlib import Path


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds the model variant of SPEC section 9: `--heads H`, `--layers L`,
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

    from ..problems._markov.variants import MAX_LAYERS

    heads = _int_flag("--heads", args.heads, 1)
    layers = _int_flag("--layers", args.layers, 1, MAX_LAYERS)
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

    `--text builtin` uses the built-in corpus (Python's documentation topics);
    a folder is read recursively (see `gf.text.load`).
    """
    group = parser.add_argument_group("real text (instead of a synthetic chain)")
    group.add_argument(
        "--text",
        metavar="PATH",
        default=None,
        help="a UTF-8 file or folder (WikiText wiki.train.raw, TinyStories .txt), or "
        "'builtin' for Python's documentation topics; uses its bigram chain",
    )
    group.add_argument(
        "--vocab-size",
        metavar="K",
        type=int,
        default=30,
        help="keep the K-1 most frequent tokens plus <other> (default 30)",
    )
    group.add_argument(
        "--level",
        choices=("word", "char", "bpe"),
        default="word",
        help="tokenise by word (default), character, or byte-level BPE trained on "
        "the text to --vocab-size tokens",
    )
    group.add_argument(
        "--tail",
        choices=("other", "drop"),
        default="other",
        help="tokens outside the vocabulary: one <other> token (default) or "
        "removed from the stream",
    )
    group.add_argument(
        "--smoothing",
        type=_smoothing,
        default="auto",
        help="pseudo-count added to every bigram count, or 'auto' (default: "
        "pseudo-counts 1 %% of the bigram counts)",
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
    when `--text` was not given."""
    if getattr(args, "text", None) is None:
        return None
    from .. import text

    return text.encode(
        None if args.text == "builtin" else args.text,
        args.vocab_size,
        level=args.level,
        smoothing=args.smoothing,
        tail=getattr(args, "tail", "other"),
    )


def chain_from_text_args(args: argparse.Namespace):
    """The bigram [`gradflow.MarkovChain`][] named by the text options, or
    `None` when `--text` was not given."""
    stream = stream_from_text_args(args)
    return None if stream is None else stream.chain


def _add_chain_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("synthetic chain (when --text is not given)")
    group.add_argument(
        "--chain", choices=("sticky", "zipf", "random"), default="sticky"
    )
    group.add_argument("--d", type=int, default=6, help="vocabulary size (default 6)")
    group.add_argument(
        "--top-mass", type=float, default=0.5, help="sticky: pi of token 0"
    )
    group.add_argument(
        "--rho", type=float, default=0.5, help="sticky/zipf: repeat prob."
    )
    group.add_argument("--delta", type=float, default=0.05, help="sticky: asymmetry")
    group.add_argument(
        "--exponent", type=float, default=1.0, help="zipf/random: exponent"
    )
    group.add_argument("--chain-seed", type=int, default=0, help="random: seed of P")


def _chain_from_args(args):
    from .. import chains

    if args.chain == "sticky":
        return chains.sticky(args.d, args.top_mass, args.rho, args.delta)
    if args.chain == "zipf":
        return chains.zipf(args.d, args.exponent, args.rho)
    return chains.random(args.d, seed=args.chain_seed, exponent=args.exponent)


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "sgd",
        help="SGD of the finite-context model, on the flow's time axis",
        description=(
            "Train the finite-context model (SPEC section 2) with SGD on sequences of "
            "a Markov chain or windows of a text; log it at t = lr * step and score "
            "each saved iterate with the population loss. With --flow, also "
            "integrate the population flow from the same start and compare."
        ),
    )
    _add_chain_arguments(parser)
    add_text_arguments(parser)
    add_model_arguments(parser)
    g = parser.add_argument_group("model and SGD")
    g.add_argument("--width", type=int, default=8, help="embedding width m (default 8)")
    g.add_argument("--init-scale", type=float, default=1e-3)
    g.add_argument("--seed", type=int, default=0, help="initialisation and data seed")
    g.add_argument("--context", type=int, default=256)
    g.add_argument("--batch-size", type=int, default=512)
    g.add_argument("--lr", type=float, default=0.2)
    g.add_argument("--t1", type=float, default=300.0)
    g.add_argument(
        "--num-sequences",
        type=int,
        default=None,
        help="fixed dataset of N sequences (default: fresh ones each step)",
    )
    g.add_argument(
        "--optimizer",
        choices=("sgd", "momentum", "adam"),
        default="sgd",
        help="sgd (default), sgd with momentum 0.9, or adam at --lr",
    )
    g.add_argument("--dtype", choices=("float64", "float32"), default="float64")
    o = parser.add_argument_group("output")
    o.add_argument("--out", metavar="PATH", default=None, help="save the run (.npz)")
    o.add_argument(
        "--flow",
        action="store_true",
        help="also integrate the flow from the same start and compare",
    )
    o.add_argument(
        "--figure",
        metavar="PATH",
        default=None,
        help="with --flow: write the comparison figure (PATH.png and .pdf)",
    )
    o.add_argument(
        "--checkpoint",
        metavar="PATH",
        default=None,
        help="checkpoint file (.npz) of the SGD run: written every "
        "--checkpoint-every seconds, at the end and on Ctrl-C; if it exists, the "
        "run resumes from it (the same command continues to the same result). "
        "With --flow, the flow is not checkpointed",
    )
    o.add_argument(
        "--checkpoint-every",
        metavar="SECONDS",
        type=float,
        default=120.0,
        help="seconds between checkpoint writes (default 120)",
    )
    o.add_argument("--json", action="store_true", help="print the summary as JSON")
    o.add_argument("--no-progress", action="store_true")
    parser.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    import optax

    import gradflow as gf

    try:
        if args.figure and not args.flow:
            raise ValueError("--figure needs --flow (the figure overlays flow and SGD)")
        stream = stream_from_text_args(args)
        source = stream if stream is not None else _chain_from_args(args)
        chain: gf.MarkovChain = (  # pyright: ignore[reportAssignmentType]
            source.chain  # pyright: ignore[reportAttributeAccessIssue]
            if stream is not None
            else source
        )
        optimizer = {
            "sgd": None,
            "momentum": optax.sgd(args.lr, momentum=0.9),
            "adam": optax.adam(args.lr),
        }[args.optimizer]
        model = model_from_args(args)
        params0 = gf.init_params(
            chain.d, args.width, args.init_scale, args.seed, model=model
        )
        run = gf.train_sgd(
            source,
            params0,
            seed=args.seed,
            context=args.context,
            batch_size=args.batch_size,
            lr=args.lr,
            t1=args.t1,
            num_sequences=args.num_sequences,
            optimizer=optimizer,
            progress=not args.no_progress,
            dtype=args.dtype,
            checkpoint=args.checkpoint,
            checkpoint_every=args.checkpoint_every,
        )
    except (ValueError, TypeError, FileNotFoundError) as e:
        print(f"gradflow sgd: error: {e}", file=sys.stderr)
        return 2
    except gf.Interrupted as e:
        # The message starts "gradflow.train_sgd: interrupted at step k of n
        # (t = ...)"; the rest speaks of Python arguments, so say the same for
        # the command line.
        what = e.result.message.split(";")[0]
        where = [what.removeprefix("gradflow.train_sgd: ")]
        if args.out:
            where.append(f"partial run saved to {e.result.save(Path(args.out))}")
        else:
            where.append("partial run not saved (no --out)")
        if e.checkpoint is not None:
            where.append(f"checkpoint {e.checkpoint}: run the same command to resume")
        else:
            where.append("not resumable (no --checkpoint)")
        print("gradflow sgd: " + "; ".join(where), file=sys.stderr)
        return 130
    if not run.ok:
        saved = f"; partial run saved to {run.save(Path(args.out))}" if args.out else ""
        print(f"gradflow sgd: run failed: {run.message}{saved}", file=sys.stderr)
        return 1
    summary = {
        "run": repr(run),
        "final_population_loss": float(run.population_loss[-1]),
        "final_train_loss": float(run.train_loss[-1]),
        "entropy_bounds": gf.entropy_bounds(chain),
        "stats": run.stats,
    }
    if args.out:
        summary["saved"] = str(run.save(Path(args.out)))
    if args.flow:
        try:
            traj = gf.integrate(
                chain,
                params=params0,
                t1=float(run.ts[-1]),
                ts=run.ts,
                progress=not args.no_progress,
            )
        except KeyboardInterrupt:
            saved = f"; the SGD run is saved to {summary['saved']}" if args.out else ""
            print(f"gradflow sgd: interrupted during the flow{saved}", file=sys.stderr)
            return 130
        cmp = gf.compare(traj, run)
        summary["compare"] = cmp.summary()
        if args.figure:
            png, pdf = cmp.save_figure(args.figure, title=repr(chain))
            summary["figure"] = [str(png), str(pdf)]
    if args.json:
        print(json.dumps(summary, indent=1, default=str))
    else:
        print(run)
        print(
            f"population loss {run.population_loss[0]:.6f} -> "
            f"{run.population_loss[-1]:.6f}; bounds {summary['entropy_bounds']}"
        )
        print(f"{run.stats['num_steps']} steps in {run.stats['wall_time']:.1f} s")
        if args.flow:
            c = summary["compare"]
            print(
                f"vs flow: max rel. crossing-time error "
                f"{c['max_crossing_rel_error']:.3f}, mean |loss gap| after the first "
                f"drop {c['mean_abs_gap_after']:.5f} (max {c['max_abs_gap_after']:.4f})"
            )
        for key in ("saved", "figure"):
            if key in summary:
                print(f"{key}: {summary[key]}")
    return 0
