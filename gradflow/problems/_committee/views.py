r"""The soft committee machine in the animation and the explorer: its
[`views`][gradflow.plot.views], the order parameters $R = WV^\top$ and
$Q = WW^\top$: the students' overlaps with the teacher's units and with each
other (symmetric on the plateau, specialised after it)."""

import numpy as np

from ...plot._timeline import interpolate
from ...plot._views import Heatmap, views
from .problem import Committee


def _heatmap(title: str, values, rows, cols, xlabel: str) -> Heatmap:
    bound = float(np.nanmax(np.abs(values))) or 1.0
    return Heatmap(title, values, rows, cols, xlabel, "student unit", -bound, bound,
                   cmap="RdBu_r")  # fmt: skip


@views.register
def _(problem: Committee, result, times) -> list:
    """$R$ and $Q$ (from the saved observables, interpolated)."""
    del problem
    R = interpolate(result.ts, np.asarray(result.extras["R"]), times)
    Q = interpolate(result.ts, np.asarray(result.extras["Q"]), times)
    K, M = R.shape[1:]
    students = [f"w{k + 1}" for k in range(K)]
    teachers = [f"v{n + 1}" for n in range(M)]
    return [
        _heatmap("R: student-teacher overlaps", R, students, teachers, "teacher unit"),
        _heatmap("Q: student-student overlaps", Q, students, students, "student unit"),
    ]


__all__: list[str] = []
