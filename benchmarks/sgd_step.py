"""Time one SGD step of the finite-context model: d=8, width 12, context 256,
batch 512 (the step `gf.train_sgd` runs, sampling included).

    python benchmarks/sgd_step.py [--reps 200] [--dtype float64]

Prints, in milliseconds (median and interquartile range over `--reps` calls,
after a warm-up call that compiles): the full step (sample a batch from a
chain, gradient, optax update), the sampling alone, and the gradient alone for
both the counted loss that the step uses and the position-by-position
`gf.finite_context_loss`. Timings on a shared machine are noisy: read the
median.
"""

import argparse
import json
import time

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax

import gradflow as gf


def timeit(fn, reps):
    jax.block_until_ready(fn())  # compile
    out = []
    for _ in range(reps):
        t = time.perf_counter()
        jax.block_until_ready(fn())
        out.append(time.perf_counter() - t)
    q1, med, q3 = np.percentile(np.asarray(out) * 1e3, [25, 50, 75])
    return {
        "median_ms": round(float(med), 3),
        "iqr_ms": [round(float(q1), 3), round(float(q3), 3)],
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=200)
    parser.add_argument("--dtype", choices=("float64", "float32"), default="float64")
    args = parser.parse_args()
    dtype = jnp.float64 if args.dtype == "float64" else jnp.float32
    d, m, s, b = 8, 12, 256, 512
    chain = jax.tree.map(lambda x: x.astype(dtype), gf.chains.random(d, seed=0))
    params = gf.init_params(d, m, 0.1, 0, dtype=dtype)
    # The source train_sgd draws from: sequences of s + 1 tokens of the chain.
    problem = gf.problems.MarkovAttention(chain, width=m, context=s)
    opt = optax.sgd(0.2)
    state = opt.init(params)
    key = jax.random.key(0)

    @eqx.filter_jit
    def step(p, st, k):
        """The step `gf.train_sgd` runs: sample a batch, its loss and gradient,
        the optimizer's update."""
        batch = problem.sample(k, b)
        loss, grads = jax.value_and_grad(problem.sample_loss)(p, batch)
        updates, st = opt.update(grads, st, p)
        return optax.apply_updates(p, updates), st, loss

    sample = eqx.filter_jit(lambda k: problem.sample(k, b))
    batch = sample(key)
    grad_counted = eqx.filter_jit(lambda p, x: jax.grad(problem.sample_loss)(p, x))
    grad_positions = jax.jit(jax.grad(gf.finite_context_loss))

    results = {
        "config": {
            "d": d,
            "width": m,
            "context": s,
            "batch": b,
            "dtype": args.dtype,
            "reps": args.reps,
            "backend": jax.default_backend(),
        },
        "step": timeit(lambda: step(params, state, key), args.reps),
        "sample": timeit(lambda: sample(key), args.reps),
        "grad_counted": timeit(lambda: grad_counted(params, batch), args.reps),
        "grad_positions": timeit(
            lambda: grad_positions(params, batch), max(10, args.reps // 10)
        ),
    }
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
