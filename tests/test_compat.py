"""Files written by gradflow 0.1.0 (made with that version's code, kept in
tests/data) load with today's readers: trajectories (of the paper's model and
of a variant), sweeps and SGD runs, each with its problem (a
`gf.problems.MarkovAttention`), parameters, stages, events and members, their
values checked against the file's own arrays and metadata and against the
reprs that gradflow 0.1.0 printed for them; checkpoints of the old loop layout
are refused with a message that says why."""

import json
from pathlib import Path

import jax
import numpy as np
import pytest

import gradflow as gf


DATA = Path(__file__).parent / "data"
# What gradflow 0.1.0 printed for each file (`repr(gf.load(path))`).
REPRS = {
    "trajectory_v0.1.0": (
        "Trajectory(d=3, m=2, 7 saves, t in [0, 60], loss 1.09862 -> 1.0391, ok)"
    ),
    "trajectory_variant_v0.1.0": (
        "Trajectory(d=4, m=3, 25 saves, t in [0, 300], loss 1.39774 -> 1.24078, ok)"
    ),
    # Since issue 33 a sweep counts its problems (the generic sweep names no
    # chain), and an SGD run's settings hold no source or context (the
    # problem's own: `run.problem.context`).
    "sweep_v0.1.0": (
        "Sweep(2 members: 1 problems (d=4, m=3), 2 ok, 0 failed, 24 save times up "
        "to t = 300)"
    ),
    "sgd_v0.1.0": (
        "SGDRun(d=4, m=3, batch=16, lr=0.5, N=None, 11 saves, t in [0, 20], "
        "population loss 1.38638 -> 1.38578, ok)"
    ),
}


def _raw(name: str) -> tuple[dict, dict]:
    """The file's metadata and arrays, read with NumPy alone."""
    with np.load(DATA / f"{name}.npz", allow_pickle=False) as npz:
        arrays = {k: npz[k] for k in npz.files}
    return json.loads(str(arrays.pop("__gradflow__"))), arrays


def _same_record(record, raw: dict):
    """A typed record read from a file holds the file's dict, field by field
    (lists read back as tuples; fields the file lacks keep their defaults)."""
    for key, value in raw.items():
        got = getattr(record, key)
        assert (list(got) if isinstance(got, tuple) else got) == value, key


def _as_written(record, raw: dict, problem=None, renamed=None, dropped=()):
    """Typed settings or stats read from an old file hold what the file wrote:
    each key is the record's field of that name (or its new name, `renamed`),
    or, for the settings that are now the problem's own (`width`, `model`,
    `save_attention`, `context`), the loaded problem's (`save_attention` as
    it takes effect: the file wrote the flag in force); `dropped` lists the
    keys today's records no longer keep."""
    fields = record.to_dict()
    renamed = renamed or {}
    for key, value in raw.items():
        if key in dropped:
            assert not hasattr(record, key), key
            continue
        name = renamed.get(key, key)
        if name in fields:
            got = fields[name]
        else:
            got = getattr(problem, key)
            if key == "model":
                got = got.as_dict()
            elif key == "save_attention":  # None in the file's problem: the default
                got = problem.saves_attention
        assert got == value, key


def _same_records(records, raws):
    assert len(records) == len(raws)
    for record, raw in zip(records, raws, strict=True):
        _same_record(record, raw)


def _same_params(params, arrays: dict, prefix: str = ""):
    """The loaded parameters are the file's arrays `params_<name>`, bit for bit."""
    for path, leaf in jax.tree_util.tree_flatten_with_path(params)[0]:
        name = jax.tree_util.keystr(path).lstrip(".")
        np.testing.assert_array_equal(leaf, arrays[f"{prefix}params_{name}"])


def _loss_is_the_population_loss(result, saves=(0, -1)):
    """The saved loss is the population loss of the loaded parameters on the
    loaded chain (public function and the problem's own loss)."""
    for i in saves:
        point = result.at(i)
        assert float(gf.population_loss(point, result.problem.chain)) == pytest.approx(
            result.loss[i], rel=0, abs=1e-12
        )
        assert float(result.problem.loss(point)) == pytest.approx(
            result.loss[i], rel=0, abs=1e-12
        )


def test_old_trajectory_loads():
    traj = gf.load(DATA / "trajectory_v0.1.0.npz")
    assert traj.ok and traj.problem.chain.d == 3 and traj.params.m == 2
    np.testing.assert_allclose(traj.ts, np.linspace(0, 60, 7))
    assert [e.name for e in traj.events] == ["saddle_escape", "saddle_entry"]
    assert all(isinstance(e, gf.EventRecord) for e in traj.events)
    assert traj.events[0].t == pytest.approx(14.902321512619775, rel=1e-15)
    assert len(traj.stages) == 1
    assert repr(traj) == REPRS["trajectory_v0.1.0"]


