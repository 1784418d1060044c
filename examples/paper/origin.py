"""Claims 1 and 2: the escape from the origin (condensation) and the focus
saddle at the unigram point."""

import math

import numpy as np

import gradflow as gf
from gradflow import theory

from .study import (
    COS_TOL,
    EXPONENT_TOL,
    INIT,
    POINT_TOL,
    R2_MIN,
    RATE_TOL,
    TIME_TOL,
    WIDTH,
    Row,
    Study,
    fmt,
    loglog_fit,
    rate_row,
)


# ---------------------------------------------------------------------------
# 1. Condensation
# ---------------------------------------------------------------------------

AMP_WINDOW = 0.1  # the linear regime of the error bound: |theta_lin| <= 0.1


def linearisation(runs: list[dict]) -> dict:
    """Per eps: C = max |theta - theta_lin| / (eps^2 e^{2 sigma t}) over the
    window |theta_lin| <= AMP_WINDOW; the share of theta in the unstable
    eigenspace at the window's end; the escape crossing. Pooled: the order p
    of |theta - theta_lin| ~ |theta_lin|^p on 0.01 <= |theta_lin| <= 0.1."""
    C, share, t_cross, t_pred, amps, errs = [], [], [], [], [], []
    for r in runs:
        ts, eps, sigma = r["ts"], r["eps"], r["sigma"]
        err = np.linalg.norm(r["flat"] - r["linear"], axis=1)
        amp = np.linalg.norm(r["linear"], axis=1)
        inside = amp <= AMP_WINDOW
        end = np.flatnonzero(inside)[-1]
        # only where the linearisation error stands above the solver's (10x
        # the looser solve's distance) and the bound above float64 round-off
        # of the O(1) terms of the gradient (1e6 x machine epsilon): below,
        # the difference measures the arithmetic, not the linearisation
        bound = eps**2 * np.exp(2 * sigma * ts)
        resolved = (
            inside & (err >= 10 * r["floor"]) & (bound >= 1e6 * np.finfo(float).eps)
        )
        ratio = err / bound
        C.append(float(np.max(ratio[resolved])))
        x = r["flat"][end]
        share.append(float(np.sum((r["unstable"] @ x) ** 2) / np.sum(x**2)))
        # the order once the amplitude is a decade above its start (before,
        # the error is still building up from zero)
        fit = resolved & (amp >= max(0.01, 10 * amp[0]))
        amps.append(amp[fit])
        errs.append(err[fit])
        chain = r["chain"]
        level = 0.5 * (math.log(chain.d) + float(chain.unigram_entropy))
        t_cross.append(theory.loss_crossing(ts, r["loss"], level))
        t_pred.append(math.log(1 / r["g0"]) / sigma + r["tau1"])
    order, order_r2 = loglog_fit(np.concatenate(amps), np.concatenate(errs))
    eps = np.array([r["eps"] for r in runs])
    slope = np.polyfit(np.log(1 / eps), t_cross, 1)[0]
    share_exp, share_r2 = loglog_fit(eps, 1 - np.array(share))
    return {
        "eps": eps.tolist(), "C": C, "share": share, "t_cross": t_cross,
        "t_pred": t_pred, "order": order, "order_r2": order_r2,
        "escape_slope": float(slope), "share_exponent": share_exp,
        "share_r2": share_r2, "sigma": runs[0]["sigma"],
    }  # fmt: skip


