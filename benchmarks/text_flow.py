"""The flow at a realistic vocabulary on CPU, with its cost, and SGD on the
corpus's own windows on the same time axis (issue 15).

    python benchmarks/text_flow.py                      # d = 512 words, width 16
    python benchmarks/text_flow.py --d 256 --t1 1500    # a smaller case

The built-in corpus is encoded at word level on `--d` tokens (default
smoothing: pseudo-counts 1 % of the bigram counts). From one random start
(init 1e-3, seed 0):

1. SGD on windows of the real text (`gf.train_sgd` on the `TokenStream`:
   the finite-context model, context 256, batch 512, lr 0.2) to `--t1`, the
   population loss of the bigram chain evaluated at every save;
2. the population flow on the bigram chain (`gf.integrate`, default solver
   and tolerances) to `--t1`, saved at SGD's times and the default log grid;
3. `gf.compare`: the loss-drop crossing times of both, and their relative gap;
4. the attention analysis of `examples/real_text.py` (first focus, dilution,
   focus token) for the flow and for SGD;
5. the cost: steps, rejected steps, gradient evaluations, Hessian-vector
   products, wall time; the measured wall time of one gradient and one HVP at
   this size; and the Hessian's leading eigenvalues at three saved points
   (subspace iteration on HVPs), which say how stiff the flow is beyond the
   default solver's 16 tracked directions.

Writes `--out` (JSON: settings, results, cost) and, with `--figures`,
`docs/figures/text_flow_vs_sgd.png|pdf`, `text_attention.png|pdf` and
`text_embeddings_pca.png|pdf` (each name with `--figure-suffix` appended);
with `--save-dir`, the flow and the SGD run themselves.
"""

import _thread
import argparse
import importlib.util
import json
import threading
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import matplotlib


matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from jax.flatten_util import ravel_pytree  # noqa: E402

import gradflow as gf  # noqa: E402


ROOT = Path(__file__).resolve().parent.parent
FIGURES = ROOT / "docs" / "figures"


def _real_text():
    """The analysis functions of examples/real_text.py (one definition)."""
    spec = importlib.util.spec_from_file_location(
        "real_text", ROOT / "examples" / "real_text.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def per_call(fn, *args, repeat=10):
    jax.block_until_ready(fn(*args))
    t = time.perf_counter()
    for _ in range(repeat):
        jax.block_until_ready(fn(*args))
    return (time.perf_counter() - t) / repeat


def hessian_top(params, chain, k=40, iterations=12, seed=0):
    """The `k` leading Ritz values of the Hessian of the population loss at
    `params`, by subspace iteration on Hessian-vector products (magnitudes
    ordered; the trailing ones are lower bounds until converged)."""
    flat, unravel = ravel_pytree(params)

    def grad_flat(x):
        return ravel_pytree(jax.grad(gf.population_loss)(unravel(x), chain))[0]

    @jax.jit
    def hvps(X):
        return jax.vmap(lambda v: jax.jvp(grad_flat, (flat,), (v,))[1], 1, 1)(X)

    X = jnp.linalg.qr(jax.random.normal(jax.random.key(seed), (flat.size, k)))[0]
    for _ in range(iterations):
        X = jnp.linalg.qr(hvps(X))[0]
    HX = hvps(X)
    mu = jnp.linalg.eigvalsh(0.5 * (X.T @ HX + HX.T @ X))
    return np.asarray(mu[jnp.argsort(-jnp.abs(mu))])


def attention_figure(rt, traj, run, chain, flow_curves, sgd_curves, flow_a, sgd_a):
    (Hf, mf), (Hs, ms) = flow_curves, sgd_curves
    labels = list(chain.tokens)
    rank = rt.pi_ranks(chain)
    tf, ts = np.asarray(traj.ts), np.asarray(run.ts)
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(13, 4.4), layout="constrained")
    pf, ps = tf > 0, ts > 0
    ax.plot(tf[pf], Hf[pf], "k-", label="flow on the bigram chain")
    ax.plot(ts[ps], Hs[ps], "C1--", label="SGD on real windows")
    for key, color in (("focus", "C3"), ("dilution", "C2")):
        if flow_a.get(key):
            ax.axvline(flow_a[key]["t"], color=color, ls=":", label=f"flow {key}")
    ax.set_xscale("log")
    ax.set_xlabel("t (gradient-descent time; SGD: lr x step)")
    ax.set_ylabel("pi-weighted attention entropy")
    ax.legend(fontsize=8)
    gain = mf - mf[0]
    top = np.argsort(-np.abs(gain).max(axis=0))[:6]
    for j, k in enumerate(top):
        bx.plot(tf[pf], gain[pf, k], f"C{j}-", label=f"{labels[k]!r} (rank {rank[k]})")
        bx.plot(ts[ps], (ms - ms[0])[ps, k], f"C{j}--", lw=1)
    bx.set_xscale("log")
    bx.set_xlabel("t")
    bx.set_ylabel("attention mass gain\nmass_k(t) - mass_k(0)  (dashed: SGD)")
    bx.legend(fontsize=8)
    fig.suptitle(
        f"built-in corpus, word level, d = {chain.d}, width {traj.params.W0.shape[1]}:"
        " which tokens attract attention (rank = by frequency)",
        fontsize=10,
    )
    return fig


