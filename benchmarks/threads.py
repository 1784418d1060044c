"""BLAS threads on a busy machine: gradflow's one-thread policy against the
libraries' default (one thread per core), side by side in one process, with
no extra load and then under `--busy N` processes that spin on the CPU (started
and stopped by this script); and the test tier's largest fixture (the
condensation solve of tests/test_integrate.py, compilation included, in a
fresh process) without and with that load.

    PYTHONPATH=. python benchmarks/threads.py                # prints the table
    PYTHONPATH=. python benchmarks/threads.py --write-docs   # and writes it into
                                                             # docs/performance.md

Each row is the best of `--repeats` runs of: 20 `numpy.linalg.eigh` of a
224 x 224 symmetric matrix; 20 of the same with `jax.numpy.linalg.eigh`
(jaxlib calls SciPy's LAPACK and its OpenBLAS); the init_scale = 10 solve of
tests/test_integrate.py (`large_start`, width 16, 4001 saves); `gf.linearize`
at the end of condensation (a 224 x 224 Hessian). "default" runs with the
libraries' own threads (gradflow's limit lifted with `GRADFLOW_BLAS_THREADS=
auto` semantics: threadpoolctl's limit set to the core count), "one" with
gradflow's default. The last row runs the init_scale = 10 solve in a fresh
process with XLA's CPU threads cut to one (`XLA_FLAGS` below), against the row
"solve from init_scale 10".
"""

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path


ROOT = Path(__file__).resolve().parent.parent
BEGIN = "<!-- BEGIN threads table (benchmarks/threads.py --write-docs) -->"
END = "<!-- END threads table -->"
XLA_ONE_THREAD = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
LARGE = """
import time
import numpy as np
import gradflow as gf
ts = np.linspace(0.0, 50.0, 4001)
call = lambda: gf.integrate(gf.chains.sticky(6, 0.5, 0.5, 0.05), 10.0, t1=50.0,
                            saveat=gf.SaveAt(ts, stages=False),
                            run=gf.Run(progress=False))
call()
best = float("inf")
for _ in range(2):
    t = time.perf_counter()
    call()
    best = min(best, time.perf_counter() - t)
print(best)
"""
FIXTURE = """
import time
import gradflow as gf
t = time.perf_counter()
gf.integrate(gf.chains.sticky(6, 0.5, 0.5, 0.05), 1e-3, width=8, t1=80.0,
             run=gf.Run(progress=False))
print(time.perf_counter() - t)
"""


def _jobs():
    import jax
    import jax.numpy as jnp
    import numpy as np

    import gradflow as gf

    sticky = gf.chains.sticky(6, 0.5, 0.5, 0.05)
    rng = np.random.default_rng(0)
    a = rng.standard_normal((224, 224))
    a = a + a.T
    jeigh = jax.jit(jnp.linalg.eigh)
    end = gf.integrate(
        sticky, 1e-3, width=8, t1=80.0, run=gf.Run(progress=False)
    ).params[-1]
    ts = np.linspace(0.0, 50.0, 4001)

    def np_eigh():
        for _ in range(20):
            np.linalg.eigh(a)

    def jax_eigh():
        for _ in range(20):
            jeigh(a)[0].block_until_ready()

    def large():
        gf.integrate(
            sticky,
            10.0,
            t1=50.0,
            saveat=gf.SaveAt(ts, stages=False),
            run=gf.Run(progress=False),
        )

    def linearize():
        gf.linearize(sticky, end)

    return {
        "numpy eigh 224 x 20": np_eigh,
        "jax eigh 224 x 20": jax_eigh,
        "solve from init_scale 10": large,
        "linearize (n = 224)": linearize,
    }


def _time(fn, threads: int | None, repeats: int) -> float:
    from threadpoolctl import threadpool_limits

    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        if threads is None:
            fn()
        else:
            # gradflow's own limit (inside the solve) is replaced by this one
            os.environ["GRADFLOW_BLAS_THREADS"] = str(threads)
            with threadpool_limits(limits=threads, user_api="blas"):
                fn()
        best = min(best, time.perf_counter() - start)
    return best


def _fresh(code: str, **env) -> float:
    """The number a script prints last, run in a fresh process."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "EQX_ON_ERROR": "nan", **env}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True
    )
    return float(out.stdout.strip().splitlines()[-1])


def measure(busy: int, repeats: int) -> dict[str, tuple[float, float]]:
    jobs = _jobs()
    for fn in jobs.values():
        fn()  # compile
    cores = os.cpu_count() or 1
    out = {}
    for name, fn in jobs.items():
        out[name] = (_time(fn, cores, repeats), _time(fn, 1, repeats))
    os.environ.pop("GRADFLOW_BLAS_THREADS", None)
    out["largest test fixture (fresh process)"] = (float("nan"), _fresh(FIXTURE))
    out["solve from init_scale 10, XLA on one thread"] = (
        float("nan"),
        _fresh(LARGE, XLA_FLAGS=XLA_ONE_THREAD),
    )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--busy", type=int, default=2, help="busy processes")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--write-docs", action="store_true")
    args = parser.parse_args()
    rows = {}
    load = {}
    rows["none"] = measure(0, args.repeats)
    load["none"] = os.getloadavg()[0]
    spinners = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"])
        for _ in range(args.busy)
    ]
    try:
        time.sleep(2)
        rows["busy"] = measure(args.busy, args.repeats)
        load["busy"] = os.getloadavg()[0]
    finally:
        for p in spinners:
            p.kill()
            p.wait()
    lines = [
        f"| what | no extra load: default threads | one thread | {args.busy} busy "
        "processes: default threads | one thread |",
        "| --- | --- | --- | --- | --- |",
    ]
    for name in rows["none"]:
        (a, b), (c, e) = rows["none"][name], rows["busy"][name]
        cell = lambda x: "-" if x != x else f"{x:.3g} s"  # noqa: E731
        lines.append(f"| {name} | {cell(a)} | {cell(b)} | {cell(c)} | {cell(e)} |")
    lines.append("")
    lines.append(
        f"{os.cpu_count()} cores; 1-minute load average at the end of each part: "
        f"{load['none']:.1f} (no extra load) and {load['busy']:.1f} (with the "
        f"{args.busy} busy processes), other users' work included."
    )
    table = "\n".join(lines)
    print(table)
    if args.write_docs:
        page = ROOT / "docs" / "performance.md"
        import gradflow as gf  # only here: this process measures others

        gf.replace_between_markers(page, BEGIN, END, table)
        print(f"wrote {page}")


if __name__ == "__main__":
    main()
