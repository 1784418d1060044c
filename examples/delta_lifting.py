"""`delta = 0` against `delta > 0`: the degenerate point and its lifting.

With `delta = 0` the rare tokens of the sticky chain are exactly symmetric: the
flow settles on the rank-one critical point after the first cycle and no new
direction opens. A small `delta` lifts the degeneracy: sigma_2 / sigma_1 of W0
grows and a second cycle starts. Writes docs/figures/delta_lifting.{png,pdf}.

    python examples/delta_lifting.py [--t1 5000] [--out docs/figures]
"""

import argparse
from pathlib import Path

import numpy as np

import gradflow as gf
from gradflow import plot


parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--t1", type=float, default=5_000.0)
parser.add_argument("--out", type=Path, default=Path("docs/figures"))
args = parser.parse_args()

plt = plot.pyplot()
fig, axes = plt.subplots(2, 1, figsize=(8, 7), sharex=True)
for delta, color in ((0.0, "tab:blue"), (0.05, "tab:red")):
    chain = gf.chains.sticky(6, 0.5, 0.5, delta)
    traj = gf.markov.integrate_stages(
        chain, 1e-3, width=8, t1=args.t1, run=gf.Run(progress=False)
    )
    print(f"delta = {delta}: {traj}")
    print(gf.stage_table(traj.stages))
    t = traj.ts[1:]
    axes[0].plot(t, traj.loss[1:], color=color, label=f"delta = {delta}")
    axes[1].plot(
        t, traj.extras["sv_ratio"][1:, 0], color=color, label=f"delta = {delta}"
    )
    for s in traj.stages:
        # Shade the stage of sigma_2 (singular-value index 1) only.
        if s.name == "new_direction" and s.sv_index == 1:
            axes[1].axvspan(s.t_start, s.t_end, color=color, alpha=0.15, lw=0)
    # The random start has sigma_2/sigma_1 ~ 0.8; condensation brings it down
    # to ~1e-3; a new direction brings it back up through 0.1.
    ratio = traj.extras["sv_ratio"][:, 0]
    low = int(np.argmin(ratio))
    up = ratio[low:] > 0.1
    crossing = traj.ts[low + int(np.argmax(up))] if up.any() else None
    print(
        f"  sigma_2/sigma_1: min {ratio[low]:.2e} at t = {traj.ts[low]:.4g}; "
        f"passes 0.1 again at t = {crossing}"
    )
axes[0].set_ylabel("population loss")
axes[0].legend()
axes[1].axhline(0.1, color="gray", ls=":", lw=1, label="0.1")
axes[1].set_yscale("log")
axes[1].set_xscale("log")
axes[1].set_ylabel(r"$\sigma_2 / \sigma_1$ of $W_0$ (shaded: new direction)")
axes[1].set_xlabel("gradient-flow time $t$ (log scale)")
axes[1].legend()
fig.suptitle("sticky(6, 0.5, 0.5, delta): the degenerate point and its lifting")
fig.tight_layout()
plot.save_figure(fig, args.out / "delta_lifting")
