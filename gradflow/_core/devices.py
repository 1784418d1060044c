r"""Every core of a CPU host as a JAX device, so that sweeps use them all.

A sweep ([`gradflow.sweep`][]) shards its members over `jax.devices()`. On a
CPU, JAX makes one device of the whole host by default, and a sweep then runs
its members one after another on one core. Importing gradflow asks JAX for
one CPU device per core instead (`jax_num_cpu_devices`), before any JAX
computation has started: a sweep's members then run on every core at once,
each member through the same compiled loop as a solo run (measured:
`benchmarks/sweep.py`, `docs/performance.md`). Nothing else changes: a
computation that names no device runs on the first one, as before.

It is not done when the user has chosen already: `GRADFLOW_CPU_DEVICES=N` in
the environment (`1` keeps JAX's single CPU device), `jax_num_cpu_devices` set
(`jax.config.update` or `JAX_NUM_CPU_DEVICES`), or
`--xla_force_host_platform_device_count` in `XLA_FLAGS`; nor when JAX has
already started its backends (then the setting cannot change any more).
"""

import os

import jax


ENV = "GRADFLOW_CPU_DEVICES"


def host_cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def requested_cpu_devices(configured: int | None = None) -> int | None:
    """How many CPU devices gradflow asks JAX for: `GRADFLOW_CPU_DEVICES` if
    set, else one per core; `None` when the user has chosen through JAX's own
    settings. `configured` is JAX's `jax_num_cpu_devices` (by default its
    current value; `-1` when nobody has set it)."""
    value = os.environ.get(ENV, "").strip()
    if value:
        try:
            count = int(value)
        except ValueError:
            raise ValueError(
                f"{ENV} must be a positive integer, got {ENV}={value!r}"
            ) from None
        if count < 1:
            raise ValueError(f"{ENV} must be a positive integer, got {ENV}={value!r}")
        return count
    if "xla_force_host_platform_device_count" in os.environ.get("XLA_FLAGS", ""):
        return None
    if configured is None:
        configured = jax.config.jax_num_cpu_devices  # pyright: ignore[reportAttributeAccessIssue]
    if os.environ.get("JAX_NUM_CPU_DEVICES") or (configured or 0) > 0:
        return None
    return host_cores()


def use_every_core() -> bool:
    """Asks JAX for one CPU device per core (see the module's docstring).
    Returns whether the setting was made."""
    count = requested_cpu_devices()
    if count is None:
        return False
    try:
        jax.config.update("jax_num_cpu_devices", count)
    except RuntimeError:  # JAX's backends have started: too late, keep them
        return False
    return True


__all__ = ["ENV", "host_cores", "requested_cpu_devices", "use_every_core"]
