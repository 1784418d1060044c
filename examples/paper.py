"""The paper, claim by claim: every statement of "Focus and Dilution: The
Multi-stage Learning Process of Attention" (Chen, Lin, Xu, Luo, ICML 2026)
measured on the exact population flow, one row per claim or measurable part.

    python examples/paper.py                  # docs/paper.md, docs/figures/paper_*.png, docs/figures/paper.json
    python examples/paper.py --only focus     # one group of rows (printed; nothing written)
    python examples/paper.py --fast           # reduced settings, every row checked (tests/test_paper.py)

Groups: condensation, focus, dilution, new_direction, cycles, text. Each row
says what the paper predicts, what gradflow measures, the error, the check
(direction and tolerance, `CHECKS` below) and whether it holds; `expect` is
what the page reports (a row the paper claims but our measurement refutes
has `expect=False`), and `--fast` fails when any row's verdict differs from
it. The scenarios: the main one, a d = 4 chain of the paper's form
`gf.chains.from_pi((0.7, 0.12, 0.1, 0.08), lam=0.5)` (strongly skewed pi; its
rare tokens are `0.1 * (1 + delta, 1, 1 - delta)` at delta = 0.2), and
`gf.chains.sticky(6, 0.5, 0.5, 0.05)`, both width 8, init_scale 1e-3, seed 0,
t1 = 20000; the real-text rows use the character-level bigram chain of the
built-in corpus (`gf.chains.from_text(None, 102, level="char")`).
"""

import argparse
import math
import os
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import jax
import numpy as np

import gradflow as gf

# the measurements of docs/paper.md on the rank-one manifold and the
# closed-form linear flow (gradflow.markov)
from gradflow import markov as pm, theory


sys.path.insert(0, str(Path(__file__).resolve().parent))
import _paper_page as page  # noqa: E402


WIDTH, INIT, SEED, T1 = 8, 1e-3, 0, 20000.0
TOP, RARE, LAM = (
    0.7,
    0.1,
    0.5,
)  # the main scenario: pi(delta) = (TOP, RARE(1+delta), RARE, RARE(1-delta))
SMALL_DELTA = 0.05  # the small-delta range of the log-log fits of claim 4
SIGNIFICANT = 0.01  # an entropy fall or rise counts when it is at least 1 % of H(pi)
GROUPS = ("condensation", "focus", "dilution", "new_direction", "cycles", "text")


def main_pi(delta: float) -> tuple[float, ...]:
    return (TOP, RARE * (1 + delta), RARE, RARE * (1 - delta))


@dataclass(frozen=True)
class Scenario:
    key: str
    label: str
    delta: float  # the asymmetry of its rare tokens

    def chain(self, delta: float | None = None) -> gf.MarkovChain:
        delta = self.delta if delta is None else float(delta)
        if self.key == "d4":
            return gf.chains.from_pi(main_pi(delta), lam=LAM)
        return gf.chains.sticky(6, 0.5, 0.5, delta)


SCENARIOS = (
    Scenario("d4", "d=4, from_pi((0.7, 0.12, 0.1, 0.08), 0.5)", 0.2),
    Scenario("sticky6", "sticky(6, 0.5, 0.5, 0.05)", 0.05),
)


@dataclass(frozen=True)
class Settings:
    """What differs between the full page and the fast check."""

    eps: tuple[float, ...] = (1e-3, 1e-4, 1e-5, 1e-6, 1e-7)
    small_deltas: tuple[float, ...] = tuple(np.geomspace(1e-3, SMALL_DELTA, 12))
    scenarios: tuple[str, ...] = ("d4", "sticky6")
    text_t1: float = 2000.0
    text_vocab: int = 102
    ablation: bool = True


FULL = Settings()
FAST = Settings(
    eps=(1e-3, 1e-5, 1e-7),
    small_deltas=tuple(np.geomspace(1e-3, SMALL_DELTA, 5)),
    scenarios=("d4",),
)
FAST_GROUPS = GROUPS[:-1]  # the real-text flow (d = 102) is the slow tier's


# ---------------------------------------------------------------------------
# Rows
# ---------------------------------------------------------------------------


@dataclass
class Row:
    claim: int
    part: str
    scenario: str
    quantity: str
    predicted: str
    measured: str
    error: str
    check: str
    holds: bool
    expect: bool = True
    see: str = ""
    values: dict | None = None

    @property
    def as_expected(self) -> bool:
        return self.holds == self.expect


def rel(measured: float, predicted: float) -> float:
    return abs(measured - predicted) / abs(predicted)


