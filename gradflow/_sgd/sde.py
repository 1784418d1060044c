r"""[`gradflow.sgd_sde`][]: the stochastic modified equation of SGD (Li, Tai
and E, 2017 and 2019), integrated with Diffrax's SDE machinery
(`docs/sgd.md`, "The stochastic modified equation").

SGD at step $h$ and batch $B$ follows, in the weak sense,

$$d\theta = -\nabla \tilde L_1(\theta)\, dt + \sqrt{h / B}\;
\Sigma(\theta)^{1/2}\, dW, \qquad
\Sigma = \operatorname{Cov}_x[\nabla \ell(\theta; x)],$$

$x$ one example of the problem's own sampler. The noise enters through a
low-rank square root: the columns $c_k$ with $\Sigma = \sum_k c_k c_k^\top$,
$c_k = \sqrt{w_k}(\nabla\ell_k - \nabla L)$ over a
[`gradflow.EnumeratedProblem`][]'s sample space (exact), or
$c_j = (\nabla\ell(x_j) - \bar g)/\sqrt{M - 1}$ over $M$ fresh examples per
step (estimated); the Brownian motion has one component per column and no
dense covariance is ever formed.
"""

import dataclasses
import math
import time
from collections.abc import Sequence
from typing import Any

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from .._core.errors import show
from .._core.validate import check_dtype, check_integer, check_positive_finite
from .._flow.setup import initial_point
from .._options import SGD, Run, SaveAt, as_run, as_saveat, as_sgd
from .._problem.adapt import as_problem
from .._problem.base import EnumeratedProblem, Problem, SampledProblem
from .._problem.functions import astype, check_problem
from .._result.codes import RESULTS
from .._result.info import FlowSettings, FlowStats
from .._result.trajectory import Trajectory
from .._sweep.result import Member, Sweep, SweepSettings, SweepStats
from .modified import modified_field
from .train import population_observables, sgd_save_steps


# Examples per step of the estimated covariance when none is given.
DEFAULT_SAMPLES = 64


class SDESolver(eqx.Module):
    r"""How [`gradflow.sgd_sde`][] integrates the stochastic modified equation.

    **Arguments:**

    - `solver`: a Diffrax solver for Itô SDEs; default `diffrax.Euler()`
      (Euler–Maruyama: weak order 1, strong order 1/2; `docs/sgd.md` says why).
    - `dt`: the fixed step; `None`: `lr / 2` (stable wherever SGD itself is:
      `docs/sgd.md`).
    - `samples`: $M$, the examples drawn per step to estimate the covariance;
      `None`: exact for a [`gradflow.EnumeratedProblem`][] (summed over its
      sample space), else 64.
    - `order`: the drift: 1 (default), $-\nabla \tilde L_1 = -\nabla L -
      \frac h2 H \nabla L$; 0, the plain $-\nabla L$.
    - `compensate`: fold the Euler step's own $O(dt)$ error into the drift
      (`docs/sgd.md`): the step uses $-\nabla L - \frac{K h - dt}2 H\nabla
      L$ ($K$ the order), whose Euler–Maruyama solve follows the drift of
      order $K$ to $O(h^2)$ rather than $O(dt)$. `None` (default): for
      `diffrax.Euler` only.
    """

    solver: Any = None
    dt: float | None = None
    samples: int | None = None
    order: int = eqx.field(static=True, default=1)
    compensate: bool = eqx.field(static=True, default=True)

    def __init__(
        self, solver=None, *, dt=None, samples=None, order: int = 1, compensate=None
    ):
        if solver is None:
            solver = dfx.Euler()
        if not isinstance(solver, dfx.AbstractSolver):
            raise TypeError(f"solver must be a diffrax solver, got {show(solver)}")
        self.solver = solver
        self.dt = None if dt is None else check_positive_finite("dt", dt)
        self.samples = None if samples is None else check_integer("samples", samples, 2)
        order = check_integer("order", order, 0)
        if order not in (0, 1):
            raise ValueError(f"order must be 0 or 1, got {order}")
        self.order = order
        if compensate not in (None, True, False):
            raise TypeError(
                f"compensate must be True, False or None, got {show(compensate)}"
            )
        self.compensate = (
            isinstance(solver, dfx.Euler) if compensate is None else compensate
        )


