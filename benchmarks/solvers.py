"""Solver benchmark for the population gradient flow (issue 4).

Integrates reference scenarios with every candidate solver, side by side in one
process (compiled first, then interleaved repeats, median wall time), and prints
one table per scenario: wall time, steps, rejected steps, gradient evaluations,
Hessian-vector products, and accuracy against a tight-tolerance reference
(the times at which the loss crosses the midpoints of its drops, the final loss
and the final parameters).

    python benchmarks/solvers.py --quick        # sticky, main rows, about 3 min
    python benchmarks/solvers.py                # sticky, all baselines, ~7 min
    python benchmarks/solvers.py --scenario random16 --scenario big   # unmeasured
    python benchmarks/solvers.py --scenario full   # the full model variant, ~10 min

The tight reference (Diffrax Tsit5, rtol 1e-10, atol 1e-13) is cached in
`--cache` (default `~/.cache/gradflow-bench`).

OpenBLAS threads: on a machine whose cores are oversubscribed, OpenBLAS's
threads spin against each other and one 224x224 `eigh` takes 0.2-1 s instead
of 6 ms (measured on the 2-core development machine). The script therefore sets
`OPENBLAS_NUM_THREADS=1` before NumPy is imported, unless it is already set.
"""

import os


os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import contextlib  # noqa: E402
import io  # noqa: E402
import pathlib  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import diffrax as dfx  # noqa: E402
import equinox as eqx  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.flatten_util import ravel_pytree  # noqa: E402

import gradflow as gf  # noqa: E402


# not public: the plain-Diffrax rows count their work as a Trajectory's stats do


# -- scenarios ------------------------------------------------------------------


def sticky_scenario():
    return dict(
        name="sticky d=6 m=8",
        chain=gf.chains.sticky(6, 0.5, 0.5, 0.05),
        width=8,
        init_scale=1e-3,
        seed=0,
        t1=20_000.0,
    )


def random_scenario():
    return dict(
        name="random d=16 m=16",
        chain=gf.chains.random(16, seed=0),
        width=16,
        init_scale=1e-3,
        seed=0,
        t1=5_000.0,
    )


def big_scenario():
    # A text-sized chain (random bigram rows around a Zipf profile; the text
    # loader lives in another module).
    return dict(
        name="random d=256 m=32",
        chain=gf.chains.random(256, seed=0),
        width=32,
        init_scale=1e-3,
        seed=0,
        t1=2_000.0,
    )


def drop_levels(loss_ref: np.ndarray, ts: np.ndarray) -> list[float]:
    r"""Midpoints of the loss drops of the reference curve.

    A plateau is a run of save times over which $|dL/d\log t| < 2\cdot10^{-3}$;
    its value is the loss where $|dL/d\log t|$ is smallest. Each drop between
    consecutive plateaus (by more than 5e-3) gets the level halfway between them.
    """
    loss = loss_ref[1:]
    slope = np.abs(np.gradient(loss, np.log(ts[1:])))
    flat = slope < 2e-3
    plateaus = []
    i = 0
    while i < flat.size:
        if not flat[i]:
            i += 1
            continue
        j = i
        while j + 1 < flat.size and flat[j + 1]:
            j += 1
        k = i + int(np.argmin(slope[i : j + 1]))
        if not plateaus or plateaus[-1] - loss[k] > 5e-3:
            plateaus.append(float(loss[k]))
        i = j + 1
    return [0.5 * (a + b) for a, b in zip(plateaus[:-1], plateaus[1:], strict=True)]


def crossing_times(ts: np.ndarray, loss: np.ndarray, levels) -> list[float]:
    """First time the loss falls below each level (linear in $\\log t$)."""
    out = []
    for level in levels:
        below = np.flatnonzero(loss < level)
        if below.size == 0 or below[0] == 0:
            out.append(float("nan"))
            continue
        k = below[0]
        t0, t1 = np.log(ts[k - 1]) if ts[k - 1] > 0 else -50.0, np.log(ts[k])
        a, b = loss[k - 1], loss[k]
        out.append(float(np.exp(t0 + (a - level) / (a - b) * (t1 - t0))))
    return out


