"""SGD against the population flow, on one time axis and one metric.

Two parts (run both by default):

- `tracking`: on chains not used anywhere else in gradflow (random seeds 101,
  202, 303, a Zipf and a sticky chain with new parameters), SGD with context 256,
  batch 512, lr 0.2 starts from the flow's initial point; we report the
  relative error of the crossing times of the first drop and the mean
  |population-loss gap| after it.
- `convergence`: on the paper's chain, the gap to the flow as context, batch
  size, lr and the dataset size N vary, with fitted log-log slopes; and the
  bias of the finite-context loss itself, E[finite loss] - L, against context
  at fixed parameters.

    python examples/sgd_vs_flow.py --part tracking --out out/sgd
    python examples/sgd_vs_flow.py --part convergence --out out/sgd

Writes `<out>/<part>.json` and figures `docs/figures/sgd_*.png|pdf`.
"""

import argparse
import json
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import matplotlib


matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

import gradflow as gf  # noqa: E402


FIGURES = Path(__file__).resolve().parent.parent / "docs" / "figures"
WIDTH, INIT_SCALE = 8, 1e-3


def unseen_chains():
    return {
        "random(6, seed=101)": gf.chains.random(6, seed=101),
        "random(6, seed=202, conc=0.5)": gf.chains.random(
            6, seed=202, concentration=0.5
        ),
        "random(8, seed=303)": gf.chains.random(8, seed=303),
        "zipf(7, 1.2, rho=0.3)": gf.chains.zipf(7, 1.2, rho=0.3),
        "sticky(5, 0.4, 0.6, 0.1)": gf.chains.sticky(5, 0.4, 0.6, 0.1),
    }


def flow_and_sgd(
    chain,
    t1,
    seed=0,
    data_seed=None,
    *,
    context=256,
    batch_size=512,
    lr=0.2,
    num_sequences=None,
):
    """The flow and SGD (`context`, `batch_size`, `lr`, `num_sequences`; online
    when `None`) from the same start, and their comparison."""
    p0 = gf.init_params(chain.d, WIDTH, INIT_SCALE, seed)
    data_seed = seed if data_seed is None else data_seed
    run = gf.train_sgd(
        chain,
        p0,
        t1=t1,
        seed=data_seed,
        sgd=gf.SGD(lr, batch_size, num_sequences=num_sequences),
        run=gf.Run(progress=False),
        context=context,
    )
    traj = gf.integrate(
        chain,
        params=p0,
        t1=float(run.ts[-1]),
        saveat=gf.SaveAt(run.ts),
        run=gf.Run(progress=False),
    )
    return traj, run, gf.compare(traj, run)


def tracking(out: Path, t1: float):
    results = {}
    fig, axes = plt.subplots(1, 5, figsize=(17, 3.4), layout="constrained")
    for ax, (name, chain) in zip(axes, unseen_chains().items(), strict=True):
        start = time.perf_counter()
        traj, run, cmp = flow_and_sgd(chain, t1, context=256, batch_size=512, lr=0.2)
        s = cmp.summary()
        s["sgd_wall_time"] = run.stats.wall_time
        s["total_wall_time"] = time.perf_counter() - start
        results[name] = s
        print(
            f"{name:32s} max rel crossing err {s['max_crossing_rel_error']:.3f}  "
            f"mean|gap| after drop {s['mean_abs_gap_after']:.5f} (saves), "
            f"{s['time_avg_abs_gap_after']:.5f} (time avg)  "
            f"(max {s['max_abs_gap_after']:.4f})  drop end t={s['drop_end']:.1f}",
            flush=True,
        )
        pos = cmp.ts > 0
        ax.plot(cmp.ts[pos], cmp.flow_loss[pos], "k-", lw=2, label="flow")
        ax.plot(
            cmp.ts[pos], cmp.sgd_loss[pos], "C1--", label="SGD (s=256, B=512, lr=0.2)"
        )
        ax.axhline(float(chain.unigram_entropy), color="0.7", ls=":", label="H(pi)")
        ax.set_xscale("log")
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("t = lr x step")
    axes[0].set_ylabel("population loss")
    axes[0].legend(fontsize=7)
    _save(fig, "sgd_tracking")
    (out / "tracking.json").write_text(json.dumps(results, indent=1))
    return results