def noise_columns(problem: Problem, params, *, samples: int | None, key=None):
    r"""The columns $c_k$ of the square root of $\Sigma$, the covariance of
    one example's gradient at `params` ($\Sigma = \sum_k c_k c_k^\top$): a
    PyTree of `params`' structure whose leaves carry a trailing axis of
    length $K$ (the sample space of a [`gradflow.EnumeratedProblem`][] with
    `samples=None`, else `samples` fresh examples drawn with `key`)."""
    if samples is None:
        w = problem.example_weights()  # pyright: ignore[reportAttributeAccessIssue]
        per = jax.jacrev(problem.example_losses)(params)  # pyright: ignore[reportAttributeAccessIssue]
        mean = jax.tree.map(lambda J: jnp.tensordot(w, J, axes=1), per)
        root = jnp.sqrt(w)

        def column(J, g):
            return root.reshape((-1,) + (1,) * g.ndim) * (J - g)
    else:
        batch = problem.sample(key, samples)  # pyright: ignore[reportAttributeAccessIssue]
        one = lambda x: jax.grad(problem.sample_loss)(  # noqa: E731  # pyright: ignore[reportAttributeAccessIssue]
            params, jax.tree.map(lambda b: b[None], x)
        )
        per = jax.vmap(one)(batch)
        mean = jax.tree.map(lambda J: jnp.mean(J, axis=0), per)
        scale = 1.0 / math.sqrt(samples - 1)

        def column(J, g):
            return scale * (J - g)

    cols = jax.tree.map(column, per, mean)
    return jax.tree.map(lambda c: jnp.moveaxis(c, 0, -1), cols)


class _Drift(eqx.Module):
    """The drift on the flat parameter vector (Diffrax's `ControlTerm` pairs
    one matrix with one Brownian vector)."""

    order: int = eqx.field(static=True)
    unravel: Any = eqx.field(static=True)
    compensate: bool = eqx.field(static=True, default=False)

    def __call__(self, t, y, args):
        problem, lr, _, _, dt = args
        params = self.unravel(y)
        if not self.compensate:
            return ravel_pytree(modified_field(problem, lr, self.order, params))[0]
        # an Euler step of size dt adds -(dt/2) H grad L of its own
        # (docs/sgd.md): take it out of the drift
        field = modified_field(problem, self.order * lr - dt, 1, params)
        return ravel_pytree(field)[0]


class _Diffusion(eqx.Module):
    r"""The diffusion matrix `(parameters, K)`: $\sqrt{h/B}$ times the columns
    of `noise_columns`, with fresh examples per step (`fold_in` of the step
    number) when they are estimated."""

    samples: int | None = eqx.field(static=True)
    unravel: Any = eqx.field(static=True)

    def __call__(self, t, y, args):
        problem, _, scale, key, dt = args
        step = jnp.round(t / dt).astype(jnp.int32)
        cols = noise_columns(
            problem, self.unravel(y), samples=self.samples,
            key=jax.random.fold_in(key, step),
        )  # fmt: skip
        flat = [jnp.reshape(c, (-1, c.shape[-1])) for c in jax.tree.leaves(cols)]
        return scale * jnp.concatenate(flat, axis=0)


@eqx.filter_jit
def _solve(problem, params0, key, numbers, ts, *, solver, order, compensate,
           samples, columns: int, max_steps: int):  # fmt: skip
    lr, scale, dt, t1 = numbers  # (arrays: a new lr or t1 reuses the compilation)
    y0, unravel = ravel_pytree(params0)
    bkey, skey = jax.random.split(key)
    brownian = dfx.VirtualBrownianTree(
        0.0, t1, tol=dt / 2, shape=(columns,), key=bkey,
        levy_area=dfx.BrownianIncrement,
    )  # fmt: skip
    terms = dfx.MultiTerm(
        dfx.ODETerm(_Drift(order, unravel, compensate)),
        dfx.ControlTerm(_Diffusion(samples, unravel), brownian),
    )
    sol = dfx.diffeqsolve(
        terms, solver, 0.0, t1, dt0=dt, y0=y0,
        args=(problem, lr, scale, skey, dt), saveat=dfx.SaveAt(ts=ts),
        max_steps=max_steps, throw=False,
    )  # fmt: skip
    return jax.vmap(unravel)(sol.ys), sol.stats["num_steps"]  # pyright: ignore[reportArgumentType]


def _check_seeds(seeds) -> tuple[int, ...]:
    if isinstance(seeds, (int, np.integer)) and not isinstance(seeds, bool):
        return (int(seeds),)
    if not isinstance(seeds, Sequence) and not isinstance(seeds, np.ndarray):
        raise TypeError(f"seeds must be a sequence of integers, got {show(seeds)}")
    out = tuple(check_integer("seeds", s) for s in seeds)
    if not out:
        raise ValueError("seeds must hold at least one seed, got an empty sequence")
    return out


