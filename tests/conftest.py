import atexit
import functools
import gc
import json
import logging
import math
import os
import shutil
import tempfile
import traceback
from pathlib import Path


# One fresh persistent compilation cache for the test session, shared by the
# pytest-xdist workers (each inherits the controller's GRADFLOW_TEST_JAX_CACHE)
# and the subprocesses the tests start (they inherit JAX_COMPILATION_CACHE_DIR):
# a compilation one worker made is loaded, not compiled again, by the other;
# the CLI's cache (`gradflow.cli.enable_compilation_cache`) goes there instead
# of the user's cache folder, so a test run neither reads nor leaves anything
# outside its own temporary folder, and is timed as on a clean machine.
_CACHE = os.environ.get("GRADFLOW_TEST_JAX_CACHE")
if _CACHE is None:  # the pytest process itself (with xdist: the controller)
    _CACHE = tempfile.mkdtemp(prefix="gradflow-jax-")
    os.environ["GRADFLOW_TEST_JAX_CACHE"] = _CACHE
    atexit.register(shutil.rmtree, _CACHE, ignore_errors=True)
os.environ["JAX_COMPILATION_CACHE_DIR"] = _CACHE
# A size limit turns on JAX's file lock around each read and write of the cache
# (two workers, or a test and the processes it starts, write to it at once).
# Set in the environment, so every process that shares the cache locks it
# (entries written without the lock lack the access-time file the lock's
# eviction reads). Every compilation of 0.1 s or more is kept.
os.environ["JAX_COMPILATION_CACHE_MAX_SIZE"] = str(2**40)
# Equinox's run-time checks (`eqx.error_if`, inside Diffrax) give NaN instead
# of raising through a host callback, as under the command line
# (`gradflow.cli.enable_compilation_cache`): JAX's persistent cache does not
# store a compilation holding a host callback, so without this no solve was
# ever shared between the workers (measured: a second process loading the
# d = 3 solve took 14 s against 41 s compiling it, load ~7). gradflow checks
# every input before compiling and solves with `throw=False`; no test relies on
# a check raising inside a compiled solve.
os.environ.setdefault("EQX_ON_ERROR", "nan")
os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0.1"
os.environ["JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES"] = "0"

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import jaxtyping  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402


# Shape annotations are checked in the tests: jaxtyping's import hook wraps every
# gradflow function with beartype restricted to array annotations
# (tests/_shapecheck.py). It must be installed before gradflow is imported.
jaxtyping.install_import_hook("gradflow", "_shapecheck.shapes_only")

import gradflow as gf  # noqa: E402, F401  (turns on float64)


jax.config.update("jax_enable_x64", True)
jax.config.update("jax_numpy_dtype_promotion", "strict")


def tree_allclose(x, y, *, rtol=1e-5, atol=1e-8):
    """Whether two pytrees have the same structure and close leaves."""
    xs, xdef = jax.tree.flatten(x)
    ys, ydef = jax.tree.flatten(y)
    if xdef != ydef:
        return False
    return all(
        np.shape(a) == np.shape(b) and np.allclose(a, b, rtol=rtol, atol=atol)
        for a, b in zip(xs, ys)
    )


@pytest.fixture
def getkey():
    """Fresh PRNG keys, deterministic per test."""
    counter = [0]

    def _getkey():
        counter[0] += 1
        return jax.random.key(counter[0])

    return _getkey


@pytest.fixture(autouse=True)
def _equinox_error_mode():
    """`gradflow.cli.main` (called in-process by the CLI tests) switches
    Equinox's run-time checks to NaN for the persistent compilation cache;
    every test starts and ends with the mode it had."""
    import equinox._errors

    mode = equinox._errors.EQX_ON_ERROR
    yield
    equinox._errors.EQX_ON_ERROR = mode


@pytest.fixture(autouse=True)
def _python_sigint():
    """Python's own Ctrl-C handler in every test, whatever the test process
    inherited: a process started in the background of a non-interactive shell
    (or with `nohup`) ignores SIGINT, gradflow then leaves it ignored, and the
    tests that interrupt a run with `os.kill(..., SIGINT)` need it handled."""
    import signal

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


