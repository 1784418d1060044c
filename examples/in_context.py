"""In-context regression with linear attention: the staircase, and how its plateaus
depend on the initial scale and on the context length.

The model of Zhang, Singh, Latham and Saxe (ICML 2025): linear attention with
separate key and query (rank one, three heads) reads N example pairs of a
linear task on inputs of covariance eigenvalues 1, 0.5, 0.25 and predicts the
query's label. Its exact population flow rests on the levels L_{1..k}, one
eigen-direction learnt a drop, largest eigenvalue first; every escape is
cubic (no exponential rate: `gf.theory_report` measures the cubic law), so
each direction is learnt at a time inversely proportional to the initial
scale, not to its logarithm.

1. The staircase (init 1e-2, N = 16): its figure and theory report.
2. Over the initial scale (one gf.sweep): the half-learning time t_j of each
   direction from random starts (three seeds) and from the aligned balanced
   start, whose time has a closed form (`gf.theory.in_context_learning_time`);
   the slope of log t_j against log(1/scale) is 1.
3. Over the context length N (one gf.sweep per N, two starts each): the levels
   L_{1..k}(N) against the closed form, and the half-learning times, which
   hardly depend on N (near a saddle a free head grows at lambda_j^2, whatever
   N is; N enters through the learnt values only).

Writes docs/figures/problems_in_context_staircase.png and
problems_in_context_sweeps.png (and .pdf), and the tables between the markers
`<!-- in-context-sweeps -->` of docs/problems.md (unless --no-doc).

    python examples/in_context.py [--no-doc] [--quick]
"""

import argparse
import os
import time
from pathlib import Path

import jax
import numpy as np

import gradflow as gf
from gradflow import plot


ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "problems.md"
BEGIN, END = "<!-- in-context-sweeps -->", "<!-- /in-context-sweeps -->"
LAM = np.array([1.0, 0.5, 0.25])
QUIET = gf.Run(progress=False)


def problem_of(context: int) -> gf.problems.InContextRegression:
    return gf.problems.InContextRegression(LAM, context=context, heads=3, key_dim=1)


def staircase(out: Path) -> tuple[gf.Trajectory, list[dict]]:
    """The staircase at N = 16 from a random start of scale 1e-2."""
    traj = gf.flow(problem_of(16), init_scale=1e-2, t1=5000.0, run=QUIET)
    plot.save_figure(plot.staircase_figure(traj), out / "problems_in_context_staircase")
    rows = gf.theory_report(traj, points=[])
    print(gf.theory.format_report(rows))
    return traj, rows


def _stack(points):
    return jax.tree.map(lambda *x: np.stack(x), *points)


def over_init_scale(scales, seeds) -> dict:
    """Half-learning times over the initial scale: random starts (one sweep)
    and aligned balanced starts (one sweep of `params`)."""
    problem = problem_of(16)
    t1 = 3.0 / (LAM[-1] ** 2 * min(scales))
    random = gf.sweep(problem, init_scale=scales, seeds=seeds, t1=t1, run=QUIET)
    starts = _stack([gf.theory.in_context_aligned_start(problem, c) for c in scales])
    aligned = gf.sweep(problem, params=starts, t1=t1, run=QUIET)
    t_random = np.array([gf.theory.in_context_learnt_times(t) for t in random])
    t_aligned = np.array([gf.theory.in_context_learnt_times(t) for t in aligned])
    predicted = np.array(
        [gf.theory.in_context_learning_time(problem, c) for c in scales]
    )
    eps = np.array([m.init_scale for m in random.members])
    slopes = [
        float(np.polyfit(np.log(1 / eps), np.log(t_random[:, j]), 1)[0])
        for j in range(LAM.size)
    ]
    x = np.log(1 / np.array(scales))
    aligned_slopes = [
        float(np.polyfit(x, np.log(t_aligned[:, j]), 1)[0]) for j in range(LAM.size)
    ]
    # the closed form's own slope: 1 as the scale goes to 0, a little more here
    # (t = 1/(lambda^2 c0) - O(1))
    predicted_slopes = [
        float(np.polyfit(x, np.log(predicted[:, j]), 1)[0]) for j in range(LAM.size)
    ]
    return dict(
        scales=list(scales),
        eps=eps.tolist(),
        t1=t1,
        ok=int(np.sum(random.ok)) + int(np.sum(aligned.ok)),
        members=len(random) + len(aligned),
        t_random=t_random.tolist(),
        t_aligned=t_aligned.tolist(),
        predicted=predicted.tolist(),
        aligned_error=float(np.nanmax(np.abs(t_aligned / predicted - 1))),
        slopes=slopes,
        aligned_slopes=aligned_slopes,
        predicted_slopes=predicted_slopes,
        scaled=(t_random * eps[:, None] * LAM**2).tolist(),
    )