def diagnose(out: Path, t1: float):
    """sticky(5, 0.4, 0.6, 0.1): SGD leaves the H(pi) plateau early. Is it the
    data noise (other data seeds), or does it shrink with context and batch?"""
    chain = unseen_chains()["sticky(5, 0.4, 0.6, 0.1)"]
    configs = [
        dict(context=256, batch_size=512, lr=0.2, data_seed=1),
        dict(context=256, batch_size=512, lr=0.2, data_seed=2),
        dict(context=1024, batch_size=2048, lr=0.2, data_seed=0),
    ]
    rows = []
    for kw in configs:
        traj, run, cmp = flow_and_sgd(chain, t1, **kw)
        lv = 0.5 * (float(chain.unigram_entropy) + 1.3)  # halfway down the 2nd drop
        row = dict(kw, **{k: v for k, v in cmp.summary().items() if "gap" in k})
        row["second_drop_flow_t"] = gf.theory.loss_crossing(cmp.ts, cmp.flow_loss, lv)
        row["second_drop_sgd_t"] = gf.theory.loss_crossing(cmp.ts, cmp.sgd_loss, lv)
        rows.append(row)
        print(row, flush=True)
    (out / "diagnose.json").write_text(json.dumps(rows, indent=1))


def noise(out: Path, t1: float):
    """Batch and lr sweeps at context 1024, where the finite-context floor of
    the gap is about four times lower than at 256."""
    chain = gf.chains.sticky(6, 0.5, 0.5, 0.05)
    base = dict(context=1024, batch_size=512, lr=0.2)
    results = {}
    for key, values in {
        "batch_size": [32, 128, 512, 2048],
        "lr": [0.8, 0.4, 0.2, 0.1],
    }.items():
        rows = []
        for v in values:
            traj, run, cmp = flow_and_sgd(chain, t1, seed=1, **dict(base, **{key: v}))
            after = cmp.ts >= cmp.drop_end
            rows.append(
                {
                    key: v,
                    "mean_abs_gap_after": cmp.mean_abs_gap_after,
                    "mean_param_distance_after": float(
                        np.mean(cmp.param_distance[after])
                    ),
                }
            )
            print(key, rows[-1], flush=True)
        results[key] = {
            "rows": rows,
            "slope_gap": _fit(values, [r["mean_abs_gap_after"] for r in rows]),
            "slope_param": _fit(values, [r["mean_param_distance_after"] for r in rows]),
        }
        print(key, "slopes", results[key]["slope_gap"], results[key]["slope_param"])
        (out / "noise.json").write_text(json.dumps(results, indent=1))


def _fit(xs, ys):
    xs, ys = np.asarray(xs, float), np.asarray(ys, float)
    ok = np.isfinite(ys) & (ys > 0)
    slope, _ = np.polyfit(np.log(xs[ok]), np.log(ys[ok]), 1)
    return float(slope)


def expected_finite_loss(params, chain, batch):
    """Finite-context loss per sequence with the target averaged out exactly:
    E[-log p(x_{s+1}) | context] = -sum_y P[x_s, y] log p(y | context).
    Same mean as the sampled-target loss, far smaller variance."""
    logits = gf.markov.finite_context_logits(params, batch[:, :-1])  # (b, d)
    logp = jax.nn.log_softmax(logits, axis=-1)
    return -jnp.sum(chain.P[batch[:, -2]] * logp, axis=-1)


