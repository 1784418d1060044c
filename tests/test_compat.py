"""Files written by gradflow 0.1.0 before the loop redesign (made with that
version's code, kept in tests/data): trajectories still load, with their event
dicts read as typed records; checkpoints of the old loop layout are refused
with a message that says why."""

from pathlib import Path

import numpy as np
import pytest

import gradflow as gf


DATA = Path(__file__).parent / "data"


def test_old_trajectory_loads():
    traj = gf.load(DATA / "trajectory_v0.1.0.npz")
    assert traj.ok and traj.chain.d == 3 and traj.params.m == 2
    np.testing.assert_allclose(traj.ts, np.linspace(0, 60, 7))
    assert [e.name for e in traj.events] == ["saddle_escape", "saddle_entry"]
    assert all(isinstance(e, gf.EventRecord) for e in traj.events)
    assert traj.events[0].t == pytest.approx(14.902321512619775, rel=1e-15)
    assert len(traj.stages) == 1


def test_old_checkpoint_is_refused_naming_the_layout(tmp_path):
    chain = gf.chains.sticky(3, 0.5, 0.5, 0.05)
    ck = tmp_path / "old.npz"
    ck.write_bytes((DATA / "checkpoint_v0.1.0.npz").read_bytes())
    with pytest.raises(
        ValueError,
        match='checkpoint_layout = "\\(unset\\)" there, "loop-state-3" here',
    ):
        gf.integrate(
            chain,
            1e-2,
            width=2,
            t1=60.0,
            ts=np.linspace(0, 60, 7),
            progress=False,
            checkpoint=ck,
        )