def over_context(contexts, scale) -> dict:
    """Levels and half-learning times over the context length N: for each N
    one sweep of two starts (aligned balanced, random), compiled once per N
    (N is the problem's static configuration)."""
    rows = []
    for N in contexts:
        problem = problem_of(N)
        random = problem.init(jax.random.key(0), scale)
        aligned = gf.theory.in_context_aligned_start(problem, scale)
        sw = gf.sweep(problem, params=_stack([aligned, random]), t1=5000.0, run=QUIET)
        levels = gf.theory.in_context_staircase(problem)
        errors = []
        for traj in sw:
            report = gf.theory_report(traj, points=[])
            errors += [r["rel_error"] for r in report if "level" in r["quantity"]]
        rows.append(
            dict(
                N=N,
                levels=levels.tolist(),
                level_error=float(max(errors)),
                plateaus=len(errors),
                predicted=gf.theory.in_context_learning_time(problem, scale).tolist(),
                t_aligned=gf.theory.in_context_learnt_times(sw[0]).tolist(),
                t_random=gf.theory.in_context_learnt_times(sw[1]).tolist(),
                ok=int(np.sum(sw.ok)),
            )
        )
        print(f"N = {N}: levels {np.round(levels, 4)}, largest error {max(errors):.1e}")
    return dict(scale=scale, rows=rows)


def figure(init: dict, context: dict, out: Path) -> None:
    plt = plot.pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(14, 4.3))
    ax = axes[0]
    scales = np.array(init["scales"])
    eps, t_random = np.array(init["eps"]), np.array(init["t_random"])
    predicted = np.array(init["predicted"])
    for j in range(LAM.size):
        color = f"C{j}"
        ax.plot(eps, t_random[:, j], "o", color=color, ms=4, alpha=0.7,
                label=rf"direction {j + 1} ($\lambda$ = {LAM[j]:g}): random starts")  # fmt: skip
        ax.plot(scales, np.array(init["t_aligned"])[:, j], "s", color=color, mfc="none",
                ms=6, label="aligned start" if j == 0 else None)  # fmt: skip
        ax.plot(scales, predicted[:, j], "-", color=color, lw=1,
                label="closed form (aligned)" if j == 0 else None)  # fmt: skip
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xticks(scales, [f"{s:g}" for s in scales])
    ax.minorticks_off()
    ax.set_ylim(top=60 * float(np.nanmax(t_random)))
    ax.set_xlabel("initial scale")
    ax.set_ylabel("half-learning time $t_j$")
    ax.set_title("the 1/init_scale law (slope -1)", fontsize=10)
    ax.legend(fontsize=7, frameon=False, loc="upper right")
    rows = context["rows"]
    Ns = np.array([r["N"] for r in rows])
    levels = np.array([r["levels"] for r in rows])
    ax = axes[1]
    grid = np.unique(np.geomspace(Ns.min(), Ns.max(), 200).round().astype(int))
    curves = np.array(
        [gf.theory.in_context_staircase(problem_of(int(n))) for n in grid]
    )
    for k in range(levels.shape[1]):
        ax.plot(grid, curves[:, k], "-", color=f"C{k}", lw=1,
                label=f"$L_{{1..{k}}}$" if k else "$L(0)$")  # fmt: skip
        ax.plot(Ns, levels[:, k], "o", color=f"C{k}", ms=4)
    ax.set_xscale("log")
    ax.set_xlabel("context length $N$")
    ax.set_ylabel("plateau level")
    ax.set_title("levels: closed form (lines), flow's plateaus (dots)", fontsize=10)
    ax.legend(fontsize=7, frameon=False)
    ax = axes[2]
    for j in range(LAM.size):
        color = f"C{j}"
        ax.plot(Ns, [r["t_random"][j] for r in rows], "o-", color=color, ms=4, lw=0.8,
                label=f"direction {j + 1}: random start")  # fmt: skip
        ax.plot(Ns, [r["t_aligned"][j] for r in rows], "s", color=color, mfc="none",
                ms=6, label="aligned start" if j == 0 else None)  # fmt: skip
        ax.plot(Ns, [r["predicted"][j] for r in rows], "-", color=color, lw=1,
                label="closed form (aligned)" if j == 0 else None)  # fmt: skip
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("context length $N$")
    ax.set_ylabel("half-learning time $t_j$")
    ax.set_ylim(top=20 * max(max(r["t_random"]) for r in rows))
    ax.set_title(f"times over N (init {context['scale']:g})", fontsize=10)
    ax.legend(fontsize=7, frameon=False, loc="upper center", ncol=2)
    fig.tight_layout()
    plot.save_figure(fig, out / "problems_in_context_sweeps")


