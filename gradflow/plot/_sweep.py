r"""Figures of a [`gradflow.Sweep`][], for any problem.

- [`phase_diagram`][gradflow.plot.phase_diagram]: a value read off each
  member (a stage's start, the final loss, ...) over one or two of the
  sweep's axes.
- [`sweep_summary`][gradflow.plot.sweep_summary]: every member's loss curve
  and stages at a glance.
"""

import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .._problem.functions import loss_levels
from .._result.trajectory import Trajectory
from .._sweep.result import Sweep
from ._base import STAGE_COLORS, pyplot


def origin_rate(problem) -> float:
    """The largest unstable rate of the linearised flow at the origin (all
    parameters zero), which sets the escape time from a small start."""
    from ..theory import linearize

    like = jax.eval_shape(lambda: problem.init(jax.random.key(0), 1.0))
    origin = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), like)
    return float(linearize(problem, origin).unstable_rate)


def _check_sweep(sw):
    if not isinstance(sw, Sweep):
        raise TypeError(f"expected a gradflow.Sweep, got {type(sw).__name__}")


def _member_axis(sw, name: str) -> np.ndarray:
    """Each member's value of a sweep axis: `"problem"`, `"init_scale"`,
    `"seed"`, `"start"` or a label of the problem axis."""
    if name in ("problem", "init_scale", "seed", "start"):
        values = [getattr(m, name) for m in sw.members]
    elif name in sw.labels:
        values = [m.labels[name] for m in sw.members]
    else:
        axes = ["problem", "init_scale", "seed", "start", *sw.labels]
        raise ValueError(f"no sweep axis {name!r}; choose one of {axes}")
    if any(v is None for v in values):
        raise ValueError(f"the sweep's members have no {name!r} (given starts?)")
    return np.asarray(values)


def member_value(traj: Trajectory, value: str | Callable[[Trajectory], Any]) -> float:
    """A number read off one member: `"STAGE.FIELD"` (that field of the
    member's first stage of that name, e.g. `"new_direction.t_start"`; `nan`
    when the member has no such stage), `"final_loss"`, `"num_steps"`, or a
    function `traj -> float`."""
    if callable(value):
        return float(value(traj))
    if value == "final_loss":
        return float(traj.loss[-1])
    if value == "num_steps":
        return float(traj.stats.num_steps)
    if not isinstance(value, str) or value.count(".") != 1:
        raise ValueError(
            "value must be 'STAGE.FIELD' (e.g. 'new_direction.t_start'), "
            f"'final_loss', 'num_steps' or a function of a trajectory, got {value!r}"
        )
    name, field = value.split(".")
    for stage in traj.stages:
        if stage.name == name:
            got = getattr(stage, field, None)
            return math.nan if got is None else float(got)
    return math.nan


def _value_label(value) -> str:
    if callable(value):
        return getattr(value, "__name__", "value")
    if isinstance(value, str) and "." in value:
        name, field = value.split(".")
        what = {"t_start": "start time", "t_end": "end time"}.get(field, field)
        return f"{what} of {name.replace('_', ' ')}"
    return str(value).replace("_", " ")


def _axis_label(name: str) -> str:
    return {
        "delta": r"asymmetry $\delta$",
        "init_scale": r"initial scale $\varepsilon$",
        "seed": "seed",
        "problem": "problem",
    }.get(name, name)


