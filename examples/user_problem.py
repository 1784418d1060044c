"""A population loss of your own on gradflow's engine: matrix factorisation.

    L(U, V) = 1/2 |U V^T - M|_F^2 = E_x 1/2 |(U V^T - M) x|^2,  x ~ N(0, I)

From a small start the flow learns the singular values of `M` one at a time,
largest first (Saxe et al. 2014): the loss sits on plateaus at
1/2 sum_{k > j} s_k^2 and drops between them. The class below is all that
gradflow needs; `gf.flow`, `gf.sweep`, `gf.linearize` and `gf.train_sgd`
then work on it as on the paper's model.

    python examples/user_problem.py
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

import gradflow as gf


# --8<-- [start:problem]
class Factorisation(gf.SampledProblem):
    """1/2 |U V^T - M|^2 over U (n, rank) and V (m, rank)."""

    M: jax.Array
    rank: int = eqx.field(static=True)

    def loss(self, params):
        U, V = params
        return 0.5 * jnp.sum((U @ V.T - self.M) ** 2)

    def init(self, key, init_scale):
        ku, kv = jax.random.split(key)
        (n, m), r = self.M.shape, self.rank
        U = init_scale * jax.random.normal(ku, (n, r), self.M.dtype)
        return U, init_scale * jax.random.normal(kv, (m, r), self.M.dtype)

    def sample(self, key, n):  # for SGD: inputs x ~ N(0, I)
        return jax.random.normal(key, (n, self.M.shape[1]), self.M.dtype)

    def sample_loss(self, params, x):  # whose mean over x is `loss`
        U, V = params
        return 0.5 * jnp.mean(jnp.sum((x @ (U @ V.T - self.M).T) ** 2, axis=1))


# --8<-- [end:problem]


def target(singular_values, n: int = 4, seed: int = 0) -> jax.Array:
    """An `n x n` matrix with the given singular values (random bases)."""
    rng = np.random.default_rng(seed)
    Q1, _ = np.linalg.qr(rng.standard_normal((n, n)))
    Q2, _ = np.linalg.qr(rng.standard_normal((n, n)))
    s = np.zeros(n)
    s[: len(singular_values)] = singular_values
    return jnp.asarray(Q1 @ np.diag(s) @ Q2.T)


def main() -> None:
    s = np.array([4.0, 1.0, 0.25])
    problem = Factorisation(target(s), rank=3)
    traj = gf.flow(problem, init_scale=1e-4, t1=200.0, run=gf.Run(progress=False))
    levels = [0.5 * float(np.sum(s[k:] ** 2)) for k in range(len(s) + 1)]
    print(traj)
    print("analytic plateau levels:", ", ".join(f"{x:.5g}" for x in levels))
    for stage in traj.stages:
        extra = f" {stage.leaf} rank {stage.rank}" if stage.name == "rank" else ""
        print(
            f"{stage.name:8s} {stage.t_start:9.4g} {stage.t_end:9.4g} "
            f"{stage.loss_start:9.5g} {stage.loss_end:9.5g}{extra}"
        )
    origin = jax.tree.map(jnp.zeros_like, traj.at(0))
    lin = gf.linearize(problem, origin)
    print(f"unstable rate at the origin: {lin.unstable_rate:.6g} (s_1 = {s[0]:g})")
    sw = gf.sweep(
        [problem], init_scale=1e-4, seeds=[0, 1], t1=200.0, run=gf.Run(progress=False)
    )
    print(sw)
    run = gf.train_sgd(
        problem,
        traj.at(0),
        sgd=gf.SGD(lr=0.01, batch_size=64),
        t1=20.0,
        run=gf.Run(progress=False),
    )
    print(run)


if __name__ == "__main__":
    main()
