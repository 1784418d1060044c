"""A sweep's file layout: the metadata and arrays of one `.npz` file holding
every member (what `Sweep.save` writes and its readers, `.npz` and netCDF,
read back)."""

import numpy as np

from .._result.files import file_header, problem_parts, result_parts


FORMAT_NAME = "gradflow-sweep"


def sweep_parts(sw) -> tuple[dict, dict]:
    """`(meta, arrays)` of a sweep's file: member `i`'s arrays under `m{i}/`,
    problem `c`'s under `problem{c}/`, the shared `ts` and `loss`."""
    arrays: dict[str, np.ndarray] = {
        "ts": np.asarray(sw.ts),
        "loss": np.asarray(sw.loss),
    }
    problems = []
    for c, problem in enumerate(sw.problems):
        meta, own = problem_parts(problem, f"problem{c}/")
        problems.append(meta)
        arrays.update(own)
    trajs = []
    for i, traj in enumerate(sw.trajectories):
        meta, own = result_parts(traj, f"m{i}/")
        trajs.append(meta)
        arrays.update(own)
    meta = {
        **file_header(FORMAT_NAME),
        "settings": sw.settings.to_dict(),
        "stats": sw.stats.to_dict(),
        "members": [m.to_dict() for m in sw.members],
        "labels": {k: list(v) for k, v in sw.labels.items()},
        "problems": problems,
        "trajectories": trajs,
    }
    return meta, arrays


__all__ = ["FORMAT_NAME", "sweep_parts"]