def phase_diagram(
    sw,
    x: str,
    y: str | None = None,
    value="new_direction.t_start",
    *,
    theory: str | Callable[..., Any] | None = None,
    log_value: bool = False,
    title: str | None = None,
):
    r"""A phase diagram of a [`gradflow.Sweep`][]: `value` over one or two of
    its axes.

    - With `y`: a heat map over the grid of `x` x `y` (e.g. `x="delta"`,
      `y="seed"`), one cell per member; members without the value (no such
      stage) are hatched.
    - Without `y`: every member's value against `x` (points), their mean over
      the other axes (line) and, with `theory="escape"`, the linear theory's
      escape time from the origin $\log(1/arepsilon)/\sigma$ with
      $\sigma = |\pi - \mathbf 1/d|\,|\pi|$ (`docs/theory.md`) for
      `x="init_scale"`; `theory` may also be a function `f(x_values, chain)`.

    **Arguments:** `sw`; `x`, `y`: axis names (`"chain"`, `"init_scale"`,
    `"seed"` or a label such as `"delta"`); `value`: see
    [`member_value`][gradflow.plot.member_value]; `log_value`: a log colour or
    y scale; `title`.

    **Returns:** the matplotlib figure.
    """
    _check_sweep(sw)
    plt = pyplot()
    xs = _member_axis(sw, x)
    vals = np.array([member_value(t, value) for t in sw])
    label = _value_label(value)
    if y is not None:
        ys = _member_axis(sw, y)
        ux, uy = np.unique(xs), np.unique(ys)
        grid = np.full((uy.size, ux.size), np.nan)
        for xv, yv, v in zip(xs, ys, vals, strict=True):
            grid[np.searchsorted(uy, yv), np.searchsorted(ux, xv)] = v
        ylabels = [f"{v:.4g}" for v in uy]
        if y == "seed" and uy.size > 1:  # a last row: the mean over the seeds
            n_ok = np.isfinite(grid).sum(0)
            mean = np.where(n_ok > 0, np.nansum(grid, 0) / np.maximum(n_ok, 1), np.nan)
            grid, uy = np.vstack([grid, mean]), np.append(uy, uy[-1] + 1)
            ylabels.append("mean")
        fig, ax = plt.subplots(figsize=(6.4, 4.4))

        def edges(u):
            if u.size == 1:
                return np.array([u[0] - 0.5, u[0] + 0.5])
            mid = 0.5 * (u[1:] + u[:-1])
            return np.concatenate([[2 * u[0] - mid[0]], mid, [2 * u[-1] - mid[-1]]])

        from matplotlib.colors import LogNorm, Normalize

        finite = grid[np.isfinite(grid)]
        norm = LogNorm() if log_value and finite.size and (finite > 0).all() else None
        if norm is None and finite.size:
            # a colour range of at least 1 % of the values: differences below
            # that (solver noise) are not stretched over the whole scale
            lo, hi = float(finite.min()), float(finite.max())
            half = max(hi - lo, 0.01 * abs(float(np.median(finite)))) / 2
            norm = Normalize(0.5 * (lo + hi) - half, 0.5 * (lo + hi) + half)
        ax.set_facecolor("white")
        ex, ey = edges(ux.astype(float)), edges(uy.astype(float))
        from matplotlib.patches import Rectangle

        ax.add_patch(Rectangle((ex[0], ey[0]), ex[-1] - ex[0], ey[-1] - ey[0],
                               facecolor="white", edgecolor="0.7", hatch="///",
                               lw=0, zorder=0))  # fmt: skip
        mesh = ax.pcolormesh(ex, ey, np.ma.masked_invalid(grid), cmap="viridis",
                             norm=norm, shading="flat")  # fmt: skip
        fig.colorbar(mesh, ax=ax, label=label)
        ax.set_xlabel(_axis_label(x))
        ax.set_ylabel(_axis_label(y))
        if ux.size <= 12:
            ax.set_xticks(ux, [f"{v:.4g}" for v in ux])
        if uy.size <= 17:
            ax.set_yticks(uy, ylabels)
        if grid.size <= 120:  # small grids: the numbers in the cells
            cmap, cnorm = mesh.cmap, mesh.norm
            for (r, c), v in np.ndenumerate(grid):
                if np.isfinite(v):
                    light = np.mean(cmap(cnorm(v))[:3]) > 0.5
                    ax.text(float(0.5 * (ex[c] + ex[c + 1])),
                            float(0.5 * (ey[r] + ey[r + 1])),
                            f"{v:.3g}", ha="center", va="center", fontsize=7,
                            color="k" if light else "w")  # fmt: skip
        missing = int(np.isnan(grid).sum())
        note = f" (hatched: no value, {missing} cells)" if missing else ""
        ax.set_title(title or f"{label}{note}", fontsize=10)
        fig.tight_layout()
        return fig

    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    ux = np.unique(xs)
    ok = np.isfinite(vals)
    ax.plot(xs[ok], vals[ok], "o", ms=4, color="C0", alpha=0.45, mec="none",
            label=f"members ({int(ok.sum())} of {len(vals)})")  # fmt: skip
    means = np.array([np.nanmean(vals[xs == u]) if np.isfinite(vals[xs == u]).any()
                      else np.nan for u in ux])  # fmt: skip
    lo_hi = np.array([[np.nanmin(vals[xs == u]), np.nanmax(vals[xs == u])]
                      if np.isfinite(vals[xs == u]).any() else [np.nan, np.nan]
                      for u in ux])  # fmt: skip
    if len(vals) > ux.size:
        ax.fill_between(ux, lo_hi[:, 0], lo_hi[:, 1], color="C0", alpha=0.12, lw=0,
                        label="range over the other axes")  # fmt: skip
    ax.plot(ux, means, "-", color="C0", lw=1.5, label="mean over the other axes")
    if theory is not None:
        grid_x = np.geomspace(ux.min(), ux.max(), 100) if x == "init_scale" else ux
        if theory == "escape":
            if x != "init_scale":
                raise ValueError(
                    f"theory='escape' is drawn against x='init_scale', got x={x!r}"
                )
            for j, c in enumerate(sorted({m.problem for m in sw.members})):
                sigma = origin_rate(sw.problems[c])
                ax.plot(grid_x, np.log(1 / grid_x) / sigma, "--", color="k", lw=1,
                        label=(r"theory $\log(1/\varepsilon)/\sigma$, "
                               rf"$\sigma$ = {sigma:.3g}") if j < 3 else None)  # fmt: skip
        elif callable(theory):
            for j, c in enumerate(sorted({m.problem for m in sw.members})):
                ax.plot(grid_x, theory(grid_x, sw.problems[c]), "--", color="k", lw=1,
                        label="theory" if j == 0 else None)  # fmt: skip
        else:
            raise ValueError(
                f"theory must be None, 'escape' or a function, got {theory!r}"
            )
    if x == "init_scale":
        ax.set_xscale("log")
    if log_value:
        ax.set_yscale("log")
    ax.set_xlabel(_axis_label(x))
    ax.set_ylabel(label)
    ax.legend(fontsize=8, frameon=False)
    ax.grid(alpha=0.25, lw=0.5)
    ax.set_title(title or f"{label} across the sweep ({len(sw)} members)", fontsize=10)
    fig.tight_layout()
    return fig


