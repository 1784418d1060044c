"""The trajectory figures at a text vocabulary (d = 64): every legend and the
title inside the figure, no legend on another, tokens named by their words,
legends that summarise (the most frequent tokens and one entry for the rest).

The trajectory is built, not solved (a solve at d = 64 would cost a
compilation of the flow): a path of parameters growing out of the origin on
the built-in corpus's 64-token chain, its diagnostics computed by gradflow's
own observation code, and hand-written stage and event records of every kind
the figures draw (two cycles). About 10 s, most of it the observation's
compilation and matplotlib's drawing.
"""

import numpy as np
import pytest

import gradflow as gf
from gradflow import plot


D, M, T = 64, 4, 60


@pytest.fixture(scope="module")
def traj():
    chain = gf.chains.from_text(None, vocab_size=D, progress=False)
    ts = np.concatenate([[0.0], np.geomspace(0.1, 2000.0, T - 1)])
    rng = np.random.default_rng(0)
    start = [rng.normal(0, 1e-3, s) for s in ((M, D), (D, M), (M, M), (M, M))]
    end = [rng.normal(0, 1.0, s) for s in ((M, D), (D, M), (M, M), (M, M))]
    # each matrix grows from its start to its end along a logistic in log t
    grow = 1 / (1 + np.exp(-3 * (np.log(np.maximum(ts, 1e-3)) - np.log(80.0))))
    params = gf.Params(
        *(a[None] + grow[:, None, None] * (b - a)[None] for a, b in zip(start, end))
    )
    observed = gf.markov.observe_params(ts, params, chain)
    loss = observed.pop("loss")
    stages = [
        gf.Stage(name=name, cycle=cycle, t_start=a, t_end=b, loss_start=4.0,
                 loss_end=3.9, tokens=(0,), token_labels=(chain.label(0),))
        for name, cycle, a, b in (
            ("condensation", 1, 0.0, 40.0),
            ("plateau", 1, 40.0, 60.0),
            ("focus", 1, 60.0, 90.0),
            ("dilution", 1, 90.0, 120.0),
            ("plateau", 1, 120.0, 600.0),
            ("new_direction", 2, 150.0, 250.0),
            ("focus", 2, 600.0, 700.0),
            ("dilution", 2, 700.0, 900.0),
        )
    ]  # fmt: skip
    events = tuple(
        gf.EventRecord(name=f"{s.name}_start", t=s.t_start, loss=4.0)
        for s in stages
        if s.name in ("focus", "new_direction")
    )
    return gf.Trajectory(
        ts=ts,
        loss=np.asarray(loss),
        grad_norm=np.ones(T),
        params=params,
        problem=gf.problems.MarkovAttention(chain, width=M),
        settings=gf.FlowSettings(init_scale=1e-3, seed=0),
        stats=gf.FlowStats(),
        stages=tuple(sorted(stages, key=lambda s: s.t_start)),
        events=events,
        extras=observed,
    )


