"""The library's structure, read from the source with `ast` (and, for the
public names, from the imported package): a generic core that never names a
problem, problems built on it through its public names, entry points that
take few parameters, results that carry a result code, and code outside the
package (examples, benchmarks, docs scripts, tests) that uses public names.

Each check reads the tree anew; none runs a solve.
"""

import ast
import inspect
import re
from pathlib import Path

import pytest

import gradflow as gf
import gradflow.plot
import gradflow.problems
import gradflow.theory


ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "gradflow"

# The packages of the problems: the paper's model and the built-in problems.
PROBLEM_PACKAGES = (
    "gradflow.markov",
    "gradflow.problems._deep_linear",
    "gradflow.problems._committee",
    "gradflow.problems._in_context",
)
# The modules that put a problem's public names where users find them: they
# re-export and do nothing else.
REEXPORTS = (
    "gradflow",
    "gradflow.chains",
    "gradflow.text",
    "gradflow.problems",
    "gradflow.theory",
    "gradflow.plot",
    # the command line's registry of problems: each built-in problem's plugin
    # (its options and how to build it) lives beside the problem
    "gradflow._cli.registry",
)
# The public namespaces: what a problem's package may import from the core.
PUBLIC_NAMESPACES = (gf, gf.theory, gf.plot, gf.problems, gf.solvers, gf.text)
MAX_PARAMETERS = 10
# Tests import a private module only to test it for itself, with a comment
# saying why: ten until issue 42's fifth pass, which added the key of exported
# chunks (tests/test_exported.py) and the lanes' snapshot race
# (tests/test_sweep.py), neither observable through a public call.
MAX_PRIVATE_TEST_IMPORTS = 12
MAX_MODULE_LINES = 800
MAX_FUNCTION_LINES = 120


def _module_name(path: Path) -> tuple[str, bool]:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    is_package = parts[-1] == "__init__"
    if is_package:
        parts.pop()
    return ".".join(parts), is_package


def _imports(path: Path):
    """`(source module, imported names)` of every import in a file of the
    package, relative imports resolved."""
    name, is_package = _module_name(path)
    package = name if is_package else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, ()
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            yield source, tuple(a.name for a in node.names)


def _inside(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def _package_modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        yield path, _module_name(path)[0]


def test_no_module_outside_a_problems_package_imports_it():
    found = []
    for path, module in _package_modules():
        for source, names in _imports(path):
            targets = [source] + [f"{source}.{n}" for n in names]
            for problem in PROBLEM_PACKAGES:
                if _inside(module, problem) or module in REEXPORTS:
                    continue
                if any(_inside(t, problem) for t in targets):
                    found.append(f"{module} imports {source} ({problem})")
    assert not found, "\n".join(sorted(set(found)))


def test_reexport_points_only_reexport():
    """The modules that re-export a problem's names hold imports, `__all__`
    (or `__all__ += module.__all__`), aliases and their docstring: no code (the package's own `__init__` also
    sets JAX's float64 mode and reads the version)."""
    found = []
    for module in REEXPORTS[1:]:
        parts = module.split(".")
        path = PACKAGE.joinpath(*parts[1:])
        path = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
                continue  # a docstring
            if (
                isinstance(node, ast.Assign)
                and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
                and (
                    node.targets[0].id == "__all__"
                    or isinstance(node.value, ast.Name)  # an alias
                )
            ):
                continue
            if (
                isinstance(node, ast.AugAssign)
                and isinstance(node.target, ast.Name)
                and node.target.id == "__all__"
                and isinstance(node.value, ast.Attribute)
                and node.value.attr == "__all__"
            ):
                continue  # __all__ += module.__all__: that module's names
            found.append(f"{module}: line {node.lineno}: {ast.unparse(node)[:60]}")
    assert not found, "\n".join(found)


def _public_names() -> set[str]:
    return {n for ns in PUBLIC_NAMESPACES for n in ns.__all__}


def _is_core(module: str) -> bool:
    """The core: gradflow's modules other than the foundations (`_core`, a
    toolbox every package uses), the problems' packages and the re-export
    points."""
    if not module.startswith("gradflow.") or _inside(module, "gradflow._core"):
        return False
    if any(_inside(module, p) for p in PROBLEM_PACKAGES) or module in REEXPORTS:
        return False
    return True


def test_problems_use_only_public_names_of_the_core():
    """The paper's model and the built-in problems are built on the core
    through its public names, as a user's model would be."""
    public = _public_names()
    found = []
    for path, module in _package_modules():
        if not any(_inside(module, p) for p in PROBLEM_PACKAGES):
            continue
        for source, names in _imports(path):
            if _is_core(source):
                private = [n for n in names if n not in public]
                if private:
                    found.append(f"{module}: from {source} import {private}")
    assert not found, "\n".join(found)


def _entry_points():
    seen = set()
    for ns in PUBLIC_NAMESPACES + (gf.markov, gf.chains):
        for name in ns.__all__:
            obj = getattr(ns, name)
            if inspect.isfunction(obj) and obj not in seen:
                seen.add(obj)
                yield f"{ns.__name__}.{name}", obj


def test_entry_points_take_at_most_ten_parameters():
    wide = {
        name: len(inspect.signature(fn).parameters)
        for name, fn in _entry_points()
        if len(inspect.signature(fn).parameters) > MAX_PARAMETERS
    }
    assert not wide, wide


def test_everyday_calls_stay_one_line():
    # the signatures of the design card: these keywords, no more needed
    assert {"init_scale", "t1"} <= set(inspect.signature(gf.integrate).parameters)
    assert "init_scale" in inspect.signature(gf.flow).parameters
    assert {"init_scale", "seeds"} <= set(inspect.signature(gf.sweep).parameters)


def _private_import(module: str) -> bool:
    """A module path outside the public namespaces (`gradflow._x`,
    `gradflow.markov.model`, `gradflow.problems._x`, `gradflow.theory._x`)."""
    if not module.startswith("gradflow"):
        return False
    parts = module.split(".")
    if any(p.startswith("_") for p in parts[1:]):
        return True
    return len(parts) > 2 and parts[1] == "markov"


def _file_imports(path: Path):
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom) and not node.level:
            module = node.module or ""
            yield node.lineno, module
            for alias in node.names:
                yield node.lineno, f"{module}.{alias.name}"


