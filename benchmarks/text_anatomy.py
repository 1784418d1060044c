"""Where the 1,024-word text flow's time goes, part by part, in one process.

The flow of docs/text.md (`examples/real_text.py --levels word --sizes 1024
--jacobian-tol 5`: width 16, `ROS34PW2(jacobian_tol=5)`, its adaptive rank
16 -> 32 -> 64) spends its steps in a few compiled pieces. This script builds
the same chain (the built-in corpus, word level, `d` words, tail "other",
smoothing "auto") and the same start (`gf.init_params(d, width, 1e-3, 0)`),
and times, each compiled on its own and called with `jax.block_until_ready`,
interleaved over `--rounds` rounds (each figure: the least of its calls):

- `matmul`: a float64 `d x d` matrix product (the machine's reference rate);
- `grad`: the flow's vector field `-grad L` on the flat parameters, the
  solver's view (one per stage 2..4 of a step);
- `jvp`: `jax.jvp` of the field, as the end of every step takes it
  (`f(y1)` and one Hessian-vector product together);
- `batched r`: `jax.vmap` of the field's `jax.linearize` over `r` columns,
  what a W refresh calls twice (subspace iteration, then Rayleigh-Ritz), at
  r = 16, 32, 64; with `--variants`, the same products as `lax.map` over the
  columns (one HVP at a time) and vmapped with other HVP blocks;
- `qr r`, `eigh r`: the refresh's linear algebra on an `n x r` basis;
- `refresh r`: the solver's whole refresh at the rank `r`
  (`ROS34PW2._decompose_adaptive`: `2 r + 1` HVPs, QR, Ritz, power step);
- `step`, `step + refresh r`: one `ROS34PW2.step` of the flow's field
  without and with a refresh (compiled alone; no controller, no saves).

FLOP rates count 2 FLOPs per multiply-add as `benchmarks/closed_form.py`
does: the gradient `2 (9 d^2 m + 6 d m^2)`, an HVP three times that, the
jvp one gradient plus one HVP, `r` HVPs for a batch of `r` (the primal work
they share is not counted twice: the rate is the work a batch replaces).

With `--flow T1` it also runs the flow itself (`gf.integrate` of the same
chain and start, `ROS34PW2(jacobian_tol=5)`, save times
`gf.default_save_times(T1)`) twice, the second timed, and splits its wall
time: its steps times `step`, its refresh HVPs (the HVPs beyond one per
accepted step, `2 r + 1` per refresh) at the measured cost per refresh HVP
of the rank it ended at, and the rest (the analysis after the solve,
the controller, saves, watch, chunks, host).

    PYTHONPATH=. python benchmarks/text_anatomy.py [--d 1024] [--width 16]
        [--rounds 3] [--calls 3] [--ranks 16 32 64] [--variants] [--flow 60]
        [--json out.json]

Everything here is measured beside other processes on a 2-core machine:
the script prints the 1-minute load before and after each part; compare
the parts of one run with each other, not runs with runs.
"""

import argparse
import json
import os
import time
from pathlib import Path
from types import SimpleNamespace

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree


jax.config.update("jax_enable_x64", True)

import gradflow as gf  # noqa: E402


def ritz(Q, JQ):
    """The refresh's Rayleigh-Ritz step (`gradflow/solvers/base.py`):
    `eigh` of the symmetrised `Q^T J Q`, and the Ritz vectors."""
    B = Q.T @ JQ
    mu, U = jnp.linalg.eigh(0.5 * (B + B.T))
    return Q @ U, mu


def load() -> float:
    return os.getloadavg()[0]


def build(d: int, width: int):
    corpus = gf.text.load(None, "word", progress=False)
    stream = gf.text.encode(
        corpus, d, level="word", tail="other", smoothing="auto", progress=False
    )
    chain = stream.chain
    p0 = gf.init_params(chain.d, width, 1e-3, 0)
    return chain, p0