def rows_condensation(study: Study) -> list[Row]:
    rows = []
    for key in study.settings.scenarios:
        rep = study.report(key)
        see = "[theory.md](theory.md#1-the-origin-condensation)"
        r = rep["origin escape rate"]
        rows.append(rate_row(1, "escape rate sigma = |pi - 1/d| |pi|", key,
                             "slope of log sqrt(s1(W0) s1(W1)), linear regime",
                             r["predicted"], r["measured"], RATE_TOL, see=see))  # fmt: skip
        r = rep["origin escape time"]
        rows.append(rate_row(1, "escape time log(1/|g0|)/sigma + tau1", key,
                             "time the loss crosses (log d + H(pi))/2",
                             r["predicted"], r["measured"], TIME_TOL, see=see))  # fmt: skip
        lin = linearisation(study.eps_runs(key))
        eps_text = f"eps = {fmt(min(lin['eps']))}..{fmt(max(lin['eps']))}, {len(lin['eps'])} runs"
        rows.append(rate_row(1, "escape time Theta(log 1/eps)", key,
                             f"slope of the escape time against log(1/eps) ({eps_text})",
                             1 / lin["sigma"], lin["escape_slope"], TIME_TOL,
                             see="figure paper_condensation"))  # fmt: skip
        C = np.array(lin["C"])
        spread = float(C.max() / C.min())
        rows.append(Row(1, "linearisation error <= C eps^2 e^{2 mu t}", key,
                        f"C(eps) = max |theta - theta_lin| / (eps^2 e^(2 sigma t)) while |theta_lin| <= {AMP_WINDOW}, where the error is 10x the solver's ({eps_text})",
                        "one C for every eps", f"C = {fmt(C.min())}..{fmt(C.max())}",
                        f"max/min {spread:.3g}", "max C / min C <= 2", bool(spread <= 2),
                        see="figure paper_condensation", values=lin))  # fmt: skip
        rows.append(Row(1, "linearisation error <= C eps^2 e^{2 mu t}", key,
                        "order p of |theta - theta_lin| ~ |theta_lin|^p, pooled over eps (|theta_lin| from max(0.01, 10 |theta_lin(0)|) to 0.1)",
                        ">= 2 (the bound)", f"p = {lin['order']:.4f} (R^2 = {lin['order_r2']:.5f})",
                        "", f"p >= {2 - EXPONENT_TOL}", bool(lin["order"] >= 2 - EXPONENT_TOL),
                        see="figure paper_condensation"))  # fmt: skip
        share = np.array(lin["share"])
        rows.append(Row(1, "escape along the most unstable eigenvector", key,
                        f"share of theta in the unstable eigenspace of the origin when |theta_lin| = {AMP_WINDOW}; exponent of 1 - share in eps",
                        "-> 1, 1 - share ~ eps^2", f"share {share[0]:.6f} (eps = {fmt(lin['eps'][0])}) .. {share[-1]:.12f}; exponent {lin['share_exponent']:.4f} (R^2 {lin['share_r2']:.5f})",
                        f"{abs(lin['share_exponent'] - 2):.2g}", f"|exponent - 2| <= {EXPONENT_TOL}, R^2 >= {R2_MIN}",
                        bool(abs(lin["share_exponent"] - 2) <= EXPONENT_TOL and lin["share_r2"] >= R2_MIN),
                        see="figure paper_condensation"))  # fmt: skip
        for quantity, what in (("W0 alignment with pi", "W0 aligned with pi"),
                               ("W1 alignment with pi - 1/d", "W1 aligned with pi - 1/d")):  # fmt: skip
            r = rep[quantity]
            rows.append(Row(1, what, key, "cosine of the top singular vector, end of the linear regime",
                            "1", f"{r['measured']:.6f}", f"{1 - r['measured']:.1e}", f">= {COS_TOL}",
                            bool(r["measured"] >= COS_TOL), see=see))  # fmt: skip
        r = rep["attention frozen"]
        rows.append(Row(1, "WQ, WK frozen at linear order", key,
                        "max relative change of WQ, WK to the end of the linear regime",
                        "0 (driven at third order)", fmt(r["measured"]), "", "<= 0.01",
                        bool(r["measured"] <= 0.01), see=see))  # fmt: skip
        rows += _rank_one_rows(study, key)
    return rows


def _rank_one_rows(study: Study, key: str) -> list[Row]:
    traj = study.flow(key)
    cond = next(s for s in traj.stages if s.name == "condensation")
    ts = np.asarray(traj.ts)
    upto = ts <= cond.t_end
    WQ = np.linalg.norm(np.asarray(traj.params.WQ), axis=(1, 2))
    WK = np.linalg.norm(np.asarray(traj.params.WK), axis=(1, 2))
    grow = float(max(np.max(WQ[upto] / WQ[0]), np.max(WK[upto] / WK[0])))
    cp = study.unigram(key)
    s0 = np.linalg.svd(np.asarray(traj.params.W0[cp.index]), compute_uv=False)
    s1 = np.linalg.svd(np.asarray(traj.params.W1[cp.index]), compute_uv=False)
    r0, r1 = float(s0[1] / s0[0]), float(s1[1] / s1[0])
    return [
        Row(1, "WQ, WK stay O(eps)", key,
            f"max |WQ(t)|/|WQ(0)|, |WK(t)|/|WK(0)| over the condensation stage (t <= {cond.t_end:.4g})",
            "O(1)", f"{grow:.4g}", "", "<= 10", bool(grow <= 10), see="[stages.md](stages.md)"),
        Row(1, "W0, W1 condense to rank one", key,
            f"s2/s1 of W0 and of W1 at the unigram plateau (t = {cp.t:.4g})",
            f"O(eps) = O({INIT:g})", f"{r0:.2e}, {r1:.2e}", "", f"<= {10 * INIT:g}",
            bool(max(r0, r1) <= 10 * INIT), see="[stages.md](stages.md)"),
    ]  # fmt: skip


# ---------------------------------------------------------------------------
# 2. Focus
# ---------------------------------------------------------------------------


