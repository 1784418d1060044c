r"""Engine functions over any problem: what the engine does with a problem
beyond calling its abstract methods (`gradflow/_problem/base.py`).

Checking a given starting point, casting a problem to a solve's dtype, the
RMS size of a start, a short description, the observables saved along a run
and the generic analysis of a solved trajectory. None of them is a hook: a
problem does not override them.
"""

import dataclasses
import functools
import math
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import PyTree

from .._core.random import new_key
from .._core.records import stage_events
from .._core.validate import check_finite_entries
from .._loop import exported
from .._loop.loop import save_buffer_size
from .._stages import matrix_spectra, stages_and_rests
from .base import (
    Analysis,
    BoundedProblem,
    ObservedProblem,
    Problem,
    SampledProblem,
    StagedProblem,
)
from .curvature import start_point, start_speed, unstable_rate


# Entries of one observed point's largest intermediate times the points
# observed at once: a bound on the memory of `observe` over many saves (at
# d = 512 a batch of 320 points of the paper's model peaked at 6.8 GB).
OBSERVE_BATCH_ENTRIES = 2**24


def check_problem(problem, name: str = "problem") -> Problem:
    """`problem`, or a `TypeError` naming the argument unless it is a
    [`gradflow.Problem`][]."""
    if not isinstance(problem, Problem):
        raise TypeError(
            f"{name} must be a gradflow.Problem (a subclass defining loss and init), "
            f"got {type(problem).__name__}"
        )
    return problem


def check_sampled(problem, name: str = "problem") -> SampledProblem:
    """`problem`, or a `TypeError` saying how to make it trainable by SGD."""
    check_problem(problem, name)
    if not isinstance(problem, SampledProblem):
        raise TypeError(
            f"{name} must be a gradflow.SampledProblem to be trained by SGD: "
            f"{type(problem).__name__} is a gradflow.Problem without sample and "
            "sample_loss (subclass gradflow.SampledProblem and define them)"
        )
    return problem


def _floating(x) -> bool:
    return isinstance(x, (jax.Array, np.ndarray)) and jnp.issubdtype(
        x.dtype, jnp.floating
    )


def astype(problem: Problem, dtype) -> Problem:
    """The problem with its floating arrays in `dtype` (the dtype of a
    solve)."""
    return jax.tree.map(lambda x: x.astype(dtype) if _floating(x) else x, problem)


def params_dtype(params):
    """The floating dtype of saved parameters (a solve's dtype)."""
    return jnp.result_type(*jax.tree.leaves(params))


def check_start(problem: Problem, params: PyTree, dtype) -> PyTree:
    """A given starting point, checked (one point with the structure and
    shapes of `problem.init`'s, finite) and cast to `dtype`; a one-line
    `TypeError`/`ValueError` naming what is wrong otherwise."""
    # Finite entries first, with NumPy alone: a non-finite start is refused
    # before anything is traced (the shapes below trace `problem.init`).
    for path, value in jax.tree_util.tree_flatten_with_path(params)[0]:
        if isinstance(value, (np.ndarray, jax.Array)) and np.issubdtype(
            value.dtype, np.inexact
        ):
            check_finite_entries("params" + jax.tree_util.keystr(path), value)
    like = jax.eval_shape(lambda: problem.init(jax.random.key(0), 1.0))
    want, got = jax.tree.structure(like), jax.tree.structure(params)
    if want != got:
        raise TypeError(
            f"params must have the structure of {type(problem).__name__}.init's "
            f"result, {want}, got {got}"
        )
    paths = jax.tree_util.tree_flatten_with_path(params)[0]
    for (path, value), ref in zip(paths, jax.tree.leaves(like), strict=True):
        name = "params" + jax.tree_util.keystr(path)
        if np.shape(value) != ref.shape:
            raise ValueError(
                f"{name} must have shape {ref.shape} (one point), got shape "
                f"{np.shape(value)}"
            )
        value = np.asarray(value)
        if not np.isfinite(value).all():
            i = tuple(int(k) for k in np.argwhere(~np.isfinite(value))[0])
            raise ValueError(f"{name} has a non-finite entry at {i}: {value[i]}")
    return jax.tree.map(lambda x: jnp.asarray(x, dtype=dtype), params)


