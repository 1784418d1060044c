"""Results as labelled arrays and tables: `to_xarray` of a trajectory, an SGD
run and a sweep (named dimensions, the members on their swept axes, a member
dimension where save times differ), the netCDF round trip equal to the `.npz`
file (also of what `--netcdf` writes), `stages_frame`/`events_frame`, and the
errors of the netCDF reader."""

import json
import sys
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradflow as gf


xr = pytest.importorskip("xarray", reason="the [analysis] extra is not installed")
pytest.importorskip("h5netcdf", reason="the [analysis] extra is not installed")
sys.path.insert(0, str(Path(__file__).parent))
import analysis_data as data  # noqa: E402
from analysis_data import assert_same_result, assert_same_sweep  # noqa: E402
from test_saves import deep_linear  # noqa: E402


@pytest.fixture(scope="module")
def traj():
    return data.markov_run()


@pytest.fixture(scope="module")
def sw():
    return data.sweep16()


def test_trajectory_dataset_names_its_dimensions(traj):
    ds = traj.to_xarray()
    T, d, m = len(traj), data.D, data.WIDTH
    np.testing.assert_array_equal(ds.t, traj.ts)
    np.testing.assert_array_equal(ds.loss, traj.loss)
    np.testing.assert_array_equal(ds.grad_norm, traj.grad_norm)
    assert ds.W0.dims == ("t", "width", "token") and ds.W0.shape == (T, m, d)
    assert ds.W1.dims == ("t", "token", "width")
    assert ds.WQ.dims == ("t", "query", "width")
    assert ds.WK.dims == ("t", "key", "width")
    np.testing.assert_array_equal(ds.W0, traj.params.W0)
    assert ds.attention.dims == ("t", "query_token", "key_token")
    np.testing.assert_array_equal(ds.attention, traj.extras["attention"])
    assert ds.att_mass.dims == ("t", "key_token")
    assert ds.sv_W0.dims == ("t", "sv") and list(ds.sv.values) == [1, 2, 3]
    assert ds.sv_ratio.dims == ("t", "sv_ratio_k")
    assert ds.P.dims == ("token", "next_token")
    # every observable is a variable
    for key in traj.extras:
        assert key in ds, key
    # the attributes: what was run, by which gradflow
    assert ds.attrs["gradflow_version"] == gf.__version__
    assert ds.attrs["problem"] == gf.problems.describe(traj.problem)
    assert json.loads(ds.attrs["settings"]) == traj.settings.to_dict()
    assert ds.attrs["init_scale"] == 1e-3 and ds.attrs["problem_width"] == m
    assert ds.attrs["result"] == "successful"
    # selection by time: the nearest save
    assert float(ds.loss.sel(t=1000.0, method="nearest")) in traj.loss


def test_token_labels_of_a_text_are_coordinates(traj):
    P = np.asarray(traj.problem.chain.P)
    labelled = gf.MarkovChain(P, tokens=["the", "cat", " ", "\n"])
    problem = gf.problems.MarkovAttention(labelled, width=data.WIDTH)
    ds = eqx.tree_at(lambda t: t.problem, traj, problem).to_xarray()
    assert list(ds.token_label.values) == ["the", "cat", " ", "\n"]
    assert ds.attention.sel(query_token=1, key_token=0).dims == ("t",)
    assert list(ds.key_token_label.values) == ["the", "cat", " ", "\n"]


def test_netcdf_round_trip_of_a_trajectory(traj, tmp_path):
    traj.save(tmp_path / "traj.npz")
    traj.to_xarray().to_netcdf(tmp_path / "traj.nc")
    from_npz, from_nc = gf.load(tmp_path / "traj.npz"), gf.load(tmp_path / "traj.nc")
    assert_same_result(from_npz, from_nc)
    # xarray reads it as the same Dataset
    back = xr.open_dataset(tmp_path / "traj.nc")
    xr.testing.assert_identical(back.load(), traj.to_xarray())
    back.close()


def test_save_to_a_netcdf_name_writes_netcdf(traj, sw, tmp_path):
    # `save("x.nc")` writes the netCDF file that `gradflow.load` reads by its
    # suffix (it used to write a .npz archive under that name, which no
    # reader then took)
    traj.save(tmp_path / "t.nc")
    xr.testing.assert_identical(xr.load_dataset(tmp_path / "t.nc"), traj.to_xarray())
    assert_same_result(traj, gf.load(tmp_path / "t.nc"))
    sw.save(tmp_path / "s.nc")
    assert_same_sweep(sw, gf.load_sweep(tmp_path / "s.nc"))
    with pytest.raises(
        ValueError, match="is not a gradflow sweep: it holds a Trajectory"
    ):
        gf.load_sweep(tmp_path / "t.nc")


