"""The problems beyond the paper against the literature, and the solvers on them
(issue 26): the deep linear network (Saxe, McClelland and Ganguli 2014) and
the soft committee machine (Saad and Solla 1995).

    PYTHONPATH=. python benchmarks/problems.py            # all parts, ~10 min
    PYTHONPATH=. python benchmarks/problems.py --parts performance --no-doc

Every number is measured in this one run (side by side where it is a speed
ratio) and written to `docs/figures/problems.json`; the figures go to
`docs/figures/problems_*.png` (and `.pdf`); the tables are written into
`docs/problems.md` between the markers `<!-- problems-bench -->` and
`<!-- /problems-bench -->` (unless `--no-doc`). With `--parts`, the other
parts are read back from the JSON of an earlier run.

The independent committee-machine solve is SciPy's `DOP853` on the gradient
derived by hand in NumPy (`tests/committee_reference.py`).
"""

import os


os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from gradflow.plot._problems import committee_plateau_length, half_times  # noqa: E402
from jax.flatten_util import ravel_pytree  # noqa: E402

import gradflow as gf  # noqa: E402
from gradflow import plot  # noqa: E402
from gradflow.problems._committee.problem import orthogonal_teacher  # noqa: E402
from gradflow.problems._deep_linear.problem import random_deep_linear  # noqa: E402


ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
import committee_reference as ref  # noqa: E402


FIGURES = ROOT / "docs" / "figures"
JSON = FIGURES / "problems.json"
PAGE = ROOT / "docs" / "problems.md"
BEGIN, END = "<!-- problems-bench -->", "<!-- /problems-bench -->"
PARTS = ("literature", "sgd", "sweeps", "performance")

# The problems of the tests (tests/test_deep_linear.py, tests/test_committee.py)
S = np.array([3.0, 1.0, 0.3])
DEEP = random_deep_linear(S, n_in=5, n_out=4, hidden=(4,), seed=1)
DEEP_KW = dict(init_scale=1e-4, t1=60.0, run=gf.Run(progress=False))
COMMITTEE = gf.problems.Committee(orthogonal_teacher(3, 6), students=3)
COMMITTEE_KW = dict(init_scale=1e-3, t1=1000.0, run=gf.Run(progress=False))


def crossing(ts, loss, level) -> float:
    """The first time `loss` falls through `level` (linear between saves)."""
    below = np.flatnonzero(np.asarray(loss) < level)
    if below.size == 0 or below[0] == 0:
        return math.nan
    i = int(below[0])
    f = (loss[i - 1] - level) / (loss[i - 1] - loss[i])
    return float(ts[i - 1] + f * (ts[i] - ts[i - 1]))


def fit_log_slope(ts, y, lo, hi) -> float:
    """Slope of log(y) against t over the saves with lo <= y <= hi."""
    ok = (y >= lo) & (y <= hi)
    if ok.sum() < 3:
        return math.nan
    return float(np.polyfit(ts[ok], np.log(y[ok]), 1)[0])


def row(quantity, formula, source, predicted, measured, note=""):
    err = abs(measured - predicted) / abs(predicted) if predicted else abs(measured)
    return dict(
        quantity=quantity,
        formula=formula,
        source=source,
        predicted=float(predicted),
        measured=float(measured),
        error=float(err),
        note=note,
    )


def closest(traj, stage):
    ts, g = np.asarray(traj.ts), np.asarray(traj.grad_norm)
    inside = np.flatnonzero((ts >= stage.t_start) & (ts <= stage.t_end))
    return int(inside[np.argmin(g[inside])])


# -- the literature -----------------------------------------------------------------


SAXE = "Saxe, McClelland, Ganguli (2014)"
SAAD = "Saad, Solla (1995)"


