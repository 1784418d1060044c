"""Known staircases for the scale-free stages (`docs/stages.md`,
"Scale-free plateaus") and the saddle-to-saddle limit against the flow
(`docs/problems.md`, "Diagonal linear networks"): shared by
`tests/test_staircases.py`, `tests/test_diagonal_linear.py` and
`benchmarks/staircases.py`. Public names only."""

import math
from typing import NamedTuple

import numpy as np

import gradflow as gf


D = 8  # every staircase case has 8 coordinates: one compiled solve per parametrisation
QUIET = gf.Run(progress=False)


class Case(NamedTuple):
    name: str
    target: tuple[float, ...]
    parametrisation: str
    init_scale: float
    seed: int = 0


def _random_target(rng, nonzero: int) -> tuple[float, ...]:
    """`nonzero` magnitudes spread over [1e-2, 1e1] (evenly in decades, each
    moved by up to 0.1 decade), random signs, zeros in the other places."""
    exponents = np.linspace(-2.0, 1.0, nonzero) + rng.uniform(-0.1, 0.1, nonzero)
    exponents = np.clip(exponents, -2.0, 1.0)
    values = 10.0**exponents * rng.choice([-1.0, 1.0], nonzero)
    w = np.zeros(D)
    w[rng.permutation(D)[:nonzero]] = values
    return tuple(float(x) for x in w)


def staircase_cases() -> list[Case]:
    """The issue's case (5, 0, 1, 0, 0.2) from 1e-4 (padded with zeros), and
    random staircases with 3 to 6 nonzero entries, starts 1e-3 to 1e-6."""
    cases = [Case("issue", (5.0, 0, 1.0, 0, 0.2, 0, 0, 0), "uv", 1e-4)]
    rng = np.random.default_rng(41)
    plan = [(3, 1e-3, "uv"), (4, 1e-6, "uv"), (5, 1e-4, "u2-v2"), (6, 1e-5, "uv"),
            (6, 1e-3, "u2-v2"), (5, 1e-6, "u2-v2")]  # fmt: skip
    for j, (k, scale, kind) in enumerate(plan):
        cases.append(Case(f"random-{k}-{j}", _random_target(rng, k), kind, scale, j))
    return cases


def predicted_levels(target) -> list[float]:
    r"""$\frac12\sum_{j \ge k} w_{(j)}^2$ for $k = 1..n$ (entries by
    decreasing magnitude, $n$ nonzero): the plateaus of the flow from a small
    start on the identity covariance (the start's level first)."""
    w = np.sort(np.abs(np.asarray(target)))[::-1]
    w = w[w > 0]
    return [0.5 * float(np.sum(w[k:] ** 2)) for k in range(w.size)]


def staircase_flow(case: Case):
    """The flow of a case, to past its last drop (the last jump at $\\tau =
    1/(c\\min|w|)$, $c$ = 2 for u2-v2, 1 for uv, then the approach)."""
    w = np.asarray(case.target)
    problem = gf.problems.DiagonalLinear(np.ones(D), w, case.parametrisation)
    low = float(np.min(np.abs(w[w != 0])))
    c = 2.0 if case.parametrisation == "u2-v2" else 1.0
    t_last = math.log(1 / case.init_scale) / (c * low)
    t1 = 1.3 * t_last + 25.0 / (c * low)
    return gf.flow(
        problem, init_scale=case.init_scale, t1=t1, seed=case.seed, run=QUIET
    )


def plateau_levels(traj) -> list[float]:
    """The loss at the least $|\\nabla L|$ of each `plateau` stage."""
    ts, g = np.asarray(traj.ts), np.asarray(traj.grad_norm)
    out = []
    for s in traj.stages:
        if s.name == "plateau":
            inside = np.flatnonzero((ts >= s.t_start) & (ts <= s.t_end))
            out.append(float(traj.loss[inside[np.argmin(g[inside])]]))
    return out


def found_levels(case: Case, traj) -> tuple[list[float], list[float]]:
    """`(predicted, found)`: the predicted levels and those of the plateaus."""
    return predicted_levels(case.target), plateau_levels(traj)


# -- the saddle-to-saddle limit against the flow ---------------------------------

SPEC_SIGMA = np.array([[1.0, 0.0, 0.7], [0.0, 1.0, 0.7], [0.7, 0.7, 1.0]])
TRIDIAGONAL = np.array(
    [[1.0, 0.5, 0.0, 0.0], [0.5, 1.0, 0.3, 0.0], [0.0, 0.3, 1.0, 0.2],
     [0.0, 0.0, 0.2, 1.0]]
)  # fmt: skip
CONVERGENCE_PROBLEMS = {
    # coordinate 3 learnt at tau = 5/14, unlearnt at tau = 7.5
    "[[1, 0, .7], [0, 1, .7], [.7, .7, 1]], target (1, 1, 0)": (
        gf.problems.DiagonalLinear(SPEC_SIGMA, [1.0, 1.0, 0.0])
    ),
    "tridiagonal (.5, .3, .2), target (1, -2, 0.5, -0.2)": (
        gf.problems.DiagonalLinear(TRIDIAGONAL, [1.0, -2.0, 0.5, -0.2])
    ),
}


def convergence_flow(problem, alpha: float):
    """The flow from `alpha` to half again the last jump's rescaled time."""
    path = gf.theory.saddle_to_saddle(problem)
    t1 = 1.5 * path[-1].time * math.log(1 / alpha)
    return gf.flow(problem, init_scale=alpha, t1=t1, run=QUIET)


def convergence_errors(problem, alpha: float) -> dict:
    """Against `saddle_to_saddle`: the largest error of a jump's rescaled time
    (`gf.theory.diagonal_jumps`), the largest distance (max norm) of the
    flow's $\\beta$ half way between two jumps from the saddle there, and
    how many of the predicted plateaus (every saddle but the minimum) a
    `plateau` stage finds within 10 % of its level (`level`: the largest
    relative error of those found)."""
    traj = convergence_flow(problem, alpha)
    path = gf.theory.saddle_to_saddle(problem)
    m = gf.theory.diagonal_jumps(traj, path)
    tau = float(np.max(np.abs(m["times"] - np.array([j.time for j in path[1:]]))))
    beta = max(
        float(np.max(np.abs(b - j.beta)))
        for b, j in zip(m["betas"], path[1:-1], strict=True)
    )
    levels = plateau_levels(traj)
    found, worst = 0, 0.0
    for j in path[:-1]:
        errs = [abs(x - j.loss) / j.loss for x in levels]
        if errs and min(errs) <= 0.1:
            found += 1
            worst = max(worst, min(errs))
    return {
        "tau": tau,
        "beta": beta,
        "found": found,
        "predicted": len(path) - 1,
        "level": worst,
        "plateaus": len(levels),
        "traj": traj,
    }
