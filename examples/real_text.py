"""Real text: what the flow on a corpus's bigram chain attends to, level by level.

    python examples/real_text.py                                  # built-in corpus
    python examples/real_text.py --levels char bpe word --sizes 256 1024
    python examples/real_text.py --text wikitext-103-raw/wiki.train.raw --levels bpe
    python examples/real_text.py --levels word --sizes 512 --sgd   # flow and SGD
    python examples/real_text.py --levels word --sizes 1024 --t1 2500 \
        --jacobian-tol 5 --checkpoint-dir out/ckpt     # hours: resumable

For every (level, vocabulary size) the corpus is encoded (`gf.text.encode`:
word, character, or byte-level BPE trained on the corpus), and the population
flow is integrated on its bigram chain from a small random start
(`gf.integrate`, width 16). From the saved parameters the script computes, at
every save time, the attention matrix `A` (`gf.attention`), the pi-weighted
attention entropy `sum_i pi_i H(A[i])` (`gf.markov.attention_entropy`) and the
attention mass per key token `mass_k = sum_i pi_i A[i, k]`, and reports:

- **the first focus**: the first local minimum of the entropy after it has
  fallen by at least `--min-fall` (relative) below its start; the *focus
  token* is the token whose mass gained most by then, with its rank by
  frequency: its position when all `d` tokens, `<other>` included, are sorted
  by `pi` (1 = most frequent);
- **the dilution**: the entropy's next local maximum, and how much of the
  focus token's mass gain is given back by then;
- **what is learnt next**: when the second singular value of `W0`, after
  condensation made `W0` rank one (below 10 % of the first), grows back to
  10 % of the first, the five tokens with the largest loadings on `W0`'s second
  right singular vector (the new embedding direction), with their ranks;
- the stage records of `gf.integrate` (`traj.stages`), for comparison;
- with `--sgd`: SGD on the corpus's own windows from the same start
  (`gf.train_sgd`, context 256, batch 512, lr 0.2), on the same time axis, and
  the relative gap of the loss-drop crossing times (`gf.compare`).

The chain uses `--smoothing` (default `"auto"`: pseudo-counts 1 % of the
bigram counts); for comparison the script also records what add-one
(Laplace) smoothing would make of the same counts: its share of all counts,
the distance of its `pi` from the unigram frequencies, its largest `pi` and
its condensation rate `sigma = |pi - 1/d| |pi|`.

Writes `<out>/real_text.json` (settings, results, cost) and the figures
`docs/figures/real_text_<level>_<d>.png|pdf` (`..._drop` with `--tail drop`) and
`docs/figures/real_text_sgd.png` (`--figure-dir` elsewhere). With
`--checkpoint-dir DIR` each flow checkpoints to `DIR/real_text_<level>_<d>.ckpt`
(`gf.integrate(checkpoint=...)`); after a kill or a Ctrl-C the same command
resumes it. `--jacobian-tol` and `--refresh-every` set the ROS34PW2 solver's
W-refresh rule (large vocabularies: `docs/performance.md`).
"""

import _thread
import argparse
import json
import signal
import threading
import time
import warnings
from pathlib import Path

import jax
import jax.numpy as jnp
import matplotlib


matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

import gradflow as gf  # noqa: E402


FIGURES = Path(__file__).resolve().parent.parent / "docs" / "figures"


def stage_field(stage, name):
    """One field of a stage record (dicts today, typed records soon)."""
    return getattr(stage, name) if hasattr(stage, name) else stage[name]


def sigma(pi):
    """The condensation rate `|pi - 1/d| |pi|` (`docs/theory.md`, "1. The origin")."""
    pi = np.asarray(pi)
    return float(np.linalg.norm(pi - 1 / pi.size) * np.linalg.norm(pi))


def smoothing_record(stream):
    pi = np.asarray(stream.chain.pi)
    return {
        "alpha": stream.smoothing,
        "fraction": stream.smoothing_fraction,
        "pi_distance": stream.pi_distance,
        "pi_max": float(pi.max()),
        "sigma": sigma(pi),
    }


