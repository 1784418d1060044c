"""The four stages on the paper's sticky chain, located while integrating.

Writes docs/figures/sticky_{summary,embeddings_pca,attention}.{png,pdf} and
docs/figures/sticky_stages.csv, and prints the stage table.

    python examples/stages_sticky.py [--t1 20000] [--out docs/figures]
"""

import argparse
from pathlib import Path

import gradflow as gf
from gradflow import plot

# not public: the stage table and CSV columns that `gradflow run` writes
from gradflow._cli.run import STAGE_FIELDS, format_stage_table, write_csv


parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--t1", type=float, default=20_000.0)
parser.add_argument("--out", type=Path, default=Path("docs/figures"))
args = parser.parse_args()

chain = gf.chains.sticky(6, 0.5, 0.5, 0.05)
traj = gf.markov.integrate_stages(
    chain, 1e-3, width=8, t1=args.t1, run=gf.Run(progress=False)
)
print(traj)
print(format_stage_table(traj.stages))
plot.plot_all(traj, args.out, prefix="sticky_", pdf=True)
write_csv(args.out / "sticky_stages.csv", traj.stages, STAGE_FIELDS)