def markdown(init: dict, context: dict, report: list[dict], meta: str) -> str:
    lines = [
        f"Measured with `python examples/in_context.py` ({meta}).",
        "",
        "**The staircase's theory report** (`gf.theory_report(traj)`, the flow of the "
        "example above; `problems_in_context_staircase.png`):",
        "",
        "| quantity | predicted | measured | error |",
        "| --- | --- | --- | --- |",
    ]
    for r in report:
        lines.append(
            f"| {r['quantity']} | {r['predicted']:.6g} | {r['measured']:.6g} | "
            f"{r['rel_error']:.1e} |"
        )
    scaled = np.array(init["scaled"])
    lines += [
        "",
        f"**Over the initial scale** ({init['members']} members in two `gf.sweep`s, "
        f"{init['ok']} ok, t1 = {init['t1']:.0f}; scales "
        + ", ".join(f"{s:g}" for s in init["scales"])
        + f", {len(init['eps']) // len(init['scales'])} random starts each; "
        "`problems_in_context_sweeps.png`): the slope of $\\log t_j$ against "
        "$\\log(1/\\text{scale})$, predicted 1; from the aligned start the half-learning "
        "times against the closed form; from random starts $t_j\\,\\text{scale}\\,"
        "\\lambda_j^2$:",
        "",
        "| direction | slope: random starts | slope: aligned start | slope: closed form "
        "(aligned) | aligned times vs closed form | t scale lambda^2 (random) |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for j in range(LAM.size):
        lines.append(
            f"| {j + 1} ($\\lambda$ = {LAM[j]:g}) | {init['slopes'][j]:.4f} | "
            f"{init['aligned_slopes'][j]:.4f} | {init['predicted_slopes'][j]:.4f} | "
            f"{init['aligned_error']:.1e} (largest, all) | "
            f"{scaled[:, j].min():.3g} .. {scaled[:, j].max():.3g} |"
        )
    lines += [
        "",
        f"**Over the context length** (init {context['scale']:g}, one aligned and one "
        "random start per $N$): the levels $L_{1..k}(N)$ of the closed form and the "
        "largest relative error of the flow's plateaus; the half-learning times "
        "$t_1, t_2, t_3$:",
        "",
        "| N | L(0) | L_1 | L_1..2 | L_1..3 | level error | aligned: closed form | "
        "aligned: flow | random start |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in context["rows"]:
        lines.append(
            f"| {r['N']} | "
            + " | ".join(f"{x:.4g}" for x in r["levels"])
            + f" | {r['level_error']:.1e} | "
            + ", ".join(f"{x:.5g}" for x in r["predicted"])
            + " | "
            + ", ".join(f"{x:.5g}" for x in r["t_aligned"])
            + " | "
            + ", ".join(f"{x:.4g}" for x in r["t_random"])
            + " |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--no-doc", action="store_true", help="do not write the page")
    parser.add_argument("--quick", action="store_true", help="fewer members")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "figures")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    _, report = staircase(args.out)
    scales = [3e-2, 1e-2, 3e-3] if args.quick else [3e-2, 1e-2, 3e-3, 1e-3]
    seeds = range(2) if args.quick else range(3)
    init = over_init_scale(scales, seeds)
    print("slopes of log t_j against log(1/scale):", np.round(init["slopes"], 4))
    contexts = [2, 16, 256] if args.quick else [1, 2, 4, 8, 16, 64, 256]
    context = over_context(contexts, 1e-2)
    figure(init, context, args.out)
    wall = time.perf_counter() - start

    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    meta = f"{wall:.0f} s, load average {load}"
    text = markdown(init, context, report, meta)
    print(text)
    if not args.no_doc:
        gf.replace_between_markers(PAGE, BEGIN, END, text)
        print(f"wrote {PAGE}")


if __name__ == "__main__":
    main()