def attention_curves(params, chain):
    """Attention entropy (T,) and mass per key token (T, d) at every save."""
    pi = jnp.asarray(chain.pi)

    def one(p):
        A = gf.attention(p, chain)
        return gf.markov.attention_entropy(A, pi), pi @ A

    H, mass = jax.lax.map(jax.jit(one), params)
    return np.asarray(H), np.asarray(mass)


def local_extremum(x, start, kind, min_change):
    """Index of the first local min (or max) of `x` after `start`, once `x` has
    moved by `min_change` from `x[start]` in that direction; None if never."""
    sign = 1 if kind == "min" else -1
    ref = x[start]
    moved = np.flatnonzero(sign * (ref - x[start:]) >= min_change)
    if moved.size == 0:
        return None
    i = start + int(moved[0])
    while i + 1 < x.size and sign * (x[i] - x[i + 1]) >= 0:
        i += 1
    return i


def pi_ranks(chain):
    """Rank of every token by its stationary probability (1 = largest pi),
    `<other>` included: the rank "by frequency" of the paper's claims."""
    order = np.argsort(-np.asarray(chain.pi), kind="stable")
    ranks = np.empty(chain.d, int)
    ranks[order] = np.arange(1, chain.d + 1)
    return ranks


def analyse(traj, chain, min_fall):
    ts = np.asarray(traj.ts)
    labels = list(chain.tokens)
    rank = pi_ranks(chain)
    H, mass = attention_curves(traj.params, chain)
    gain = mass - mass[0]
    out = {"H_start": float(H[0]), "H_final": float(H[-1])}
    out["H_min"], out["t_H_min"] = float(H.min()), float(ts[int(np.argmin(H))])
    out["H_max"], out["t_H_max"] = float(H.max()), float(ts[int(np.argmax(H))])
    i_f = local_extremum(H, 0, "min", min_fall * H[0])
    out["entropy_falls"] = i_f is not None
    if i_f is None:
        # no focus by the entropy: report the token that gains most at the end
        k = int(np.argmax(gain[-1]))
        out["focus"] = None
    else:
        k = int(np.argmax(gain[i_f]))
        i_d = local_extremum(H, i_f, "max", min_fall * H[0] * 0.5)
        out["focus"] = {
            "t": float(ts[i_f]),
            "H": float(H[i_f]),
            "loss": float(traj.loss[i_f]),
        }
        if i_d is not None:
            out["dilution"] = {
                "t": float(ts[i_d]),
                "H": float(H[i_d]),
                "loss": float(traj.loss[i_d]),
                "focus_gain_kept": float(gain[i_d, k] / gain[i_f, k]),
            }
        else:
            out["dilution"] = None
    out["entropy_rises_after_focus"] = bool(
        out.get("dilution") and out["dilution"]["H"] > out["focus"]["H"]
    )
    out["focus_token"] = labels[k]
    out["focus_rank"] = int(rank[k])
    out["focus_pi"] = float(chain.pi[k])
    out["focus_mass_gain"] = float(gain[i_f if i_f is not None else -1, k])
    out["top_gainers"] = [
        {"token": labels[j], "rank": int(rank[j])}
        for j in np.argsort(-gain[i_f if i_f is not None else -1])[:5]
    ]
    # the next embedding direction
    s = np.linalg.svd(np.asarray(traj.params.W0), compute_uv=False)
    ratio = s[:, 1] / s[:, 0]
    # after condensation (W0 of rank one: sigma_2 / sigma_1 below 0.1; the
    # random start has comparable singular values) and after the first focus
    condensed = np.flatnonzero(ratio < 0.1)
    after = max(i_f or 0, int(condensed[0]) if condensed.size else ts.size)
    nd = np.flatnonzero((ratio >= 0.1) & (np.arange(ts.size) >= after))
    if nd.size:
        i_n = int(nd[0])
        _, _, vt = np.linalg.svd(np.asarray(traj.params.W0[i_n]))
        top = np.argsort(-np.abs(vt[1]))[:5]
        out["next"] = {
            "t": float(ts[i_n]),
            "tokens": [labels[j] for j in top],
            "ranks": [int(rank[j]) for j in top],
        }
    else:
        out["next"] = None
    out["stages"] = [
        {
            "name": stage_field(r, "name"),
            "cycle": int(stage_field(r, "cycle")),
            "t_start": float(stage_field(r, "t_start")),
            "t_end": float(stage_field(r, "t_end")),
            "tokens": [
                labels[int(j)] if isinstance(j, (int, np.integer)) else str(j)
                for j in (stage_field(r, "tokens") or [])
            ],
        }
        for r in traj.stages
    ]
    return out, H, mass


