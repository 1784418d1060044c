"""Results written into a text page (a Markdown report, a README) between two
marker lines, so that the page keeps its prose and a script rewrites only its
own part: the one writer behind every `--doc` option of gradflow's benchmarks,
examples and documentation scripts; and the quiet-machine rule of the
benchmarks that write measured tables ([`LoadGuard`][])."""

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from .files import atomic_write


def replace_between_markers(
    path: str | os.PathLike, begin: str, end: str, text: str
) -> int:
    r"""Replaces what lies between two markers of a text file by `text`.

    Every occurrence of `begin` is paired with the first `end` after it, and
    what lies between them becomes `text`, with a blank line on each side (so
    that Markdown renders it as a block of its own, below an HTML comment
    marker such as `<!-- name -->`). The markers and the rest of the file are
    kept as they are; the file is written atomically.

    **Arguments:**

    - `path`: the text file (UTF-8), e.g. a page of `docs/`.
    - `begin`, `end`: the markers, e.g. `"<!-- sweep-scaling -->"` and
      `"<!-- /sweep-scaling -->"`. `begin` may occur several times (the same
      command's output in two places) and several blocks may share one `end`.
    - `text`: the new content (leading and trailing newlines are dropped).

    **Returns:**

    The number of blocks replaced (at least 1).

    **Raises:**

    `ValueError` if `begin` is not in the file, or some `begin` has no `end`
    after it.

    ```python
    table = "| d | s |\n| --- | --- |\n| 4 | 1.2 |"
    gf.replace_between_markers("notes.md", "<!-- t -->", "<!-- /t -->", table)
    ```
    """
    path = Path(path)
    if not begin or not end:
        raise ValueError(f"begin and end must be non-empty, got {begin!r}, {end!r}")
    old = path.read_text(encoding="utf-8")
    body = "\n\n" + text.strip("\n") + "\n\n"
    pieces, start, count = [], 0, 0
    while (a := old.find(begin, start)) >= 0:
        a += len(begin)
        b = old.find(end, a)
        if b < 0:
            raise ValueError(
                f"'{path}' has the marker {begin!r} but no {end!r} after it"
            )
        pieces += [old[start:a], body]
        start, count = b, count + 1
    if not count:
        raise ValueError(f"'{path}' has no marker {begin!r}")
    new = "".join(pieces) + old[start:]
    atomic_write(path, lambda f: f.write(new.encode("utf-8")))
    return count


QUIET_LOAD = 1.5


def load_average() -> float:
    """The machine's 1-minute load average (`os.getloadavg()[0]`)."""
    return os.getloadavg()[0]


class LoadGuard:
    r"""The quiet-machine rule of a script that measures and writes a table
    into a page.

    On a machine shared with other work, wall times measure the other
    processes as much as the code. A benchmark that writes its table into a
    page ([`gradflow.replace_between_markers`][]) takes it with a guard:

    - at the start it prints the 1-minute load average;
    - [`check`][gradflow.LoadGuard.check] refuses (exits with a message) to
      write the page when that load exceeds `limit`, unless `force`;
    - [`row`][gradflow.LoadGuard.row] records the load before and after each
      measured row (print it beside the row; [`loaded`][gradflow.LoadGuard.loaded]
      says whether it exceeded `limit`, to mark the row);
    - [`write`][gradflow.LoadGuard.write] writes the table, with a note that
      it was taken under load when it was (`force`).

    **Arguments:**

    - `page`: the page the table goes into, or `None` (only printed).
    - `force`: write the page even when the load is above `limit`, marked.
    - `limit`: the 1-minute load average of a quiet machine (1.5).

    ```python
    guard = gf.LoadGuard(args.doc, force=args.force)
    guard.check()
    with guard.row() as load:
        seconds = measure()
    print(f"{seconds:.2f} s ({guard.label(load)})")
    guard.write("<!-- t -->", "<!-- /t -->", table)
    ```
    """

    def __init__(
        self,
        page: str | os.PathLike | None = None,
        *,
        force: bool = False,
        limit: float = QUIET_LOAD,
    ):
        self.page = page
        self.force = force
        self.limit = limit
        self.start = load_average()
        print(
            f"1-minute load at the start: {self.start:.2f} (quiet: at most {limit})",
            flush=True,
        )

    @property
    def quiet(self) -> bool:
        """Whether the load at the start was at most `limit`."""
        return self.start <= self.limit

    def check(self) -> None:
        """Exits (`SystemExit` with the reason) when a page is to be written,
        the load at the start is above `limit` and `force` is off."""
        if self.page is not None and not self.quiet and not self.force:
            raise SystemExit(
                f"refusing to write {self.page}: the 1-minute load is "
                f"{self.start:.2f} > {self.limit}; wait for a quiet machine, or "
                "pass --force to write the table marked as taken under load"
            )

    @contextlib.contextmanager
    def row(self) -> Iterator[dict[str, float]]:
        """Yields a dict that holds `load_before` (at once) and `load_after`
        (when the block ends)."""
        loads = {"load_before": load_average()}
        try:
            yield loads
        finally:
            loads["load_after"] = load_average()

    def loaded(self, loads: dict) -> bool:
        """Whether the load before or after a row exceeded `limit`."""
        return max(loads["load_before"], loads["load_after"]) > self.limit

    @staticmethod
    def label(loads: dict) -> str:
        """`"load 0.41 -> 0.52"`: the load before and after a row."""
        return f"load {loads['load_before']:.2f} -> {loads['load_after']:.2f}"

    def note(self) -> str:
        """The sentence a table taken under load carries (empty when quiet)."""
        if self.quiet:
            return ""
        return (
            f"**Taken under load** (1-minute load {self.start:.2f} at the start, "
            f"above {self.limit}): other processes shared the cores, so these "
            "numbers are not this machine's; take them again on a quiet machine."
        )

    def write(self, begin: str, end: str, table: str) -> None:
        """Writes `table` (and the note, if any) between the markers of the
        page, if a page was given; refuses as [`check`][gradflow.LoadGuard.check]
        does."""
        if self.page is None:
            return
        self.check()
        note = self.note()
        replace_between_markers(
            self.page, begin, end, table + (f"\n\n{note}" if note else "")
        )
