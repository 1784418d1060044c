"""The part `in_context_speed`: the default solver against Diffrax's Tsit5 and
SciPy's LSODA on a 4-direction staircase of in-context
regression, side by side in one run (interleaved repeats, the best of
three, compilation excluded). The machine's load is printed and kept with
the table: a table taken under load is marked so."""

import os

import jax
import numpy as np
from jax.flatten_util import ravel_pytree

import gradflow as gf

from .in_context import separate
from .performance import _gradflow, _scipy, race


def in_context_speed(out: dict, repeats: int = 3) -> None:
    problem = separate(heads=4)
    p0 = problem.init(jax.random.key(0), 1e-2)
    t1 = 100_000.0  # the fourth direction is learnt near t = 64,000
    ts = gf.default_save_times(t1)
    load_before = os.getloadavg()
    print(f"load average before: {', '.join(f'{x:.1f}' for x in load_before)}")
    reference = gf.flow(
        problem, params=p0, t1=t1, saveat=gf.SaveAt(ts),
        solver=gf.Solver("tsit5", rtol=1e-12), run=gf.Run(progress=False),
    )  # fmt: skip
    atol = 1e-10 * float(np.sqrt(np.mean(ravel_pytree(p0)[0] ** 2)))
    candidates = {
        "default (ros34pw2, rtol 1e-5)": (_gradflow, (None, None)),
        "tsit5 (rtol 1e-5)": (_gradflow, ("tsit5", 1e-5)),
        "tsit5 (rtol 1e-8)": (_gradflow, ("tsit5", 1e-8)),
        "scipy LSODA (rtol 1e-8)": (_scipy, ("LSODA", 1e-8, atol)),
    }
    levels, rows = race(problem, p0, t1, ts, reference, candidates, repeats)
    load_after = os.getloadavg()
    print(f"load average after: {', '.join(f'{x:.1f}' for x in load_after)}")
    out["in_context_speed"] = dict(
        case=f"{problem}, init 1e-2, Zhang et al.'s covariance",
        t1=t1,
        drops=len(levels),
        rows=rows,
        load_before=list(load_before),
        load_after=list(load_after),
        cpus=os.cpu_count(),
    )
