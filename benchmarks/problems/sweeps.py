"""The part `sweeps`: the committee machine's plateau length against its
closed form over teacher norms and initial scales, in one sweep."""

import math
import time

import numpy as np

import gradflow as gf
from gradflow import plot

from .common import FIGURES, crossing


def sweeps(out: dict) -> None:
    taus = (0.5, 1.0, 2.0, 4.0)
    problems = [gf.problems.Committee.isotropic(3, 6, 3, norm=t) for t in taus]
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
    lengths = np.array([plot.committee_plateau_length(t) for t in sw])
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
