"""The part `performance`: gradflow's solvers against SciPy's on both
problems, side by side."""

import time

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

import gradflow as gf

from .common import COMMITTEE, DEEP, crossing


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


def race(problem, p0, t1, ts, reference, candidates, repeats):
    """The solvers of `candidates` (label: (runner, its options); the first
    is the base of the speed-ups) on one problem, side by side: interleaved
    repeats, the best wall time of each; the crossing error of the levels
    half way down each complete drop of `reference`, against its crossing
    times. Returns the levels and one row per solver."""
    levels = [
        0.5 * (d.loss_start + d.loss_end)
        for d in reference.stages
        if d.name == "drop" and d.complete
    ]
    t_ref = [crossing(ts, reference.loss, x) for x in levels]
    results = {k: [] for k in candidates}
    for _ in range(repeats):  # interleaved repeats
        for label, (fn, options) in candidates.items():
            results[label].append(fn(problem, p0, t1, ts, *options))
    base = min(r["wall"] for r in results[next(iter(candidates))])
    rows = []
    for label, runs in results.items():
        best = min(runs, key=lambda r: r["wall"])
        t = [crossing(ts, best["loss"], x) for x in levels]
        err = max(abs(a - b) / b for a, b in zip(t, t_ref, strict=True))
        rows.append(
            dict(
                solver=label, wall=best["wall"], speedup=best["wall"] / base,
                steps=best["steps"], grads=best["grads"], crossing_error=err,
                ok=best["ok"],
            )
        )  # fmt: skip
    return levels, rows


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
        atol = 1e-10 * scale
        candidates = {
            "default (ros34pw2, rtol 1e-5)": (_gradflow, (None, None)),
            "tsit5 (rtol 1e-8)": (_gradflow, ("tsit5", None)),
            "scipy DOP853 (rtol 1e-8)": (_scipy, ("DOP853", 1e-8, atol)),
            "scipy LSODA (rtol 1e-8)": (_scipy, ("LSODA", 1e-8, atol)),
        }
        _, race_rows = race(problem, p0, t1, ts, reference, candidates, repeats)
        rows += [dict(case=name, t1=t1, **r) for r in race_rows]
    out["performance"] = rows
