"""Which architectural ingredients keep the focus-dilution cycle? The exact
population flow of every model variant (`docs/variants.md`) on the paper's sticky
chain and on one random chain.

Integrates each ingredient alone and the full combination, writes the table
`docs/figures/variants_table.md` (pasted into docs/variants.md), the raw
numbers `docs/figures/variants.json`, and the figures
`docs/figures/variants_{sticky,random}_{panels,overlay}.{png,pdf}`.

    python examples/variants.py [--t1 5000] [--out docs/figures] [--runs DIR]

Each trajectory is saved under `--runs` (a rerun skips those already there;
`--report-only` rebuilds the table and figures from them).
"""

import argparse
import json
import tempfile
from pathlib import Path

import numpy as np

import gradflow as gf
from gradflow import plot


VARIANTS = [
    gf.Model(),
    gf.Model(heads=2),
    gf.Model(value=True),
    gf.Model(residual=True),
    gf.Model(norm="rms"),
    gf.Model(norm="layer"),
    gf.Model(layers=2),
    gf.Model(heads=2, layers=2, value=True, residual=True, norm="rms"),
]
SCENARIOS = {
    "sticky": lambda: gf.chains.sticky(6, 0.5, 0.5, 0.05),
    "random": lambda: gf.chains.random(6, seed=1),
}
WIDTH, INIT_SCALE, SEED = 8, 1e-3, 0


def field(record, key):
    """One field of a stage or event record (dicts today, typed records soon)."""
    return record[key] if isinstance(record, dict) else getattr(record, key)


def plateau_growth_rate(traj) -> float:
    """d/dt of log sqrt(|WQ|_F |WK|_F), fitted over the second half of the first
    plateau after condensation (first saddle entry to the next escape), where
    the query/key matrices grow along the plateau's unstable mode. NaN if the
    flow never enters and leaves such a plateau."""
    events = [(field(e, "name"), field(e, "t")) for e in traj.events]
    entries = [t for n, t in events if n == "saddle_entry"]
    if not entries:
        return float("nan")
    t0 = entries[0]
    escapes = [t for n, t in events if n == "saddle_escape" and t > t0]
    if not escapes:
        return float("nan")
    t1 = escapes[0]
    ts = traj.ts
    keep = (ts >= 0.5 * (t0 + t1)) & (ts <= t1)
    if keep.sum() < 3:
        return float("nan")
    y = 0.5 * np.log(traj.extras["norm_WQ"][keep] * traj.extras["norm_WK"][keep])
    return float(np.polyfit(ts[keep], y, 1)[0])


def summarise(traj, model, wall) -> dict:
    chain = traj.problem.chain
    pi = np.asarray(chain.pi)
    rank = {int(k): r for r, k in enumerate(np.argsort(-pi))}  # 0: most frequent
    stages = [field(s, "name") for s in traj.stages]
    focus = [s for s in traj.stages if field(s, "name") == "focus"]
    first_focus = int(field(focus[0], "tokens")[0]) if focus else None
    escapes = [
        float(field(e, "t")) for e in traj.events if field(e, "name") == "saddle_escape"
    ]
    x = traj.extras
    return {
        "model": model.as_dict(),
        "label": model.label,
        "num_parameters": int(traj.params[0].num_parameters),
        "stages": stages,
        "first_focus_token": first_focus,
        "first_focus_pi_rank": None if first_focus is None else rank[first_focus],
        "escape_times": escapes,
        "plateau_growth_rate": plateau_growth_rate(traj),
        "min_att_entropy_over_H_pi": float(
            x["att_entropy"].min() / float(chain.unigram_entropy)
        ),
        "final_stable_rank_W0": float(x["stable_rank_W0"][-1]),
        "final_loss": float(traj.loss[-1]),
        "conditional_entropy": float(chain.conditional_entropy),
        "unigram_entropy": float(chain.unigram_entropy),
        "min_loss_minus_floor": float(
            traj.loss.min() - float(chain.conditional_entropy)
        ),
        "ok": bool(traj.ok),
        "message": traj.message,
        "num_steps": int(traj.stats.num_steps),
        "wall_time": wall,
    }


def _fmt_times(ts):
    return ", ".join(f"{t:.0f}" for t in ts[:4]) + (" …" if len(ts) > 4 else "") or "—"