def blocks_at(problem, point) -> dict:
    """The Hessian at `point` split into the (W0, W1) block, the attention
    block (WQ, WK) and their coupling; the unstable eigenvalue clusters of
    -Hessian, their weight in (WQ, WK) and the scores their modes make.
    `problem`: the flow's (`traj.problem`), whose Hessian is compiled already."""
    chain = problem.chain
    lin = gf.linearize(problem, point, method="dense")
    V = np.stack(
        [
            np.asarray(theory.flatten_params(lin.mode(i)))
            for i in range(len(lin.eigenvalues))
        ]
    )
    H = -(V.T * lin.eigenvalues) @ V
    n_emb = point.W0.size + point.W1.size
    emb = np.linalg.eigvalsh(-H[:n_emb, :n_emb])
    coupling = float(np.abs(H[:n_emb, n_emb:]).max())
    unstable = [
        c
        for c in theory.eigen_clusters(lin.eigenvalues)
        if lin.eigenvalues[c[0]] > lin.tol
    ]
    top = unstable[0] if unstable else np.array([], int)
    att_share = (
        float(np.min(lin.block_weights[top][:, 2:].sum(1)))
        if top.size
        else float("nan")
    )
    E = np.asarray(point.W0)
    cosines = []
    for i in top:
        mode = lin.mode(int(i))
        S2 = (np.asarray(mode.WQ) @ E).T @ (np.asarray(mode.WK) @ E)
        cosines.append(float(abs(gf.markov.score_alignment(S2, np.asarray(chain.pi)))))
    return {
        "rate": lin.unstable_rate, "emb_max": float(emb.max()), "emb_min": float(emb.min()),
        "coupling": coupling, "hess_max": float(np.abs(H).max()),
        "clusters": [float(lin.eigenvalues[c[0]]) for c in unstable],
        "multiplicity": int(top.size), "att_share": att_share,
        "score_cos_min": float(min(cosines)) if cosines else float("nan"),
        "next": float(lin.eigenvalues[top.size]) if top.size < lin.eigenvalues.size else float("nan"),
    }  # fmt: skip


def _saddle_rows(study: Study, key: str) -> list[Row]:
    problem, chain = study.flow(key).problem, study.flow(key).problem.chain
    rows = []
    refined = study.unigram(key).params
    q = float(np.linalg.norm(refined.WQ) * np.linalg.norm(refined.WK))
    for where, point, tol in (
        ("balanced unigram point (gf.theory.unigram_point)", theory.unigram_point(chain, WIDTH), POINT_TOL),
        # the refined point lies on the manifold of unigram critical points
        # with small WQ, WK (|WQ||WK| = q ~ 1e-4): the blocks are perturbed
        # at O(q), so the check is at 10 q
        (f"point refined from the flow's plateau (|WQ||WK| = {q:.1e})", refined, max(POINT_TOL, 10 * q)),
    ):  # fmt: skip
        b = blocks_at(problem, point)
        ok_emb = b["emb_max"] <= tol * b["rate"]
        rows.append(Row(2, "focus saddle: (W0, W1) block contracting or neutral", key,
                        f"largest eigenvalue of -Hessian on (W0, W1) / top rate, at the {where}",
                        "<= 0", f"{b['emb_max'] / b['rate']:.2e} (most negative {b['emb_min']:.3g}); coupling to (WQ, WK): {b['coupling']:.1e}",
                        "", f"<= {tol:.1g}", bool(ok_emb), see="figure paper_focus", values=b))  # fmt: skip
        ok = (len(b["clusters"]) == 1 and b["att_share"] >= 1 - tol
              and b["score_cos_min"] >= 1 - tol)  # fmt: skip
        rows.append(Row(2, "focus saddle: a unique unstable mode, in the attention block", key,
                        f"unstable eigenvalue clusters of -Hessian at the {where}; their weight in (WQ, WK); |cos(S, pi pi^T)| of the scores each mode makes",
                        "one cluster, in (WQ, WK), S ~ pi pi^T",
                        f"{len(b['clusters'])} cluster {[fmt(c) for c in b['clusters']]} x{b['multiplicity']} (= m, one score direction); (WQ, WK) share {b['att_share']:.9f}; |cos| >= {b['score_cos_min']:.9f}; next eigenvalue {b['next']:.1e}",
                        "", f"1 cluster, share and |cos| >= 1 - {tol:.1g}", bool(ok), see="figure paper_focus", values=b))  # fmt: skip
    return rows


def focus_window(traj, cp) -> np.ndarray:
    """Saves from the plateau's closest approach while |S| < 0.1 (the report's
    focus-rate window: the attention mode still linear)."""
    S = np.linalg.norm(gf.markov.score_matrix(traj.params), axis=(1, 2))
    w = np.flatnonzero((np.arange(len(traj.ts)) >= cp.index) & (S < 0.1))
    return w[: np.argmax(np.diff(np.r_[w, -10]) != 1) + 1]


