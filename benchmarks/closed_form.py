"""The closed form at large d: FLOP rates of the gradient and of a
Hessian-vector product against this machine's float64 matrix-multiply rate,
and the peak memory of the blocked form.

Rates (one process, side by side): for d = 256 ... 2048 and width m = 16, 32,
the gradient and an HVP (`jax.jvp` of the gradient) of the paper's population
loss, in two forms: autodiff of `gf.population_loss` (the form every version
before issue 27 used) and the blocked form with the hand-written gradient
(`gf.population_loss(..., block=...)`, what `MarkovAttention` uses from
d = 256 on). FLOPs are counted as twice the multiply-adds of the contractions
the closed form needs: a gradient `2 (9 d^2 m + 6 d m^2)` (forward
`S`, `H`, `Z`; backward two products per forward product), an HVP three times
that (the gradient and its tangent, two products per product); the
elementwise work (softmaxes, exponentials) is not counted, so a rate is what
the whole computation achieves against the matrix products it contains. The
reference rate is a 2048 x 2048 float64 matrix product, measured in the same
process between the rows (the median of those measurements). Each time is the
minimum of several calls, the two forms alternating. Rates are per CPU-second
(the process's CPU time, all threads): on a shared machine the wall time of a
call depends on how many other processes run, its CPU time much less; wall
times are printed too.

    PYTHONPATH=. python benchmarks/closed_form.py [--ds 256 512 1024 2048]
        [--ms 16 32] [--doc docs/performance.md] [--json out.json]

Memory (`--memory`): the peak resident memory of a fresh process (VmHWM,
reset just before the call) during one gradient and during one HVP of each
form, at d = 2048 and 8192, width 16 (sticky chains, whose `pi` is known, so
that building the chain needs no d x d solve). The chain's own `P` (d^2
entries) is part of every figure.

    PYTHONPATH=. python benchmarks/closed_form.py --memory [--memory-ds 2048 8192]
        [--doc docs/performance.md]

`--doc` writes the tables between `<!-- closed-form-rates -->` /
`<!-- /closed-form-rates -->` and `<!-- closed-form-memory -->` /
`<!-- /closed-form-memory -->`.
"""

import os


os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402


ROOT = Path(__file__).resolve().parents[1]


def load() -> str:
    return "{:.2f} {:.2f} {:.2f}".format(*os.getloadavg())


def grad_flops(d: int, m: int) -> float:
    return 2.0 * (9 * d * d * m + 6 * d * m * m)


def forms(d: int):
    """`{name: (loss function of (params, chain))}` of the two forms."""
    import gradflow as gf

    block = gf.markov.default_block(d)
    return {
        "autodiff": lambda p, c: gf.population_loss(p, c),
        f"blocked (block {block})": lambda p, c: gf.population_loss(p, c, block=block),
    }


def compiled(loss):
    import jax

    grad = jax.jit(jax.grad(loss))
    hvp = jax.jit(
        lambda p, v, c: jax.jvp(lambda q: jax.grad(loss)(q, c), (p,), (v,))[1]
    )
    return grad, hvp


def best(fn, *args, calls: int) -> tuple[float, float]:
    """The least wall time and the least CPU time (this process, all its
    threads) of `calls` calls."""
    import jax

    walls, cpus = [], []
    for _ in range(calls):
        t, c = time.perf_counter(), time.process_time()
        jax.block_until_ready(fn(*args))
        walls.append(time.perf_counter() - t)
        cpus.append(time.process_time() - c)
    return min(walls), min(cpus)


