"""Precision and recall of the stage detector against an independent labeller.

Solves a suite of trajectories from five chain families (sticky with varied
`d`, `top_mass`, `rho`, `delta`; random Dirichlet; Zipf with `rho > 0`; rows
that are softmaxes of Gaussian logits; word bigram chains of the built-in
corpus), several seeds and widths, each saved on a dense log grid of
`DENSE_NUM` times. The detector ([`gradflow.detect_stages`][]) reads the
observations at the default 400 save times; the labeller
(`tests/stages_labeller.py`, a second implementation of the definitions in
`docs/stages.md`) reads finite differences of the observables on the dense
grid. Prints precision and recall per stage kind.

    python benchmarks/stages_accuracy.py            # all trajectories
    python benchmarks/stages_accuracy.py --quick    # the CI subset

Solved trajectories are cached (gradflow trajectory files) in
`$GRADFLOW_STAGES_CACHE` (default `/tmp/gradflow_stages_cache`).
"""

import argparse
import importlib.util
import os
import sys
import time
from pathlib import Path

import jax
import numpy as np

import gradflow as gf


T1 = 20000.0
INIT_SCALE = 1e-3
# 4 * 398 intervals: every 4th dense time (after 0) is one of today's 400
# default save times, every 2nd one of the 798 the detector needs (STAGES_NUM).
DENSE_NUM = 1594
STAGES_STEP = 2
STAGES_NUM = 798


def suite() -> list[dict]:
    """The trajectories: `name`, `family`, `chain` (a callable), `width`, `seed`."""
    S = gf.chains.sticky
    Z = gf.chains.zipf
    R = gf.chains.random
    G = gf.chains.gaussian_logits
    T = gf.chains.from_text
    rows = [
        ("sticky-6-default", "sticky", lambda: S(6, 0.5, 0.5, 0.05), 8, 0),
        ("sticky-8-a", "sticky", lambda: S(8, 0.4, 0.5, 0.1), 8, 1),
        ("sticky-5-b", "sticky", lambda: S(5, 0.6, 0.3, 0.2), 4, 0),
        ("sticky-10-c", "sticky", lambda: S(10, 0.3, 0.6, 0.1), 16, 2),
        ("sticky-7-d", "sticky", lambda: S(7, 0.5, 0.7, 0.05), 8, 3),
        ("sticky-12-e", "sticky", lambda: S(12, 0.35, 0.4, 0.15), 12, 0),
        ("random-6-s0", "random", lambda: R(6, seed=0), 8, 0),
        ("random-8-s1", "random", lambda: R(8, seed=1), 8, 1),
        ("random-8-s2", "random", lambda: R(8, seed=2, concentration=0.5), 16, 0),
        ("random-10-s3", "random", lambda: R(10, seed=3), 12, 2),
        ("random-6-s4", "random", lambda: R(6, seed=4, concentration=2.0), 4, 1),
        ("random-12-s5", "random", lambda: R(12, seed=5), 16, 0),
        ("zipf-6-a", "zipf", lambda: Z(6, 1.0, 0.5), 8, 0),
        ("zipf-8-b", "zipf", lambda: Z(8, 1.2, 0.3), 8, 1),
        ("zipf-10-c", "zipf", lambda: Z(10, 0.8, 0.6), 16, 0),
        ("zipf-12-d", "zipf", lambda: Z(12, 1.0, 0.4), 12, 2),
        ("zipf-8-e", "zipf", lambda: Z(8, 1.5, 0.5), 4, 0),
        ("zipf-6-f", "zipf", lambda: Z(6, 0.7, 0.7), 16, 1),
        ("gauss-6-s0", "gaussian", lambda: G(6, seed=0, scale=1.5), 8, 0),
        ("gauss-8-s1", "gaussian", lambda: G(8, seed=1, scale=1.0), 8, 1),
        ("gauss-8-s2", "gaussian", lambda: G(8, seed=2, scale=2.0), 16, 0),
        ("gauss-10-s3", "gaussian", lambda: G(10, seed=3, scale=1.5), 12, 2),
        ("gauss-12-s4", "gaussian", lambda: G(12, seed=4, scale=1.0), 16, 0),
        ("gauss-6-s5", "gaussian", lambda: G(6, seed=5, scale=2.5), 4, 1),
        ("text-8", "text", lambda: T(None, vocab_size=8), 8, 0),
        ("text-10", "text", lambda: T(None, vocab_size=10), 12, 1),
        ("text-12", "text", lambda: T(None, vocab_size=12), 16, 0),
        ("text-6", "text", lambda: T(None, vocab_size=6), 4, 2),
    ]
    return [dict(name=n, family=f, chain=c, width=w, seed=s) for n, f, c, w, s in rows]


