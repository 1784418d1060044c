"""How far a sweep on several host devices is from the one-device sweep of
before: the sweep case of `benchmarks/snapshot.py` (4 members, sticky(4, .5,
.5, delta) for delta in (0, 0.1), seeds 0 and 1, width 4, t1 = 2000) run in
this process (one CPU device per core unless `GRADFLOW_CPU_DEVICES` says
otherwise) against a snapshot written by the old code, and each member
against its solo `gf.integrate` run.

    PYTHONPATH=. python benchmarks/sweep_devices_diff.py /work/snap/before

Prints, per member, the step counts, the relative difference of the final
loss, the largest relative difference of the parameters (relative to each
array's largest entry) and of the stage boundaries.
"""

import argparse
import json
import os
from pathlib import Path

import numpy as np


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("snapshot", type=Path, help="a snapshot.py --write folder")
    args = parser.parse_args()
    import jax

    import gradflow as gf

    old = np.load(args.snapshot / "sweep.npz")
    meta = json.loads((args.snapshot / "sweep.json").read_text())["members"]
    chains = [gf.chains.sticky(4, 0.5, 0.5, x) for x in (0.0, 0.1)]
    kw = dict(init_scale=1e-3, width=4, t1=2000.0, run=gf.Run(progress=False))
    sw = gf.sweep(chains, seeds=[0, 1], **kw)
    print(f"{len(jax.devices())} device(s); load {os.getloadavg()}")
    worst = {"loss": 0.0, "params": 0.0, "stages": 0.0, "solo": 0.0}
    for i, traj in enumerate(sw):
        before = meta[i]
        loss = abs(float(traj.loss[-1]) / float(old[f"m{i}/loss"][-1]) - 1)
        params = max(
            float(np.max(np.abs(np.asarray(getattr(traj.params, k)) - ref)))
            / float(np.max(np.abs(ref)))
            for k in ("W0", "W1", "WQ", "WK")
            for ref in [old[f"m{i}/params.{k}"]]
        )
        stages = max(
            abs(s.t_end / b["t_end"] - 1)
            for s, b in zip(traj.stages, before["stages"], strict=True)
        )
        solo = gf.integrate(chains[i // 2], seed=i % 2, **kw)
        vs_solo = abs(float(traj.loss[-1]) / float(solo.loss[-1]) - 1)
        same_steps = traj.stats.num_steps == before["stats"]["num_steps"]
        print(
            f"member {i}: steps {traj.stats.num_steps} (before "
            f"{before['stats']['num_steps']}, equal: {same_steps}); final loss "
            f"{loss:.1e}, parameters {params:.1e}, stage boundaries {stages:.1e} "
            f"(relative, against before); final loss against its solo run {vs_solo:.1e}"
        )
        for k, v in zip(worst, (loss, params, stages, vs_solo), strict=True):
            worst[k] = max(worst[k], v)
    print("largest:", ", ".join(f"{k} {v:.1e}" for k, v in worst.items()))


if __name__ == "__main__":
    main()
