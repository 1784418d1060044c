"""`python -m benchmarks.problems`: see the package's docstring."""

import argparse
import json
import os
import time

from .._git import short_head
from . import __doc__ as DOC
from .common import FIGURES, JSON, OWN_META, PAGE, PARTS, ROOT
from .in_context import in_context
from .in_context_speed import in_context_speed
from .literature import literature
from .page import markdown, write_page
from .performance import performance
from .sgd import sgd
from .sweeps import sweeps


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.problems", description=(DOC or "").splitlines()[0]
    )
    parser.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS))
    parser.add_argument("--no-doc", action="store_true", help="do not write the page")
    args = parser.parse_args(argv)
    FIGURES.mkdir(parents=True, exist_ok=True)
    out = json.loads(JSON.read_text()) if JSON.exists() else {}
    for part in args.parts:
        start = time.perf_counter()
        {
            "literature": literature,
            "sgd": sgd,
            "sweeps": sweeps,
            "performance": performance,
            "in_context": in_context,
            "in_context_speed": in_context_speed,
        }[part](out)
        print(f"{part}: {time.perf_counter() - start:.0f} s", flush=True)
    commit = short_head(ROOT)
    meta = dict(
        commit=commit,
        date=time.strftime("%Y-%m-%d"),
        load=", ".join(f"{x:.1f}" for x in os.getloadavg()),
        parts=args.parts,
    )
    for part in args.parts:
        if part in OWN_META:
            out[part]["meta"] = meta
    if set(args.parts) - set(OWN_META):
        out["meta"] = meta
        for part in set(args.parts) - set(OWN_META):
            out.setdefault("part_meta", {})[part] = meta
    JSON.write_text(json.dumps(out, indent=1))
    text = markdown(out)
    print(text)
    if not args.no_doc:
        write_page(text)
        print(f"wrote {PAGE}")


if __name__ == "__main__":
    main()
