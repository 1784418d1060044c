"""What every `gradflow` subcommand shares: the parser class (negative numbers
such as `-1e-3` are values, not flags), the help formatter (every default
shown once), input paths that must exist, and errors that name the flag the
user typed instead of the Python argument behind it."""

import argparse
import os
import re
import sys
from pathlib import Path


# argparse reads "-1e-3" as an unknown flag (its pattern for negative numbers
# has no exponent), so `--init-scale -1e-3` failed with "expected one
# argument" instead of reaching the check that says what is wrong.
_NEGATIVE_NUMBER = re.compile(r"^-(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$|^-(inf|nan)$")


class Parser(argparse.ArgumentParser):
    """`argparse.ArgumentParser` that takes `-1e-3` and `-inf` as values, takes
    no abbreviation of a flag, and whose subparsers are of the same class."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", HelpFormatter)
        # no guessing: `--vocab 3` is not taken for `--vocab-size 3`
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)
        self._negative_number_matcher = _NEGATIVE_NUMBER


class HelpFormatter(argparse.HelpFormatter):
    """Appends `(default: X)` to an option's help unless the help already
    says its default (every option whose default is not obvious says it once:
    a flag's default is off, and an option without a value says in its help
    what happens without it)."""

    def _get_help_string(self, action):
        text = action.help or ""
        if (
            "default" in text.lower()
            or not action.option_strings
            or action.default is None
            or action.default is False
            or action.default == argparse.SUPPRESS
            or action.nargs == 0
        ):
            return text
        return f"{text} (default: %(default)s)"


def add_subcommand(subparsers, name: str, **kwargs) -> Parser:
    """`subparsers.add_parser(name, ...)` with gradflow's parser class and
    help formatter."""
    kwargs.setdefault("formatter_class", HelpFormatter)
    return subparsers.add_parser(name, **kwargs)


def existing_path(flag: str, value, *, allow: tuple[str, ...] = ()) -> Path:
    """`value` as a `Path` that exists (a file or a folder), or a one-line
    `FileNotFoundError` naming `flag`. A value in `allow` (e.g. `builtin`) is
    a keyword, not a path, and is refused here: test for it first."""
    path = Path(os.fspath(value)).expanduser()
    if str(value) in allow:
        raise ValueError(f"{flag}: {value!r} is a keyword, not a path")
    if not str(value).strip() or not path.exists():
        also = f" (or {', '.join(repr(a) for a in allow)})" if allow else ""
        raise FileNotFoundError(
            f"{flag}: no such file or folder: '{path}'; give an existing path{also}"
        )
    return path


def flag_names(parser: argparse.ArgumentParser) -> dict[str, str]:
    """Each Python argument name a subcommand's options stand for, with the
    flag that sets it: `{"init_scale": "--init-scale", ...}`."""
    out = {}
    for action in parser._actions:
        longs = [s for s in action.option_strings if s.startswith("--")]
        if longs:
            out[action.dest] = longs[0]
    return out


def speak_flags(message: str, names: dict[str, str]) -> str:
    """`message` with the Python argument names it starts a clause with
    (`init_scale must ...`, `vocab_size = 64 is ...`, `path_or_text: no such
    file`) replaced by the flags in `names` (from [`flag_names`][]); a name of
    one letter (`d`, a word in messages) only at the start of the message."""
    for name, flag in sorted(names.items(), key=lambda kv: -len(kv[0])):
        # where a clause starts: the message, after "; ", "got " or "(";
        # a one-letter name (`d`) only at the start of the message
        start = "^" if len(name) == 1 else r"(?:^|(?<=; )|(?<=got )|(?<=\())"
        message = re.sub(
            rf"{start}{re.escape(name)}(?=( must| =| is | has |: | needs))",
            flag,
            message,
        )
    return message


def fail(command: str, error: BaseException | str, names: dict[str, str]) -> int:
    """Prints `gradflow COMMAND: error: MESSAGE` (one line, flags named as
    typed) on stderr and returns 2, the exit status for bad input."""
    message = speak_flags(str(error), names)
    print(f"gradflow {command}: error: {message}", file=sys.stderr)
    return 2


# Python argument names in the library's messages that no option's `dest`
# spells: the text to read is `path_or_text` in `gradflow.text`.
LIBRARY_NAMES = {"path_or_text": "--text"}


# -- the synthetic chain (run and sgd) ------------------------------------------

CHAIN_DEFAULTS = {
    "chain": "sticky",
    "d": 6,
    "top_mass": 0.5,
    "rho": 0.5,
    "delta": 0.05,
    "exponent": 1.0,
    "concentration": 1.0,
    "chain_seed": 0,
}


def add_chain_arguments(parser: argparse.ArgumentParser) -> None:
    """The chain: a family and its parameters, or a transition matrix (the
    same flags in `run` and `sgd`)."""
    g = parser.add_argument_group("chain (when --text is not given)")
    g.add_argument(
        "--chain",
        choices=("sticky", "random", "zipf"),
        default=CHAIN_DEFAULTS["chain"],
        help="chain family (ignored with --transition-matrix)",
    )
    g.add_argument(
        "--transition-matrix",
        metavar="FILE.npy",
        default=None,
        help="a (d, d) row-stochastic matrix saved with numpy.save, instead of "
        "--chain (default: none, the --chain family)",
    )
    g.add_argument("--d", type=int, default=CHAIN_DEFAULTS["d"], help="vocabulary size")
    g.add_argument(
        "--top-mass",
        type=float,
        default=CHAIN_DEFAULTS["top_mass"],
        help="sticky: stationary probability of token 0",
    )
    g.add_argument(
        "--rho",
        type=float,
        default=CHAIN_DEFAULTS["rho"],
        help="sticky, zipf: extra probability of repeating the current token",
    )
    g.add_argument(
        "--delta",
        type=float,
        default=CHAIN_DEFAULTS["delta"],
        help="sticky: asymmetry among the rare tokens (0: exactly symmetric)",
    )
    g.add_argument(
        "--exponent",
        type=float,
        default=CHAIN_DEFAULTS["exponent"],
        help="zipf, random: Zipf exponent",
    )
    g.add_argument(
        "--concentration",
        type=float,
        default=CHAIN_DEFAULTS["concentration"],
        help="random: Dirichlet concentration of each row",
    )
    g.add_argument(
        "--chain-seed",
        type=int,
        default=CHAIN_DEFAULTS["chain_seed"],
        help="random: seed of the chain",
    )


def chain_from_args(args: argparse.Namespace):
    """`(chain, description)` of [`add_chain_arguments`][]'s flags."""
    import numpy as np

    import gradflow as gf

    if args.transition_matrix is not None:
        path = existing_path("--transition-matrix", args.transition_matrix)
        if path.is_dir():
            raise ValueError(
                f"--transition-matrix: '{path}' is a folder, not a .npy file"
            )
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
            f"sticky(d={args.d}, top_mass={args.top_mass:g}, rho={args.rho:g}, "
            f"delta={args.delta:g})",
        )
    if args.chain == "zipf":
        return (
            gf.chains.zipf(args.d, args.exponent, args.rho),
            f"zipf(d={args.d}, exponent={args.exponent:g}, rho={args.rho:g})",
        )
    return (
        gf.chains.random(
            args.d,
            seed=args.chain_seed,
            concentration=args.concentration,
            exponent=args.exponent,
        ),
        f"random(d={args.d}, seed={args.chain_seed}, "
        f"concentration={args.concentration:g}, exponent={args.exponent:g})",
    )


