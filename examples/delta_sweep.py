"""The delta sweep: the transverse unstable rate at the degenerate critical
point of the sticky chain against the escape rate the flow measures.

    PYTHONPATH=. python examples/delta_sweep.py --out docs/figures

1. *Hessian, by continuation with mode tracking.* Integrate
   sticky(6, 0.5, 0.5, 0.05) (width 8, init_scale 1e-3, seed 0) into its
   post-focus plateau (L ~ 1.3665), refine the critical point, then follow it
   in delta on a uniform grid of step 0.001 up to 0.1 and down to 0, refining
   from the previous point (`gradflow.theory.continue_critical_point`). The
   top unstable eigenspace is tracked by subspace overlap between neighbours,
   so a crossing of two modes would show as the tracked rate leaving the top
   one. A second continuation from delta = 0.1 back down checks for
   hysteresis (a fold would give two branches).
2. *Measured.* For a set of delta, a full trajectory from the same random
   start (all deltas in one batched `gf.sweep`); its post-focus plateau is found and refined, and the escape rate is
   the slope of log|grad L| on the rising flank (`gradflow.theory.flank_rate`).
   Each refined point is compared with the continued branch (same loss?) and
   with the trajectory (distance from the closest save, and which eigenmode of
   the refined point carries that displacement).
3. *delta = 0.* Two starts: the random one, and the same one made exactly
   symmetric in the rare tokens (W0 columns 1..d-1 and W1 rows 1..d-1 replaced
   by their mean), an invariant subspace of the flow at delta = 0 (both
   starts in one `gf.sweep` with `params=`).

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
STEP = 0.001  # continuation step in delta


def post_focus_point(traj):
    """The first refined saddle below the unigram plateau (the post-focus one)."""
    H = float(traj.problem.chain.unigram_entropy)
    for cp in theory.critical_points(traj):
        if cp.converged and cp.loss < H - 1e-3:
            return cp
    return None


def linear_fit(x, y):
    slope, intercept = np.polyfit(x, y, 1)
    resid = y - (slope * x + intercept)
    r2 = 1 - np.sum(resid**2) / np.sum((y - y.mean()) ** 2)
    return float(slope), float(intercept), float(r2)


def fit_dict(x, y):
    keys = ("slope", "intercept", "r2")
    out = dict(zip(keys, linear_fit(x, y), strict=True))
    out["range"] = [float(x.min()), float(x.max())]
    out["n"] = int(x.size)
    return out


def continuation(deltas, start):
    chains = [gf.chains.sticky(D, TOP, RHO, float(x)) for x in deltas]
    recs = theory.continue_critical_point(chains, start)
    for rec, ch in zip(recs, chains, strict=True):
        A = np.asarray(gf.attention(rec["params"], ch))
        rec["rarest_self_attention"] = float(A[-1, -1])
    return recs


def hessian_branch(result: dict) -> dict:
    """1. The post-focus critical point of delta = 0.05, continued in delta up
    to 0.1 and down to 0 (and back from 0.1: hysteresis), into `result`;
    returns the branch's columns by name (with `delta`, `speed`, `delta_c`
    and `hyst_loss` for the figure)."""
    chain = gf.chains.sticky(D, TOP, RHO, 0.05)
    traj = gf.integrate(
        chain, SCALE, width=WIDTH, t1=1200.0, seed=SEED, run=gf.Run(progress=False)
    )
    cp = post_focus_point(traj)
    assert cp is not None, "no post-focus plateau before t = 1200"
    print(
        f"delta = 0.05: post-focus critical point L = {cp.loss:.8f} at t ~ {cp.t:.4g}"
    )
    up = np.round(np.arange(50, 101) * STEP, 6)
    down = np.round(np.arange(50, -1, -1) * STEP, 6)
    branch = {}
    for grid in (up, down):
        for delta, rec in zip(grid, continuation(grid, cp.params), strict=True):
            branch[float(delta)] = rec
    back = continuation(up[::-1], branch[float(up[-1])]["params"])
    hyst_loss = max(
        abs(r["loss"] - branch[float(x)]["loss"]) for x, r in zip(up[::-1], back)
    )
    hyst_rate = max(
        abs(r["top_rate"] - branch[float(x)]["top_rate"])
        / max(branch[float(x)]["top_rate"], 1e-300)
        for x, r in zip(up[::-1], back)
    )
    deltas = np.array(sorted(branch))
    recs = [branch[float(x)] for x in deltas]
    col = {
        k: np.array([r[k] for r in recs])
        for k in (
            "top_rate", "tracked_rate", "loss", "grad_norm", "step", "overlap",
            "multiplicity", "soft_rate", "soft_weight", "second_rate",
            "rarest_self_attention",
        )
    }  # fmt: skip
    # the step between neighbours at deltas[i] and the one before it (in the
    # direction of each continuation); per unit delta
    speed = col["step"] / STEP
    # at delta = 0 the transverse mode is flat and merges with the zero
    # eigenvalues; the question "does the tracked mode stay on top" is for
    # delta > 0
    tracked_is_top = all(r["tracked_is_top"] for x, r in zip(deltas, recs) if x > 0)
    min_overlap = min(r["overlap"] for x, r in zip(deltas, recs) if x > 0)
    i_c = int(np.argmax(np.where(deltas > 0.05, speed, 0)))
    delta_c = float(deltas[i_c] - STEP / 2)  # midpoint of the fastest step
    for x, r in zip(deltas, recs, strict=True):
        if round(x / STEP) % 5 == 0 or 0.066 <= x <= 0.078:
            print(
                f"  delta = {x:.3f}: L* = {r['loss']:.10f} |grad| = "
                f"{r['grad_norm']:.1e} top = {r['top_rate']:.6g} tracked = "
                f"{r['tracked_rate']:.6g} (x{r['multiplicity']}, overlap "
                f"{r['overlap']:.4f}) |dx/ddelta| = {r['step'] / STEP:.3g} soft "
                f"{r['soft_rate']:.3g} A[5,5] = {r['rarest_self_attention']:.3f}"
            )
    print(
        f"tracked == top for all delta > 0: {tracked_is_top}; min overlap (delta > 0) "
        f"{min_overlap:.4f}; all converged: "
        f"{all(r['converged'] for r in recs)}; hysteresis: max |dL| {hyst_loss:.2e}, "
        f"max rel d(rate) {hyst_rate:.2e}; fastest move at delta ~ {delta_c:.4f} "
        f"(|dx/ddelta| = {speed[i_c]:.4g}, soft rate {col['soft_rate'][i_c]:.3g})"
    )
    rate = col["tracked_rate"]
    pos = deltas > 0
    result["hessian"] = {
        "delta": deltas.tolist(),
        **{k: v.tolist() for k, v in col.items()},
        "tracked_is_top_for_positive_delta": tracked_is_top,
        "min_overlap_for_positive_delta": min_overlap,
        "all_converged": all(r["converged"] for r in recs),
        "hysteresis_max_loss_diff": hyst_loss,
        "hysteresis_max_rel_rate_diff": hyst_rate,
        "delta_c": delta_c,
        "max_speed": float(speed[i_c]),
        "soft_rate_at_delta_c": float(col["soft_rate"][i_c]),
    }
    small = pos & (deltas <= SMALL + 1e-12)
    result["hessian_fit"] = fit_dict(deltas[small], rate[small])
    result["hessian_fit_all"] = fit_dict(deltas[pos], rate[pos])
    # the largest delta_max with R^2 >= 0.98 on (0, delta_max] (a description
    # of where the linear law holds, not a choice of range)
    ok = [x for x in deltas[pos][2:] if linear_fit(deltas[pos & (deltas <= x)],
          rate[pos & (deltas <= x)])[2] >= 0.98]  # fmt: skip
    result["linear_up_to"] = float(max(ok)) if ok else float("nan")
    print(f"Hessian fit (0 < delta <= {SMALL}):", result["hessian_fit"])
    print("Hessian fit, tracked branch (0 < delta <= 0.1):", result["hessian_fit_all"])
    print("R^2 >= 0.98 on (0, delta_max] up to delta_max =", result["linear_up_to"])

    return dict(col, delta=deltas, speed=speed, delta_c=delta_c, hyst_loss=hyst_loss)


def measured_rates(result: dict, branch: dict, measured_arg: str) -> list[dict]:
    """2. The escape rate measured on the flank of full trajectories, one
    batched `gf.sweep` over the measured deltas, against the branch."""
    deltas, rate, col = branch["delta"], branch["tracked_rate"], branch
    # 2. measured escape rates from full trajectories: one batched gf.sweep
    # over the measured deltas, from the same random start. Members share t1
    # and the save times: t1 long enough for the slowest flank, saves dense
    # (spacing ~1.1) up to t = 2000, where the short flanks of large delta lie.
    measured_deltas = [float(x) for x in measured_arg.split(",")]
    lams = [float(np.interp(x, deltas, rate)) for x in measured_deltas]
    t1 = float(max(min(20000.0, 1500.0 + 6.0 / max(lam, 1e-4)) for lam in lams))
    ts = np.union1d(
        gf.default_save_times(t1),
        np.union1d(np.linspace(300.0, 2000.0, 1500), np.linspace(2000.0, t1, 1500)),
    )
    sweep_start = time.perf_counter()
    sw = gf.sweep(
        [gf.chains.sticky(D, TOP, RHO, x) for x in measured_deltas],
        init_scale=SCALE, seeds=SEED, width=WIDTH, t1=t1, saveat=gf.SaveAt(ts, stages=False), labels={"delta": measured_deltas}, run=gf.Run(progress=False),
    )  # fmt: skip
    result["measured_sweep"] = {
        "members": len(sw), "t1": t1, "num_saves": int(ts.size),
        "wall_time": time.perf_counter() - sweep_start,
    }  # fmt: skip
    print(
        f"measured sweep: {len(sw)} members to t1 = {t1:.0f} in "
        f"{result['measured_sweep']['wall_time']:.1f} s"
    )
    measured = []
    for delta, lam, tr in zip(measured_deltas, lams, sw, strict=True):
        ch = tr.problem.chain
        c = post_focus_point(tr)
        if c is None:
            print(f"  delta = {delta}: no post-focus plateau found")
            continue
        fr = theory.flank_rate(tr, c.index)
        # which eigenmode of the refined point carries the displacement from
        # the trajectory's closest save to the point
        lin = c.linearization
        V = np.stack(
            [
                np.asarray(theory.flatten_params(lin.modes[i]))
                for i in range(len(lin.eigenvalues))
            ]
        )
        dx = np.asarray(theory.flatten_params(tr.params[c.index])) - np.asarray(
            theory.flatten_params(c.params)
        )
        w = (V @ dx) ** 2 / max(float(dx @ dx), 1e-300)
        j = int(np.argmax(w))
        branch_loss = float(np.interp(delta, deltas, col["loss"]))
        measured.append(
            {
                "delta": delta,
                "t1": t1,
                "rate_measured": fr["rate"],
                "fit_window": [fr["t0"], fr["t1"]],
                "fit_saves": fr["n"],
                "rate_refined_point": lin.unstable_rate,
                "rate_branch": lam,
                "loss": c.loss,
                "loss_minus_branch": c.loss - branch_loss,
                "t_star": c.t,
                "grad_min": float(tr.grad_norm[c.index]),
                "loss_gap_at_closest_save": float(tr.loss[c.index]) - c.loss,
                "distance": c.distance,
                "rarest_self_attention_point": float(
                    np.asarray(gf.attention(c.params, ch))[-1, -1]
                ),
                "rarest_self_attention_closest_save": float(
                    np.asarray(gf.attention(tr.params[c.index], ch))[-1, -1]
                ),
                "displacement_mode_rate": float(lin.eigenvalues[j]),
                "displacement_mode_weight": float(w[j]),
            }
        )
        m = measured[-1]
        print(
            f"  measured delta = {delta}: flank {m['rate_measured']:.5g} vs refined "
            f"{m['rate_refined_point']:.5g} (branch {lam:.5g}); L* - branch "
            f"{m['loss_minus_branch']:.1e}; closest save {c.distance:.3g} away, "
            f"{m['displacement_mode_weight']:.3f} of it on the mode with rate "
            f"{m['displacement_mode_rate']:.3g}"
        )
    result["measured"] = measured
    md = np.array([r["delta"] for r in measured])
    mr = np.array([r["rate_measured"] for r in measured])
    good = np.isfinite(mr) & (md <= SMALL + 1e-12)
    if good.sum() >= 3:
        result["measured_fit"] = fit_dict(md[good], mr[good])
        print("measured fit:", result["measured_fit"])
    good_all = np.isfinite(mr)
    if good_all.sum() >= 3:
        result["measured_fit_all"] = fit_dict(md[good_all], mr[good_all])
        print("measured fit, all:", result["measured_fit_all"])

    return measured


def delta_zero(result: dict, t1: float) -> dict:
    """3. delta = 0: the random start against the exactly symmetric one."""
    ch0 = gf.chains.sticky(D, TOP, RHO, 0.0)
    p0 = gf.init_params(D, WIDTH, SCALE, SEED)
    W0 = p0.W0.at[:, 1:].set(jnp.mean(p0.W0[:, 1:], axis=1, keepdims=True))
    W1 = p0.W1.at[1:, :].set(jnp.mean(p0.W1[1:, :], axis=0, keepdims=True))
    sym = gf.Params(W0, W1, p0.WQ, p0.WK)
    zero = {}
    starts = gf.Params(*(jnp.stack([getattr(p0, n), getattr(sym, n)])
                         for n in ("W0", "W1", "WQ", "WK")))  # fmt: skip
    sw0 = gf.sweep(ch0, params=starts, width=WIDTH, t1=t1, run=gf.Run(progress=False))
    for name, tr in zip(("random", "symmetric"), sw0, strict=True):
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

    return zero


def figure(out: Path, result: dict, branch: dict, measured: list, zero: dict):
    """The three panels: the rates against delta, the branch's soft
    direction, delta = 0."""
    deltas, rate, col = branch["delta"], branch["tracked_rate"], branch
    speed, delta_c, hyst_loss = branch["speed"], branch["delta_c"], branch["hyst_loss"]
    pos = deltas > 0
    md = np.array([r["delta"] for r in measured])
    mr = np.array([r["rate_measured"] for r in measured])
    fig, (ax0, ax2, ax1) = plt.subplots(1, 3, figsize=(15, 4.2))
    ax0.plot(
        deltas,
        rate,
        "-",
        lw=1.5,
        color="C0",
        label=r"Hessian: tracked top eigenvalue of $-\nabla^2 L$ (7-fold)",
    )
    for fit, style, color, what in (
        (result["hessian_fit"], "--", "k", f"$\\delta \\leq {SMALL}$"),
        (result["hessian_fit_all"], "-.", "0.5", "$\\delta \\leq 0.1$"),
    ):
        xs = np.linspace(0, fit["range"][1], 20)
        ax0.plot(
            xs,
            fit["slope"] * xs + fit["intercept"],
            style,
            color=color,
            lw=1,
            label=f"fit {what}: slope {fit['slope']:.4g}, $R^2$ = {fit['r2']:.4f}",
        )
    if measured:
        near = np.array([r["distance"] < 0.05 for r in measured])
        ax0.plot(
            md[near],
            mr[near],
            "s",
            ms=7,
            mfc="none",
            color="C3",
            label=r"measured (flow passes < 0.05 from the point)",
        )
        ax0.plot(
            md[~near],
            mr[~near],
            "x",
            ms=8,
            color="C3",
            label=r"measured (flow stays $\geq$ 0.05 away)",
        )
    ax0.axvline(delta_c, color="0.7", lw=0.8, ls=":")
    ax0.set_xlabel(r"asymmetry $\delta$ of the rare tokens")
    ax0.set_ylabel("transverse unstable rate")
    ax0.set_title(
        "post-focus critical point of sticky(6, 0.5, 0.5, $\\delta$)", fontsize=9
    )
    ax0.legend(fontsize=7)
    # the branch's soft stable direction and how fast the point moves
    # each continuation's first point has no step: left out
    sl = col["step"] > 0
    ax2.semilogy(
        deltas[sl], -col["soft_rate"][sl], color="C4",
        label=r"$|\mu|$: stable eigenvalue carrying the continuation step",
    )  # fmt: skip
    ax2.semilogy(
        deltas[sl], speed[sl] * 1e-4, color="C2",
        label=r"$|dx^*/d\delta| \times 10^{-4}$",
    )  # fmt: skip
    ax2.semilogy(
        deltas[pos], rate[pos], color="C0", lw=1, label="tracked unstable rate"
    )
    ax2.axvline(delta_c, color="0.7", lw=0.8, ls=":")
    ax3 = ax2.twinx()
    ax3.plot(deltas, col["rarest_self_attention"], color="C1", lw=1)
    ax3.set_ylabel("rarest token's self-attention $A_{55}$ at the point", color="C1")
    ax2.set_xlabel(r"$\delta$")
    ax2.set_title(
        f"the branch softens at $\\delta_c \\approx$ {delta_c:.4f}; back-continuation "
        f"max $|\\Delta L|$ = {hyst_loss:.0e}",
        fontsize=9,
    )
    ax2.legend(fontsize=7, loc="lower right")
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


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="docs/figures")
    parser.add_argument(
        "--measured",
        default="0.01,0.02,0.03,0.04,0.05,0.06,0.065,0.07,0.075,0.08,0.09,0.1",
    )
    parser.add_argument("--t1-zero", type=float, default=20000.0)
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    result = {}

    branch = hessian_branch(result)
    measured = measured_rates(result, branch, args.measured)
    zero = delta_zero(result, args.t1_zero)
    result["wall_time"] = time.perf_counter() - start
    figure(out, result, branch, measured, zero)
    with open(out / "delta_sweep.json", "w") as f:
        json.dump(result, f, indent=1)
    print(f"wrote {out / 'delta_sweep.png'} ({result['wall_time']:.0f} s)")


if __name__ == "__main__":
    main()
