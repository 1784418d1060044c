"""Cost of checkpointing `gf.integrate`: the same flow without a checkpoint,
with the default `checkpoint_every=120` (on a run this short: one write after
each event and one at the end) and with `checkpoint_every=0` (also a write
after every chunk of 1000 steps), alternated `--reps` times; then the cost of
running the call again on its finished checkpoint.

    python benchmarks/checkpoint.py [--t1 20000] [--reps 3]

Sizes: the default scenario, sticky(6, 0.5, 0.5, 0.05), width 8, init 1e-3,
400 saves. Times are wall-clock seconds of the whole call, medians over the
repetitions, after a first run that compiles.
"""

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

import gradflow as gf


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--t1", type=float, default=20000.0)
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    chain = gf.chains.sticky(6, 0.5, 0.5, 0.05)
    kw = dict(width=8, t1=args.t1)
    gf.integrate(chain, 1e-3, **kw, run=gf.Run(progress=False))  # compile
    cases = {"no checkpoint": None, "every 120 s (default)": 120.0, "every chunk": 0.0}
    times = {k: [] for k in cases}
    info = {}
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(args.reps):
            for name, every in cases.items():
                run = gf.Run(progress=False)
                if every is not None:
                    path = Path(tmp) / f"{rep}-{every}.npz"
                    run = gf.Run(
                        progress=False, checkpoint=path, checkpoint_every=every
                    )
                start = time.perf_counter()
                traj = gf.integrate(chain, 1e-3, **kw, run=run)
                times[name].append(time.perf_counter() - start)
                if every is not None:
                    info[name] = (run.checkpoint.stat().st_size, traj)
        path = Path(tmp) / f"0-{120.0}.npz"
        start = time.perf_counter()
        again = gf.integrate(
            chain, 1e-3, **kw, run=gf.Run(progress=False, checkpoint=path)
        )
        t_again = time.perf_counter() - start
    base = np.median(times["no checkpoint"])
    steps = info["every chunk"][1].stats.num_steps
    events = len(info["every chunk"][1].events)
    print(f"t1 = {args.t1:g}: {steps} steps, {events} events; medians of {args.reps}")
    print(f"{'case':<24} {'wall s':>8} {'ratio':>7} {'file MB':>8}")
    for name in cases:
        med = np.median(times[name])
        size = f"{info[name][0] / 1e6:8.3f}" if name in info else f"{'':>8}"
        print(f"{name:<24} {med:8.3f} {med / base:7.3f} {size}")
    print(
        f"again on the finished checkpoint: {t_again:.3f} s "
        f"(resumed_from = {again.stats.resumed_from})"
    )


if __name__ == "__main__":
    main()
