"""The time `gf.plot.animate` takes to write the film of the default run
(150 frames), as an MP4 and as a GIF (`docs/performance.md`, "Films").

    python benchmarks/animate_speed.py                      # this checkout
    python benchmarks/animate_speed.py --compare b377a69    # and that commit, interleaved

The run is solved once per process (not timed); each format is written
`--repeats` times and the best is kept. With `--compare` the commit's code
(checked out in a temporary worktree) and this checkout's run in turn, in
fresh processes, so both see the same load. The 1-minute load is printed
beside each row; `--keep DIR` leaves the films there to be looked at.
"""

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path


_CASE = r"""
import sys, time
import gradflow as gf
from gradflow import plot
out, repeats = sys.argv[1], int(sys.argv[2])
traj = gf.integrate(gf.chains.sticky(6, 0.5, 0.5, 0.05), 1e-3, width=8, t1=5000.0,
                    run=gf.Run(progress=False))
times = []
for suffix in (".mp4", ".gif"):
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        plot.animate(traj, out + suffix)
        best = min(best, time.perf_counter() - t)
    times.append(best)
print(*times)
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--compare", metavar="COMMIT", default=None)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--keep", metavar="DIR", default=None)
    args = parser.parse_args()
    here = Path(__file__).resolve().parents[1]
    roots = {"this tree": here}
    tmp = None
    if args.compare:
        tmp = tempfile.mkdtemp(prefix="gradflow-film-")
        subprocess.run(["git", "worktree", "add", "--detach", tmp, args.compare],
                       cwd=here, check=True, capture_output=True)  # fmt: skip
        roots = {args.compare: Path(tmp), **roots}
    keep = Path(args.keep or tempfile.mkdtemp(prefix="gradflow-films-"))
    keep.mkdir(parents=True, exist_ok=True)
    try:
        print(
            f"{'code':>12} {'MP4 s':>7} {'GIF s':>7}  load (150 frames, best of "
            f"{args.repeats})"
        )
        for name, root in roots.items():
            env = dict(os.environ, PYTHONPATH=str(root))
            stem = str(keep / name.replace(" ", "_"))
            out = subprocess.run([sys.executable, "-c", _CASE, stem, str(args.repeats)],
                                 cwd=root, env=env, capture_output=True, text=True)  # fmt: skip
            if out.returncode:
                sys.exit(out.stderr)
            mp4, gif = (float(x) for x in out.stdout.split()[-2:])
            print(
                f"{name:>12} {mp4:7.2f} {gif:7.2f}  {os.getloadavg()[0]:.1f}",
                flush=True,
            )
        print(f"films in {keep}")
    finally:
        if tmp:
            subprocess.run(["git", "worktree", "remove", "--force", tmp], cwd=here,
                           check=False)  # fmt: skip


if __name__ == "__main__":
    main()