def pca2(W0):
    X = np.asarray(W0).T  # (d, m): one row per token
    X = X - X.mean(axis=0)
    u, s, _ = np.linalg.svd(X, full_matrices=False)
    return u[:, :2] * s[:2], s[:2] ** 2 / np.sum(s**2)


def embeddings_figure(traj, run, chain, label_top=25):
    labels = list(chain.tokens)
    pi = np.asarray(chain.pi)
    shown = np.argsort(-pi)[:label_top]
    fig, axes = plt.subplots(1, 2, figsize=(13, 5.5), layout="constrained")
    for ax, (name, W0) in zip(
        axes,
        [
            (f"flow, t = {float(traj.ts[-1]):.4g}", traj.params.W0[-1]),
            (f"SGD, t = {float(run.ts[-1]):.4g}", run.params.W0[-1]),
        ],
        strict=True,
    ):
        xy, ev = pca2(W0)
        ax.scatter(xy[:, 0], xy[:, 1], s=2000 * pi, c="C0", alpha=0.4)
        for k in shown:
            ax.annotate(labels[k], xy[k], fontsize=7)
        ax.set_xlabel(f"PC1 ({100 * ev[0]:.0f}% of variance)")
        ax.set_ylabel(f"PC2 ({100 * ev[1]:.0f}% of variance)")
        ax.set_title(
            f"embeddings (columns of W0), {name}; area ~ pi, "
            f"the {label_top} most frequent labelled",
            fontsize=9,
        )
    return fig


