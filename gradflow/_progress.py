"""A Diffrax progress meter that stays silent for short solves and can span
several Diffrax calls (the segments of a solve with events).

Diffrax's `TqdmProgressMeter` draws a bar from the first step and one bar per
`diffeqsolve`; gradflow wants a bar only on runs that last more than a few
seconds (tqdm's `delay`), and one bar for a whole `integrate` call even when
events split it into segments ([`shared_progress_bar`][]). The host-side
bookkeeping mirrors Diffrax's own meters: one `io_callback` to open the bar, a
`pure_callback` every `refresh_steps` steps, one `io_callback` to close it.
"""

import contextlib
import threading
from typing import Any

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import io_callback
from jaxtyping import Array, Float, Int


_bars: dict[int, Any] = {}  # tqdm bars
_lock = threading.Lock()
_counter = [0]
_shared: list[int | None] = [None]


def _new_bar(description: str, delay: float) -> int:
    import tqdm

    with _lock:
        _counter[0] += 1
        _bars[_counter[0]] = tqdm.tqdm(
            total=100,
            unit="%",
            delay=delay,
            desc=description,
            bar_format="{desc}: {percentage:5.1f}%|{bar}| [{elapsed}<{remaining}]",
        )
        return _counter[0]


def _close_bar(idx: int, complete: bool) -> None:
    with _lock:
        bar = _bars.pop(idx, None)
    if bar is not None:
        if complete:
            bar.n = 100
            bar.update(0)
        bar.close()


@contextlib.contextmanager
def shared_progress_bar(description: str = "gradflow", delay: float = 2.0):
    """Within this block every [`DelayedTqdmProgressMeter`][] draws on one bar
    (opened here, closed on exit), so a solve split into segments shows one
    bar from 0 to 100 %."""
    idx = _new_bar(description, delay)
    _shared[0] = idx
    complete = False
    try:
        yield
        complete = True
    finally:
        _shared[0] = None
        _close_bar(idx, complete)


class _MeterState(eqx.Module):
    meter_idx: Int[Array, ""]
    step: Int[Array, ""]


class _Opener(eqx.Module):
    """Opens a bar on the host (or returns the shared one). Only static fields,
    so it hashes by value, as JAX requires of a callback."""

    description: str = eqx.field(static=True)
    delay: float = eqx.field(static=True)

    def __call__(self) -> np.ndarray:
        idx = _shared[0]
        if idx is None:
            idx = _new_bar(self.description, self.delay)
        return np.array(idx, dtype=np.int32)


class DelayedTqdmProgressMeter(dfx.AbstractProgressMeter):
    """A tqdm bar (percentage of the whole solve) that appears after `delay` s.

    **Arguments:**

    - `start_fraction`: the fraction of the whole solve done before this Diffrax
      call starts (an array, so a new segment does not recompile).
    - `delay`: seconds before the bar is drawn; shorter solves print nothing.
    - `refresh_steps`: solver steps between bar updates (each is a host callback).
    - `description`: text in front of the bar.
    """

    start_fraction: Float[Array, ""] = eqx.field(
        default_factory=lambda: jnp.asarray(0.0), converter=jnp.asarray
    )
    delay: float = eqx.field(default=2.0, static=True)
    refresh_steps: int = eqx.field(default=50, static=True)
    description: str = eqx.field(default="gradflow", static=True)

    def init(self) -> _MeterState:
        opener = _Opener(self.description, self.delay)
        idx = io_callback(opener, jax.ShapeDtypeStruct((), jnp.int32))
        return _MeterState(meter_idx=idx, step=jnp.array(0))

    def step(self, state: _MeterState, progress) -> _MeterState:
        def _update(p, idx):
            with _lock:
                bar = _bars.get(int(np.asarray(idx).reshape(-1)[0]))
                if bar is not None:
                    bar.n = round(100 * float(np.asarray(p).reshape(-1)[0]), 1)
                    bar.update(0)  # respects `delay`, unlike `refresh()`
            return idx

        frac = self.start_fraction
        total = frac + jnp.asarray(progress, frac.dtype) * (1 - frac)
        idx = jax.lax.cond(
            state.step % self.refresh_steps == 0,
            lambda i: jax.pure_callback(
                _update, i, total, i, vmap_method="expand_dims"
            ),
            lambda i: i,
            state.meter_idx,
        )
        return _MeterState(meter_idx=idx, step=state.step + 1)

    def close(self, state: _MeterState):
        def _close(idx):
            idx = int(np.asarray(idx).reshape(-1)[0])
            if idx != _shared[0]:
                _close_bar(idx, complete=True)

        io_callback(_close, None, state.meter_idx)
