"""What every figure of gradflow shares: matplotlib loaded on demand (the
`Agg` backend unless the user chose one), the colour of each stage kind,
shaded stage intervals, legends beside their panels, and writing a figure as
PNG (and PDF)."""

import functools
import os
from pathlib import Path

import numpy as np

from .._result.trajectory import Trajectory


# One colour per stage kind, told apart at a glance (plateaus blue, not the
# grey of condensation).
STAGE_COLORS = {
    "condensation": "#8d8d8d",
    "focus": "#ff9f1c",
    "dilution": "#2ec4b6",
    "new_direction": "#7b2cbf",
    "plateau": "#4d96ff",
    "drop": "#e63946",
    "rank": "#6a994e",
}
"""One colour per stage kind ([`shade_stages`][gradflow.plot.shade_stages])."""


def pyplot():
    """`matplotlib.pyplot`, imported on first use (with the `Agg` backend
    unless `MPLBACKEND` is set): importing gradflow does not import it."""
    import matplotlib

    if os.environ.get("MPLBACKEND") is None:
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def check_trajectory(traj) -> Trajectory:
    """`traj`, or a `TypeError` naming what it is instead."""
    if not isinstance(traj, Trajectory):
        raise TypeError(f"expected a gradflow.Trajectory, got {type(traj).__name__}")
    return traj


def positive_time(traj) -> np.ndarray:
    """Index of the save times > 0 (a log axis cannot show t = 0)."""
    return np.flatnonzero(np.asarray(traj.ts) > 0)


def stage_label(stage) -> str:
    """A stage's name as a figure writes it (`new direction`)."""
    return stage.name.replace("_", " ")


@functools.cache
def _in_view_locator():
    from matplotlib.ticker import Locator

    class InView(Locator):
        """Another locator's ticks (`inner`, on a log axis), less those
        outside the view."""

        def __init__(self, inner):
            self.inner = inner

        def set_axis(self, axis):
            super().set_axis(axis)
            self.inner.set_axis(axis)

        def __call__(self):
            if self.axis is None:
                return self.inner()
            return self.tick_values(*self.axis.get_view_interval())

        def tick_values(self, vmin, vmax):
            ticks = np.asarray(self.inner.tick_values(vmin, vmax))
            lo, hi = sorted((vmin, vmax))
            if not (lo > 0 and np.isfinite(hi)) or ticks.size == 0:
                return ticks
            lo, hi = np.log10(lo), np.log10(hi)
            # a superset of what an axis draws (the ticks within 1e-10 of
            # the view's width, in log space)
            pad = 1e-6 * max(hi - lo, 1.0)
            with np.errstate(divide="ignore", invalid="ignore"):
                at = np.log10(ticks)
            return ticks[(at >= lo - pad) & (at <= hi + pad)]

    return InView


def _log_ticks_in_view(fig) -> None:
    """Leaves out of each log axis of `fig` with matplotlib's own locators
    the ticks outside its view: `LogLocator` places up to a decade more on
    each side, whose tick objects are made and updated at every layout and
    draw and never drawn (9 of 55 on the default run's time axis,
    docs/performance.md, "Issue 42, sixth pass"). The same ticks drawn."""
    in_view = _in_view_locator()
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            if axis.get_scale() != "log":
                continue
            # shared axes share their locators: each is wrapped once
            major, minor = axis.get_major_locator(), axis.get_minor_locator()
            if axis.isDefault_majloc and not isinstance(major, in_view):
                axis.set_major_locator(in_view(major))
            if axis.isDefault_minloc and not isinstance(minor, in_view):
                axis.set_minor_locator(in_view(minor))


def legend_beside(ax, **kwargs) -> None:
    """A legend to the right of `ax`, off its curves (the constrained layout
    keeps it inside the figure)."""
    kwargs.setdefault("fontsize", 7)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False, **kwargs)


def shade_stages(
    ax,
    stages,
    *,
    labels: bool = False,
    alpha: float = 0.18,
    colors: dict[str, str] | None = None,
) -> None:
    """Shades each stage's time interval on `ax` in its colour (`colors`, by
    default [`STAGE_COLORS`][gradflow.plot.STAGE_COLORS]; a stage kind
    missing from a given `colors` is not shaded), one legend entry per stage
    kind with `labels`."""
    palette = STAGE_COLORS if colors is None else colors
    seen = set()
    for s in stages:
        t0, t1 = s.t_start, s.t_end
        if not (np.isfinite(t0) and np.isfinite(t1)):
            continue
        if colors is not None and s.name not in colors:
            continue
        label = None
        if labels and s.name not in seen:
            label = stage_label(s)
            seen.add(s.name)
        ax.axvspan(max(t0, 1e-300), t1, color=palette.get(s.name, "#cccccc"),
                   alpha=alpha, lw=0, label=label)  # fmt: skip


def _save_laid_out(fig, path, *, dpi: float, **kwargs) -> None:
    """`fig.savefig(path, dpi=dpi, ...)` of a figure with a layout engine,
    the layout run once by hand at that dpi: `savefig` would run it inside a
    whole draw with the output turned off (every tick, label and legend
    measured and updated) before the draw that renders. The same pixels, 12 %
    fewer Python calls for the paper's three figures (docs/performance.md,
    "Everyday speed")."""
    import matplotlib

    engine = fig.get_layout_engine()
    old_dpi = fig.get_dpi()
    fig.set_dpi(dpi)
    try:
        engine.execute(fig)
        # no engine at all (savefig draws once); `None` gives one from the
        # rcParams unless both are off
        with matplotlib.rc_context(
            {"figure.autolayout": False, "figure.constrained_layout.use": False}
        ):
            fig.set_layout_engine(None)
        fig.savefig(path, dpi=dpi, bbox_inches=None, **kwargs)
    finally:
        fig.set_layout_engine(engine)
        fig.set_dpi(old_dpi)


def save_figure(
    fig, stem: str | os.PathLike, formats: tuple[str, ...] = ("png", "pdf")
) -> list[Path]:
    """Saves `fig` as `stem.png` (150 dpi) and `stem.pdf` (or the `formats`
    given), closes it, and returns the paths."""
    stem = Path(stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    # A figure with a layout engine (the constrained layout) already fits its
    # page, legends beside the panels included: it is saved as laid out. The
    # tight box would measure every artist once more after the layout (a
    # quarter of the paper's three figures' saving, taken under load;
    # docs/performance.md, "Everyday speed"). One laid out by `tight_layout`
    # or not at all is cropped to what it draws.
    laid_out = fig.get_layout_engine() is not None
    _log_ticks_in_view(fig)
    tight = None if laid_out else "tight"
    paths = []
    for ext in formats:
        path = stem.with_suffix(f".{ext}")
        if ext == "png":
            # zlib level 3, not Pillow's 6: the same pixels, written in half
            # the time, the file a fifth larger
            png = {"dpi": 150, "pil_kwargs": {"compress_level": 3}}
            if laid_out:
                _save_laid_out(fig, path, **png)
            else:
                fig.savefig(path, bbox_inches=tight, **png)
        else:
            fig.savefig(path, bbox_inches=tight)
        paths.append(path)
    pyplot().close(fig)
    return paths


__all__ = [
    "STAGE_COLORS",
    "check_trajectory",
    "legend_beside",
    "positive_time",
    "pyplot",
    "save_figure",
    "shade_stages",
    "stage_label",
]
