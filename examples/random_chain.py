"""A random chain: where does attention focus first?

The stage detector picks the focus token from the data (the token whose
attention mass grows fastest when the attention entropy starts to fall); it
need not be the most frequent token. Runs random chains (Dirichlet rows around
a Zipf profile, d = 6) and reports, for each, the first focus token against the
most frequent one. Writes docs/figures/random_{summary,embeddings_pca,attention}
for the first chain whose first focus is not on its most frequent token (or the
last chain tried, if none is).

    python examples/random_chain.py [--seeds 1 2 3] [--t1 10000]
"""

import argparse
from pathlib import Path

import numpy as np

import gradflow as gf
from gradflow import plot


parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
parser.add_argument("--concentration", type=float, default=1.0)
parser.add_argument("--max-steps", type=int, default=300_000)
parser.add_argument("--t1", type=float, default=10_000.0)
parser.add_argument("--out", type=Path, default=Path("docs/figures"))
args = parser.parse_args()

chosen = None
for seed in args.seeds:
    chain = gf.chains.random(6, seed=seed, concentration=args.concentration)
    traj = gf.markov.integrate_stages(
        chain,
        1e-3,
        width=8,
        t1=args.t1,
        solver=gf.Solver(max_steps=args.max_steps),
        run=gf.Run(progress=False),
    )
    if not traj.ok:
        print(f"chain seed {seed}: stopped early: {traj.message}")
    pi = np.asarray(chain.pi)
    focus = [s for s in traj.stages if s.name == "focus"]
    first = focus[0].tokens[0] if focus else None
    print(
        f"chain seed {seed}: pi = {np.round(pi, 3)}, most frequent token "
        f"{int(np.argmax(pi))}, first focus token {first}"
    )
    print(gf.stage_table(traj.stages))
    chosen = (seed, traj)
    if first is not None and first != int(np.argmax(pi)):
        break
seed, traj = chosen
print(f"figures for chain seed {seed}")
plot.plot_all(traj, args.out, prefix="random_", pdf=True)
