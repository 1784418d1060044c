"""The tables of `docs/problems.md` from the measured numbers."""

import gradflow as gf

from .common import BEGIN, END, PAGE


def _table(rows) -> list[str]:
    lines = [
        "| quantity | formula | source | predicted | measured | error | note |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        lines.append(
            f"| {r['quantity']} | `{r['formula']}` | {r['source']} | "
            f"{r['predicted']:.6g} | {r['measured']:.6g} | {r['error']:.1e} | "
            f"{r['note']} |"
        )
    return lines


def _sgd_row(r: dict, distance: bool = False) -> str:
    """A row of an SGD table: the run, the flow's crossing times, SGD's
    relative errors on them (and with `distance` the final parameter
    distance), the wall time."""
    extra = f" {r['final_param_distance']:.2g} |" if distance else ""
    return (
        f"| {r['problem']} | {r['lr']:g} | {r['batch']} | {r['steps']:,} | "
        + ", ".join(f"{t:.4g}" for t in r["t_flow"])
        + " | "
        + ", ".join(f"{100 * e:.2g} %" for e in r["errors"])
        + f" |{extra} {r['wall']:.1f} |"
    )


def _provenance(out: dict) -> str:
    """Where each part of the page was measured: the commit, date and load of
    its last run (parts run together share one)."""
    metas = out.get("part_meta") or {}
    groups: dict[tuple, list[str]] = {}
    for part in ("literature", "sgd", "sweeps", "performance"):
        m = metas.get(part, out["meta"])
        groups.setdefault((m["commit"], m["date"], m["load"]), []).append(part)
    return "; ".join(
        f"{', '.join(parts)} at commit `{c}` ({d}, load average {load})"
        for (c, d, load), parts in groups.items()
    )


