"""The save buffer of bucketed length (`gradflow/_loop/loop.py`:
`save_buffer_size`, the smallest of 16, 24, 32, 48, 64, 96, ... that holds the
save times, and at least 1,024 for a small model).

1. Compilation, in one process: a solve with 301 save times, then one with
   300 and one with 801 (all three in the buffer of 1,024 of a small
   model; 384, 384 and 1,024 before its floor), each on sticky(6, .5, .5,
   .05), width 8; prints the seconds of XLA compilation each call triggered
   (`jax.monitoring` duration events).
2. Bit-identity against another checkout: `--dump FILE` writes the saved
   losses, parameters, diagnostics, stages, events and step counts of seven
   solves (the default run; 300 and 301 saves; a bare run; a run that runs out
   of steps; a 4-member sweep) to FILE; run it with each checkout on
   `PYTHONPATH` and compare the two files with `--compare A B`.

    python benchmarks/save_buffer.py
    PYTHONPATH=OLD python benchmarks/save_buffer.py --dump old.pkl
    PYTHONPATH=.   python benchmarks/save_buffer.py --dump new.pkl
    python benchmarks/save_buffer.py --compare old.pkl new.pkl
"""

import argparse
import collections
import pickle
import sys

import numpy as np


def _compile_seconds():
    import jax

    acc = collections.Counter()

    def listen(name, duration, **kwargs):
        if name == "/jax/core/compile/backend_compile_duration":
            acc["seconds"] += duration
            acc["count"] += 1

    jax.monitoring.register_event_duration_secs_listener(listen)
    return acc


def compilation() -> None:
    acc = _compile_seconds()
    import gradflow as gf

    chain = gf.chains.sticky(6, 0.5, 0.5, 0.05)
    for n in (301, 300, 801):
        acc.clear()
        ts = np.concatenate([[0.0], np.geomspace(1.0, 200.0, n - 1)])
        gf.integrate(
            chain,
            1e-3,
            width=8,
            t1=200.0,
            saveat=gf.SaveAt(ts),
            run=gf.Run(progress=False),
        )
        print(
            f"{n:4d} saves: "
            f"{acc['count']:3d} compilations, {acc['seconds']:6.2f} s of XLA time"
        )


def _record(traj) -> dict:
    import jax

    return dict(
        ts=np.asarray(traj.ts),
        loss=np.asarray(traj.loss),
        params=[np.asarray(x) for x in jax.tree.leaves(traj.params)],
        extras={k: np.asarray(v) for k, v in traj.extras.items()},
        stages=[repr(s) for s in traj.stages],
        events=[(e.name, e.t, e.loss) for e in traj.events],
        steps=traj.stats.num_steps,
        ok=traj.ok,
        message=traj.message,
    )


def dump(path: str) -> None:
    import gradflow as gf

    sticky = gf.chains.sticky(6, 0.5, 0.5, 0.05)
    geo = lambda n: np.concatenate([[0.0], np.geomspace(1.0, 200.0, n - 1)])  # noqa: E731
    out = {
        "default": gf.integrate(
            sticky, 1e-3, width=8, t1=5000, run=gf.Run(progress=False)
        ),
        "301 saves": gf.integrate(
            sticky,
            1e-3,
            width=8,
            t1=200,
            saveat=gf.SaveAt(geo(301)),
            run=gf.Run(progress=False),
        ),
        "300 saves": gf.integrate(
            sticky,
            1e-3,
            width=8,
            t1=200,
            saveat=gf.SaveAt(geo(300)),
            run=gf.Run(progress=False),
        ),
        "bare": gf.integrate(
            gf.chains.random(5, seed=1),
            1e-3,
            width=8,
            t1=3000,
            saveat=gf.SaveAt(stages=False),
            run=gf.Run(progress=False),
        ),  # fmt: skip
        "out of steps": gf.integrate(
            gf.chains.zipf(5, 1.0),
            1e-3,
            width=4,
            t1=3000,
            solver=gf.Solver(max_steps=200),
            run=gf.Run(progress=False),
        ),  # fmt: skip
    }
    out = {k: _record(v) for k, v in out.items()}
    sw = gf.sweep(
        [gf.chains.sticky(4, 0.5, 0.5, x) for x in (0.0, 0.1)],
        init_scale=1e-3,
        seeds=[0, 1],
        width=4,
        t1=400.0,
        run=gf.Run(progress=False),
    )
    out["sweep loss"] = np.asarray(sw.loss)
    for i in range(len(sw)):
        out[f"sweep member {i}"] = _record(sw[i])
    with open(path, "wb") as f:
        pickle.dump(out, f)


def _equal(a, b) -> bool:
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and a and isinstance(a[0], np.ndarray):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, np.ndarray):
        return a.dtype == b.dtype and np.array_equal(a, b, equal_nan=True)
    return a == b


def compare(path_a: str, path_b: str) -> int:
    with open(path_a, "rb") as f:
        a = pickle.load(f)
    with open(path_b, "rb") as f:
        b = pickle.load(f)
    bad = 0
    for key in a:
        same = key in b and _equal(a[key], b[key])
        bad += not same
        print(f"{key:16s} {'bit-identical' if same else 'DIFFERENT'}")
    return 1 if bad else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dump", metavar="FILE")
    ap.add_argument("--compare", nargs=2, metavar=("A", "B"))
    args = ap.parse_args(argv)
    if args.compare:
        return compare(*args.compare)
    if args.dump:
        dump(args.dump)
        return 0
    compilation()
    return 0


if __name__ == "__main__":
    sys.exit(main())