def load_blocked(path: str):
    """`blocked_population_loss` of another version of
    `gradflow/markov/blocked.py` (its relative imports made absolute),
    imported beside this checkout's."""
    import importlib.util
    import sys

    src = Path(path).read_text()
    src = src.replace("from .._core.", "from gradflow._core.")
    src = src.replace("from .chain ", "from gradflow.markov.chain ")
    src = src.replace("from .primitive ", "from gradflow.markov.primitive ")
    mod_path = Path("/tmp") / f"_blocked_against_{os.getpid()}.py"
    mod_path.write_text(src)
    spec = importlib.util.spec_from_file_location("_blocked_against", mod_path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["_blocked_against"] = module
    spec.loader.exec_module(module)
    return module.blocked_population_loss


def fields(p0, block, blocked=None):
    """The flow's field on flat parameters, `f(chain, x)`, with the closed
    form's default blocks (`block=None`) or `block` for the loss, gradient
    and HVP alike; `blocked`: another version's `blocked_population_loss`
    (with the default blocks)."""
    x0, unravel = ravel_pytree(p0)

    def f(chain, x):
        params = unravel(x)
        if blocked is not None:

            def loss(p, c):
                return blocked(p, c)

        elif block is None:
            loss = gf.population_loss
        else:

            def loss(p, c):
                return gf.population_loss(p, c, block=block)

        g = jax.grad(loss)(params, chain)
        return -ravel_pytree(g)[0]

    return x0, unravel, f


def timed(fns: dict, rounds: int, calls: int) -> dict:
    """Least wall time (s) of `calls` calls of each thunk, interleaved over
    `rounds` rounds (one warm-up call each first)."""
    for fn in fns.values():
        jax.block_until_ready(fn())
    best = {k: np.inf for k in fns}
    for _ in range(rounds):
        for k, fn in fns.items():
            for _ in range(calls):
                t = time.perf_counter()
                jax.block_until_ready(fn())
                best[k] = min(best[k], time.perf_counter() - t)
    return best


def kernels(c: SimpleNamespace) -> None:
    """The matrix product, gradient, jvp and vmapped HVPs."""
    args, chain, d, f, n, x, u, key = c.args, c.chain, c.d, c.f, c.n, c.x, c.u, c.key
    grad_flop, hvp_flop, report = c.grad_flop, c.hvp_flop, c.report
    # -- kernels -------------------------------------------------------------
    a = jax.random.normal(key, (d, d))
    mm = jax.jit(lambda a, b: a @ b)
    grad = eqx.filter_jit(f)
    jvp = eqx.filter_jit(lambda c, x, u: jax.jvp(lambda y: f(c, y), (x,), (u,)))

    def batched_vmap(f):
        def run(c, x, Q):
            _, lin = jax.linearize(lambda y: f(c, y), x)
            return jax.vmap(lin, in_axes=1, out_axes=1)(Q)

        return eqx.filter_jit(run)

    def batched_map(f, batch_size=None):
        def run(c, x, Q):
            _, lin = jax.linearize(lambda y: f(c, y), x)
            return jax.lax.map(lin, Q.T, batch_size=batch_size).T

        return eqx.filter_jit(run)

    bases = {}
    for r in args.ranks:
        G = jax.random.normal(jax.random.key(r), (n, r))
        bases[r] = jnp.linalg.qr(G)[0]

    print(f"kernels (load {load():.2f})", flush=True)
    fns = {
        "matmul": lambda: mm(a, a),
        "grad": lambda: grad(chain, x),
        "jvp (grad + HVP)": lambda: jvp(chain, x, u),
    }
    vm = batched_vmap(f)
    for r in args.ranks:
        fns[f"batched {r} (vmap)"] = lambda r=r: vm(chain, x, bases[r])
    best = timed(fns, args.rounds, args.calls)
    ref = 2 * d**3 / best["matmul"]
    report("matmul", best["matmul"], 2 * d**3)
    report("grad", best["grad"], grad_flop, f"{grad_flop / best['grad'] / ref:.0%}")
    jf = grad_flop + hvp_flop
    report("jvp (grad + HVP)", best["jvp (grad + HVP)"], jf,
           f"{jf / best['jvp (grad + HVP)'] / ref:.0%}")  # fmt: skip
    hvp_alone = best["jvp (grad + HVP)"] - best["grad"]
    print(f"  (jvp - grad: {hvp_alone * 1e3:.2f} ms per HVP)")
    for r in args.ranks:
        s = best[f"batched {r} (vmap)"]
        report(f"batched {r} (vmap)", s, r * hvp_flop,
               f"{r * hvp_flop / s / ref:.0%}, {s / r * 1e3:.2f} ms per HVP")  # fmt: skip

    c.grad = grad
    c.jvp = jvp
    c.batched_vmap = batched_vmap
    c.batched_map = batched_map
    c.bases = bases
    c.vm = vm
    c.best = best
    c.jf = jf


def variants(c: SimpleNamespace) -> None:
    """The batched HVPs as lax.map, in batches, with other blocks."""
    (
        args,
        chain,
        p0,
        f,
        hvp_flop,
        x,
        report,
        batched_vmap,
        batched_map,
        bases,
        vm,
    ) = (
        c.args,
        c.chain,
        c.p0,
        c.f,
        c.hvp_flop,
        c.x,
        c.report,
        c.batched_vmap,
        c.batched_map,
        c.bases,
        c.vm,
    )
    print(f"batched variants (load {load():.2f})", flush=True)
    lm = batched_map(f)
    chunked = {k: batched_map(f, k) for k in (8, 16, 32)}
    others = {b: batched_vmap(fields(p0, b)[2]) for b in args.blocks}
    for r in args.ranks:
        fns = {"vmap": lambda r=r: vm(chain, x, bases[r]),
               "lax.map": lambda r=r: lm(chain, x, bases[r])}  # fmt: skip
        for k, g in chunked.items():
            if k < r:
                fns[f"lax.map, batches of {k}"] = lambda r=r, g=g: g(chain, x, bases[r])
        for b, g in others.items():
            fns[f"vmap, block {b}"] = lambda r=r, g=g: g(chain, x, bases[r])
        best_v = timed(fns, args.rounds, args.calls)
        ref_out = fns["vmap"]()
        for k, s in best_v.items():
            out_k = fns[k]()
            diff = float(jnp.max(jnp.abs(out_k - ref_out)) / jnp.max(jnp.abs(ref_out)))
            report(f"batched {r} ({k})", s, r * hvp_flop,
                   f"{s / best_v['vmap']:.2f}x vmap, {s / r * 1e3:.2f} ms per HVP; "
                   f"largest difference {diff:.1e} of the largest entry")  # fmt: skip


def against(c: SimpleNamespace) -> None:
    """This checkout's closed form against another blocked.py."""
    (
        args,
        chain,
        p0,
        grad_flop,
        hvp_flop,
        jf,
        u,
        x,
        report,
        grad,
        jvp,
        batched_vmap,
        bases,
        vm,
    ) = (
        c.args,
        c.chain,
        c.p0,
        c.grad_flop,
        c.hvp_flop,
        c.jf,
        c.u,
        c.x,
        c.report,
        c.grad,
        c.jvp,
        c.batched_vmap,
        c.bases,
        c.vm,
    )
    print(f"this checkout against {args.against} (load {load():.2f})", flush=True)
    f_old = fields(p0, None, load_blocked(args.against))[2]
    grad_old = eqx.filter_jit(f_old)
    jvp_old = eqx.filter_jit(lambda c, x, u: jax.jvp(lambda y: f_old(c, y), (x,), (u,)))
    vm_old = batched_vmap(f_old)
    fns = {"grad": lambda: grad(chain, x), "grad, against": lambda: grad_old(chain, x),
           "jvp": lambda: jvp(chain, x, u),
           "jvp, against": lambda: jvp_old(chain, x, u)}  # fmt: skip
    for r in args.ranks:
        fns[f"batched {r}"] = lambda r=r: vm(chain, x, bases[r])
        fns[f"batched {r}, against"] = lambda r=r: vm_old(chain, x, bases[r])
    best_a = timed(fns, args.rounds, args.calls)
    for k, s in best_a.items():
        if k.endswith("against"):
            continue
        flop = grad_flop if k == "grad" else jf if k == "jvp" else None
        if flop is None:
            flop = int(k.split()[1]) * hvp_flop
        new, old = fns[k](), fns[k + ", against"]()
        diff = max(
            float(jnp.max(jnp.abs(a - b)) / jnp.max(jnp.abs(b)))
            for a, b in zip(jax.tree.leaves(new), jax.tree.leaves(old), strict=True)
        )
        t_old = best_a[k + ", against"]
        report(f"{k}: this / against", s, flop,
               f"against {t_old * 1e3:.2f} ms: {s / t_old:.3f}x; "
               f"largest relative difference {diff:.1e}")  # fmt: skip


def observe_part(c: SimpleNamespace) -> None:
    """The analysis after the solve: the observables of a batch of saves."""
    (
        args,
        chain,
        d,
        m,
        unravel,
        n,
        x,
        report,
    ) = (
        c.args,
        c.chain,
        c.d,
        c.m,
        c.unravel,
        c.n,
        c.x,
        c.report,
    )
    # The analysis after the solve (`MarkovAttention.analyse`): the
    # observables of every save, `observe_saves` in batches of
    # `observe_batch` saves, vmapped; the flow's 798 saves whatever t1.
    attention_summary = gf.markov.attention_summary
    problem = gf.markov.MarkovAttention(chain, m)
    # `observe_batch` of gradflow/_problem/functions.py: 2^24 entries
    size = max(1, 2**24 // max(n, d * d))
    ts_batch = np.linspace(1.0, 2.0, size)
    print(f"analysis: batches of {size} saves (load {load():.2f})", flush=True)
    scales = jnp.linspace(1.0, 2.0, size)
    batch = jax.tree.map(
        lambda a: a[None] * scales.reshape(-1, *[1] * a.ndim), unravel(x)
    )
    vgrad = eqx.filter_jit(
        lambda ps, c: jax.vmap(lambda p: jax.value_and_grad(gf.population_loss)(p, c))(
            ps
        )
    )
    mgrad = eqx.filter_jit(
        lambda ps, c: jax.lax.map(
            lambda p: jax.value_and_grad(gf.population_loss)(p, c), ps
        )
    )
    att = eqx.filter_jit(lambda ps, c: jax.vmap(lambda p: attention_summary(p, c))(ps))

    def observe_one(q, p):
        return q.observe(p)

    observe_map = eqx.filter_jit(
        lambda q, ps: jax.lax.map(lambda p: observe_one(q, p), ps)
    )
    observe_vmap = eqx.filter_jit(
        lambda q, ps: jax.vmap(lambda p: observe_one(q, p))(ps)
    )
    a_out, b_out = observe_vmap(problem, batch), observe_map(problem, batch)
    diff = max(
        float(jnp.max(jnp.abs(a_out[k] - b_out[k])) / jnp.max(jnp.abs(a_out[k])))
        for k in a_out
    )
    print(f"  observables, lax.map against vmap: largest difference {diff:.1e}")
    fns = {
        "observe_saves (a batch)": lambda: gf.problems.observe_saves(
            problem, ts_batch, batch
        ),
        "observe, vmapped": lambda: observe_vmap(problem, batch),
        "observe, lax.map": lambda: observe_map(problem, batch),
        "value_and_grad, vmapped": lambda: vgrad(batch, chain),
        "value_and_grad, lax.map": lambda: mgrad(batch, chain),
        "attention, vmapped": lambda: att(batch, chain),
    }
    best_o = timed(fns, args.rounds, args.calls)
    for k, s in best_o.items():
        report(f"{k}", s, None, f"{s / size * 1e3:.2f} ms per save; x 798 saves: "
               f"{s / size * 798:.1f} s")  # fmt: skip


def refresh_part(c: SimpleNamespace) -> None:
    """The refresh's QR, Ritz step and the whole refresh per rank."""
    args, chain, f, n, solver, ranks, x, report, bases = (
        c.args,
        c.chain,
        c.f,
        c.n,
        c.solver,
        c.ranks,
        c.x,
        c.report,
        c.bases,
    )
    # -- the refresh's linear algebra and the refresh -------------------------
    print(f"refresh (load {load():.2f})", flush=True)
    qr = jax.jit(lambda Q: jnp.linalg.qr(Q)[0])
    ritz_jit = jax.jit(ritz)
    fns = {}
    for r in args.ranks:
        fns[f"qr {r}"] = lambda r=r: qr(bases[r])
        fns[f"ritz (eigh) {r}"] = lambda r=r: ritz_jit(bases[r], bases[r])

    def refresh(c, x, V, level, w):
        return solver._decompose_adaptive(lambda y: f(c, y), x, V, level, w)

    refresh_jit = eqx.filter_jit(refresh)
    width = ranks[-1]
    V = jnp.linalg.qr(jax.random.normal(jax.random.key(7), (n, width)))[0]
    w = jax.random.normal(jax.random.key(1), (n,))
    for level, r in enumerate(ranks):
        if r in args.ranks:
            lv = jnp.asarray(level, jnp.int32)
            fns[f"refresh {r}"] = lambda lv=lv: refresh_jit(chain, x, V, lv, w)
    best_r = timed(fns, args.rounds, args.calls)
    for k, s in best_r.items():
        extra = ""
        if k.startswith("refresh"):
            r = int(k.split()[-1])
            per = (s - best_r[f"qr {r}"]) / (2 * r + 1)
            extra = f"{(2 * r + 1)} HVPs: {s / (2 * r + 1) * 1e3:.2f} ms per HVP"
            extra += f" ({per * 1e3:.2f} less the QR)"
        report(k, s, None, extra)

    c.best_r = best_r
    c.V = V


def step_part(c: SimpleNamespace) -> None:
    """One solver step without and with a refresh."""
    args, chain, unravel, solver, ranks, x, report, best, V = (
        c.args,
        c.chain,
        c.unravel,
        c.solver,
        c.ranks,
        c.x,
        c.report,
        c.best,
        c.V,
    )
    # -- a whole solver step --------------------------------------------------
    print(f"solver step (load {load():.2f})", flush=True)
    term = dfx.ODETerm(lambda t, y, c: jax.tree.map(jnp.negative, jax.grad(
        gf.population_loss)(y, c)))  # fmt: skip
    params = unravel(x)
    state0 = solver.init(term, 0.0, 1.0, params, chain)
    step = eqx.filter_jit(
        lambda c, y, s: solver.step(term, 0.0, 0.5, y, c, s, False)[3].f0
    )
    fns = {}
    for level, r in enumerate(ranks):
        st = eqx.tree_at(
            lambda s: (s.stale, s.level, s.V),
            state0,
            (jnp.asarray(False), jnp.asarray(level, jnp.int32), V),
        )
        if level == 0:
            fns["step"] = lambda st=st: step(chain, params, st)
        if r in args.ranks:
            st = eqx.tree_at(lambda s: s.stale, st, jnp.asarray(True))
            fns[f"step + refresh {r}"] = lambda st=st: step(chain, params, st)
    best_s = timed(fns, args.rounds, args.calls)
    parts = 3 * best["grad"] + best["jvp (grad + HVP)"]
    for k, s in best_s.items():
        extra = ""
        if k == "step":
            extra = (
                f"3 grads + jvp = {parts * 1e3:.2f} ms; rest {(s - parts) * 1e3:.2f}"
            )
        report(k, s, None, extra)

    c.best_s = best_s


def flow_part(c: SimpleNamespace) -> None:
    """The flow itself, timed, and its split."""
    (
        args,
        chain,
        p0,
        solver,
        best_r,
        best_s,
    ) = (
        c.args,
        c.chain,
        c.p0,
        c.solver,
        c.best_r,
        c.best_s,
    )
    out = c.out
    # -- the flow -------------------------------------------------------------
    if args.flow is not None:
        print(f"flow to t1 = {args.flow} (load {load():.2f})", flush=True)
        ts = gf.default_save_times(args.flow)

        def run():
            t = time.perf_counter()
            traj = gf.integrate(
                chain,
                params=p0,
                t1=args.flow,
                saveat=gf.SaveAt(ts),
                solver=gf.Solver(solver),
                run=gf.Run(progress=False),
            )
            return traj, time.perf_counter() - t

        _, first = run()
        l0 = load()
        traj, wall = run()
        st = traj.stats
        steps, acc = st.num_steps, st.num_accepted_steps
        hvps, rank = st.num_hvps, st.w_rank
        refresh_hvps = hvps - acc
        per_ref = (
            (best_r[f"refresh {rank}"] / (2 * rank + 1)) if rank in args.ranks else None
        )
        t_steps = steps * best_s["step"]
        t_ref = refresh_hvps * per_ref if per_ref is not None else float("nan")
        rest = wall - t_steps - t_ref
        print(
            f"  first call {first:.1f} s (compiling), second {wall:.2f} s "
            f"(load {l0:.2f} -> {load():.2f}): {steps} steps ({st.num_rejected_steps} "
            f"rejected), {st.num_grad_evals} gradients, {hvps} HVPs, rank {rank}",
            flush=True,
        )
        print(f"  {wall / steps * 1e3:.1f} ms per step: steps' own work "
              f"{t_steps:.2f} s ({t_steps / wall:.0%}), refresh HVPs {refresh_hvps} "
              f"~{t_ref:.2f} s ({t_ref / wall:.0%}), rest {rest:.2f} s "
              f"({rest / wall:.0%})")  # fmt: skip
        out["flow"] = dict(t1=args.flow, wall_s=wall, steps=steps, accepted=acc,
                           grad_evals=st.num_grad_evals, hvps=hvps, rank=rank,
                           steps_s=t_steps, refresh_s=t_ref, rest_s=rest)  # fmt: skip


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--d", type=int, default=1024)
    parser.add_argument("--width", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=3)
    parser.add_argument("--ranks", type=int, nargs="+", default=[16, 32, 64])
    parser.add_argument(
        "--variants",
        action="store_true",
        help="also the batched HVPs as lax.map and with other HVP blocks",
    )
    parser.add_argument(
        "--blocks",
        type=int,
        nargs="+",
        default=[32, 64, 256],
        help="with --variants: HVP blocks to try for the batched products",
    )
    parser.add_argument(
        "--flow", type=float, default=None, metavar="T1", help="also the flow to T1"
    )
    parser.add_argument("--jacobian-tol", type=float, default=5.0)
    parser.add_argument(
        "--against",
        default=None,
        metavar="BLOCKED_PY",
        help="another gradflow/markov/blocked.py (say, from `git show "
        "15015b6:gradflow/markov/blocked.py`): its gradient, jvp and batched "
        "HVPs side by side with this checkout's, and their differences",
    )
    parser.add_argument(
        "--observe",
        action="store_true",
        help="also the analysis after the solve: the observables of a batch of saves",
    )
    parser.add_argument(
        "--kernels-only",
        action="store_true",
        help="stop after the kernels (and --variants, --against): no refresh, "
        "step or flow",
    )
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    for name in ("d", "width", "rounds", "calls"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name} must be >= 1, got {getattr(args, name)}")

    chain, p0 = build(args.d, args.width)
    d, m = chain.d, args.width
    x0, unravel, f = fields(p0, None)
    n = x0.shape[0]
    solver = gf.solvers.ROS34PW2(jacobian_tol=args.jacobian_tol)
    ranks = solver._ranks(n)
    print(
        f"d = {d}, m = {m}, n = {n}, blocks: loss/grad {gf.markov.default_block(d)}, "
        f"HVP {gf.markov.default_hvp_block(d)}; solver ranks {ranks}; "
        f"jax {jax.__version__}, load {load():.2f}",
        flush=True,
    )
    grad_flop = 2 * (9 * d * d * m + 6 * d * m * m)
    hvp_flop = 3 * grad_flop
    key = jax.random.key(0)
    u = jax.random.normal(key, (n,)) / np.sqrt(n)
    # a point along the way: the start moved by a step of the field, so that
    # nothing is special about it (the costs do not depend on the values)
    x = x0 + 10.0 * jax.jit(f)(chain, x0)

    rows = []

    def report(name, seconds, flop=None, extra=""):
        rate = "" if flop is None else f"{flop / seconds / 1e9:7.1f} GFLOP/s"
        print(f"  {name:<28} {seconds * 1e3:10.2f} ms {rate} {extra}", flush=True)
        rows.append(dict(part=name, ms=seconds * 1e3, flop=flop, load=load()))

    c = SimpleNamespace(**{k: v for k, v in locals().items() if k != "c"})
    c.out = {"d": d, "m": m, "n": n, "ranks": ranks, "rows": rows}
    kernels(c)
    for flag, part in ((args.variants, variants), (args.against, against),
                       (args.observe, observe_part)):  # fmt: skip
        if flag:
            part(c)
    if not args.kernels_only:
        refresh_part(c)
        step_part(c)
        if args.flow is not None:
            flow_part(c)
    finish(args, c.out)


def finish(args, out: dict) -> None:
    print(f"load at the end {load():.2f}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=1)


if __name__ == "__main__":
    main()
