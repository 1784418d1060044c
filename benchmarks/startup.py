"""Start-up cost of `gradflow run`, and the cost of stage detection.

1. The default `gradflow run` (the README's main job, figures included) in a
   fresh process: first with an empty JAX compilation cache, then again with
   the cache the first run left (warm). With `--baseline DIR` the same two runs
   of another checkout (e.g. a worktree of an older commit) are timed side by
   side, in alternation, with its own empty cache.
2. In one process, after both are compiled: `integrate` with stages and
   the bare solve (`gf.SaveAt(stages=False)`) of the same call (a new seed each time, so no
   result is reused), repeated, median ratio.

    python benchmarks/startup.py [--baseline DIR] [--repeats 2] [--skip-cli]

3. `--parts`: the cold and warm runs split into where their time goes
   (imports, tracing, lowering, compiling, cache reads, figures), beside
   `import gradflow`; with `--baseline DIR` for both checkouts, alternating.

    python benchmarks/startup.py --parts [--baseline DIR] [--repeats 2]

Prints the machine's load average with each measurement (this machine is
shared; numbers move with the load).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


ROOT = Path(__file__).resolve().parents[1]


def _load() -> str:
    a, b, c = os.getloadavg()
    return f"load {a:.2f} {b:.2f} {c:.2f}"


def _checkouts(baseline: Path | None) -> dict[str, Path]:
    """This checkout, and `baseline` (another checkout) when given."""
    checkouts = {"this": ROOT}
    if baseline is not None:
        checkouts["baseline"] = baseline.resolve()
    return checkouts


def time_cli(checkout: Path, cache: Path, out: Path) -> float:
    env = dict(
        os.environ, PYTHONPATH=str(checkout), JAX_COMPILATION_CACHE_DIR=str(cache)
    )
    cmd = [
        sys.executable,
        "-m",
        "gradflow.cli",
        "run",
        "--out",
        str(out),
        "--no-progress",
    ]
    start = time.perf_counter()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=out.parent)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{checkout}: gradflow run failed:\n{done.stderr[-2000:]}")
    return wall


def cli_section(baseline: Path | None, repeats: int) -> None:
    checkouts = _checkouts(baseline)
    rows: dict[str, dict[str, list[float]]] = {
        k: {"cold": [], "warm": []} for k in checkouts
    }
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for r in range(repeats):
            for name, checkout in checkouts.items():
                cache = tmp / f"cache-{name}-{r}"
                cache.mkdir()
                for kind in ("cold", "warm"):
                    out = tmp / f"out-{name}-{r}-{kind}"
                    wall = time_cli(checkout, cache, out)
                    rows[name][kind].append(wall)
                    print(
                        f"  {name:8s} {kind}: {wall:6.1f} s   ({_load()})", flush=True
                    )
    print(
        "\n`gradflow run` (default scenario, figures), fresh process, median over "
        f"{repeats}:"
    )
    for name, kinds in rows.items():
        print(
            f"  {name:8s} empty cache {statistics.median(kinds['cold']):6.1f} s, "
            f"warm cache {statistics.median(kinds['warm']):6.1f} s"
        )


def stages_section(repeats: int) -> None:
    import gradflow as gf

    chain = gf.chains.sticky(6, 0.5, 0.5, 0.05)
    kw = dict(width=8, t1=20_000.0, run=gf.Run(progress=False))
    for stages in (True, False):  # compile both
        gf.integrate(chain, 1e-3, saveat=gf.SaveAt(stages=stages), seed=100, **kw)
    ratios = []
    for r in range(repeats):
        times = {}
        for stages in (True, False):
            start = time.perf_counter()
            traj = gf.integrate(
                chain, 1e-3, saveat=gf.SaveAt(stages=stages), seed=r, **kw
            )
            times[stages] = time.perf_counter() - start
            assert traj.ok, traj.message
        ratios.append(times[True] / times[False])
        print(
            f"  seed {r}: stages=True {times[True]:.2f} s, bare {times[False]:.2f} s, "
            f"ratio {ratios[-1]:.2f}   ({_load()})",
            flush=True,
        )
    print(
        f"\nstages=True / bare (same call, compiled): median {statistics.median(ratios):.2f}"
    )


# -- where a run's time goes ------------------------------------------------------

_JAX_PARTS = {
    "/jax/core/compile/jaxpr_trace_duration": "tracing",
    "/jax/core/compile/jaxpr_to_mlir_module_duration": "lowering",
    "/jax/core/compile/backend_compile_duration": "compiling",
    "/jax/compilation_cache/cache_retrieval_time_sec": "cache reads",
}


def child_parts(out: Path, extra: list[str]) -> dict:
    """One `gradflow run` in this (fresh) process, its time split into parts:
    the imports, then inside the run the JAX parts (tracing, lowering to
    MLIR, compiling, reading the persistent cache; summed over every
    compilation), the figures, and the rest (the solve, the stage analysis,
    the files)."""
    start = time.perf_counter()
    import jax

    import gradflow  # noqa: F401
    import gradflow.cli as cli
    import gradflow.plot as plot

    t_import = time.perf_counter() - start
    parts = dict.fromkeys(_JAX_PARTS.values(), 0.0)

    def listener(event, duration, **kwargs):
        if event in _JAX_PARTS:
            parts[_JAX_PARTS[event]] += duration

    jax.monitoring.register_event_duration_secs_listener(listener)
    figures = [0.0]
    plot_all = plot.plot_all

    def timed_plot_all(*a, **k):
        t = time.perf_counter()
        try:
            return plot_all(*a, **k)
        finally:
            figures[0] += time.perf_counter() - t

    plot.plot_all = timed_plot_all
    t = time.perf_counter()
    code = cli.main(["run", "--out", str(out), "--no-progress", *extra])
    t_run = time.perf_counter() - t
    if code != 0:
        raise SystemExit(f"gradflow run returned {code}")
    jax_total = sum(parts.values())
    return {
        "imports": t_import,
        **parts,
        "figures": figures[0],
        "solve and the rest": t_run - jax_total - figures[0],
        "total": time.perf_counter() - start,
    }


def time_import(checkout: Path) -> float:
    """Wall time of `python -c "import gradflow"` from `checkout`."""
    env = dict(os.environ, PYTHONPATH=str(checkout))
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import gradflow"], env=env, check=True)
    return time.perf_counter() - start


def time_parts(checkout: Path, cache: Path, out: Path, extra: list[str]) -> dict:
    """One `gradflow run` of `checkout` in a fresh process (`child_parts`)
    with the compilation cache `cache`: its parts and its wall time."""
    env = dict(
        os.environ, PYTHONPATH=str(checkout), JAX_COMPILATION_CACHE_DIR=str(cache)
    )
    cmd = [sys.executable, __file__, "--child-parts", str(out), *extra]
    start = time.perf_counter()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{checkout}: {done.stderr[-3000:]}")
    row = json.loads(done.stdout.strip().splitlines()[-1])
    row["wall"] = wall
    return row


def parts_table(rows: dict, imports: dict, labelled: bool) -> list[str]:
    """The markdown rows of `parts_section`: per checkout, the import and the
    median of each part of its cold and warm runs."""
    keys = [k for k in rows["this"]["cold"][0] if k not in ("total", "wall")]
    lines = [
        "| `gradflow run` | wall s (median) | x `import gradflow` | "
        + " | ".join(keys)
        + " |",
        "| --- | --- | --- |" + " --- |" * len(keys),
    ]
    for name in rows:
        imp = statistics.median(imports[name])
        print(
            f"{name}: `python -c 'import gradflow'`: median {imp:.2f} s {imports[name]}"
        )
        label = f"{name}: " if labelled else ""
        lines.append(
            f"| {label}`python -c 'import gradflow'` | {imp:.2f} | 1 |"
            + " |" * len(keys)
        )
        for kind, rs in rows[name].items():
            med = {k: statistics.median(r[k] for r in rs) for k in ["wall", *keys]}
            lines.append(
                f"| {label}{kind} cache | {med['wall']:.2f} | {med['wall'] / imp:.2f} | "
                + " | ".join(f"{med[k]:.2f}" for k in keys)
                + " |"
            )
    return lines


def parts_section(
    repeats: int, extra: list[str], doc: str | None = None, baseline: Path | None = None
) -> None:
    """Cold and warm runs (each in a fresh process, the warm one with the
    cache the cold one left), beside `python -c "import gradflow"`, split into
    parts; the median over `repeats` pairs. With `baseline`, the same runs of
    that checkout in alternation with this one's (each its own empty cache)."""
    checkouts = _checkouts(baseline)
    rows = {name: {"cold": [], "warm": []} for name in checkouts}
    imports: dict[str, list[float]] = {name: [] for name in checkouts}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for r in range(repeats):
            for name, checkout in checkouts.items():
                imports[name].append(time_import(checkout))
                cache = tmp / f"cache-{name}-{r}"
                for kind in ("cold", "warm"):
                    out = tmp / f"out-{name}-{r}-{kind}"
                    row = time_parts(checkout, cache, out, extra)
                    rows[name][kind].append(row)
                    measured = ", ".join(
                        f"{k} {v:.2f}" for k, v in row.items() if k != "wall"
                    )
                    print(
                        f"  {name} {kind}: {row['wall']:5.1f} s wall; {measured}"
                        f"   ({_load()})",
                        flush=True,
                    )
    lines = parts_table(rows, imports, labelled=baseline is not None)
    table = (
        "\n".join(lines) + f"\n\n({repeats} pairs of runs; load at the end {_load()})"
    )
    print("\n" + table)
    if doc:
        begin, end = "<!-- startup-parts -->", "<!-- /startup-parts -->"
        import gradflow as gf  # only here: this process measures others

        gf.replace_between_markers(doc, begin, end, table)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", type=Path, default=None)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--skip-cli", action="store_true")
    ap.add_argument("--skip-stages", action="store_true")
    ap.add_argument("--parts", action="store_true")
    ap.add_argument("--child-parts", type=Path, default=None)
    ap.add_argument("--doc", default=None, help="with --parts: write its table here")
    args, extra = ap.parse_known_args()
    if args.child_parts is not None:
        print(json.dumps(child_parts(args.child_parts, extra)))
        return
    if args.parts:
        parts_section(args.repeats, extra, args.doc, args.baseline)
        return
    if not args.skip_cli:
        cli_section(args.baseline, args.repeats)
    if not args.skip_stages:
        stages_section(max(args.repeats, 3))


if __name__ == "__main__":
    main()