def figure(traj, chain, H, mass, result, name, title, folder=FIGURES):
    ts = np.asarray(traj.ts)
    pos = ts > 0
    labels = list(chain.tokens)
    rank = pi_ranks(chain)
    fig, (ax, bx, cx) = plt.subplots(1, 3, figsize=(15, 4), layout="constrained")
    ax.plot(ts[pos], np.asarray(traj.loss)[pos], "k-")
    ax.axhline(
        float(chain.conditional_entropy),
        color="0.6",
        ls=":",
        label="conditional entropy",
    )
    ax.axhline(
        float(-np.sum(chain.pi * np.log(chain.pi))), color="C0", ls=":", label="H(pi)"
    )
    ax.set_xscale("log")
    ax.set_xlabel("t (gradient-descent time)")
    ax.set_ylabel("population loss")
    ax.legend(fontsize=8)
    bx.plot(ts[pos], H[pos], "k-")
    for key, style in (("focus", "C3"), ("dilution", "C2")):
        if result.get(key):
            bx.axvline(result[key]["t"], color=style, ls="--", label=key)
    bx.set_xscale("log")
    bx.set_xlabel("t")
    bx.set_ylabel("pi-weighted attention entropy")
    bx.legend(fontsize=8)
    gain = mass - mass[0]
    top = np.argsort(-np.abs(gain).max(axis=0))[:6]
    for j, k in enumerate(top):
        cx.plot(
            ts[pos], gain[pos, k], f"C{j}-", label=f"{labels[k]!r} (rank {rank[k]})"
        )
    cx.set_xscale("log")
    cx.set_xlabel("t")
    cx.set_ylabel("attention mass gain  mass_k(t) - mass_k(0)")
    cx.legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    folder.mkdir(parents=True, exist_ok=True)
    fig.savefig(folder / f"{name}.png", dpi=80)
    fig.savefig(folder / f"{name}.pdf")
    plt.close(fig)


def _tok(token):
    """A token as a Markdown code span in a table cell (`<other>` would be
    read as an HTML tag, `|` as a cell border)."""
    return "`" + repr(token).replace("|", "\\|") + "`"


def _ranks(items):
    return ", ".join(f"{_tok(x['token'])} ({x['rank']})" for x in items)


def _yes_no(flag):
    return "yes" if flag else "no"


def _solver_note(settings):
    """The W-refresh options of a run that did not use the defaults."""
    options = [
        f"{k} {settings[k]:g}"
        for k in ("jacobian_tol", "refresh_every")
        if settings.get(k) is not None
    ]
    if settings.get("carry_basis"):
        options.append("carried basis")
    return f" ({', '.join(options)})" if options else ""


