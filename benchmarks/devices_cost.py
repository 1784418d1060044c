"""Does a solo solve pay for the host devices? The bare default solve of the
default scenario (sticky(6, .5, .5, .05), width 8, t1 = 20000,
`gf.SaveAt(stages=False)`) in fresh processes with `GRADFLOW_CPU_DEVICES` = 1 and 2,
alternating: wall time and CPU time (this process, all threads) of 3 calls
after a compile. On a loaded machine compare the CPU times.

    PYTHONPATH=. python benchmarks/devices_cost.py [--counts 1 2 1 2]
"""

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path


def child() -> None:
    import jax

    import gradflow as gf

    chain = gf.chains.sticky(6, 0.5, 0.5, 0.05)
    kw = dict(
        width=8, t1=20000.0, run=gf.Run(progress=False), saveat=gf.SaveAt(stages=False)
    )
    gf.integrate(chain, 1e-3, **dict(kw, t1=1.0))
    gf.integrate(chain, 1e-3, **kw)
    walls, cpus = [], []
    for _ in range(3):
        t, c = time.perf_counter(), time.process_time()
        gf.integrate(chain, 1e-3, **kw)
        walls.append(time.perf_counter() - t)
        cpus.append(time.process_time() - c)
    load = "{:.2f} {:.2f} {:.2f}".format(*os.getloadavg())
    print(
        f"{len(jax.devices())} device(s): wall s {', '.join(f'{w:.2f}' for w in walls)}"
        f"; CPU s {', '.join(f'{c:.2f}' for c in cpus)}; load {load}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--counts", type=int, nargs="+", default=[1, 2, 1, 2])
    parser.add_argument("--child", action="store_true")
    args = parser.parse_args()
    if args.child:
        child()
        return
    root = str(Path(__file__).resolve().parents[1])
    for n in args.counts:
        env = dict(os.environ, GRADFLOW_CPU_DEVICES=str(n), PYTHONPATH=root)
        out = subprocess.run(
            [sys.executable, __file__, "--child"], env=env, capture_output=True,
            text=True, check=True,
        )  # fmt: skip
        print(out.stdout.strip().splitlines()[-1], flush=True)


if __name__ == "__main__":
    main()