# -- runners --------------------------------------------------------------------


def _observe(t, y, args):
    del t
    return args.loss(y)


@eqx.filter_jit
def _diffrax_solve(solver, controller, dt0, params0, problem, t1, ts, max_steps):
    saveat = dfx.SaveAt(
        subs=[dfx.SubSaveAt(ts=ts, fn=_observe), dfx.SubSaveAt(t1=True)],
        solver_state=True,
    )
    return dfx.diffeqsolve(
        dfx.ODETerm(gf.GradientFlow()),
        solver,
        0.0,
        t1,
        dt0,
        params0,
        args=problem,
        saveat=saveat,
        stepsize_controller=controller,
        max_steps=max_steps,
        throw=False,
    )


class Candidate:
    """One row of the table: a solver and its settings."""

    def __init__(
        self,
        label,
        kind,
        solver=None,
        rtol=None,
        atol=None,
        dt=None,
        method=None,
        max_steps=2_000_000,
        slow=False,
    ):
        self.label, self.kind, self.solver = label, kind, solver
        self.rtol, self.atol, self.dt, self.method = rtol, atol, dt, method
        self.max_steps = max_steps
        # Slow rows (tens of seconds) are timed once, not repeated.
        self.slow = slow or kind == "scipy"

    def run(self, sc, ts, t1=None):
        """One solve; `t1` (with `ts` of the same length) overrides the scenario's,
        to compile on a short run without recompiling for the timed one."""
        chain = sc["chain"]
        params0 = gf.init_params(chain.d, sc["width"], sc["init_scale"], sc["seed"])
        t1 = sc["t1"] if t1 is None else t1
        if self.kind == "integrate":
            start = time.perf_counter()
            traj = gf.integrate(
                chain,
                sc["init_scale"],
                width=sc["width"],
                seed=sc["seed"],
                t1=t1,
                saveat=gf.SaveAt(ts),
                solver=gf.Solver(
                    self.solver,
                    rtol=self.rtol,
                    atol=self.atol,
                    max_steps=self.max_steps,
                ),
                run=gf.Run(progress=False),
            )
            wall = time.perf_counter() - start
            if len(traj.ts) != len(ts):
                return None
            return dict(
                wall=wall,
                loss=np.asarray(traj.loss),
                final=traj.params[-1],
                steps=traj.stats.num_steps,
                rejected=traj.stats.num_rejected_steps,
                grads=traj.stats.num_grad_evals,
                hvps=traj.stats.num_hvps,
                ok=traj.ok,
            )
        if self.kind == "diffrax":
            if self.dt is None:
                controller = dfx.PIDController(rtol=self.rtol, atol=self.atol)
                dt0 = None
            else:
                controller = dfx.ConstantStepSize()
                dt0 = self.dt
            start = time.perf_counter()
            sol = _diffrax_solve(
                self.solver,
                controller,
                dt0,
                params0,
                gf.problems.MarkovAttention(chain, width=sc["width"]),
                jnp.asarray(t1),
                jnp.asarray(ts),
                self.max_steps,
            )
            jax.block_until_ready(sol.ys)
            wall = time.perf_counter() - start
            stats = {k: int(v) for k, v in sol.stats.items()}
            return dict(
                wall=wall,
                loss=np.asarray(sol.ys[0]),
                final=jax.tree.map(lambda x: np.asarray(x)[0], sol.ys[1]),
                steps=stats["num_steps"],
                rejected=stats["num_rejected_steps"],
                grads=gf.count_grad_evals(self.solver, stats, sol.solver_state)
                if self.dt is None
                else stats["num_steps"],
                hvps=gf.count_hvps(self.solver, sol.solver_state),
                ok=bool(sol.result == dfx.RESULTS.successful),
            )
        if self.kind == "scipy":
            return _scipy_run(self, chain, params0, t1, ts)
        raise ValueError(self.kind)


_SCIPY_FUNS = {}