def sweep_summary(sw, *, color_by: str | None = None, title: str | None = None):
    """Every member of a [`gradflow.Sweep`][] at a glance: left, the loss
    curves of all members on a log-time axis, coloured by `color_by` (a sweep
    axis; by default its first label, else the first of the init scale (by
    its logarithm), the seed and the problem that varies), the first colour
    drawn widest and each later one narrower on top, so that curves that
    overlap stay visible; right, one row per member with its stages shaded
    over the same time axis (failed members marked where they stopped).

    **Returns:** the matplotlib figure.
    """

    _check_sweep(sw)
    plt = pyplot()
    if color_by is None:
        color_by = next(iter(sw.labels), None) or next(
            (
                name
                for name in ("init_scale", "seed", "problem")
                if len({getattr(m, name) for m in sw.members}) > 1
            ),
            "problem",
        )
    cvals = _member_axis(sw, color_by).astype(float)
    if color_by == "init_scale":  # scales span decades: coloured by their log
        cvals = np.log10(cvals)
    import matplotlib as mpl
    import matplotlib.cm
    import matplotlib.colors

    lo, hi = float(np.min(cvals)), float(np.max(cvals))
    norm = matplotlib.colors.Normalize(lo, hi if hi > lo else lo + 1)
    cmap = mpl.colormaps["viridis"]
    n = len(sw)
    fig, (ax0, ax1) = plt.subplots(
        1, 2, figsize=(12, max(4.2, min(9.0, 2.0 + 0.12 * n))),
        gridspec_kw={"width_ratios": [1.1, 1]},
    )  # fmt: skip
    t_lo = float(np.min(sw.ts[sw.ts > 0]))
    t_hi = float(sw.ts[-1])
    # Curves that overlap stay visible: the first colour value is drawn
    # widest, each later one narrower on top of it (delta = 0 under 0.05).
    distinct = np.unique(cvals)
    rank = {float(v): i for i, v in enumerate(distinct)}
    steps = max(distinct.size - 1, 1)
    members = list(zip(sw, cvals, strict=True))
    for traj, cv in sorted(members, key=lambda m: rank[float(m[1])]):
        keep = traj.ts > 0
        lw = 0.8 + 2.2 * (1 - rank[float(cv)] / steps) if distinct.size > 1 else 1.0
        ax0.plot(traj.ts[keep], traj.loss[keep], color=cmap(norm(cv)), lw=lw,
                 alpha=0.85, solid_capstyle="butt")  # fmt: skip
    levels = {} if sw.problems[0] is None else loss_levels(sw.problems[0])
    for text, value in levels.values():
        ax0.axhline(value, color="0.4", lw=0.7, ls=":")
        ax0.text(t_lo, value, " " + text, fontsize=7, va="bottom", color="0.3")
    ax0.set_xscale("log")
    ax0.set_xlim(t_lo, t_hi)
    ax0.set_xlabel("gradient-flow time $t$")
    ax0.set_ylabel("population loss")
    sm = matplotlib.cm.ScalarMappable(norm=norm, cmap=cmap)
    label = _axis_label(color_by)
    if color_by == "init_scale":
        label = r"$\log_{10}$ " + label
    fig.colorbar(sm, ax=ax0, label=label, pad=0.01)
    if len(sw.problems) > 1 and levels:
        ax0.set_title("loss levels of problem 0 dotted", fontsize=8)
    seen = set()
    for i, traj in enumerate(sw):
        for stage in traj.stages:
            name = stage.name
            t0 = max(float(stage.t_start), t_lo)
            t1 = stage.t_end
            t1 = traj.t_final if t1 is None or not np.isfinite(t1) else float(t1)
            if not t1 > t0:
                continue
            # new_direction overlaps the previous cycle's stages: a thinner
            # bar in the lower half of the row keeps both visible
            lower = name == "new_direction"
            ax1.barh(i + 0.2 if lower else i, t1 - t0, left=t0,
                     height=0.4 if lower else 0.8, lw=0,
                     color=STAGE_COLORS.get(name, "#cccccc"),
                     label=name.replace("_", " ") if name not in seen else None)  # fmt: skip
            seen.add(name)
        if not traj.ok:
            ax1.plot(traj.t_final, i, "x", color="C3", ms=5,
                     label="failed: stopped here" if "failed" not in seen else None)  # fmt: skip
            seen.add("failed")
    ax1.set_xscale("log")
    ax1.set_xlim(t_lo, t_hi)
    ax1.set_ylim(n - 0.5, -0.5)
    ax1.set_xlabel("gradient-flow time $t$")
    ax1.set_ylabel("member")
    if n <= 32:
        names = []
        for m in sw.members:
            parts = [f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                     for k, v in m.labels.items()]  # fmt: skip
            if m.init_scale is not None and len(set(sw.settings.init_scale or ())) > 1:
                parts.append(f"eps={m.init_scale:.3g}")
            parts.append(f"seed {m.seed}" if m.seed is not None else f"start {m.start}")
            names.append(", ".join(parts))
        ax1.set_yticks(range(n), names, fontsize=6)
    ax1.legend(fontsize=7, loc="lower left", bbox_to_anchor=(0.0, 1.01),
               ncol=5, frameon=False, handlelength=1.2, columnspacing=1.0)  # fmt: skip
    fig.suptitle(title or f"sweep of {n} members: loss and stages", fontsize=11)
    fig.tight_layout()
    return fig


__all__ = ["member_value", "origin_rate", "phase_diagram", "sweep_summary"]