# The CI subset: one per family, small d.
QUICK = ("sticky-6-default", "random-6-s0", "zipf-6-a", "gauss-6-s0", "text-6")


def cache_dir() -> Path:
    return Path(os.environ.get("GRADFLOW_STAGES_CACHE", "/tmp/gradflow_stages_cache"))


def solve(entry: dict, *, t1: float = T1, num: int = DENSE_NUM, cache=None):
    """The entry's trajectory (bare flow, parameters at `num` log-spaced
    times), from the cache when it is there."""
    cache = cache_dir() if cache is None else Path(cache)
    path = cache / f"{entry['name']}-t{t1:g}-n{num}.npz"
    if path.exists():
        return gf.load(path)
    for rtol in (None, 1e-7):  # a tighter tolerance where the default loses the flow
        traj = gf.integrate(
            entry["chain"](),
            INIT_SCALE,
            width=entry["width"],
            seed=entry["seed"],
            t1=t1,
            saveat=gf.SaveAt(gf.default_save_times(t1, num), stages=False),
            solver=gf.Solver(rtol=rtol),
            run=gf.Run(progress=False),
        )
        if traj.ok:
            break
    if not traj.ok:
        raise RuntimeError(f"{entry['name']}: {traj.message}")
    traj.save(path)
    return traj


def _tests_module(name: str):
    """A helper module of `tests/`, loaded from its file under its own name (so
    that the labeller's `from reference import ...` finds the reference)."""
    path = Path(__file__).resolve().parents[1] / "tests" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _labeller():
    """The independent labeller (`tests/stages_labeller.py`) and the NumPy
    reference it builds on (`tests/reference.py`)."""
    _tests_module("reference")
    return _tests_module("stages_labeller")


def detect_on_default_grid(traj, thresholds=None, step=STAGES_STEP):
    """What `integrate(stages=True)` will do: observe at the default save
    times (every 4th dense save; `step` = 1: every dense save) and detect.
    Returns `(stages, seconds)`."""
    idx = np.r_[0, np.arange(1, len(traj.ts), step)]
    ts = np.asarray(traj.ts)[idx]
    params = jax.tree.map(lambda x: np.asarray(x)[idx], traj.params)
    start = time.perf_counter()
    obs = gf.markov.observe_params(ts, params, traj.problem.chain)
    stages = gf.markov.detect_stages(
        ts, obs, chain=traj.problem.chain, thresholds=thresholds
    )
    return stages, time.perf_counter() - start


def evaluate(entries, *, verbose=True, step=STAGES_STEP):
    """Detector (default grid) against labeller (dense grid) on every entry.
    Returns `(summary, results)`."""
    lab = _labeller()
    results = []
    for e in entries:
        traj = solve(e)
        stages, _ = detect_on_default_grid(traj, step=step)
        r = lab.check_trajectory(traj, stages)
        r["name"] = e["name"]
        r["stages"] = stages
        results.append(r)
        if verbose:
            n = {k: v[1] for k, v in sorted(r["counts"].items())}
            bad = len(r["missed"]) + len(r["extra"])
            cycles = max((s.cycle for s in stages), default=0)
            print(
                f"{e['name']:<18} cycles {cycles} detected {n}  unmatched {bad}  openings "
                f"{r['openings']} (uncovered {len(r['uncovered'])})",
                flush=True,
            )
            for s in r["missed"]:
                print(
                    f"    missed  {s['name']:<14} {s['t_start']:10.1f} {s['t_end']:10.1f} {s['tokens']} k={s['k']}"
                )
            for s in r["extra"]:
                print(
                    f"    extra   {s['name']:<14} {s['t_start']:10.1f} {s['t_end']:10.1f} {s['tokens']} k={s['k']}"
                )
            for k, lo, hi in r["uncovered"]:
                print(
                    f"    opening of sigma_{k + 1}/sigma_1 at {lo:.1f}-{hi:.1f} not inside a new_direction"
                )
    return lab.summarize(results), results