def test_sgd_run(tmp_path):
    run = data.sgd_run()
    ds = run.to_xarray()
    np.testing.assert_array_equal(ds.step, run.steps)
    np.testing.assert_array_equal(ds.population_loss, run.population_loss)
    np.testing.assert_array_equal(ds.train_loss, run.train_loss)
    assert ds.W0.dims == ("t", "width", "token")
    run.save(tmp_path / "run.npz")
    ds.to_netcdf(tmp_path / "run.nc")
    assert_same_result(gf.load(tmp_path / "run.npz"), gf.load(tmp_path / "run.nc"))


def test_sweep_on_its_axes(sw):
    ds = sw.to_xarray()
    n_d, n_s = len(data.DELTAS), len(data.SEEDS)
    assert len(sw) == 16
    assert ds.loss.dims == ("delta", "seed", "t")
    assert ds.loss.shape == (n_d, n_s, len(sw.ts))
    assert list(ds.delta.values) == list(data.DELTAS)
    assert list(ds.problem.values) == [0, 1, 2, 3]  # a coordinate on delta
    assert float(ds.init_scale) == 1e-3  # one value: a scalar coordinate
    assert ds.W0.dims == ("delta", "seed", "t", "width", "token")
    assert ds.P.dims == ("delta", "token", "next_token")
    for member, t in zip(sw.members, sw, strict=True):
        at = {"delta": member.labels["delta"], "seed": member.seed}
        np.testing.assert_array_equal(ds.loss.sel(at), t.loss)
        np.testing.assert_array_equal(ds.W0.sel(at), t.params.W0)
        np.testing.assert_array_equal(ds.att_mass.sel(at), t.extras["att_mass"])
        assert int(ds.member_index.sel(at)) == member.index
    np.testing.assert_array_equal(ds.P.sel(delta=0.1), sw.problems[2].chain.P)
    # a phase diagram in a line: the final loss over delta, averaged over seeds
    final = ds.loss.isel(t=-1).mean("seed")
    np.testing.assert_allclose(final.sel(delta=0.05), sw.loss[4:8, -1].mean())


def test_sweep_netcdf_round_trip(sw, tmp_path):
    sw.save(tmp_path / "sw.npz")
    sw.to_xarray().to_netcdf(tmp_path / "sw.nc")
    assert_same_sweep(gf.load(tmp_path / "sw.npz"), gf.load(tmp_path / "sw.nc"))


def _replace_member(sw, i, traj):
    trajs = list(sw.trajectories)
    trajs[i] = traj
    return eqx.tree_at(lambda s: s.trajectories, sw, tuple(trajs))


def test_a_member_that_stopped_early_is_padded(sw, tmp_path):
    short = data.cut(sw[5], np.arange(12))
    loss = np.array(sw.loss)
    loss[5, 12:] = np.nan
    cut = eqx.tree_at(lambda s: s.loss, _replace_member(sw, 5, short), loss)
    ds = cut.to_xarray()
    at = {"delta": sw.members[5].labels["delta"], "seed": sw.members[5].seed}
    assert int(ds.num_saves.sel(at)) == 12
    assert np.isnan(ds.loss.sel(at).values[12:]).all()
    ds.to_netcdf(tmp_path / "cut.nc")
    assert_same_sweep(cut, gf.load(tmp_path / "cut.nc"))


def test_members_saved_at_other_times_go_on_a_member_dimension(sw, tmp_path):
    keep = np.delete(np.arange(len(sw.ts)), 7)  # a save left out
    odd = _replace_member(sw, 3, data.cut(sw[3], keep))
    ds = odd.to_xarray()
    assert ds.attrs["gradflow_layout"] == "member"
    assert ds.loss.dims == ("member", "save")
    assert ds.t.dims == ("member", "save")  # each member's own times
    np.testing.assert_array_equal(ds.t.sel(member=3)[: len(keep)], sw.ts[keep])
    assert np.isnan(ds.t.sel(member=3).values[-1])
    np.testing.assert_array_equal(ds.t.sel(member=0), sw.ts)
    assert list(ds.seed.values) == [m.seed for m in sw.members]
    ds.to_netcdf(tmp_path / "odd.nc")
    assert_same_sweep(odd, gf.load(tmp_path / "odd.nc"))


