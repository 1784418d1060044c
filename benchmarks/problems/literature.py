"""The part `literature`: the deep linear network against Saxe, McClelland and
Ganguli (2014), the committee machine against Saad and Solla (1995), the
committee machine's solve against an independent one, and both closed-form
losses against Monte Carlo."""

import math
import time

import jax
import jax.numpy as jnp
import numpy as np

import gradflow as gf
from gradflow import plot

from .common import (
    COMMITTEE,
    COMMITTEE_KW,
    DEEP,
    DEEP_KW,
    FIGURES,
    SAAD,
    SAXE,
    S,
    closest,
    committee_reference,
    crossing,
    fit_log_slope,
    row,
)


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
    # three plateaus (saddles), then the rest at the minimum (L = 0), which
    # the stages do not call a plateau: its level at the last save
    plateaus = [s for s in traj.stages if s.name == "plateau"]
    assert len(plateaus) == len(levels) - 1, traj.stages
    for k, level in enumerate(levels):
        if k < len(plateaus):
            i, where = closest(traj, plateaus[k]), "at the plateau's least |grad L|"
            name = f"plateau {k + 1} level"
        else:
            i, where, name = len(traj.ts) - 1, "at the last save", "level at the end"
        rows.append(
            row(
                f"{name} (random start, init 1e-4)",
                "L = 1/2 sum_{b>k} s_b^2",
                SAXE,
                level,
                float(traj.loss[i]),
                f"loss {where}" + ("" if level else "; error: the absolute loss"),
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
    deep = gf.problems.DeepLinear.random(S, n_in=5, n_out=4, hidden=(4, 4), seed=1)
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
    problem = gf.problems.DeepLinear.random(s, n_in=8, n_out=8, hidden=(8,), seed=0)
    u0 = 1e-4
    balanced = gf.flow(
        problem,
        params=gf.theory.balanced_start(problem, u0),
        t1=80.0,
        solver=gf.Solver(rtol=1e-8),
        run=gf.Run(progress=False),
    )
    random = gf.flow(problem, init_scale=1e-3, t1=80.0, run=gf.Run(progress=False))
    _, t_half = plot.half_times(balanced)
    exact = gf.theory.saxe_learning_time(s, u0)
    out["learning_time_max_error"] = float(np.max(np.abs(t_half - exact) / exact))
    _, t_random = plot.half_times(random)
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
        _, times, sol = committee_reference().solve(
            np.asarray(traj.at(0)), V, ts, events=levels
        )
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
                "the definition above",
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