def fmt(x: float, digits: int = 4) -> str:
    if x is None or not np.isfinite(x):
        return "nan"
    if x == 0:
        return "0"
    if 1e-3 <= abs(x) < 1e4:
        return f"{x:.{digits}g}"
    return f"{x:.{max(digits - 2, 1)}e}"


def pct(x: float) -> str:
    return f"{100 * x:.2g} %" if np.isfinite(x) else "nan"


def loglog_fit(x, y) -> tuple[float, float]:
    """Slope and R^2 of log y against log x."""
    lx, ly = np.log(np.asarray(x, float)), np.log(np.asarray(y, float))
    slope, intercept = np.polyfit(lx, ly, 1)
    resid = ly - (slope * lx + intercept)
    r2 = 1 - np.sum(resid**2) / np.sum((ly - ly.mean()) ** 2)
    return float(slope), float(r2)


def rate_row(
    claim, part, scn, quantity, predicted, measured, tol, *, see="", expect=True
):
    """A predicted rate against a measured one, within `tol` (relative)."""
    e = rel(measured, predicted)
    return Row(
        claim, part, scn, quantity, fmt(predicted, 6), fmt(measured, 6), pct(e),
        f"rel. error <= {pct(tol)}", bool(e <= tol), expect, see,
        {"predicted": predicted, "measured": measured, "rel_error": e},
    )  # fmt: skip


# Tolerances, each with its reason (docs/paper.md, "How the rows are checked").
RATE_TOL = 0.05  # a rate fitted on the saves of a flow: windows start one decade above the closest approach, where a neighbouring mode still biases a slope by a few per cent (docs/theory.md measured 0.2-3.2 %)
TIME_TOL = 0.01  # the escape-time formula is asymptotic in eps; its crossings are interpolated between saves 1.45 % apart in t
POINT_TOL = 1e-6  # linear algebra at a refined critical point (|grad L| < 1e-10): round-off and refinement error
COS_TOL = 0.99  # an alignment: the frozen O(init_scale) components are about 1 % of an O(1) matrix
EXPONENT_TOL = 0.1  # the exponent of a log-log fit over two decades of delta or eps
R2_MIN = 0.99
EIG_FLOOR = 1e-12  # an eigenvalue of a dense Hessian with entries O(1) resolved above round-off (1e-16) by 1e4


def flat_points(traj) -> np.ndarray:
    """Every saved point of a trajectory as one flat vector (rows)."""
    leaves = jax.tree.leaves(traj.params)
    return np.concatenate([np.asarray(x).reshape(len(traj.ts), -1) for x in leaves], 1)


CHECKS_TEXT = f"""
Each row's check is a direction (a sign, an order, which token) and a
tolerance, fixed before the measurement and justified here:

- **Rates fitted on a flow's saves** ({RATE_TOL:.0%} relative): every fit
  window starts one decade above a plateau's closest approach, where a
  neighbouring mode still biases a log-slope by a few per cent
  (docs/theory.md measured 0.2 % to 3.2 % on its runs).
- **Escape times** ({TIME_TOL:.0%}): the formula is asymptotic in
  $\\varepsilon$ and the crossing is interpolated between saves 1.45 % apart.
- **Linear algebra at a refined critical point** ({POINT_TOL:g} relative):
  the refinement stops at $|\\nabla L| < 10^{{-10}}$; at the point refined from
  the flow's unigram plateau (which carries small $W_Q, W_K$) ten times
  $|W_Q||W_K|$, the size of their effect on the blocks.
- **Alignments** (cosine $\\ge$ {COS_TOL}): the frozen $O(\\varepsilon)$
  components are about 1 % of an $O(1)$ matrix.
- **Exponents of log-log fits** ($\\pm$ {EXPONENT_TOL}, $R^2 \\ge$ {R2_MIN}):
  over about two decades of $\\delta$ or four of $\\varepsilon$.
- **Eigenvalues counted as unstable**: above {EIG_FLOOR:g} (claim 4; round-off
  of a dense Hessian with $O(1)$ entries is $10^{{-16}}$) or above
  `gf.linearize`'s relative tolerance $10^{{-6}}$ (claim 2).
- **Entropy moves** (claims 3, 5, 6): a fall or a rise counts when it is at
  least {SIGNIFICANT:.0%} of $H(\\pi)$ (the stage detector's smallest entropy
  drop); the text queries' attention weights move by at least 0.01.

A row's `expect` (in `examples/paper.py`) is the verdict this page reports;
`python examples/paper.py --fast` (and `tests/test_paper.py`) fails when a
measured verdict differs from it, so a claim that stops holding, or starts
to, is caught.
"""


