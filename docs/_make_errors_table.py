"""Regenerates the tables of `docs/errors.md` from the cases of
`tests/test_errors.py`, by running each bad call (`CASES`) and each bad
command line (`CLI_CASES`) and copying its message.

    PYTHONPATH=. python docs/_make_errors_table.py

Each table lies between its two marker lines of `docs/errors.md`; the rest of
the page is written by hand. Paths of the temporary files show as `<tmp>`.
"""

import ast
import runpy
import tempfile
import types
from pathlib import Path

import gradflow as gf


ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "errors.md"
BEGIN = "<!-- BEGIN GENERATED TABLE (docs/_make_errors_table.py) -->"
END = "<!-- END GENERATED TABLE -->"
CLI_BEGIN = "<!-- BEGIN GENERATED CLI TABLE (docs/_make_errors_table.py) -->"
CLI_END = "<!-- END GENERATED CLI TABLE -->"


def _call_texts(source: str) -> dict[str, str]:
    """The source text of each case's call (the lambda's body), by case id."""
    out = {}
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Call)
            and getattr(node.func, "id", None) == "Case"
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[1], ast.Lambda)
        ):
            text = ast.get_source_segment(source, node.args[1].body)
            out[node.args[0].value] = " ".join(text.split())
    return out


def _cell(text: str) -> str:
    """A Markdown code span for a table cell (pipes escaped; a double-backtick
    span when the text holds a backtick)."""
    text = text.replace("|", "\\|")
    return f"`` {text} ``" if "`" in text else f"`{text}`"


def _cases() -> types.SimpleNamespace:
    """The module `tests/test_errors.py`, run from its file (its `CASES`,
    `CLI_CASES` and `make_files`)."""
    return types.SimpleNamespace(
        **runpy.run_path(str(ROOT / "tests" / "test_errors.py"))
    )


def table() -> str:
    test_errors = _cases()
    calls = _call_texts((ROOT / "tests" / "test_errors.py").read_text())
    rows = [
        "| case | call | error | message |",
        "| --- | --- | --- | --- |",
    ]
    with tempfile.TemporaryDirectory() as folder:
        files = test_errors.make_files(folder)
        prefix = str(Path(folder))
        for case in test_errors.CASES + test_errors.START_CASES:
            try:
                case.call(files)
            except Exception as e:  # the point: record what it raises
                error, message = type(e).__name__, str(e)
            else:
                raise SystemExit(f"case {case.id} raised nothing")
            if error != case.error.__name__ or "\n" in message:
                raise SystemExit(f"case {case.id}: {error}: {message!r}")
            message = message.replace(prefix, "<tmp>")
            rows.append(
                f"| {case.id} | {_cell(calls[case.id])} | `{error}` | {_cell(message)} |"
            )
    return "\n".join(rows)


def cli_table() -> str:
    """The command-line cases: the command as typed and the line it prints."""
    import contextlib
    import io

    from gradflow.cli import main

    test_errors = _cases()

    rows = ["| case | command | stderr |", "| --- | --- | --- |"]
    with tempfile.TemporaryDirectory() as folder:
        files = test_errors.make_files(folder)
        prefix = str(Path(folder))
        for case in test_errors.CLI_CASES:
            argv = case.argv(files)
            err = io.StringIO()
            with contextlib.redirect_stderr(err):
                code = main(argv)
            line = err.getvalue().strip()
            if code != 2 or "\n" in line:
                raise SystemExit(f"case {case.id}: exit {code}: {line!r}")
            command = " ".join(["gradflow", *argv]).replace(prefix, "<tmp>")
            rows.append(
                f"| {case.id} | {_cell(command)} | {_cell(line.replace(prefix, '<tmp>'))} |"
            )
    return "\n".join(rows)


def main() -> None:
    gf.replace_between_markers(PAGE, BEGIN, END, table())
    gf.replace_between_markers(PAGE, CLI_BEGIN, CLI_END, cli_table())
    print(f"wrote {PAGE}")


if __name__ == "__main__":
    main()