def _fmt_stages(names):
    short = {
        "condensation": "C",
        "plateau": "P",
        "focus": "F",
        "dilution": "D",
        "new_direction": "N",
    }
    return " ".join(short.get(n, n) for n in names) or "—"


def table(rows: list[dict]) -> str:
    head = (
        "| scenario | variant | params | stages | first focus (π rank) | saddle escapes t "
        "| plateau WQ,WK rate | min attn entropy / H(π) | stable rank W0 (end) "
        "| final L − H(cond) | steps | wall s |\n"
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n"
    )
    lines = []
    for r in rows:
        focus = (
            "—"
            if r["first_focus_token"] is None
            else f"{r['first_focus_token']} ({r['first_focus_pi_rank']})"
        )
        rate = r["plateau_growth_rate"]
        lines.append(
            f"| {r['scenario']} | {r['label']} | {r['num_parameters']} "
            f"| {_fmt_stages(r['stages'])} | {focus} | {_fmt_times(r['escape_times'])} "
            f"| {'—' if not np.isfinite(rate) else f'{rate:.2e}'} "
            f"| {r['min_att_entropy_over_H_pi']:.3f} | {r['final_stable_rank_W0']:.2f} "
            f"| {r['final_loss'] - r['conditional_entropy']:.2e} | {r['num_steps']} "
            f"| {r['wall_time']:.3g} |"
        )
    return head + "\n".join(lines) + "\n"


COLORS = [
    "#000000",
    "#e6194b",
    "#3cb44b",
    "#4363d8",
    "#f58231",
    "#911eb4",
    "#42d4f4",
    "#a9a9a9",
]


def overlay_figure(name, trajs):
    plt = plot.pyplot()
    fig, axes = plt.subplots(2, 2, figsize=(11, 8.2), layout="constrained")
    chain = next(iter(trajs.values())).problem.chain
    floor = float(chain.conditional_entropy)
    top = int(np.argmax(np.asarray(chain.pi)))
    for (label, traj), color in zip(trajs.items(), COLORS):
        t = traj.ts[1:]
        x = {k: v[1:] for k, v in traj.extras.items() if np.ndim(v) >= 1}
        axes[0, 0].semilogx(t, traj.loss[1:], color=color, label=label)
        axes[0, 1].semilogx(
            t, x["att_entropy"] / float(chain.unigram_entropy), color=color
        )
        axes[1, 0].semilogx(t, x["att_mass"][:, top], color=color)
        sv = x["sv_W0"]
        axes[1, 1].loglog(t, sv[:, 1] / sv[:, 0], color=color)
    for level, text in (
        (np.log(chain.d), r"$\log d$"),
        (float(chain.unigram_entropy), r"$H(\pi)$"),
        (floor, r"$H_{\mathrm{cond}}$"),
    ):
        axes[0, 0].axhline(level, color="0.4", ls=":", lw=0.8)
        axes[0, 0].text(traj.ts[1], level, text, va="bottom", fontsize=8)
    axes[0, 0].set(ylabel="population loss", title="loss")
    axes[0, 1].set(
        ylabel=r"$\sum_i \pi_i H(\bar A_i) / H(\pi)$", title="attention entropy"
    )
    axes[1, 0].set(
        ylabel=rf"$\sum_i \pi_i \bar A_{{i,{top}}}$",
        title=f"attention mass on the most frequent token ({top})",
    )
    axes[1, 1].set(
        ylabel=r"$\sigma_2/\sigma_1$ of $W_0$", title="second embedding direction"
    )
    for ax in axes.flat:
        ax.set_xlabel("t")
        ax.grid(alpha=0.3, which="both", lw=0.4)
    # below the panels, where it hides no curve (norm=rms and norm=layer nearly
    # coincide in loss, as do layers=2 and the minimal model until t = 45)
    handles, names = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, names, fontsize=8, loc="outside lower center", ncol=4)
    fig.suptitle(
        f"Model variants on the {name} chain (d = {chain.d}, m = {WIDTH}, "
        f"init_scale = {INIT_SCALE:g}); $\\bar A$: last layer, heads averaged"
    )
    return fig


