"""How many threads the linear-algebra libraries use while gradflow computes.

NumPy, SciPy and JAX's CPU decompositions (`eigh`, `svd`, `qr`: jaxlib calls
SciPy's LAPACK) run on OpenBLAS, which starts one thread per core and lets
them spin while they wait for work. gradflow's matrices are small (a few
hundred rows at most), so a second thread gains little on an idle machine,
while on a busy one (other processes, or the test suite's own worker
processes) the spinning threads take the cores from each other: measured here
under load, one 224 x 224 `eigh` was 23x (NumPy) to 30x (JAX) slower with the
default threads than with one, and a whole saturated-start solve 11x
(`docs/performance.md`, "Threads").

So gradflow runs its solves (every flow, sweep and SGD run goes through the
one driver) and its host-side decompositions (the theory's Hessians) with
one BLAS thread, set for their duration with
[threadpoolctl](https://github.com/joblib/threadpoolctl) and restored after.
Set the environment variable `GRADFLOW_BLAS_THREADS` to a number of threads,
or to `auto` to leave the libraries' own setting alone.
"""

import contextlib
import functools
import os
from collections.abc import Callable, Iterator
from typing import Any, TypeVar


ENV = "GRADFLOW_BLAS_THREADS"
DEFAULT_THREADS = 1

_F = TypeVar("_F", bound=Callable[..., Any])


def blas_threads() -> int | None:
    """The number of BLAS threads gradflow computes with: `$GRADFLOW_BLAS_THREADS`
    (a positive integer, or `auto`: `None`, the libraries' own setting), by
    default 1. A value that is neither raises a one-line `ValueError`."""
    raw = os.environ.get(ENV, "").strip()
    if not raw:
        return DEFAULT_THREADS
    if raw.lower() == "auto":
        return None
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(f"{ENV} must be a positive integer or 'auto', got {raw!r}")
    return value


def _load_lapack() -> None:
    # jaxlib loads SciPy's LAPACK (and its OpenBLAS) the first time a
    # decomposition is compiled; threadpoolctl limits only libraries already
    # loaded, so load it first.
    with contextlib.suppress(ImportError):
        import scipy.linalg.cython_lapack  # noqa: F401


@contextlib.contextmanager
def limited_blas_threads() -> Iterator[None]:
    """Runs its block with `blas_threads()` BLAS threads (OpenBLAS, MKL,
    BLIS: every BLAS library loaded in the process), restoring each library's
    setting after; a no-op when that is `None`."""
    threads = blas_threads()
    if threads is None:
        yield
        return
    _load_lapack()
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=threads, user_api="blas"):
        yield


def with_limited_blas_threads(fn: _F) -> _F:
    """`fn` run inside [`limited_blas_threads`][]."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with limited_blas_threads():
            return fn(*args, **kwargs)

    return wrapper  # pyright: ignore[reportReturnType]
