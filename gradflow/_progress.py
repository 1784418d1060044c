"""A Diffrax progress meter that stays silent for short solves.

Diffrax's `TqdmProgressMeter` draws a bar from the first step; gradflow wants a
bar only on runs that last more than a few seconds, which tqdm's `delay`
provides. The host-side bookkeeping mirrors Diffrax's own meters: one
`io_callback` to open the bar, a `pure_callback` every `refresh_steps` steps,
one `io_callback` to close it.
"""

import threading

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import io_callback
from jaxtyping import Array, Int


_bars: dict[int, object] = {}
_lock = threading.Lock()
_counter = [0]


class _MeterState(eqx.Module):
    meter_idx: Int[Array, ""]
    step: Int[Array, ""]


class DelayedTqdmProgressMeter(dfx.AbstractProgressMeter):
    """A tqdm bar (percentage of `[t0, t1]`) that appears after `delay` seconds.

    **Arguments:**

    - `delay`: seconds before the bar is drawn; shorter solves print nothing.
    - `refresh_steps`: solver steps between bar updates (each is a host callback).
    - `description`: text in front of the bar.
    """

    delay: float = eqx.field(default=2.0, static=True)
    refresh_steps: int = eqx.field(default=50, static=True)
    description: str = eqx.field(default="gradflow", static=True)

    def _open(self) -> np.ndarray:
        import tqdm

        with _lock:
            _counter[0] += 1
            _bars[_counter[0]] = tqdm.tqdm(
                total=100,
                unit="%",
                delay=self.delay,
                desc=self.description,
                bar_format="{desc}: {percentage:5.1f}%|{bar}| [{elapsed}<{remaining}]",
            )
            return np.array(_counter[0], dtype=np.int32)

    def init(self) -> _MeterState:
        idx = io_callback(self._open, jax.ShapeDtypeStruct((), jnp.int32))
        return _MeterState(meter_idx=idx, step=jnp.array(0))

    def step(self, state: _MeterState, progress) -> _MeterState:
        def _update(p, idx):
            with _lock:
                bar = _bars.get(int(np.asarray(idx).reshape(-1)[0]))
                if bar is not None:
                    bar.n = round(100 * float(np.asarray(p).reshape(-1)[0]), 1)
                    bar.refresh()
            return idx

        idx = jax.lax.cond(
            state.step % self.refresh_steps == 0,
            lambda i: jax.pure_callback(
                _update, i, progress, i, vmap_method="expand_dims"
            ),
            lambda i: i,
            state.meter_idx,
        )
        return _MeterState(meter_idx=idx, step=state.step + 1)

    def close(self, state: _MeterState):
        def _close(idx):
            with _lock:
                bar = _bars.pop(int(np.asarray(idx).reshape(-1)[0]), None)
                if bar is not None:
                    bar.n = 100
                    bar.close()

        io_callback(_close, None, state.meter_idx)
