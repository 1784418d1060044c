r"""`gradflow.compare`: a flow and an SGD run on one time axis and one metric."""

import math
from pathlib import Path
from typing import Any

import equinox as eqx
import jax
import numpy as np

from .._problem.functions import loss_levels
from .._result.trajectory import Trajectory
from .crossings import crossing_time, first_drop_target


DEFAULT_LEVELS = (0.25, 0.5, 0.75, 0.9)


def _interp(ts_out: np.ndarray, ts: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Linear interpolation of `values` (leading time axis) at `ts_out`."""
    idx = np.clip(np.searchsorted(ts, ts_out, side="right") - 1, 0, len(ts) - 2)
    span = ts[idx + 1] - ts[idx]
    w = np.where(span > 0, (ts_out - ts[idx]) / np.where(span > 0, span, 1.0), 0.0)
    w = w.reshape((-1,) + (1,) * (values.ndim - 1))
    return (1 - w) * values[idx] + w * values[idx + 1]


def drop_bounds(traj) -> list[tuple[float, float]]:
    """`(upper, lower)`: the loss at the top and at the bottom of each drop of
    a flow, read off its plateaus: from the start (or a plateau's end) down
    to the next plateau's start, and from the last plateau's end to the
    final loss when that plateau ended before the last save. Without
    plateaus, the whole fall is one drop; a drop under 0.1 % of the whole
    fall is left out."""
    loss = np.asarray(traj.loss, float)
    start, final = float(loss[0]), float(loss[-1])
    plateaus = sorted(
        (s for s in getattr(traj, "stages", ()) or () if s.name == "plateau"),
        key=lambda s: s.t_start,
    )
    t0 = float(np.asarray(traj.ts)[0])
    bounds, upper = [], start
    for p in plateaus:
        if p.t_start > t0:
            bounds.append((upper, float(p.loss_start)))
        upper = float(p.loss_end)
    if not plateaus or plateaus[-1].complete:
        bounds.append((upper, final))
    fall = max(start - min(final, *(b for _, b in bounds)), 0.0)
    return [(a, b) for a, b in bounds if a - b > 1e-3 * fall and fall > 0]


def _stage_times(records) -> dict[str, float]:
    out = {}
    for r in records:
        if r.name == "plateau":  # plateaus are not stages SGD is compared on
            continue
        # the first of each kind in each cycle (several directions may open
        # in one cycle)
        out.setdefault(f"{r.name}[{r.cycle}]", float(r.t_start))
    return out


class Comparison(eqx.Module):
    r"""A flow and an SGD run compared on the SGD run's save times.

    **Fields:**

    - `ts`: the run's save times that lie within the flow's time range.
    - `flow_loss`, `sgd_loss`: population losses at `ts`;
      `loss_gap = sgd_loss - flow_loss`.
    - `param_distance`: $\|\theta_\text{SGD} - \theta_\text{flow}\| /
      \|\theta_\text{flow}\|$ (all parameters together) at `ts`.
    - `exact`: whether the flow was saved at exactly `ts` (otherwise it was
      interpolated linearly in `t`; pass `ts=run.ts` to `integrate` to avoid it).
    - `levels`: loss levels on the first drop, the fractions `fractions` of the
      way from the initial loss down to the level the first drop reaches (see
      [`gradflow.compare`][]); `flow_crossings`,
      `sgd_crossings`: first times each level is reached; `crossing_rel_error`
      $= |t_\text{SGD} - t_\text{flow}| / t_\text{flow}$;
      `modified_crossings`: the order-1 modified flow's (with `modified=`;
      `nan` otherwise).
    - `drop_end`: the flow's crossing of the deepest level (`nan` if it is not
      reached, and then so are the statistics after it); over
      `ts >= drop_end`: `mean_abs_gap_after`, the mean of $|$`loss_gap`$|$ over
      the saves (on the default log grid, an average in $\log t$);
      `time_avg_abs_gap_after`, its average in $t$ (trapezoidal, weighting late
      times); `max_abs_gap_after`, its maximum.
    - `drop_levels`: half way down each drop of the flow (from the start or a
      plateau's end to the next plateau's start, read off the flow's
      plateaus);
      `drop_flow_crossings`, `drop_sgd_crossings`: the first times each is
      reached; `drop_rel_error`: $|t_\text{SGD} - t_\text{flow}| /
      t_\text{flow}$ for each drop (`inf` where SGD never reaches it).
    - `stage_time_diffs`: SGD minus flow start time of each stage found in both
      (empty until stages are attached).
    - `reference_levels`: the problem's reference levels
      (`{name: (label, value)}`, e.g. the paper's model's $\log d$, $H(\pi)$
      and conditional entropy), drawn in the figure; `flow_stages`: the
      flow's stage records (shaded in the figure).
    """

    ts: np.ndarray
    flow_loss: np.ndarray
    sgd_loss: np.ndarray
    loss_gap: np.ndarray
    param_distance: np.ndarray
    exact: bool
    fractions: tuple[float, ...]
    levels: np.ndarray
    flow_crossings: np.ndarray
    sgd_crossings: np.ndarray
    crossing_rel_error: np.ndarray
    drop_end: float
    mean_abs_gap_after: float
    time_avg_abs_gap_after: float
    max_abs_gap_after: float
    stage_time_diffs: dict[str, float]
    labels: tuple[str, str] = ("flow", "SGD")
    drop_levels: np.ndarray = eqx.field(default_factory=lambda: np.zeros(0))
    drop_flow_crossings: np.ndarray = eqx.field(default_factory=lambda: np.zeros(0))
    drop_sgd_crossings: np.ndarray = eqx.field(default_factory=lambda: np.zeros(0))
    drop_rel_error: np.ndarray = eqx.field(default_factory=lambda: np.zeros(0))
    reference_levels: dict[str, tuple[str, float]] = eqx.field(default_factory=dict)
    flow_stages: tuple = ()
    modified_crossings: np.ndarray = eqx.field(default_factory=lambda: np.zeros(0))

    def summary(self) -> dict[str, Any]:
        """The scalar results, JSON-ready."""
        return {
            "levels": [float(x) for x in self.levels],
            "flow_crossings": [float(x) for x in self.flow_crossings],
            "sgd_crossings": [float(x) for x in self.sgd_crossings],
            "modified_crossings": [float(x) for x in self.modified_crossings],
            "max_crossing_rel_error": float(np.nanmax(self.crossing_rel_error))
            if np.isfinite(self.crossing_rel_error).any()
            else math.nan,
            "drop_end": self.drop_end,
            "mean_abs_gap_after": self.mean_abs_gap_after,
            "time_avg_abs_gap_after": self.time_avg_abs_gap_after,
            "max_abs_gap_after": self.max_abs_gap_after,
            "final_param_distance": float(self.param_distance[-1]),
            "exact": self.exact,
            "stage_time_diffs": dict(self.stage_time_diffs),
            "drops": [
                {
                    "level": float(lv),
                    "flow_crossing": float(a),
                    "sgd_crossing": float(b),
                    "rel_error": float(e),
                }
                for lv, a, b, e in zip(
                    self.drop_levels,
                    self.drop_flow_crossings,
                    self.drop_sgd_crossings,
                    self.drop_rel_error,
                    strict=True,
                )
            ],
            "max_drop_rel_error": float(np.max(self.drop_rel_error))
            if len(self.drop_rel_error)
            else math.nan,
        }

    def figure(self, title: str | None = None):
        """Both losses (top) against the problem's reference levels and the
        levels whose crossings are compared (marked where the flow crosses
        them), and the gaps (bottom), on a log time axis with the flow's
        stages shaded; legends beside the panels."""
        from ..plot._base import pyplot, shade_stages

        fig, (ax, bx) = pyplot().subplots(
            2,
            1,
            figsize=(10, 6.5),
            sharex=True,
            height_ratios=(2, 1),
            layout="constrained",
        )
        pos = self.ts > 0
        for a in (ax, bx):
            shade_stages(a, self.flow_stages, labels=a is ax, alpha=0.15)
        ax.plot(self.ts[pos], self.flow_loss[pos], "k-", lw=2, label=self.labels[0])
        ax.plot(self.ts[pos], self.sgd_loss[pos], "C1--", lw=1.5, label=self.labels[1])
        styles = (":", "--", "-.", (0, (1, 3)))
        for j, (name, value) in enumerate(self.reference_levels.values()):
            ax.axhline(value, color="tab:red", ls=styles[j % len(styles)], lw=1,
                       label=f"{name} = {value:.4f}")  # fmt: skip
        for j, (lv, tc) in enumerate(
            zip(self.levels, self.flow_crossings, strict=True)
        ):
            ax.axhline(lv, color="0.7", lw=0.7, zorder=0,
                       label="compared levels (| flow crossing)" if j == 0 else None)  # fmt: skip
            ax.annotate(f"{self.fractions[j]:g}", (1.0, lv), xycoords=("axes fraction", "data"),
                        fontsize=6, color="0.4", va="center", ha="left")  # fmt: skip
            if np.isfinite(tc):
                ax.plot(tc, lv, "k|", ms=10)
        for j, (lv, tf, ts_) in enumerate(
            zip(self.drop_levels, self.drop_flow_crossings, self.drop_sgd_crossings,
                strict=True)
        ):  # fmt: skip
            for t, color, face in ((tf, "k", "k"), (ts_, "C1", "none")):
                if np.isfinite(t):
                    ax.plot(t, lv, "v", ms=5, color=color, mfc=face,
                            label=("half way down each drop (flow: filled, SGD: "
                                   "open)" if j == 0 and color == "k" else None))  # fmt: skip
        ax.set_xscale("log")
        ax.set_ylabel("population loss")
        ax.legend(loc="upper left", bbox_to_anchor=(1.03, 1.0), fontsize=7,
                  frameon=False)  # fmt: skip
        if title:
            ax.set_title(title, fontsize=9)
        bx.plot(self.ts[pos], np.abs(self.loss_gap[pos]), "C0-", label="|loss gap|")
        bx.plot(
            self.ts[pos],
            self.param_distance[pos],
            "C2-",
            label="relative parameter distance",
        )
        if math.isfinite(self.drop_end):
            bx.axvline(
                self.drop_end, color="0.6", ls=":", label="end of first drop (flow)"
            )
        bx.set_yscale("log")
        bx.set_xlabel("time t = lr x step")
        bx.set_ylabel("distance")
        bx.legend(loc="upper left", bbox_to_anchor=(1.03, 1.0), fontsize=7,
                  frameon=False)  # fmt: skip
        return fig

    def save_figure(
        self,
        path,
        title: str | None = None,
        formats: tuple[str, ...] = ("png", "pdf"),
    ) -> list[Path]:
        """Writes the figure as `path` with the suffixes of `formats` (by
        default `.png` and `.pdf`)."""
        from ..plot._base import save_figure

        return save_figure(self.figure(title), Path(path).with_suffix(""), formats)


def _leaves(params) -> list[np.ndarray]:
    """Every parameter array, flattened behind the leading time axis."""
    return [np.asarray(v).reshape(np.shape(v)[0], -1) for v in jax.tree.leaves(params)]


def modified_flow(traj: Trajectory, lr: float) -> Trajectory:
    """The order-1 modified flow of GD at `lr` ([`gradflow.modified_loss`][])
    from `traj`'s start, saved at `traj.ts`, solved as `traj` was: its
    solver (a name of `gradflow.SOLVERS`, with its recorded options),
    tolerances, `max_steps` and dtype, so that the two flows' crossings
    differ by the learning rate's term and not by the solvers' errors. A
    solver that its settings cannot rebuild (a Diffrax instance of no name in
    `gradflow.SOLVERS`) gives way to the default one at the same tolerances."""
    from .._flow.flow import flow
    from .._flow.solving import SOLVERS
    from .._options import Run, SaveAt, Solver
    from .modified import modified_loss

    if traj.problem is None:
        raise ValueError("modified=True needs the flow's problem; traj.problem is None")
    start = jax.tree.map(lambda x: np.asarray(x)[0], traj.params)
    s = traj.settings
    method = SOLVERS.get(s.solver.lower())
    solver = Solver(
        None if method is None else method(**(s.solver_options or {})),
        rtol=s.rtol or None, atol=s.atol or None, max_steps=s.max_steps,
        dtype=s.dtype,
    )  # fmt: skip
    return flow(
        modified_loss(traj.problem, lr), params=start, t1=float(traj.ts[-1]),
        saveat=SaveAt(ts=np.asarray(traj.ts), stages=False), run=Run(progress=False),
        solver=solver,
    )  # fmt: skip


def _lr_of(run) -> float:
    lr = getattr(getattr(run, "settings", None), "lr", None)
    if lr is None:
        raise ValueError(
            "modified=True needs the run's learning rate (run.settings.lr); pass "
            f"the modified flow's trajectory as modified= instead, got {type(run).__name__}"
        )
    return float(lr)


def _ensembles(traj, run, sde, modified, fractions):
    """`compare` of an ensemble (`docs/sgd.md`, "Escape times")."""
    from .ensemble import compare_ensembles

    runs = list(run)
    if modified is True:
        modified = modified_flow(traj, _lr_of(runs[0]) if runs else 0.0)
    return compare_ensembles(
        traj, runs, sde, modified=modified or None, fractions=fractions
    )


def _modified_crossings(traj, run, modified, levels) -> np.ndarray:
    """The modified flow's crossings of `levels` (`nan` without one)."""
    if modified is True:
        modified = modified_flow(traj, _lr_of(run))
    if modified is False or modified is None:
        return np.full(len(levels), math.nan)
    mts, ml = np.asarray(modified.ts, float), np.asarray(modified.loss, float)
    return np.array([crossing_time(mts, ml, lv) for lv in levels])