def test_deep_linear_committee_and_in_context_dimensions(tmp_path):
    # tests/test_saves.py's deep linear network and its run there (to t = 60 on
    # the default saves): one compiled solve for the two files
    dl = gf.flow(deep_linear(), 1e-3, t1=60.0, run=data.QUIET).to_xarray()
    assert dl.W1.dims == ("t", "hidden1", "input")
    assert dl.W2.dims == ("t", "output", "hidden1")
    assert dl.modes.dims == ("t", "mode")
    assert dl.sigma_yx.dims == ("output", "input")
    cm = data.committee_run()
    ds = cm.to_xarray()
    assert ds.W.dims == ("t", "student", "input")
    assert ds.R.dims == ("t", "student", "teacher")
    assert ds.Q.dims == ("t", "student", "student_2")
    cm.save(tmp_path / "cm.npz")
    ds.to_netcdf(tmp_path / "cm.nc")
    assert_same_result(gf.load(tmp_path / "cm.npz"), gf.load(tmp_path / "cm.nc"))
    icr = data.in_context_run().to_xarray()
    assert icr.K.dims == ("t", "head", "key_row", "input")
    assert icr.modes.dims == ("t", "mode") and list(icr.mode.values) == [1, 2, 3]
    # the problem's arrays derived from its covariance, on its dimensions
    assert icr.basis.dims == ("input", "mode")
    assert icr.minimiser.dims == icr.cholesky.dims == ("input", "input_2")
    problem = data.in_context_run().problem
    np.testing.assert_array_equal(icr.minimiser, problem.minimiser)
    assert float(icr.minimum) == float(problem.minimum)


class Quadratic(gf.Problem):
    """A problem that registers no names: the generic fallback."""

    target: jax.Array

    def loss(self, params):
        return 0.5 * jnp.sum((params["a"] @ params["b"] - self.target) ** 2)

    def init(self, key, init_scale):
        ka, kb = jax.random.split(key)
        return {
            "a": init_scale * jax.random.normal(ka, (3, 2), jnp.float64),
            "b": init_scale * jax.random.normal(kb, (2, 3), jnp.float64),
        }


def test_generic_names_for_a_problem_without_its_own():
    target = jnp.diag(jnp.array([2.0, 1.0, 0.0]))
    traj = gf.flow(Quadratic(target), 1e-2, t1=5.0, saveat=data.saves(5.0, 20),
                   run=data.QUIET)  # fmt: skip
    ds = traj.to_xarray()
    assert ds.params_a.dims == ("t", "params_a_dim_0", "params_a_dim_1")
    np.testing.assert_array_equal(ds.params_b, traj.params["b"])
    assert ds.sv_a.attrs["gradflow_key"] == "extra_sv['a']"
    assert ds.problem_target.dims == ("problem_target_dim_0", "problem_target_dim_1")


def test_stage_and_event_tables(traj, sw):
    stages = traj.stages_frame()
    assert list(stages.name) == [s.name for s in traj.stages]
    np.testing.assert_allclose(stages.duration, [s.duration for s in traj.stages])
    assert stages.tokens.iloc[[s.name for s in traj.stages].index("focus")] == (0,)
    assert str(stages.sv_index.dtype) == "Int64"
    events = traj.events_frame()
    assert list(events.name) == [e.name for e in traj.events]
    np.testing.assert_array_equal(events.t, [e.t for e in traj.events])
    table = sw.stages_frame()
    assert len(table) == sum(len(t.stages) for t in sw)
    assert {"member", "problem", "delta", "seed", "name", "t_start"} <= set(table)
    first = table[table.member == 5]
    assert list(first.name) == [s.name for s in sw[5].stages]
    assert len(sw.events_frame()) == sum(len(t.events) for t in sw)
    empty = eqx.tree_at(lambda t: t.stages, traj, ()).stages_frame()
    assert len(empty) == 0 and "t_start" in empty


def test_netcdf_reader_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such file"):
        gf.load(tmp_path / "missing.nc")
    xr.Dataset({"x": ("a", [1.0, 2.0])}).to_netcdf(tmp_path / "foreign.nc")
    with pytest.raises(ValueError, match="foreign.nc' is not a gradflow result"):
        gf.load(tmp_path / "foreign.nc")
    (tmp_path / "junk.nc").write_text("not netCDF")
    with pytest.raises(ValueError, match="junk.nc' could not be read as a netCDF"):
        gf.load(tmp_path / "junk.nc")
