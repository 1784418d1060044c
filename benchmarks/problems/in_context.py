"""The part `in_context`: in-context regression with linear attention against
Zhang, Singh, Latham and Saxe (ICML 2025) on the default data of their code
(yedizhang/linattn-icl: D = 4 inputs of covariance eigenvalues proportional
to 1, 2, 3, 4, normalised to trace 1, in a random basis; sequences of 20
tokens, N = 19 examples and the query; no label noise), and SGD on the flow's
time axis.

Their loss is the mean squared error, twice ours: gradient descent at rate
`lr` for `k` epochs on theirs is the flow of ours to t = 2 lr k."""

import itertools
import math
import time

import jax
import numpy as np

import gradflow as gf
from gradflow import plot

from .common import FIGURES, crossing, row


ZHANG = "Zhang, Singh, Latham, Saxe (2025)"
LAM = np.arange(4, 0, -1) / 10.0  # 0.4, 0.3, 0.2, 0.1: their default, largest first


def zhang_covariance(seed: int = 0) -> np.ndarray:
    """Their default covariance: eigenvalues 1..4 over 10, a random basis."""
    rng = np.random.default_rng(seed)
    Q = np.linalg.qr(rng.standard_normal((4, 4)))[0]
    return Q @ np.diag(LAM) @ Q.T


def separate(heads: int = 5) -> gf.problems.InContextRegression:
    """Separate key and query, rank one (their `attnS --head 5`)."""
    return gf.problems.InContextRegression(
        zhang_covariance(), context=19, heads=heads, key_dim=1
    )


def merged() -> gf.problems.InContextRegression:
    """Merged key-query (their `attnM --head 8`)."""
    return gf.problems.InContextRegression(zhang_covariance(), context=19, heads=8)


def _report_rows(traj, source: str, prefix: str) -> list[dict]:
    out = []
    for r in gf.theory_report(traj, points=[]):
        if r["quantity"].startswith("learnt components"):
            continue
        formula = (
            "L_S = tau/2 - 1/2 sum_S lambda^2 / A"
            if "level" in r["quantity"]
            else "lambda_j^2 (cubic)"
            if "cubic" in r["quantity"]
            else "closed-form spectrum"
        )
        out.append(
            row(
                f"{prefix}{r['quantity']}",
                formula,
                source,
                r["predicted"],
                r["measured"],
                r["note"],
            )  # fmt: skip
        )
    return out


def _pcr_rows(traj, problem) -> list[dict]:
    r"""At each plateau $\Gamma$ is principal component regression on the
    learnt directions: $\Gamma_S = \sum_{i\in S}\gamma_iu_iu_i^\top$."""
    lam, U = problem.eigen()
    gamma = 1 / ((1 + 1 / problem.context) * lam + problem.tau() / problem.context)
    ts, g = np.asarray(traj.ts), np.asarray(traj.grad_norm)
    rows = []
    plateaus = [s for s in traj.stages if s.name == "plateau"]
    for k, s in enumerate(plateaus[1:], start=1):
        inside = np.flatnonzero((ts >= s.t_start) & (ts <= s.t_end))
        best = int(inside[np.argmin(g[inside])])
        G = np.asarray(problem.gamma(traj.at(best)))
        target = U[:, :k] @ np.diag(gamma[:k]) @ U[:, :k].T
        err = np.linalg.norm(G - target) / np.linalg.norm(target)
        rows.append(
            row(
                f"plateau {k + 1}: Gamma = PCR on {k} component(s)",
                "Gamma_S = sum_{i<=k} gamma_i u_i u_i^T",
                ZHANG,
                1.0,
                1.0 + err,
                f"|Gamma - Gamma_S| / |Gamma_S| at t = {ts[best]:.4g}",
            )
        )
    return rows


def literature_rows(out: dict) -> list[dict]:
    problem = separate()
    traj = gf.flow(problem, init_scale=1e-2, t1=100_000.0, run=gf.Run(progress=False))
    rows = _report_rows(traj, ZHANG, "separate, r = 1: ")
    halves = gf.theory.in_context_learnt_times(traj)
    rows.append(
        row(
            "separate: directions learnt in decreasing order of eigenvalue",
            "t_1 < t_2 < t_3 < t_4",
            ZHANG,
            1.0,
            float(np.all(np.diff(halves) > 0)),
            "half-learning times " + ", ".join(f"{t:.4g}" for t in halves)
            + "; x lambda^2 init: "
            + ", ".join(f"{t * lam**2 * 1e-2:.3g}" for t, lam in zip(halves, LAM, strict=True)),
        )
    )  # fmt: skip
    rows += _pcr_rows(traj, problem)
    # every set S of directions is a critical point (2^D of them, with H >= D)
    worst = max(
        float(gf.linearize(problem, gf.theory.in_context_saddle(problem, S)).grad_norm)
        for k in range(5)
        for S in _subsets(4, k)
    )
    rows.append(
        row(
            "separate: the 2^4 = 16 critical points (one head a direction)",
            "grad L = 0",
            ZHANG,
            0.0,
            worst,
            "largest |grad L| over all 16 in_context_saddle(S)",
        )
    )
    out["in_context_halves"] = halves.tolist()
    m = merged()
    flow = gf.flow(m, init_scale=1e-6, t1=2000.0, run=gf.Run(progress=False))
    plateaus = [s for s in flow.stages if s.name == "plateau"]
    drops = [s for s in flow.stages if s.name == "drop"]
    rows.append(
        row(
            "merged: one abrupt drop (init 1e-6, 8 heads)",
            "1 plateau (the origin), 1 drop to the minimum",
            ZHANG,
            1.0,
            float(len(drops) == 1 and len(plateaus) == 1),
            f"{len(drops)} drop(s), {len(plateaus)} plateau(s); "
            f"drop from t = {drops[0].t_start:.4g} to {drops[0].t_end:.4g}",
        )
    )
    rows += _report_rows(flow, ZHANG, "merged: ")
    return rows


