"""Cost of checkpointing `gf.train_sgd`: the same run without a checkpoint,
with the default `checkpoint_every=120` (on a run this short: one write, at the
end) and with `checkpoint_every=0` (a write after every chunk of steps, here
after every save interval of the flow's log grid), alternated `--reps` times;
then the cost of running the call again on its finished checkpoint.

    python benchmarks/sgd_checkpoint.py [--t1 100] [--reps 3] [--out FILE.json]

Sizes: d=6, width 8, context 256, batch 512, lr 0.2 (the paper-like run of
docs/sgd.md), t1 / lr steps. Times are `stats["wall_time"]` (the training loop
and the population loss of the saves; stage detection excluded), medians over
the repetitions, after a first run that compiles.
"""

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np

import gradflow as gf


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--t1", type=float, default=100.0)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    chain = gf.chains.sticky(6, 0.5, 0.5, 0.05)
    kw = dict(
        init_scale=1e-3,
        width=8,
        context=256,
        sgd=gf.SGD(lr=0.2, batch_size=512),
        t1=args.t1,
    )
    gf.train_sgd(chain, **kw, run=gf.Run(progress=False))  # compile
    folder = Path(tempfile.mkdtemp())
    times = {"none": [], "every 120 s": [], "every chunk": []}
    writes, size = {}, 0
    for rep in range(args.reps):
        for name, every in (("none", None), ("every 120 s", 120), ("every chunk", 0)):
            path = None if every is None else folder / f"{rep}-{every}.npz"
            options = gf.Run(progress=False)
            if every is not None:
                options = gf.Run(
                    progress=False, checkpoint=path, checkpoint_every=every
                )
            run = gf.train_sgd(chain, **kw, run=options)
            times[name].append(run.stats.wall_time)
            writes[name] = run.stats.checkpoint_writes
            if path is not None:
                size = path.stat().st_size
    t = time.perf_counter()
    again = gf.train_sgd(
        chain, **kw, run=gf.Run(progress=False, checkpoint=folder / "0-0.npz")
    )
    resume_total = time.perf_counter() - t
    base = float(np.median(times["none"]))
    out = {
        "steps": run.stats.num_steps,
        "saves": len(run),
        "wall_time_median_s": {
            k: round(float(np.median(v)), 3) for k, v in times.items()
        },
        "wall_time_all_s": {k: [round(x, 3) for x in v] for k, v in times.items()},
        "writes": writes,
        "ms_per_write": round(
            1e3
            * (float(np.median(times["every chunk"])) - base)
            / writes["every chunk"],
            2,
        ),
        "checkpoint_bytes": size,
        "rerun_finished": {
            "steps_run": again.stats.steps_run,
            "wall_time_s": round(again.stats.wall_time, 3),
            "total_s_with_stages": round(resume_total, 3),
        },
    }
    print(json.dumps(out, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
