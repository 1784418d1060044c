"""The four stages on the paper's sticky chain, located while integrating.

Writes docs/figures/sticky_{summary,embeddings_pca,attention}.{png,pdf} and
docs/figures/sticky_stages.csv, and prints the stage table.

    python examples/stages_sticky.py [--t1 20000] [--out docs/figures]
"""

import argparse
import csv
from pathlib import Path

import gradflow as gf
from gradflow import plot


# the columns of the stages.csv that `gradflow run` writes
FIELDS = (
    "name",
    "cycle",
    "t_start",
    "t_end",
    "loss_start",
    "loss_end",
    "tokens",
    "token_labels",
    "complete",
    "mass_start",
    "mass_end",
    "sv_index",
)


def cell(value) -> str:
    """A CSV cell: tuples space-separated, `None` empty."""
    if isinstance(value, list | tuple):
        return " ".join(str(v) for v in value)
    return "" if value is None else str(value)


parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--t1", type=float, default=20_000.0)
parser.add_argument("--out", type=Path, default=Path("docs/figures"))
args = parser.parse_args()

chain = gf.chains.sticky(6, 0.5, 0.5, 0.05)
traj = gf.markov.integrate_stages(
    chain, 1e-3, width=8, t1=args.t1, run=gf.Run(progress=False)
)
print(traj)
print(gf.stage_table(traj.stages))
plot.plot_all(traj, args.out, prefix="sticky_", pdf=True)
with open(args.out / "sticky_stages.csv", "w", newline="") as f:
    rows = csv.writer(f)
    rows.writerow(FIELDS)
    rows.writerows([cell(getattr(s, k)) for k in FIELDS] for s in traj.stages)
