"""The study behind docs/paper.md: its scenarios, the settings of the full
page and of the fast check, the rows and the tolerances of their checks, and
the runs the rows read (`Study`: flows, critical points and continuations,
each computed once)."""

import math
import time
from dataclasses import dataclass

import jax
import numpy as np

import gradflow as gf
from gradflow import theory


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

A row's `expect` (in `examples/paper/`) is the verdict this page reports;
`python -m examples.paper --fast` (and `tests/test_paper.py`) fails when a
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
            start = gf.markov.onto_manifold(self.flow(key).at(self.unigram(key).index))
            explicit = solver == "dopri8"
            return gf.integrate(
                self.scenario(key).chain(), params=start, t1=T1 - self.unigram(key).t,
                saveat=gf.SaveAt(stages=not explicit),
                solver=gf.Solver("dopri8", rtol=1e-10) if explicit else None,
                run=gf.Run(progress=False),
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
            point = gf.markov.onto_manifold(self.post_focus(key).params)
            out = []
            for delta in path:
                chain = scn.chain(delta)
                point, ok = theory.refine_critical_point(chain, point)
                lin = gf.linearize(chain, point, method="dense")
                out.append(split_modes(lin, point) | {
                    "delta": delta, "converged": ok, "loss": lin.loss,
                    "distance": float(gf.markov.manifold_distance(point)), "point": point,
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
                lin_flat = gf.markov.linear_solution(lin0, origin, traj.at(0), ts)
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
    T = gf.markov.tangent_basis(point)
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