# ---------------------------------------------------------------------------
# The runs (each computed once, on demand)
# ---------------------------------------------------------------------------


class Study:
    """The flows, critical points and continuations the rows read, each
    computed once. `log` receives progress lines."""

    def __init__(self, settings: Settings = FULL, log=print):
        self.settings = settings
        self.log = log
        self.cache: dict = {}
        self.timings: dict[str, float] = {}

    def _get(self, key, make):
        if key not in self.cache:
            start, cpu = time.perf_counter(), time.process_time()
            self.cache[key] = make()
            wall, cpu = time.perf_counter() - start, time.process_time() - cpu
            self.timings[" ".join(map(str, key))] = wall
            self.log(f"  computed {key} in {wall:.1f} s ({cpu:.1f} s of CPU)")
        return self.cache[key]

    def scenario(self, key: str) -> Scenario:
        return next(s for s in SCENARIOS if s.key == key)

    def flow(self, key: str) -> gf.Trajectory:
        def make():
            return gf.integrate(
                self.scenario(key).chain(), INIT, width=WIDTH, t1=T1, seed=SEED,
                run=gf.Run(progress=False),
            )  # fmt: skip

        return self._get(("flow", key), make)

    def points(self, key: str) -> list:
        return self._get(
            ("points", key), lambda: theory.critical_points(self.flow(key))
        )

    def report(self, key: str) -> dict[str, dict]:
        """`gf.theory_report` of the scenario's flow, by quantity."""

        def make():
            rows = gf.theory_report(self.flow(key), points=self.points(key))
            return {r["quantity"]: r for r in rows}

        return self._get(("report", key), make)

    def unigram(self, key: str):
        """The critical point of the unigram plateau (loss H(pi))."""
        H = float(self.flow(key).problem.chain.unigram_entropy)
        return next(p for p in self.points(key) if abs(p.loss - H) <= 1e-6 * H)

    def post_focus(self, key: str):
        """The first converged saddle below the unigram plateau."""
        H = float(self.flow(key).problem.chain.unigram_entropy)
        return next(p for p in self.points(key) if p.converged and p.loss < H - 1e-3)

    def manifold_run(self, key: str, solver: str) -> gf.Trajectory:
        """The flow started exactly on the rank-one manifold: the free flow's
        save closest to the unigram point, rotated so that v = e_1 and its
        off-manifold coordinates set to 0 (`onto_manifold`). `solver`:
        "dopri8" (explicit: every stage is a sum of gradients, which vanish
        off the manifold, rtol 1e-10) or "default" (ROS34PW2, default
        tolerances: its W-matrix steps leave errors of the size of its atol
        in every coordinate)."""

        def make():
            start = pm.onto_manifold(self.flow(key).at(self.unigram(key).index))
            options = {
                "solver": gf.Solver("dopri8", rtol=1e-10),
                "saveat": gf.SaveAt(stages=False),
            }
            return gf.integrate(
                self.scenario(key).chain(), params=start, t1=T1 - self.unigram(key).t,
                run=gf.Run(progress=False), **(options if solver == "dopri8" else {}),
            )  # fmt: skip

        return self._get(("manifold", key, solver), make)

    def branch(self, key: str) -> list[dict]:
        """The post-focus critical point continued in delta, from the
        scenario's delta down to 0 (through `small_deltas`): refined on the
        rank-one manifold (gauge v = e_1, where it is a coordinate subspace
        that the refinement keeps), linearised, each mode split into its
        share along the manifold (`tangent_shares`) and across it."""

        def make():
            scn = self.scenario(key)
            path = [scn.delta, *[x for x in (0.15, 0.1, 0.07) if x < scn.delta]]
            path += sorted(
                (x for x in self.settings.small_deltas if x < scn.delta), reverse=True
            )
            path.append(0.0)
            point = pm.onto_manifold(self.post_focus(key).params)
            out = []
            for delta in path:
                chain = scn.chain(delta)
                point, ok = theory.refine_critical_point(chain, point)
                lin = gf.linearize(chain, point, method="dense")
                out.append(split_modes(lin, point) | {
                    "delta": delta, "converged": ok, "loss": lin.loss,
                    "distance": float(pm.manifold_distance(point)), "point": point,
                })  # fmt: skip
            return out

        return self._get(("branch", key), make)

    def symmetric_runs(self, key: str) -> dict[str, gf.Trajectory]:
        """delta = 0 (rare tokens exactly symmetric), from the scenario's random
        start and from that start with the rare tokens' W0 columns and W1 rows
        replaced by their mean (an invariant subspace of the delta = 0 flow)."""

        def make():
            chain = self.scenario(key).chain(0.0)
            p0 = self.flow(key).at(0)
            W0, W1 = np.asarray(p0.W0).copy(), np.asarray(p0.W1).copy()
            W0[:, 1:] = W0[:, 1:].mean(axis=1, keepdims=True)
            W1[1:, :] = W1[1:, :].mean(axis=0, keepdims=True)
            sym = gf.Params(jax.numpy.asarray(W0), jax.numpy.asarray(W1), p0.WQ, p0.WK)
            return {
                name: gf.integrate(
                    chain, params=start, t1=T1, run=gf.Run(progress=False)
                )
                for name, start in (("random", p0), ("symmetric", sym))
            }

        return self._get(("symmetric", key), make)

    def ablation(self) -> dict[str, gf.Trajectory]:
        """Several transition matrices with the main scenario's pi (`ablation_chains`),
        each integrated as the main flow."""

        def make():
            out = {}
            for name, chain in ablation_chains().items():
                if name == f"from_pi(pi, lam={LAM})":
                    out[name] = self.flow("d4")
                else:
                    out[name] = gf.integrate(
                        chain,
                        INIT,
                        width=WIDTH,
                        t1=T1,
                        seed=SEED,
                        run=gf.Run(progress=False),
                    )
            return out

        return self._get(("ablation",), make)

    def text(self) -> gf.Trajectory:
        """The character-level bigram chain of the built-in corpus."""

        def make():
            chain = gf.chains.from_text(
                None, vocab_size=self.settings.text_vocab, level="char"
            )
            return gf.integrate(
                chain,
                INIT,
                width=WIDTH,
                t1=self.settings.text_t1,
                seed=SEED,
                run=gf.Run(progress=False),
            )

        return self._get(("text",), make)

    def eps_runs(self, key: str) -> list[dict]:
        """From `init_scale = eps` (seed 0, so the start is eps times one fixed
        draw), the flow solved tightly (Dopri8, rtol 1e-11) on 798 evenly
        spaced saves past the escape, next to the flow linearised at the
        origin and solved in closed form."""

        def make():
            chain = self.scenario(key).chain()
            sigma = theory.origin_rate(chain)
            tau1 = theory.origin_escape_offset(chain)
            origin = theory.origin_point(gf.Model(), chain.d, WIDTH)
            lin0 = gf.linearize(chain, origin, method="dense")
            out = []
            for eps in self.settings.eps:
                t1 = (math.log(1 / eps) + 12) / sigma
                ts = np.linspace(0.0, t1, 798)
                flats = []
                for rtol in (1e-12, 1e-10):
                    traj = gf.integrate(
                        chain, eps, width=WIDTH, t1=t1, saveat=gf.SaveAt(ts, stages=False), seed=SEED,
                        solver=gf.Solver("dopri8", rtol=rtol), run=gf.Run(progress=False),
                    )  # fmt: skip
                    flats.append(flat_points(traj))
                flat = flats[0]
                lin_flat = pm.linear_solution(lin0, origin, traj.at(0), ts)
                g0 = theory.unstable_amplitude(chain, traj.at(0))
                out.append({
                    "eps": eps, "ts": ts, "loss": np.asarray(traj.loss), "flat": flat,
                    # an upper estimate of the solve's own error: the looser
                    # solve's distance from it
                    "floor": np.linalg.norm(flats[1] - flat, axis=1),
                    "linear": lin_flat, "g0": g0, "sigma": sigma, "tau1": tau1,
                    "unstable": np.stack([np.asarray(theory.flatten_params(lin0.mode(i)))
                                          for i in range(lin0.num_unstable)]),
                    "chain": chain,
                })  # fmt: skip
            return out

        return self._get(("eps", key), make)


