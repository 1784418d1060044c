"""Claims 3 and 4: on the rank-one manifold, the dilution, and the new
directions that open where the rare tokens' symmetry is broken."""

import numpy as np

import gradflow as gf

from .study import (
    COS_TOL,
    EIG_FLOOR,
    EXPONENT_TOL,
    POINT_TOL,
    R2_MIN,
    RATE_TOL,
    SMALL_DELTA,
    T1,
    Row,
    Study,
    fmt,
    loglog_fit,
    rate_row,
)


# ---------------------------------------------------------------------------
# 3. Dilution
# ---------------------------------------------------------------------------


def pooled_entropy(traj) -> np.ndarray:
    """H(M), the entropy of the attention mass M_k = sum_i pi_i A_ik."""
    M = np.asarray(traj.extras["att_mass"])
    return -np.sum(M * np.log(M), axis=1)


def separation(traj, index: int) -> np.ndarray:
    """|dE_0 - mean_k dE_k|: how far the frequent token's embedding (token 0)
    and the mean of the others' moved apart since save `index`."""
    W0 = np.asarray(traj.params.W0)
    dE = W0 - W0[index]
    return np.linalg.norm(dE[:, :, 0] - dE[:, :, 1:].mean(axis=2), axis=1)


def opposite(traj, index: int, i: int) -> float:
    """The largest cos(dE_0, dE_k) over the rare tokens k at save `i` (dE:
    displacement since save `index`); -1 when all move against token 0."""
    W0 = np.asarray(traj.params.W0)
    dE = W0[i] - W0[index]
    d0 = dE[:, 0] / np.linalg.norm(dE[:, 0])
    return float(
        max(d0 @ dE[:, k] / np.linalg.norm(dE[:, k]) for k in range(1, W0.shape[2]))
    )


def secant_rate(ts, values, window) -> float:
    """Slope of log(d values / dt) over `window` (saves): the rate of a part
    that grows exponentially on top of a constant (the derivative drops the
    constant)."""
    dv = np.diff(values) / np.diff(ts)
    tm = 0.5 * (ts[1:] + ts[:-1])
    w = window[window < dv.size]
    return float(np.polyfit(tm[w], np.log(dv[w]), 1)[0])