def _inside(fig):
    """Every legend and the title lie inside the figure, and no legend
    overlaps the title or another legend (in display pixels, after drawing)."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    box = fig.bbox
    legends = [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None]
    boxes = [lg.get_window_extent(renderer) for lg in legends]
    title = fig._suptitle.get_window_extent(renderer)  # pyright: ignore
    for b in [*boxes, title]:
        assert b.x0 >= box.x0 - 1 and b.x1 <= box.x1 + 1, (b, box)
        assert b.y0 >= box.y0 - 1 and b.y1 <= box.y1 + 1, (b, box)
    for i, b in enumerate(boxes):
        assert not b.overlaps(title)
        for c in boxes[i + 1 :]:
            assert not b.overlaps(c)
    return legends


def _legend_texts(legend):
    return [t.get_text() for t in legend.get_texts()]


def test_summary_at_d64(traj):
    fig = plot.summary_figure(traj, title="the built-in corpus, 64 words")
    legends = _inside(fig)
    assert len(legends) == 6
    mass = [lg for lg in legends if lg.get_title().get_text() == "key token"][0]
    texts = _legend_texts(mass)
    # the most frequent tokens by name, then one entry for the other 56
    top = plot.top_tokens(traj.problem.chain)
    assert len(texts) == plot.TOP_TOKENS + 1
    assert texts[0] == f"the other {D - plot.TOP_TOKENS} tokens"
    assert texts[1].startswith(
        plot.token_label(traj.problem.chain, int(top[0])) + " (π = "
    )
    assert "the built-in corpus, 64 words" in fig._suptitle.get_text()  # pyright: ignore
    # one legend entry per stage kind drawn, each in its own colour
    stage_names = set(_legend_texts(legends[0])) & {"plateau", "condensation"}
    assert stage_names == {"plateau", "condensation"}
    assert plot.STAGE_COLORS["plateau"] != plot.STAGE_COLORS["condensation"]
    plot.pyplot().close(fig)


def test_pca_at_d64(traj):
    fig = plot.pca_figure(traj)
    legends = _inside(fig)
    assert len(legends) == 1
    texts = _legend_texts(legends[0])
    assert len([t for t in texts if "(π = " in t]) == plot.TOP_TOKENS
    assert f"the other {D - plot.TOP_TOKENS} tokens" in texts
    plot.pyplot().close(fig)


def test_attention_at_d64_names_tokens_and_stage_times(traj):
    fig = plot.attention_figure(traj)
    _inside(fig)
    panels = [ax for ax in fig.axes if ax.get_images()]
    # the focus and new-direction starts of both cycles, their ends, the final
    titles = [ax.get_title() for ax in panels]
    assert any("focus start (cycle 1)" in t for t in titles)
    assert any("focus start (cycle 2)" in t for t in titles)
    focus2 = next(s for s in traj.stages if s.name == "focus" and s.cycle == 2)
    assert any(f"t = {focus2.t_start:.4g} (A at save" in t for t in titles)
    top = plot.top_tokens(traj.problem.chain, plot.TOP_ATTENTION)
    xticks = [t.get_text() for t in panels[0].get_xticklabels()]
    assert xticks[:3] == [plot.token_label(traj.problem.chain, int(k)) for k in top[:3]]
    assert xticks[-1] == f"other {D - plot.TOP_ATTENTION}"
    plot.pyplot().close(fig)


def test_compare_figure_at_d64(traj):
    # an "SGD run": the same path, its loss shifted (only the figure is read)
    run = gf.SGDRun(
        ts=traj.ts,
        steps=np.arange(len(traj)),
        population_loss=traj.loss + 0.01,
        grad_norm=traj.grad_norm,
        train_loss=traj.loss,
        params=traj.params,
        problem=traj.problem,
        settings=gf.SGDSettings(),
        stats=gf.SGDStats(),
    )
    cmp = gf.compare(traj, run)
    fig = cmp.figure(title="the built-in corpus, 64 words")
    legends = [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None]
    fig.canvas.draw()
    for lg in legends:
        b = lg.get_window_extent(fig.canvas.get_renderer())
        assert b.x1 <= fig.bbox.x1 + 1 and b.y0 >= fig.bbox.y0 - 1
    texts = _legend_texts(legends[0])
    assert any(t.startswith("$H(\\pi)$ = ") for t in texts)
    assert "plateau" in texts and "focus" in texts
    plot.pyplot().close(fig)


def test_save_figure_keeps_the_log_ticks_inside_the_view(tmp_path):
    # matplotlib's LogLocator places ticks up to a decade beyond the view,
    # never drawn; save_figure leaves them out (docs/performance.md, "Issue
    # 42, sixth pass") and keeps every tick inside
    fig, ax = plot.pyplot().subplots(layout="constrained")
    ax.plot([0.05, 5000.0], [4e-3, 5.0])
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(0.05, 5000.0)
    axes = (ax.xaxis, ax.yaxis)
    before = [np.asarray(a.get_ticklocs(minor=m)) for a in axes for m in (0, 1)]
    plot.save_figure(fig, tmp_path / "log", ("png",))
    after = [np.asarray(a.get_ticklocs(minor=m)) for a in axes for m in (0, 1)]
    views = [a.get_view_interval() for a in axes for _ in (0, 1)]
    for old, new, (lo, hi) in zip(before, after, views, strict=True):
        inside = (old >= lo * (1 - 1e-9)) & (old <= hi * (1 + 1e-9))
        np.testing.assert_array_equal(new, old[inside])
        assert new.size < old.size