# ---------------------------------------------------------------------------
# 1. Condensation
# ---------------------------------------------------------------------------

AMP_WINDOW = 0.1  # the linear regime of the error bound: |theta_lin| <= 0.1


def crossing(ts, values, level) -> float:
    """First time `values` falls through `level` (linear interpolation)."""
    below = np.flatnonzero(values <= level)
    if below.size == 0 or below[0] == 0:
        return float("nan")
    i = below[0]
    f = (values[i - 1] - level) / (values[i - 1] - values[i])
    return float(ts[i - 1] + f * (ts[i] - ts[i - 1]))


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
        t_cross.append(crossing(ts, r["loss"], level))
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
        cosines.append(float(abs(pm.score_alignment(S2, np.asarray(chain.pi)))))
    return {
        "rate": lin.unstable_rate, "emb_max": float(emb.max()), "emb_min": float(emb.min()),
        "coupling": coupling, "hess_max": float(np.abs(H).max()),
        "clusters": [float(lin.eigenvalues[c[0]]) for c in unstable],
        "multiplicity": int(top.size), "att_share": att_share,
        "score_cos_min": float(min(cosines)) if cosines else float("nan"),
        "next": float(lin.eigenvalues[top.size]) if top.size < lin.eigenvalues.size else float("nan"),
    }  # fmt: skip