def _scipy_funs(chain, params0):
    key = (chain.d, params0.m)
    if key not in _SCIPY_FUNS:
        x0, unravel = ravel_pytree(params0)

        def loss(x, chain):
            return gf.population_loss(unravel(x), chain)

        grad = jax.jit(jax.grad(loss))
        hess = jax.jit(jax.hessian(loss))
        lossj = jax.jit(loss)
        _SCIPY_FUNS[key] = (grad, hess, lossj)
    return _SCIPY_FUNS[key]


def _scipy_run(cand, chain, params0, t1, ts):
    from scipy.integrate import solve_ivp

    grad, hess, lossj = _scipy_funs(chain, params0)
    x0, unravel = ravel_pytree(params0)
    counts = {"f": 0, "jac": 0}

    def fun(t, x):
        counts["f"] += 1
        return -np.asarray(grad(jnp.asarray(x), chain))

    def jac(t, x):
        counts["jac"] += 1
        return -np.asarray(hess(jnp.asarray(x), chain))

    start = time.perf_counter()
    sol = solve_ivp(
        fun,
        (0.0, t1),
        np.asarray(x0),
        method=cand.method,
        t_eval=ts,
        jac=jac,
        rtol=cand.rtol,
        atol=cand.atol,
    )
    wall = time.perf_counter() - start
    if not sol.success:
        return None
    loss = np.array([float(lossj(jnp.asarray(x), chain)) for x in sol.y.T])
    n = x0.shape[0]
    return dict(
        wall=wall,
        loss=loss,
        final=unravel(jnp.asarray(sol.y[:, -1])),
        steps=None,
        rejected=None,
        grads=counts["f"],
        hvps=counts["jac"] * n,
        ok=sol.success,
    )


# -- reference --------------------------------------------------------------------


def reference(sc, ts, cache: pathlib.Path):
    cache.mkdir(parents=True, exist_ok=True)
    key = f"ref-{sc['name'].replace(' ', '_').replace('=', '')}-{sc['t1']:g}-{len(ts)}"
    path = cache / f"{key}.npz"
    if path.exists():
        data = np.load(path)
        return data["loss"], data["final"]
    print(
        f"computing the tight reference for {sc['name']} (cached in {path})",
        file=sys.stderr,
        flush=True,
    )
    cand = Candidate(
        "ref", "diffrax", dfx.Tsit5(), rtol=1e-10, atol=1e-13, max_steps=20_000_000
    )
    out = cand.run(sc, ts)
    final = np.asarray(ravel_pytree(out["final"])[0])
    np.savez(path, loss=out["loss"], final=final)
    return out["loss"], final


# -- the full model variant ---------------------------------------------------------

FULL_MODEL = gf.Model(heads=2, layers=2, value=True, residual=True, norm="rms")