def _outside_files():
    for folder in ("examples", "benchmarks"):
        yield from sorted((ROOT / folder).rglob("*.py"))
    yield from sorted((ROOT / "docs").glob("*.py"))


def test_code_outside_the_package_uses_public_names():
    found = []
    for path in _outside_files():
        for lineno, module in _file_imports(path):
            if _private_import(module):
                found.append(f"{path.relative_to(ROOT)}:{lineno}: {module}")
        if re.search(r"sys\.path\.(insert|append)", path.read_text()):
            found.append(f"{path.relative_to(ROOT)}: changes sys.path")
    assert not found, "\n".join(found)


def test_tests_reach_private_names_rarely_and_say_why():
    here = Path(__file__).resolve().parent
    private, silent = [], []
    for path in sorted(here.glob("*.py")):
        lines = path.read_text().splitlines()
        seen = set()
        for lineno, module in _file_imports(path):
            if _private_import(module) and lineno not in seen:
                seen.add(lineno)
                where = f"{path.name}:{lineno}"
                private.append(where)
                around = lines[max(0, lineno - 3) : lineno]
                if not any("#" in line for line in around):
                    silent.append(where)
    assert len(private) <= MAX_PRIVATE_TEST_IMPORTS, private
    assert not silent, f"private imports without a comment saying why: {silent}"


def test_tests_monkeypatch_no_private_globals():
    here = Path(__file__).resolve().parent
    found = []
    for path in sorted(here.glob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "setattr"
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "monkeypatch"
            ):
                target = ast.unparse(node.args[0]) if node.args else ""
                if "gradflow" in target or target.split(".")[0] in _module_aliases(
                    path
                ):
                    found.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
    assert not found, "\n".join(found)


def _module_aliases(path: Path) -> set[str]:
    """Names a test file binds to gradflow modules (`import gradflow._x as
    loop`, `from gradflow import plot`)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("gradflow") and a.name != "gradflow":
                    out.add(a.asname or a.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
            "gradflow"
        ):
            for a in node.names:
                out.add(a.asname or a.name)
    out.discard("gf")
    return out


@pytest.mark.parametrize("cls", [gf.Trajectory, gf.SGDRun])
def test_every_result_carries_a_result_code(cls):
    fields = {f.name for f in __import__("dataclasses").fields(cls)}
    assert {"result", "detail"} <= fields
    assert "ok" not in fields and "message" not in fields  # derived
    assert isinstance(inspect.getattr_static(cls, "ok"), property)
    assert isinstance(inspect.getattr_static(cls, "message"), property)


def _code_lines(lines: list[str], node) -> int:
    body = node.body
    skip = set()
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


def test_examples_and_benchmarks_are_short_modules_of_short_functions():
    found = []
    for folder in ("examples", "benchmarks", "gradflow"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            source = path.read_text()
            lines = source.splitlines()
            rel = path.relative_to(ROOT)
            if len(lines) > MAX_MODULE_LINES:
                found.append(f"{rel}: {len(lines)} lines")
            for node in ast.walk(ast.parse(source)):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    n = _code_lines(lines, node)
                    if n > MAX_FUNCTION_LINES:
                        found.append(f"{rel}: {node.name}: {n} code lines")
    assert not found, "\n".join(found)


# `docs/model.md`, `gradflow/_loop/loop.py`: a path a reader follows.
_PATH = re.compile(
    r"(?<![\w/.])((?:docs|gradflow|examples|benchmarks|tests)/[\w/.-]*\w\.(?:md|py|ipynb|sh))"
)


def _text_files(folders=("gradflow", "docs", "examples", "benchmarks")):
    for folder in folders:
        for path in sorted((ROOT / folder).rglob("*")):
            if path.suffix in (".py", ".md") and "figures" not in path.parts:
                yield path
    yield ROOT / "README.md"


def test_every_path_named_in_the_code_and_docs_exists():
    missing = []
    for path in _text_files():
        for match in _PATH.finditer(path.read_text()):
            target = match.group(1)
            if not (ROOT / target).exists():
                missing.append(f"{path.relative_to(ROOT)}: {target}")
    assert not missing, "\n".join(sorted(set(missing)))


def test_no_reference_to_a_file_outside_the_repository():
    """The maths lives in the docs pages: nothing cites the design notes that
    are not part of the repository."""
    found = [
        str(path.relative_to(ROOT))
        for path in _text_files(("gradflow", "docs", "examples", "benchmarks", "tests"))
        if path.name != "test_structure.py"  # this test names what it looks for
        and re.search(r"\bSPEC\b", path.read_text())
    ]
    assert not found, found