def _check_problem(problem, samples):
    if samples is None and not isinstance(problem, EnumeratedProblem):
        if not isinstance(problem, SampledProblem):
            raise TypeError(
                f"gradflow.sgd_sde needs a problem that samples (a gradflow."
                f"SampledProblem) or sums over its sample space (a gradflow."
                f"EnumeratedProblem), got {type(problem).__name__}"
            )
        samples = DEFAULT_SAMPLES
    if samples is not None and not isinstance(problem, SampledProblem):
        raise TypeError(
            f"samples = {samples} draws examples, but {type(problem).__name__} is "
            "not a gradflow.SampledProblem"
        )
    return samples


def sgd_sde(
    problem: Any,
    params: Any = None,
    *,
    init_scale: float | None = None,
    seeds: Sequence[int] = (0,),
    t1: float = 300.0,
    sgd: SGD | None = None,
    saveat: SaveAt | None = None,
    solver: SDESolver | None = None,
    run: Run | None = None,
) -> Sweep:
    r"""The stochastic modified equation of SGD, one member per Brownian seed,
    all from one start (`docs/sgd.md`, "The stochastic modified equation").

    $$d\theta = -\nabla\tilde L_1\, dt + \sqrt{\text{lr}/B}\;
    \Sigma(\theta)^{1/2} dW$$

    with $\Sigma$ the covariance of one example's gradient under the
    problem's own sampler (exact over a [`gradflow.EnumeratedProblem`][]'s
    sample space: the paper's model in the infinite-context limit).

    **Arguments:**

    - `problem`: a [`gradflow.EnumeratedProblem`][] or a
      [`gradflow.SampledProblem`][] (or a chain, made into the paper's model
      of width 16 by [`gradflow.as_problem`][]).
    - `params`, `init_scale`: the start (exactly one; a random start is the
      one [`gradflow.flow`][] draws with seed 0), shared by every member.
    - `seeds`: one member per seed (its Brownian path and, with `samples`,
      its examples).
    - `t1`: final time.
    - `sgd`: the [`gradflow.SGD`][] modelled: `lr` and `batch_size` (plain
      online SGD: no optimizer, no `num_sequences`); its `dtype`.
    - `saveat`: a [`gradflow.SaveAt`][]: save times (rounded to the step;
      default the flow's log grid). Stages are not found.
    - `solver`: a [`gradflow.SDESolver`][] (Diffrax solver, step, samples
      $M$, drift order).
    - `run`: a [`gradflow.Run`][] (only `progress` is used).

    **Returns:** a [`gradflow.Sweep`][]: member $i$ is seed `seeds[i]`, its
    `ts`, `loss` (the population loss along the path), `grad_norm` and
    `params`; the same seed gives the same member bit for bit whatever the
    other seeds.

    **Raises:** `ValueError`/`TypeError` naming the argument and its value,
    before anything is compiled.

    **Example:**

    ```python
    problem = gf.problems.MarkovAttention(gf.chains.sticky(6, 0.5, 0.5, 0.05), width=8)
    p0 = problem.init(jax.random.key(0), 1e-3)
    sde = gf.sgd_sde(problem, p0, seeds=range(16), t1=80, sgd=gf.SGD(0.2, 4))
    ```
    """
    start = time.perf_counter()
    sgd = as_sgd(sgd)
    solver = SDESolver() if solver is None else solver
    if not isinstance(solver, SDESolver):
        raise TypeError(f"solver must be a gradflow.SDESolver, got {show(solver)}")
    saveat = as_saveat(saveat, entry="gradflow.sgd_sde")
    as_run(run)
    problem = check_problem(as_problem(problem, params=params))
    if sgd.batch_size is None:
        raise ValueError(
            "sgd.batch_size = None is gradient descent, which has no noise: give "
            "the batch size of the SGD modelled"
        )
    if sgd.optimizer is not None or sgd.num_sequences is not None:
        raise ValueError(
            "gradflow.sgd_sde models plain online SGD: give an SGD without "
            f"optimizer and num_sequences, got optimizer = {show(sgd.optimizer)}, "
            f"num_sequences = {sgd.num_sequences}"
        )
    samples = _check_problem(problem, solver.samples)
    seeds = _check_seeds(seeds)
    t1 = check_positive_finite("t1", t1)
    dt = sgd.lr / 2 if solver.dt is None else solver.dt
    if t1 < dt:
        raise ValueError(f"t1 = {t1} is shorter than one step of the SDE, dt = {dt}")
    steps = sgd_save_steps(saveat.ts, dt, t1)
    dtype = check_dtype(sgd.dtype)
    problem_dt = astype(problem, dtype)
    params0, init_scale = initial_point(
        problem_dt, init_scale=init_scale, params=params, seed=0, dtype=dtype
    )
    if samples is None:
        columns = int(problem_dt.example_weights().shape[0])  # pyright: ignore[reportAttributeAccessIssue]
    else:
        columns = samples
    ts = steps.astype(np.float64) * dt
    f = lambda x: jnp.asarray(x, dtype)  # noqa: E731
    numbers = (f(sgd.lr), f(math.sqrt(sgd.lr / sgd.batch_size)), f(dt), f(ts[-1]))
    settings = FlowSettings(
        t1=float(ts[-1]),
        solver=type(solver.solver).__name__,
        max_steps=int(steps[-1]) + 1,
        dtype=np.dtype(dtype).name,
        num_saves=len(ts),
        solver_options=_options(sgd, dt, samples, solver.order, solver.compensate),
        stages=False,
        init_scale=init_scale,
    )
    trajectories = [
        _member(
            problem,
            problem_dt,
            params0,
            seed,
            numbers=numbers,
            ts=ts,
            settings=settings,
            solver=solver,
            samples=samples,
            columns=columns,
        )  # fmt: skip
        for seed in seeds
    ]
    members = [
        Member(index=i, problem=0, init_scale=init_scale, seed=seed)
        for i, seed in enumerate(seeds)
    ]
    t_end, num = float(ts[-1]), int(steps[-1])
    return Sweep(
        trajectories=tuple(trajectories),
        members=tuple(members),
        problems=(problem,),
        labels={},
        ts=ts,
        loss=np.stack([t.loss for t in trajectories]),
        settings=SweepSettings(
            t1=t_end,
            solver=type(solver.solver).__name__,
            max_steps=num + 1,
            dtype=np.dtype(dtype).name,
            num_saves=len(ts),
            solver_options=_options(sgd, dt, samples, solver.order, solver.compensate),
            stages=False,
            num_members=len(seeds),
            num_problems=1,
            init_scale=None if init_scale is None else (init_scale,) * len(seeds),
            seeds=seeds,
        ),
        stats=SweepStats(
            num_members=len(seeds),
            num_devices=1,
            num_steps=tuple(t.stats.num_steps for t in trajectories),
            wall_time=time.perf_counter() - start,
        ),
    )


