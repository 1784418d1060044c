"""Does the stiff default solver keep its advantage on a model variant?

The full combination (2 heads, 2 layers, value, residual, RMS norm) on the
default sticky scenario (`gf.chains.sticky(6, 0.5, 0.5, 0.05)`, width 8,
init_scale 1e-3, seed 0), solved with the default solver at its default
tolerances and with Diffrax `Tsit5` at `rtol = 1e-7`, side by side: steps,
rejected steps, gradient evaluations, Hessian-vector products, wall time (a
warm-up solve compiles first), and the difference of the two loss curves.

    python benchmarks/variants_solvers.py [--t1 5000] [--model heads=2,...]
"""

import os


os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import json  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

import gradflow as gf  # noqa: E402


FULL = gf.Model(heads=2, layers=2, value=True, residual=True, norm="rms")


def solve(chain, model, t1, solver, rtol, max_steps):
    kw = dict(
        width=8,
        seed=0,
        model=model,
        stages=False,
        progress=False,
        solver=solver,
        rtol=rtol,
        max_steps=max_steps,
    )
    gf.integrate(chain, 1e-3, t1=t1 * 1e-3, **kw)  # compile (same shapes)
    start = time.perf_counter()
    traj = gf.integrate(chain, 1e-3, t1=t1, **kw)
    return traj, time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--t1", type=float, default=5000.0)
    parser.add_argument("--max-steps", type=int, default=400_000)
    parser.add_argument("--json", default=None, help="also write the rows here")
    args = parser.parse_args()
    chain = gf.chains.sticky(6, 0.5, 0.5, 0.05)
    rows = {}
    for name, solver, rtol in (
        ("default (" + gf.DEFAULT_SOLVER + ")", None, None),
        ("tsit5, rtol 1e-7", "tsit5", 1e-7),
    ):
        traj, wall = solve(chain, FULL, args.t1, solver, rtol, args.max_steps)
        rows[name] = dict(
            ok=bool(traj.ok),
            message=traj.message,
            t_reached=traj.t_final,
            rtol=traj.settings["rtol"],
            atol=traj.settings["atol"],
            steps=traj.stats["num_steps"],
            rejected=traj.stats["num_rejected_steps"],
            grad_evals=traj.stats["num_grad_evals"],
            hvps=traj.stats["num_hvps"],
            wall_s=wall,
            final_loss=float(traj.loss[-1]),
            _traj=traj,
        )
        print(name, {k: v for k, v in rows[name].items() if k != "_traj"}, flush=True)
    a, b = (r["_traj"] for r in rows.values())
    n = min(len(a), len(b))
    diff = np.abs(np.asarray(a.loss[:n]) - np.asarray(b.loss[:n]))
    print(
        f"\nmodel {FULL.label}, t1 = {args.t1:g}, floor H(cond) = "
        f"{float(chain.conditional_entropy):.6f}"
    )
    print(
        "| solver | ok | steps | rejected | grad evals | HVPs | wall s | final loss |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for name, r in rows.items():
        print(
            f"| {name} | {r['ok']} | {r['steps']} | {r['rejected']} | "
            f"{r['grad_evals']} | {r['hvps']} | {r['wall_s']:.1f} | "
            f"{r['final_loss']:.10f} |"
        )
    print(f"max |loss difference| over {n} common save times: {diff.max():.2e}")
    if args.json:
        out = {
            k: {kk: vv for kk, vv in r.items() if kk != "_traj"}
            for k, r in rows.items()
        }
        out["max_loss_difference"] = float(diff.max())
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
