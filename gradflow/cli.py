"""The `gradflow` command line.

Each subcommand lives in its own module `gradflow/_cli/<name>.py` exposing
`register(subparsers)`, which adds its parser and sets `func` (a function of
the parsed arguments returning an exit code). List it in `_COMMANDS`.
"""

import argparse
import importlib
import os
import signal
import sys
from pathlib import Path


_COMMANDS: tuple[str, ...] = ("run", "sgd", "sweep", "theory", "report")


def build_parser() -> argparse.ArgumentParser:
    from ._cli.common import Parser

    parser = Parser(
        prog="gradflow",
        description=(
            "Population gradient flows: of the paper's one-layer Transformer on "
            "Markov-chain data (the default), of a deep linear network, a soft "
            "committee machine, in-context regression, or a problem of your own "
            "(--problem): integrate one (run) or many (sweep), find their stages, "
            "train them with SGD (sgd), and compare the theory with a run (theory)."
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
    # Cache every compilation, however short (JAX's default keeps those over
    # 1 s): a run also compiles some 27 small programs, each op of the
    # driver's and the analysis' eager arithmetic (10-90 ms each), which a
    # warm start now reads back instead of compiling again
    # (docs/performance.md, "Everyday speed"). A floor set in the environment
    # wins: the test suite keeps 0.1 s, as its thousands of tiny programs
    # cost more through the locked shared cache than compiled.
    if "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS" not in os.environ:
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    # The traced solve too (`gradflow/_loop/exported.py`): a warm start
    # loads it instead of tracing it again.
    from ._loop import exported

    exported.enable(path / "gradflow-export")
    return path


# The arguments of the command this process runs (for the Ctrl-C handler of
# `run_process`).
_RUNNING = argparse.Namespace(command=None)


def _interrupted(args) -> str:
    """What a Ctrl-C outside the solve's loop interrupted, in one line."""
    out = getattr(args, "output", None)
    if out is not None and out.written:
        return f"while writing the results (wrote {out.names()} to {out.folder}/)"
    return "before the solve started; nothing was written"


def main(argv: list[str] | None = None) -> int:
    """Runs the command line `argv` (default: `sys.argv[1:]`) and returns its
    exit status: 0 done, 1 a failed run (its partial results written), 2 bad
    input (one line naming the flag), 130 interrupted by Ctrl-C (one line;
    during a solve, what was computed is written and a checkpoint resumes it).
    No traceback: an unexpected error is one line too, unless
    `GRADFLOW_TRACEBACK=1` asks for the traceback."""
    from ._cli.common import MisplacedFlag

    args = argparse.Namespace(command=None)
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        # the command line as given, for the command.json of --out
        args.argv = list(sys.argv[1:] if argv is None else argv)
        global _RUNNING
        _RUNNING = args
        if getattr(args, "func", None) is None:
            parser.print_help()
            return 2
        from ._loop import exported

        # The exported programs are the command's own: a library call made
        # later in this process (a notebook that ran `main`, the tests) takes
        # `jax.jit`'s path again, and shares its compilations with other
        # library calls (an exported program compiles under another name).
        previous = exported.folder()
        enable_compilation_cache()
        try:
            return int(args.func(args) or 0)
        finally:
            exported.enable(previous)
    except MisplacedFlag as e:  # a flag of another command: one line
        print(e, file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        # Ctrl-C outside a solve's loop of chunks (a solve reports its own):
        # while importing, tracing, compiling or writing files
        command = f"gradflow {args.command}" if args.command else "gradflow"
        print(f"{command}: interrupted (Ctrl-C) {_interrupted(args)}", file=sys.stderr)
        return 130
    except Exception as e:
        if os.environ.get("GRADFLOW_TRACEBACK"):
            raise
        command = f"gradflow {args.command}" if args.command else "gradflow"
        message = " ".join(str(e).split())
        code = 2 if isinstance(e, (ValueError, TypeError)) else 1
        print(
            f"{command}: error: {type(e).__name__}: {message} (GRADFLOW_TRACEBACK=1 "
            "shows where)",
            file=sys.stderr,
        )
        return code


def _exit_now(signum, frame) -> None:
    """Ctrl-C outside a solve's loop of chunks: one line, exit status 130,
    at once (a `KeyboardInterrupt` raised inside JAX's tracing or a
    collector callback could be swallowed, or turned into another error)."""
    del signum, frame
    args = _RUNNING
    command = f"gradflow {args.command}" if args.command else "gradflow"
    try:
        sys.stdout.flush()
    except (OSError, ValueError):
        pass
    line = f"{command}: interrupted (Ctrl-C) {_interrupted(args)}\n"
    os.write(sys.stderr.fileno(), line.encode())
    os._exit(130)


def run_process(argv: list[str] | None = None) -> int:
    """[`main`][] as a process runs it (the `gradflow` command, `python -m
    gradflow.cli`): a Ctrl-C outside a solve's loop ends the process at once
    with one line and status 130; inside the loop the solve stops after its
    chunk and writes what it computed (its own handler, `gradflow/_loop/driver.py`,
    which puts this one back when the loop ends). A process that ignores
    Ctrl-C (started with `nohup`) keeps ignoring it."""
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        signal.signal(signal.SIGINT, _exit_now)
    return main(argv)


if __name__ == "__main__":
    sys.exit(run_process())