def initial_size(problem: Problem, params: PyTree) -> float:
    """The RMS size of a starting point's small entries: those that
    `problem.init` draws around zero (a leaf that `init` sets to a nonzero
    constant, such as a normalisation gain of 1, is left out). The default
    `atol` is tied to it: saddle escapes grow from components that small."""
    fixed = jax.tree.leaves(problem.init(new_key(0), 0.0))
    leaves = [
        np.ravel(np.asarray(x))
        for x, zero in zip(jax.tree.leaves(params), fixed, strict=True)
        if not np.any(np.asarray(zero))
    ]
    if not leaves:  # every leaf is set by init: measure all of them
        leaves = [np.ravel(np.asarray(x)) for x in jax.tree.leaves(params)]
    return float(np.sqrt(np.mean(np.concatenate(leaves) ** 2)))


def _short(value) -> str | None:
    if isinstance(value, (jax.Array, np.ndarray)):
        return "x".join(str(n) for n in np.shape(value)) or "scalar"
    if isinstance(value, bool) or value is None:
        return None if not value else "True"
    if isinstance(value, (int, str)):
        return str(value)
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, eqx.Module):
        return type(value).__name__
    return None


def describe(problem: Problem | None) -> str:
    """A short description of a problem for `repr` of results and figure
    titles: `str(problem)` where its class defines `__str__`, else its class
    and its fields (arrays by shape), e.g.
    `Factorisation(M=4x4, rank=3)`."""
    if problem is None:
        return "none"
    if type(problem).__str__ is not object.__str__:
        return str(problem)
    parts = []
    for f in dataclasses.fields(problem):
        value = getattr(problem, f.name)
        if isinstance(value, tuple) and all(isinstance(v, int) for v in value):
            shown = str(value)
        else:
            shown = _short(value)
        if shown is not None:
            parts.append(f"{f.name}={shown}")
    return f"{type(problem).__name__}({', '.join(parts)})"


def loss_floor(problem: Problem | None) -> float | None:
    """A [`gradflow.BoundedProblem`][]'s `loss_floor()`, else `None`."""
    if isinstance(problem, BoundedProblem):
        floor = problem.loss_floor()
        return None if floor is None else float(floor)
    return None


def speed_floor(problem: Problem | None, loss0) -> float | None:
    r"""The floor above which the speed of the generic stages and the saddle
    events judges the loss's level (`gradflow._stages.loss_level`,
    `docs/stages.md`, "Scale-free plateaus"): the problem's `loss_floor()`
    where it declares one, else 0 for a loss that starts non-negative;
    `None` (the constant loss scale) for a [`gradflow.StagedProblem`][],
    which judges its loss against its own `loss_scale()`, and for a loss
    that starts negative with no declared floor."""
    if isinstance(problem, StagedProblem):
        return None
    floor = loss_floor(problem)
    if floor is not None:
        return floor
    return 0.0 if float(loss0) >= 0 else None


@functools.singledispatch
def loss_levels(problem) -> dict[str, tuple[str, float]]:
    r"""Reference levels of a problem's loss, highest first, for figures and
    comparisons: `{name: (label, value)}`. By default the floor of a
    [`gradflow.BoundedProblem`][] (`{"floor": ("floor", value)}`) or none. A
    problem's package registers its own (`loss_levels.register(cls)`): the
    paper's model gives $\log d$, $H(\pi)$ (its first plateau) and
    $H(P|\pi)$ (its floor)."""
    floor = loss_floor(problem)
    return {} if floor is None else {"floor": ("floor", floor)}


def observe(problem: Problem, params: PyTree) -> dict[str, Any]:
    """What is saved at a point: an [`gradflow.ObservedProblem`][]'s
    `observe`, else the singular values of every matrix parameter."""
    if isinstance(problem, ObservedProblem):
        return problem.observe(params)
    return matrix_spectra(params)


