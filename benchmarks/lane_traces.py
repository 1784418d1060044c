"""How often a sweep's lanes trace, lower and compile the solve's chunk.

A sweep whose members go one at a time runs one host thread (a lane) per
device (`gradflow/_sweep/lanes.py`). Each run here is a fresh process with
`GRADFLOW_CPU_DEVICES` devices and a persistent compilation cache of its own
(one folder per checkout, kept across `--runs`: the first run compiles, a
later one loads), that runs one sweep and counts, through `jax.monitoring`,
the traces, lowerings and compilations of the chunk (`_advance`; a load from
the cache is reported as a compilation too, and counted among the cache hits)
and the wall and CPU time of the sweep. Counts do not depend on the load;
times do: with `--baseline DIR` (another checkout, e.g. a worktree of the
commit before) the two checkouts' processes run at the same time, side by
side, and every row prints the 1-minute load before and after it. The
members' losses and final parameters are compared between the checkouts
bit for bit.

    PYTHONPATH=. python benchmarks/lane_traces.py [--devices 2] [--runs 2]
        [--baseline DIR] [--d 4] [--width 4] [--deltas 2] [--seeds 4]
        [--t1 400] [--chunk-steps 100] [--json out.json]

The default sweep is the tests' small sweep (tests/sweep_worker.py): 2 x 4
members of sticky(4, 0.5, 0.5, delta), width 4, t1 = 400, chunks of 100
steps.
"""

import argparse
import hashlib
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path


ROOT = Path(__file__).resolve().parents[1]
EVENTS = {
    "/jax/core/compile/jaxpr_trace_duration": "trace",
    "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower",
    "/jax/core/compile/backend_compile_duration": "compile",
}


def child(args) -> None:
    """One sweep in this process; prints one JSON line."""
    import jax

    counts = {v: 0 for v in EVENTS.values()}
    seconds = {v: 0.0 for v in EVENTS.values()}
    hits = [0]

    def on_duration(event, duration, fun_name="", **_):
        kind = EVENTS.get(event)
        # the trace names the function, the other two its jit
        if kind is not None and fun_name in ("_advance", "jit(_advance)"):
            counts[kind] += 1
            seconds[kind] += duration

    def on_event(event, **_):
        if event == "/jax/compilation_cache/cache_hits":
            hits[0] += 1

    jax.monitoring.register_event_duration_secs_listener(on_duration)
    jax.monitoring.register_event_listener(on_event)

    import numpy as np

    import gradflow as gf

    deltas = np.linspace(0.0, 0.1, args.deltas)
    chains = [gf.chains.sticky(args.d, 0.5, 0.5, float(x)) for x in deltas]
    run = gf.Run(progress=False, chunk_steps=args.chunk_steps)
    cpu0 = _cpu()
    t0 = time.perf_counter()
    sw = gf.sweep(
        chains,
        init_scale=1e-3,
        seeds=list(range(args.seeds)),
        width=args.width,
        t1=args.t1,
        run=run,
    )
    wall, cpu = time.perf_counter() - t0, _cpu() - cpu0
    digest = hashlib.sha256(np.ascontiguousarray(sw.loss).tobytes())
    for traj in sw:
        for leaf in jax.tree.leaves(traj.params):
            digest.update(np.ascontiguousarray(leaf).tobytes())
    out = {
        "devices": sw.stats.num_devices,
        "batch_size": sw.stats.batch_size,
        "members": len(sw),
        "counts": counts,
        "seconds": {k: round(v, 3) for k, v in seconds.items()},
        "cache_hits": hits[0],
        "wall_s": round(wall, 3),
        "cpu_s": round(cpu, 3),
        "digest": digest.hexdigest(),
        "gradflow": str(Path(gf.__file__).parent),
    }
    print(json.dumps(out), flush=True)


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def start(checkout: Path, cache: str, args) -> subprocess.Popen:
    env = dict(
        os.environ,
        PYTHONPATH=str(checkout),
        GRADFLOW_CPU_DEVICES=str(args.devices),
        JAX_COMPILATION_CACHE_DIR=cache,
        JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
        JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="0",
        # (as the command line and the tests: checks give NaN, no host
        # callback, so the cache stores the chunk)
        EQX_ON_ERROR="nan",
    )
    options = [
        f"--{k.replace('_', '-')}={getattr(args, k)}"
        for k in ("d", "width", "deltas", "seeds", "t1", "chunk_steps")
    ]
    cmd = [sys.executable, __file__, "--child", *options]
    return subprocess.Popen(
        cmd, env=env, cwd=checkout, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip


def finish(proc: subprocess.Popen, code: str) -> dict:
    stdout, stderr = proc.communicate()
    if proc.returncode != 0:
        raise SystemExit(f"{code} failed:\n{stderr[-3000:]}")
    return json.loads(stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--devices", type=int, default=2)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--baseline", default=None)
    parser.add_argument("--d", type=int, default=4)
    parser.add_argument("--width", type=int, default=4)
    parser.add_argument("--deltas", type=int, default=2)
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument("--t1", type=float, default=400.0)
    parser.add_argument("--chunk-steps", type=int, default=100)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    import gradflow as gf  # only the load guard: this process measures others

    guard = gf.LoadGuard(None)
    checkouts = {"this": ROOT}
    if args.baseline is not None:
        checkouts["baseline"] = Path(args.baseline).resolve()
    caches = {
        code: tempfile.mkdtemp(prefix=f"lane-traces-{code}-") for code in checkouts
    }
    rows = []
    for run in range(args.runs):
        with guard.row() as loads:
            procs = {c: start(p, caches[c], args) for c, p in checkouts.items()}
            results = {c: finish(p, c) for c, p in procs.items()}
        for code, r in results.items():
            r.update(loads, code=code, run=run)
            rows.append(r)
            n, s = r["counts"], r["seconds"]
            print(
                f"run {run} {code}: {r['members']} members on {r['devices']} "
                f"devices (batch {r['batch_size']}): chunk traced {n['trace']}x "
                f"({s['trace']:.2f} s), lowered {n['lower']}x ({s['lower']:.2f} s), "
                f"compiled or loaded {n['compile']}x ({s['compile']:.2f} s), "
                f"{r['cache_hits']} cache hits; sweep {r['wall_s']:.2f} s wall, "
                f"{r['cpu_s']:.2f} s CPU; {guard.label(loads)}"
                + (" (taken under load)" if guard.loaded(loads) else ""),
                flush=True,
            )
        if len(results) > 1:
            same = len({r["digest"] for r in results.values()}) == 1
            print(f"run {run}: the checkouts' members equal bit for bit: {same}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    for cache in caches.values():
        shutil.rmtree(cache, ignore_errors=True)


if __name__ == "__main__":
    main()
