"""The tables and figures of `docs/sgd.md`, "Modified flows" and "The
stochastic modified equation":

    PYTHONPATH=. python docs/_make_sgd_theory.py orders
    PYTHONPATH=. python docs/_make_sgd_theory.py escapes [--seeds 16]

`orders`: full-batch gradient descent at lr = 0.04, 0.02, 0.01 against the
plain flow and the modified flows of orders 1 and 2 (`gf.modified_loss`), at
t = 2, on the paper's default scenario and on a deep linear network, both from
a start away from the origin; writes the table between `<!-- sgd-orders -->`
markers and `docs/figures/sgd_orders.png`. A minute on a 2-core CPU.

`escapes`: the first drop's half-way crossing of 16 SGD runs and 16 runs of
the stochastic modified equation (`gf.sgd_sde`) from one start, at batch 4 and
32, with the flow and the order-1 modified flow beside them; writes the table
between `<!-- sgd-escapes -->` markers and `docs/figures/sgd_escapes.png`.
"""

import argparse
from pathlib import Path

import jax
import numpy as np


ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "sgd.md"
FIGURES = ROOT / "docs" / "figures"
LRS = (0.04, 0.02, 0.01)
T = 2.0


def problems():
    """`{name: (problem, start)}`: the two problems of the order check."""
    import gradflow as gf

    markov = gf.problems.MarkovAttention(gf.chains.sticky(6, 0.5, 0.5, 0.05), width=8)
    linear = gf.problems.DeepLinear.random(
        [3.0, 2.0, 1.0], n_in=5, n_out=4, hidden=(6,), seed=0
    )
    return {
        "paper's model, sticky(6, 0.5, 0.5, 0.05), m = 8, init 0.3": (
            markov,
            markov.init(jax.random.key(0), 0.3),
        ),
        "deep linear 5-6-4, s = (3, 2, 1), init 0.5": (
            linear,
            linear.init(jax.random.key(0), 0.5),
        ),
    }


def distances(problem, params, lrs=LRS, t1=T) -> np.ndarray:
    """`(len(lrs), 3)`: the distance at `t1` between full-batch GD at each lr
    and the modified flows of orders 0, 1, 2 (tight tolerances)."""
    import gradflow as gf

    def last(tree):
        return np.concatenate(
            [np.ravel(np.asarray(x)[-1]) for x in jax.tree.leaves(tree)]
        )

    saveat = gf.SaveAt(ts=[0.0, t1], stages=False)
    quiet = gf.Run(progress=False)
    out = np.zeros((len(lrs), 3))
    for i, lr in enumerate(lrs):
        gd = gf.train_sgd(problem, params, t1=t1, sgd=gf.SGD(lr, None),
                          saveat=saveat, run=quiet)  # fmt: skip
        for order in range(3):
            flow = gf.flow(gf.modified_loss(problem, lr, order), params=params,
                           t1=t1, saveat=saveat, run=quiet,
                           solver=gf.Solver("tsit5", rtol=1e-12, atol=1e-12))  # fmt: skip
            out[i, order] = np.linalg.norm(last(gd.params) - last(flow.params))
    return out


def slopes(lrs, dist) -> np.ndarray:
    """The least-squares slope of log distance against log lr, per order."""
    return np.array([np.polyfit(np.log(lrs), np.log(d), 1)[0] for d in dist.T])


def orders() -> None:
    import gradflow as gf
    from gradflow.plot import pyplot

    rows, results = [], {}
    for name, (problem, p0) in problems().items():
        dist = distances(problem, p0)
        results[name] = dist
        k = slopes(LRS, dist)
        for lr, d in zip(LRS, dist, strict=True):
            rows.append(f"| {name} | {lr:g} | {d[0]:.3g} | {d[1]:.3g} | {d[2]:.3g} |")
        rows.append(f"| {name} | **slope** | **{k[0]:.2f}** | **{k[1]:.2f}** | "
                    f"**{k[2]:.2f}** |")  # fmt: skip
    table = "\n".join(
        [
            "| problem | lr | GD vs flow | GD vs order 1 | GD vs order 2 |",
            "| --- | --- | --- | --- | --- |",
            *rows,
        ]
    )
    gf.replace_between_markers(
        PAGE, "<!-- sgd-orders -->", "<!-- /sgd-orders -->", table
    )
    fig, axes = pyplot().subplots(1, 2, figsize=(10, 4), layout="constrained")
    for ax, (name, dist) in zip(axes, results.items(), strict=True):
        for order, marker in zip(range(3), "osD", strict=True):
            k = slopes(LRS, dist)[order]
            ax.loglog(LRS, dist[:, order], marker + "-",
                      label=f"modified flow of order {order} (slope {k:.2f})")  # fmt: skip
        ax.set_xlabel("learning rate")
        ax.set_ylabel(f"|theta_GD - theta_flow| at t = {T:g}")
        ax.set_title(name, fontsize=9)
        ax.legend(fontsize=8, loc="best")
    fig.savefig(FIGURES / "sgd_orders.png", dpi=110)
    print(table)


def escapes(seeds: int) -> None:
    raise NotImplementedError


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("part", choices=("orders", "escapes"))
    parser.add_argument("--seeds", type=int, default=16)
    args = parser.parse_args()
    if args.part == "orders":
        orders()
    else:
        escapes(args.seeds)


if __name__ == "__main__":
    main()
