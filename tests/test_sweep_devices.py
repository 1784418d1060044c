"""gf.sweep sharded over 4 CPU devices, and over 2 processes joined by
jax.distributed, equals the single-device sweep."""

import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import gradflow as gf


# Subprocesses that start JAX and compile the sweep again: the integration tier
# (`python -m pytest -m integration`, run by .ci/run after the default tier).
pytestmark = pytest.mark.integration

HERE = Path(__file__).parent
WORKER = HERE / "sweep_worker.py"
TIMEOUT = 1200  # seconds per subprocess (a loaded machine compiles slowly)


sys.path.insert(0, str(HERE))
from sweep_worker import small_sweep  # noqa: E402


@pytest.fixture(scope="module")
def reference():
    return small_sweep(gf)


def _env(**extra):
    env = dict(os.environ)
    root = str(Path(gf.__file__).parent.parent)
    env["PYTHONPATH"] = os.pathsep.join([root, env.get("PYTHONPATH", "")])
    env["JAX_PLATFORMS"] = "cpu"
    env.update(extra)
    return env


def _check(out: Path, reference, devices: int, processes: int, padding: int):
    got = np.load(out)
    assert int(got["devices"]) == devices and int(got["processes"]) == processes
    assert int(got["padding"]) == padding
    np.testing.assert_allclose(got["loss"], reference.loss, rtol=1e-12, atol=0)
    np.testing.assert_array_equal(got["steps"], reference.stats.num_steps)
    counts = [len(t.events) for t in reference]
    np.testing.assert_array_equal(got["event_counts"], counts)
    times = np.array([e.t for t in reference for e in t.events])
    # Event times are root-found (bisection) or interpolated between saves:
    # round-off that differs with the batch per device moves them by ~1e-11.
    np.testing.assert_allclose(got["event_times"], times, rtol=1e-9, atol=0)


def test_four_devices_equal_one(reference, tmp_path):
    out = tmp_path / "four.npz"
    flags = os.environ.get("XLA_FLAGS", "")
    env = _env(XLA_FLAGS=f"{flags} --xla_force_host_platform_device_count=4")
    proc = subprocess.run(
        [sys.executable, str(WORKER), str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    _check(out, reference, devices=4, processes=1, padding=0)
    # One lane per device, members one by one: the chunk is traced once, by
    # the first lane; the other three take its trace and lower it for their
    # devices (each traced it again before: 4 traces of seconds each)
    assert int(np.load(out)["chunk_traces"]) == 1


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_processes_equal_one(reference, tmp_path):
    """Two processes with 3 CPU devices each: 8 members padded to 12 over 6
    devices on 2 hosts."""
    port = _free_port()
    flags = os.environ.get("XLA_FLAGS", "")
    env = _env(XLA_FLAGS=f"{flags} --xla_force_host_platform_device_count=3")
    outs = [tmp_path / f"process{i}.npz" for i in range(2)]
    procs = [
        subprocess.Popen(
            [sys.executable, str(WORKER), str(out), str(i), "2", str(port)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for i, out in enumerate(outs)
    ]
    logs = []
    try:
        for p in procs:
            logs.append(p.communicate(timeout=TIMEOUT)[0])
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for p, log in zip(procs, logs, strict=True):
        assert p.returncode == 0, log[-3000:]
    for out in outs:  # both processes end with the whole result
        _check(out, reference, devices=6, processes=2, padding=4)