def _saddle_rows(study: Study, key: str) -> list[Row]:
    problem = study.flow(key).problem
    chain = problem.chain
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
    S = np.linalg.norm(pm.score_matrix(traj.params), axis=(1, 2))
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
        S = pm.score_matrix(traj.params)
        cos = pm.score_alignment(S, pi)
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
        d_on = pm.manifold_distance(on.params)
        d_free = pm.manifold_distance(traj.params)
        upto = (ts >= cp.t) & (ts <= dil.t_end)
        grow = float(np.max(d_free[upto]) / d_free[cp.index])
        rows.append(Row(3, "the rank-one manifold is invariant", key,
                        f"distance from the manifold of the flow started on it (at t = {cp.t:.4g}; Dopri8), max over the run to t1",
                        "0", f"{np.max(d_on):.1e}", "", "<= 1e-12 (round-off)", bool(np.max(d_on) <= 1e-12),
                        see="figure paper_dilution"))  # fmt: skip
        ros = study.manifold_run(key, "default")
        d_ros = pm.manifold_distance(ros.params)
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
    Sn = np.linalg.norm(pm.score_matrix(traj.params), axis=(1, 2))
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


def split_modes(lin, point) -> dict:
    """-Hessian at a point of the rank-one manifold (gauge v = e_1) restricted
    to the manifold's tangent space and to its orthogonal complement (both
    invariant: the manifold is invariant and the rotations of v are
    symmetries), with the eigenvalue clusters of each."""
    V = np.stack(
        [
            np.asarray(theory.flatten_params(lin.mode(i)))
            for i in range(len(lin.eigenvalues))
        ]
    )
    J = (V.T * lin.eigenvalues) @ V  # -Hessian
    T = pm.tangent_basis(point)
    N = np.linalg.svd(np.eye(J.shape[0]) - T.T @ T)[0][:, : J.shape[0] - T.shape[0]].T
    leak = float(np.abs(N @ J @ T.T).max())  # 0 when both are invariant
    out: dict = {"top": float(lin.eigenvalues[0]), "tol": float(lin.tol), "leak": leak}
    for name, B in (("tangential", T), ("transverse", N)):
        ev = np.sort(np.linalg.eigvalsh(B @ J @ B.T))[::-1]
        clusters = [c for c in theory.eigen_clusters(ev) if ev[c[0]] > EIG_FLOOR]
        out[name] = [float(ev[c[0]]) for c in clusters]
        out[name + "_mult"] = [int(c.size) for c in clusters]
        out[name + "_top"] = float(ev[0])
    return out


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
    dist = pm.manifold_distance(traj.params)
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


# ---------------------------------------------------------------------------
# 5. Cycles
# ---------------------------------------------------------------------------


def ablation_chains() -> dict[str, gf.MarkovChain]:
    """Transition matrices that share the main scenario's pi: the paper's form
    at three lambdas, a Metropolis chain (uniform proposals) and a random
    reversible chain (pi_i P_ij = pi_j P_ji = K_ij pi_i pi_j / c, K symmetric
    uniform in [0.2, 1], seed 0)."""
    pi = np.array(main_pi(0.2))
    d = pi.size
    out = {
        f"from_pi(pi, lam={lam})": gf.chains.from_pi(pi, lam) for lam in (0.2, LAM, 0.8)
    }
    P = np.minimum(1.0, pi[None, :] / pi[:, None]) / d
    np.fill_diagonal(P, 0.0)
    np.fill_diagonal(P, 1.0 - P.sum(axis=1))
    out["Metropolis, uniform proposals"] = gf.MarkovChain(P)
    K = np.random.default_rng(0).uniform(0.2, 1.0, (d, d))
    F = (K + K.T) / 2 * np.outer(pi, pi)
    np.fill_diagonal(F, 0.0)
    P = F / pi[:, None]
    P /= 1.25 * P.sum(axis=1).max()
    np.fill_diagonal(P, 1.0 - P.sum(axis=1))
    out["random reversible, seed 0"] = gf.MarkovChain(P)
    for name, chain in out.items():
        if not np.allclose(chain.pi, pi, rtol=1e-10, atol=0):
            raise AssertionError(f"{name}: pi = {chain.pi}, not {pi}")
    return out


