"""Cost of the population gradient flow against vocabulary size d and width m.

Two tables:

1. Time per gradient evaluation (jitted `jax.grad` of the closed-form loss) and
   per Hessian-vector product, against the matmul count of the closed form,
   about `4 d^2 m + 4 d m^2` multiply-adds.
2. Steps, gradient evaluations, Hessian-vector products and wall time to finish
   the first cycle (the first drop of the loss, from log d towards the unigram
   entropy) with the Tsit5 baseline and the default Rosenbrock-W solver, on
   random bigram chains (`gf.chains.random`, a Zipf profile with Dirichlet
   rows: the shape of a text bigram chain).

    python benchmarks/scaling.py                  # d up to 512
    python benchmarks/scaling.py --max-d 2048     # the text-sized end (slow)
"""

import os


os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import diffrax as dfx  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import gradflow as gf  # noqa: E402


def _time(fn, *args, min_time=0.3, max_calls=50):
    jax.block_until_ready(fn(*args))  # compile
    times = []
    start = time.perf_counter()
    while len(times) < 3 or (
        time.perf_counter() - start < min_time and len(times) < max_calls
    ):
        t = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def grad_table(ds, ms):
    print("\n### Time per gradient evaluation and per Hessian-vector product\n")
    print(
        "| d | m | n params | multiply-adds 4d²m+4dm² | grad ms | GMAC/s (grad) "
        "| HVP ms | HVP / grad |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for d in ds:
        chain = gf.chains.random(d, seed=0)
        for m in ms:
            params = gf.init_params(d, m, 0.1, 0)
            grad = jax.jit(jax.grad(gf.population_loss))
            tangent = jax.tree.map(jnp.ones_like, params)

            @jax.jit
            def hvp(p, v, chain):
                return jax.jvp(
                    lambda q: jax.grad(gf.population_loss)(q, chain), (p,), (v,)
                )[1]

            tg = _time(grad, params, chain)
            th = _time(hvp, params, tangent, chain)
            macs = 4 * d * d * m + 4 * d * m * m
            n = params.num_parameters
            print(
                f"| {d} | {m} | {n:,} | {macs:,} | {tg * 1e3:.3g} | "
                f"{macs / tg / 1e9:.2f} | {th * 1e3:.3g} | {th / tg:.2f} |",
                flush=True,
            )


def first_cycle_table(sizes, init_scale=1e-3):
    print(
        "\n### First cycle (first drop of the loss), random chains, init_scale 1e-3\n"
    )
    print(
        "| d | m | n | t1 | solver | wall s | steps | rejected | grad evals | HVPs "
        "| loss(t1) | unigram entropy |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for d, m in sizes:
        chain = gf.chains.random(d, seed=0)
        pi = np.asarray(chain.pi)
        sigma = np.linalg.norm(pi - 1.0 / d) * np.linalg.norm(pi)
        # Escape time of the linearised flow from the origin, with margin for
        # the drop to finish (`docs/theory.md`: growth rate sigma).
        t1 = float(3.0 * np.log(1.0 / init_scale) / sigma)
        rows = [
            ("tsit5 rtol 1e-7", dfx.Tsit5(), 1e-7, 1e-7 * init_scale),
            ("default ros34pw2", gf.solvers.ROS34PW2(), None, None),
        ]
        for label, solver, rtol, atol in rows:
            kwargs = dict(
                width=m,
                solver=gf.Solver(solver, rtol=rtol, atol=atol),
                run=gf.Run(progress=False),
            )
            ts = np.geomspace(t1 * 1e-3, t1, 50)
            # compile on a short run with the same shapes
            gf.integrate(
                chain, init_scale, t1=t1 * 1e-3, saveat=gf.SaveAt(ts * 1e-3), **kwargs
            )
            start = time.perf_counter()
            traj = gf.integrate(
                chain, init_scale, t1=t1, saveat=gf.SaveAt(ts), **kwargs
            )
            wall = time.perf_counter() - start
            st = traj.stats
            hvps = "-" if st.num_hvps is None else st.num_hvps
            print(
                f"| {d} | {m} | {2 * d * m + 2 * m * m:,} | {t1:.4g} | {label} | "
                f"{wall:.3g} | {st.num_steps:,} | {st.num_rejected_steps:,} | "
                f"{st.num_grad_evals:,} | {hvps} | {traj.loss[-1]:.5f} | "
                f"{float(chain.unigram_entropy):.5f} |",
                flush=True,
            )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-d", type=int, default=512)
    parser.add_argument("--skip-cycle", action="store_true")
    parser.add_argument(
        "--d", type=int, action="append", help="only these d (repeatable)"
    )
    args = parser.parse_args(argv)
    ds = [d for d in (8, 32, 128, 512, 2048) if d <= args.max_d]
    if args.d:
        ds = args.d
    print(f"jax {jax.__version__}, {jax.devices()[0].platform}, float64")
    grad_table(ds, (8, 32, 128))
    if args.d:
        return
    if not args.skip_cycle:
        sizes = [
            (d, m)
            for d, m in ((8, 8), (32, 16), (128, 32), (512, 32), (2048, 32))
            if d <= args.max_d
        ]
        first_cycle_table(sizes)


if __name__ == "__main__":
    main()
