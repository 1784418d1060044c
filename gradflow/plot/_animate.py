"""A run as a film: [`animate`][gradflow.plot.animate] writes an MP4
(imageio-ffmpeg, which ships its own ffmpeg) or a GIF (Pillow).

Each frame shows the loss curve on a log-time axis with the stages shaded
and a marker at the frame's time, and beneath it the problem's views at that
time ([`views`][gradflow.plot.views]: for the paper's model the attention
map and the embeddings on their principal directions), titled with the time
and the stages under way. Frames are paced by stage
([`frame_times`][gradflow.plot.frame_times]), the state between saves
interpolated; the last frame is held for a second.
"""

import os
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from .._core.files import atomic_write
from .._problem.functions import describe
from .._result.base import AbstractResult
from .._result.labelled import INSTALL
from .._sweep.result import Sweep
from ._base import shade_stages
from ._timeline import first_positive, frame_times, interpolate, stage_caption
from ._views import Bars, Heatmap, Scatter, View, views


FORMATS = (".mp4", ".gif")
# The film's size in pixels: multiples of 16, as H.264's macro blocks want.
SIZE = (1024, 720)
_DPI = 100


def check_result(result, what: str = "animate", name: str = "result") -> AbstractResult:
    """`result` (the argument `name` of `what`), checked to be one run with
    at least two saves."""
    if isinstance(result, Sweep):
        raise TypeError(
            f"{what} takes one run (a Trajectory or SGDRun), got a Sweep: "
            f"{what} one member, sw[i]"
        )
    if not isinstance(result, AbstractResult):
        raise TypeError(
            f"{what} takes a gradflow Trajectory or SGDRun, got {type(result).__name__}"
        )
    if len(result) < 2:
        raise ValueError(
            f"{name} must be a run with at least 2 saves for {what}, got one with "
            f"{len(result)} (save more times: gf.SaveAt(ts), --num-saves)"
        )
    return result


def check_output(path, suffixes: tuple[str, ...], name: str = "path") -> Path:
    """`path`, checked to end in one of `suffixes` and to be writable (its
    folder made if missing), before anything is computed."""
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(
            f"{name} must be a str or os.PathLike, got {type(path).__name__}"
        )
    path = Path(path)
    if path.suffix.lower() not in suffixes:
        raise ValueError(f"{name} must end in {' or '.join(suffixes)}, got '{path}'")
    if path.is_dir():
        raise ValueError(f"{name}: '{path}' is a directory, not a file")
    above = next((p for p in path.parents if p.exists()), None)
    if above is not None and not above.is_dir():
        raise ValueError(
            f"{name}: '{path}' cannot be written ('{above}' is a file, not a "
            "folder); give a path in a folder you can write to"
        )
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path.parent):
            pass
    except OSError as e:
        raise ValueError(
            f"{name}: '{path}' cannot be written ({e.strerror or e}); give a path "
            "in a folder you can write to"
        ) from None
    return path


def encoder(path: Path, name: str = "path"):
    """The encoder module of `path`'s format (imageio-ffmpeg for an MP4,
    Pillow for a GIF), or a one-line `ModuleNotFoundError` naming `name`
    and saying how to install it."""
    if path.suffix.lower() == ".gif":
        try:
            import PIL.Image
        except ImportError:
            raise ModuleNotFoundError(
                f"{name}: '{path}': writing a GIF needs Pillow: pip install pillow"
            ) from None
        return PIL.Image
    try:
        import imageio_ffmpeg
    except ImportError:
        raise ModuleNotFoundError(
            f"{name}: '{path}': writing an MP4 needs imageio-ffmpeg: {INSTALL} "
            "(or write a .gif, with Pillow)"
        ) from None
    return imageio_ffmpeg


