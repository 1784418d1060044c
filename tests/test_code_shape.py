"""Functions that read in one sitting, read from the source with `ast`:

- at most `MAX_LINES` lines of code (blank lines, comments and the docstring
  not counted);
- a function of more than `MAX_POSITIONAL` parameters takes the rest as
  keyword-only (`def f(a, b, *, c, d, e, f)`), so that calls name them.

`EXPECTED` lists the known offenders (module, function, what); the test also
fails when a listed one is fixed, so the list only shrinks.
"""

import ast
from pathlib import Path


PACKAGE = Path(__file__).resolve().parent.parent / "gradflow"
MAX_LINES = 120
MAX_POSITIONAL = 5

EXPECTED: set[tuple[str, str, str]] = {
    # Methods whose signatures Diffrax fixes (controller, solver).
    ("_loop/resume.py", "init", "positional"),
    ("_loop/resume.py", "adapt_step_size", "positional"),
    ("_event/watch.py", "step", "positional"),
    ("solvers/base.py", "step", "positional"),
}


def code_lines(lines: list[str], node: ast.AST) -> int:
    """Lines of `node` that hold code: not blank, not only a comment, not the
    docstring."""
    skip = set()
    body = node.body
    if (
        body
        and isinstance(body[0], ast.Expr)
        and isinstance(body[0].value, ast.Constant)
        and isinstance(body[0].value.value, str)
    ):
        skip = set(range(body[0].lineno, body[0].end_lineno + 1))
    return sum(
        1
        for i in range(node.lineno, node.end_lineno + 1)
        if i not in skip
        and lines[i - 1].strip()
        and not lines[i - 1].strip().startswith("#")
    )


def offenders(package: Path = PACKAGE) -> dict[tuple[str, str, str], str]:
    out = {}
    for path in sorted(package.rglob("*.py")):
        source = path.read_text()
        lines = source.splitlines()
        module = path.relative_to(package).as_posix()
        for node in ast.walk(ast.parse(source, str(path))):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            args = node.args
            positional = [
                a.arg
                for a in args.posonlyargs + args.args
                if a.arg not in ("self", "cls")
            ]
            if len(positional) > MAX_POSITIONAL:
                out[(module, node.name, "positional")] = (
                    f"{len(positional)} positional parameters"
                )
            n = code_lines(lines, node)
            if n > MAX_LINES:
                out[(module, node.name, "lines")] = f"{n} lines of code"
    return out


def test_the_checker_counts(tmp_path):
    long_body = "".join(f"    x{i} = {i}\n" for i in range(MAX_LINES + 1))
    (tmp_path / "m.py").write_text(
        'def short(a, b, c, d, e, *, f):\n    """Doc.\n\n    More."""\n    # why\n\n'
        "    return a\n\n\n"
        f"def long():\n{long_body}\n\n"
        "def wide(a, b, c, d, e, f):\n    return a\n"
    )
    found = offenders(tmp_path)
    assert set(found) == {("m.py", "long", "lines"), ("m.py", "wide", "positional")}
    # the def line and the body
    assert found[("m.py", "long", "lines")] == f"{MAX_LINES + 2} lines of code"
    source = (tmp_path / "m.py").read_text()
    short = ast.parse(source).body[0]
    assert code_lines(source.splitlines(), short) == 2  # the def line and return


def test_functions_are_short_and_name_their_arguments():
    found = offenders()
    new = sorted(set(found) - EXPECTED)
    gone = sorted(EXPECTED - set(found))
    message = [f"gradflow/{m}: {f}: {found[(m, f, k)]}" for m, f, k in new] + [
        f"listed in EXPECTED but fixed: {x} (delete it)" for x in gone
    ]
    assert not message, "\n".join(message)
