"""The delta sweep: the transverse unstable rate at the degenerate critical
point of the sticky chain against the escape rate the flow measures.

    PYTHONPATH=. python examples/delta_sweep.py --out docs/figures

1. *Hessian, by continuation.* Integrate sticky(6, 0.5, 0.5, 0.05) (width 8,
   init_scale 1e-3, seed 0) into its post-focus plateau (L ~ 1.3665), refine
   the critical point, then follow it in delta (0 to 0.1, refining from the
   previous point) and take the top eigenvalue of -Hessian at each delta.
2. *Measured.* For a few delta, a full trajectory from the same random start;
   its post-focus plateau is found and refined, and the escape rate is the
   slope of log|grad L| on the rising flank (`gradflow.theory.flank_rate`).
3. *delta = 0.* Two starts: the random one, and the same one made exactly
   symmetric in the rare tokens (W0 columns 1..d-1 and W1 rows 1..d-1 replaced
   by their mean), an invariant subspace of the flow at delta = 0.

Writes delta_sweep.png/.pdf and delta_sweep.json into --out.
"""

import argparse
import json
import time
from pathlib import Path

import jax.numpy as jnp
import matplotlib


matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

import gradflow as gf  # noqa: E402
from gradflow import theory  # noqa: E402


D, TOP, RHO, WIDTH, SCALE, SEED = 6, 0.5, 0.5, 8, 1e-3, 0
SMALL = 0.05  # the small-delta range of the linear fit (see docs/theory.md)


def post_focus_point(traj):
    """The first refined saddle below the unigram plateau (the post-focus one)."""
    H = float(traj.chain.unigram_entropy)
    for cp in theory.critical_points(traj):
        if cp.converged and cp.loss < H - 1e-3:
            return cp
    return None


