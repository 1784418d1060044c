"""Start-up of the main job: what can be done while the solve runs.

The solve spends most of a cold start compiling and a warm one running XLA
code, neither of which holds Python's global interpreter lock: importing
matplotlib (and `gradflow.plot`) on a thread meanwhile takes that import off
the time the figures need after the solve (`benchmarks/startup.py --parts`).
"""

import importlib
import os
import threading


def preload(*modules: str) -> threading.Thread:
    """Imports `modules` on a daemon thread; returns it. An import that fails
    there fails again, with its error, where the module is used."""

    def run():
        for name in modules:
            importlib.import_module(name)

    return _on_thread(run)


def _figure_modules() -> None:
    # as gradflow.plot selects its backend: Agg unless MPLBACKEND says
    import matplotlib

    if os.environ.get("MPLBACKEND") is None:
        matplotlib.use("Agg")
    import matplotlib.pyplot  # noqa: F401

    import gradflow.plot  # noqa: F401


def preload_figures() -> threading.Thread:
    """Imports the figure code (matplotlib with the Agg backend, pyplot,
    `gradflow.plot`) on a daemon thread; returns it."""
    return _on_thread(_figure_modules)


def _on_thread(fn) -> threading.Thread:
    def run():
        try:
            fn()
        except Exception:  # noqa: BLE001  (reported by the real import)
            return

    thread = threading.Thread(target=run, name="gradflow-preload", daemon=True)
    thread.start()
    return thread


__all__ = ["preload", "preload_figures"]
