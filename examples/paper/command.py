"""The command: measure the groups of rows, print them, write the page."""

import argparse
import os
import sys
import time
from dataclasses import asdict
from pathlib import Path

import gradflow as gf

from . import __doc__ as DOC, page
from .cycles import rows_cycles, rows_text
from .manifold import rows_dilution, rows_new_direction
from .origin import rows_condensation, rows_focus
from .study import FAST, FAST_GROUPS, FULL, GROUPS, Row, Study


# ---------------------------------------------------------------------------
# The command
# ---------------------------------------------------------------------------

ROWS = {
    "condensation": rows_condensation,
    "focus": rows_focus,
    "dilution": rows_dilution,
    "new_direction": rows_new_direction,
    "cycles": rows_cycles,
    "text": rows_text,
}


def measure(study: Study, groups=GROUPS) -> dict[str, list[Row]]:
    """The rows of each group in `groups`, measured on `study`'s runs."""
    out = {}
    for group in groups:
        start = time.perf_counter()
        out[group] = ROWS[group](study)
        study.log(
            f"{group}: {len(out[group])} rows in {time.perf_counter() - start:.1f} s"
        )
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m examples.paper", description=(DOC or "").splitlines()[0]
    )
    parser.add_argument(
        "--fast",
        action="store_true",
        help="reduced settings; writes nothing unless --out",
    )
    parser.add_argument(
        "--only",
        nargs="+",
        choices=GROUPS,
        help="measure these groups only (prints them)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="root of docs/ (default: the repository's, in full mode)",
    )
    args = parser.parse_args(argv)
    settings = FAST if args.fast else FULL
    study = Study(settings)
    start = time.perf_counter()
    rows = measure(study, args.only or (FAST_GROUPS if args.fast else GROUPS))
    wall = time.perf_counter() - start
    for group, group_rows in rows.items():
        print(page.format_rows(group, group_rows))
    wrong = [r for rs in rows.values() for r in rs if not r.as_expected]
    out = (
        args.out
        if args.out is not None
        else (
            None
            if (args.fast or args.only)
            else Path(__file__).resolve().parents[2] / "docs"
        )
    )
    if out is not None:
        meta = {
            "command": "python -m examples.paper" + (" --fast" if args.fast else ""),
            "wall_time_s": wall, "load_average": os.getloadavg(),
            "cpus": os.cpu_count(), "gradflow": gf.__version__,
            "timings_s": study.timings, "settings": asdict(settings),
        }  # fmt: skip
        page.write(out, study, rows, meta)
    print(
        f"{sum(len(r) for r in rows.values())} rows in {wall:.0f} s; {len(wrong)} differ from the page's verdict"
    )
    for r in wrong:
        print(
            f"  claim {r.claim} [{r.scenario}] {r.part}: {r.quantity}: holds = {r.holds}, page says {r.expect}"
        )
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
