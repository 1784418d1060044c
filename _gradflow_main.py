"""The `gradflow` command's entry point (`[project.scripts]` in
`pyproject.toml`): `gradflow.cli.run_process`.

It is a module of its own, outside the package, so that a Ctrl-C while
`import gradflow` runs (importing JAX takes seconds) ends the process at once
with one line and exit status 130, like a Ctrl-C anywhere else before the
solve, instead of a traceback through the imports (or an `ImportError` that
an extension module made of the interrupt).
"""

import os
import signal
import sys


def _starting(signum, frame) -> None:
    del signum, frame
    os.write(2, b"gradflow: interrupted (Ctrl-C) while starting; nothing was run\n")
    os._exit(130)


def main() -> int:
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        signal.signal(signal.SIGINT, _starting)
    from gradflow.cli import run_process

    return run_process()


if __name__ == "__main__":
    sys.exit(main())