def deep_linear_literature(out: dict) -> list[dict]:
    rows = []
    u0 = 1e-3
    start = gf.theory.balanced_start(DEEP, np.full(3, u0))
    for rtol in (None, 1e-8):
        flow = gf.flow(
            DEEP,
            params=start,
            t1=30.0,
            solver=gf.Solver(rtol=rtol),
            run=gf.Run(progress=False),
        )
        u = flow.extras["modes"][:, :3]
        exact = gf.theory.saxe_mode_strength(flow.ts[:, None], S, u0)
        err = float(np.max(np.abs(u - exact) / S))
        tol = flow.settings.rtol
        rows.append(
            row(
                f"u_a(t) at every save, rtol {tol:g}",
                "u = s e^{2st} / (e^{2st} - 1 + s/u0)",
                SAXE,
                1.0,
                1.0 + err,
                f"largest error / s = {err:.2g} = {err / tol:.1f} rtol "
                f"({len(flow.ts)} saves, 3 modes)",
            )
        )
        out[f"saxe_error_rtol_{tol:g}"] = err
    traj = gf.flow(DEEP, **DEEP_KW)
    levels = [0.5 * float(np.sum(S[k:] ** 2)) for k in range(4)]
    plateaus = [s for s in traj.stages if s.name == "plateau"]
    for k, (p, level) in enumerate(zip(plateaus, levels, strict=True)):
        i = closest(traj, p)
        rows.append(
            row(
                f"plateau {k + 1} level (random start, init 1e-4)",
                "L = 1/2 sum_{b>k} s_b^2",
                SAXE,
                level,
                float(traj.loss[i]),
                "loss at the plateau's least |grad L|"
                + ("" if level else "; error: the absolute loss"),
            )
        )
    deep_linear_rates(traj, out)
    return rows


def deep_linear_rates(traj, out: dict) -> None:
    """The saddles' unstable rates: closed form, Hessian at the exact saddle,
    refined plateau, along the flow."""
    rates = []
    points = [p for p in gf.critical_points(traj) if p.kind == "saddle"]
    plateaus = [s for s in traj.stages if s.name == "plateau"]
    for k, p in enumerate(points):
        predicted = gf.theory.deep_linear_saddle_rate(DEEP, k)
        exact = gf.linearize(DEEP, gf.theory.deep_linear_saddle(DEEP, k)[0])
        flank = gf.theory.flank_rate(traj, p.index)["rate"]
        growth = mode_growth(traj, p.index, plateaus[k], k)
        rates.append(
            dict(
                saddle=f"{k} mode(s) learnt",
                loss=p.loss,
                predicted=predicted,
                hessian=exact.unstable_rate,
                refined=p.linearization.unstable_rate,
                flank=flank,
                growth=growth,
            )
        )
    deep = random_deep_linear(S, n_in=5, n_out=4, hidden=(4, 4), seed=1)
    lin = gf.linearize(deep, gf.theory.deep_linear_saddle(deep, 0)[0])
    out["deep_linear_rates"] = rates
    out["three_layer_origin_max_eigenvalue"] = float(np.abs(lin.eigenvalues).max())


def mode_growth(traj, index: int, plateau, k: int) -> float:
    """Half the growth rate of the mode strength u_{k+1} on the plateau of
    saddle k: a fit of log u over the saves from where |grad L| has risen to 3x
    its least value (the stable modes have decayed, as in `flank_rate`) to the
    plateau's end."""
    ts, g, u = traj.ts, traj.grad_norm, traj.extras["modes"][:, k]
    i0 = index + int(np.flatnonzero(g[index:] >= 3 * g[index])[0])
    sel = (ts >= ts[i0]) & (ts <= plateau.t_end) & (u > 0)
    return 0.5 * float(np.polyfit(ts[sel], np.log(u[sel]), 1)[0])


