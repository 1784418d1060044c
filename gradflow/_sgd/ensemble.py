r"""`gradflow.compare` of ensembles: the crossing times of several SGD runs
from one start against those of the stochastic modified equation
([`gradflow.sgd_sde`][]), with the plain flow's and the modified flow's
beside them (`docs/sgd.md`, "Escape times")."""

import math
from pathlib import Path
from typing import Any

import equinox as eqx
import numpy as np

from .._problem.functions import loss_levels
from .crossings import crossing_time, first_drop_target


def _crossings(members, levels) -> np.ndarray:
    """`(members, levels)`: each member's first time at each level."""
    return np.array(
        [
            [crossing_time(np.asarray(m.ts, float), np.asarray(m.loss, float), lv)
             for lv in levels]
            for m in members
        ]
    ).reshape(len(members), len(levels))  # fmt: skip


def _stats(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and sample standard deviation over members (`nan` where a member
    never crossed, or with fewer than two members)."""
    n = x.shape[0]
    mean = np.mean(x, axis=0) if n else np.full(x.shape[1:], math.nan)
    std = np.std(x, axis=0, ddof=1) if n > 1 else np.full(x.shape[1:], math.nan)
    return mean, std


class EnsembleComparison(eqx.Module):
    r"""Crossing times of an SGD ensemble and of the stochastic modified
    equation, with the flow's (and the modified flow's) beside them.

    **Fields:**

    - `fractions`, `levels`: the first drop's levels, as in
      [`gradflow.Comparison`][].
    - `flow_crossings`: the plain flow's; `modified_crossings`: the order-1
      modified flow's at the runs' learning rate (`nan` if not given).
    - `sgd_crossings`, `sde_crossings`: `(members, levels)`.
    - `sgd_mean`, `sgd_std`, `sde_mean`, `sde_std`: over members (sample
      standard deviations).
    - `z`: $(\bar t_\text{SGD} - \bar t_\text{SDE}) / \sqrt{s^2_\text{SGD}/n +
      s^2_\text{SDE}/n'}$, the gap in combined standard errors;
      `spread_ratio`: $s_\text{SDE} / s_\text{SGD}$.
    - `explained_sde`, `explained_modified`: the fraction of the SGD–flow gap
      $\bar t_\text{SGD} - t_\text{flow}$ that the SDE's mean and the
      modified flow reproduce.
    - `ts`, `flow_loss`, `modified_loss`, `sgd_loss`, `sde_loss`: the curves of
      the figure (on their own save times; `sgd_ts`, `sde_ts`).
    """

    fractions: tuple[float, ...]
    levels: np.ndarray
    flow_crossings: np.ndarray
    modified_crossings: np.ndarray
    sgd_crossings: np.ndarray
    sde_crossings: np.ndarray
    sgd_mean: np.ndarray
    sgd_std: np.ndarray
    sde_mean: np.ndarray
    sde_std: np.ndarray
    z: np.ndarray
    spread_ratio: np.ndarray
    explained_sde: np.ndarray
    explained_modified: np.ndarray
    ts: np.ndarray
    flow_loss: np.ndarray
    modified_loss: np.ndarray | None
    sgd_ts: np.ndarray
    sgd_loss: np.ndarray
    sde_ts: np.ndarray
    sde_loss: np.ndarray
    reference_levels: dict[str, tuple[str, float]] = eqx.field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        """The numbers, JSON-ready: one entry per level."""
        rows = []
        for j, f in enumerate(self.fractions):
            rows.append(
                {
                    "fraction": f,
                    "level": float(self.levels[j]),
                    "flow": float(self.flow_crossings[j]),
                    "modified_flow": float(self.modified_crossings[j]),
                    "sgd_mean": float(self.sgd_mean[j]),
                    "sgd_std": float(self.sgd_std[j]),
                    "sde_mean": float(self.sde_mean[j]),
                    "sde_std": float(self.sde_std[j]),
                    "z": float(self.z[j]),
                    "spread_ratio": float(self.spread_ratio[j]),
                    "explained_sde": float(self.explained_sde[j]),
                    "explained_modified": float(self.explained_modified[j]),
                }
            )
        return {
            "sgd_members": int(self.sgd_crossings.shape[0]),
            "sde_members": int(self.sde_crossings.shape[0]),
            "levels": rows,
        }

    def table(self) -> str:
        """The crossing times as a Markdown table, one row per level."""
        head = (
            "| level (fraction of the first drop) | flow | modified flow | SGD "
            "mean ± std | SDE mean ± std | gap / combined s.e. | std ratio SDE/SGD "
            "| SGD–flow gap explained: SDE, modified flow |\n"
            "| --- | --- | --- | --- | --- | --- | --- | --- |"
        )
        lines = [head]
        for r in self.summary()["levels"]:
            lines.append(
                f"| {r['level']:.4f} ({r['fraction']:g}) | {r['flow']:.2f} | "
                f"{r['modified_flow']:.2f} | {r['sgd_mean']:.2f} ± {r['sgd_std']:.2f} "
                f"| {r['sde_mean']:.2f} ± {r['sde_std']:.2f} | {r['z']:.2f} | "
                f"{r['spread_ratio']:.2f} | {100 * r['explained_sde']:.0f} %, "
                f"{100 * r['explained_modified']:.0f} % |"
            )
        return "\n".join(lines)

    def figure(self, title: str | None = None):
        """The SDE's band (10 %–90 % of its members at each time, and its
        median; none without members) around the flow, the SGD runs on top
        (drawn over the flows), the modified flow dashed, over the window of
        the first drop; the crossing times below as points with their means
        and standard deviations."""
        from ..plot._base import pyplot

        fig, (ax, bx) = pyplot().subplots(
            2, 1, figsize=(10, 6.5), height_ratios=(2, 1), layout="constrained"
        )
        if len(self.sde_loss):  # (no band without SDE members: --seeds alone)
            lo, mid, hi = np.nanquantile(self.sde_loss, (0.1, 0.5, 0.9), axis=0)
            ax.fill_between(self.sde_ts, lo, hi, color="C0", alpha=0.3, lw=0,
                            label="SDE, 10 %-90 % of members")  # fmt: skip
            ax.plot(self.sde_ts, mid, "C0-", lw=1, label="SDE, median")
        spos = np.ones(self.sgd_ts.shape, bool)
        for i, loss in enumerate(self.sgd_loss):
            ax.plot(self.sgd_ts[spos], loss[spos], "C1-", lw=0.6, alpha=0.8, zorder=3,
                    label="SGD runs" if i == 0 else None)  # fmt: skip
        fpos = np.ones(self.ts.shape, bool)
        ax.plot(self.ts[fpos], self.flow_loss[fpos], "k-", lw=2, label="flow")
        if self.modified_loss is not None:
            ax.plot(self.ts[fpos], self.modified_loss[fpos], "k--", lw=1.5,
                    label="modified flow (order 1)")  # fmt: skip
        for j, lv in enumerate(self.levels):
            ax.axhline(lv, color="0.7", lw=0.7, zorder=0,
                       label="compared levels" if j == 0 else None)  # fmt: skip
        # the window of the drop: time runs linearly there
        every = np.concatenate([self.sgd_crossings.ravel(), self.sde_crossings.ravel(),
                                self.flow_crossings])  # fmt: skip
        every = every[np.isfinite(every)]
        if every.size:
            lo_t, hi_t = float(every.min()), float(every.max())
            pad = 0.5 * (hi_t - lo_t) + 1e-12
            ax.set_xlim(max(lo_t - pad, 0.0), hi_t + pad)
        ax.set_xlabel("time t = lr x step")
        ax.set_ylabel("population loss")
        ax.legend(
            loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize=7, frameon=False
        )
        if title:
            ax.set_title(title, fontsize=9)
        y = np.arange(len(self.levels))
        for k, (x, color, name) in enumerate(
            ((self.sgd_crossings, "C1", "SGD"), (self.sde_crossings, "C0", "SDE"))
        ):
            off = 0.15 * (1 - 2 * k)
            for row in x:
                bx.plot(row, y + off, "o", color=color, ms=3, alpha=0.6)
            mean, std = _stats(x)
            bx.errorbar(mean, y + off, xerr=std, fmt="s", color=color, ms=6,
                        capsize=3, label=f"{name}: members, mean ± std")  # fmt: skip
        bx.plot(self.flow_crossings, y, "k|", ms=14, mew=2, label="flow")
        bx.plot(self.modified_crossings, y, "kx", ms=8, label="modified flow")
        bx.set_yticks(y, [f"{f:g}" for f in self.fractions])
        bx.set_ylabel("fraction of the first drop")
        bx.set_xlabel("crossing time t = lr x step")
        bx.legend(
            loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize=7, frameon=False
        )
        return fig

    def save_figure(
        self, path, title: str | None = None, formats: tuple[str, ...] = ("png", "pdf")
    ) -> list[Path]:
        """Writes the figure as `path` with the suffixes of `formats`."""
        from ..plot._base import save_figure

        return save_figure(self.figure(title), Path(path).with_suffix(""), formats)


def compare_ensembles(
    traj, runs, sde, *, modified=None, fractions
) -> EnsembleComparison:
    """The [`EnsembleComparison`][gradflow.EnsembleComparison] of `gf.compare(traj,
    runs, sde=..., modified=...)` (see there)."""
    runs = list(runs)
    members = list(sde) if sde is not None else []
    if not runs:
        raise ValueError("runs must hold at least one SGD run, got none")
    for name, group in (("runs", runs), ("sde", members)):
        for m in group:
            if not (hasattr(m, "ts") and hasattr(m, "loss")):
                raise TypeError(
                    f"each member of {name} needs ts and loss, got {type(m).__name__}"
                )
    fractions = tuple(float(f) for f in fractions)
    if not fractions or any(not 0 < f < 1 for f in fractions):
        raise ValueError(f"fractions must lie in (0, 1), got {fractions}")
    ts, flow_loss = np.asarray(traj.ts, float), np.asarray(traj.loss, float)
    start = float(flow_loss[0])
    ref = loss_levels(traj.problem) if traj.problem is not None else {}
    target = first_drop_target(traj, ref)
    levels = np.array([start - f * (start - target) for f in fractions])
    flow_c = np.array([crossing_time(ts, flow_loss, lv) for lv in levels])
    if modified is not None:
        mod_loss = np.asarray(modified.loss, float)
        mod_c = np.array(
            [
                crossing_time(np.asarray(modified.ts, float), mod_loss, lv)
                for lv in levels
            ]
        )
        mod_loss = np.interp(ts, np.asarray(modified.ts, float), mod_loss)
    else:
        mod_loss, mod_c = None, np.full(len(levels), math.nan)
    sgd_c, sde_c = _crossings(runs, levels), _crossings(members, levels)
    sgd_mean, sgd_std = _stats(sgd_c)
    sde_mean, sde_std = _stats(sde_c)
    with np.errstate(invalid="ignore", divide="ignore"):
        se = np.sqrt(sgd_std**2 / len(runs) + sde_std**2 / max(len(members), 1))
        z = (sgd_mean - sde_mean) / se
        gap = sgd_mean - flow_c
        explained_sde = (sde_mean - flow_c) / gap
        explained_mod = (mod_c - flow_c) / gap
        ratio = sde_std / sgd_std
    sgd_ts = np.asarray(runs[0].ts, float)
    sde_ts = np.asarray(members[0].ts, float) if members else ts

    def stack(group, grid):
        return np.array([np.interp(grid, np.asarray(m.ts, float),
                                   np.asarray(m.loss, float)) for m in group])  # fmt: skip

    return EnsembleComparison(
        fractions=fractions,
        levels=levels,
        flow_crossings=flow_c,
        modified_crossings=mod_c,
        sgd_crossings=sgd_c,
        sde_crossings=sde_c,
        sgd_mean=sgd_mean,
        sgd_std=sgd_std,
        sde_mean=sde_mean,
        sde_std=sde_std,
        z=z,
        spread_ratio=ratio,
        explained_sde=explained_sde,
        explained_modified=explained_mod,
        ts=ts,
        flow_loss=flow_loss,
        modified_loss=mod_loss,
        sgd_ts=sgd_ts,
        sgd_loss=stack(runs, sgd_ts),
        sde_ts=sde_ts,
        sde_loss=stack(members, sde_ts) if members else np.zeros((0, len(sde_ts))),
        reference_levels=ref,
    )


__all__ = ["EnsembleComparison", "compare_ensembles"]
