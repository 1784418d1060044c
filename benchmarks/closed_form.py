"""The closed form at large d: the gradient and a Hessian-vector product
against this machine's float64 matrix-multiply rate, in one process, and
the peak memory of the blocked form.

**Rates** (default). For each d and width m, the gradient (`jax.grad`) and
an HVP (`jax.jvp` of the gradient) of `gf.population_loss` in two forms:
`block="dense"` (the dense closed form differentiated by JAX, what every
version before issue 27 used) and the default (from d = 256 on the blocked
form with its hand-written gradient and HVP, `docs/model.md`, "The blocked
form"). Beside them, in the same process, the reference: a float64 `d x d`
matrix product (`jax.jit(lambda a, b: a @ b)`). The calls are interleaved
(matrix product, then each form's gradient and HVP, for `--rounds` rounds of
`--calls` calls each) and each time is the least wall time of its calls.

FLOP counting (2 FLOPs per multiply-add, the same for both sides):

- matrix product: `2 d^3`;
- gradient: `2 (9 d^2 m + 6 d m^2)`: the 9 products of `d^2 m`
  multiply-adds the closed form needs (`S`, `H`, `Z` forward; two products
  for each backward), and the 6 of `d m^2` (`Q`, `K`, and the assembly of
  `dW0`, `dWQ`, `dWK`);
- HVP: three times the gradient's (the gradient's products and two for
  each in its directional derivative: 27 of `d^2 m`).

Softmaxes, exponentials and the other elementwise work are not counted,
and neither are the extra products the blocked HVP does not need to share.
So "of matmul" is the counted FLOPs per second over the matrix product's
FLOPs per second, both in wall time: how close the whole computation comes
to a machine that only multiplies matrices.

Threads: both sides run in XLA's own thread pool (one thread per core by
default), the matrix product on all of them. `GRADFLOW_BLAS_THREADS` limits
OpenBLAS (NumPy, SciPy, LAPACK), which neither uses: XLA:CPU runs its
products on YNNPACK and Eigen in its pool (measured: the matrix product's
time is the same under `threadpoolctl.threadpool_limits(1)`). So the fair
reference is the matrix product as XLA runs it here, with every core: the
same threads the closed form gets. The blocked form's scan runs its small
products one after the other, mostly on one core, and the ratio counts that
against it. `--one-core` pins the whole process to one core before JAX
starts (both sides then run on it): the ratio of the kernels alone, and
less sensitive to other processes on the other cores.

    PYTHONPATH=. python benchmarks/closed_form.py [--ds 1024 2048] [--ms 16 32]
        [--one-core] [--doc docs/performance.md] [--force] [--json out.json]

**Memory** (`--memory`): in a fresh process per case, the peak resident
memory (`VmHWM` of `/proc/self/status`, reset through `/proc/self/clear_refs`
just before the call) during one gradient and during one HVP of each form,
at d = 2048 and 8192, width 16 (sticky chains, whose `pi` is known). The
chain's own `P` (`d^2` entries, 512 MB at d = 8192) and the runtime are in
every figure; the resident memory before the call is printed beside it, and
so is the peak before the reset (building the chain and compiling).

    PYTHONPATH=. python benchmarks/closed_form.py --memory [--memory-ds 2048 8192]

**Blocks** (`--blocks 16 32 64 ...`): the blocked gradient and HVP at each
block size, against the matrix product, to choose `default_block` (the
loss's and gradient's) and `default_hvp_block`. The default form's row
names both: "blocked (256; 128)".

**Quiet machine.** Every row prints the 1-minute load average before and
after it, and a row during which it exceeded 1.5 is starred in the table.
`--doc` writes the table between `<!-- closed-form-rates -->` and
`<!-- /closed-form-rates -->` of the page (`closed-form-rates-one-core` with
`--one-core`, `closed-form-memory` with `--memory`), only
when the 1-minute load at the start is at most 1.5; `--force` writes it
anyway and marks it as taken under load.
"""

import os
import sys


if "--one-core" in sys.argv:  # before JAX starts its thread pool
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse  # noqa: E402
import json  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

from _git import short_head  # noqa: E402


