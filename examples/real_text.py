"""Real text: the flow on a corpus's bigram chain next to SGD on its real windows.

    python examples/real_text.py                       # built-in corpus
    python examples/real_text.py --text wikitext-2-raw/wiki.train.raw --vocab-size 30

1. Tokenise the corpus (default: Python's documentation topics, no download),
   keep `vocab_size - 1` words plus `<other>`, estimate the bigram chain.
2. Integrate the population flow on that chain, and train SGD (context 256,
   batch 512, lr 0.2) on windows of the real text from the same start; both
   are scored with the population loss of the bigram chain.
3. Attention: the pi-weighted attention mass per key token,
   mass_k = sum_i pi_i A[i, k], relative to its value pi_k at the start. The
   token whose enrichment mass_k / pi_k first exceeds 1.1 is the one that
   "attracts attention first"; its peak and later fall mark focus and
   dilution.
4. The learned embeddings (columns of W0) in PCA, with token labels.

Writes `<out>/real_text.json` and `docs/figures/text_*.png|pdf`.
"""

import argparse
import json
from pathlib import Path

import jax
import matplotlib


matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

import gradflow as gf  # noqa: E402


FIGURES = Path(__file__).resolve().parent.parent / "docs" / "figures"


def attention_mass(params, chain):
    """sum_i pi_i A[i, k] at every saved time: shape (T, d)."""
    A = jax.vmap(lambda p: gf.attention(p, chain))(params)
    return np.einsum("i,tik->tk", np.asarray(chain.pi), np.asarray(A))


def attention_entropy(params, chain):
    A = np.asarray(jax.vmap(lambda p: gf.attention(p, chain))(params))
    H = -np.sum(A * np.log(np.maximum(A, 1e-300)), axis=-1)
    return H @ np.asarray(chain.pi)


def first_focus(ts, enrichment, labels, threshold=1.1):
    """The token whose enrichment first exceeds `threshold`, when, its peak."""
    over = enrichment > threshold
    if not over.any():
        k = int(np.argmax(enrichment.max(axis=0)))
        return {
            "token": labels[k],
            "t_first": None,
            "peak": float(enrichment[:, k].max()),
            "t_peak": float(ts[int(np.argmax(enrichment[:, k]))]),
        }
    first_t = np.where(over.any(axis=0), np.argmax(over, axis=0), len(ts))
    k = int(np.argmin(first_t))
    peak_i = int(np.argmax(enrichment[:, k]))
    return {
        "token": labels[k],
        "t_first": float(ts[first_t[k]]),
        "peak": float(enrichment[peak_i, k]),
        "t_peak": float(ts[peak_i]),
        "final": float(enrichment[-1, k]),
        "order": [labels[j] for j in np.argsort(first_t) if first_t[j] < len(ts)][:8],
    }


def pca2(W0):
    X = np.asarray(W0).T  # (d, m): one row per token
    X = X - X.mean(axis=0)
    _, s, vt = np.linalg.svd(X, full_matrices=False)
    explained = s**2 / np.sum(s**2)
    return X @ vt[:2].T, explained[:2]