def _member(problem, problem_dt, params0, seed, *, numbers, ts, settings, solver,
            samples, columns) -> Trajectory:  # fmt: skip
    """One member: the solve of Brownian seed `seed`, scored with the
    population loss."""
    tick = time.perf_counter()
    key = jax.random.fold_in(jax.random.key(seed), 0x5DE)
    ys, num_steps = _solve(
        problem_dt, params0, key, numbers, jnp.asarray(ts, numbers[0].dtype),
        solver=solver.solver, order=solver.order, compensate=solver.compensate,
        samples=samples,
        columns=columns, max_steps=settings.max_steps,
    )  # fmt: skip
    saved = jax.tree.map(np.asarray, ys)
    finite = all(np.isfinite(x).all() for x in jax.tree.leaves(saved))
    loss, grad_norm = population_observables(problem_dt, saved)
    stats = FlowStats(
        num_steps=int(num_steps),
        num_accepted_steps=int(num_steps),
        wall_time=time.perf_counter() - tick,
    )
    return Trajectory(  # pyright: ignore[reportCallIssue]
        ts=ts,
        loss=np.asarray(loss, np.float64),
        grad_norm=np.asarray(grad_norm, np.float64),
        params=saved,
        problem=problem,
        settings=dataclasses.replace(settings, seed=int(seed)),
        stats=stats,
        result=RESULTS.successful if finite else RESULTS.nonfinite,
        detail="" if finite else "the SDE's path became non-finite; lower dt",
    )


def _options(
    sgd: SGD, dt: float, samples, order: int, compensate: bool
) -> dict[str, Any]:
    """What a member's settings record of the SDE: the SGD it models and how
    its noise and drift were made."""
    return {
        "sde": "stochastic modified equation",
        "lr": sgd.lr,
        "batch_size": sgd.batch_size,
        "dt": dt,
        "noise": "exact" if samples is None else f"{samples} samples per step",
        "drift_order": order,
        "compensate": compensate,
    }


__all__ = ["DEFAULT_SAMPLES", "SDESolver", "noise_columns", "sgd_sde"]