def _subsets(n: int, k: int):
    return itertools.combinations(range(n), k)


def monte_carlo_rows() -> list[dict]:
    rows = []
    n = 1_000_000
    for key_dim in (2, None):  # with label noise, to check its terms too
        problem = gf.problems.InContextRegression(
            zhang_covariance(), context=19, heads=3, key_dim=key_dim, noise=0.3
        )
        params = problem.init(jax.random.key(1), 0.7)
        tokens, target = problem.sample(jax.random.key(2), n)
        per = np.asarray(
            jax.vmap(lambda x, y, p=params, q=problem: q.sample_loss(p, (x[None], y[None])))(
                tokens, target
            )
        )  # fmt: skip
        se = per.std() / math.sqrt(n)
        exact = float(problem.loss(params))
        rows.append(
            row(
                f"loss vs Monte Carlo: {problem}",
                "closed form (fourth Gaussian moments)",
                "docs/problems.md",
                exact,
                float(per.mean()),
                f"{n:,} sequences, the heads run on the tokens: "
                f"{abs(per.mean() - exact) / se:.2f} standard errors",
            )
        )
    return rows


def sgd_part(out: dict) -> None:
    """Online SGD against the flow from the same start, on one time axis
    (t = lr x step): the times the population loss crosses the levels half
    way between the plateaus."""
    problem = gf.problems.InContextRegression([1.0, 0.5, 0.25], 16, 3, key_dim=1)
    start = problem.init(jax.random.key(0), 0.05)
    t1, batch = 800.0, 256
    flow = gf.flow(problem, params=start, t1=t1, run=gf.Run(progress=False))
    stairs = gf.theory.in_context_staircase(problem)
    levels = 0.5 * (stairs[:-1] + stairs[1:])
    t_flow = [crossing(flow.ts, flow.loss, x) for x in levels]
    plt = plot.pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 4.4))
    keep = flow.ts > 0
    ax.plot(flow.ts[keep], flow.loss[keep], "k", lw=2, label="flow")
    results = []
    for j, lr in enumerate((0.1, 0.05, 0.02)):
        wall = time.perf_counter()
        run = gf.train_sgd(
            problem, start, sgd=gf.SGD(lr=lr, batch_size=batch), t1=t1,
            run=gf.Run(progress=False),
        )  # fmt: skip
        wall = time.perf_counter() - wall
        t_sgd = [crossing(run.ts, run.population_loss, x) for x in levels]
        errors = [abs(a - b) / b for a, b in zip(t_sgd, t_flow, strict=True)]
        comparison = gf.compare(flow, run)
        results.append(
            dict(
                problem=str(problem), lr=lr, batch=batch, steps=int(run.steps[-1]),
                t_flow=t_flow, t_sgd=t_sgd, errors=errors, wall=wall,
                final_param_distance=float(comparison.param_distance[-1]),
            )
        )  # fmt: skip
        k = run.ts > 0
        ax.plot(run.ts[k], run.population_loss[k], color=f"C{j}", lw=1, alpha=0.8,
                label=f"SGD lr {lr:g} (max crossing err {100 * max(errors):.2g} %)")  # fmt: skip
    for x in stairs:
        ax.axhline(x, color="C3", lw=0.6, ls="--")
    ax.set_xscale("log")
    ax.set_xlabel("t = lr x step (SGD), gradient-flow time (flow)")
    ax.set_ylabel("population loss")
    ax.set_title(f"{problem}: online SGD, batch {batch}", fontsize=10)
    ax.legend(fontsize=7, frameon=False)
    fig.tight_layout()
    plot.save_figure(fig, FIGURES / "problems_in_context_sgd")
    out["sgd"] = results


def in_context(out: dict) -> None:
    start = time.perf_counter()
    part: dict = {}
    part["rows"] = literature_rows(part) + monte_carlo_rows()
    sgd_part(part)
    part["wall"] = time.perf_counter() - start
    out["in_context"] = part