ROOT = Path(__file__).resolve().parents[1]


def grad_flops(d: int, m: int) -> float:
    return 2.0 * (9 * d * d * m + 6 * d * m * m)


def hvp_flops(d: int, m: int) -> float:
    return 3 * grad_flops(d, m)


def compiled(block):
    """The jitted gradient and HVP of `gf.population_loss(..., block=block)`."""
    import jax

    import gradflow as gf

    def loss(p, c):
        return gf.population_loss(p, c, block=block)

    grad = jax.jit(jax.grad(loss))
    hvp = jax.jit(
        lambda p, v, c: jax.jvp(lambda q: jax.grad(loss)(q, c), (p,), (v,))[1]
    )
    return grad, hvp


def least(fn, *args, calls: int) -> tuple[float, float]:
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


def matmul(d: int):
    import jax
    import jax.numpy as jnp
    import numpy as np

    a = jnp.asarray(np.random.default_rng(0).random((d, d)))
    mm = jax.jit(lambda x, y: x @ y)
    jax.block_until_ready(mm(a, a))
    return mm, (a, a)


def _rel(a, b) -> float:
    import jax
    import numpy as np

    return max(
        float(np.max(np.abs(x - y)) / np.max(np.abs(x)))
        for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True)
    )


def measure(d: int, m: int, blocks: dict, args) -> list[dict]:
    """Rows for each `{name: block}` at (d, m), with the matrix product
    measured between them."""
    import numpy as np

    import gradflow as gf

    chain = gf.chains.random(d, seed=0)
    p = gf.init_params(d, m, 0.3, seed=0)
    v = gf.init_params(d, m, 1.0, seed=1)
    mm, mm_args = matmul(d)
    fs = {name: compiled(block) for name, block in blocks.items()}
    ref, err = None, {}
    for name, (grad, hvp) in fs.items():  # compile, and check agreement
        out = (grad(p, chain), hvp(p, v, chain))
        ref = out if ref is None else ref
        err[name] = _rel(ref, out)
    best = {name: [np.inf] * 4 for name in fs}  # grad wall, CPU, HVP wall, CPU
    mm_best = [np.inf, np.inf]
    for _ in range(args.rounds):  # interleaved
        mm_best = [min(a, b) for a, b in zip(mm_best, least(mm, *mm_args, calls=2))]
        for name, (grad, hvp) in fs.items():
            t = least(grad, p, chain, calls=args.calls)
            t += least(hvp, p, v, chain, calls=args.calls)
            best[name] = [min(a, b) for a, b in zip(best[name], t)]
    rate, cpu_rate = 2.0 * d**3 / mm_best[0], 2.0 * d**3 / mm_best[1]
    rows = []
    for name, (tg, cg, th, ch) in best.items():
        rows.append(
            {
                "d": d, "m": m, "form": name, "block": blocks[name],
                "grad_ms": 1e3 * tg, "grad_cpu_ms": 1e3 * cg,
                "hvp_ms": 1e3 * th, "hvp_cpu_ms": 1e3 * ch,
                "grad_frac": grad_flops(d, m) / tg / rate,
                "hvp_frac": hvp_flops(d, m) / th / rate,
                "hvp_over_grad": th / tg,
                # the same ratios in CPU time (all threads of the process):
                # with --one-core, the kernels' ratio even on a busy machine
                "grad_frac_cpu": grad_flops(d, m) / cg / cpu_rate,
                "hvp_frac_cpu": hvp_flops(d, m) / ch / cpu_rate,
                "matmul_ms": 1e3 * mm_best[0], "matmul_cpu_ms": 1e3 * mm_best[1],
                "matmul_gflops": rate / 1e9, "max_rel_diff": err[name],
            }
        )  # fmt: skip
    return rows


def print_row(r) -> None:
    print(
        f"d={r['d']} m={r['m']} {r['form']:20s} grad {r['grad_ms']:8.2f} ms "
        f"({r['grad_frac']:.0%} of matmul), HVP {r['hvp_ms']:8.2f} ms "
        f"({r['hvp_frac']:.0%}; {r['hvp_over_grad']:.2f}x the gradient); in CPU "
        f"time {r['grad_frac_cpu']:.0%} and {r['hvp_frac_cpu']:.0%}; "
        f"matmul {r['matmul_ms']:.2f} ms = {r['matmul_gflops']:.0f} GFLOP/s; "
        f"agrees to {r['max_rel_diff']:.1e}; load {r['load_before']:.2f} -> "
        f"{r['load_after']:.2f}",
        flush=True,
    )