def animate(
    result,
    path: str | os.PathLike,
    *,
    frames: int = 150,
    fps: int = 15,
    panels: int = 2,
    title: str | None = None,
) -> Path:
    """Writes a film of a run: its loss curve with the stages shaded and a
    moving marker, and beneath it what the run looks like at that time.

    For the paper's model: the attention map and the token embeddings on
    their principal directions (with `panels=4` also the attention mass per
    key token and the singular values of $W_0$); for a deep linear network
    its mode strengths and the product in the modes' bases; for a committee
    machine $R$ and $Q$; for another problem its observables. The title
    gives the time and the stages under way (name and cycle). Frames are
    paced by stage, not uniformly in time
    ([`frame_times`][gradflow.plot.frame_times]: each stage gets screen time,
    however short); the state between two saves is interpolated linearly
    ([`interpolate`][gradflow.plot.interpolate]). What is drawn beside the
    loss is the problem's [`views`][gradflow.plot.views].

    **Arguments:**

    - `result`: a [`gradflow.Trajectory`][] or [`gradflow.SGDRun`][] (a
      sweep's member `sw[i]`), with at least 2 saves.
    - `path`: the file, ending in `.mp4` (H.264, needs imageio-ffmpeg:
      `pip install "gradflow[analysis]"`) or `.gif` (Pillow).
    - `frames`: frames of the run (the last is then held for a second);
      `fps`: frames per second; `panels`: views beside the loss, at most;
      `title`: a title (default: the problem and the run's settings).

    **Returns:** the path written.

    **Raises:** `TypeError` for a sweep or anything not a run; `ValueError`
    for a run with fewer than 2 saves, a `path` of another suffix or one
    that cannot be written; `ModuleNotFoundError` when the MP4 encoder is
    missing. All before any frame is drawn.

    **Example:**

    ```python
    from gradflow import plot

    traj = gf.integrate(gf.chains.sticky(6, 0.5, 0.5, 0.05), 1e-3, width=8, t1=5000)
    plot.animate(traj, "run.mp4")  # or "run.gif"
    ```
    """
    result = check_result(result)
    for name, value, low in (
        ("frames", frames, 2),
        ("fps", fps, 1),
        ("panels", panels, 0),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    path = check_output(path, FORMATS)
    writer = encoder(path)
    times = frame_times(result, frames)
    shown = views(result.problem, result, times)[:panels] if panels else []
    film = _Film(result, times, shown, title or _default_title(result))
    images = _frames(film, len(times), hold=fps)  # the end held for a second
    try:
        if path.suffix.lower() == ".mp4":
            # frames go to ffmpeg as they are drawn: it encodes on another core
            _write_mp4(writer, path, images, fps)
        else:
            _write_gif(path, list(images), fps)  # one palette from all frames
    finally:
        film.close()
    return path


def _frames(film, n: int, hold: int):
    image = None
    for i in range(n):
        image = film.draw(i)
        yield image
    for _ in range(hold):
        yield image


def run_kind(result) -> str:
    """`"SGD"` for an SGD run, else `"gradient flow"`."""
    return (
        "SGD" if getattr(result.settings, "lr", None) is not None else "gradient flow"
    )


def _default_title(result) -> str:
    s = result.settings
    parts = [f"{k} {getattr(s, k)}" for k in ("init_scale", "seed")
             if getattr(s, k, None) is not None]  # fmt: skip
    what = f"{run_kind(result)} of {describe(result.problem)}"
    return what + (f" ({', '.join(parts)})" if parts else "")


def _write_mp4(encoder, path: Path, images, fps: int) -> None:
    """H.264 by the ffmpeg that imageio-ffmpeg ships, fed raw frames on its
    standard input. (Started without a `preexec_fn`, unlike imageio-ffmpeg's
    own writer: a fork hook would then run in this multithreaded, JAX-using
    process, and JAX warns against forking it.)"""
    w, h = SIZE
    tmp = path.with_name(f".{path.stem}.tmp{path.suffix}")
    command = [
        encoder.get_ffmpeg_exe(), "-y", "-loglevel", "error",
        "-f", "rawvideo", "-pix_fmt", "rgba", "-s", f"{w}x{h}", "-r", str(fps),
        "-i", "-", "-an", "-c:v", "libx264", "-pix_fmt", "yuv420p", "-crf", "23",
        "-movflags", "+faststart", "-f", "mp4", str(tmp),
    ]  # fmt: skip
    try:
        with subprocess.Popen(
            command, stdin=subprocess.PIPE, stderr=subprocess.PIPE
        ) as p:
            assert p.stdin is not None
            for image in images:
                p.stdin.write(np.ascontiguousarray(image).data)
            _, err = p.communicate()
        if p.returncode != 0:
            raise RuntimeError(
                f"ffmpeg could not write '{path}': {err.decode(errors='replace').strip()}"
            )
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def _write_gif(path: Path, images, fps: int) -> None:
    from PIL import Image

    # one palette for the whole film (the first frame's adaptive palette
    # would miss colours that come later): from a strip of frames
    picks = images[:: max(1, len(images) // 8)]
    strip = Image.fromarray(np.concatenate(picks, axis=0)).convert("RGB")
    palette = strip.quantize(colors=255, method=Image.Quantize.MEDIANCUT)
    # the held last frame is one array, given `fps` times: indexed once
    indexed = {}
    for im in images:
        if id(im) not in indexed:
            indexed[id(im)] = (
                Image.fromarray(im)
                .convert("RGB")
                .quantize(palette=palette, dither=Image.Dither.NONE)
            )
    frames = [indexed[id(im)] for im in images]
    atomic_write(path, lambda f: frames[0].save(
        f, format="GIF", save_all=True, append_images=frames[1:],
        duration=round(1000 / fps), loop=0,
    ))  # fmt: skip


class _Film:
    """The figure of the film: drawn once, then per frame only what moves.

    The first frame is drawn whole (its constrained layout found and kept);
    what moves (`animated`: the marker, the title, each view's image, points
    or bars, and what lies above them) is left out of that drawing, which is
    kept as the background. Each later frame restores the background and
    draws only the moving artists onto it (matplotlib's blitting): a frame
    costs a few artists instead of every axis, tick and label (0.25 s a
    frame before, taken under load; docs/performance.md, "Films").
    """

    def __init__(self, result, times, shown: list[View], title: str):
        # a figure of its own on the Agg canvas: no pyplot, no GUI backend
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure

        self.result, self.times, self.shown = result, times, shown
        self.fig = Figure(figsize=(SIZE[0] / _DPI, SIZE[1] / _DPI), dpi=_DPI,
                          layout="constrained")  # fmt: skip
        grid = self.fig.add_gridspec(2, max(1, len(shown)), height_ratios=[1, 1.7])
        FigureCanvasAgg(self.fig)
        self.fig.suptitle(title, fontsize=10)
        self._loss_panel(self.fig.add_subplot(grid[0, :]))
        self.updates = []
        for j, view in enumerate(shown):
            update, moving = _draw_view(self.fig.add_subplot(grid[1, j]), view)
            self.updates.append(update)
            self.animated += moving
        self.background = None

    def _loss_panel(self, ax) -> None:
        r = self.result
        ts, loss = np.asarray(r.ts, dtype=float), np.asarray(r.loss, dtype=float)
        keep = ts > 0
        shade_stages(ax, r.stages, labels=True)
        ax.plot(ts[keep], loss[keep], color="black", lw=1.3, label="loss")
        ax.set_xscale("log")
        ax.set_xlim(first_positive(ts), ts[-1])
        ax.set_xlabel("time t (log scale; frames paced by stage)", fontsize=8)
        ax.set_ylabel("population loss", fontsize=8)
        ax.tick_params(labelsize=7)
        # (inside the panel, where a falling loss leaves room: a legend beside
        # it would widen the right margin of the views' column too)
        legend = ax.legend(fontsize=7, loc="upper right", ncol=2, framealpha=0.85)
        marked = interpolate(ts, loss, self.times)
        self.marked = marked
        self.cursor = ax.axvline(self.times[0], color="#d62728", lw=1.0)
        (self.dot,) = ax.plot([self.times[0]], [marked[0]], "o", color="#d62728", ms=6)
        self.heading = ax.set_title("", fontsize=11, fontweight="bold", loc="left")
        # the legend lies above the moving marker: the cursor stops below it,
        # and the legend is drawn again over the dot (`_under_legend`)
        self.legend = legend
        self.legend_box = None
        self.animated = [self.cursor, self.dot, self.heading]

    def draw(self, i: int) -> np.ndarray:
        t = float(self.times[i])
        self.cursor.set_xdata([t, t])
        self.dot.set_data([t], [self.marked[i]])
        self.heading.set_text(f"t = {t:.4g}   {stage_caption(self.result.stages, t)}")
        for update in self.updates:
            update(i)
        canvas = self.fig.canvas
        if self.background is None:
            for artist in self.animated:
                artist.set_animated(True)
            canvas.draw()
            # the layout is found on the first frame and kept (the constrained
            # layout of every frame would cost most of the drawing, and move
            # the panels by a pixel as the titles change)
            self.fig.set_layout_engine("none")
            self.background = canvas.copy_from_bbox(self.fig.bbox)  # pyright: ignore[reportAttributeAccessIssue]
        else:
            canvas.restore_region(self.background)  # pyright: ignore[reportAttributeAccessIssue]
        legend = self._under_legend()
        for artist in self.animated:
            self.fig.draw_artist(artist)
        if legend:
            self.fig.draw_artist(self.legend)
        # RGBA as drawn (one contiguous copy; dropping alpha here was a strided
        # copy costing as much as a third of the drawing): the encoders take it
        return np.asarray(canvas.buffer_rgba()).copy()  # pyright: ignore[reportAttributeAccessIssue]

    def _under_legend(self) -> bool:
        """Whether the legend must be drawn again over the marker. Where the
        cursor passes under the legend, it stops one pixel below it (the
        background holds the legend: the frame looks as if the legend were
        drawn over the line, but for the line's faint trace through the
        legend's translucent frame); only the dot within reach of the legend
        has the legend drawn again, which costs as much as all the other text
        of a frame (its layout is found anew each time)."""
        self.cursor.set_ydata([0, 1])
        if self.legend_box is None:  # where the first frame's layout put it
            self.legend_box = self.legend.get_window_extent()
        box = self.legend_box
        x = self.cursor.get_window_extent().x0
        if not box.x0 - 8 <= x <= box.x1 + 8:  # the marker's radius off it
            return False
        if self.dot.get_window_extent().y1 >= box.y0 - 8:
            return True
        axes = self.cursor.axes.transAxes.inverted()
        # one pixel below the legend's frame: the line's cap stays off it
        self.cursor.set_ydata([0, axes.transform((x, box.y0 - 1))[1]])
        return False

    def close(self) -> None:
        self.fig.clear()


def _ticks(ax, rows, cols) -> None:
    if len(cols) <= 17:
        ax.set_xticks(range(len(cols)), cols, rotation=90, fontsize=7)
    if len(rows) <= 17:
        ax.set_yticks(range(len(rows)), rows, fontsize=7)


def _draw_view(ax, view: View):
    """Draws `view` at its first frame on `ax`; returns `update(i)` and the
    artists that move (with those drawn above them), in drawing order."""
    ax.set_title(view.title, fontsize=9)
    ax.tick_params(labelsize=7)
    if isinstance(view, Heatmap):
        return _draw_heatmap(ax, view)
    if isinstance(view, Scatter):
        return _draw_scatter(ax, view)
    if isinstance(view, Bars):
        return _draw_bars(ax, view)
    raise TypeError(f"unknown view {type(view).__name__}")  # pragma: no cover


def _draw_heatmap(ax, view: Heatmap):
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import LogNorm, Normalize

    hi = view.vmax if view.vmax > view.vmin else view.vmin + 1.0
    norm = LogNorm(view.vmin, hi) if view.log else Normalize(view.vmin, hi)
    colors = ScalarMappable(norm, view.cmap)
    # every frame's colours at once (a few entries each): the image then only
    # scales them up, instead of colour-mapping its pixels every frame
    rgba = colors.cmap(norm(view.values), bytes=True)
    image = ax.imshow(rgba[0], aspect="auto", interpolation="nearest")
    ax.figure.colorbar(colors, ax=ax, fraction=0.05, pad=0.02).ax.tick_params(
        labelsize=7
    )
    _ticks(ax, view.rows, view.cols)
    ax.set_xlabel(view.xlabel, fontsize=8)
    ax.set_ylabel(view.ylabel, fontsize=8)
    # the frame of the axes lies above the image
    return lambda i: image.set_data(rgba[i]), [image, *ax.spines.values()]


def _draw_scatter(ax, view: Scatter):
    trail = 12  # frames of each point's recent path
    pts = view.points
    lines = [ax.plot(pts[:1, k, 0], pts[:1, k, 1], color=view.colors[k], lw=0.8,
                     alpha=0.6)[0] for k in range(pts.shape[1])]  # fmt: skip
    dots = ax.scatter(pts[0, :, 0], pts[0, :, 1], c=view.colors, s=28, zorder=3)
    names = {k: ax.text(*pts[0, k], f" {view.labels[k]}", fontsize=7, zorder=4)
             for k in view.named}  # fmt: skip
    ax.plot([0], [0], "+", color="black", ms=8)
    ax.set_xlim(-view.limit, view.limit)
    ax.set_ylim(-view.limit, view.limit)
    ax.set_aspect("equal")
    ax.set_xlabel(view.xlabel, fontsize=8)
    ax.set_ylabel(view.ylabel, fontsize=8)
    caption = ax.text(0.02, 0.02, view.captions[0], transform=ax.transAxes, fontsize=7)

    def update(i: int) -> None:
        lo = max(0, i - trail)
        for k, line in enumerate(lines):
            line.set_data(pts[lo : i + 1, k, 0], pts[lo : i + 1, k, 1])
        dots.set_offsets(pts[i])
        for k, text in names.items():
            text.set_position(tuple(pts[i, k]))
        caption.set_text(view.captions[i])

    return update, [*lines, dots, *names.values(), caption]


def _draw_bars(ax, view: Bars):
    n = view.values.shape[1]
    if view.log:
        ax.set_yscale("log")
    bars = ax.bar(range(n), view.values[0], color=view.colors)
    ax.set_ylim(*view.ylim)
    reference = []  # the dashed line lies above the bars
    if view.reference is not None:
        reference.append(ax.axhline(view.reference, color="black", lw=0.8, ls="--"))
    if n <= 17:
        ax.set_xticks(range(n), view.labels, rotation=90, fontsize=7)
    ax.set_ylabel(view.ylabel, fontsize=8)

    def update(i: int) -> None:
        for bar, h in zip(bars, view.values[i], strict=True):
            bar.set_height(h)

    return update, [*bars, *reference]


__all__ = ["FORMATS", "animate", "check_output", "check_result", "encoder", "run_kind"]