def print_summary(summary, results) -> bool:
    print(
        f"\n{len(results)} trajectories, {len({r['name'].split('-')[0] for r in results})} families"
    )
    print(
        f"{'kind':<14} {'labelled':>8} {'detected':>8} {'matched':>8} {'precision':>9} {'recall':>7}"
    )
    ok = True
    for k, row in summary.items():
        print(
            f"{k:<14} {row['labelled']:>8} {row['detected']:>8} {row['tp']:>8} "
            f"{row['precision']:>9.1%} {row['recall']:>7.1%}"
        )
        for v in (row["precision"], row["recall"]):
            ok &= not (v < 0.95)
    changes = [x for r in results for x in r["focus_entropy_change"]]
    n_open = sum(r["openings"] for r in results)
    n_unc = sum(len(r["uncovered"]) for r in results)
    print(
        f"focus stages: {len(changes)}, entropy rose over {sum(x > 0 for x in changes)} "
        f"(largest change {max(changes, default=float('nan')):+.4f} nats)"
    )
    print(f"openings 0.05 -> 0.3: {n_open}, outside every new_direction: {n_unc}")
    ok &= n_unc == 0 and not any(x > 0 for x in changes)
    return ok


def default_scenario(results) -> bool:
    """The default scenario's first six stages against docs/figures/sticky_stages.csv."""
    import csv

    ref_path = Path(__file__).resolve().parents[1] / "docs/figures/sticky_stages.csv"
    r = next((r for r in results if r["name"] == "sticky-6-default"), None)
    if r is None or not ref_path.exists():
        return True
    with open(ref_path) as f:
        ref = list(csv.DictReader(f))[:6]
    new = [s for s in r["stages"] if s.name != "plateau"][:6]
    print("\ndefault scenario (sticky(6, 0.5, 0.5, 0.05), 1e-3, width 8, t1 20000):")
    worst, same = 0.0, len(new) == len(ref)
    for a, b in zip(ref, new):
        same &= a["name"] == b.name and (
            b.name != "focus" or a["tokens"].split()[0] == str(b.tokens[0])
        )
        for f in ("t_start", "t_end"):
            ta, tb = float(a[f]), getattr(b, f)
            if ta > 0:
                worst = max(worst, abs(tb - ta) / ta)
        print(
            f"  {b.name:<14} {b.tokens!s:<8} t {float(a['t_start']):9.2f} -> {b.t_start:9.2f}"
            f"   {float(a['t_end']):9.2f} -> {b.t_end:9.2f}"
        )
    print(f"  same sequence: {same}; largest relative time change {worst:.3%}")
    return same and worst <= 0.01


def cost(entries):
    """Detection (observe over the saves + detect_stages) against the bare
    solve of the same call, both warm (compiled), on the stages grid."""
    print(
        f"\n{'trajectory':<18} {'bare solve s':>12} {'observe+detect s':>17} {'ratio':>6}"
    )
    for e in entries:
        kw = dict(
            width=e["width"],
            seed=e["seed"],
            t1=T1,
            saveat=gf.SaveAt(stages=False),
            run=gf.Run(progress=False),
        )
        ts = gf.default_save_times(T1, STAGES_NUM)
        chain = e["chain"]()
        for _ in range(2):  # the first call compiles
            start = time.perf_counter()
            traj = gf.integrate(chain, INIT_SCALE, saveat=gf.SaveAt(ts), **kw)
            bare = time.perf_counter() - start
            start = time.perf_counter()
            obs = gf.markov.observe_params(traj.ts, traj.params, chain)
            gf.markov.detect_stages(traj.ts, obs, chain=chain)
            det = time.perf_counter() - start
        print(
            f"{e['name']:<18} {bare:>12.2f} {det:>17.2f} {det / bare:>6.2f}", flush=True
        )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the CI subset only")
    parser.add_argument("--solve-only", action="store_true")
    parser.add_argument("--cost", action="store_true", help="detection vs bare solve")
    parser.add_argument(
        "--step",
        type=int,
        default=STAGES_STEP,
        help="the detector reads every STEP-th dense save (2: 798 saves, the "
        "stages grid; 4: today's 400 default saves)",
    )
    args = parser.parse_args(argv)
    entries = [e for e in suite() if not args.quick or e["name"] in QUICK]
    for e in entries:
        start = time.perf_counter()
        solve(e)
        print(f"{e['name']}: {time.perf_counter() - start:.1f} s", flush=True)
    if args.solve_only:
        return 0
    if args.cost:
        cost([e for e in entries if e["name"] in QUICK])
        return 0
    n = len(np.r_[0, np.arange(1, DENSE_NUM, args.step)])
    print(f"detector on {n} saves, labeller on {DENSE_NUM}")
    summary, results = evaluate(entries, step=args.step)
    ok = print_summary(summary, results)
    ok &= default_scenario(results)
    print("\nall criteria met" if ok else "\nNOT all criteria met")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