def matmul_rate(calls: int = 3) -> float:
    """float64 GFLOP per CPU-second of a 2048 x 2048 matrix product."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    a = jnp.asarray(np.random.default_rng(0).random((2048, 2048)))
    mm = jax.jit(lambda x, y: x @ y)
    jax.block_until_ready(mm(a, a))
    return 2 * 2048**3 / best(mm, a, a, calls=calls)[1] / 1e9


def rates(args) -> list[dict]:
    import jax
    import numpy as np

    import gradflow as gf

    rows, mm_rates = [], [matmul_rate()]
    print(f"float64 matmul (2048^2): {mm_rates[0]:.1f} GFLOP/s; load {load()}")
    for d in args.ds:
        chain = gf.chains.random(d, seed=0)
        for m in args.ms:
            p = gf.init_params(d, m, 0.3, seed=0)
            v = gf.init_params(d, m, 1.0, seed=1)
            fs = {name: compiled(f) for name, f in forms(d).items()}
            ref = None
            for grad, hvp in fs.values():  # compile, and check agreement
                g, h = grad(p, chain), hvp(p, v, chain)
                if ref is None:
                    ref = (g, h)
                err = max(
                    float(np.max(np.abs(a - b)) / np.max(np.abs(a)))
                    for a, b in zip(jax.tree.leaves(ref), jax.tree.leaves((g, h)))
                )
            # [grad wall, grad CPU, HVP wall, HVP CPU]
            times = {name: [np.inf] * 4 for name in fs}
            for _ in range(args.rounds):  # the forms alternate
                for name, (grad, hvp) in fs.items():
                    gw, gc = best(grad, p, chain, calls=2)
                    hw, hc = best(hvp, p, v, chain, calls=2)
                    times[name] = [
                        min(a, b) for a, b in zip(times[name], (gw, gc, hw, hc))
                    ]
                mm_rates.append(matmul_rate())
            rate = statistics.median(mm_rates)
            for name, (tg, cg, th, ch) in times.items():
                fl = grad_flops(d, m)
                row = {
                    "d": d, "m": m, "form": name, "grad_ms": 1e3 * tg,
                    "hvp_ms": 1e3 * th, "grad_cpu_ms": 1e3 * cg, "hvp_cpu_ms": 1e3 * ch,
                    "grad_gflops": fl / cg / 1e9, "hvp_gflops": 3 * fl / ch / 1e9,
                    "matmul_gflops": rate, "max_rel_diff": err, "load": load(),
                }  # fmt: skip
                row["grad_frac"] = row["grad_gflops"] / rate
                row["hvp_frac"] = row["hvp_gflops"] / rate
                rows.append(row)
                print(
                    f"d={d} m={m} {name:22s} grad {row['grad_ms']:8.2f} ms wall, "
                    f"{row['grad_cpu_ms']:8.2f} ms CPU, {row['grad_gflops']:5.1f} "
                    f"GFLOP per CPU-s ({row['grad_frac']:.0%}); HVP "
                    f"{row['hvp_ms']:8.2f} ms wall, {row['hvp_cpu_ms']:8.2f} ms CPU, "
                    f"{row['hvp_gflops']:5.1f} ({row['hvp_frac']:.0%}); matmul "
                    f"{rate:.1f}; forms agree to {err:.1e}; load {row['load']}",
                    flush=True,
                )
    return rows


def rates_table(rows) -> str:
    lines = [
        "| d | m | form | grad ms (wall) | grad ms (CPU) | grad GFLOP per CPU-s | of "
        "matmul | HVP ms (wall) | HVP ms (CPU) | HVP GFLOP per CPU-s | of matmul | "
        "speed-up, CPU (grad, HVP) | load |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    base = {}
    for r in rows:
        key = (r["d"], r["m"])
        if r["form"] == "autodiff":
            base[key] = r
            speed = ""
        else:
            b = base[key]
            speed = (
                f"{b['grad_cpu_ms'] / r['grad_cpu_ms']:.2f}x, "
                f"{b['hvp_cpu_ms'] / r['hvp_cpu_ms']:.2f}x"
            )
        lines.append(
            f"| {r['d']} | {r['m']} | {r['form']} | {r['grad_ms']:.2f} | "
            f"{r['grad_cpu_ms']:.2f} | {r['grad_gflops']:.1f} | {r['grad_frac']:.0%} | "
            f"{r['hvp_ms']:.2f} | {r['hvp_cpu_ms']:.2f} | {r['hvp_gflops']:.1f} | "
            f"{r['hvp_frac']:.0%} | {speed} | {r['load']} |"
        )
    rate = rows[-1]["matmul_gflops"] if rows else float("nan")
    lines.append("")
    lines.append(
        f"float64 matrix product (2048 x 2048, median of its measurements between "
        f"the rows): {rate:.1f} GFLOP per CPU-second."
    )
    return "\n".join(lines)


# -- memory ------------------------------------------------------------------------


def _hwm_kb() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise RuntimeError("no VmHWM in /proc/self/status")


def _reset_hwm() -> None:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def child_memory(d: int, form: str, op: str) -> dict:
    """In a fresh process: the peak RSS during one call of `op` ("grad" or
    "hvp") of `form` ("autodiff" or "blocked") at d, width 16."""
    import jax

    import gradflow as gf

    chain = gf.chains.sticky(d, 0.5, 0.5, 0.05)
    m = 16
    p = gf.init_params(d, m, 0.3, seed=0)
    v = gf.init_params(d, m, 1.0, seed=1)
    block = gf.markov.default_block(d)

    def loss(q, c):
        if form == "autodiff":
            return gf.population_loss(q, c)
        return gf.population_loss(q, c, block=block)

    grad, hvp = compiled(loss)
    fn, fargs = (grad, (p, chain)) if op == "grad" else (hvp, (p, v, chain))
    lowered = fn.lower(*fargs).compile()  # compile before the measurement
    jax.block_until_ready(fargs)
    before = _hwm_kb()
    _reset_hwm()
    base = _hwm_kb()
    t = time.perf_counter()
    jax.block_until_ready(lowered(*fargs))
    wall = time.perf_counter() - t
    peak = _hwm_kb()
    stats = jax.devices()[0].memory_stats() or {}  # a GPU's own memory
    device = stats.get("peak_bytes_in_use")
    return {
        "device_peak_mb": None if device is None else device / 2**20,
        "d": d, "m": m, "form": form, "block": block if form != "autodiff" else None,
        "op": op, "peak_mb": peak / 1024, "resident_before_mb": base / 1024,
        "peak_before_reset_mb": before / 1024, "wall_s": wall, "load": load(),
    }  # fmt: skip


def memory(args) -> list[dict]:
    rows = []
    for d in args.memory_ds:
        for form in ("blocked",) if args.blocked_only else ("autodiff", "blocked"):
            for op in ("grad", "hvp"):
                if form == "autodiff" and d > 4096 and op == "hvp":
                    continue  # would need more memory than this machine shares
                env = dict(os.environ, PYTHONPATH=str(ROOT))
                cmd = [sys.executable, __file__, "--child-memory", str(d), form, op]
                done = subprocess.run(cmd, env=env, capture_output=True, text=True)
                if done.returncode != 0:
                    print(f"d={d} {form} {op}: failed: {done.stderr[-500:]}")
                    continue
                r = json.loads(done.stdout.strip().splitlines()[-1])
                rows.append(r)
                device = r.get("device_peak_mb")
                print(
                    f"d={d} {form:8s} {op}: peak {r['peak_mb']:8.0f} MB (resident "
                    f"before the call {r['resident_before_mb']:.0f} MB), "
                    f"{r['wall_s']:.2f} s"
                    + ("" if device is None else f"; device peak {device:.0f} MB")
                    + f"; load {r['load']}",
                    flush=True,
                )
    return rows


def memory_table(rows) -> str:
    lines = [
        "| d | m | form | call | peak process memory, MB | resident before the "
        "call, MB | call s | load |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        form = r["form"] if r["block"] is None else f"blocked (block {r['block']})"
        lines.append(
            f"| {r['d']} | {r['m']} | {form} | {r['op']} | {r['peak_mb']:.0f} | "
            f"{r['resident_before_mb']:.0f} | {r['wall_s']:.2f} | {r['load']} |"
        )
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ds", type=int, nargs="+", default=[256, 512, 1024, 2048])
    parser.add_argument("--ms", type=int, nargs="+", default=[16, 32])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--memory", action="store_true")
    parser.add_argument("--memory-ds", type=int, nargs="+", default=[2048, 8192])
    parser.add_argument("--blocked-only", action="store_true")
    parser.add_argument("--doc", default=None)
    parser.add_argument("--json", default=None)
    parser.add_argument("--child-memory", nargs=3, default=None)
    args = parser.parse_args()
    if args.child_memory is not None:
        d, form, op = args.child_memory
        print(json.dumps(child_memory(int(d), form, op)))
        return
    if args.memory:
        rows = memory(args)
        table, name = memory_table(rows), "closed-form-memory"
    else:
        rows = rates(args)
        table, name = rates_table(rows), "closed-form-rates"
    print("\n" + table)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    if args.doc:
        import gradflow as gf  # only here: this process measures others

        gf.replace_between_markers(
            args.doc, f"<!-- {name} -->", f"<!-- /{name} -->", table
        )


if __name__ == "__main__":
    main()