def report(paths):
    """The markdown tables of docs/text.md from `real_text.json` files: the
    study, then the smoothing of each chain against add-one smoothing."""
    runs = []
    for path in paths:
        saved = json.loads(Path(path).read_text())
        for r in saved["runs"]:
            if "smoothing" in r:
                runs.append((saved["settings"], r))

    def key(settings, r):
        return r["level"], r["vocab_size"], settings.get("tail", "other")

    # a chain-only (--no-flow) row gives way to a flow of the same chain
    flows = {key(*run) for run in runs if "H_start" in run[1]}
    runs = [run for run in runs if "H_start" in run[1] or key(*run) not in flows]
    rows = [
        "| level | d | most frequent (pi) | `<other>` pi (rank) | t1 reached | "
        "H(0) | first focus: t, H | entropy falls | dilution: t, H | "
        "entropy rises | focus token (rank) | gainers at the focus (rank) | "
        "next direction: tokens (rank) | steps | grad evals | HVPs | wall s |",
        "|" + " --- |" * 17,
    ]
    for settings, r in runs:
        if "H_start" not in r:
            rows.append(
                f"| {r['level']} | {r['vocab_size']} | "
                + ", ".join(
                    f"{_tok(t)} ({p:.3f})"
                    for t, p in zip(r["tokens_head"][:2], r["pi_head"][:2])
                )
                + f" | {r['other_pi']:.3f} ({r['other_rank']}) | flow not run |"
                + " |" * 12
            )
            continue
        reached = r.get("t_reached", r.get("interrupted_at_t", settings["t1"]))
        f, dl, nx = r.get("focus"), r.get("dilution"), r.get("next")
        st = r["flow_stats"]
        other = (
            f"{r['other_pi']:.3f} ({r['other_rank']})"
            if r.get("other_pi") is not None
            else "dropped"
        )
        head = ", ".join(
            f"{_tok(t)} ({p:.3f})"
            for t, p in zip(r["tokens_head"][:2], r["pi_head"][:2])
        )
        interrupted = " (budget)" if "interrupted_at_t" in r else ""
        rows.append(
            f"| {r['level']} | {r['vocab_size']} | {head} | {other} | "
            f"{reached:.4g} of {settings['t1']:.4g}{interrupted} | {r['H_start']:.3f} | "
            + (f"{f['t']:.4g}, {f['H']:.3f} | " if f else "none | ")
            + f"{_yes_no(r['entropy_falls'])} | "
            + (f"{dl['t']:.4g}, {dl['H']:.3f} | " if dl else "none | ")
            + f"{_yes_no(r['entropy_rises_after_focus'])} | "
            + f"{_tok(r['focus_token'])} ({r['focus_rank']}) | "
            f"{_ranks(r['top_gainers'][:3])} | "
            + (
                ", ".join(
                    f"{_tok(t)} ({k})"
                    for t, k in zip(nx["tokens"][:3], nx["ranks"][:3])
                )
                if nx
                else "none"
            )
            + f" | {st['num_steps']}{_solver_note(settings)} | {st['num_grad_evals']} | "
            f"{st.get('num_hvps', 'n/a')} | {r['flow_wall_s']:.0f} |"
        )
    rows += [
        "",
        "| level | d | bigrams | smoothing | pseudo-counts / all | pi distance (TV) | "
        "largest pi | sigma | add-one: pseudo-counts / all | pi distance | "
        "largest pi | sigma |",
        "|" + " --- |" * 12,
    ]
    for _, r in runs:
        a, lp = r["smoothing"], r["laplace"]
        rows.append(
            f"| {r['level']} | {r['vocab_size']} | {r['num_tokens'] - 1} | "
            f"{a['alpha']:.3g} | {a['fraction']:.3f} | {a['pi_distance']:.4f} | "
            f"{a['pi_max']:.3f} | {a['sigma']:.4f} | {lp['fraction']:.3f} | "
            f"{lp['pi_distance']:.3f} | {lp['pi_max']:.3f} | {lp['sigma']:.4f} |"
        )
    return "\n".join(rows)


TABLE_BEGIN = "<!-- real-text table (python examples/real_text.py --report ...) -->"
TABLE_END = "<!-- /real-text table -->"


