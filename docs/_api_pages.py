"""The API reference pages, generated from `gradflow.__all__`.

`docs/_hooks.py` writes these pages into the site when it is built; nothing
here is committed as Markdown, so a name added to `gradflow.__all__` gets a
reference entry without touching the docs. `GROUPS` only orders the names into
pages: a public name that no group lists lands on the page "Other names", and a
listed name that is no longer public is left out.

`tests/test_docs.py` checks that every name of `gradflow.__all__` has exactly
one entry (and a docstring), without needing mkdocs.
"""

import types


# (file stem, page title, one line about the page, the names on it)
GROUPS: list[tuple[str, str, str, list[str]]] = [
    (
        "problems",
        "Problems",
        "Any population loss as a problem, and its gradient flow: the protocol "
        "a problem implements (abstract classes: override their abstract methods "
        "only), `gf.flow`, the extension points and the built-in problems "
        "(`gf.integrate` is `gf.flow` of the paper's model).",
        [
            "Problem",
            "SampledProblem",
            "ObservedProblem",
            "BoundedProblem",
            "StagedProblem",
            "EnumeratedProblem",
            "FieldProblem",
            "Analysis",
            "flow",
            "as_problem",
            "loss_levels",
            "generic_analysis",
            "matrix_spectra",
            "problems",
        ],
    ),
    (
        "options",
        "Options",
        "The options every entry point shares, grouped into a few objects "
        "(documented once): what is saved and watched, the solver, how the host "
        "runs it, and SGD's own.",
        ["SaveAt", "Solver", "Run", "SGD"],
    ),
    (
        "flow",
        "The gradient flow and its result",
        "Integrating $\\dot\\theta = -\\nabla L(\\theta)$ and what it returns: the "
        "trajectory, its result code, statistics and settings, and its file.",
        [
            "Trajectory",
            "RESULTS",
            "FlowStats",
            "FlowSettings",
            "load",
            "Interrupted",
            "GradientFlow",
            "default_save_times",
            "default_tolerances",
            "DEFAULT_SOLVER",
            "SOLVERS",
            "solvers",
            "count_grad_evals",
            "count_hvps",
        ],
    ),
    (
        "stages",
        "Stages and events",
        "Saddles located during the solve, the stages found on the saved "
        "observables after it, and the records of both.",
        [
            "Event",
            "EventRecord",
            "solve_with_events",
            "SegmentedSolution",
            "Stage",
            "STAGE_KINDS",
            "StageThresholds",
            "stage_events",
            "stage_table",
        ],
    ),
    (
        "sweeps",
        "Sweeps",
        "Many flows in one batched, sharded solve.",
        ["sweep", "Sweep", "Member", "SweepStats", "SweepSettings", "load_sweep"],
    ),
    (
        "sgd",
        "SGD next to the flow",
        "Finite-sample SGD logged on the flow's time axis, the comparison, the "
        "modified flows of gradient descent and the stochastic modified equation.",
        [
            "train_sgd",
            "SGDRun",
            "SGDStats",
            "SGDSettings",
            "load_sgd",
            "compare",
            "Comparison",
            "EnsembleComparison",
            "modified_loss",
            "ModifiedLoss",
            "sgd_sde",
            "SDESolver",
        ],
    ),
    (
        "theory",
        "Theory",
        "Critical points, unstable modes and the theory's predictions.",
        ["linearize", "critical_points", "CriticalPoint", "Linearization"]
        + ["theory_report", "theory"],
    ),
    (
        "model",
        "The paper's model",
        "A one-layer Transformer on a Markov chain (the package `gradflow.markov`, "
        "built on the core like a user's problem): chains, parameters, the "
        "closed-form population loss and the finite-context loss (both share one "
        "attention primitive), `integrate`, the Markov stages and observables.",
        [
            "integrate",
            "MarkovChain",
            "chains",
            "Params",
            "Model",
            "VariantParams",
            "init_params",
            "population_loss",
            "finite_context_loss",
            "attention",
            "markov",
        ],
    ),
    (
        "analysis",
        "Analysing results",
        "Labelled arrays and tables of a result (its `to_xarray`, `stages_frame` "
        "and `events_frame`; netCDF files read by `load`) and the names a problem "
        "gives its arrays there; the animation and the explorer are "
        "`gradflow.plot.animate` and `gradflow.plot.report` (docs/analysis.md).",
        ["array_names", "ArrayNames"],
    ),
    (
        "text",
        "Real text",
        "Local corpora, tokenisation and bigram chains.",
        ["text"],
    ),
    (
        "files",
        "Files and pages",
        "Writing results into a page of your own; the quiet-machine rule of "
        "measured tables.",
        ["replace_between_markers", "LoadGuard"],
    ),
]

