"""One BLAS thread while gradflow computes (gradflow/_core/threads.py): the
setting, and the driver that every solve goes through running its chunks under
it. Nothing is compiled (the driver runs a host-only job), well under a
second."""

import numpy as np
import pytest
import threadpoolctl

# Private, tested for themselves: the BLAS-thread policy (set by the documented
# GRADFLOW_BLAS_THREADS) and the one host driver that every flow, sweep and
# SGD run goes through (each of its chunks runs under the policy).
from gradflow._core.threads import ENV, blas_threads, limited_blas_threads
from gradflow._loop.driver import Job, drive


def _blas_threads() -> set[int]:
    import scipy.linalg.cython_lapack  # noqa: F401  (the LAPACK jaxlib calls)

    return {i["num_threads"] for i in threadpoolctl.threadpool_info()
            if i["user_api"] == "blas"}  # fmt: skip


def test_setting(monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    assert blas_threads() == 1
    monkeypatch.setenv(ENV, "3")
    assert blas_threads() == 3
    monkeypatch.setenv(ENV, "auto")
    assert blas_threads() is None
    for bad in ("0", "two", "-1"):
        monkeypatch.setenv(ENV, bad)
        with pytest.raises(
            ValueError, match=f"{ENV} must be a positive integer or 'auto', got '{bad}'"
        ):
            blas_threads()


def test_limit_is_set_and_restored(monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    with threadpoolctl.threadpool_limits(limits=2, user_api="blas"):
        assert _blas_threads() == {2}
        with limited_blas_threads():
            assert _blas_threads() == {1}
        assert _blas_threads() == {2}
        monkeypatch.setenv(ENV, "auto")
        with limited_blas_threads():
            assert _blas_threads() == {2}


class _Recording(Job):
    """Three host-only chunks, each recording the BLAS threads it ran with."""

    def __init__(self):
        self.seen = []

    def running(self, state):
        return state < 3

    def advance(self, state):
        self.seen.append(_blas_threads())
        return state + 1

    def progress(self, state):
        return float(state), None

    def snapshot(self, state):
        return {}, {"state": np.asarray(state)}


def test_every_chunk_of_a_drive_runs_on_one_blas_thread(monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    job = _Recording()
    with threadpoolctl.threadpool_limits(limits=2, user_api="blas"):
        driven = drive(job, 0, total=3.0, progress=False)
        assert _blas_threads() == {2}
    assert driven.num_chunks == 3 and job.seen == [{1}, {1}, {1}]