def learning_times(out: dict):
    """Saxe's learning time against 1/s on eight modes: the balanced start
    (exact) and a small random start."""
    s = np.geomspace(4.0, 0.25, 8)
    problem = random_deep_linear(s, n_in=8, n_out=8, hidden=(8,), seed=0)
    u0 = 1e-4
    balanced = gf.flow(
        problem,
        params=gf.theory.balanced_start(problem, u0),
        t1=80.0,
        solver=gf.Solver(rtol=1e-8),
        run=gf.Run(progress=False),
    )
    random = gf.flow(problem, init_scale=1e-3, t1=80.0, run=gf.Run(progress=False))
    _, t_half = half_times(balanced)
    exact = gf.theory.saxe_learning_time(s, u0)
    out["learning_time_max_error"] = float(np.max(np.abs(t_half - exact) / exact))
    _, t_random = half_times(random)
    # t ~ log(s/u0)/(2s): t s nearly constant (its log s part varies little)
    ts_product = t_random * s
    out["learning_time_random"] = dict(
        t_times_s_min=float(ts_product.min()),
        t_times_s_max=float(ts_product.max()),
        u0_effective=float(np.exp(-2 * ts_product.mean())),
    )
    fig = plot.learning_time_figure(
        [balanced, random],
        labels=[f"balanced start, u0 = {u0:g}", "random start, scale 1e-3"],
    )
    plot.save_figure(fig, FIGURES / "problems_deep_linear_learning_time")
    fig = plot.mode_strength_figure(balanced)
    plot.save_figure(fig, FIGURES / "problems_deep_linear_saxe")


def committee_literature(out: dict) -> list[dict]:
    rows = []
    K = COMMITTEE.students
    pl = gf.theory.committee_plateau(COMMITTEE)
    rows.append(
        row(
            "symmetric plateau alpha^2 (K = M = 3, T = I)",
            "alpha^2 = 1/(K(2K - 1))",
            SAAD,
            1 / (K * (2 * K - 1)),
            pl.alpha**2,
            "positive root of the stationarity quadratic",
        )
    )
    lin = gf.linearize(COMMITTEE, pl.params)
    rows.append(
        row(
            "specialisation rate at the closed-form plateau",
            "lambda = tau^2 G_cc + 2M G_a - 2K F_a",
            "this page, from " + SAAD,
            pl.rate,
            lin.unstable_rate,
            f"Hessian: {lin.num_unstable} unstable = (K-1)(M-1)",
        )
    )
    traj = gf.flow(COMMITTEE, **COMMITTEE_KW)
    plateau = [s for s in traj.stages if s.name == "plateau"][0]
    i = closest(traj, plateau)
    point = [p for p in gf.critical_points(traj) if p.kind == "saddle" and p.t > 1][0]
    R, Q = COMMITTEE.order_parameters(point.params)
    rows += [
        row(
            "plateau loss: refined critical point",
            "L*(alpha)",
            SAAD,
            pl.loss,
            point.loss,
            "gf.critical_points",
        ),
        row(
            "plateau overlap R: refined point (mean)",
            "R = alpha",
            SAAD,
            pl.R,
            float(np.mean(R)),
            f"spread {np.ptp(np.asarray(R)):.2g} (degenerate point)",
        ),
        row(
            "plateau overlap Q: refined point (mean)",
            "Q = M alpha^2",
            SAAD,
            pl.Q,
            float(np.mean(Q)),
            "",
        ),
        row(
            "plateau loss along the flow (init 1e-3)",
            "L*",
            SAAD,
            pl.loss,
            float(traj.loss[i]),
            f"at the least |grad L|, t = {traj.ts[i]:.3g}",
        ),
        row(
            "specialisation rate: refined point",
            "lambda",
            "this page",
            pl.rate,
            point.linearization.unstable_rate,
            "Hessian at the refined plateau",
        ),
        row(
            "specialisation rate along the flow",
            "lambda",
            "this page",
            pl.rate,
            gf.theory.flank_rate(traj, point.index)["rate"],
            "rise of |grad L| after the plateau (flank_rate)",
        ),
    ]
    spread = np.linalg.norm(gf.theory.doubly_centred(traj.extras["R"]), axis=(1, 2))
    j = int(np.argmin(spread[i:])) + i
    rows.append(
        row(
            "growth of the specialisation |P R P|",
            "e^{lambda t}",
            "this page",
            pl.rate,
            fit_log_slope(traj.ts[j:], spread[j:], 3 * spread[j], 30 * spread[j]),
            "fit on the plateau, |PRP| from 3x to 30x its least value",
        )
    )
    rows += committee_scaling(pl, out)
    return rows + committee_reference_rows(pl, out)


