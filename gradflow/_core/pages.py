"""Results written into a text page (a Markdown report, a README) between two
marker lines, so that the page keeps its prose and a script rewrites only its
own part: the one writer behind every `--doc` option of gradflow's benchmarks,
examples and documentation scripts."""

import os
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