@functools.partial(jax.jit, static_argnums=1)
def _flat_normal(key, size):
    return jax.random.normal(key, (size,))


def _scaled_normal(key, shape, scale):
    """`scale * jax.random.normal(key, shape)`, bit for bit, compiled once per
    power-of-two size (at least 64) instead of once per shape: with JAX's
    partitionable Threefry (its default) the first `n` entries of a longer flat
    draw are the draw of `n` entries (as in `gradflow/_core/random.py`; checked
    by `tests/test_model.py::test_init_params_draws_are_jax_random_normal`)."""
    if not jax.config.jax_threefry_partitionable:  # pyright: ignore[reportAttributeAccessIssue]
        return scale * jax.random.normal(key, shape)
    n = math.prod(shape)
    flat = np.asarray(_flat_normal(key, max(64, 1 << max(n - 1, 0).bit_length())))
    return jnp.asarray(flat[:n].reshape(shape) * np.float64(scale))


def random_params(d, m, scale, seed):
    keys = jax.random.split(jax.random.key(seed), 4)
    shapes = [(m, d), (d, m), (m, m), (m, m)]
    return gf.Params(*(_scaled_normal(k, s, scale) for k, s in zip(keys, shapes)))


__all__ = ["jnp", "random_params", "tree_allclose"]


# The count of XLA compilations in the pytest summary (the test tier's time is
# nearly all compiling: docs/performance.md, "The test tiers"). JAX reports
# each backend compilation, and each load from the persistent cache, through
# `jax.monitoring`; every process (each pytest-xdist worker) counts its own,
# and the workers send theirs to the controller, which adds them up.
_COMPILES = {"compilations": 0, "seconds": 0.0, "cache_hits": 0}


_BY_FUNCTION: dict[str, list] = {}  # name: [compilations, seconds]

# GRADFLOW_TEST_COMPILE_SITES=1: each program is tallied with the innermost
# line of gradflow that asked for it (docs/performance.md, "Where the tier's
# compiling goes, by the line that asks for it"), e.g. `_advance @
# gradflow/_loop/loop.py:NNN run_chunk` for the solve's chunk.
_SITES = os.environ.get("GRADFLOW_TEST_COMPILE_SITES", "") not in ("", "0")
_PACKAGE = Path(gf.__file__).parent


def _site() -> str:
    """The innermost frame of the call stack in gradflow's package, as
    `path:line function`."""
    for frame in reversed(traceback.extract_stack()):
        path = Path(frame.filename)
        if path.is_relative_to(_PACKAGE):
            where = path.relative_to(_PACKAGE.parent).as_posix()
            return f"{where}:{frame.lineno} {frame.name}"
    return "(outside gradflow)"


# GRADFLOW_TEST_COMPILE_LOG=FOLDER: one line per XLA compilation in
# FOLDER/<worker>.jsonl: the test, the program, its persistent-cache key
# (`null` for a load from the cache) and its seconds. The same key twice is
# the same program compiled twice; distinct keys of one program are its
# distinct compilations (docs/performance.md, "Issue 42, seventh pass").
_LOG = os.environ.get("GRADFLOW_TEST_COMPILE_LOG", "")
_MISSED: list = []  # the key of the compilation under way


class _CacheMisses(logging.Handler):
    """Keeps the key of each persistent-cache miss (JAX logs it at DEBUG
    level just before compiling)."""

    def emit(self, record):
        message = record.getMessage()
        if message.startswith("PERSISTENT COMPILATION CACHE MISS"):
            _MISSED[:] = [message.rsplit("with key ", 1)[-1].strip("'")]


if _LOG:
    logging.getLogger("jax._src.compiler").setLevel(logging.DEBUG)
    logging.getLogger("jax._src.compiler").addHandler(_CacheMisses())