def test_old_variant_trajectory_loads():
    meta, arrays = _raw("trajectory_variant_v0.1.0")
    traj = gf.load(DATA / "trajectory_variant_v0.1.0.npz")
    assert isinstance(traj, gf.Trajectory)
    assert repr(traj) == REPRS["trajectory_variant_v0.1.0"]
    # the problem: the paper's model variant on the file's chain
    problem = traj.problem
    assert isinstance(problem, gf.problems.MarkovAttention)
    model = gf.Model(heads=2, norm="layer")
    assert problem.model == model and problem.width == 3
    assert problem.model.as_dict() == meta["settings"]["model"]
    np.testing.assert_array_equal(traj.problem.chain.P, arrays["P"])
    np.testing.assert_array_equal(traj.problem.chain.pi, arrays["pi"])
    # the parameters: a variant's, with a leading time axis, bit for bit
    assert isinstance(traj.params, gf.VariantParams) and traj.params.model == model
    assert traj.params.WV is None
    assert traj.params.WQ.shape == (25, 1, 2, 3, 3)
    assert traj.params.gain.shape == traj.params.bias.shape == (25, 3)
    _same_params(traj.params, arrays)
    assert isinstance(traj.at(0), gf.VariantParams) and traj.at(0).W0.shape == (3, 4)
    np.testing.assert_array_equal(traj.ts, arrays["ts"])
    np.testing.assert_array_equal(traj.loss, arrays["loss"])
    np.testing.assert_array_equal(traj.grad_norm, arrays["grad_norm"])
    _loss_is_the_population_loss(traj)
    # settings, stats, records and extras as written
    _as_written(traj.settings, meta["settings"], traj.problem)
    _as_written(traj.stats, meta["stats"])
    assert traj.ok and traj.message == ""
    assert all(isinstance(s, gf.Stage) for s in traj.stages)
    _same_records(traj.stages, meta["stages"])
    assert [s.name for s in traj.stages] == ["condensation"]
    assert not traj.stages[0].complete and traj.stages[0].t_end == 300.0
    assert all(isinstance(e, gf.EventRecord) for e in traj.events)
    _same_records(traj.events, meta["events"])
    assert [e.name for e in traj.events] == ["saddle_escape", "saddle_entry"]
    assert traj.events[1].t == 2.7273885934710806 and traj.events[1].located
    assert sorted(traj.extras) == sorted(meta["extras"])
    for k, v in traj.extras.items():
        np.testing.assert_array_equal(v, arrays[f"extra_{k}"], err_msg=k)
    assert traj.extras["attention"].shape == (25, 4, 4)


def test_old_sweep_loads():
    meta, arrays = _raw("sweep_v0.1.0")
    sw = gf.load(DATA / "sweep_v0.1.0.npz")
    assert isinstance(sw, gf.Sweep)
    assert repr(sw) == REPRS["sweep_v0.1.0"]
    typed = gf.load_sweep(DATA / "sweep_v0.1.0.npz")
    assert repr(typed) == repr(sw) and typed.members == sw.members
    np.testing.assert_array_equal(typed.loss, sw.loss)
    # members: the file's `chain` index is today's `problem`
    assert len(sw) == 2
    assert sw.members == (
        gf.Member(index=0, problem=0, init_scale=0.01, seed=0, start=None),
        gf.Member(index=1, problem=0, init_scale=0.01, seed=1, start=None),
    )
    assert [m.problem for m in sw.members] == [m["chain"] for m in meta["members"]]
    assert sw.labels == {}
    _as_written(
        sw.settings,
        meta["settings"],
        sw.problems[0],
        renamed={"num_chains": "num_problems"},
    )
    _as_written(sw.stats, meta["stats"])
    # the problems: the paper's model on the file's chain
    assert len(sw.problems) == 1
    assert isinstance(sw.problems[0], gf.problems.MarkovAttention)
    assert sw.problems[0].width == 3 and sw.problems[0].model == gf.Model()
    np.testing.assert_array_equal(sw.problems[0].chain.P, arrays["P"][0])
    ts = sw.ts
    np.testing.assert_array_equal(ts, arrays["ts"])
    np.testing.assert_array_equal(sw.loss, arrays["loss"])
    assert sw.ok.all() and sw.messages == ("", "")
    for i, traj in enumerate(sw):
        prefix = f"m{i}/"
        assert traj.problem is sw.problems[sw.members[i].problem]
        np.testing.assert_array_equal(traj.problem.chain.P, arrays["P"][0])
        np.testing.assert_array_equal(traj.problem.chain.pi, arrays["pi"][0])
        np.testing.assert_array_equal(traj.ts, ts)
        np.testing.assert_array_equal(traj.loss, arrays[prefix + "loss"])
        np.testing.assert_array_equal(traj.loss, sw.loss[i])
        np.testing.assert_array_equal(traj.grad_norm, arrays[prefix + "grad_norm"])
        _same_params(traj.params, arrays, prefix)
        _loss_is_the_population_loss(traj)
        written = meta["trajectories"][i]
        _as_written(traj.settings, written["settings"], traj.problem)
        assert traj.settings.seed == i
        _as_written(traj.stats, written["stats"])
        _same_records(traj.stages, written["stages"])
        _same_records(traj.events, written["events"])
        assert [s.name for s in traj.stages] == ["condensation", "plateau", "focus"]
        assert traj.stages[-1].tokens == (0,)
        for k in written["extras"]:
            np.testing.assert_array_equal(
                traj.extras[k], arrays[f"{prefix}extra_{k}"], err_msg=k
            )
    # the stage table: the file's chain index in the `problem` column (the
    # `chain` column of gradflow 0.1.0, renamed in issue 33)
    table = sw.table()
    assert "problem" in table and len(table) == 6
    assert list(table.member) == [0, 0, 0, 1, 1, 1] and (table.problem == 0).all()
    assert list(table.stage) == ["condensation", "plateau", "focus"] * 2