def swings(ts, values, h: float) -> list[tuple[float, float, str]]:
    """The turning points of a curve that reverse by at least `h` (a zigzag
    filter): `(t, value, "min" | "max")`, each confirmed by a move of `h` the
    other way after it."""
    out, direction, cand = [], 0, 0
    v = np.asarray(values)
    for i in range(1, v.size):
        if direction == 0:
            if abs(v[i] - v[0]) >= h:
                direction, cand = (1 if v[i] > v[0] else -1), i
        elif direction > 0:
            if v[i] > v[cand]:
                cand = i
            elif v[i] <= v[cand] - h:
                out.append((float(ts[cand]), float(v[cand]), "max"))
                direction, cand = -1, i
        else:
            if v[i] < v[cand]:
                cand = i
            elif v[i] >= v[cand] + h:
                out.append((float(ts[cand]), float(v[cand]), "min"))
                direction, cand = 1, i
    return out


def entropy_cycle(traj, H) -> dict:
    """An entropy curve `H` read at the stages of `traj`: its fall over the
    first focus (start to the focus's end), its rise over the first dilution
    (largest value in the stage over its value at the start) and its largest
    fall below its running maximum after the dilution ends."""
    ts = np.asarray(traj.ts)
    at = lambda t: int(np.argmin(np.abs(ts - t)))  # noqa: E731
    focus = next(s for s in traj.stages if s.name == "focus")
    dil = next((s for s in traj.stages if s.name == "dilution"), None)
    out = {
        "start": float(H[0]),
        "t_focus": focus.t_end,
        "focus": float(H[at(focus.t_end)]),
    }
    out["fall"] = out["start"] - out["focus"]
    if dil is None:
        return out | {"rise": float("nan"), "again": float("nan")}
    i0, i1 = at(dil.t_start), at(dil.t_end)
    j = i0 + int(np.argmax(H[i0 : i1 + 1]))
    out |= {"t_dil": float(ts[j]), "dil": float(H[j]), "rise": float(H[j] - H[i0])}
    drop = np.maximum.accumulate(H[i1:]) - H[i1:]
    k = i1 + int(np.argmax(drop))
    return out | {
        "again": float(drop.max()),
        "t_again": float(ts[k]),
        "low": float(H[k]),
    }


def cycle_text(c: dict) -> str:
    text = f"{c['start']:.4f} -> {c['focus']:.4f} (focus end, t = {c['t_focus']:.4g})"
    if np.isfinite(c["rise"]):
        text += f" -> {c['dil']:.4f} (largest in the dilution, t = {c['t_dil']:.4g}; rise {c['rise']:+.4f})"
        text += f"; later falls by {c['again']:.4f} (to {c['low']:.4f} at t = {c['t_again']:.4g})"
    return text


def rows_cycles(study: Study) -> list[Row]:
    rows = []
    for key in study.settings.scenarios:
        traj = study.flow(key)
        h = SIGNIFICANT * float(traj.problem.chain.unigram_entropy)
        for name, H in (("H(M), the pooled attention mass", pooled_entropy(traj)),
                        ("H_A, the pi-weighted attention entropy", np.asarray(traj.extras["att_entropy"]))):  # fmt: skip
            c = entropy_cycle(traj, H)
            rows.append(Row(5, "the entropy falls (focus), rises (dilution), falls again", key,
                            f"{name}: over the first focus, over the first dilution, after it",
                            "falls, rises, falls", cycle_text(c), "",
                            f"each move >= {SIGNIFICANT:.0%} of H(pi) = {h:.3g}",
                            bool(c["fall"] >= h and c["rise"] >= h and c["again"] >= h),
                            expect=name.startswith("H(M)"), see="figure paper_cycles"))  # fmt: skip
        focus = [s for s in traj.stages if s.name == "focus"]
        new = [s for s in traj.stages if s.name == "new_direction"]
        rows.append(Row(5, "the cycle repeats", key, "focus stages (their cycles) and new directions by t1",
                        ">= 2 focus stages, a new direction between",
                        f"{len(focus)} focus stages (cycles {[s.cycle for s in focus]}), {len(new)} new directions",
                        "", "two focus stages in different cycles", len({s.cycle for s in focus}) >= 2,
                        see="[stages.md](stages.md)"))  # fmt: skip
    if study.settings.ablation:
        rows += _ablation_rows(study)
    return rows


ORDER = ("condensation", "focus", "dilution", "new_direction")


def first_cycle(traj) -> list:
    """The first stage of each kind in ORDER, in time order."""
    firsts = [next((s for s in traj.stages if s.name == k), None) for k in ORDER]
    return sorted((s for s in firsts if s is not None), key=lambda s: s.t_start)