def write_table(table, page):
    """Replaces the text between the table markers of `page` with `table`."""
    gf.replace_between_markers(page, TABLE_BEGIN, TABLE_END, table)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--report",
        nargs="+",
        default=None,
        metavar="JSON",
        help="print the table of docs/text.md from real_text.json files and exit",
    )
    parser.add_argument(
        "--write-doc",
        default=None,
        metavar="MD",
        help="with --report: write the tables between the markers of this page",
    )
    parser.add_argument(
        "--text", default=None, help="file or folder (default: built-in)"
    )
    parser.add_argument("--levels", nargs="+", default=["char", "bpe", "word"])
    parser.add_argument("--sizes", nargs="+", type=int, default=[256])
    parser.add_argument("--tail", default="other", choices=("other", "drop"))
    parser.add_argument("--width", type=int, default=16)
    parser.add_argument("--init-scale", type=float, default=1e-3)
    parser.add_argument("--t1", type=float, default=20_000.0)
    parser.add_argument("--min-fall", type=float, default=0.01)
    parser.add_argument("--sgd", action="store_true", help="also SGD on the windows")
    parser.add_argument(
        "--no-flow", action="store_true", help="the chains and their smoothing only"
    )
    parser.add_argument("--sgd-t1", type=float, default=None, help="default: --t1")
    parser.add_argument("--max-steps", type=int, default=4_000_000)
    parser.add_argument(
        "--smoothing",
        default="auto",
        type=lambda v: v if v == "auto" else float(v),
        help="'auto' (default) or a pseudo-count per bigram",
    )
    parser.add_argument("--solver", default=None, help="default: gradflow's")
    parser.add_argument(
        "--jacobian-tol",
        type=float,
        default=None,
        help="ROS34PW2 with this jacobian_tol (default: the default solver's 0.5)",
    )
    parser.add_argument(
        "--refresh-every",
        type=int,
        default=None,
        help="ROS34PW2 with this refresh_every (default: the default solver's 8)",
    )
    parser.add_argument(
        "--carry-basis",
        action="store_true",
        help="ROS34PW2 with carry_basis=True (half the HVPs per W refresh)",
    )
    parser.add_argument(
        "--checkpoint-dir",
        default=None,
        help="checkpoint each flow to DIR/<name>.ckpt; the same command resumes it",
    )
    parser.add_argument(
        "--figure-dir",
        default=str(FIGURES),
        help="where the figures go (default: docs/figures)",
    )
    parser.add_argument(
        "--budget",
        type=float,
        default=None,
        help="wall-clock seconds per flow: a flow still running then is "
        "interrupted (as by Ctrl-C) and analysed up to where it got",
    )
    parser.add_argument("--out", default="out/real_text")
    args = parser.parse_args(argv)
    args.solver_options = solver_options(args)
    if args.solver_options and args.solver not in (None, "ros34pw2"):
        parser.error(
            "--jacobian-tol/--refresh-every/--carry-basis need ROS34PW2, got "
            f"{args.solver!r}"
        )
    return args


def solver_options(args) -> dict:
    """The ROS34PW2 options given on the command line."""
    return {
        k: v
        for k, v in (
            ("jacobian_tol", args.jacobian_tol),
            ("refresh_every", args.refresh_every),
            ("carry_basis", args.carry_basis or None),
        )
        if v is not None
    }


def encode(corpus, level: str, d: int, args) -> tuple[dict, object]:
    """The corpus encoded on `d` tokens at `level`, and the record of its
    chain: its smoothing against add-one smoothing, its most frequent tokens,
    its entropies."""
    record = {"level": level, "vocab_size": d}
    distinct = len(corpus.units) if level != "bpe" else None
    if distinct is not None and d > distinct:
        # (characters of an English text: about a hundred) all of them
        record["note"] = (
            f"the corpus has {distinct} distinct {level} tokens, fewer than "
            f"{d}: all {distinct} are used"
        )
        record["vocab_size"] = d = distinct
    t = time.perf_counter()
    stream = gf.text.encode(
        corpus, d, level=level, tail=args.tail, smoothing=args.smoothing
    )
    chain = stream.chain
    record["encode_s"] = time.perf_counter() - t
    record["stream"] = repr(stream)
    record["smoothing"] = smoothing_record(stream)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # drowned: reported
        laplace = stream.with_smoothing(1.0)
    record["laplace"] = smoothing_record(laplace)
    order = np.argsort(-np.asarray(chain.pi), kind="stable")
    record["tokens_head"] = [chain.tokens[k] for k in order[:12]]
    record["pi_head"] = [float(chain.pi[k]) for k in order[:12]]
    record["num_tokens"] = len(stream)
    record["other_pi"] = float(chain.pi[-1]) if args.tail == "other" else None
    record["other_rank"] = int(pi_ranks(chain)[-1])
    record["H_pi"] = float(-np.sum(chain.pi * np.log(chain.pi)))
    record["entropy_rate"] = float(chain.conditional_entropy)
    return record, stream


