r"""The paper's model's entry point, which takes a Markov chain:
[`gradflow.integrate`][], a thin call of [`gradflow.flow`][] on
[`gradflow.problems.MarkovAttention`][]. (The other entry points take a chain
through [`gradflow.as_problem`][]: `gf.sweep(chains, ...)`,
`gf.train_sgd(chain, ...)`.)"""

import diffrax as dfx
import jax.numpy as jnp

from .._flow.flow import flow
from .._flow.solving import DEFAULT_T1
from .._options import Run, SaveAt, Solver
from .._result.trajectory import Trajectory
from .chain import MarkovChain
from .model import AnyParams
from .problem import check_start, markov_problem
from .variants import Model


def integrate(
    chain: MarkovChain,
    init_scale: float | None = None,
    *,
    params: AnyParams | None = None,
    width: int = 16,
    model: Model | None = None,
    seed: int = 0,
    t1: float = DEFAULT_T1,
    saveat: SaveAt | None = None,
    solver: Solver | str | dfx.AbstractSolver | None = None,
    run: Run | None = None,
) -> Trajectory:
    r"""Solves the population gradient flow $\dot\theta = -\nabla L(\theta)$
    of the paper's model on a chain.

    `gf.integrate(chain, init_scale, width=..., model=..., ...)` is exactly
    `gf.flow(gf.problems.MarkovAttention(chain, width=..., model=...),
    init_scale, ...)`: the same steps and numbers, bit for bit.

    Starts either from a random point (`init_scale`: every entry i.i.d.
    $\mathcal{N}(0, \mathrm{init\_scale}^2)$, shapes set by `chain.d` and
    `width`) or from given `params`, and integrates to `t1` with an adaptive
    Diffrax solver. Time is gradient-descent time: step $k$ of GD at learning
    rate $\eta$ sits at $t = k\eta$. By default the stages of the paper
    (condensation, focus, dilution, new directions; `docs/stages.md`) are
    found, and the observables of [`gradflow.markov.diagnostics`][] saved at
    every save time (`traj.extras`).

    **Arguments:**

    - `chain`: a [`gradflow.MarkovChain`][].
    - `init_scale`: standard deviation of the random initialisation; give
      exactly one of `init_scale` and `params`.
    - `params`: a [`gradflow.Params`][] (or [`gradflow.VariantParams`][]) to
      start from; they carry their width and model.
    - `width`: the embedding width $m$ of a random start.
    - `model`: a [`gradflow.Model`][] for the random start (default: the
      paper's model); a `model` given with `params` must match theirs.
    - `seed`: seed of the random initialisation.
    - `t1`: final time.
    - `saveat`, `solver`, `run`: the options of every entry point
      ([`gradflow.SaveAt`][], [`gradflow.Solver`][], [`gradflow.Run`][]).
      User events' `cond_fn(t, params, problem)` see the problem
      (`problem.chain` is the chain).

    **Returns:** a [`gradflow.Trajectory`][] (`traj.problem.chain` is the
    chain). If the solver stops early, `traj.ok` is `False`, `traj.message`
    says why and what to change, and the trajectory holds everything up to
    the last time reached.

    **Raises:** `ValueError`/`TypeError` naming the argument and its value for
    bad input (or a checkpoint of another call), before anything is compiled.
    [`gradflow.Interrupted`][] (a `KeyboardInterrupt`) on Ctrl-C: the solve
    stops after the current chunk of steps, writes the checkpoint, and the
    exception's `result` holds the trajectory so far.

    **Example:**

    ```python
    import gradflow as gf
    traj = gf.integrate(gf.chains.sticky(6, 0.5, 0.5, 0.05), 1e-3, width=8)
    traj.loss[-1], traj.problem.chain.conditional_entropy
    for s in traj.stages:
        print(s.name, s.cycle, s.t_start, s.t_end, s.tokens)
    ```
    """
    problem = markov_problem(chain, width=width, model=model, params=params)
    if params is not None:
        # the paper's own checks of a given point (messages that name W0, ...)
        options = solver if isinstance(solver, Solver) else Solver(solver)
        dtype = jnp.float32 if options.dtype == "float32" else jnp.float64
        check_start(problem, params, dtype)
    return flow(
        problem,
        init_scale,
        params=params,
        seed=seed,
        t1=t1,
        saveat=saveat,
        solver=solver,
        run=run,
    )


def integrate_stages(
    chain: MarkovChain, init_scale: float | None = None, **kwargs
) -> Trajectory:
    """[`gradflow.integrate`][] with stages (its default): kept as a name for
    scripts that want to say so explicitly. Takes the same arguments; a
    `saveat` without stages is refused."""
    saveat = kwargs.get("saveat")
    if saveat is not None and not getattr(saveat, "stages", True):
        raise ValueError(
            "integrate_stages always locates stages; use gf.integrate(..., "
            "saveat=gf.SaveAt(stages=False))"
        )
    return integrate(chain, init_scale, **kwargs)


__all__ = ["integrate", "integrate_stages"]
