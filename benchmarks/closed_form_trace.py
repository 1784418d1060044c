"""Where the blocked closed form spends its time, and whether XLA:CPU runs
any of its operations at once: a profiler trace of the jitted gradient and
HVP of `gf.population_loss` (`benchmarks/closed_form.py` measures their
rates).

For each d and width m, `--calls` calls of each are traced with
`jax.profiler` (a Perfetto trace, one event per XLA operation: a fusion, a
YNNPACK fusion, a product). Printed per call: the sum of the operations'
durations, the wall time during which at least one ran, the part of that
during which two or more ran at once, and the operations with the largest
share. The overlap does not depend on the machine's load the way a time
does: operations that XLA starts at once overlap in wall time whether or
not a core is free, so an overlap near zero says that the runtime issued the
operations one after the other (each may still split its own work across
XLA's threads).

`--control` adds the same count for a small program of two independent
chains of products and exponentials (nothing joins them until the end)
against one chain: can XLA:CPU run independent work at once at all?

    PYTHONPATH=. python benchmarks/closed_form_trace.py [--ds 1024 2048] [--ms 16 32]
        [--calls 5] [--control]
"""

import argparse
import gzip
import json
import os
import tempfile
from collections import defaultdict
from pathlib import Path


def _events(fn, *args, calls: int) -> list[dict]:
    """The trace's complete events ('X') of `calls` calls of `fn`."""
    import jax

    for _ in range(2):
        jax.block_until_ready(fn(*args))
    with tempfile.TemporaryDirectory() as out:
        with jax.profiler.trace(out, create_perfetto_trace=True):
            for _ in range(calls):
                jax.block_until_ready(fn(*args))
        trace = next(Path(out).rglob("*.trace.json.gz"))
        events = json.load(gzip.open(trace))["traceEvents"]
    return [e for e in events if e.get("ph") == "X"]


def _is_op(name: str) -> bool:
    return "fusion" in name or name.startswith(("dot", "copy", "transpose"))


def overlap(events: list[dict]) -> dict:
    """Sum of the operations' durations, the wall time with at least one
    running and the time with two or more, in microseconds; the shares of
    the largest operations."""
    ops = [e for e in events if _is_op(e["name"])]
    edges = sorted(
        [(e["ts"], 1) for e in ops] + [(e["ts"] + e["dur"], -1) for e in ops]
    )
    running, last, busy, both = 0, None, 0.0, 0.0
    for t, step in edges:
        if last is not None and running >= 1:
            busy += t - last
            both += (t - last) if running >= 2 else 0.0
        running, last = running + step, t
    per = defaultdict(float)
    for e in ops:
        per[e["name"].split(":")[0]] += e["dur"]
    total = sum(per.values())
    top = sorted(per.items(), key=lambda kv: -kv[1])[:6]
    return {
        "ops_us": total, "busy_us": busy, "overlap_us": both,
        "top": [(name, t / total) for name, t in top],
    }  # fmt: skip


def report(label: str, r: dict, calls: int) -> None:
    top = ", ".join(f"{n} {s:.0%}" for n, s in r["top"])
    print(
        f"{label}: per call {r['ops_us'] / calls / 1e3:.2f} ms in operations, "
        f"{r['busy_us'] / calls / 1e3:.2f} ms with one running, two or more at "
        f"once {r['overlap_us'] / max(r['busy_us'], 1e-9):.1%} of that; "
        f"load {os.getloadavg()[0]:.2f}\n    largest: {top}",
        flush=True,
    )


def closed_form(d: int, m: int, calls: int) -> None:
    import jax

    import gradflow as gf

    chain = gf.chains.random(d, seed=0)
    p = gf.init_params(d, m, 0.3, seed=0)
    v = gf.init_params(d, m, 1.0, seed=1)
    grad = jax.jit(jax.grad(gf.population_loss))
    hvp = jax.jit(
        lambda p, v, c: jax.jvp(
            lambda q: jax.grad(gf.population_loss)(q, c), (p,), (v,)
        )[1]
    )
    for label, fn, args in (("grad", grad, (p, chain)), ("HVP", hvp, (p, v, chain))):
        report(f"d={d} m={m} {label}", overlap(_events(fn, *args, calls=calls)), calls)


def control(calls: int) -> None:
    """One chain of 8 (product, exponential, product) steps on a (128, 16)
    input against two such chains side by side (d = 2,048, m = 16)."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    rng = np.random.default_rng(0)
    K, ET = (jnp.asarray(rng.random(s)) for s in ((16, 2048), (2048, 16)))
    q1, q2 = (jnp.asarray(rng.random((128, 16))) for _ in range(2))

    def step(q):
        s = q @ K
        return (jnp.exp(s - s.max(1, keepdims=True)) @ ET) * 1e-3

    def chain(q):
        for _ in range(8):
            q = step(q)
        return q

    one = jax.jit(lambda a, b: chain(a))
    two = jax.jit(lambda a, b: (chain(a), chain(b)))
    for label, fn in (("control, one chain", one), ("control, two chains", two)):
        report(label, overlap(_events(fn, q1, q2, calls=calls)), calls)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ds", type=int, nargs="+", default=[1024, 2048])
    parser.add_argument("--ms", type=int, nargs="+", default=[16, 32])
    parser.add_argument("--calls", type=int, default=5)
    parser.add_argument("--control", action="store_true")
    args = parser.parse_args()
    for d in args.ds:
        for m in args.ms:
            closed_form(d, m, args.calls)
    if args.control:
        control(args.calls)


if __name__ == "__main__":
    main()