def save(fig, name):
    FIGURES.mkdir(parents=True, exist_ok=True)
    fig.savefig(FIGURES / f"{name}.png", dpi=90)
    fig.savefig(FIGURES / f"{name}.pdf")
    plt.close(fig)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--text", default=None, help="file or folder (default: built-in)"
    )
    parser.add_argument("--level", default="word", choices=("word", "char", "bpe"))
    parser.add_argument("--d", type=int, default=512)
    parser.add_argument("--width", type=int, default=16)
    parser.add_argument("--init-scale", type=float, default=1e-3)
    parser.add_argument("--t1", type=float, default=2500.0)
    parser.add_argument("--min-fall", type=float, default=0.01)
    parser.add_argument(
        "--budget",
        type=float,
        default=None,
        help="wall-clock seconds for the flow; then it is interrupted and "
        "analysed up to where it got",
    )
    parser.add_argument("--no-spectrum", action="store_true")
    parser.add_argument(
        "--cost-only",
        action="store_true",
        help="measure one gradient and one HVP at this size, write --out and stop",
    )
    parser.add_argument("--figures", action="store_true", help="write text_*.png")
    parser.add_argument(
        "--figure-suffix",
        default="",
        help="appended to the figure names (e.g. _512), so that runs at other "
        "sizes do not overwrite each other's figures",
    )
    parser.add_argument(
        "--save-dir",
        default=None,
        help="also save the flow (flow.npz) and the SGD run (sgd.npz) there, "
        "loadable with gf.load and gf.load_sgd",
    )
    parser.add_argument(
        "--from-saved",
        default=None,
        help="load the flow and the SGD run that --save-dir wrote there instead "
        "of computing them (the comparison, analysis and figures again; no "
        "timings)",
    )
    parser.add_argument("--out", default="out/text_flow.json")
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    rt = _real_text()
    result = {"settings": vars(args), "gradflow_version": gf.__version__}
    print(f"jax {jax.__version__}, devices {jax.devices()}", flush=True)

    stream = gf.text.encode(args.text, args.d, level=args.level)
    chain = stream.chain
    result["stream"] = repr(stream)
    result["chain"] = {
        "H_pi": float(chain.unigram_entropy),
        "entropy_rate": float(chain.conditional_entropy),
        "sigma": rt.sigma(chain.pi),
        "pi_head": {chain.tokens[k]: float(chain.pi[k]) for k in range(8)},
        "other_pi": float(chain.pi[-1]),
    }
    p0 = gf.init_params(chain.d, args.width, args.init_scale, 0)
    n = sum(int(np.size(x)) for x in jax.tree.leaves(p0))
    result["num_parameters"] = n
    print(stream, f"n = {n} parameters", flush=True)

    # one gradient and one HVP at this size (compiled, median of repeats)
    grad = jax.jit(jax.grad(gf.population_loss))
    hvp = jax.jit(
        lambda p, v: jax.jvp(
            lambda q: jax.grad(gf.population_loss)(q, chain), (p,), (v,)
        )[1]
    )
    result["per_call_s"] = {
        "grad": per_call(grad, p0, chain),
        "hvp": per_call(hvp, p0, p0),
    }
    print("per call", result["per_call_s"], flush=True)
    if args.cost_only:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=1, default=str))
        return

    if args.from_saved is not None:
        run = gf.load_sgd(Path(args.from_saved) / "sgd.npz")
        traj = gf.load(Path(args.from_saved) / "flow.npz")
    else:
        run, traj = solve(args, stream, p0, result)
    analyse(args, rt, result, chain, run, traj)


def solve(args, stream, p0, result):
    """SGD on the text's windows, then the flow on its bigram chain (within
    `--budget` seconds), with their costs in `result`."""
    chain = stream.chain
    t = time.perf_counter()
    run = gf.train_sgd(
        stream,
        p0,
        context=256,
        sgd=gf.SGD(lr=0.2, batch_size=512),
        t1=args.t1,
        run=gf.Run(progress=False),
    )
    result["sgd"] = {
        "wall_s": time.perf_counter() - t,
        "stats": run.stats.to_dict(),
        "loss_final": float(run.loss[-1]),
    }
    print("sgd", result["sgd"], flush=True)
    if args.save_dir is not None:
        Path(args.save_dir).mkdir(parents=True, exist_ok=True)
        print("saved", run.save(Path(args.save_dir) / "sgd.npz"), flush=True)

    ts = np.unique(np.concatenate([np.asarray(run.ts), gf.default_save_times(args.t1)]))
    ts = ts[ts <= args.t1]
    timer = None
    if args.budget is not None:
        timer = threading.Timer(args.budget, _thread.interrupt_main)
        timer.daemon = True
        timer.start()
    t = time.perf_counter()
    try:
        traj = gf.integrate(
            chain,
            params=p0,
            t1=args.t1,
            saveat=gf.SaveAt(ts),
            run=gf.Run(progress=True),
        )
        interrupted = False
    except gf.Interrupted as e:
        traj = e.result
        interrupted = True
    finally:
        if timer is not None:
            timer.cancel()
    stats = traj.stats.to_dict()
    result["flow"] = {
        "wall_s": time.perf_counter() - t,
        "t_reached": float(traj.ts[-1]),
        "interrupted": interrupted,
        "ok": bool(traj.ok),
        "message": traj.message,
        "stats": stats,
        "loss_final": float(traj.loss[-1]),
        "wall_per_step_s": stats["wall_time"] / max(stats["num_steps"], 1),
        "mean_step_size": float(traj.ts[-1]) / max(stats["num_accepted_steps"], 1),
        "hvps_per_step": (stats.get("num_hvps") or 0) / max(stats["num_steps"], 1),
        "cost_model_s": stats["num_grad_evals"] * result["per_call_s"]["grad"]
        + (stats.get("num_hvps") or 0) * result["per_call_s"]["hvp"],
    }
    print("flow", result["flow"], flush=True)
    if args.save_dir is not None:
        print("saved", traj.save(Path(args.save_dir) / "flow.npz"), flush=True)
    return run, traj