def rows_focus(study: Study) -> list[Row]:
    rows = []
    for key in study.settings.scenarios:
        rep = study.report(key)
        traj = study.flow(key)
        chain = traj.problem.chain
        pi = np.asarray(chain.pi)
        see = "[theory.md](theory.md#2-the-unigram-point-focus)"
        r = rep["unigram plateau loss"]
        rows.append(Row(2, "a second critical point: the unigram point, L = H(pi)", key,
                        "loss of the critical point refined from the first plateau",
                        fmt(r["predicted"], 8), fmt(r["measured"], 8), f"{r['rel_error']:.1e}",
                        "rel. error <= 1e-9", bool(r["rel_error"] <= 1e-9), see=see))  # fmt: skip
        rows += _saddle_rows(study, key)
        r = rep["focus rate (closed form)"]
        rows.append(rate_row(2, "focus rate a^2 |gamma| (docs/theory.md)", key,
                             "closed form against the Hessian at the balanced point",
                             r["predicted"], r["measured"], POINT_TOL, see=see))  # fmt: skip
        r = rep["focus growth rate"]
        rows.append(rate_row(2, "WQ, WK grow exponentially along the mode", key,
                             "half the slope of log |S| from the plateau while |S| < 0.1",
                             r["predicted"], r["measured"], RATE_TOL, see=see))  # fmt: skip
        cp = study.unigram(key)
        rows.append(_along_mode_row(traj, cp, key))
        S = gf.markov.score_matrix(traj.params)
        cos = gf.markov.score_alignment(S, pi)
        Sn = np.linalg.norm(S, axis=(1, 2))
        after = np.arange(len(traj.ts)) >= cp.index
        sign = -np.sign(theory.focus_prediction(chain)["gamma"])
        focus = next(s for s in traj.stages if s.name == "focus")
        ts = np.asarray(traj.ts)
        for label, i in (
            ("when |S| first reaches 0.1 (end of the linear window)", int(np.flatnonzero(after & (Sn >= 0.1))[0])),
            (f"at the end of the first focus stage (t = {focus.t_end:.4g})", int(np.argmin(np.abs(ts - focus.t_end)))),
        ):  # fmt: skip
            rows.append(Row(2, "S aligns with pi pi^T (up to sign)", key,
                            f"cos(S, pi pi^T) {label}", f"{sign:+.0f}",
                            f"{cos[i]:+.6f} (|S| = {Sn[i]:.3g}, t = {ts[i]:.4g})", f"{1 - sign * cos[i]:.1e}",
                            f"sign * cos >= {COS_TOL}", bool(sign * cos[i] >= COS_TOL),
                            expect="linear" in label, see="figure paper_focus"))  # fmt: skip
        r = rep["focus token"]
        mass = (focus.mass_start, focus.mass_end)
        rows.append(Row(2, "attention concentrates on the most frequent token", key,
                        "the focus token (sign rule) against the flow's; attention mass on it over the focus stage",
                        f"token {int(r['predicted'])} = argmax pi", f"token {int(r['measured'])}; mass {mass[0]:.3f} -> {mass[1]:.3f}",
                        "", "same token, mass rises", bool(r["measured"] == r["predicted"] == np.argmax(pi) and mass[1] > mass[0]),
                        see=see))  # fmt: skip
    return rows


def _along_mode_row(traj, cp, key) -> Row:
    """The share of (WQ, WK)(t) - (WQ, WK)* in the unstable eigenspace of the
    flow's own refined unigram point (same gauge), at the middle of the focus
    window."""
    lin = cp.linearization
    V = np.stack(
        [
            np.asarray(theory.flatten_params(lin.mode(i)))
            for i in range(lin.num_unstable)
        ]
    )
    w = focus_window(traj, cp)
    i = int(w[len(w) // 2])
    x = np.asarray(theory.flatten_params(traj.at(i))) - np.asarray(
        theory.flatten_params(cp.params)
    )
    n_emb = cp.params.W0.size + cp.params.W1.size
    att = x.copy()
    att[:n_emb] = 0.0
    share = float(np.sum((V @ att) ** 2) / np.sum(att**2))
    return Row(2, "WQ, WK grow along the unstable mode", key,
               f"share of (WQ, WK)(t) - (WQ, WK)* in the unstable eigenspace of the refined point, t = {float(traj.ts[i]):.4g} (middle of the window)",
               "1", f"{share:.6f}", f"{1 - share:.1e}", f">= {COS_TOL}", bool(share >= COS_TOL),
               see="[theory.md](theory.md#2-the-unigram-point-focus)")  # fmt: skip