def solve(stream, record: dict, name: str, args):
    """SGD (with `--sgd`) and the flow from one start, their costs in
    `record`; the flow stops at `--budget` seconds. Returns `(traj, run)`."""
    chain = stream.chain
    p0 = gf.init_params(chain.d, args.width, args.init_scale, 0)
    ts = gf.default_save_times(args.t1)
    run = None
    if args.sgd:
        t = time.perf_counter()
        run = gf.train_sgd(
            stream,
            p0,
            context=256,
            sgd=gf.SGD(lr=0.2, batch_size=512),
            t1=args.sgd_t1 or args.t1,
            run=gf.Run(progress=False),
        )
        record["sgd_wall_s"] = time.perf_counter() - t
        record["sgd_stats"] = run.stats.to_dict()
        ts = np.unique(np.concatenate([run.ts, ts]))
        ts = ts[ts <= args.t1]
    options = args.solver_options
    solver = gf.solvers.ROS34PW2(**options) if options else args.solver
    checkpoint = None
    if args.checkpoint_dir is not None:
        checkpoint = Path(args.checkpoint_dir) / f"{name}.ckpt"
    t = time.perf_counter()
    timer = None
    if args.budget is not None:
        # `interrupt_main` raises KeyboardInterrupt only where Python handles
        # SIGINT: a background job of a shell ignores it, so handle it here.
        if signal.getsignal(signal.SIGINT) in (signal.SIG_IGN, signal.SIG_DFL):
            signal.signal(signal.SIGINT, signal.default_int_handler)
        timer = threading.Timer(args.budget, _thread.interrupt_main)
        timer.daemon = True
        timer.start()
    try:
        traj = gf.integrate(
            chain,
            params=p0,
            t1=args.t1,
            saveat=gf.SaveAt(ts),
            solver=gf.Solver(solver, max_steps=args.max_steps),
            run=gf.Run(progress=True, checkpoint=checkpoint),
        )
    except gf.Interrupted as e:  # the wall-clock budget ran out
        traj = e.result
        record["interrupted_at_t"] = float(traj.ts[-1])
    finally:
        if timer is not None:
            timer.cancel()
    record["flow_wall_s"] = time.perf_counter() - t
    record["t_reached"] = float(traj.ts[-1])
    record["flow_ok"] = bool(traj.ok)
    record["flow_message"] = traj.message
    record["flow_stats"] = traj.stats.to_dict()
    return traj, run


def study(stream, record: dict, level: str, args) -> None:
    """The flow (and SGD) on one chain, analysed, with its figures."""
    chain = stream.chain
    figures = Path(args.figure_dir)
    name = f"real_text_{level}_{chain.d}" + ("_drop" if args.tail == "drop" else "")
    traj, run = solve(stream, record, name, args)
    analysis, H, mass = analyse(traj, chain, args.min_fall)
    record.update(analysis)
    figure(
        traj,
        chain,
        H,
        mass,
        analysis,
        name,
        f"{stream.source}, {level} level, d = {chain.d}"
        + (", tail dropped" if args.tail == "drop" else "")
        + f", width {args.width}: "
        f"focus token {analysis['focus_token']!r} (rank {analysis['focus_rank']})",
        folder=figures,
    )
    if run is not None:
        cmp = gf.compare(
            traj,
            run,
            labels=("flow on the bigram chain", "SGD on real windows"),
        )
        record["compare"] = cmp.summary()
        cmp.save_figure(
            figures / "real_text_sgd",
            title=f"{stream.source}, {level} level, d = {chain.d}, width {args.width}",
        )


def main(argv=None):
    args = parse_args(argv)
    if args.report:
        table = report(args.report)
        print(table)
        if args.write_doc:
            write_table(table, args.write_doc)
        return
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results = {"settings": vars(args), "gradflow_version": gf.__version__, "runs": []}
    for level in args.levels:
        corpus = gf.text.load(args.text, "word" if level == "word" else level)
        for d in args.sizes:
            record, stream = encode(corpus, level, d, args)
            if not args.no_flow:  # (with --no-flow: the chain only)
                study(stream, record, level, args)
            print(json.dumps(record, default=str), flush=True)
            results["runs"].append(record)
            (out / "real_text.json").write_text(
                json.dumps(results, indent=1, default=str)
            )
    (out / "real_text.json").write_text(json.dumps(results, indent=1, default=str))


if __name__ == "__main__":
    main()
