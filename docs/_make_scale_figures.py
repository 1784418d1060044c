"""The figures of `gradflow run` at three vocabulary sizes, for the gallery
(`docs/figures.md`, "The figures at d = 6, 64 and 512"):

    PYTHONPATH=. python docs/_make_scale_figures.py [--keep DIR]

runs the three commands of `RUNS` (`gradflow run ... --no-figures`, the
trajectory into `DIR/d<d>`, a temporary folder without `--keep`; a run whose
`command.json` there holds the same command, up to `--out`, `--no-progress`,
`--no-figures` and `--overwrite`, is read back instead of solved again) and writes
`docs/figures/scale_d<d>_{summary,embeddings_pca,attention}.png` with
`gradflow.plot`, titled as `gradflow run` titles them (the chain it prints,
kept in `command.json`). The d = 512 run takes several minutes on a 2-core
CPU.
"""

import argparse
import contextlib
import io
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
    """`(trajectory, title)` of the run of `RUNS[d]`: the title is the chain
    that `gradflow run` prints (`problem: TITLE; model: ...`)."""
    import gradflow as gf
    from gradflow.cli import main

    out = folder / f"d{d}"
    argv = [*RUNS[d], "--no-progress", "--no-figures", "--overwrite", "--out", str(out)]
    done = out / "command.json"
    record = json.loads(done.read_text()) if done.exists() else {}
    if _solved(record.get("argv", [])) != RUNS[d] or "title" not in record:
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            code = main(argv)
        if code != 0:
            raise SystemExit(f"gradflow {' '.join(argv)} failed")
        line = next(
            x for x in printed.getvalue().splitlines() if x.startswith("problem: ")
        )
        title = line.removeprefix("problem: ").rsplit("; model: ", 1)[0]
        # the command as run (main() records sys.argv, not its argument)
        record = {"argv": argv, "title": title}
        done.write_text(json.dumps(record, indent=1))
    return gf.load(out / "trajectory.npz"), record["title"]


def _solved(argv: list[str]) -> list[str]:
    """A `gradflow run` command line without the flags that do not change
    the trajectory (`--out DIR`, `--no-progress`, `--no-figures`,
    `--overwrite`)."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a == "--out":
            skip = True
        elif a not in ("--no-progress", "--no-figures", "--overwrite"):
            out.append(a)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keep", type=Path, default=None)
    args = parser.parse_args()
    from gradflow import plot

    with tempfile.TemporaryDirectory() as tmp:
        folder = args.keep or Path(tmp)
        for d in RUNS:
            traj, title = _trajectory(d, folder)
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