# Public modules that `gradflow/__init__.py` does not import (matplotlib is
# imported only when figures are wanted); each gets its own page.
EXTRA_MODULES: list[tuple[str, str, str]] = [
    ("plot", "Figures (gradflow.plot)", "gradflow.plot"),
]

OTHER = ("other", "Other names", "Public names that no page above lists yet.")


def _entry(qualname: str, obj, public: list) -> str:
    """The mkdocstrings directive of one name."""
    if isinstance(obj, types.ModuleType):
        return (
            f"::: {qualname}\n"
            "    options:\n"
            "      show_root_heading: true\n"
            f"      members: {_module_members(obj, public)}\n"
            "      heading_level: 2\n"
        )
    inherited = _inherited(obj, public) if isinstance(obj, type) else []
    if inherited:
        return (
            f"::: {qualname}\n"
            "    options:\n"
            f"      inherited_members: [{', '.join(inherited)}]\n"
        )
    return f"::: {qualname}\n"


def _module_members(module: types.ModuleType, public: list) -> str:
    """The members of a public module's entry: all of them, except, for a
    module with `__all__`, the names that gradflow exports itself
    (`gf.problems.Problem` is `gf.Problem`: documented once, at the top
    level)."""
    names = getattr(module, "__all__", None)
    if names is None:
        return "true"
    own = [n for n in names if not any(getattr(module, n) is obj for obj in public)]
    if len(own) == len(names):
        return "true"
    return f"[{', '.join(own)}]" if own else "false"


def _inherited(cls: type, public: list) -> list[str]:
    """The public members `cls` inherits from gradflow's own private bases
    (`traj.save` is `AbstractResult.save`): shown in its entry, since no entry
    of those bases exists. Members of public bases are documented there."""
    out: list[str] = []
    for base in cls.__mro__[1:]:
        if not base.__module__.startswith("gradflow") or any(
            base is obj for obj in public
        ):
            continue
        for name in vars(base):
            if not name.startswith("_") and name not in vars(cls) and name not in out:
                out.append(name)
    return out


def api_pages(module) -> list[tuple[str, str, str]]:
    """`(path, title, markdown)` of every API page for `module` (gradflow).

    The first page is the index: every public name with the first line of its
    docstring, linked to its entry.
    """
    public = list(module.__all__)
    objects = [getattr(module, n) for n in public]
    placed: set[str] = set()
    pages: list[tuple[str, str, str, list[str]]] = []
    for stem, title, intro, names in GROUPS:
        names = [n for n in names if n in public and n not in placed]
        if names:
            placed.update(names)
            pages.append((stem, title, intro, names))
    rest = sorted((n for n in public if n not in placed), key=str.lower)
    if rest:
        pages.append((*OTHER, rest))

    out: list[tuple[str, str, str]] = []
    index = [
        "# API reference",
        "",
        "Every public name of `gradflow` (`gradflow.__all__`), generated from its"
        " docstring. `import gradflow as gf` turns on JAX's float64 mode.",
        "",
    ]
    for stem, title, intro, names in pages:
        body = [f"# {title}", "", intro, ""]
        index += [
            f"## [{title}]({stem}.md)",
            "",
            "| name | what it is |",
            "| --- | --- |",
        ]
        for name in names:
            obj = getattr(module, name)
            body.append(_entry(f"gradflow.{name}", obj, objects))
            index.append(f"| [`gradflow.{name}`][] | {_summary(obj)} |")
        index.append("")
        out.append((f"api/{stem}.md", title, "\n".join(body)))
    for stem, title, qualname in EXTRA_MODULES:
        body = [f"# {title}", "", f"::: {qualname}", "    options:"]
        body += ["      show_root_heading: false", "      members: true", ""]
        out.append((f"api/{stem}.md", title, "\n".join(body)))
        index += [f"## [{title}]({stem}.md)", "", f"The module `{qualname}`.", ""]
    return [("api/index.md", "Overview", "\n".join(index)), *out]


def _summary(obj) -> str:
    """The first sentence-line of `obj`'s own docstring, for the index table."""
    doc = obj.__doc__ if _own_doc(obj) else None
    if not doc:
        return ""
    first = doc.strip().split("\n\n")[0].replace("\n", " ")
    return first.replace("|", "\\|")


def _own_doc(obj) -> bool:
    """Whether `obj.__doc__` was written for it (not a str's or dict's)."""
    return isinstance(obj, types.ModuleType | type | types.FunctionType) or callable(
        obj
    )