def rows_dilution(study: Study) -> list[Row]:
    rows = []
    for key in study.settings.scenarios:
        traj = study.flow(key)
        ts = np.asarray(traj.ts)
        cp = study.unigram(key)
        dil = next(s for s in traj.stages if s.name == "dilution")
        on = study.manifold_run(key, "dopri8")
        d_on = gf.markov.manifold_distance(on.params)
        d_free = gf.markov.manifold_distance(traj.params)
        upto = (ts >= cp.t) & (ts <= dil.t_end)
        grow = float(np.max(d_free[upto]) / d_free[cp.index])
        rows.append(Row(3, "the rank-one manifold is invariant", key,
                        f"distance from the manifold of the flow started on it (at t = {cp.t:.4g}; Dopri8), max over the run to t1",
                        "0", f"{np.max(d_on):.1e}", "", "<= 1e-12 (round-off)", bool(np.max(d_on) <= 1e-12),
                        see="figure paper_dilution"))  # fmt: skip
        ros = study.manifold_run(key, "default")
        d_ros = gf.markov.manifold_distance(ros.params)
        t_ros = np.asarray(ros.ts) + cp.t
        early = t_ros <= dil.t_end
        late = int(np.argmax(d_ros >= 1e-3)) if np.any(d_ros >= 1e-3) else -1
        rows.append(Row(3, "the rank-one manifold is invariant", key,
                        "the same start with the default solver (ROS34PW2): max distance to the end of the dilution; when it reaches 1e-3",
                        "0 (to the solver's tolerance); unstable across at the next plateau (claim 4)",
                        f"{np.max(d_ros[early]):.1e}; 1e-3 at t = {t_ros[late]:.4g}" if late >= 0 else f"{np.max(d_ros[early]):.1e}; never 1e-3",
                        "", "<= 1e-6 to the end of the dilution", bool(np.max(d_ros[early]) <= 1e-6),
                        see="figure paper_dilution"))  # fmt: skip
        rows.append(Row(3, "the free flow stays near the manifold through focus and dilution", key,
                        f"max distance / distance at t = {cp.t:.4g}, to the end of the dilution (t = {dil.t_end:.4g})",
                        "no growth (off-manifold part O(eps), not unstable)", f"{grow:.4f} (distance {d_free[cp.index]:.2e})",
                        "", "<= 2 (an unstable transverse mode would grow by orders)", bool(grow <= 2),
                        see="figure paper_dilution"))  # fmt: skip
        L_on = np.interp(ts[upto] - cp.t, np.asarray(on.ts), np.asarray(on.loss))
        gap = float(np.max(np.abs(L_on - np.asarray(traj.loss)[upto])))
        drop = float(traj.loss[cp.index] - np.min(np.asarray(traj.loss)[upto]))
        rows.append(Row(3, "the dilution happens on the manifold", key,
                        "max |L(free flow) - L(flow on the manifold)| to the end of the dilution, against the loss drop there",
                        f"O(distance^2) = {d_free[cp.index] ** 2:.0e}", f"{gap:.2e} (drop {drop:.3f})", f"{gap / drop:.1e}",
                        "<= 1e-3 of the drop", bool(gap <= 1e-3 * drop), see="figure paper_dilution"))  # fmt: skip
        rows += _opposite_rows(study, key, traj, cp, dil)
        H_M = pooled_entropy(traj)
        H_A = np.asarray(traj.extras["att_entropy"])
        i0, i1 = (int(np.argmin(np.abs(ts - t))) for t in (dil.t_start, dil.t_end))
        rows.append(Row(3, "the focus weakens", key,
                        f"attention mass on the focus token {dil.tokens} over the dilution stage (t = {dil.t_start:.4g}..{dil.t_end:.4g})",
                        "falls", f"{dil.mass_start:.4f} -> {dil.mass_end:.4f}", "", "falls",
                        bool(dil.mass_end < dil.mass_start), see="[stages.md](stages.md)"))  # fmt: skip
        rows.append(Row(3, "attention spreads over the tokens", key,
                        "entropy of the pooled attention mass H(M), M_k = sum_i pi_i A_ik, over the dilution stage",
                        "rises", f"{H_M[i0]:.4f} -> {H_M[i1]:.4f}", "", "rises", bool(H_M[i1] > H_M[i0]),
                        see="figure paper_cycles"))  # fmt: skip
        rows.append(Row(3, "attention spreads over the tokens", key,
                        "pi-weighted attention entropy H_A = sum_i pi_i H(A_i) over the dilution stage",
                        "rises", f"{H_A[i0]:.4f} -> {H_A[i1]:.4f}", "", "rises", bool(H_A[i1] > H_A[i0]),
                        expect=False, see="[stages.md](stages.md#definitions)"))  # fmt: skip
    return rows


def _opposite_rows(study, key, traj, cp, dil) -> list[Row]:
    ts = np.asarray(traj.ts)
    Sn = np.linalg.norm(gf.markov.score_matrix(traj.params), axis=(1, 2))
    after = np.arange(len(ts)) > cp.index
    rows = []
    for label, i in (
        ("when |S| first reaches 0.1", int(np.flatnonzero(after & (Sn >= 0.1))[0])),
        (f"at the end of the dilution (t = {dil.t_end:.4g})", int(np.argmin(np.abs(ts - dil.t_end)))),
    ):  # fmt: skip
        c = opposite(traj, cp.index, i)
        rows.append(Row(3, "the frequent token's embedding and the others' move apart", key,
                        f"largest cos(dE_0, dE_k) over rare k, dE since t = {cp.t:.4g}, {label}",
                        "-1", f"{c:+.6f}", f"{1 + c:.1e}", f"<= {-COS_TOL}", bool(c <= -COS_TOL),
                        see="figure paper_dilution"))  # fmt: skip
    lam = study.report(key)["focus growth rate"]["predicted"]
    window = np.flatnonzero(after & (Sn >= 10 * Sn[cp.index]) & (Sn < 0.1))
    rate = secant_rate(ts, separation(traj, cp.index), window)
    rows.append(rate_row(3, "their separation grows exponentially", key,
                         f"slope of log d|dE_0 - mean dE_k|/dt while 10 |S*| <= |S| < 0.1 (t = {ts[window[0]]:.4g}..{ts[window[-1]]:.4g}); predicted: twice the focus rate (forced by S ~ e^(2 lambda t))",
                         2 * lam, rate, RATE_TOL, see="figure paper_dilution"))  # fmt: skip
    return rows