def _log_compile(fun_name: str, duration: float) -> None:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    line = {
        "test": os.environ.get("PYTEST_CURRENT_TEST", ""),
        "program": fun_name,
        "key": _MISSED.pop() if _MISSED else None,
        "seconds": round(duration, 3),
    }
    os.makedirs(_LOG, exist_ok=True)
    with open(os.path.join(_LOG, f"{worker}.jsonl"), "a") as f:
        f.write(json.dumps(line) + "\n")


def _on_duration(event: str, duration: float, fun_name: str = "?", **_) -> None:
    if event == "/jax/core/compile/backend_compile_duration":
        _COMPILES["compilations"] += 1
        _COMPILES["seconds"] += duration
        key = f"{fun_name} @ {_site()}" if _SITES else fun_name
        tally = _BY_FUNCTION.setdefault(key, [0, 0.0])
        tally[0] += 1
        tally[1] += duration
        if _LOG:
            _log_compile(fun_name, duration)


def _on_event(event: str, **_) -> None:
    if event == "/jax/compilation_cache/cache_hits":
        _COMPILES["cache_hits"] += 1


jax.monitoring.register_event_duration_secs_listener(_on_duration)
jax.monitoring.register_event_listener(_on_event)


# A test worker compiles thousands of programs, and XLA:CPU maps each
# executable's code into memory: a worker of the whole default tier reached
# 59,000 memory maps (`/proc/<pid>/maps`) after 17 minutes, against Linux's
# default limit of 65,530 (`vm.max_map_count`), and past it XLA aborts or
# segfaults inside a compilation (seen twice, late in a fresh-clone `.ci/run`,
# in `executable.serialize()`). After each test file the worker drops JAX's
# in-memory caches once it holds more than `_MAX_MAPS` maps: what a later
# file needs again loads from the session's persistent cache.
_MAX_MAPS = 30_000


def _maps() -> int:
    try:
        with open("/proc/self/maps", "rb") as f:
            return sum(1 for _ in f)
    except OSError:  # not Linux
        return 0


@pytest.fixture(autouse=True, scope="module")
def _few_enough_memory_maps():
    yield
    if _maps() > _MAX_MAPS:
        jax.clear_caches()
        gc.collect()  # the executables are freed with their last reference


def pytest_sessionfinish(session):
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # a pytest-xdist worker: report to the controller
        workeroutput["gradflow_compiles"] = dict(_COMPILES)
        workeroutput["gradflow_compiles_by_function"] = dict(_BY_FUNCTION)


def pytest_testnodedown(node, error):
    for key, value in (
        getattr(node, "workeroutput", {}).get("gradflow_compiles", {}).items()
    ):
        _COMPILES[key] += value
    by_function = getattr(node, "workeroutput", {}).get(
        "gradflow_compiles_by_function", {}
    )
    for name, (count, seconds) in by_function.items():
        tally = _BY_FUNCTION.setdefault(name, [0, 0.0])
        tally[0] += count
        tally[1] += seconds


def pytest_terminal_summary(terminalreporter):
    compiled = _COMPILES["compilations"] - _COMPILES["cache_hits"]
    terminalreporter.write_line(
        f"XLA: {compiled} compilations ({_COMPILES['seconds']:.0f} s with the "
        f"{_COMPILES['cache_hits']} loads from the persistent cache), "
        f"load {os.getloadavg()[0]:.1f}"
    )
    # GRADFLOW_TEST_COMPILES=N: the N functions (with
    # GRADFLOW_TEST_COMPILE_SITES=1, functions and lines) that took the most
    # compiling, with their share of it
    top = int(os.environ.get("GRADFLOW_TEST_COMPILES", "0"))
    ranked = sorted(_BY_FUNCTION.items(), key=lambda kv: -kv[1][1])[:top]
    total = max(_COMPILES["seconds"], 1e-9)
    for name, (count, seconds) in ranked:
        terminalreporter.write_line(
            f"  {seconds:7.1f} s {seconds / total:6.1%} {count:5d} x {name}"
        )
