"""Regenerates the table of `docs/errors.md` from the cases of
`tests/test_errors.py`, by running each bad call and copying its message.

    PYTHONPATH=. python docs/_make_errors_table.py

The table lies between the two marker lines of `docs/errors.md`; the rest of
the page is written by hand. Paths of the temporary files show as `<tmp>`.
"""

import ast
import sys
import tempfile
from pathlib import Path


ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "errors.md"
BEGIN = "<!-- BEGIN GENERATED TABLE (docs/_make_errors_table.py) -->"
END = "<!-- END GENERATED TABLE -->"


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


def table() -> str:
    sys.path.insert(0, str(ROOT / "tests"))
    import test_errors

    calls = _call_texts((ROOT / "tests" / "test_errors.py").read_text())
    rows = [
        "| case | call | error | message |",
        "| --- | --- | --- | --- |",
    ]
    with tempfile.TemporaryDirectory() as folder:
        files = test_errors.make_files(folder)
        prefix = str(Path(folder))
        for case in test_errors.CASES:
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


def main() -> None:
    page = PAGE.read_text()
    head, rest = page.split(BEGIN)
    _, tail = rest.split(END)
    PAGE.write_text(f"{head}{BEGIN}\n{table()}\n{END}{tail}")
    print(f"wrote {PAGE}")


if __name__ == "__main__":
    main()