def save(fig, name):
    FIGURES.mkdir(parents=True, exist_ok=True)
    fig.savefig(FIGURES / f"{name}.png", dpi=80)
    fig.savefig(FIGURES / f"{name}.pdf")
    plt.close(fig)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--text", default=None, help="file or folder (default: built-in)"
    )
    parser.add_argument("--vocab-size", type=int, default=20)
    parser.add_argument("--width", type=int, default=8)
    parser.add_argument("--init-scale", type=float, default=1e-3)
    parser.add_argument("--flow-t1", type=float, default=3000.0)
    parser.add_argument("--sgd-t1", type=float, default=1000.0)
    parser.add_argument("--out", default="out/text")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    stream = gf.text.encode(args.text, args.vocab_size)
    chain = stream.chain
    labels = list(chain.tokens)
    print(stream, gf.entropy_bounds(chain), flush=True)
    p0 = gf.init_params(chain.d, args.width, args.init_scale, 0)
    run = gf.train_sgd(stream, p0, context=256, batch_size=512, lr=0.2, t1=args.sgd_t1)
    ts = np.concatenate([run.ts, gf.default_save_times(args.flow_t1)[1:]])
    ts = np.unique(ts[ts <= args.flow_t1])
    traj = gf.integrate(chain, params=p0, t1=args.flow_t1, ts=ts)
    cmp = gf.compare(
        traj, run, labels=("flow on the bigram chain", "SGD on real windows")
    )
    print(cmp.summary(), flush=True)

    enr_flow = attention_mass(traj.params, chain) / np.asarray(chain.pi)
    enr_sgd = attention_mass(run.params, chain) / np.asarray(chain.pi)
    focus_flow = first_focus(traj.ts, enr_flow, labels)
    focus_sgd = first_focus(run.ts, enr_sgd, labels)
    print("flow focus", focus_flow, "\nsgd focus", focus_sgd, flush=True)

    held_out = None
    gpl = Path("/usr/share/common-licenses/GPL-3")
    if gpl.exists():
        held = gf.chains.from_text(gpl, vocab_size=30)
        held_out = {
            "path": str(gpl),
            "first": held.tokens[0],
            "has_other": "<other>" in held.tokens,
            "tokens": list(held.tokens),
        }
        print("held-out", held_out, flush=True)

    # Figure 1: losses.
    cmp.save_figure(
        FIGURES / "text_flow_vs_sgd",
        title=f"{stream.source}: d = {chain.d} words, width {args.width}",
    )
    # Figure 2: attention enrichment of the top tokens, and attention entropy.
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(12, 4), layout="constrained")
    top = np.argsort(-enr_flow.max(axis=0))[:5]
    pos = traj.ts > 0
    for j, k in enumerate(top):
        ax.plot(traj.ts[pos], enr_flow[pos, k], f"C{j}-", label=f"{labels[k]!r} (flow)")
        ax.plot(run.ts[run.ts > 0], enr_sgd[run.ts > 0, k], f"C{j}--", lw=1)
    ax.set_xscale("log")
    ax.set_xlabel("t = lr x step")
    ax.set_ylabel("attention mass / pi_k  (dashed: SGD)")
    ax.set_title("which tokens attract attention")
    ax.legend(fontsize=8)
    bx.plot(
        traj.ts[pos], attention_entropy(traj.params, chain)[pos], "k-", label="flow"
    )
    bx.plot(
        run.ts[run.ts > 0],
        attention_entropy(run.params, chain)[run.ts > 0],
        "C1--",
        label="SGD",
    )
    bx.set_xscale("log")
    bx.set_xlabel("t = lr x step")
    bx.set_ylabel("pi-weighted attention entropy")
    bx.legend()
    save(fig, "text_attention")
    # Figure 3: embeddings in PCA.
    fig, axes = plt.subplots(1, 2, figsize=(12, 5.5), layout="constrained")
    for ax, (name, W0) in zip(
        axes,
        [
            (f"flow, t = {traj.ts[-1]:g}", traj.params.W0[-1]),
            (f"SGD, t = {run.ts[-1]:g}", run.params.W0[-1]),
        ],
        strict=True,
    ):
        xy, ev = pca2(W0)
        ax.scatter(xy[:, 0], xy[:, 1], s=300 * np.sqrt(np.asarray(chain.pi)), alpha=0.5)
        for k, lab in enumerate(labels):
            ax.annotate(lab, xy[k], fontsize=8)
        ax.set_xlabel(f"PC1 ({100 * ev[0]:.0f}% of variance)")
        ax.set_ylabel(f"PC2 ({100 * ev[1]:.0f}% of variance)")
        ax.set_title(
            f"embeddings (columns of W0), {name}; marker area ~ sqrt(pi)", fontsize=9
        )
    save(fig, "text_embeddings_pca")

    result = {
        "stream": repr(stream),
        "entropy_bounds": gf.entropy_bounds(chain),
        "tokens": labels,
        "compare": cmp.summary(),
        "focus_flow": focus_flow,
        "focus_sgd": focus_sgd,
        "held_out": held_out,
        "sgd_stats": run.stats,
        "flow_stats": traj.stats,
        "flow_loss_final": float(traj.loss[-1]),
        "sgd_loss_final": float(run.population_loss[-1]),
    }
    (out / "real_text.json").write_text(json.dumps(result, indent=1, default=str))


if __name__ == "__main__":
    main()