def full_combination(t1: float = 5000.0, max_steps: int = 400_000, json_path=None):
    """The full combination of the variants (`docs/variants.md`; 2 heads, 2 layers, value,
    residual, RMS norm; 872 parameters) on the default sticky scenario
    (width 8, init_scale 1e-3, seed 0, no stages), through
    `gf.integrate`: the default solver, the default with a rank-32 W (the
    Hessian there has 25 eigenvalues above 1 at the minimum, see
    docs/variants.md), the default with `jacobian_tol = 5` (fewer refreshes)
    and Diffrax Tsit5 at rtol 1e-7, side by side in one process. Each is
    compiled by a short solve first (same shapes), then timed once."""
    import json

    sc = sticky_scenario()
    chain = sc["chain"]
    rows = [
        (f"default ({gf.DEFAULT_SOLVER}, rank 16), rtol 1e-5", None, None),
        ("ros34pw2 rank 32, rtol 1e-5", gf.solvers.ROS34PW2(rank=32), None),
        (
            "ros34pw2 rank 16, jacobian_tol 5, rtol 1e-5",
            gf.solvers.ROS34PW2(jacobian_tol=5.0),
            None,
        ),
        ("tsit5, rtol 1e-7", "tsit5", 1e-7),
    ]
    kw = dict(
        width=sc["width"],
        seed=sc["seed"],
        model=FULL_MODEL,
        saveat=gf.SaveAt(stages=False),
        run=gf.Run(progress=False),
        solver=gf.Solver(max_steps=max_steps),
    )
    out = {}
    for label, solver, rtol in rows:
        gf.integrate(
            chain,
            sc["init_scale"],
            t1=t1 * 1e-3,
            solver=gf.Solver(solver, rtol=rtol),
            **kw,
        )
        start = time.perf_counter()
        traj = gf.integrate(
            chain, sc["init_scale"], t1=t1, solver=gf.Solver(solver, rtol=rtol), **kw
        )
        wall = time.perf_counter() - start
        out[label] = dict(
            traj=traj,
            wall=wall,
            ok=bool(traj.ok),
            steps=traj.stats.num_steps,
            rejected=traj.stats.num_rejected_steps,
            grads=traj.stats.num_grad_evals,
            hvps=traj.stats.num_hvps,
            rtol=traj.settings.rtol,
            atol=traj.settings.atol,
            final_loss=float(traj.loss[-1]),
        )
        print(label, {k: v for k, v in out[label].items() if k != "traj"}, flush=True)
    ref = out[rows[-1][0]]["traj"]
    print(
        f"\n### full combination {FULL_MODEL.label} "
        f"({ref.params[0].num_parameters} parameters), {sc['name']}, t1 = {t1:g}, "
        f"init_scale {sc['init_scale']:g}; conditional entropy "
        f"{float(chain.conditional_entropy):.10f}\n"
    )
    print(
        "| solver | ok | wall s | vs Tsit5 | steps | rejected | grad evals | HVPs "
        "| final loss | max abs loss diff to Tsit5 |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    base = out[rows[-1][0]]["wall"]
    for label, *_ in rows:
        r = out[label]
        n = min(len(r["traj"].loss), len(ref.loss))
        diff = float(np.max(np.abs(r["traj"].loss[:n] - ref.loss[:n])))
        r["max_loss_diff_to_tsit5"] = diff
        print(
            f"| {label} | {r['ok']} | {r['wall']:.1f} | {base / r['wall']:.2f}x "
            f"| {r['steps']:,} | {r['rejected']:,} | {r['grads']:,} | {r['hvps']:,} "
            f"| {r['final_loss']:.12f} | {diff:.1e} |"
        )
    # Why the default's steps stay small: the Hessian's spectrum where the flow
    # spends its time (the final point, at the minimum) against the rank of W.
    final = out[rows[0][0]]["traj"].params[-1]
    x, unravel = ravel_pytree(final)
    H = jax.hessian(lambda y: gf.population_loss(unravel(y), chain))(x)
    ev = np.sort(np.abs(np.linalg.eigvalsh(0.5 * (np.asarray(H) + np.asarray(H).T))))
    ev = ev[::-1]
    spectrum = {
        "largest": float(ev[0]),
        "num_above_1": int((ev > 1).sum()),
        "num_above_10": int((ev > 10).sum()),
        "17th": float(ev[16]),
        "25th": float(ev[24]),
        "26th": float(ev[25]),
        "33rd": float(ev[32]),
    }
    print(f"\n|eigenvalues| of the Hessian at t = {t1:g} (default solve): {spectrum}")
    out["spectrum"] = spectrum
    if json_path:
        with open(json_path, "w") as f:
            json.dump(
                {
                    k: {kk: vv for kk, vv in v.items() if kk != "traj"}
                    for k, v in out.items()
                },
                f,
                indent=1,
            )
    return out


# -- table --------------------------------------------------------------------------


def candidates(sc, quick: bool):
    n = 2 * sc["chain"].d * sc["width"] + 2 * sc["width"] ** 2
    # atol scaled with init_scale as in gradflow.default_tolerances.
    scale = sc["init_scale"]
    rows = [
        Candidate(f"default: integrate() ({gf.DEFAULT_SOLVER})", "integrate", None),
        Candidate(
            "tsit5 rtol 1e-7",
            "diffrax",
            dfx.Tsit5(),
            rtol=1e-7,
            atol=1e-7 * scale,
            slow=True,
        ),
    ]
    # The default's solver and tolerances through diffeqsolve, which reports
    # Hessian-vector products (integrate does not, yet).
    rows.append(
        Candidate(
            "ros34pw2 rank 16, rtol 1e-5 (= default)",
            "diffrax",
            gf.solvers.ROS34PW2(),
            rtol=1e-5,
            atol=1e-7 * scale,
        )
    )
    if quick:
        return rows
    if n <= 2000:
        rows.append(
            Candidate(
                "ros34pw2 dense W, rtol 1e-5",
                "diffrax",
                gf.solvers.ROS34PW2(rank=None),
                rtol=1e-5,
                atol=1e-7 * scale,
            )
        )
    rows += [
        Candidate(
            "ros34pw2 rank 16, rtol 1e-7",
            "diffrax",
            gf.solvers.ROS34PW2(),
            rtol=1e-7,
            atol=1e-9 * scale,
        ),
        Candidate(
            "ros2 rank 16, rtol 1e-5",
            "diffrax",
            gf.solvers.ROS2(),
            rtol=1e-5,
            atol=1e-7 * scale,
        ),
        Candidate(
            "ros34pw2 rank 8, rtol 1e-5",
            "diffrax",
            gf.solvers.ROS34PW2(rank=8),
            rtol=1e-5,
            atol=1e-7 * scale,
        ),
        Candidate(
            "euler (GD) dt 0.015",
            "diffrax",
            dfx.Euler(),
            dt=0.015,
            max_steps=int(sc["t1"] / 0.015) + 10,
            slow=True,
        ),
    ]
    if n <= 300:
        rows += [
            Candidate(
                "kvaerno5 rtol 1e-7",
                "diffrax",
                dfx.Kvaerno5(),
                rtol=1e-7,
                atol=1e-7 * scale,
                slow=True,
            ),
            Candidate(
                "scipy LSODA 1e-7",
                "scipy",
                method="LSODA",
                rtol=1e-7,
                atol=1e-7 * scale,
            ),
            Candidate(
                "scipy BDF 1e-7", "scipy", method="BDF", rtol=1e-7, atol=1e-7 * scale
            ),
            Candidate(
                "scipy Radau 1e-7",
                "scipy",
                method="Radau",
                rtol=1e-7,
                atol=1e-7 * scale,
            ),
        ]
    return rows


def table(sc, quick, repeats, cache, num_saves=2000):
    ts = gf.default_save_times(sc["t1"], num_saves)
    loss_ref, final_ref = reference(sc, ts, cache)
    levels = drop_levels(loss_ref, ts)
    t_ref = crossing_times(ts, loss_ref, levels)
    rows = candidates(sc, quick)
    results = {c.label: [] for c in rows}
    firsts = {}
    warm_t1 = sc["t1"] * 1e-3
    for c in rows:  # compile on a short run (same shapes, traced t1)
        if c.kind != "scipy":
            c.run(sc, gf.default_save_times(warm_t1, num_saves), t1=warm_t1)
    # Interleaved timed runs; slow baselines (Tsit5, Euler, SciPy) run once.
    for r in range(repeats):
        for c in rows:
            if r > 0 and (c.slow or firsts.get(c.label) is None):
                continue
            out = c.run(sc, ts)
            if r == 0:
                firsts[c.label] = out
            if out is not None:
                results[c.label].append(out["wall"])
    print(
        f"\n### {sc['name']}, t1 = {sc['t1']:g}, init_scale {sc['init_scale']:g}, "
        f"n = {2 * sc['chain'].d * sc['width'] + 2 * sc['width'] ** 2} parameters"
    )
    print(
        f"drop levels {[f'{v:.4f}' for v in levels]}; reference crossing times "
        f"{[f'{t:.5g}' for t in t_ref]}\n"
    )
    print(
        "| solver | wall s (median) | speed-up | steps | rejected | grad evals "
        "| HVPs | max crossing err % | final loss err | final params err |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    base = None
    for c in rows:
        out = firsts[c.label]
        if out is None:
            print(f"| {c.label} | failed | | | | | | | | |")
            continue
        wall = statistics.median(results[c.label])
        if c.label.startswith("tsit5"):
            base = wall
        cross = crossing_times(ts, out["loss"], levels)
        cerr = max(abs(a / b - 1) for a, b in zip(cross, t_ref, strict=True)) * 100
        lerr = abs(out["loss"][-1] - loss_ref[-1])
        perr = np.max(np.abs(np.asarray(ravel_pytree(out["final"])[0]) - final_ref))
        out["wall_med"] = wall
        out["cerr"], out["lerr"], out["perr"] = cerr, lerr, perr

        def fmt(v):
            return "-" if v is None else f"{v:,}"

        out["_row"] = (
            c.label,
            wall,
            fmt(out["steps"]),
            fmt(out["rejected"]),
            fmt(out["grads"]),
            fmt(out["hvps"]),
            cerr,
            lerr,
            perr,
        )
    for c in rows:
        out = firsts[c.label]
        if out is None:
            continue
        label, wall, steps, rej, grads, hvps, cerr, lerr, perr = out["_row"]
        speed = f"{base / wall:.1f}x" if base else ""
        print(
            f"| {label} | {wall:.3g} | {speed} | {steps} | {rej} | {grads} | {hvps} "
            f"| {cerr:.3f} | {lerr:.1e} | {perr:.1e} |"
        )
    return firsts


class _Tee(io.TextIOBase):
    """Writes to the real standard output and to a buffer."""

    def __init__(self, buffer: io.StringIO):
        self.buffer_ = buffer

    def write(self, text):
        sys.__stdout__.write(text)
        return self.buffer_.write(text)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick",
        action="store_true",
        help="sticky scenario and the main baselines only",
    )
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument(
        "--cache",
        type=pathlib.Path,
        default=pathlib.Path.home() / ".cache" / "gradflow-bench",
    )
    parser.add_argument(
        "--scenario", choices=["sticky", "random16", "big", "full"], action="append"
    )
    parser.add_argument(
        "--json", default=None, help="--scenario full: also write its rows here"
    )
    parser.add_argument(
        "--doc",
        nargs=2,
        default=None,
        metavar=("PAGE", "MARKER"),
        help="write the sticky table between <!-- MARKER --> and <!-- /MARKER -->",
    )
    args = parser.parse_args(argv)
    repeats = args.repeats or (3 if args.quick else 5)  # for the fast rows
    # random16 and big are offered but were not measured (their tight Tsit5
    # references alone take over 6 minutes on the development machine).
    names = args.scenario or ["sticky"]
    makers = {
        "sticky": sticky_scenario,
        "random16": random_scenario,
        "big": big_scenario,
    }
    print(
        f"gradflow {gf.__version__}, jax {jax.__version__}, "
        f"{jax.devices()[0].platform}, OPENBLAS_NUM_THREADS="
        f"{os.environ.get('OPENBLAS_NUM_THREADS')}, default tolerances float64 "
        f"at scale 1e-3: {gf.default_tolerances(jnp.float64, 1e-3)}"
    )
    for name in names:
        if name == "full":
            full_combination(json_path=args.json)
            continue
        if args.doc is None:
            table(makers[name](), args.quick, repeats, args.cache)
            continue
        buffer = io.StringIO()

        with contextlib.redirect_stdout(_Tee(buffer)):
            table(makers[name](), args.quick, repeats, args.cache)
        rows = [ln for ln in buffer.getvalue().splitlines() if ln.startswith("|")]
        load = "{:.2f} {:.2f} {:.2f}".format(*os.getloadavg())
        page, marker = args.doc
        text = "\n".join(rows) + f"\n\n(load average at the end: {load})"
        gf.replace_between_markers(
            page, f"<!-- {marker} -->", f"<!-- /{marker} -->", text
        )


if __name__ == "__main__":
    main()
