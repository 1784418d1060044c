"""The `gradflow` command line.

Each subcommand lives in its own module `gradflow._cli_<name>.py` exposing
`register(subparsers)`, which adds its parser and sets `func` (a function of
the parsed arguments returning an exit code). List it in `_COMMANDS`.
"""

import argparse
import importlib
import sys


_COMMANDS: tuple[str, ...] = ("run", "sgd", "theory")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gradflow",
        description=(
            "Population gradient flow of a one-layer Transformer on Markov-chain "
            "data: integrate it, find its stages, compare with SGD."
        ),
    )
    from . import __version__

    parser.add_argument(
        "--version", action="version", version=f"gradflow {__version__}"
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in _COMMANDS:
        importlib.import_module(f"gradflow._cli_{name}").register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "func", None) is None:
        parser.print_help()
        return 2
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