def observe_batch(params: PyTree) -> int:
    """The most saved points observed at once: `OBSERVE_BATCH_ENTRIES` over
    the entries of one point's largest intermediate, taken as the larger of
    its parameter count and the square of its longest axis (an attention
    matrix over the vocabulary)."""
    shapes = [np.shape(x) for x in jax.tree.leaves(params)]
    size = sum(math.prod(s) for s in shapes)
    longest = max((max(s, default=1) for s in shapes), default=1)
    return max(1, OBSERVE_BATCH_ENTRIES // max(size, longest**2))


# Points whose largest intermediate holds at least OBSERVE_BATCH_ENTRIES /
# OBSERVE_MAP_BATCH entries (2^20: a d >= 1,024 attention matrix; batches of
# at most 16 points) are observed one after the other inside a batch
# (`jax.lax.map`), not vmapped: at d = 1,024, width 16, the observables of a
# save took 26-41 ms one at a time against 38-77 ms vmapped in batches of 16
# (two runs under load; the blocked gradient's intermediates 16 times
# larger: `docs/performance.md`, "Issue 42, ninth pass: where the text
# flow's time goes"), the same numbers to 6e-16 relative. Smaller points
# (every recorded result of the paper's models) stay vmapped, bit for bit.
OBSERVE_MAP_BATCH = 16


def _observe_many(problem, params):
    # Module level, the problem as an argument: one compilation per class,
    # statics and shapes, not one per call.
    one = jax.tree.map(lambda x: x[0], params)
    if observe_batch(one) <= OBSERVE_MAP_BATCH:
        return jax.lax.map(lambda p: observe(problem, p), params)
    return jax.vmap(lambda p: observe(problem, p))(params)


_observe_many_jit = eqx.filter_jit(_observe_many)


def observe_saves(
    problem: Problem, ts, params, *, batch: int = 512
) -> dict[str, np.ndarray]:
    """The problem's observables (its `observe`, for a
    [`gradflow.ObservedProblem`][]; else [`gradflow.matrix_spectra`][]) at
    every saved point: `params` with a leading time axis of length `len(ts)`.

    Evaluated in batches of at most `batch` saves, and of at most
    `OBSERVE_BATCH_ENTRIES` (`2**24`) entries of one point's largest
    intermediate in all, of a
    bucketed length (the last point repeated): one compilation serves every
    length above the batch, and one each bucket of `save_buffer_size` below.
    **Returns:** a dict of NumPy arrays with a leading time axis (`{}` when
    nothing is observed).
    """
    ts = np.asarray(ts, dtype=np.float64)
    T = ts.shape[0]
    leaves = jax.tree.leaves(params)
    if not leaves or any(np.shape(x)[:1] != (T,) for x in leaves):
        raise ValueError(
            f"ts must be one time per saved point: got ts of shape {ts.shape} and "
            f"params with leading axes {sorted({np.shape(x)[:1] for x in leaves})}"
        )
    one = jax.tree.map(lambda x: x[0], params)
    size = min(batch, save_buffer_size(T), observe_batch(one))
    chunks = []
    for lo in range(0, T, size):
        hi = min(lo + size, T)
        idx = np.minimum(np.arange(lo, lo + size), hi - 1)
        # gathered on the host (a device gather compiles once per shape) and
        # put on the device without compiling (jnp.asarray would, per shape)
        batch_params = jax.tree.map(
            lambda x, i=idx: jax.device_put(np.asarray(x)[i]), params
        )
        # (where exported programs are on, the command line's warm start
        # loads the traced program: gradflow/_loop/exported.py)
        out = exported.call(
            "observe_many", _observe_many, problem, batch_params, same_structure=False
        )
        if out is None:
            out = _observe_many_jit(problem, batch_params)
        chunks.append({k: np.asarray(v)[: hi - lo] for k, v in out.items()})
    return {k: np.concatenate([c[k] for c in chunks]) for k in chunks[0]}


def generic_analysis(
    problem: Problem,
    ts: np.ndarray,
    params: PyTree,
    loss: np.ndarray,
    *,
    thresholds,
    loss_scale: float,
) -> Analysis:
    r"""The generic analysis of a solved trajectory: the observables at every
    save (`extras`, in the dtype of the saves) and the generic stages on them
    (`plateau`, `drop`, `rank`; `docs/stages.md`): whether the flow starts
    still is read from the start's gradient and curvature
    (`start_speed` of `gradflow/_problem/curvature.py`), and each candidate
    plateau is kept only where the flow passes a saddle (`saddle_test`,
    there; `docs/stages.md`, "Generic stages: a plateau is a saddle").
    `loss_scale` is the flow's $\ell$. A [`gradflow.StagedProblem`][] may
    build on it."""
    problem = astype(problem, params_dtype(params))
    extras = observe_saves(problem, ts, params)
    ts = np.asarray(ts, np.float64)
    still = None
    if ts.size and ts[0] == 0:
        first = jax.tree.map(lambda x: jnp.asarray(x[0]), params)
        q0 = start_speed(start_point(problem, first), loss_scale)
        still = bool(q0 <= thresholds.escape_speed)
    stages, rests = stages_and_rests(
        ts,
        loss,
        extras,
        loss_scale=loss_scale,
        thresholds=thresholds,
        start_still=still,
        saddle=saddle_test(problem, params, thresholds.saddle_growth),
        floor=speed_floor(problem, np.asarray(loss)[0]) if np.size(loss) else None,
    )
    return Analysis(
        stages=stages, events=stage_events(stages), extras=extras, rests=rests
    )


@eqx.filter_jit
def _grad_norm(problem: Problem, params):
    grad = jax.grad(problem.loss)(params)
    return jnp.sqrt(sum(jnp.sum(g**2) for g in jax.tree.leaves(grad)))


def saddle_test(problem: Problem, params: PyTree, growth: float):
    r"""The saddle test of the generic stages for saved points `params` (a
    leading time axis): a candidate plateau spanning saves `lo..hi` and
    ending at `t_end` is a saddle if the top growth rate $\lambda_u$ of the
    flow linearised at its closest approach to a critical point (the save of
    least $|\nabla L|$: [`unstable_rate`][gradflow._problem.curvature.unstable_rate])
    satisfies $\lambda_u\,t_{\text{end}} \ge$ `growth`; `None` where the
    rate is not finite (kept)."""

    def test(lo: int, hi: int, t_end: float) -> bool | None:
        points = [
            jax.tree.map(lambda x, i=i: jnp.asarray(x[i]), params)
            for i in range(lo, hi + 1)
        ]
        norms = [float(_grad_norm(problem, p)) for p in points]
        best = points[int(np.nanargmin(norms))] if np.isfinite(norms).any() else None
        rate = None if best is None else unstable_rate(problem, best)
        return None if rate is None else bool(rate * t_end >= growth)

    return test


def analyse(
    problem: Problem, ts, params, loss, *, thresholds, loss_scale: float
) -> Analysis:
    """A [`gradflow.StagedProblem`][]'s own `analyse`, else
    [`generic_analysis`][gradflow.generic_analysis]. Called on the problem as
    given (not cast to the solve's dtype)."""
    if isinstance(problem, StagedProblem):
        return problem.analyse(
            ts, params, loss, thresholds=thresholds, loss_scale=loss_scale
        )
    return generic_analysis(
        problem, ts, params, loss, thresholds=thresholds, loss_scale=loss_scale
    )


def problem_loss_scale(problem: Problem):
    """A [`gradflow.StagedProblem`][]'s `loss_scale()`, else `None` (the loss
    at the start)."""
    if isinstance(problem, StagedProblem):
        return problem.loss_scale()
    return None


__all__ = [
    "OBSERVE_BATCH_ENTRIES",
    "analyse",
    "astype",
    "check_problem",
    "check_sampled",
    "check_start",
    "describe",
    "generic_analysis",
    "initial_size",
    "loss_floor",
    "loss_levels",
    "observe",
    "observe_batch",
    "observe_saves",
    "params_dtype",
    "problem_loss_scale",
    "saddle_test",
    "speed_floor",
]