def committee_scaling(pl, out: dict) -> list[dict]:
    """Escape time and plateau length against log(1/init scale)."""
    rows = []
    eps = np.array([1e-2, 1e-3, 1e-4, 1e-5, 1e-6])
    for rtol in (None, 1e-8):
        escape, length, ends = [], [], []
        for e in eps:
            run = gf.flow(
                COMMITTEE,
                init_scale=float(e),
                t1=1000.0,
                solver=gf.Solver(rtol=rtol),
                run=gf.Run(progress=False),
            )
            escape.append(crossing(run.ts, run.loss, 0.5 * pl.loss))
            p = [s for s in run.stages if s.name == "plateau"][0]
            length.append(p.t_end - p.t_start)
            ends.append(p.t_end)
        x = np.log(1 / eps)
        tol = 1e-5 if rtol is None else rtol
        rows.append(
            row(
                f"escape time vs log(1/eps), rtol {tol:g}",
                "slope 1/lambda",
                "linear instability",
                1 / pl.rate,
                np.polyfit(x, escape, 1)[0],
                "eps 1e-2 .. 1e-6; escape: loss half way below the plateau",
            )
        )
        predicted = float(np.mean(1 / (pl.rate + 1 / (2 * np.asarray(ends)))))
        rows.append(
            row(
                f"plateau-stage length vs log(1/eps), rtol {tol:g}",
                "slope 1/(lambda + 1/(2 t_end))",
                "this page",
                predicted,
                np.polyfit(x, length, 1)[0],
                "the speed t|grad L|^2/l crossing a threshold",
            )
        )
        out[f"escape_times_rtol_{tol:g}"] = [float(t) for t in escape]
    return rows


def committee_reference_rows(pl, out: dict) -> list[dict]:
    """Drop times against SciPy's DOP853 on the hand-derived gradient."""
    rows = []
    V = np.asarray(COMMITTEE.teacher)
    for eps in (1e-2, 1e-3):
        traj = gf.flow(COMMITTEE, init_scale=eps, t1=1000.0, run=gf.Run(progress=False))
        levels = [0.5 * (traj.loss[0] + pl.loss), 0.5 * pl.loss]
        ts = traj.ts[traj.ts <= 400.0]
        start = time.perf_counter()
        _, times, sol = ref.solve(np.asarray(traj.at(0)), V, ts, events=levels)
        wall = time.perf_counter() - start
        for name, level, t_ref in zip(("first", "second"), levels, times, strict=True):
            rows.append(
                row(
                    f"{name} drop time vs SciPy DOP853, init {eps:g}",
                    "independent solve",
                    "tests/committee_reference.py",
                    t_ref,
                    crossing(traj.ts, traj.loss, level),
                    f"DOP853 rtol 1e-11, {sol.nfev} evaluations, {wall:.1f} s",
                )
            )
    W = np.asarray(COMMITTEE.teacher)
    out["loss_at_teacher"] = float(COMMITTEE.loss(jnp.asarray(W)))
    return rows


def monte_carlo(out: dict) -> list[dict]:
    rows = []
    rng = np.random.default_rng(0)
    A = rng.standard_normal((4, 4))
    problems = {
        "DeepLinear(4-5-2-3), non-white inputs": gf.problems.DeepLinear(
            A @ A.T / 4 + np.eye(4), rng.standard_normal((3, 4)), (5, 2)
        ),
        "Committee(K=3, M=3, N=6), random teacher": gf.problems.Committee(
            rng.standard_normal((3, 6)) / np.sqrt(6), 3
        ),
    }
    n = 1_000_000
    for name, problem in problems.items():
        params = problem.init(jax.random.key(1), 0.7)
        batch = problem.sample(jax.random.key(2), n)
        per = jax.vmap(
            lambda x, y, p=problem, w=params: p.sample_loss(w, (x[None], y[None]))
        )(*batch)
        per = np.asarray(per)
        se = per.std() / math.sqrt(n)
        exact = float(problem.loss(params))
        rows.append(
            row(
                f"loss vs Monte Carlo: {name}",
                "closed form",
                "SPEC section 11",
                exact,
                float(per.mean()),
                f"{n:,} samples: {abs(per.mean() - exact) / se:.2f} standard errors",
            )
        )
    return rows


