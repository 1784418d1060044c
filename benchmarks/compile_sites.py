"""Where the test tier's XLA compilations come from: a pytest plugin that
records, for each backend compilation, JAX's name for the program and the
innermost line of `gradflow/` that asked for it, and writes the totals
(count and seconds, most seconds first) when the session ends.

    PYTHONPATH=benchmarks:. python -m pytest -n 0 -p compile_sites \\
        tests/test_integrate.py tests/test_sgd.py [--compile-sites OUT.json]

Run it with `-n 0`: each pytest-xdist worker would count only its own. The
seconds are XLA's compiling (JAX's `backend_compile_duration` event), so they
move with the machine's load; the counts do not.
"""

import collections
import json
import sys
import traceback
from pathlib import Path

import jax


_COUNTS: collections.Counter = collections.Counter()
_SECONDS: collections.Counter = collections.Counter()


def _site() -> str:
    """The innermost frame in gradflow's package, as `path:line function`
    (gradflow is looked up here, not imported: the tests' conftest must
    import it first, after its shape-checking hook)."""
    package = sys.modules.get("gradflow")
    if package is None or package.__file__ is None:
        return "(before gradflow was imported)"
    root = Path(package.__file__).parent
    for frame in reversed(traceback.extract_stack()):
        path = Path(frame.filename)
        if path.is_relative_to(root):
            where = path.relative_to(root.parent).as_posix()
            return f"{where}:{frame.lineno} {frame.name}"
    return "(outside gradflow)"


def _on_duration(event: str, duration: float, fun_name: str = "?", **_) -> None:
    if event == "/jax/core/compile/backend_compile_duration":
        key = f"{fun_name} @ {_site()}"
        _COUNTS[key] += 1
        _SECONDS[key] += duration


jax.monitoring.register_event_duration_secs_listener(_on_duration)


def pytest_addoption(parser):
    parser.addoption("--compile-sites", default="compile_sites.json")


def pytest_terminal_summary(terminalreporter, config):
    rows = [
        {"program": key, "count": _COUNTS[key], "seconds": round(seconds, 3)}
        for key, seconds in _SECONDS.most_common()
    ]
    Path(config.getoption("--compile-sites")).write_text(json.dumps(rows, indent=1))
    total = sum(_SECONDS.values())
    terminalreporter.write_line(
        f"compile sites: {sum(_COUNTS.values())} compilations, {total:.0f} s"
    )
    for row in rows[:15]:
        share = row["seconds"] / total if total else 0.0
        terminalreporter.write_line(
            f"  {row['seconds']:7.1f} s {share:6.1%} {row['count']:4d} x {row['program']}"
        )