# ---------------------------------------------------------------------------
# 4. New directions
# ---------------------------------------------------------------------------


def rows_new_direction(study: Study) -> list[Row]:
    rows = []
    for key in study.settings.scenarios:
        scn = study.scenario(key)
        branch = study.branch(key)
        ok = all(b["converged"] for b in branch)
        zero = branch[-1]
        start = branch[0]
        rows.append(Row(4, "a degenerate critical point when the rare tokens are symmetric", key,
                        f"top eigenvalue of -Hessian at the post-focus point continued to delta = 0 (all {len(branch)} refinements converged: {ok}), over the top rate at delta = {scn.delta:g}",
                        "0", f"{zero['top'] / start['top']:.1e} (rate {start['top']:.4g} at delta = {scn.delta:g})",
                        "", f"<= {POINT_TOL:g}", bool(ok and zero["top"] <= POINT_TOL * start["top"]),
                        see="figure paper_new_direction"))  # fmt: skip
        small = [b for b in branch if 0 < b["delta"] <= SMALL_DELTA + 1e-12]
        deltas = [b["delta"] for b in small]
        d_text = f"delta = {fmt(min(deltas))}..{fmt(max(deltas))}, {len(deltas)} points"
        first = [b["transverse"][0] if b["transverse"] else float("nan") for b in small]
        slope, r2 = loglog_fit(deltas, first)
        mult = sorted({b["transverse_mult"][0] for b in small if b["transverse"]})
        leak = max(b["leak"] for b in branch)
        rows.append(Row(4, "a transverse unstable mode of order delta", key,
                        f"log-log slope of the top eigenvalue of -Hessian across the manifold against delta ({d_text}); multiplicity; largest coupling between the two spaces",
                        "1", f"{slope:.4f} (R^2 = {r2:.6f}); x{mult}; coupling {leak:.0e}",
                        f"{abs(slope - 1):.2g}", f"|slope - 1| <= {EXPONENT_TOL}, R^2 >= {R2_MIN}",
                        bool(abs(slope - 1) <= EXPONENT_TOL and r2 >= R2_MIN), see="figure paper_new_direction"))  # fmt: skip
        tang = np.array([b["tangential_top"] for b in small])
        n_unstable = sum(bool(b["tangential"]) for b in small)
        t_slope = loglog_fit(deltas, tang)[0] if np.all(tang > 0) else float("nan")
        rows.append(Row(4, "a tangential unstable mode of order delta^2", key,
                        f"top eigenvalue of -Hessian along the manifold ({d_text}); at how many delta it is unstable",
                        "> 0, ~ delta^2", f"{fmt(np.min(tang))}..{fmt(np.max(tang))}; above {EIG_FLOOR:g} at {n_unstable} of {len(small)}",
                        "", f"unstable at every delta, |slope - 2| <= {EXPONENT_TOL}",
                        bool(n_unstable == len(small) and abs(t_slope - 2) <= EXPONENT_TOL),
                        expect=False, see="figure paper_new_direction"))  # fmt: skip
        second = np.array(
            [
                b["transverse"][1] if len(b["transverse"]) > 1 else float("nan")
                for b in small
            ]
        )
        good = np.isfinite(second)
        s2, r22 = (
            loglog_fit(np.array(deltas)[good], second[good])
            if good.sum() >= 3
            else (float("nan"), float("nan"))
        )
        rows.append(Row(4, "a second unstable mode of higher order in delta", key,
                        f"log-log slope of the second unstable cluster across the manifold against delta ({d_text}), unstable at {int(good.sum())} of {len(small)}",
                        "2 (the paper's delta^2, for a tangential mode)", f"{s2:.4f} (R^2 = {r22:.6f})", f"{abs(s2 - 2):.2g}",
                        f"|slope - 2| <= {EXPONENT_TOL}, R^2 >= {R2_MIN}", bool(good.all() and abs(s2 - 2) <= EXPONENT_TOL and r22 >= R2_MIN),
                        expect=False, see="figure paper_new_direction"))  # fmt: skip
        rows += _leave_rows(study, key)
    return rows