def literature(out: dict) -> None:
    out["deep_linear_rows"] = deep_linear_literature(out)
    learning_times(out)
    out["committee_rows"] = committee_literature(out)
    out["monte_carlo_rows"] = monte_carlo(out)
    traj = gf.flow(DEEP, **DEEP_KW)
    plot.save_figure(
        plot.mode_strength_figure(traj), FIGURES / "problems_deep_linear_modes"
    )
    plot.save_figure(
        plot.problem_summary_figure(traj), FIGURES / "problems_deep_linear_summary"
    )
    traj = gf.flow(COMMITTEE, **COMMITTEE_KW)
    plot.save_figure(
        plot.order_parameter_figure(traj),
        FIGURES / "problems_committee_order_parameters",
    )
    plot.save_figure(
        plot.problem_summary_figure(traj), FIGURES / "problems_committee_summary"
    )


# -- SGD ----------------------------------------------------------------------------


def sgd(out: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.4))
    levels_deep = [0.5 * float(np.sum(S[k:] ** 2)) for k in range(4)]
    pl = gf.theory.committee_plateau(COMMITTEE)
    cases = [
        (
            "deep linear",
            DEEP,
            DEEP.init(jax.random.key(0), 1e-4),
            40.0,
            64,
            (0.03, 0.01, 0.003, 0.001),
            [0.5 * (a + b) for a, b in zip(levels_deep[:-1], levels_deep[1:])],
        ),
        (
            "committee",
            COMMITTEE,
            COMMITTEE.init(jax.random.key(0), 1e-2),
            200.0,
            256,
            (0.1, 0.03, 0.01, 0.003),
            None,
        ),
    ]
    results = []
    for ax, (name, problem, start, t1, batch, lrs, levels) in zip(
        axes, cases, strict=True
    ):
        flow = gf.flow(problem, params=start, t1=t1, run=gf.Run(progress=False))
        if levels is None:
            levels = [0.5 * (flow.loss[0] + pl.loss), 0.5 * pl.loss]
        t_flow = [crossing(flow.ts, flow.loss, x) for x in levels]
        keep = flow.ts > 0
        ax.plot(flow.ts[keep], flow.loss[keep], "k", lw=2, label="flow")
        for j, lr in enumerate(lrs):
            start_wall = time.perf_counter()
            run = gf.train_sgd(
                problem,
                start,
                sgd=gf.SGD(lr=lr, batch_size=batch),
                t1=t1,
                run=gf.Run(progress=False),
            )
            wall = time.perf_counter() - start_wall
            t_sgd = [crossing(run.ts, run.population_loss, x) for x in levels]
            errors = [abs(a - b) / b for a, b in zip(t_sgd, t_flow, strict=True)]
            results.append(
                dict(
                    problem=name,
                    sgd=gf.SGD(lr=lr),
                    batch=batch,
                    steps=int(run.steps[-1]),
                    t_flow=t_flow,
                    t_sgd=t_sgd,
                    errors=errors,
                    wall=wall,
                )
            )
            k = run.ts > 0
            ax.plot(
                run.ts[k],
                run.population_loss[k],
                color=f"C{j}",
                lw=1,
                alpha=0.8,
                label=f"SGD lr {lr:g} (max crossing err {100 * max(errors):.2g} %)",
            )
        for x in levels:
            ax.axhline(x, color="0.6", lw=0.5, ls=":")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("t = lr x step (SGD), gradient-flow time (flow)")
        ax.set_ylabel("population loss")
        ax.set_title(f"{problem.describe()}: online SGD, batch {batch}", fontsize=10)
        ax.legend(fontsize=7, frameon=False)
    fig.tight_layout()
    plot.save_figure(fig, FIGURES / "problems_sgd")
    out["sgd"] = results


# -- sweeps -------------------------------------------------------------------------