def panels_figure(name, trajs):
    plt = plot.pyplot()
    n = len(trajs)
    fig, axes = plt.subplots(
        2, (n + 1) // 2, figsize=(16, 6.5), sharex=True, constrained_layout=True
    )
    chain = next(iter(trajs.values())).problem.chain
    levels = gf.markov.entropy_bounds(chain)
    for ax, (label, traj) in zip(axes.flat, trajs.items()):
        t = traj.ts[1:]
        ax.semilogx(t, traj.loss[1:], color="k", lw=1.4)
        for key in ("log_d", "unigram", "conditional"):
            if key in levels:
                ax.axhline(float(levels[key]), color="0.5", ls=":", lw=0.8)
        # plateaus (P in the table) are the flat stretches of the loss; shaded
        # they would hide the stages they overlap
        plot.shade_stages(ax, [s for s in traj.stages if s.name != "plateau"])
        twin = ax.twinx()
        twin.semilogx(
            t,
            traj.extras["att_entropy"][1:] / float(chain.unigram_entropy),
            color="#ff9f1c",
            lw=1.0,
        )
        twin.set_ylim(0, 1.05)
        twin.tick_params(axis="y", colors="#ff9f1c", labelsize=7)
        ax.set_xlim(t[0], t[-1])
        ax.set_ylim(levels["conditional"] - 0.03, levels["log_d"] + 0.03)
        ax.set_title(label, fontsize=9)
    for ax in axes[-1]:
        ax.set_xlabel("t")
    axes.flat[0].set_ylabel("population loss (black)")
    fig.suptitle(
        f"{name} chain: loss (black), attention entropy / H(π) (orange), "
        "stages shaded (grey condensation, orange focus, teal dilution, "
        "purple new direction; plateaus not shaded)"
    )
    return fig


def run_all(scenarios, t1, runs: Path) -> None:
    """Integrates every (scenario, variant), saving each trajectory to `runs`
    (skipped if already there: the study can be resumed)."""
    runs.mkdir(parents=True, exist_ok=True)
    for name in scenarios:
        chain = SCENARIOS[name]()
        for model in VARIANTS:
            path = runs / f"{name}_{model.label}.npz"
            if path.exists():
                continue
            traj = gf.integrate(
                chain,
                INIT_SCALE,
                width=WIDTH,
                seed=SEED,
                t1=t1,
                model=model,
                run=gf.Run(progress=False),
            )
            traj.save(path)
            print(
                f"{name:7s} {model.label:45s} steps {traj.stats.num_steps:6d} "
                f"wall {traj.stats.wall_time:7.1f} s  loss {traj.loss[-1]:.6f}",
                flush=True,
            )


def report(scenarios, t1, runs: Path, out: Path) -> list[dict]:
    """The table, the JSON and the figures, from the saved trajectories."""
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in scenarios:
        trajs = {}
        for model in VARIANTS:
            path = runs / f"{name}_{model.label}.npz"
            if not path.exists():
                print(f"not run: {path}")
                continue
            traj = gf.load(path)
            assert traj.settings.t1 == t1, (traj.settings.t1, t1)
            rows.append(
                {"scenario": name, **summarise(traj, model, traj.stats.wall_time)}
            )
            trajs[model.label] = traj
        for kind, make in (("overlay", overlay_figure), ("panels", panels_figure)):
            if not trajs:
                continue
            fig = make(name, trajs)
            plot.save_figure(fig, out / f"variants_{name}_{kind}")
            plot.pyplot().close(fig)
    settings = {
        "t1": t1,
        "width": WIDTH,
        "init_scale": INIT_SCALE,
        "seed": SEED,
        "scenarios": {
            "sticky": "gf.chains.sticky(6, 0.5, 0.5, 0.05)",
            "random": "gf.chains.random(6, seed=1)",
        },
        "gradflow": gf.__version__,
    }
    (out / "variants.json").write_text(
        json.dumps({"settings": settings, "rows": rows}, indent=1, default=float)
    )
    (out / "variants_table.md").write_text(table(rows))
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--t1", type=float, default=5_000.0)
    parser.add_argument("--out", type=Path, default=Path("docs/figures"))
    parser.add_argument(
        "--runs", type=Path, default=Path(tempfile.gettempdir()) / "gradflow_variants"
    )
    parser.add_argument("--scenarios", nargs="*", default=list(SCENARIOS))
    parser.add_argument("--report-only", action="store_true")
    args = parser.parse_args()
    if not args.report_only:
        run_all(args.scenarios, args.t1, args.runs)
    print(table(report(args.scenarios, args.t1, args.runs, args.out)))


if __name__ == "__main__":
    main()
