"""Plateau lengths grow like log(1/init_scale).

Integrates the sticky chain from init scales 1e-3 ... 1e-7 (one batched
gf.sweep, `--seeds` seeds each) and measures, from the stages, the end of
condensation (first saddle entry) and the start of the first focus. Near the
origin the flow is linear with growth rate sigma = |pi - 1/d| |pi|, so
escaping from a point of size `scale` takes a time ~ log(1/scale) / sigma: the
times should be linear in log(1/scale). Prints the fitted slopes and writes
docs/figures/init_scale_sweep.{png,pdf} (the two event times against the
scale, with the theory's log(1/scale)/sigma); --save PATH keeps the sweep.

    python examples/init_scale_sweep.py [--scales 1e-3 1e-4 1e-5 1e-6 1e-7] [--seeds 1]
"""

import argparse
import time
from pathlib import Path

import numpy as np

import gradflow as gf
from gradflow import plot


parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument(
    "--scales", type=float, nargs="+", default=[1e-3, 1e-4, 1e-5, 1e-6, 1e-7]
)
parser.add_argument("--seeds", type=int, default=1)
parser.add_argument("--t1", type=float, default=600.0)
parser.add_argument("--out", type=Path, default=Path("docs/figures"))
parser.add_argument("--save", type=Path, default=None, help="write the sweep here")
args = parser.parse_args()

start = time.perf_counter()
chain = gf.chains.sticky(6, 0.5, 0.5, 0.05)
sigma = gf.theory.origin_rate(chain)
sw = gf.sweep(
    chain,
    init_scale=args.scales,
    seeds=range(args.seeds),
    width=8,
    t1=args.t1,
    run=gf.Run(progress=False),
)
scales = np.array([m.init_scale for m in sw.members])
times = {
    name: np.array([plot.member_value(t, value) for t in sw])
    for name, value in (
        ("condensation ends", "condensation.t_end"),
        ("first focus starts", "focus.t_start"),
    )
}
for i, m in enumerate(sw.members):
    print(
        f"init_scale {m.init_scale:g}, seed {m.seed}: condensation ends at "
        f"{times['condensation ends'][i]:.4g}, first focus starts at "
        f"{times['first focus starts'][i]:.4g}"
    )
x = np.log(1 / scales)
plt = plot.pyplot()
fig, ax = plt.subplots(figsize=(7, 4.5))
for (name, t), marker, color in zip(times.items(), "os", ("C0", "C1"), strict=True):
    ok = np.isfinite(t)
    slope, intercept = np.polyfit(x[ok], t[ok], 1)
    print(f"{name}: t = {slope:.3f} log(1/scale) + {intercept:.2f}")
    ax.plot(scales[ok], t[ok], marker, color=color,
            label=f"{name} (slope {slope:.2f} per unit of log(1/scale))")  # fmt: skip
    grid = np.geomspace(scales.min(), scales.max(), 50)
    ax.plot(grid, slope * np.log(1 / grid) + intercept, "-", color=color, lw=0.8)
grid = np.geomspace(scales.min(), scales.max(), 50)
ax.plot(grid, np.log(1 / grid) / sigma, "--", color="k", lw=1,
        label=rf"theory $\log(1/\varepsilon)/\sigma$, slope $1/\sigma$ = {1 / sigma:.2f}")  # fmt: skip
print(
    f"linear-regime prediction for the condensation slope: 1/sigma = {1 / sigma:.3f}"
    " (one escape from the origin; the measured time also includes O(1) transients)"
)
ax.set_xscale("log")
ax.set_xlabel(r"initial scale $\varepsilon$")
ax.set_ylabel("time $t$")
ax.set_title(
    f"sticky(6, 0.5, 0.5, 0.05), width 8: plateau lengths vs initial scale "
    f"({len(sw)} members, one gf.sweep)",
    fontsize=9,
)
ax.legend(fontsize=8, frameon=False)
ax.grid(alpha=0.25, lw=0.5)
fig.tight_layout()
plot.save_figure(fig, args.out / "init_scale_sweep")
if args.save:
    sw.save(args.save)
print(f"{len(sw)} members in {time.perf_counter() - start:.1f} s")