def sweeps(out: dict) -> None:
    taus = (0.5, 1.0, 2.0, 4.0)
    problems = [gf.problems.Committee(orthogonal_teacher(3, 6, t), 3) for t in taus]
    rates = [gf.theory.committee_plateau(p).rate for p in problems]
    eps = [1e-2, 1e-3, 1e-4, 1e-5, 1e-6]
    t1 = float(1.5 * (math.log(1 / eps[-1]) + 10) / min(rates))
    start = time.perf_counter()
    sw = gf.sweep(
        problems,
        init_scale=eps,
        seeds=[0, 1],
        t1=t1,
        solver=gf.Solver(rtol=1e-8),
        run=gf.Run(progress=False),
    )
    wall = time.perf_counter() - start
    fig = plot.committee_phase_diagram(sw)
    plot.save_figure(fig, FIGURES / "problems_committee_phase")
    lengths = np.array([committee_plateau_length(t) for t in sw])
    rows = []
    for j, (tau, rate) in enumerate(zip(taus, rates, strict=True)):
        sel = [i for i, m in enumerate(sw.members) if m.problem == j]
        x = np.log(1 / np.array([sw.members[i].init_scale for i in sel]))
        y = lengths[sel]
        ok = np.isfinite(y)
        ends = []
        for i in sel:
            p = [s for s in sw[i].stages if s.name == "plateau" and s.t_start > 0]
            ends.append(p[0].t_end if p else math.nan)
        escape = [
            crossing(
                sw[i].ts,
                sw[i].loss,
                0.5 * gf.theory.committee_plateau(problems[j]).loss,
            )
            for i in sel
        ]
        rows.append(
            dict(
                tau=tau,
                rate=rate,
                members=len(sel),
                complete=int(ok.sum()),
                length_slope=float(np.polyfit(x[ok], y[ok], 1)[0]),
                length_predicted=float(
                    np.nanmean(1 / (rate + 1 / (2 * np.asarray(ends))))
                ),
                escape_slope=float(np.polyfit(x, escape, 1)[0]),
                escape_predicted=1 / rate,
            )
        )
    out["phase"] = dict(
        rows=rows, members=len(sw), t1=t1, wall=wall, ok=int(np.sum(sw.ok))
    )


# -- performance --------------------------------------------------------------------


def _scipy(problem, params0, t1, ts, method, rtol, atol):
    from scipy.integrate import solve_ivp

    x0, unravel = ravel_pytree(params0)
    grad = jax.jit(lambda x: jax.grad(problem.loss)(unravel(x)))
    lossj = jax.jit(lambda x: problem.loss(unravel(x)))
    counts = [0]

    def fun(t, x):
        counts[0] += 1
        return -np.asarray(ravel_pytree(grad(jnp.asarray(x)))[0])

    fun(0.0, np.asarray(x0))  # compiled before timing
    counts[0] = 0
    start = time.perf_counter()
    sol = solve_ivp(
        fun, (0.0, t1), np.asarray(x0), method=method, t_eval=ts, rtol=rtol, atol=atol
    )
    wall = time.perf_counter() - start
    loss = np.array([float(lossj(jnp.asarray(x))) for x in sol.y.T])
    return dict(wall=wall, loss=loss, grads=counts[0], steps=None, ok=bool(sol.success))


def _gradflow(problem, params0, t1, ts, solver, rtol):
    gf.flow(
        problem,
        params=params0,
        t1=t1,
        saveat=gf.SaveAt(ts),
        solver=gf.Solver(solver, rtol=rtol),
        run=gf.Run(progress=False),
    )  # compiled before timing
    start = time.perf_counter()
    traj = gf.flow(
        problem,
        params=params0,
        t1=t1,
        saveat=gf.SaveAt(ts),
        solver=gf.Solver(solver, rtol=rtol),
        run=gf.Run(progress=False),
    )
    wall = time.perf_counter() - start
    return dict(
        wall=wall,
        loss=np.asarray(traj.loss),
        grads=traj.stats.num_grad_evals,
        steps=traj.stats.num_steps,
        ok=bool(traj.ok),
    )