def _ablation_rows(study: Study) -> list[Row]:
    rows, diluted = [], []
    pi = np.array(main_pi(0.2))
    for name, traj in study.ablation().items():
        stages = first_cycle(traj)
        names = [s.name for s in stages]
        focus = next((s for s in stages if s.name == "focus"), None)
        in_order = names == [k for k in ORDER if k in names]
        token = focus.tokens[0] if focus else -1
        complete = {"condensation", "focus", "new_direction"} <= set(names)
        diluted.append("dilution" in names)
        rows.append(Row(5, "the same stages in the same order for every P with one pi", "ablation",
                        f"P = {name}: the first stage of each kind, in time order; the focus token",
                        " -> ".join(ORDER) + f"; token {int(np.argmax(pi))}",
                        " -> ".join(f"{s.name} ({s.t_start:.3g})" for s in stages) + f"; token {token}",
                        "", "in this order (dilution may be missing), focus on argmax pi",
                        bool(in_order and complete and token == int(np.argmax(pi))),
                        see="figure paper_cycles"))  # fmt: skip
    rows.append(Row(5, "the same stages in the same order for every P with one pi", "ablation",
                    "transition matrices whose first cycle has a dilution stage", f"{len(diluted)} of {len(diluted)}",
                    f"{sum(diluted)} of {len(diluted)}", "", "all", all(diluted), expect=False,
                    see="figure paper_cycles"))  # fmt: skip
    return rows


# ---------------------------------------------------------------------------
# 6. Real text
# ---------------------------------------------------------------------------

QUERIES = 4  # the query tokens followed: the most frequent ones after the top token


def attention_curves(traj) -> np.ndarray:
    """A at every save, shape (saves, d, d)."""
    chain = traj.problem.chain
    return np.asarray(jax.vmap(lambda p: gf.attention(p, chain))(traj.params))


def query_story(traj, A, q: int, top: int) -> dict:
    """For query token `q`: diffuse before the attention moves (KL(A_q || pi)
    at the end of condensation or the start of the first focus, whichever
    comes first: on text the first focus overlaps the end of condensation);
    the first turning point of A[q, top] (a max: focus); whether it gave back
    half of its gain after that (dilution); the first save after that where
    q's largest attention weight is on itself (focus on itself)."""
    ts = np.asarray(traj.ts)
    pi = np.asarray(traj.problem.chain.pi)
    starts = [s.t_end for s in traj.stages if s.name == "condensation"]
    starts += [s.t_start for s in traj.stages if s.name == "focus"][:1]
    i0 = int(np.flatnonzero(ts <= min(starts))[-1])
    kl = float(np.sum(A[i0, q] * np.log(A[i0, q] / pi)))
    curve = A[:, q, top]
    sw = swings(ts, curve, 0.01)
    peak = next((i for i, (t, v, k) in enumerate(sw) if k == "max"), None)
    out = {
        "kl": kl,
        "t_focus": float("nan"),
        "gain": float("nan"),
        "t_dilute": float("nan"),
        "t_self": float("nan"),
    }
    if peak is None or sw[:1] != sw[peak : peak + 1]:
        return out
    t_peak, v_peak, _ = sw[peak]
    out["t_focus"], out["gain"] = t_peak, v_peak - float(curve[i0])
    half = 0.5 * (v_peak + float(curve[i0]))
    later = np.flatnonzero((ts > t_peak) & (curve <= half))
    if later.size:
        out["t_dilute"] = float(ts[later[0]])
        own = np.flatnonzero((ts > ts[later[0]]) & (np.argmax(A[:, q], axis=1) == q))
        if own.size:
            out["t_self"] = float(ts[own[0]])
    return out