def compare(
    traj: Trajectory,
    run,
    *,
    fractions: tuple[float, ...] = DEFAULT_LEVELS,
    labels: tuple[str, str] = ("flow", "SGD"),
    sde=None,
    modified: Any = False,
):
    r"""Distances between a flow and an SGD run on their shared time axis; or,
    given several runs, their crossing times against the stochastic modified
    equation's.

    **Arguments:**

    - `traj`: a [`gradflow.Trajectory`][]; `run`: a [`gradflow.SGDRun`][] (or
      anything with `ts`, `loss` and `params` of the same structure). Both
      should start from the same parameters; for exact comparisons integrate
      at the run's times: `gf.flow(run.problem, params=run.at(0),
      t1=run.t_final, saveat=gf.SaveAt(ts=run.ts))`.
    - `fractions`: levels of the first drop, as fractions in `(0, 1)` of the
      way from the initial loss to the level the drop reaches: the highest of
      the problem's reference levels below the start (the paper's model:
      $H(\pi)$), else where the flow enters its first plateau.
    - `labels`: legend names of the two curves.
    - `modified`: `True` to integrate the order-1 modified flow of GD at the
      run's `lr` ([`gradflow.modified_loss`][]) from the flow's start, or its
      [`gradflow.Trajectory`][]; its crossings are reported beside the flow's
      (`modified_crossings`).
    - `sde`: with `run` a sequence of SGD runs from one start (or a
      [`gradflow.Sweep`][]): a [`gradflow.sgd_sde`][] ensemble to compare
      them with (`docs/sgd.md`, "Escape times").

    **Returns:** a [`gradflow.Comparison`][]; `.summary()` for the numbers,
    `.save_figure(path)` for the overlay. With `run` a sequence of runs, a
    [`gradflow.EnsembleComparison`][]: each crossing time's mean and
    standard deviation over the SGD runs and over the SDE's members, side by
    side, the flow's and the modified flow's beside them; `.table()`,
    `.summary()`, `.save_figure(path)`.

    **Raises:** `ValueError` when the parameters differ in structure or
    shapes (another model, or another size), the time ranges do not overlap,
    or a fraction is outside `(0, 1)`.
    """
    if isinstance(run, (list, tuple)) or type(run).__name__ == "Sweep":
        return _ensembles(traj, run, sde, modified, fractions)
    if sde is not None:
        raise ValueError(
            "sde= compares an ensemble: give run as a sequence of SGD runs from one "
            f"start, got one {type(run).__name__}"
        )
    for name, obj in (("traj", traj), ("run", run)):
        for field in ("ts", "loss", "params"):
            if not hasattr(obj, field):
                raise TypeError(
                    f"{name} has no field {field!r}: got {type(obj).__name__}"
                )
    a, b = jax.tree.structure(traj.params), jax.tree.structure(run.params)
    shapes_a = [np.shape(x)[1:] for x in jax.tree.leaves(traj.params)]
    shapes_b = [np.shape(x)[1:] for x in jax.tree.leaves(run.params)]
    if a != b or shapes_a != shapes_b:
        raise ValueError(
            "the flow and the SGD run have parameters of different structures or "
            f"shapes (flow {a}, {shapes_a}; run {b}, {shapes_b}); compare runs of "
            "one model and size"
        )
    fractions = tuple(float(f) for f in fractions)
    bad = [f for f in fractions if not 0 < f < 1]
    if not fractions or bad:
        raise ValueError(f"fractions must lie in (0, 1), got {fractions}")
    ft, rt = np.asarray(traj.ts, float), np.asarray(run.ts, float)
    keep = (rt >= ft[0] - 1e-12) & (rt <= ft[-1] * (1 + 1e-12) + 1e-12)
    if keep.sum() < 2:
        raise ValueError(
            f"the flow (t in [{ft[0]:g}, {ft[-1]:g}]) and the run (t in "
            f"[{rt[0]:g}, {rt[-1]:g}]) share fewer than two save times"
        )
    ts = rt[keep]
    exact = ft.shape == rt.shape and np.allclose(ft, rt, rtol=1e-12, atol=1e-12)
    sgd_loss = np.asarray(run.loss, float)[keep]
    sgd_p = [x[keep] for x in _leaves(run.params)]
    if exact:
        flow_loss = np.asarray(traj.loss, float)
        flow_p = _leaves(traj.params)
    else:
        flow_loss = _interp(ts, ft, np.asarray(traj.loss, float))
        flow_p = [_interp(ts, ft, x) for x in _leaves(traj.params)]
    diff = sum(
        np.sum((a - b) ** 2, axis=-1) for a, b in zip(sgd_p, flow_p, strict=True)
    )
    norm = sum(np.sum(b**2, axis=-1) for b in flow_p)
    param_distance = np.sqrt(diff / np.maximum(norm, np.finfo(float).tiny))

    start = float(flow_loss[0])
    levels_ = loss_levels(traj.problem) if traj.problem is not None else {}
    target = first_drop_target(traj, levels_)
    levels = np.array([start - f * (start - target) for f in fractions])
    fc = np.array([crossing_time(ts, flow_loss, lv) for lv in levels])
    sc = np.array([crossing_time(ts, sgd_loss, lv) for lv in levels])
    with np.errstate(invalid="ignore", divide="ignore"):
        rel = np.abs(sc - fc) / fc
    rel = np.where(np.isfinite(fc) & ~np.isfinite(sc), np.inf, rel)
    # The drop is over when the flow reaches the deepest level; if it never
    # does within the run, there is no "after the drop".
    drop_end = float(fc[int(np.argmax(fractions))])
    after = ts >= drop_end if math.isfinite(drop_end) else np.zeros_like(ts, bool)
    gap = sgd_loss - flow_loss
    mean_after = float(np.mean(np.abs(gap[after]))) if after.any() else math.nan
    max_after = float(np.max(np.abs(gap[after]))) if after.any() else math.nan
    if after.sum() >= 2:
        ta, ga = ts[after], np.abs(gap[after])
        time_avg = float(
            np.sum(np.diff(ta) * (ga[1:] + ga[:-1]) / 2) / (ta[-1] - ta[0])
        )
    else:
        time_avg = mean_after

    bounds = drop_bounds(traj)
    drop_lv = np.array([0.5 * (a + b) for a, b in bounds])
    drop_fc = np.array([crossing_time(ts, flow_loss, lv) for lv in drop_lv])
    drop_sc = np.array([crossing_time(ts, sgd_loss, lv) for lv in drop_lv])
    with np.errstate(invalid="ignore", divide="ignore"):
        drop_rel = np.abs(drop_sc - drop_fc) / drop_fc
    drop_rel = np.where(np.isfinite(drop_fc) & ~np.isfinite(drop_sc), np.inf, drop_rel)

    mod_c = _modified_crossings(traj, run, modified, levels)
    flow_stages = _stage_times(getattr(traj, "stages", ()))
    sgd_stages = _stage_times(getattr(run, "stages", ()))
    stage_diffs = {
        k: sgd_stages[k] - flow_stages[k] for k in flow_stages if k in sgd_stages
    }
    return Comparison(
        ts=ts,
        flow_loss=flow_loss,
        sgd_loss=sgd_loss,
        loss_gap=gap,
        param_distance=param_distance,
        exact=bool(exact),
        fractions=fractions,
        levels=levels,
        flow_crossings=fc,
        sgd_crossings=sc,
        crossing_rel_error=rel,
        drop_end=drop_end,
        mean_abs_gap_after=mean_after,
        time_avg_abs_gap_after=time_avg,
        max_abs_gap_after=max_after,
        stage_time_diffs=stage_diffs,
        labels=labels,
        reference_levels=levels_,
        flow_stages=tuple(getattr(traj, "stages", ()) or ()),
        drop_levels=drop_lv.reshape(-1),
        drop_flow_crossings=drop_fc.reshape(-1),
        drop_sgd_crossings=drop_sc.reshape(-1),
        drop_rel_error=drop_rel.reshape(-1),
        modified_crossings=mod_c,
    )


__all__ = [
    "Comparison",
    "compare",
    "modified_flow",
    "drop_bounds",
]