def analyse(args, rt, result, chain, run, traj):
    """Compares the flow with SGD, analyses the attention of both, writes the
    figures (with --figures) and the JSON."""

    cmp = gf.compare(
        traj, run, labels=("flow on the bigram chain", "SGD on real windows")
    )
    result["compare"] = cmp.summary()
    print("compare", result["compare"], flush=True)

    flow_a, Hf, mf = rt.analyse(traj, chain, args.min_fall)
    sgd_curves = rt.attention_curves(run.params, chain)
    keep = ("H_start", "H_min", "t_H_min", "H_max", "t_H_max", "focus", "dilution")
    keep += ("entropy_falls", "entropy_rises_after_focus", "focus_token")
    keep += ("focus_rank", "focus_pi", "top_gainers", "next", "stages")
    result["flow_attention"] = {k: flow_a.get(k) for k in keep}
    Hs = sgd_curves[0]
    i_f = rt.local_extremum(Hs, 0, "min", args.min_fall * Hs[0])
    result["sgd_attention"] = {
        "H_start": float(Hs[0]),
        "first_focus": None
        if i_f is None
        else {"t": float(run.ts[i_f]), "H": float(Hs[i_f])},
    }
    print("flow attention", result["flow_attention"], flush=True)

    if not args.no_spectrum:
        picks = {"start of the flow": 0}
        if flow_a.get("focus"):
            picks["first focus"] = int(np.searchsorted(traj.ts, flow_a["focus"]["t"]))
        if flow_a.get("dilution"):
            picks["dilution"] = int(np.searchsorted(traj.ts, flow_a["dilution"]["t"]))
        picks["last save"] = int(traj.ts.size - 1)
        spectrum = {}
        for name, i in picks.items():
            t = time.perf_counter()
            p = jax.tree.map(lambda x, i=i: x[i], traj.params)
            mu = hessian_top(p, chain)
            spectrum[name] = {
                "t": float(traj.ts[i]),
                "top": [float(x) for x in mu[:20]],
                "17th": float(mu[16]),
                "above_1": int(np.sum(np.abs(mu) > 1)),
                "wall_s": time.perf_counter() - t,
            }
            print("spectrum", name, spectrum[name], flush=True)
        result["hessian"] = spectrum

    if args.figures:
        tag = args.figure_suffix
        cmp.save_figure(
            FIGURES / f"text_flow_vs_sgd{tag}",
            title=f"built-in corpus, word level, d = {chain.d}, width {args.width}",
        )
        save(
            attention_figure(rt, traj, run, chain, (Hf, mf), sgd_curves, flow_a, None),
            f"text_attention{tag}",
        )
        save(embeddings_figure(traj, run, chain), f"text_embeddings_pca{tag}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1, default=str))
    print("wrote", out, flush=True)


if __name__ == "__main__":
    main()
