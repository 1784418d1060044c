"""The time and peak memory of building a large chain, and of one gradient on it
(`docs/performance.md`, "Large chains").

    python benchmarks/chain_build.py                 # sticky(8192) and a gradient
    python benchmarks/chain_build.py --d 4096 --kind random
    python benchmarks/chain_build.py --compare 569ad3f   # also that commit, side by side

Each case runs in a fresh process (peak memory is the process's maximum resident
set size, `resource.getrusage`, so each needs its own process); `--compare`
runs the same cases on a commit's code (checked out in a temporary worktree)
interleaved with the working tree's. Prints the 1-minute load beside the numbers.
"""

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path


_CASE = r"""
import os, resource, sys, time
import numpy as np
import gradflow as gf
import jax, jax.numpy as jnp
d, kind, m, grad = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4] == "1"
rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
t = time.perf_counter()
if kind == "sticky":
    chain = gf.chains.sticky(d, 0.5, 0.5, 0.05)
elif kind == "random":
    chain = gf.chains.random(d, seed=0)
elif kind == "sparse":
    import scipy.sparse as sp
    rng = np.random.default_rng(0)
    n = 20 * d
    rows = np.concatenate([np.arange(d), rng.integers(0, d, n)])
    cols = np.concatenate([(np.arange(d) + 1) % d, rng.integers(0, d, n)])
    counts = sp.coo_matrix((np.ones(rows.size), (rows, cols)), shape=(d, d)).tocsr()
    counts = counts + sp.eye(d, format="csr")
    chain = gf.MarkovChain(counts.multiply(1.0 / counts.sum(axis=1)).tocsr())
jax.block_until_ready(chain.P)
t_chain = time.perf_counter() - t
rss_chain = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
t_grad = float("nan")
if grad:
    params = gf.init_params(d, m, 1e-3)
    g = jax.jit(jax.grad(gf.population_loss))
    jax.block_until_ready(g(params, chain))
    t = time.perf_counter()
    jax.block_until_ready(g(params, chain))
    t_grad = time.perf_counter() - t
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
print(f"{t_chain:.3f} {rss_chain:.3f} {t_grad:.3f} {rss:.3f} {rss0:.3f}")
"""


def _run(root: Path, args) -> list[float]:
    env = dict(os.environ, PYTHONPATH=str(root))
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            _CASE,
            str(args.d),
            args.kind,
            str(args.m),
            "0" if args.no_grad else "1",
        ],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return [float(x) for x in out.stdout.split()[-5:]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--d", type=int, default=8192)
    parser.add_argument("--m", type=int, default=8)
    parser.add_argument(
        "--kind", default="sticky", choices=["sticky", "random", "sparse"]
    )
    parser.add_argument("--no-grad", action="store_true")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--compare", metavar="COMMIT", default=None)
    args = parser.parse_args()
    roots = {"this tree": Path(__file__).resolve().parents[1]}
    tmp = None
    if args.compare:
        tmp = tempfile.mkdtemp(prefix="gradflow-chain-")
        subprocess.run(
            ["git", "worktree", "add", "--detach", tmp, args.compare],
            cwd=roots["this tree"],
            check=True,
            capture_output=True,
        )
        roots = {args.compare: Path(tmp), **roots}
    try:
        print(f"{args.kind}({args.d}), gradient at m = {args.m}")
        print(
            f"{'code':>12} {'chain s':>8} {'chain peak GB':>14} {'grad s':>7} "
            f"{'peak GB (chain+grad)':>21} {'import GB':>9}  load"
        )
        for _ in range(args.repeats):
            for name, root in roots.items():
                tc, rc, tg, r, r0 = _run(root, args)
                print(
                    f"{name:>12} {tc:8.2f} {rc:14.2f} {tg:7.2f} {r:21.2f} {r0:9.2f}"
                    f"  {os.getloadavg()[0]:.1f}",
                    flush=True,
                )
    finally:
        if tmp:
            subprocess.run(
                ["git", "worktree", "remove", "--force", tmp],
                cwd=roots["this tree"],
                check=False,
            )


if __name__ == "__main__":
    main()
