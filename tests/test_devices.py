"""One CPU device per core (gradflow/_core/devices.py): what gradflow asks JAX
for, the opt-out `GRADFLOW_CPU_DEVICES`, and how a sweep deals its members to
the devices."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import gradflow as gf

# Private, tested for themselves: the policy that asks JAX for one CPU device
# per core (what importing gradflow does), and how a sweep deals its members
# to the devices (gf.sweep's results do not show where a member ran).
from gradflow._core import devices
from gradflow._sweep.batch import member_positions


# JAX's setting as before anyone chose (importing gradflow in this process has
# set it): passed to the policy instead of read from JAX
UNSET = -1


@pytest.fixture
def clean_env(monkeypatch):
    """No choice made by the user through the environment."""
    for name in (devices.ENV, "JAX_NUM_CPU_DEVICES"):
        monkeypatch.delenv(name, raising=False)
    flags = os.environ.get("XLA_FLAGS", "")
    kept = " ".join(
        f for f in flags.split() if "xla_force_host_platform_device_count" not in f
    )
    monkeypatch.setenv("XLA_FLAGS", kept)
    return monkeypatch


def test_one_device_per_core_unless_chosen(clean_env):
    assert devices.requested_cpu_devices(UNSET) == devices.host_cores()
    # chosen through JAX's setting (as importing gradflow did here)
    assert devices.requested_cpu_devices(2) is None
    clean_env.setenv(devices.ENV, "3")
    assert devices.requested_cpu_devices(UNSET) == 3
    clean_env.setenv(devices.ENV, "")
    clean_env.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=4")
    assert devices.requested_cpu_devices(UNSET) is None
    clean_env.setenv("XLA_FLAGS", "")
    clean_env.setenv("JAX_NUM_CPU_DEVICES", "2")
    assert devices.requested_cpu_devices(UNSET) is None


@pytest.mark.parametrize("value", ["0", "-2", "two", "1.5"])
def test_bad_env_value_is_named(clean_env, value):
    clean_env.setenv(devices.ENV, value)
    with pytest.raises(ValueError, match=rf"GRADFLOW_CPU_DEVICES={value!r}"):
        devices.requested_cpu_devices(UNSET)


def test_too_late_is_not_an_error():
    # JAX's backends have started in this process (gradflow is imported and
    # has computed): the request is dropped, the devices stay as they are.
    import jax

    jax.numpy.zeros(1).block_until_ready()
    before = jax.devices()
    devices.use_every_core()
    assert jax.devices() == before


@pytest.mark.parametrize("n, num_devices", [(8, 1), (8, 2), (64, 4), (5, 2), (7, 3)])
def test_members_dealt_in_turn_fill_each_slot_once(n, num_devices):
    pos = member_positions(n, num_devices)
    per_device = -(-n // num_devices)
    # a one-to-one map into the padded member axis
    assert len(set(pos.tolist())) == n
    assert pos.min() >= 0 and pos.max() < per_device * num_devices
    # member i on device i % D (equal contiguous shares of the axis)
    np.testing.assert_array_equal(pos // per_device, np.arange(n) % num_devices)
    if num_devices == 1:
        np.testing.assert_array_equal(pos, np.arange(n))


# A fresh interpreter per setting (JAX fixes its devices when it starts): about
# 3-6 s each on the shared machine (the import of gradflow).
_PROBE = "import gradflow, jax; print(len(jax.devices('cpu')))"


def _devices_in_fresh_process(**env_extra) -> int:
    env = {k: v for k, v in os.environ.items() if k != devices.ENV}
    env.update(JAX_PLATFORMS="cpu", **env_extra)
    root = str(Path(gf.__file__).parent.parent)
    env["PYTHONPATH"] = os.pathsep.join([root, env.get("PYTHONPATH", "")])
    env.pop("JAX_NUM_CPU_DEVICES", None)
    env["XLA_FLAGS"] = " ".join(
        f
        for f in env.get("XLA_FLAGS", "").split()
        if "xla_force_host_platform_device_count" not in f
    )
    out = subprocess.run(
        [sys.executable, "-c", _PROBE],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return int(out.stdout.split()[-1])


@pytest.mark.integration  # two fresh interpreters: 7-35 s with the load
def test_import_gives_every_core_and_the_env_opts_out():
    assert _devices_in_fresh_process() == devices.host_cores()
    assert _devices_in_fresh_process(GRADFLOW_CPU_DEVICES="1") == 1