def performance(out: dict, repeats: int = 3) -> None:
    cases = [
        (
            "deep linear 5-4-4, init 1e-4",
            DEEP,
            DEEP.init(jax.random.key(0), 1e-4),
            60.0,
        ),
        (
            "deep linear 5-4-4, init 1e-4",
            DEEP,
            DEEP.init(jax.random.key(0), 1e-4),
            5000.0,
        ),
        (
            "committee K=M=3, N=6, init 1e-3",
            COMMITTEE,
            COMMITTEE.init(jax.random.key(0), 1e-3),
            1000.0,
        ),
        (
            "committee K=M=3, N=6, init 1e-3",
            COMMITTEE,
            COMMITTEE.init(jax.random.key(0), 1e-3),
            5000.0,
        ),
    ]
    rows = []
    for name, problem, p0, t1 in cases:
        ts = gf.default_save_times(t1)
        scale = float(np.sqrt(np.mean(ravel_pytree(p0)[0] ** 2)))
        reference = gf.flow(
            problem,
            params=p0,
            t1=t1,
            saveat=gf.SaveAt(ts),
            solver=gf.Solver("tsit5", rtol=1e-12),
            run=gf.Run(progress=False),
        )
        levels = [
            0.5 * (d.loss_start + d.loss_end)
            for d in reference.stages
            if d.name == "drop" and d.complete
        ]
        t_ref = [crossing(ts, reference.loss, x) for x in levels]
        atol = 1e-10 * scale
        candidates = {
            "default (ros34pw2, rtol 1e-5)": (_gradflow, (None, None)),
            "tsit5 (rtol 1e-8)": (_gradflow, ("tsit5", None)),
            "scipy DOP853 (rtol 1e-8)": (_scipy, ("DOP853", 1e-8, atol)),
            "scipy LSODA (rtol 1e-8)": (_scipy, ("LSODA", 1e-8, atol)),
        }
        results = {k: [] for k in candidates}
        for _ in range(repeats):  # interleaved repeats
            for label, (fn, options) in candidates.items():
                results[label].append(fn(problem, p0, t1, ts, *options))
        base = min(r["wall"] for r in results["default (ros34pw2, rtol 1e-5)"])
        for label, runs in results.items():
            best = min(runs, key=lambda r: r["wall"])
            t = [crossing(ts, best["loss"], x) for x in levels]
            err = max(abs(a - b) / b for a, b in zip(t, t_ref, strict=True))
            rows.append(
                dict(
                    case=name,
                    t1=t1,
                    solver=label,
                    wall=best["wall"],
                    speedup=best["wall"] / base,
                    steps=best["steps"],
                    grads=best["grads"],
                    crossing_error=err,
                    ok=best["ok"],
                )
            )
    out["performance"] = rows


# -- the page ----------------------------------------------------------------------


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


def markdown(out: dict) -> str:
    m = out["meta"]
    lines = [
        f"Measured with `PYTHONPATH=. python benchmarks/problems.py` at commit "
        f"`{m['commit']}` ({m['date']}; load average {m['load']} on the 2-core "
        "machine; results in `docs/figures/problems.json`).",
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
    for r in out["sgd"]:
        lines.append(
            f"| {r['problem']} | {r['lr']:g} | {r['batch']} | {r['steps']:,} | "
            + ", ".join(f"{t:.4g}" for t in r["t_flow"])
            + " | "
            + ", ".join(f"{100 * e:.2g} %" for e in r["errors"])
            + f" | {r['wall']:.1f} |"
        )
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
    return "\n".join(lines)


def write_page(text: str) -> None:
    gf.replace_between_markers(PAGE, BEGIN, END, text)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS))
    parser.add_argument("--no-doc", action="store_true", help="do not write the page")
    args = parser.parse_args(argv)
    FIGURES.mkdir(parents=True, exist_ok=True)
    out = json.loads(JSON.read_text()) if JSON.exists() else {}
    for part in args.parts:
        start = time.perf_counter()
        globals()[part](out)
        print(f"{part}: {time.perf_counter() - start:.0f} s", flush=True)
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    ).stdout.strip()
    out["meta"] = dict(
        commit=commit,
        date=time.strftime("%Y-%m-%d"),
        load=", ".join(f"{x:.1f}" for x in os.getloadavg()),
        parts=args.parts,
    )
    JSON.write_text(json.dumps(out, indent=1))
    text = markdown(out)
    print(text)
    if not args.no_doc:
        write_page(text)
        print(f"wrote {PAGE}")


if __name__ == "__main__":
    main()