def linear_fit(x, y):
    slope, intercept = np.polyfit(x, y, 1)
    resid = y - (slope * x + intercept)
    r2 = 1 - np.sum(resid**2) / np.sum((y - y.mean()) ** 2)
    return float(slope), float(intercept), float(r2)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="docs/figures")
    parser.add_argument("--measured", default="0.01,0.02,0.03,0.04,0.05,0.06,0.08,0.1")
    parser.add_argument("--t1-zero", type=float, default=20000.0)
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    result = {}

    # 1. continuation of the degenerate critical point in delta
    chain = gf.chains.sticky(D, TOP, RHO, 0.05)
    traj = gf.integrate(chain, SCALE, width=WIDTH, t1=1200.0, seed=SEED, progress=False)
    cp = post_focus_point(traj)
    assert cp is not None, "no post-focus plateau before t = 1200"
    print(
        f"delta = 0.05: post-focus critical point L = {cp.loss:.8f} at t ~ {cp.t:.4g}"
    )
    grid = np.round(np.linspace(0.0, 0.1, 21), 6)
    rates = {}
    for direction in (grid[grid >= 0.05], grid[grid <= 0.05][::-1]):
        point = cp.params
        for delta in direction:
            ch = gf.chains.sticky(D, TOP, RHO, float(delta))
            point, ok = theory.refine_critical_point(ch, point)
            lin = gf.linearize(ch, point)
            mode = lin.modes[0]
            rare = np.asarray(mode.W0[:, 1:])
            asym = float(
                np.sum((rare - rare.mean(axis=1, keepdims=True)) ** 2)
                / max(np.sum(np.asarray(mode.W0) ** 2), 1e-300)
            )
            rates[float(delta)] = {
                "rate": lin.unstable_rate,
                "loss": lin.loss,
                "grad_norm": lin.grad_norm,
                "converged": ok,
                "num_unstable": lin.num_unstable,
                "second": float(lin.eigenvalues[1]),
                "block_weights": lin.block_weights[0].round(4).tolist(),
                "W0_rare_asymmetry": asym,
            }
            print(
                f"  delta = {delta:.3f}: L* = {lin.loss:.8f} |grad| = "
                f"{lin.grad_norm:.1e} rate = {lin.unstable_rate:.6g} "
                f"({lin.num_unstable} unstable), top mode blocks "
                f"{lin.block_weights[0].round(3)}, W0 rare-asymmetric share {asym:.3f}"
            )
    deltas = np.array(sorted(rates))
    hess = np.array([rates[x]["rate"] for x in deltas])
    pos = deltas > 0
    result["hessian"] = {
        "delta": deltas.tolist(),
        "rate": hess.tolist(),
        "points": rates,
    }
    small = pos & (deltas <= SMALL)
    keys = ("slope", "intercept", "r2")
    result["hessian_fit"] = dict(
        zip(keys, linear_fit(deltas[small], hess[small]), strict=True)
    )
    result["hessian_fit_all"] = dict(
        zip(keys, linear_fit(deltas[pos], hess[pos]), strict=True)
    )
    print(f"Hessian fit (0 < delta <= {SMALL}):", result["hessian_fit"])
    print("Hessian fit (0 < delta <= 0.1):", result["hessian_fit_all"])

    # 2. measured escape rates from full trajectories
    measured = []
    for delta in [float(x) for x in args.measured.split(",")]:
        ch = gf.chains.sticky(D, TOP, RHO, delta)
        lam = float(np.interp(delta, deltas, hess))
        t1 = float(min(20000.0, 1500.0 + 6.0 / max(lam, 1e-4)))
        # a dense save grid past the focus, so short flanks (large delta) get
        # enough saves for the fit
        ts = np.union1d(gf.default_save_times(t1), np.linspace(300.0, t1, 1500))
        tr = gf.integrate(
            ch, SCALE, width=WIDTH, t1=t1, ts=ts, seed=SEED, progress=False
        )
        c = post_focus_point(tr)
        if c is None:
            print(f"  delta = {delta}: no post-focus plateau found")
            continue
        fr = theory.flank_rate(tr, c.index)
        measured.append(
            {
                "delta": delta,
                "t1": t1,
                "rate_measured": fr["rate"],
                "fit_window": [fr["t0"], fr["t1"]],
                "fit_saves": fr["n"],
                "rate_refined_point": c.linearization.unstable_rate,
                "loss": c.loss,
                "t_star": c.t,
            }
        )
        print(f"  measured delta = {delta}: {measured[-1]}")
    result["measured"] = measured
    md = np.array([r["delta"] for r in measured])
    mr = np.array([r["rate_measured"] for r in measured])
    good = np.isfinite(mr) & (md <= SMALL)
    if good.sum() >= 3:
        result["measured_fit"] = dict(
            zip(keys, linear_fit(md[good], mr[good]), strict=True)
        )
        print("measured fit:", result["measured_fit"])

    # 3. delta = 0: random start against an exactly symmetric start
    ch0 = gf.chains.sticky(D, TOP, RHO, 0.0)
    p0 = gf.init_params(D, WIDTH, SCALE, SEED)
    W0 = p0.W0.at[:, 1:].set(jnp.mean(p0.W0[:, 1:], axis=1, keepdims=True))
    W1 = p0.W1.at[1:, :].set(jnp.mean(p0.W1[1:, :], axis=0, keepdims=True))
    sym = gf.Params(W0, W1, p0.WQ, p0.WK)
    zero = {}
    for name, kwargs in (
        ("random", {"init_scale": SCALE}),
        ("symmetric", {"params": sym}),
    ):
        tr = gf.integrate(
            ch0, width=WIDTH, t1=args.t1_zero, seed=SEED, progress=False, **kwargs
        )
        s = np.linalg.svd(np.asarray(tr.params.W0), compute_uv=False)
        zero[name] = {
            "ts": tr.ts.tolist(),
            "loss": tr.loss.tolist(),
            "sv2": s[:, 1].tolist(),
            "final_loss": float(tr.loss[-1]),
            "final_sv": s[-1].tolist(),
        }
        print(
            f"  delta = 0, {name} start: final loss {tr.loss[-1]:.8f}, "
            f"s(W0) = {np.round(s[-1], 4)}"
        )
    result["delta_zero"] = zero
    result["wall_time"] = time.perf_counter() - start

    # figure
    fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(10, 4))
    ax0.plot(
        deltas,
        hess,
        "o-",
        ms=4,
        color="C0",
        label=r"Hessian: top eigenvalue of $-\nabla^2 L$",
    )
    fit = result["hessian_fit"]
    xs = np.linspace(0, SMALL, 20)
    ax0.plot(
        xs,
        fit["slope"] * xs + fit["intercept"],
        "--",
        color="k",
        lw=1,
        label=f"Hessian fit $\\delta \\leq {SMALL}$: slope {fit['slope']:.4g}, "
        f"$R^2$ = {fit['r2']:.4f}",
    )
    if measured:
        ax0.plot(
            md,
            mr,
            "s",
            ms=7,
            mfc="none",
            color="C3",
            label=r"measured: slope of $\log|\nabla L|$ (full runs)",
        )
    if "measured_fit" in result:
        mf = result["measured_fit"]
        ax0.plot(
            xs,
            mf["slope"] * xs + mf["intercept"],
            ":",
            color="C3",
            lw=1,
            label=f"fit: slope {mf['slope']:.4g}, $R^2$ = {mf['r2']:.4f}",
        )
    ax0.set_xlabel(r"asymmetry $\delta$ of the rare tokens")
    ax0.set_ylabel("transverse unstable rate")
    ax0.set_title(
        "post-focus critical point of sticky(6, 0.5, 0.5, $\\delta$)", fontsize=9
    )
    ax0.legend(fontsize=7)
    for name, color in (("random", "C1"), ("symmetric", "C2")):
        z = zero[name]
        t = np.asarray(z["ts"])
        ax1.loglog(t[1:], np.asarray(z["sv2"])[1:], color=color, label=f"{name} start")
    ax1.set_xlabel("gradient-flow time $t$")
    ax1.set_ylabel(r"second singular value of $W_0$")
    ax1.set_title(
        rf"$\delta = 0$: sticky(6, 0.5, 0.5, 0), seed {SEED}, init_scale {SCALE:g}",
        fontsize=9,
    )
    ax1.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "delta_sweep.png", dpi=100)
    fig.savefig(out / "delta_sweep.pdf")
    with open(out / "delta_sweep.json", "w") as f:
        json.dump(result, f, indent=1)
    print(f"wrote {out / 'delta_sweep.png'} ({result['wall_time']:.0f} s)")


if __name__ == "__main__":
    main()
