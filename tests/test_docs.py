"""The documentation: every public name has an API entry, the notebook is
well-formed, the figure gallery lists every figure. Fast (no mkdocs needed:
the site itself is built by `.ci/run`)."""

import ast
import importlib.util
import json
import re
import types
from pathlib import Path

import gradflow as gf


ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, DOCS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _attribute_docstrings() -> set[str]:
    """Module-level names in gradflow/ followed by a docstring literal."""
    documented = set()
    for path in (ROOT / "gradflow").rglob("*.py"):
        body = ast.parse(path.read_text()).body
        for stmt, nxt in zip(body, body[1:]):
            targets = []
            if isinstance(stmt, ast.Assign):
                targets = [t.id for t in stmt.targets if isinstance(t, ast.Name)]
            elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                targets = [stmt.target.id]
            if (
                targets
                and isinstance(nxt, ast.Expr)
                and isinstance(nxt.value, ast.Constant)
                and isinstance(nxt.value.value, str)
            ):
                documented.update(targets)
    return documented


def test_all_lists_exactly_the_public_names():
    public = {
        n
        for n, obj in vars(gf).items()
        if not n.startswith("_")
        and not (
            isinstance(obj, types.ModuleType)
            and not obj.__name__.startswith("gradflow")
        )
        # imported on demand (not by gradflow/__init__.py): an attribute of
        # the package only once some code imported them
        and not (isinstance(obj, types.ModuleType) and n in ("cli", "plot"))
    }
    assert sorted(gf.__all__) == sorted(public)
    assert len(gf.__all__) == len(set(gf.__all__))


def test_every_public_name_has_one_reference_entry_with_a_docstring():
    pages = _load("_api_pages").api_pages(gf)
    text = "\n".join(markdown for _, _, markdown in pages)
    entries = re.findall(r"^::: gradflow\.(\w+)$", text, flags=re.M)
    assert sorted(n for n in entries if n in gf.__all__) == sorted(gf.__all__)
    documented = _attribute_docstrings()
    for name in gf.__all__:
        obj = getattr(gf, name)
        if isinstance(obj, types.ModuleType | type) or callable(obj):
            assert (obj.__doc__ or "").strip(), f"gradflow.{name} has no docstring"
        else:
            assert name in documented, f"gradflow.{name} has no attribute docstring"


def test_a_name_no_group_lists_still_gets_a_page():
    fake = types.SimpleNamespace(
        __all__=["integrate", "brand_new"], integrate=gf.integrate, brand_new=len
    )
    pages = _load("_api_pages").api_pages(fake)
    other = [md for path, _, md in pages if path == "api/other.md"]
    assert len(other) == 1 and "::: gradflow.brand_new" in other[0]
    assert "[`gradflow.brand_new`][]" in pages[0][2]  # listed in the index


def test_problems_have_their_page_and_each_object_one_entry():
    pages = {path: md for path, _, md in _load("_api_pages").api_pages(gf)}
    problems = pages["api/problems.md"]
    for name in ("Problem", "flow", "problems"):
        assert f"::: gradflow.{name}\n" in problems
    # gf.problems.Problem is gf.Problem: documented once, not again under the
    # module, which lists the built-in problems and the problem author's tools
    members = problems.split("::: gradflow.problems\n")[1].split("members: [")[1]
    members = members.split("]")[0].split(", ")
    assert "Problem" not in members
    built_in = {"Committee", "DeepLinear", "InContextRegression", "MarkovAttention"}
    assert built_in | {"observe_saves"} <= set(members)
    # what a result inherits from its private base is in its own entry
    entry = pages["api/flow.md"].split("::: gradflow.Trajectory\n")[1].split(":::")[0]
    assert "inherited_members: [" in entry and " save" in entry


def test_notebook_is_committed_without_outputs():
    nb = json.loads((ROOT / "examples" / "tutorial.ipynb").read_text())
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert code, "the tutorial notebook has no code cell"
    for cell in code:
        assert cell["outputs"] == [] and cell["execution_count"] is None
        ast.parse("".join(cell["source"]))  # valid Python


def test_gallery_lists_every_figure_and_nav_pages_exist():
    gallery = (DOCS / "figures.md").read_text()
    for png in sorted((DOCS / "figures").glob("*.png")):
        assert f"(figures/{png.name})" in gallery, png.name
    nav = (ROOT / "mkdocs.yml").read_text()
    for page in re.findall(r"^\s*- [^:#]+: (\S+\.md)$", nav, flags=re.M):
        if not page.startswith("api/"):
            assert (DOCS / page).exists(), f"mkdocs.yml names a missing page {page}"


def test_stage_tables_in_the_pages_are_generated():
    """Every stage table printed in the README and in docs/ lies inside an
    output block of `docs/_make_outputs.py` (written by running the command
    it names, never transcribed), and every block names a command it can run
    and holds output."""
    outputs = _load("_make_outputs")
    for page in outputs.PAGES:
        text = page.read_text()
        inside = "".join(m.group(0) for m in outputs.BLOCK.finditer(text))
        outside = outputs.BLOCK.sub("", text)
        header = re.compile(r"^stage +cycle +t_start +t_end", re.M)
        assert not header.search(outside), f"{page.name}: a stage table by hand"
        for command, body in outputs.blocks(page):
            assert command.split()[0] in ("gradflow", "python"), command
            assert body.strip(), f"{page.name}: empty output of {command!r}"
        assert inside.count("<!-- output:") == inside.count("<!-- /output -->")
