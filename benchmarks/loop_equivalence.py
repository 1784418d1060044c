"""Results of the redesigned solve loop against an older checkout, side by side.

Runs the same `gf.integrate` calls (stages on and off) with this checkout and
with `--baseline DIR` (e.g. a worktree of the commit before the redesign), each
in its own process, and compares the saved losses and parameters:

- where both take the same steps (the bare solve): the largest relative
  difference of loss and parameters (expected: 0, bit for bit);
- where the steps differ (the old loop restarted the solver at every event,
  the new one does not): the times at which the loss falls through fixed
  levels, the final loss, and the stage sequence and times.

    python benchmarks/loop_equivalence.py --baseline /path/to/old/checkout

Scenarios: the default one (`sticky(6, 0.5, 0.5, 0.05)`, width 8, init_scale
1e-3, t1 = 20000) and three chains of other families (random Dirichlet, Zipf
with rho > 0, a bigram chain of the built-in text corpus).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np


ROOT = Path(__file__).resolve().parents[1]

_RUN = r"""
import json, sys, numpy as np, gradflow as gf
print("    using", gf.__file__, flush=True)
name, stages, out = sys.argv[1], sys.argv[2] == "1", sys.argv[3]
if name == "sticky":
    chain, kw = gf.chains.sticky(6, 0.5, 0.5, 0.05), dict(width=8, t1=20000.0)
elif name == "random":
    chain, kw = gf.chains.random(6, seed=3), dict(width=8, t1=20000.0)
elif name == "zipf":
    chain, kw = gf.chains.zipf(8, 1.0, rho=0.3), dict(width=8, t1=20000.0)
else:
    chain, kw = gf.chains.from_text(vocab_size=8), dict(width=8, t1=20000.0)
if hasattr(gf, "SaveAt"):  # the grouped options (issue 33)
    kw.update(saveat=gf.SaveAt(stages=stages), run=gf.Run(progress=False))
else:
    kw.update(stages=stages, progress=False)
tr = gf.integrate(chain, 1e-3, **kw)
def field(s, k):
    return s[k] if isinstance(s, dict) else getattr(s, k)
stages_out = [[field(s, "name"), field(s, "t_start"), field(s, "t_end")] for s in tr.stages]
np.savez(out, ts=tr.ts, loss=tr.loss, **{n: np.asarray(getattr(tr.params, n)) for n in ("W0", "W1", "WQ", "WK")})
json.dump({"stages": stages_out, "steps": getattr(tr.stats, "num_steps", None) or tr.stats["num_steps"], "ok": bool(tr.ok), "wall": tr.stats.wall_time}, open(out + ".json", "w"))
"""


def run(checkout: Path, name: str, stages: bool, out: str) -> dict:
    env = dict(os.environ, PYTHONPATH=str(checkout))
    # cwd away from any checkout: `python -c` puts the working directory
    # first on sys.path, before PYTHONPATH
    subprocess.run(
        [sys.executable, "-c", _RUN, name, "1" if stages else "0", out],
        env=env,
        check=True,
        cwd=Path(out).parent,
    )
    data = dict(np.load(out))
    data.update(json.load(open(out + ".json")))
    return data


def crossing(ts, loss, level):
    i = int(np.flatnonzero(loss < level)[0])
    f = (level - loss[i - 1]) / (loss[i] - loss[i - 1])
    return ts[i - 1] + f * (ts[i] - ts[i - 1])


def compare(a: dict, b: dict, stages: bool) -> str:
    lines = [f"    steps {a['steps']} (baseline) vs {b['steps']} (this)"]
    if a["steps"] == b["steps"] and a["loss"].shape == b["loss"].shape:
        rel = lambda x, y: float(np.max(np.abs(x - y)) / max(np.max(np.abs(x)), 1e-300))  # noqa: E731
        worst = max(rel(a[k], b[k]) for k in ("loss", "W0", "W1", "WQ", "WK"))
        lines.append(f"    same steps: largest relative difference {worst:.2e}")
    lo, hi = float(a["loss"][0]), float(a["loss"][-1])
    errs = []
    for f in (0.1, 0.5, 0.9):
        level = lo - f * (lo - hi)
        errs.append(
            abs(
                crossing(b["ts"], b["loss"], level)
                / crossing(a["ts"], a["loss"], level)
                - 1
            )
        )
    lines.append(
        f"    loss-drop crossing times: largest relative difference {max(errs):.2e}; "
        f"final loss difference {abs(a['loss'][-1] - b['loss'][-1]):.2e}"
    )
    if stages:
        sa = [s[0] for s in a["stages"]]
        sb = [s[0] for s in b["stages"]]
        lines.append(f"    stage sequence {'same' if sa == sb else 'DIFFERENT'}: {sb}")
        if sa != sb:
            lines.append(f"    baseline sequence: {sa}")
        if sa == sb:
            dt = [
                abs(y / x - 1)
                for s, r in zip(a["stages"], b["stages"], strict=True)
                for x, y in ((s[1], r[1]), (s[2], r[2]))
                if x > 0
            ]
            lines.append(f"    stage times: largest relative difference {max(dt):.2e}")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", type=Path, required=True)
    ap.add_argument("--scenarios", default="sticky,random,zipf,text")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.scenarios.split(","):
            for stages in (False, True):
                a = run(args.baseline, name, stages, f"{tmp}/a_{name}_{stages}.npz")
                b = run(ROOT, name, stages, f"{tmp}/b_{name}_{stages}.npz")
                print(f"{name}, stages={stages}:")
                print(compare(a, b, stages), flush=True)


if __name__ == "__main__":
    main()