def add_chunk_steps_argument(parser, default: str) -> None:
    """`--chunk-steps N`, [`gradflow.Run`][]'s `chunk_steps`: the same flag in
    every subcommand that runs a loop of compiled chunks; `default` says its
    default there."""
    parser.add_argument(
        "--chunk-steps",
        metavar="N",
        type=int,
        default=None,
        help="steps per compiled chunk: how often the host looks in (progress, "
        "Ctrl-C, checkpoints); the results do not depend on it "
        f"(default: {default})",
    )


def flow_options(args: argparse.Namespace):
    """`(saveat, solver, run)` of the flow options every subcommand that
    solves a flow shares (`--t1`, `--num-saves`, `--solver`, `--rtol`,
    `--atol`, `--max-steps`, `--no-stages`, `--no-progress`, `--checkpoint`,
    `--checkpoint-every`, `--chunk-steps`): the library's [`gradflow.SaveAt`][],
    [`gradflow.Solver`][] and [`gradflow.Run`][]."""
    import gradflow as gf

    num_saves = getattr(args, "num_saves", None)
    ts = None
    if num_saves is not None:
        if num_saves < 2:
            raise ValueError(f"--num-saves must be at least 2, got {num_saves}")
        if args.t1 > 0:
            ts = gf.default_save_times(args.t1, num_saves)
    saveat = gf.SaveAt(ts, stages=not getattr(args, "no_stages", False))
    extra = {}
    if getattr(args, "max_steps", None) is not None:
        extra["max_steps"] = args.max_steps
    solver = gf.Solver(
        getattr(args, "solver", None),
        rtol=getattr(args, "rtol", None),
        atol=getattr(args, "atol", None),
        **extra,
    )
    run = gf.Run(
        progress=not getattr(args, "no_progress", False),
        checkpoint=getattr(args, "checkpoint", None),
        checkpoint_every=getattr(args, "checkpoint_every", 120.0),
        chunk_steps=getattr(args, "chunk_steps", None),
    )
    return saveat, solver, run
