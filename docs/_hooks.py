"""mkdocs hooks of gradflow's site (named under `hooks:` in mkdocs.yml).

- The API reference pages are generated from `gradflow.__all__`
  (`docs/_api_pages.py`) and put in the nav under "API reference".
- The tutorial notebook is executed when it or gradflow changed
  (`docs/_execute_notebook.py`) and its executed copy is rendered.
- MathJax is served from the site itself (copied from the
  `jupyter-server-mathjax` package), so formulas render without a CDN.
- After the build, every public name (and every name of a public module's
  `__all__`, such as `gradflow.problems.MarkovAttention`) must have an anchor
  in the API pages and every figure in `docs/figures/` must appear on the
  Figures page; otherwise a warning is logged, which `mkdocs build --strict`
  turns into a failure.
"""

import importlib.util
import logging
import sys
from pathlib import Path

from mkdocs.plugins import event_priority
from mkdocs.structure.files import File


log = logging.getLogger("mkdocs.hooks.gradflow")
DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
API_NAV_TITLE = "API reference"
NOTEBOOK_URI = "notebooks/tutorial.ipynb"

# The MathJax 2 files that TeX input, HTML-CSS output and the STIX-Web fonts
# need (about 10 MB of the package's 12 MB: all but other languages and SVG).
MATHJAX_PARTS = [
    "MathJax.js",
    "config",
    "extensions",
    "jax/input",
    "jax/element",
    "jax/output/HTML-CSS",
    "fonts",
    "localization/en",
]


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, DOCS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _api_pages():
    import gradflow  # installed: `pip install -e ".[docs]"`

    return _load("_api_pages").api_pages(gradflow)


def on_config(config, **kwargs):
    """Replaces the nav entry "API reference" by the generated pages."""
    pages = _api_pages()
    for item in config["nav"] or []:
        if isinstance(item, dict) and API_NAV_TITLE in item:
            item[API_NAV_TITLE] = [{title: path} for path, title, _ in pages]
            break
    else:
        log.warning(f"mkdocs.yml has no nav entry '{API_NAV_TITLE}'")
    return config


def on_pre_build(config, **kwargs):
    """Executes the tutorial notebook if its executed copy is stale."""
    seconds = _load("_execute_notebook").ensure()
    if seconds is not None:
        log.info(f"executed the tutorial notebook in {seconds:.1f} s")


@event_priority(100)  # before mkdocs-jupyter looks for notebooks
def on_files(files, config, **kwargs):
    for path, _, markdown in _api_pages():
        files.append(File.generated(config, path, content=markdown))
    # A plain File (mkdocs-jupyter rebuilds it from src_dir and src_path).
    executed = _load("_execute_notebook").OUTPUT
    src_dir = executed.parents[len(Path(NOTEBOOK_URI).parts) - 1]
    files.append(
        File(
            NOTEBOOK_URI,
            src_dir=str(src_dir),
            dest_dir=config["site_dir"],
            use_directory_urls=config["use_directory_urls"],
        )
    )
    import jupyter_server_mathjax

    static = Path(jupyter_server_mathjax.__file__).parent / "static"
    for part in MATHJAX_PARTS:
        paths = [static / part] if (static / part).is_file() else []
        paths += sorted(p for p in (static / part).rglob("*") if p.is_file())
        for p in paths:
            uri = "assets/mathjax/" + p.relative_to(static).as_posix()
            files.append(File.generated(config, uri, abs_src_path=str(p)))
    return files


def _module_names(gradflow):
    """`(module, name, top)` for every name of a public module's `__all__`
    (`gf.problems.MarkovAttention`); `top` when gradflow exports the same
    object itself (its entry is then the top-level one, `gf.Problem`)."""
    import types

    out = []
    for module in gradflow.__all__:
        obj = getattr(gradflow, module)
        if not isinstance(obj, types.ModuleType):
            continue
        for name in getattr(obj, "__all__", ()):
            top = getattr(gradflow, name, None) is getattr(obj, name)
            out.append((module, name, top and name in gradflow.__all__))
    return out


def on_post_build(config, **kwargs):
    """Checks that every public name has an entry and every figure a place."""
    import gradflow

    site = Path(config["site_dir"])
    html = "".join(p.read_text() for p in (site / "api").rglob("*.html"))
    missing = [n for n in gradflow.__all__ if f'id="gradflow.{n}"' not in html]
    missing += [
        f"{module}.{name}"
        for module, name, top in _module_names(gradflow)
        if f'id="gradflow.{module}.{name}"' not in html
        and not (top and f'id="gradflow.{name}"' in html)
    ]
    if missing:
        log.warning(f"public names without an API entry: {', '.join(missing)}")
    gallery = (DOCS / "figures.md").read_text()
    absent = [
        p.name
        for p in sorted((DOCS / "figures").glob("*.png"))
        if p.name not in gallery
    ]
    if absent:
        log.warning(f"figures missing from docs/figures.md: {', '.join(absent)}")
