"""Sweeps against a loop of solo runs, and how they scale with the cores.

Two modes.

**In one process** (as before): the wall time of gf.sweep over 64 members
(8 delta x 8 seeds of sticky(6, 0.5, 0.5, delta), width 8, t1 = 5000) and of
one gf.integrate member, both compiled first; the cost per member at 1, 8,
64 and 256 members; the same 64 members as a loop of gf.integrate calls.

    PYTHONPATH=. python benchmarks/sweep.py [--sizes 1 8 64 256] [--json out.json]
        [--batch-size N | --batch-size all]

**Scaling** (`--scaling`): one script run that times, side by side, the 64-
member sweep on 1, 2, 4, ... host devices (each count in a fresh process with
`GRADFLOW_CPU_DEVICES`, since JAX fixes its devices when it starts) against
the loop of gf.integrate calls timed in the same process, and the same 64
members shared out to 1, 2, ... worker processes (`multiprocessing`, spawn;
each worker one device, its members dealt in turn as on devices): the time
of the work once the workers have compiled (a warm pool), and the time of a
whole call (start, imports, compilation with a warm cache, work).

    PYTHONPATH=. python benchmarks/sweep.py --scaling [--devices 1 2 4]
        [--workers 1 2] [--json out.json] [--doc docs/performance.md]

`--doc` writes the table between the markers `<!-- sweep-scaling -->` and
`<!-- /sweep-scaling -->` of that page. The criterion of issue 27: the
64-member sweep at most 0.6x the loop's wall time on this machine.
"""

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np


D, TOP, RHO, WIDTH, SCALE, T1 = 6, 0.5, 0.5, 8, 1e-3, 5000.0
ROOT = Path(__file__).resolve().parents[1]


def members(gf, n: int):
    """`n` members: 8 deltas x n/8 seeds (fewer deltas below 8)."""
    n_delta = min(8, n)
    deltas = np.linspace(0.0, 0.1, 8)[:n_delta]
    seeds = range(n // n_delta)
    return [gf.chains.sticky(D, TOP, RHO, float(x)) for x in deltas], seeds, deltas


def best_of(fn, repeat: int) -> tuple[float, float, object]:
    """Best wall time and the CPU time (this process, all threads) of that run:
    on a shared machine the CPU time is the steadier measure of cost."""
    out, best, cpu = None, np.inf, np.inf
    for _ in range(repeat):
        start, start_cpu = time.perf_counter(), time.process_time()
        out = fn()
        wall = time.perf_counter() - start
        if wall < best:
            best, cpu = wall, time.process_time() - start_cpu
    return best, cpu, out


def load() -> str:
    return "load {:.2f} {:.2f} {:.2f}".format(*os.getloadavg())


# -- in one process --------------------------------------------------------------


def in_process(args):
    import gradflow as gf

    batch_size = args.batch_size
    if batch_size == "all":
        batch_size = 1 << 30
    elif batch_size is not None:
        batch_size = int(batch_size)
    stages = not args.no_stages
    chain = gf.chains.sticky(D, TOP, RHO, 0.0)

    def solo():
        return gf.integrate(chain, SCALE, width=WIDTH, t1=T1, seed=0,
                            run=gf.Run(progress=False), saveat=gf.SaveAt(stages=stages))  # fmt: skip

    solo()  # compile
    t_solo, c_solo, traj = best_of(solo, args.repeat)
    print(
        f"one member (gf.integrate): {t_solo:.2f} s wall, {c_solo:.2f} s CPU, "
        f"{traj.stats.num_steps} steps ({load()})",
        flush=True,
    )
    rows = []
    for n in sorted(set(args.sizes) | {64}, key=lambda n: (n != 64, n)):
        chains, seeds, deltas = members(gf, n)

        def run(chains=chains, seeds=seeds, deltas=deltas):
            return gf.sweep(chains, init_scale=SCALE, seeds=seeds, width=WIDTH,
                            t1=T1, labels={"delta": deltas}, run=gf.Run(progress=False, batch_size=batch_size),
                            saveat=gf.SaveAt(stages=stages), )  # fmt: skip

        start = time.perf_counter()
        run()  # compile
        t_first = time.perf_counter() - start
        t, c, sw = best_of(run, args.repeat)
        steps = np.asarray(sw.stats.num_steps)
        rows.append({
            "members": len(sw), "wall_s": t, "per_member_s": t / len(sw),
            "cpu_s": c, "cpu_per_member_s": c / len(sw), "cpu_vs_one_member": c / c_solo,
            "first_call_s": t_first, "vs_one_member": t / t_solo,
            "max_steps": int(steps.max()), "mean_steps": float(steps.mean()),
            "ok": int(sw.ok.sum()), "devices": sw.stats.num_devices,
            "batch_size": sw.stats.batch_size, "total_steps": int(steps.sum()),
        })  # fmt: skip
        r = rows[-1]
        print(
            f"{r['members']:4d} members: {t:8.2f} s wall = {r['vs_one_member']:6.2f} x "
            f"one member, {r['per_member_s']:.3f} s per member; CPU {c:.2f} s "
            f"(first call {t_first:.1f} s; steps mean {r['mean_steps']:.0f}, max "
            f"{r['max_steps']}; {r['ok']} ok; {r['devices']} device(s), batch "
            f"size {r['batch_size']}; {load()})",
            flush=True,
        )
    r64 = next(r for r in rows if r["members"] == 64)
    t_loop, c_loop = loop_of_integrate(gf, stages)
    print(
        f"the 64 members as a loop of gf.integrate: {t_loop:.2f} s wall, "
        f"{c_loop:.2f} s CPU: the sweep takes {r64['wall_s'] / t_loop:.2f} x the "
        f"loop's wall time ({load()})",
        flush=True,
    )
    r64.update(loop_wall_s=t_loop, loop_cpu_s=c_loop)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"one_member_s": t_solo, "one_member_cpu_s": c_solo,
                       "stages": stages, "rows": rows}, f, indent=1)  # fmt: skip