def rates(args) -> list[dict]:
    import gradflow as gf

    BLOCKED_MIN_D = gf.markov.BLOCKED_MIN_D
    default_block, default_hvp_block = (
        gf.markov.default_block,
        gf.markov.default_hvp_block,
    )

    rows = []
    for d in args.ds:
        for m in args.ms:
            blocks = {"dense": "dense"}
            if d >= BLOCKED_MIN_D:  # the default: blocked, its own block sizes
                name = f"blocked ({default_block(d)}; {default_hvp_block(d)})"
                blocks[name] = None
            with args.guard.row() as loads:
                new = measure(d, m, blocks, args)
            for r in new:
                r.update(loads)
                print_row(r)
            rows += new
    return rows


def block_sweep(args) -> list[dict]:
    rows = []
    for d in args.ds:
        for m in args.ms:
            blocks = {f"block {b}": b for b in args.blocks if b <= d}
            with args.guard.row() as loads:
                new = measure(d, m, blocks, args)
            for r in new:
                r.update(loads)
                print_row(r)
            rows += new
    return rows


def rates_table(rows, args) -> str:
    guard = args.guard
    lines = [
        "| d | m | form | grad ms | grad, of matmul | HVP ms | HVP, of matmul | "
        "HVP / grad | speed-up over dense (grad, HVP) | matmul ms (GFLOP/s) | "
        "load before -> after |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    dense = {}
    for r in rows:
        key = (r["d"], r["m"])
        if r["block"] == "dense":
            dense[key] = r
        b = dense.get(key)
        speed = (
            ""
            if b is None or b is r
            else f"{b['grad_ms'] / r['grad_ms']:.2f}x, {b['hvp_ms'] / r['hvp_ms']:.2f}x"
        )
        loaded = "*" if guard.loaded(r) else ""
        lines.append(
            f"| {r['d']} | {r['m']} | {r['form']}{loaded} | {r['grad_ms']:.2f} | "
            f"{r['grad_frac']:.0%} | {r['hvp_ms']:.2f} | {r['hvp_frac']:.0%} | "
            f"{r['hvp_over_grad']:.2f} | {speed} | {r['matmul_ms']:.2f} "
            f"({r['matmul_gflops']:.0f}) | {r['load_before']:.2f} -> "
            f"{r['load_after']:.2f} |"
        )
    lines.append("")
    if any(guard.loaded(r) for r in rows):
        lines.append(
            f"\\* The 1-minute load rose above {guard.limit} during this row: "
            "other processes took cores from it and from the matrix product."
        )
        lines.append("")
    lines.append(
        "Wall times, the least of "
        f"{args.rounds} x {args.calls} calls; "
        + ("the process pinned to one core" if args.one_core else "every core")
        + f"; {time.strftime('%Y-%m-%d')}, `{short_head(ROOT)}`."
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
    """In a fresh process: the peak resident memory during one call of `op`
    ("grad" or "hvp") of `form` ("dense" or "blocked") at d, width 16."""
    import jax

    import gradflow as gf

    default_block, default_hvp_block = (
        gf.markov.default_block,
        gf.markov.default_hvp_block,
    )

    chain = gf.chains.sticky(d, 0.5, 0.5, 0.05)
    m = 16
    p = gf.init_params(d, m, 0.3, seed=0)
    v = gf.init_params(d, m, 1.0, seed=1)
    grad, hvp = compiled("dense" if form == "dense" else None)
    fn, fargs = (grad, (p, chain)) if op == "grad" else (hvp, (p, v, chain))
    call = fn.lower(*fargs).compile()  # compile before the measurement
    jax.block_until_ready(fargs)
    before = _hwm_kb()
    _reset_hwm()
    base = _hwm_kb()
    t = time.perf_counter()
    jax.block_until_ready(call(*fargs))
    wall = time.perf_counter() - t
    peak = _hwm_kb()
    return {
        "d": d, "m": m, "form": form,
        "block": None if form == "dense" else default_block(d),
        "hvp_block": None if form == "dense" else default_hvp_block(d),
        "op": op, "peak_mb": peak / 1024, "resident_before_mb": base / 1024,
        "peak_before_reset_mb": before / 1024, "wall_s": wall,
    }  # fmt: skip


def memory(args) -> list[dict]:
    rows = []
    for d in args.memory_ds:
        for form in ("blocked",) if args.blocked_only else ("dense", "blocked"):
            for op in ("grad", "hvp"):
                if form == "dense" and d > 4096 and op == "hvp":
                    continue  # would need more memory than this machine shares
                env = dict(os.environ, PYTHONPATH=str(ROOT))
                cmd = [sys.executable, __file__, "--child-memory", str(d), form, op]
                with args.guard.row() as loads:
                    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
                if done.returncode != 0:
                    print(f"d={d} {form} {op}: failed: {done.stderr[-500:]}")
                    continue
                r = json.loads(done.stdout.strip().splitlines()[-1])
                r.update(loads)
                rows.append(r)
                print(
                    f"d={d} {form:8s} {op}: peak {r['peak_mb']:6.0f} MB during the "
                    f"call (resident before it {r['resident_before_mb']:.0f} MB; "
                    f"peak building the chain and compiling "
                    f"{r['peak_before_reset_mb']:.0f} MB), {r['wall_s']:.2f} s; "
                    f"{args.guard.label(loads)}",
                    flush=True,
                )
    return rows


def memory_table(rows, guard) -> str:
    lines = [
        "| d | m | form | call | peak during the call, MB | resident before "
        "it, MB | peak building the chain and compiling, MB | call s | load |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        form = r["form"]
        if r["block"] is not None:
            form = f"blocked ({r['block'] if r['op'] == 'grad' else r['hvp_block']})"
        if guard.loaded(r):
            form += "*"
        lines.append(
            f"| {r['d']} | {r['m']} | {form} | {r['op']} | {r['peak_mb']:.0f} | "
            f"{r['resident_before_mb']:.0f} | {r['peak_before_reset_mb']:.0f} | "
            f"{r['wall_s']:.2f} | {r['load_before']:.2f} -> {r['load_after']:.2f} |"
        )
    lines.append("")
    lines.append(f"{time.strftime('%Y-%m-%d')}, `{short_head(ROOT)}`.")
    return "\n".join(lines)


# -- docs --------------------------------------------------------------------------


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ds", type=int, nargs="+", default=[1024, 2048])
    parser.add_argument("--ms", type=int, nargs="+", default=[16, 32])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=3)
    parser.add_argument("--one-core", action="store_true")
    parser.add_argument("--blocks", type=int, nargs="+", default=None)
    parser.add_argument("--memory", action="store_true")
    parser.add_argument("--memory-ds", type=int, nargs="+", default=[2048, 8192])
    parser.add_argument("--blocked-only", action="store_true")
    parser.add_argument("--doc", default=None)
    parser.add_argument("--force", action="store_true")
    parser.add_argument("--json", default=None)
    parser.add_argument("--child-memory", nargs=3, default=None)
    args = parser.parse_args()
    if args.child_memory is not None:
        d, form, op = args.child_memory
        print(json.dumps(child_memory(int(d), form, op)))
        return
    import gradflow as gf

    guard = args.guard = gf.LoadGuard(args.doc, force=args.force)
    guard.check()
    if args.memory:
        rows = memory(args)
        table, name = memory_table(rows, guard), "closed-form-memory"
    elif args.blocks:
        rows = block_sweep(args)
        table, name = rates_table(rows, args), None
    else:
        rows = rates(args)
        name = "closed-form-rates" + ("-one-core" if args.one_core else "")
        table = rates_table(rows, args)
    print("\n" + table + ("\n\n" + guard.note() if guard.note() else ""))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    if name is not None:
        guard.write(f"<!-- {name} -->", f"<!-- /{name} -->", table)


if __name__ == "__main__":
    main()