def finite_context_bias(chain, params, contexts, num=200_000, seed=0):
    """E[finite-context loss] - population loss at fixed params (Monte Carlo,
    target averaged out); returns (bias, standard error) per context."""
    params = jax.tree.map(jnp.asarray, params)
    # Control variate: the population loss of each query token, g(q), has mean
    # L over q ~ pi (x_s is stationary), so bias = E[f(q, counts) - g(q)].
    Z = gf.markov.population_logits(params, chain)
    g = jax.nn.logsumexp(Z, axis=0) - jnp.sum(chain.P.T * Z, axis=0)
    out = []
    for s in contexts:
        # what train_sgd draws: sequences of s + 1 tokens of the chain
        problem = gf.problems.MarkovAttention(chain, context=s)

        def f(k, problem=problem):
            batch = problem.sample(k, 10_000)
            return expected_finite_loss(params, chain, batch) - g[batch[:, -2]]

        f = jax.jit(f)
        vals = np.concatenate(
            [
                np.asarray(f(jax.random.key(seed * 1000 + i)))
                for i in range(num // 10_000)
            ]
        )
        out.append((float(vals.mean()), float(vals.std() / np.sqrt(vals.size))))
    return out


def convergence(out: Path, t1: float):
    chain = gf.chains.sticky(6, 0.5, 0.5, 0.05)
    base = dict(context=256, batch_size=512, lr=0.2)
    sweeps = {
        "context": [16, 32, 64, 128, 256],
        "batch_size": [32, 128, 512, 2048],
        "lr": [0.8, 0.4, 0.2, 0.1],
        "num_sequences": [512, 2048, 8192, 32768],
    }
    results = {}
    for key, values in sweeps.items():
        rows = []
        for v in values:
            kw = dict(base, **{key: v})
            if key == "context":
                kw["batch_size"] = 2048
            traj, run, cmp = flow_and_sgd(chain, t1, seed=1, **kw)
            after = cmp.ts >= cmp.drop_end
            rows.append(
                {
                    key: v,
                    "mean_abs_gap_after": cmp.mean_abs_gap_after,
                    "mean_param_distance_after": float(
                        np.mean(cmp.param_distance[after])
                    ),
                    "max_crossing_rel_error": cmp.summary()["max_crossing_rel_error"],
                    "wall_time": run.stats.wall_time,
                }
            )
            print(key, rows[-1], flush=True)
        results[key] = {
            "rows": rows,
            "slope_gap": _fit(values, [r["mean_abs_gap_after"] for r in rows]),
            "slope_param": _fit(values, [r["mean_param_distance_after"] for r in rows]),
        }
        print(key, "slopes", results[key]["slope_gap"], results[key]["slope_param"])
    (out / "convergence.json").write_text(json.dumps(results, indent=1))
    # The O(1/context) bias of the finite-context model at fixed parameters:
    # the flow's point at t1 (past the first two drops, attention non-trivial).
    p0 = gf.init_params(chain.d, WIDTH, INIT_SCALE, 1)
    traj = gf.integrate(chain, params=p0, t1=t1, run=gf.Run(progress=False))
    contexts = [8, 16, 32, 64, 128, 256]
    bias = finite_context_bias(chain, traj.params[-1], contexts)
    results["bias"] = {
        "contexts": contexts,
        "bias": [b for b, _ in bias],
        "stderr": [se for _, se in bias],
        "slope": _fit(contexts, [b for b, _ in bias]),
    }
    print("bias", results["bias"], flush=True)
    (out / "convergence.json").write_text(json.dumps(results, indent=1))

    plot_convergence(results, t1)
    return results


def plot_convergence(results, t1):
    keys = ["context", "batch_size", "lr", "num_sequences"]
    fig, axes = plt.subplots(1, 5, figsize=(18, 3.6), layout="constrained")
    for ax, key in zip(axes[: len(keys)], keys, strict=True):
        r = results[key]
        xs = [row[key] for row in r["rows"]]
        ax.loglog(
            xs,
            [row["mean_abs_gap_after"] for row in r["rows"]],
            "o-",
            label=f"mean |loss gap| (slope {r['slope_gap']:.2f})",
        )
        ax.loglog(
            xs,
            [row["mean_param_distance_after"] for row in r["rows"]],
            "s--",
            label=f"mean rel. param distance (slope {r['slope_param']:.2f})",
        )
        ax.set_xticks(xs, [f"{x:g}" for x in xs])
        ax.minorticks_off()
        ax.set_xlabel(key + (" (batch 2048)" if key == "context" else ""))
        ax.legend(fontsize=7)
    axes[0].set_ylabel("distance to the flow after the first drop")
    b = results["bias"]
    contexts = np.asarray(b["contexts"])
    ax = axes[-1]
    ax.errorbar(
        contexts,
        b["bias"],
        yerr=2 * np.asarray(b["stderr"]),
        fmt="o-",
        label=f"E[finite loss] - L (slope {b['slope']:.2f})",
    )
    ax.plot(
        contexts, b["bias"][-1] * contexts[-1] / contexts, "k:", label="c / context"
    )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xticks(contexts, [str(c) for c in contexts])
    ax.minorticks_off()
    ax.set_xlabel(f"context s (fixed params: the flow at t = {t1:g})")
    ax.set_ylabel("bias of the finite-context loss")
    ax.legend(fontsize=7)
    fig.suptitle(
        f"sticky(6, 0.5, 0.5, 0.05), width 8, init 1e-3, t1 = {t1:g}; "
        "base: context 256, batch 512, lr 0.2, online; one seed per point",
        fontsize=9,
    )
    _save(fig, "sgd_convergence")


def _save(fig, name):
    FIGURES.mkdir(parents=True, exist_ok=True)
    fig.savefig(FIGURES / f"{name}.png", dpi=80)
    fig.savefig(FIGURES / f"{name}.pdf")
    plt.close(fig)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--part",
        choices=["tracking", "convergence", "diagnose", "noise", "replot", "all"],
        default="all",
    )
    parser.add_argument("--out", default="out/sgd")
    parser.add_argument(
        "--t1",
        type=float,
        default=None,
        help="final time (default 1000 for tracking, 300 for convergence)",
    )
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.part in ("tracking", "all"):
        tracking(out, args.t1 or 1000.0)
    if args.part in ("convergence", "all"):
        convergence(out, args.t1 or 300.0)
    if args.part == "replot":
        plot_convergence(
            json.loads((out / "convergence.json").read_text()), args.t1 or 300.0
        )
    if args.part == "noise":
        noise(out, args.t1 or 300.0)
    if args.part == "diagnose":
        diagnose(out, args.t1 or 1000.0)


if __name__ == "__main__":
    main()
