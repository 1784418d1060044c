"""The part `sgd`: SGD next to the flow on both problems."""

import time

import jax
import numpy as np

import gradflow as gf
from gradflow import plot

from .common import COMMITTEE, DEEP, FIGURES, S, crossing


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
                    lr=lr,
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
        ax.set_title(
            f"{gf.problems.describe(problem)}: online SGD, batch {batch}", fontsize=10
        )
        ax.legend(fontsize=7, frameon=False)
    fig.tight_layout()
    plot.save_figure(fig, FIGURES / "problems_sgd")
    out["sgd"] = results
