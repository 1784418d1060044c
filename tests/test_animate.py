"""Animations (`gradflow.plot.animate`): frames paced by stage (every stage
on screen), the state between saves interpolated, an MP4 and a GIF of the
paper's model and GIFs of the other problems (deep linear, committee,
in-context regression) and of an SGD run, and the one-line errors (a sweep,
fewer than 2 saves, a bad or unwritable path, a missing encoder)."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import gradflow as gf
from gradflow import plot


PIL = pytest.importorskip("PIL.Image", reason="Pillow writes the GIFs")
sys.path.insert(0, str(Path(__file__).parent))
import analysis_data as data  # noqa: E402


EMPTY_SWEEP = gf.Sweep(
    trajectories=(), members=(), problems=(), labels={}, ts=np.zeros(1),
    loss=np.zeros((0, 1)), settings=gf.SweepSettings(), stats=gf.SweepStats(),
)  # fmt: skip


@pytest.fixture(scope="module")
def traj():
    return data.markov_run()


def test_frames_give_every_stage_screen_time(traj):
    times = plot.frame_times(traj, 150)
    assert times.shape == (150,) and np.all(np.diff(times) > 0)
    assert times[0] == traj.ts[traj.ts > 0][0] and times[-1] == traj.ts[-1]
    uniform = np.geomspace(times[0], times[-1], 150)  # uniform in log t
    for stage in traj.stages:
        inside = lambda ts: np.sum((ts >= stage.t_start) & (ts <= stage.t_end))  # noqa: B023, E731
        assert inside(times) >= 3, stage
    # the first focus lasts 0.2 of a decade among 11: it gets more frames
    # than uniform log time would give it
    focus = next(s for s in traj.stages if s.name == "focus")
    count = lambda ts: np.sum((ts >= focus.t_start) & (ts <= focus.t_end))  # noqa: E731
    assert count(times) >= 3 * count(uniform)
    # every stage is named (with its cycle) in some frame's title
    captions = " | ".join(plot.stage_caption(traj.stages, t) for t in times)
    names = {f"{s.name.replace('_', ' ')} (cycle {s.cycle})" for s in traj.stages}
    assert {"focus (cycle 1)", "new direction (cycle 2)"} <= names
    for name in names:
        assert name in captions, name


def test_interpolation_between_saves():
    ts = np.array([0.0, 1.0, 3.0])
    values = {"a": np.array([[0.0, 1.0], [2.0, 3.0], [6.0, 7.0]])}
    got = plot.interpolate(ts, values, np.array([0.0, 0.5, 2.0, 3.0, 9.0]))
    np.testing.assert_allclose(
        got["a"],
        [[0, 1], [1, 2], [4, 5], [6, 7], [6, 7]],  # clipped past the end
    )


def _mp4_frames(path: Path) -> int:
    import imageio_ffmpeg

    out = subprocess.run(
        [imageio_ffmpeg.get_ffmpeg_exe(), "-i", str(path), "-map", "0:v:0", "-c",
         "copy", "-f", "null", "-"], capture_output=True, text=True, check=True,
    )  # fmt: skip
    return int(out.stderr.rsplit("frame=", 1)[1].split()[0])


def test_mp4_and_gif_of_the_paper_model(traj, tmp_path):
    pytest.importorskip(
        "imageio_ffmpeg", reason="the [analysis] extra is not installed"
    )
    mp4 = plot.animate(traj, tmp_path / "run.mp4", frames=40, fps=10)
    assert mp4.read_bytes()[4:8] == b"ftyp"
    assert _mp4_frames(mp4) == 40 + 10  # the last frame held for a second
    gif = plot.animate(traj, tmp_path / "run.gif", frames=30, fps=10, panels=4)
    with PIL.open(gif) as image:
        assert image.size == (1024, 720)
        assert image.n_frames >= 30  # (the held frames merge into one)
        image.seek(10)
        first = np.asarray(image.convert("RGB"))
        image.seek(20)
        assert not np.array_equal(first, np.asarray(image.convert("RGB")))


@pytest.mark.parametrize(
    ("make", "title"),
    [(data.deep_linear_run, "mode strengths"), (data.committee_run, "R: "),
     (data.in_context_run, "eigen-components"), (data.sgd_run, "attention A")],
    ids=["deep_linear", "committee", "in_context", "sgd"],
)  # fmt: skip
def test_other_problems_animate_their_observables(make, title, tmp_path):
    result = make()
    times = plot.frame_times(result, 5)
    shown = plot.views(result.problem, result, times)
    assert title in shown[0].title
    for view in shown:  # one value of each view per frame
        values = getattr(view, "values", getattr(view, "points", None))
        assert values is not None and values.shape[0] == len(times)
    gif = plot.animate(result, tmp_path / "run.gif", frames=8, fps=4)
    with PIL.open(gif) as image:
        assert image.n_frames >= 8


def test_views_follow_the_saved_observables():
    """At the save times themselves the views are the saved values: the
    committee's R and the in-context eigen-components."""
    cm = data.committee_run()
    at = cm.ts[[10, 60, 119]]
    R = plot.views(cm.problem, cm, at)[0]
    np.testing.assert_allclose(R.values, cm.extras["R"][[10, 60, 119]], rtol=1e-12)
    icr = data.in_context_run()
    at = icr.ts[[5, 50, 119]]
    modes = plot.views(icr.problem, icr, at)[0]
    np.testing.assert_allclose(
        modes.values, icr.extras["modes"][[5, 50, 119]], rtol=1e-12
    )


def test_errors_are_one_line_and_come_first(traj, tmp_path, monkeypatch):
    with pytest.raises(TypeError, match="got a Sweep: animate one member, sw\\[i\\]"):
        plot.animate(EMPTY_SWEEP, tmp_path / "x.gif")
    with pytest.raises(TypeError, match="got dict"):
        plot.animate({}, tmp_path / "x.gif")
    with pytest.raises(ValueError, match="result must be a run with at least 2 saves"):
        plot.animate(data.cut(traj, [0]), tmp_path / "x.gif")
    with pytest.raises(
        ValueError, match="path must end in .mp4 or .gif, got '.*x.avi'"
    ):
        plot.animate(traj, tmp_path / "x.avi")
    (tmp_path / "file").write_text("")
    with pytest.raises(ValueError, match="path: '.*file/x.gif' cannot be written"):
        plot.animate(traj, tmp_path / "file" / "x.gif")
    with pytest.raises(ValueError, match="frames must be an integer >= 2, got 1"):
        plot.animate(traj, tmp_path / "x.gif", frames=1)
    monkeypatch.setitem(sys.modules, "imageio_ffmpeg", None)
    with pytest.raises(
        ModuleNotFoundError, match="writing an MP4 needs imageio-ffmpeg"
    ):
        plot.animate(traj, tmp_path / "x.mp4")
    assert not list(tmp_path.glob("x.*"))
