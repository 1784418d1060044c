"""Progress bars drawn from the host between chunks of steps.

Nothing inside a compiled solve calls back to Python (which would keep JAX's
persistent compilation cache from storing it): the solve runs in chunks of
steps, and after each chunk the host moves the bar to the time reached. The
bar stays hidden for short solves (tqdm's `delay`).
"""

import contextlib
import time


class HostProgress:
    """A bar from `0` to `total` (e.g. `t1`), moved with [`HostProgress.update`][].

    **Arguments:**

    - `total`: the end value; `enabled`: draw at all; `description`: the label;
    - `delay`: seconds before the bar appears (short runs show nothing);
    - `start`: the value reached already (a resumed run).
    """

    def __init__(
        self,
        total: float,
        *,
        enabled: bool = True,
        description: str = "gradflow",
        delay: float = 2.0,
        start: float = 0.0,
    ):
        self.total = float(total)
        self.bar = None
        if enabled:
            import tqdm

            self.bar = tqdm.tqdm(
                total=100,
                unit="%",
                delay=delay,
                desc=description,
                bar_format="{desc}: {percentage:5.1f}%|{bar}| [{elapsed}<{remaining}]",
            )
            self.update(start)

    def update(self, value: float, suffix: str | None = None) -> None:
        """Moves the bar to `value` (drawn once `delay` seconds have passed)."""
        if self.bar is None:
            return
        self.bar.n = min(100.0, 100.0 * float(value) / self.total)
        if suffix is not None:
            self.bar.set_postfix_str(suffix, refresh=False)
        now = time.time()
        if now >= self.bar.start_t + self.bar.delay:
            self.bar.refresh()
            # what tqdm's own `update` records: `close` then knows the bar is
            # on the screen and ends its line
            self.bar.last_print_t = now

    def close(self) -> None:
        """Ends the bar where it stands (where the work stopped: a bar is
        never moved to 100 % on the way out) and, if it was drawn, its line,
        so that the next output starts on a line of its own."""
        if self.bar is not None:
            self.bar.close()
            self.bar = None


@contextlib.contextmanager
def host_progress(total: float, **kwargs):
    """[`HostProgress`][] as a context manager (closed on exit, where the
    last `update` left it)."""
    bar = HostProgress(total, **kwargs)
    try:
        yield bar
    finally:
        bar.close()


__all__ = ["HostProgress", "host_progress"]