def loop_of_integrate(gf, stages: bool = True) -> tuple[float, float]:
    """The 64 members as a loop of gf.integrate calls (compiled first): what a
    sweep replaces. Wall and CPU time."""
    chains, seeds, _ = members(gf, 64)
    gf.integrate(
        chains[0],
        SCALE,
        width=WIDTH,
        t1=T1,
        run=gf.Run(progress=False),
        saveat=gf.SaveAt(stages=stages),
    )
    start, start_cpu = time.perf_counter(), time.process_time()
    for ch in chains:
        for s in seeds:
            gf.integrate(ch, SCALE, width=WIDTH, t1=T1, seed=s, run=gf.Run(progress=False),
                         saveat=gf.SaveAt(stages=stages))  # fmt: skip
    return time.perf_counter() - start, time.process_time() - start_cpu


# -- scaling: host devices --------------------------------------------------------


def sweep64(gf, seed_share=None):
    """The 64-member sweep, or (for a worker) all chains with the seeds
    `seed_share`: dealing the 64 members in turn to `k` workers (k divides 8)
    gives worker `r` exactly the seeds `r, r + k, ...` of every chain."""
    chains, seeds, deltas = members(gf, 64)
    seeds = list(seeds) if seed_share is None else seed_share
    return gf.sweep(chains, init_scale=SCALE, seeds=seeds, width=WIDTH, t1=T1,
                    labels={"delta": deltas}, run=gf.Run(progress=False))  # fmt: skip


