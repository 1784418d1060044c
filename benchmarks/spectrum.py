"""Hessian spectrum along the sticky-scenario trajectory: how many directions
are stiff, and how stiff (the numbers quoted in docs/performance.md).

    python benchmarks/spectrum.py
"""

import os


os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import jax  # noqa: E402
import numpy as np  # noqa: E402
from jax.flatten_util import ravel_pytree  # noqa: E402

import gradflow as gf  # noqa: E402


def main():
    chain = gf.chains.sticky(6, 0.5, 0.5, 0.05)
    ts = np.array([0, 30, 45, 100, 500, 3000, 6000, 9000, 13000, 20000.0])
    traj = gf.integrate(
        chain,
        1e-3,
        width=8,
        saveat=gf.SaveAt(ts),
        solver=gf.Solver(rtol=1e-7),
        run=gf.Run(progress=False),
    )
    _, unravel = ravel_pytree(traj.params[0])
    hessian = jax.jit(jax.hessian(lambda x: gf.population_loss(unravel(x), chain)))
    print("| t | loss | 6 largest eigenvalues | # > 1 | # > 0.1 | 17th | smallest |")
    print("|---|---|---|---|---|---|---|")
    for i, t in enumerate(traj.ts):
        x = ravel_pytree(traj.params[i])[0]
        ev = np.linalg.eigvalsh(np.asarray(hessian(x)))[::-1]
        print(
            f"| {t:g} | {traj.loss[i]:.4f} | {np.round(ev[:6], 3).tolist()} | "
            f"{(ev > 1).sum()} | {(ev > 0.1).sum()} | {ev[16]:.3g} | {ev[-1]:.2e} |"
        )


if __name__ == "__main__":
    main()
