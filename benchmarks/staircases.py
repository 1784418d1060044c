"""Scale-free stages on known staircases, and the saddle-to-saddle limit
against the flow: writes the two generated tables of `docs/stages.md`
("Scale-free plateaus") and `docs/problems.md` ("Diagonal linear networks").

    PYTHONPATH=. python benchmarks/staircases.py            # both tables
    PYTHONPATH=. python benchmarks/staircases.py --print    # print, write nothing

Public names only. The staircase cases are those of
`tests/test_staircases.py` (`staircase_cases`): diagonal networks
$\\frac12|u \\odot v - w|^2$ (identity covariance) with 3 to 6 nonzero
entries spread over 1e-2 to 1e1, random signs, zeros among them, starts
1e-3 to 1e-6; every level $\\frac12\\sum_{j \\ge k} w_{(j)}^2$ must be found
within 5 % and no other plateau.
"""

import argparse
import importlib.util
import math
import sys
from pathlib import Path


ROOT = Path(__file__).resolve().parent.parent


def _tests_module(name: str):
    """A helper module of `tests/`, loaded from its file under its own name."""
    path = ROOT / "tests" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


_cases = _tests_module("staircase_cases")
CONVERGENCE_PROBLEMS = _cases.CONVERGENCE_PROBLEMS
convergence_errors = _cases.convergence_errors
found_levels = _cases.found_levels
staircase_cases = _cases.staircase_cases
staircase_flow = _cases.staircase_flow


STAGES_BEGIN = "<!-- BEGIN GENERATED STAIRCASES (benchmarks/staircases.py) -->"
PROBLEMS_BEGIN = "<!-- BEGIN GENERATED SADDLE-TO-SADDLE (benchmarks/staircases.py) -->"
END = "<!-- END GENERATED -->"


def staircase_table() -> str:
    rows = [
        "| case | target $w$ | parametrisation | init scale | levels predicted | "
        "plateaus found (level) | largest error |",
        "| --- | --- | --- | ---: | --- | --- | ---: |",
    ]
    for case in staircase_cases():
        traj = staircase_flow(case)
        predicted, found = found_levels(case, traj)
        err = (
            max(abs(f - p) / p for p, f in zip(predicted, found, strict=True))
            if len(found) == len(predicted)
            else math.inf
        )
        w = ", ".join(f"{x:.3g}" for x in case.target)
        rows.append(
            f"| {case.name} | ({w}) | {case.parametrisation} | {case.init_scale:.0e} | "
            + ", ".join(f"{x:.4g}" for x in predicted)
            + " | "
            + ", ".join(f"{x:.4g}" for x in found)
            + f" | {100 * err:.2f} % |"
        )
    return "\n".join(rows)


def convergence_table() -> str:
    rows = [
        "| covariance | init scale $\\alpha$ | $\\log(1/\\alpha)$ | largest error in "
        "$\\tau$ | times $\\log(1/\\alpha)$ | largest error in $\\beta$ (mid-plateau) | "
        "plateaus found / predicted (largest level error) |",
        "| --- | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for name, problem in CONVERGENCE_PROBLEMS.items():
        for alpha in (1e-5, 1e-10, 1e-15):
            e = convergence_errors(problem, alpha)
            L = math.log(1 / alpha)
            rows.append(
                f"| {name} | {alpha:.0e} | {L:.1f} | {e['tau']:.3g} | "
                f"{e['tau'] * L:.3g} | {e['beta']:.2g} | {e['found']} / "
                f"{e['predicted']} ({100 * e['level']:.2g} %) |"
            )
    return "\n".join(rows)


def _write(page: Path, begin: str, table: str) -> None:
    text = page.read_text()
    head, rest = text.split(begin)
    _, tail = rest.split(END, 1)
    page.write_text(f"{head}{begin}\n{table}\n{END}{tail}")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--print", action="store_true", help="print only")
    args = parser.parse_args(argv)
    stairs = staircase_table()
    conv = convergence_table()
    print(stairs, conv, sep="\n\n")
    if not args.print:
        _write(ROOT / "docs" / "stages.md", STAGES_BEGIN, stairs)
        _write(ROOT / "docs" / "problems.md", PROBLEMS_BEGIN, conv)


if __name__ == "__main__":
    main()
