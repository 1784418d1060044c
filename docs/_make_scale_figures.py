"""The figures of `gradflow run` at three vocabulary sizes, for the gallery
(`docs/figures.md`, "The figures at d = 6, 64 and 512"):

    PYTHONPATH=. python docs/_make_scale_figures.py [--keep DIR]

runs the three commands of `RUNS` (`gradflow run ... --no-figures`, the
trajectory into `DIR/d<d>`, a temporary folder without `--keep`; a run whose
`command.json` there holds the same command, up to `--out`, `--no-progress`
and `--no-figures`, is read back instead of solved again) and writes `docs/figures/scale_d<d>_{summary,embeddings_pca,attention}.png`
with `gradflow.plot`, titled as `gradflow run` titles them. The d = 512 run
takes several minutes on a 2-core CPU.
"""

import argparse
import json
import tempfile
from pathlib import Path


ROOT = Path(__file__).resolve().parent.parent
RUNS = {
    6: ["run", "--t1", "5000"],
    64: ["run", "--text", "builtin", "--vocab-size", "64", "--t1", "2000"],
    512: ["run", "--text", "builtin", "--vocab-size", "512", "--t1", "800",
          "--num-saves", "200"],
}  # fmt: skip


def _trajectory(d: int, folder: Path):
    import gradflow as gf
    from gradflow.cli import main

    out = folder / f"d{d}"
    argv = [*RUNS[d], "--no-progress", "--no-figures", "--out", str(out)]
    done = out / "command.json"
    if not (done.exists() and _solved(json.loads(done.read_text())["argv"]) == RUNS[d]):
        if main(argv) != 0:
            raise SystemExit(f"gradflow {' '.join(argv)} failed")
        # the command as run (main() records sys.argv, not its argument)
        done.write_text(json.dumps({"argv": argv}, indent=1))
    return gf.load(out / "trajectory.npz")


def _solved(argv: list[str]) -> list[str]:
    """A `gradflow run` command line without the flags that do not change
    the trajectory (`--out DIR`, `--no-progress`, `--no-figures`)."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a == "--out":
            skip = True
        elif a not in ("--no-progress", "--no-figures"):
            out.append(a)
    return out


def _title(d: int) -> str:
    import argparse as ap

    from gradflow._cli.common import chain_from_args
    from gradflow._cli.sgd import text_description
    from gradflow.cli import build_parser

    args: ap.Namespace = build_parser().parse_args(RUNS[d])
    return text_description(args) if args.text else chain_from_args(args)[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keep", type=Path, default=None)
    args = parser.parse_args()
    from gradflow import plot

    with tempfile.TemporaryDirectory() as tmp:
        folder = args.keep or Path(tmp)
        for d in RUNS:
            traj = _trajectory(d, folder)
            title = _title(d)
            stem = ROOT / "docs" / "figures" / f"scale_d{d}"
            for name, figure in (
                ("summary", plot.summary_figure),
                ("embeddings_pca", plot.pca_figure),
                ("attention", plot.attention_figure),
            ):
                fig = figure(traj, title=title)
                path = Path(f"{stem}_{name}.png")
                fig.savefig(path, dpi=110, bbox_inches="tight")
                plot.pyplot().close(fig)
                print(f"wrote {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
