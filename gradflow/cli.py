"""The `gradflow` command line.

Each subcommand lives in its own module `gradflow/_cli/<name>.py` exposing
`register(subparsers)`, which adds its parser and sets `func` (a function of
the parsed arguments returning an exit code). List it in `_COMMANDS`.
"""

import argparse
import importlib
import os
import sys
from pathlib import Path


_COMMANDS: tuple[str, ...] = ("run", "sgd", "sweep", "theory", "report")


def build_parser() -> argparse.ArgumentParser:
    from ._cli.common import Parser

    parser = Parser(
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
        importlib.import_module(f"gradflow._cli.{name}").register(subparsers)
    return parser


def compilation_cache_dir() -> Path:
    """Where the command line keeps JAX's persistent compilation cache:
    `$JAX_COMPILATION_CACHE_DIR` if set, else `gradflow/jax` under the user's
    cache folder (`$XDG_CACHE_HOME`, by default `~/.cache`)."""
    env = os.environ.get("JAX_COMPILATION_CACHE_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join("~", ".cache")
    return Path(base).expanduser() / "gradflow" / "jax"


def enable_compilation_cache() -> Path:
    """Turns on JAX's persistent compilation cache (see
    [`compilation_cache_dir`][]): a second `gradflow run` of the same shapes
    loads the compiled solve instead of compiling it again. Unless
    `EQX_ON_ERROR` is set, Equinox's run-time checks return NaN instead of
    raising (a raising check is a host callback, which the cache cannot
    store). Returns the folder."""
    import jax

    if "EQX_ON_ERROR" not in os.environ:
        # Equinox's run-time checks (`eqx.error_if`, used inside Diffrax) raise
        # through a host callback, and JAX's persistent cache does not store a
        # compilation holding one. Under `nan` they give NaN instead (the same
        # as `EQX_ON_ERROR=nan`), which gradflow reports as a failed solve
        # (`ok=False` and a message): every input is checked before compiling.
        import equinox._errors

        setattr(equinox._errors, "EQX_ON_ERROR", "nan")  # noqa: B010
    path = compilation_cache_dir()
    path.mkdir(parents=True, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", str(path))
    # Cache every compilation that took longer than this (JAX's default, 1 s,
    # would leave out the many small functions a run also compiles).
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.1)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    # The traced solve too (`gradflow/_loop/exported.py`): a warm start
    # loads it instead of tracing it again.
    from ._loop import exported

    exported.enable(path / "gradflow-export")
    return path


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "func", None) is None:
        parser.print_help()
        return 2
    enable_compilation_cache()
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
