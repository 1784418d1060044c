"""Sweeps against a loop of solo runs, and how they scale with the cores.

Two modes.

**In one process** (as before): the wall time of gf.sweep over 64 members
(8 delta x 8 seeds of sticky(6, 0.5, 0.5, delta), width 8, t1 = 5000) and of
one gf.integrate member, both compiled first; the cost per member at 1, 8,
64 and 256 members; the same 64 members as a loop of gf.integrate calls.

    PYTHONPATH=. python benchmarks/sweep.py [--sizes 1 8 64 256] [--json out.json]
        [--batch-size N | --batch-size all]

**Scaling** (`--scaling`): for each member count (16: 4 delta x 4 seeds;
64: 8 x 8; t1 = 5000, 201 saves) and each number of host devices (1, 2),
in a fresh process with `GRADFLOW_CPU_DEVICES` (JAX fixes its devices when
it starts): the sweep and the loop of gf.integrate over the same members,
each compiled first (the sweep's first call timed and its compilations
counted), then timed `--repeat` times in alternation. Each row gives wall
and CPU time (user + system of the process, every thread: robust to other
processes, where wall time is not) of both, the CPU-time/wall ratio (how
many cores each kept busy), the sweep/loop ratios (medians over the
repeats), and whether every member equals its solo run bit for bit.
`--baseline DIR` runs the same rows with another checkout's gradflow (e.g.
a worktree of the commit before) beside this one's.

    PYTHONPATH=. python benchmarks/sweep.py --scaling [--members 16 64]
        [--devices 1 2] [--repeat 3] [--baseline DIR] [--json out.json]
        [--doc docs/performance.md [--force]]

Every row prints the 1-minute load before and after it (`gf.LoadGuard`);
`--doc` writes the table between `<!-- sweep-scaling -->` and
`<!-- /sweep-scaling -->` of the page only when the load at the start is at
most 1.5, or with `--force`, which marks it as taken under load. The
criterion of issues 27 and 35: the 64-member sweep at most 0.6x the loop's
wall time on 2 host devices, with a CPU-time/wall ratio near 2.
"""

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np


D, TOP, RHO, WIDTH, SCALE, T1 = 6, 0.5, 0.5, 8, 1e-3, 5000.0
ROOT = Path(__file__).resolve().parents[1]


def members(gf, n: int):
    """`n` members: k deltas x n/k seeds, k = min(8, isqrt(n)) (16: 4 x 4,
    64: 8 x 8)."""
    n_delta = min(8, math.isqrt(n))
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