def test_old_sgd_run_loads():
    meta, arrays = _raw("sgd_v0.1.0")
    run = gf.load_sgd(DATA / "sgd_v0.1.0.npz")
    assert isinstance(run, gf.SGDRun)
    assert repr(run) == REPRS["sgd_v0.1.0"]
    any_ = gf.load(DATA / "sgd_v0.1.0.npz")
    assert isinstance(any_, gf.SGDRun) and repr(any_) == repr(run)
    np.testing.assert_array_equal(any_.population_loss, run.population_loss)
    # settings and stats as written, and the problem they describe
    _as_written(run.settings, meta["settings"], run.problem, dropped=("source",))
    _as_written(run.stats, meta["stats"])
    s = run.settings
    assert (s.optimizer, s.lr, s.batch_size) == ("sgd", 0.5, 16)
    assert meta["settings"]["source"] == "chain"  # the problem's chain below
    problem = run.problem
    assert isinstance(problem, gf.problems.MarkovAttention)
    assert problem.width == meta["settings"]["width"] == 3
    assert problem.context == meta["settings"]["context"] == 16
    assert problem.model == gf.Model() and problem.text is None
    np.testing.assert_array_equal(run.problem.chain.P, arrays["P"])
    np.testing.assert_array_equal(run.problem.chain.pi, arrays["pi"])
    # the saved arrays, on the flow's time axis t = lr * step
    for name in ("ts", "steps", "population_loss", "grad_norm", "train_loss"):
        np.testing.assert_array_equal(getattr(run, name), arrays[name], err_msg=name)
    np.testing.assert_array_equal(run.loss, run.population_loss)
    np.testing.assert_array_equal(run.steps, np.arange(0, 41, 4))
    np.testing.assert_allclose(run.ts, s.lr * run.steps, rtol=0, atol=0)
    assert run.stats.num_steps == run.steps[-1] == 40
    assert isinstance(run.params, gf.Params)
    _same_params(run.params, arrays)
    _loss_is_the_population_loss(run)
    assert run.ok and run.message == "" and run.events == ()
    _same_records(run.stages, meta["stages"])
    assert [st.name for st in run.stages] == ["condensation"]
    for k in meta["extras"]:
        np.testing.assert_array_equal(run.extras[k], arrays[f"extra_{k}"], err_msg=k)


def test_typed_loaders_refuse_the_other_kinds():
    with pytest.raises(ValueError, match="not a 'gradflow-sweep' file"):
        gf.load_sweep(DATA / "trajectory_variant_v0.1.0.npz")
    with pytest.raises(ValueError, match="not a 'gradflow-sgd' file"):
        gf.load_sgd(DATA / "sweep_v0.1.0.npz")


def test_old_checkpoint_is_refused_naming_the_layout(tmp_path):
    """A checkpoint of gradflow 0.1.0's loop (another layout of the state) for
    the same call: its save times and initial parameters are recognised, and
    it is refused for its layout, before anything is solved. (Since issue 33
    the problem's arrays are named by field, `chain.P`, so those of an old
    checkpoint, and its settings that are now the problem's, differ too.)"""
    chain = gf.chains.sticky(3, 0.5, 0.5, 0.05)
    ck = tmp_path / "old.npz"
    ck.write_bytes((DATA / "checkpoint_v0.1.0.npz").read_bytes())
    with pytest.raises(
        ValueError,
        match='checkpoint_layout = "\\(unset\\)" there, "loop-state-5" here',
    ) as info:
        gf.integrate(
            chain,
            1e-2,
            width=2,
            t1=60.0,
            saveat=gf.SaveAt(np.linspace(0, 60, 7)),
            run=gf.Run(progress=False, checkpoint=ck),
        )
    message = str(info.value)
    assert message.startswith(f"checkpoint '{ck}' was made by a different call: ")
    assert "\n" not in message
    assert "save times" not in message and "initial parameters" not in message
    assert ck.read_bytes() == (DATA / "checkpoint_v0.1.0.npz").read_bytes()
