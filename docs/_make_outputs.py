"""Writes the command outputs shown in the README and in `docs/`: each block

    <!-- output: COMMAND -->
    ```text
    ...
    ```
    <!-- /output -->

is replaced by what COMMAND prints (its standard output), by running it.
COMMAND is a `gradflow ...` command line (run as `python -m gradflow.cli` in a
temporary folder, so its files go nowhere) or `python examples/...` (run from
the repository root: the examples also rewrite their figures in
`docs/figures/`).

    PYTHONPATH=. python docs/_make_outputs.py              # every block
    PYTHONPATH=. python docs/_make_outputs.py --only run   # commands holding 'run'
    PYTHONPATH=. python docs/_make_outputs.py --list       # the commands, nothing run

`tests/test_docs.py` checks that no stage table in the pages lies outside
such a block, and `tests/test_cli_run.py` that the README's `gradflow run`
stage table is what `gradflow run` prints today.
"""

import argparse
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import gradflow as gf


ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
END = "<!-- /output -->"
BLOCK = re.compile(
    r"<!-- output: (?P<command>.+?) -->\n(?P<body>.*?)<!-- /output -->", re.S
)


def blocks(path: Path) -> list[tuple[str, str]]:
    """`(command, text)` of each output block of a page (the text without its
    code fence)."""
    out = []
    for m in BLOCK.finditer(path.read_text()):
        body = m["body"].strip()
        body = re.sub(r"^```\w*\n", "", body)
        out.append((m["command"].strip(), re.sub(r"\n?```$", "", body)))
    return out


def stage_table(text: str) -> list[str]:
    """The lines of the stage table in a command's output (from the `stage`
    header to the last row), trailing spaces removed."""
    lines = [line.rstrip() for line in text.splitlines()]
    start = next(i for i, line in enumerate(lines) if line.startswith("stage "))
    end = start + 1
    while end < len(lines) and re.match(r"^[a-z_]+ +\d+ ", lines[end]):
        end += 1
    return lines[start:end]


def run(command: str) -> str:
    """What `command` prints on stdout (it must exit with status 0)."""
    argv = shlex.split(command)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with tempfile.TemporaryDirectory() as tmp:
        if argv[0] == "gradflow":
            argv, cwd = [sys.executable, "-m", "gradflow.cli", *argv[1:]], tmp
        elif argv[0] == "python":
            argv, cwd = [sys.executable, *argv[1:]], str(ROOT)
        else:
            raise SystemExit(f"cannot run {command!r}: not gradflow or python")
        done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{command!r} exited with {done.returncode}:\n{done.stderr}")
    return done.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default=None, help="commands holding this text")
    parser.add_argument("--list", action="store_true", help="list, run nothing")
    args = parser.parse_args()
    for page in PAGES:
        # each command once (a command shown twice on a page is run once)
        commands = dict.fromkeys(
            m["command"].strip()
            for m in BLOCK.finditer(page.read_text())
            if not args.only or args.only in m["command"]
        )
        for command in commands:
            if args.list:
                print(f"{page.relative_to(ROOT)}: {command}")
                continue
            start = time.perf_counter()
            output = run(command).rstrip("\n")
            gf.replace_between_markers(
                page, f"<!-- output: {command} -->", END, f"```text\n{output}\n```"
            )
            took = time.perf_counter() - start
            print(f"{page.relative_to(ROOT)}: {command} ({took:.0f} s)")


if __name__ == "__main__":
    main()