def markdown(out: dict) -> str:
    lines = [
        "Measured with `python -m benchmarks.problems` "
        + _provenance(out)
        + " on the 2-core machine; results in `docs/figures/problems.json`.",
        "",
        "**The deep linear network** (Saxe, McClelland, Ganguli 2014; `DeepLinear` "
        "5-4-4, $s = (3, 1, 0.3)$, random singular bases, $\\Sigma_{xx} = I$):",
        "",
        *_table(out["deep_linear_rows"]),
        "",
        "**The soft committee machine** (Saad, Solla 1995; `Committee` $K = M = 3$, "
        "$N = 6$, orthonormal teacher):",
        "",
        *_table(out["committee_rows"]),
        "",
        "**Closed forms against Monte Carlo** (`sample`, `sample_loss`):",
        "",
        *_table(out["monte_carlo_rows"]),
        "",
        "**Saddle rates of the deep linear network**: predicted $s_{k+1}$; "
        "`gf.linearize` at the exact partial solution; `gf.critical_points` at the "
        "refined plateau of the random-start flow; along the flow, the rise of "
        "$|\\nabla L|$ after the plateau (`flank_rate`) and half the growth rate of "
        "$u_{k+1}$ on the plateau (from where $|\\nabla L|$ has risen to 3x its "
        "least value to the plateau's end):",
        "",
        "| saddle | loss | predicted | Hessian (exact saddle) | refined plateau | "
        "flank rate | mode growth / 2 | largest error |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in out["deep_linear_rates"]:
        errs = [
            abs(r[k] - r["predicted"]) / r["predicted"]
            for k in ("hessian", "refined", "flank", "growth")
        ]
        lines.append(
            f"| {r['saddle']} | {r['loss']:.6g} | {r['predicted']:.6g} | "
            f"{r['hessian']:.6g} | {r['refined']:.6g} | {r['flank']:.4g} | "
            f"{r['growth']:.4g} | {100 * max(errs):.2g} % |"
        )
    lt = out["learning_time_random"]
    lines += [
        "",
        f"Three layers (`hidden=(4, 4)`): the Hessian at the origin is zero (largest "
        f"$|\\lambda|$ = {out['three_layer_origin_max_eigenvalue']:.1e}): a "
        "degenerate saddle, left polynomially, not exponentially. Learning time "
        "against $1/s$ (eight modes $s$ from 4 to 0.25, "
        "`problems_deep_linear_learning_time.png`): from the balanced start the "
        "half-learning times match $\\log(s/u_0 - 1)/(2s)$ to "
        f"{out['learning_time_max_error']:.1e} (rtol 1e-8); from a random start "
        f"(scale 1e-3) they are proportional to $1/s$: $t_a s_a$ lies between "
        f"{lt['t_times_s_min']:.3g} and {lt['t_times_s_max']:.3g} over the eight "
        "modes ($\\frac12\\log(1/u_0)$ with an effective $u_0$ of "
        f"{lt['u0_effective']:.2g}, of the order of the scale squared).",
        "",
        "**SGD on the flow's time axis** (online SGD, fresh batches; the times the "
        "population loss crosses the levels half way between the plateaus, against "
        "the flow's from the same start; `problems_sgd.png`):",
        "",
        "| problem | lr | batch | steps | crossing times (flow) | crossing errors | wall s |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    lines += [_sgd_row(r) for r in out["sgd"]]
    ph = out["phase"]
    lines += [
        "",
        f"**The committee's plateau over init scale and teacher norm** (`gf.sweep` of "
        f"{ph['members']} members: $\\tau$ x 5 init scales x 2 seeds, rtol 1e-8, "
        f"t1 = {ph['t1']:.0f}, {ph['wall']:.0f} s; {ph['ok']} ok; "
        "`problems_committee_phase.png`). Slopes against $\\log(1/\\varepsilon)$:",
        "",
        "| tau | rate lambda | escape-time slope | 1/lambda | error | plateau-length slope | "
        "1/(lambda + 1/2t) | error |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in ph["rows"]:
        e1 = abs(r["escape_slope"] - r["escape_predicted"]) / r["escape_predicted"]
        e2 = abs(r["length_slope"] - r["length_predicted"]) / r["length_predicted"]
        lines.append(
            f"| {r['tau']:g} | {r['rate']:.4g} | {r['escape_slope']:.4g} | "
            f"{r['escape_predicted']:.4g} | {100 * e1:.2g} % | "
            f"{r['length_slope']:.4g} | {r['length_predicted']:.4g} | "
            f"{100 * e2:.2g} % |"
        )
    lines += [
        "",
        "**Performance** (side by side in this run, interleaved repeats, the best of "
        "three, compilation excluded; speed-up = wall time / the default's; crossing "
        "error: the largest relative error of the times the loss falls through the "
        "middle of each drop, against Tsit5 at rtol 1e-12; SciPy calls a jitted gradient "
        "from Python and locates no events, gradflow's runs locate the saddle "
        "events and find the stages):",
        "",
        "| problem | t1 | solver | wall s | speed-up | steps | gradients | crossing error |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in out["performance"]:
        steps = "" if r["steps"] is None else f"{r['steps']:,}"
        lines.append(
            f"| {r['case']} | {r['t1']:g} | {r['solver']} | {r['wall']:.3f} | "
            f"{r['speedup']:.2f}x | {steps} | {r['grads']:,} | "
            f"{r['crossing_error']:.1e} |"
        )
    return "\n".join(lines + in_context_markdown(out))


def _meta(part: dict) -> str:
    m = part.get("meta", {})
    return (
        f"commit `{m.get('commit', '?')}`, {m.get('date', '?')}, load average "
        f"{m.get('load', '?')}"
    )


def in_context_markdown(out: dict) -> list[str]:
    """The in-context tables, each part with its own commit, date and load."""
    lines: list[str] = []
    part = out.get("in_context")
    if part:
        lines += [
            "",
            "**In-context regression with linear attention** (Zhang, Singh, Latham, "
            "Saxe 2025, on the default data of their code `yedizhang/linattn-icl`: "
            "$D = 4$, eigenvalues 0.4, 0.3, 0.2, 0.1 in a random basis, $N = 19$, no "
            "noise; separate key and query: 5 heads of rank one, init $10^{-2}$; "
            "merged: 8 heads, init $10^{-6}$, as in their README; measured with "
            "`python -m benchmarks.problems --parts in_context`, "
            f"{_meta(part)}):",
            "",
            *_table(part["rows"]),
            "",
            "SGD on the flow's time axis (online SGD, fresh sequences; the times the "
            "population loss crosses the levels half way between the plateaus, "
            "against the flow's from the same start, init 0.05; "
            "`problems_in_context_sgd.png`):",
            "",
            "| problem | lr | batch | steps | crossing times (flow) | crossing errors "
            "| final parameter distance | wall s |",
            "| --- | --- | --- | --- | --- | --- | --- | --- |",
        ]
        lines += [_sgd_row(r, distance=True) for r in part["sgd"]]
    speed = out.get("in_context_speed")
    if speed:
        before = ", ".join(f"{x:.1f}" for x in speed["load_before"])
        after = ", ".join(f"{x:.1f}" for x in speed["load_after"])
        lines += [
            "",
            f"**Speed on a {speed['drops']}-direction staircase** ({speed['case']}, "
            f"t1 = {speed['t1']:g}; side by side in one run, interleaved repeats, the "
            "best of three, compilation excluded; crossing error against Tsit5 at rtol "
            "1e-12; measured with `python -m benchmarks.problems --parts "
            f"in_context_speed`, {_meta(speed)}). "
            + (
                f"**Taken under load** (load average {before} before, {after} "
                f"after, on {speed['cpus']} cores): the walls and ratios are "
                "indicative only, to be retaken on a quiet machine."
                if max(speed["load_before"][0], speed["load_after"][0]) > 1.5
                else f"On a quiet machine (load average {before} before, {after} "
                f"after, on {speed['cpus']} cores; the load after is the run's own)."
            ),
            "",
            "| solver | wall s | speed-up | steps | gradients | crossing error |",
            "| --- | --- | --- | --- | --- | --- |",
        ]
        for r in speed["rows"]:
            steps = "" if r["steps"] is None else f"{r['steps']:,}"
            lines.append(
                f"| {r['solver']} | {r['wall']:.3f} | {r['speedup']:.2f}x | {steps} | "
                f"{r['grads']:,} | {r['crossing_error']:.1e} |"
            )
    return lines


def write_page(text: str) -> None:
    gf.replace_between_markers(PAGE, BEGIN, END, text)