def rows_text(study: Study) -> list[Row]:
    traj = study.text()
    chain = traj.problem.chain
    pi = np.asarray(chain.pi)
    rank = {int(k): r + 1 for r, k in enumerate(np.argsort(-pi, kind="stable"))}
    tok = chain.tokens
    see = "[text.md](text.md#what-real-text-shows)"
    focus = [s for s in traj.stages if s.name == "focus"]
    dil = [s for s in traj.stages if s.name == "dilution"]
    label = lambda ks: ", ".join(f"{tok[k]!r} ({rank[k]})" for k in ks)  # noqa: E731
    rows = [Row(6, "frequent tokens draw the attention first", "text",
                "tokens of the first focus stage (rank by frequency)", "rank 1",
                label(focus[0].tokens) if focus else "no focus", "", "rank 1 first",
                bool(focus and rank[focus[0].tokens[0]] == 1), see=see)]  # fmt: skip
    h = SIGNIFICANT * float(chain.unigram_entropy)
    for name, H in (
        ("H(M)", pooled_entropy(traj)),
        ("H_A", np.asarray(traj.extras["att_entropy"])),
    ):
        c = entropy_cycle(traj, H)
        rows.append(Row(6, "then the attention dilutes", "text", f"{name}: over the first focus, over the first dilution",
                        "falls, rises", cycle_text(c), "", f"each move >= {SIGNIFICANT:.0%} of H(pi) = {h:.3g}",
                        bool(c["fall"] >= h and c["rise"] >= h), see=see))  # fmt: skip
    nxt = [s for s in focus if dil and s.t_start >= dil[0].t_end]
    rows.append(Row(6, "then medium-frequency tokens are learnt", "text",
                    "tokens of the first focus stage after the first dilution (rank)", "rank > 1",
                    label(nxt[0].tokens) + f" (t = {nxt[0].t_start:.4g})" if nxt else "none", "",
                    "not the most frequent token", bool(nxt and rank[nxt[0].tokens[0]] > 1), see=see))  # fmt: skip
    A = attention_curves(traj)
    top = int(np.argmax(pi))
    queries = [int(k) for k in np.argsort(-pi, kind="stable")[1 : 1 + QUERIES]]
    for q in queries:
        st = query_story(traj, A, q, top)
        steps = [
            st["kl"] <= 1e-3,
            np.isfinite(st["t_focus"]),
            np.isfinite(st["t_dilute"]),
            np.isfinite(st["t_self"]),
        ]
        rows.append(Row(6, "one query: diffuse, focused on whitespace, diluted, focused on itself", "text",
                        f"query {tok[q]!r} (rank {rank[q]}): KL(A_q || pi) before the first focus; A[q, {tok[top]!r}] peaks, gives back half its gain; argmax_k A[q, k] = q",
                        "all four, in order",
                        f"KL {st['kl']:.1e}; peak t = {st['t_focus']:.4g} (gain {st['gain']:+.3f}); diluted t = {st['t_dilute']:.4g}; on itself t = {st['t_self']:.4g}",
                        "", "KL <= 1e-3, then each step", all(steps), expect=q == queries[0],
                        see="figure paper_text"))  # fmt: skip
    return rows


# ---------------------------------------------------------------------------
# The command
# ---------------------------------------------------------------------------

ROWS = {
    "condensation": rows_condensation,
    "focus": rows_focus,
    "dilution": rows_dilution,
    "new_direction": rows_new_direction,
    "cycles": rows_cycles,
    "text": rows_text,
}


def measure(study: Study, groups=GROUPS) -> dict[str, list[Row]]:
    """The rows of each group in `groups`, measured on `study`'s runs."""
    out = {}
    for group in groups:
        start = time.perf_counter()
        out[group] = ROWS[group](study)
        study.log(
            f"{group}: {len(out[group])} rows in {time.perf_counter() - start:.1f} s"
        )
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--fast",
        action="store_true",
        help="reduced settings; writes nothing unless --out",
    )
    parser.add_argument(
        "--only",
        nargs="+",
        choices=GROUPS,
        help="measure these groups only (prints them)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="root of docs/ (default: the repository's, in full mode)",
    )
    args = parser.parse_args(argv)
    settings = FAST if args.fast else FULL
    study = Study(settings)
    start = time.perf_counter()
    rows = measure(study, args.only or (FAST_GROUPS if args.fast else GROUPS))
    wall = time.perf_counter() - start
    for group, group_rows in rows.items():
        print(page.format_rows(group, group_rows))
    wrong = [r for rs in rows.values() for r in rs if not r.as_expected]
    out = (
        args.out
        if args.out is not None
        else (
            None
            if (args.fast or args.only)
            else Path(__file__).resolve().parent.parent / "docs"
        )
    )
    if out is not None:
        meta = {
            "command": "python examples/paper.py" + (" --fast" if args.fast else ""),
            "wall_time_s": wall, "load_average": os.getloadavg(),
            "cpus": os.cpu_count(), "gradflow": gf.__version__,
            "timings_s": study.timings, "settings": asdict(settings),
        }  # fmt: skip
        page.write(out, study, rows, meta, sys.modules[__name__])
    print(
        f"{sum(len(r) for r in rows.values())} rows in {wall:.0f} s; {len(wrong)} differ from the page's verdict"
    )
    for r in wrong:
        print(
            f"  claim {r.claim} [{r.scenario}] {r.part}: {r.quantity}: holds = {r.holds}, page says {r.expect}"
        )
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