def _leave_rows(study: Study, key: str) -> list[Row]:
    traj = study.flow(key)
    ts = np.asarray(traj.ts)
    cp = study.post_focus(key)
    rate = cp.linearization.unstable_rate
    dist = gf.markov.manifold_distance(traj.params)
    d0 = dist[cp.index]
    grown = np.sqrt(np.maximum(dist**2 - d0**2, 1e-300))
    after = np.arange(len(ts)) > cp.index
    window = np.flatnonzero(after & (dist >= 3 * d0) & (dist <= 30 * d0))
    window = window[: np.argmax(np.diff(np.r_[window, -10]) != 1) + 1]
    measured = float(np.polyfit(ts[window], np.log(grown[window]), 1)[0])
    # sticky6: 5.1 % off, just outside the tolerance (the page reports it)
    rows = [rate_row(4, "the trajectory leaves the manifold along the transverse mode", key,
                     f"slope of log sqrt(dist^2 - dist*^2) while dist is 3-30x its value at the post-focus plateau (t = {ts[window[0]]:.4g}..{ts[window[-1]]:.4g}); predicted: top rate at the refined point",
                     rate, measured, RATE_TOL, see="figure paper_dilution", expect=key != "sticky6")]  # fmt: skip
    r = study.report(key).get(f"plateau L={cp.loss:.5g} escape rate")
    if r is not None:
        rows.append(rate_row(4, "the trajectory leaves the manifold along the transverse mode", key,
                             "slope of log |grad L| on the flank after the post-focus plateau (gf.theory_report)",
                             r["predicted"], r["measured"], RATE_TOL,
                             see="[theory.md](theory.md#3-later-plateaus)"))  # fmt: skip
    new = [s for s in traj.stages if s.name == "new_direction" and s.sv_index == 1]
    s = new[0] if new else None
    rows.append(Row(4, "a new embedding direction opens and the next cycle begins", key,
                    "s2/s1 of W0 over the first new_direction stage; its cycle",
                    "< 0.05 -> > 0.3, cycle 2", f"{s.ratio_start:.3g} -> {s.ratio_end:.3g}, cycle {s.cycle} (t = {s.t_start:.4g}..{s.t_end:.4g})" if s else "none",
                    "", "opens, cycle 2", bool(s and s.ratio_start < 0.05 and s.ratio_end > 0.3 and s.cycle == 2),
                    see="[stages.md](stages.md)"))  # fmt: skip
    sym = study.symmetric_runs(key)
    for name, run in sym.items():
        r = np.asarray(run.extras["sv_ratio"])[:, 0]
        cond = next(x for x in run.stages if x.name == "condensation")
        late = np.asarray(run.ts) > cond.t_end
        worst = float(np.max(r[late]))
        rows.append(Row(4, "delta = 0: no new direction", key,
                        f"max s2/s1 of W0 after condensation to t1 = {T1:g}, delta = 0, {name} start",
                        "stays < 0.05", f"{worst:.2e}", "", "< 0.05", bool(worst < 0.05),
                        see="[theory.md](theory.md#4-the-delta-sweep-a-new-direction-at-a-degenerate-point)"))  # fmt: skip
    return rows