def child_devices(repeat: int) -> dict:
    """In a fresh process with GRADFLOW_CPU_DEVICES set by the parent: the
    64-member sweep and the loop of gf.integrate, side by side."""
    import jax

    import gradflow as gf

    start = time.perf_counter()
    sw = sweep64(gf)  # compile
    first = time.perf_counter() - start
    walls, loops = [], []
    for _ in range(repeat):  # alternate, so that load changes hit both
        t = time.perf_counter()
        sw = sweep64(gf)
        walls.append(time.perf_counter() - t)
        loops.append(loop_of_integrate(gf)[0])
    solo = [
        float(t.loss[-1]) for t in (
            gf.integrate(members(gf, 64)[0][i // 8], SCALE, width=WIDTH, t1=T1,
                         seed=i % 8, run=gf.Run(progress=False))
            for i in (0, 9, 63)
        )
    ]  # fmt: skip
    same = [float(sw[i].loss[-1]) == solo[k] for k, i in enumerate((0, 9, 63))]
    return {
        "devices": len(jax.devices()),
        "sweep_s": min(walls),
        "loop_s": min(loops),
        "ratio": min(w / lp for w, lp in zip(walls, loops, strict=True)),
        "ratios": [w / lp for w, lp in zip(walls, loops, strict=True)],
        "first_call_s": first,
        "members_equal_solo": all(same),
        "steps": [int(x) for x in sw.stats.num_steps],
        "load": load(),
    }


# -- scaling: worker processes ---------------------------------------------------


def _worker(rank: int, size: int, conn):
    """One worker: its share of the 64 members (dealt in turn), swept once to
    compile, then timed; sends (import + first call, timed work)."""
    t0 = time.perf_counter()
    import gradflow as gf

    share = list(range(rank, 8, size))
    sweep64(gf, share)
    warm = time.perf_counter() - t0
    conn.send("ready")
    conn.recv()  # all workers compiled: start the timed work together
    t = time.perf_counter()
    sweep64(gf, share)
    conn.send((warm, time.perf_counter() - t))
    conn.close()


def child_workers(size: int) -> dict:
    import multiprocessing as mp

    if 8 % size:
        raise SystemExit(f"--workers: each count must divide 8, got {size}")

    import gradflow as gf

    ctx = mp.get_context("spawn")
    os.environ["GRADFLOW_CPU_DEVICES"] = "1"
    start = time.perf_counter()
    pipes, procs = [], []
    for rank in range(size):
        a, b = ctx.Pipe()
        p = ctx.Process(target=_worker, args=(rank, size, b))
        p.start()
        pipes.append(a)
        procs.append(p)
    for a in pipes:  # wait for each worker's first call
        assert a.recv() == "ready"
    ready = time.perf_counter() - start
    t_work = time.perf_counter()
    for a in pipes:
        a.send("go")
    results = [a.recv() for a in pipes]
    work = time.perf_counter() - t_work
    for p in procs:
        p.join()
    # a whole call: spawn, imports, compile (warm cache), work
    whole = ready + work
    loop = loop_of_integrate(gf)[0]
    return {
        "workers": size,
        "work_s": work,
        "whole_call_s": whole,
        "start_and_compile_s": ready,
        "loop_s": loop,
        "ratio_work": work / loop,
        "ratio_whole": whole / loop,
        "per_worker_work_s": [r[1] for r in results],
        "load": load(),
    }


def run_child(kind: str, count: int, repeat: int) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT), OPENBLAS_NUM_THREADS="1")
    env["GRADFLOW_CPU_DEVICES"] = str(count if kind == "devices" else 1)
    cmd = [sys.executable, __file__, f"--child-{kind}", str(count), "--repeat",
           str(repeat)]  # fmt: skip
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=ROOT)
    if done.returncode != 0:
        raise SystemExit(f"{kind} = {count} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def scaling_table(dev_rows, worker_rows) -> str:
    lines = [
        "| how | count | 64-member sweep, s | loop of `gf.integrate`, s (same "
        "process) | sweep / loop | first call (compile), s | load |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in dev_rows:
        lines.append(
            f"| host devices | {r['devices']} | {r['sweep_s']:.2f} | {r['loop_s']:.2f} "
            f"| **{r['ratio']:.2f}** | {r['first_call_s']:.1f} | {r['load']} |"
        )
    for r in worker_rows:
        lines.append(
            f"| worker processes, warm | {r['workers']} | {r['work_s']:.2f} | "
            f"{r['loop_s']:.2f} | **{r['ratio_work']:.2f}** | | {r['load']} |"
        )
        lines.append(
            f"| worker processes, whole call | {r['workers']} | "
            f"{r['whole_call_s']:.2f} | {r['loop_s']:.2f} | {r['ratio_whole']:.2f} "
            f"| {r['start_and_compile_s']:.1f} (start, imports, compile) | "
            f"{r['load']} |"
        )
    return "\n".join(lines)


def scaling(args):
    print(f"cores: {os.cpu_count()}; {load()}", flush=True)
    dev_rows, worker_rows = [], []
    for k in args.devices:
        r = run_child("devices", k, args.repeat)
        dev_rows.append(r)
        print(
            f"{k} host device(s): sweep {r['sweep_s']:.2f} s, loop {r['loop_s']:.2f} s, "
            f"sweep/loop {r['ratio']:.2f} (each repeat: "
            f"{', '.join(f'{x:.2f}' for x in r['ratios'])}); first call "
            f"{r['first_call_s']:.1f} s; members equal their solo runs: "
            f"{r['members_equal_solo']}; {r['load']}",
            flush=True,
        )
    for k in args.workers:
        r = run_child("workers", k, 1)
        worker_rows.append(r)
        print(
            f"{k} worker(s): work {r['work_s']:.2f} s (per worker "
            f"{', '.join(f'{x:.2f}' for x in r['per_worker_work_s'])}), whole call "
            f"{r['whole_call_s']:.2f} s, loop {r['loop_s']:.2f} s: work/loop "
            f"{r['ratio_work']:.2f}, whole/loop {r['ratio_whole']:.2f}; {r['load']}",
            flush=True,
        )
    table = scaling_table(dev_rows, worker_rows)
    print("\n" + table)
    if args.json:
        Path(args.json).write_text(
            json.dumps({"devices": dev_rows, "workers": worker_rows}, indent=1)
        )
    if args.doc:
        import gradflow as gf  # only here: this process measures others

        gf.replace_between_markers(
            args.doc, "<!-- sweep-scaling -->", "<!-- /sweep-scaling -->", table
        )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 8, 64, 256])
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--no-stages", action="store_true")
    parser.add_argument("--json", default=None)
    parser.add_argument("--batch-size", default=None)
    parser.add_argument("--scaling", action="store_true")
    parser.add_argument("--devices", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--doc", default=None)
    parser.add_argument("--child-devices", type=int, default=None)
    parser.add_argument("--child-workers", type=int, default=None)
    args = parser.parse_args()
    if args.child_devices is not None:
        print(json.dumps(child_devices(max(1, args.repeat))))
    elif args.child_workers is not None:
        print(json.dumps(child_workers(args.child_workers)))
    elif args.scaling:
        scaling(args)
    else:
        in_process(args)


if __name__ == "__main__":
    main()