def cpu_seconds() -> float:
    """CPU time of this process so far (user + system, every thread)."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def timed(fn):
    """`(result, wall s, CPU s)` of one call."""
    wall, cpu = time.perf_counter(), cpu_seconds()
    out = fn()
    return out, time.perf_counter() - wall, cpu_seconds() - cpu


def child_scaling(n: int, repeat: int) -> dict:
    """In a fresh process (GRADFLOW_CPU_DEVICES set by the parent): the
    `n`-member sweep and the loop of gf.integrate over the same members, each
    compiled first (its first call timed, compilations counted), then timed
    `repeat` times in alternation (so that a change of load hits both); wall
    and CPU time of each, and whether every member equals its solo run bit
    for bit."""
    import jax

    import gradflow as gf

    compiles = [0]

    def count(event, duration, **kwargs):
        if event == "/jax/core/compile/backend_compile_duration":
            compiles[0] += 1

    jax.monitoring.register_event_duration_secs_listener(count)
    chains, seeds, deltas = members(gf, n)
    quiet = gf.Run(progress=False)

    def sweep():
        return gf.sweep(chains, init_scale=SCALE, seeds=seeds, width=WIDTH, t1=T1,
                        labels={"delta": deltas}, run=quiet)  # fmt: skip

    def loop():
        return [
            gf.integrate(ch, SCALE, width=WIDTH, t1=T1, seed=s, run=quiet)
            for ch in chains for s in seeds
        ]  # fmt: skip

    sw, first_wall, first_cpu = timed(sweep)
    first_compiles = compiles[0]
    trajs, loop_first, _ = timed(loop)
    rows = []
    for _ in range(repeat):
        sw, s_wall, s_cpu = timed(sweep)
        trajs, l_wall, l_cpu = timed(loop)
        rows.append((s_wall, s_cpu, l_wall, l_cpu))
    equal = all(
        np.array_equal(a.loss, b.loss)
        and all(
            np.array_equal(x, y)
            for x, y in zip(jax.tree.leaves(a.params), jax.tree.leaves(b.params))
        )
        for a, b in zip(sw, trajs, strict=True)
    )
    med = np.median(np.array(rows), axis=0)
    return {
        "members": len(sw), "devices": len(jax.devices()),
        "sweep_s": med[0], "sweep_cpu_s": med[1], "loop_s": med[2], "loop_cpu_s": med[3],
        "ratio": float(np.median([r[0] / r[2] for r in rows])),
        "cpu_ratio": float(np.median([r[1] / r[3] for r in rows])),
        "repeats": rows, "first_call_s": first_wall, "first_call_cpu_s": first_cpu,
        "first_call_compiles": first_compiles, "loop_first_call_s": loop_first,
        "members_equal_solo": bool(equal), "steps": int(np.sum(sw.stats.num_steps)),
    }  # fmt: skip


def run_child(checkout: Path, n: int, devices: int, repeat: int) -> dict:
    env = dict(os.environ, PYTHONPATH=str(checkout), GRADFLOW_CPU_DEVICES=str(devices))
    cmd = [sys.executable, __file__, "--child", str(n), "--repeat", str(repeat)]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=ROOT)
    if done.returncode != 0:
        raise SystemExit(
            f"{n} members on {devices} devices failed:\n{done.stderr[-3000:]}"
        )
    return json.loads(done.stdout.strip().splitlines()[-1])


def scaling_table(rows, guard) -> str:
    lines = [
        "| code | members | devices | sweep wall s | sweep CPU s | sweep CPU / wall | "
        "loop wall s | loop CPU s | loop CPU / wall | sweep / loop, wall | "
        "sweep / loop, CPU | first call s (compilations) | members = solo | load |",
        "| --- |" + " --- |" * 13,
    ]
    for r in rows:
        star = "*" if guard.loaded(r) else ""
        lines.append(
            f"| {r['code']}{star} | {r['members']} | {r['devices']} | "
            f"{r['sweep_s']:.2f} | {r['sweep_cpu_s']:.2f} | "
            f"{r['sweep_cpu_s'] / r['sweep_s']:.2f} | {r['loop_s']:.2f} | "
            f"{r['loop_cpu_s']:.2f} | {r['loop_cpu_s'] / r['loop_s']:.2f} | "
            f"**{r['ratio']:.2f}** | {r['cpu_ratio']:.2f} | {r['first_call_s']:.1f} "
            f"({r['first_call_compiles']}) | "
            f"{'bit for bit' if r['members_equal_solo'] else 'round-off'} | "
            f"{r['load_before']:.2f} -> {r['load_after']:.2f} |"
        )
    if any(guard.loaded(r) for r in rows):
        lines += ["", f"\\* The 1-minute load exceeded {guard.limit} during this row."]
    return "\n".join(lines)


def scaling(args):
    guard = _guard(args)
    print(f"cores: {os.cpu_count()}", flush=True)
    checkouts = {"this": ROOT}
    if args.baseline is not None:
        checkouts["baseline"] = Path(args.baseline).resolve()
    rows = []
    for n in args.members:
        for k in args.devices:
            for code, checkout in checkouts.items():
                with guard.row() as loads:
                    r = run_child(checkout, n, k, args.repeat)
                r.update(loads, code=code)
                rows.append(r)
                print(
                    f"{code}: {n} members, {k} device(s): sweep {r['sweep_s']:.2f} s "
                    f"wall / {r['sweep_cpu_s']:.2f} s CPU, loop {r['loop_s']:.2f} / "
                    f"{r['loop_cpu_s']:.2f}: sweep/loop {r['ratio']:.2f} wall, "
                    f"{r['cpu_ratio']:.2f} CPU; first call {r['first_call_s']:.1f} s "
                    f"({r['first_call_compiles']} compilations); members equal "
                    f"their solo runs bit for bit: {r['members_equal_solo']}; "
                    f"{guard.label(loads)}",
                    flush=True,
                )
    table = scaling_table(rows, guard)
    print("\n" + table + ("\n\n" + guard.note() if guard.note() else ""))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    guard.write("<!-- sweep-scaling -->", "<!-- /sweep-scaling -->", table)


def _guard(args):
    import gradflow as gf  # only the load guard: this process measures others

    guard = gf.LoadGuard(args.doc, force=args.force)
    guard.check()
    return guard


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 8, 64, 256])
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--no-stages", action="store_true")
    parser.add_argument("--json", default=None)
    parser.add_argument("--batch-size", default=None)
    parser.add_argument("--scaling", action="store_true")
    parser.add_argument("--members", type=int, nargs="+", default=[16, 64])
    parser.add_argument("--devices", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--baseline", default=None)
    parser.add_argument("--doc", default=None)
    parser.add_argument("--force", action="store_true")
    parser.add_argument("--child", type=int, default=None)
    args = parser.parse_args()
    if args.child is not None:
        print(json.dumps(child_scaling(args.child, max(1, args.repeat))))
    elif args.scaling:
        scaling(args)
    else:
        in_process(args)


if __name__ == "__main__":
    main()
