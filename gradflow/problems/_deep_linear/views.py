r"""A deep linear network in the animation and the explorer: its
[`views`][gradflow.plot.views], the mode strengths $u_a/s_a$ (learnt at 1,
one after the other) and the product $W_L \cdots W_1$ in the singular bases
of $\Sigma_{yx}$ (diagonal: the modes; off the diagonal: their coupling)."""

import jax
import numpy as np

from ...plot._timeline import interpolate
from ...plot._views import PALETTE, Bars, Heatmap, views
from .problem import DeepLinear, product


@views.register
def _(problem: DeepLinear, result, times) -> list:
    """The mode strengths and the product in the modes' bases."""
    U, s, Vt = problem.modes()
    k = int(np.sum(s > 1e-12 * s[0]))
    params = interpolate(result.ts, jax.tree.map(np.asarray, result.params), times)
    W = np.asarray(product(params))  # (F, n_out, n_in)
    M = np.einsum("ia,fij,bj->fab", U, W, Vt)
    strength = np.einsum("faa->fa", M)[:, :k] / s[:k]
    names = [f"mode {a + 1} (s = {s[a]:.3g})" for a in range(k)]
    bound = float(np.abs(M).max()) or 1.0
    # (a strength below 0 by less than a tenth is shown at 0)
    bottom = float(strength.min()) if strength.min() < -0.1 else 0.0
    return [
        Bars("mode strengths u/s", strength, names,
             [PALETTE[a % len(PALETTE)] for a in range(k)],
             (bottom, max(1.1, float(strength.max()))),
             "u_a / s_a", reference=1.0),
        Heatmap("product W in the modes' bases (U^T W V)", M,
                [str(a + 1) for a in range(M.shape[1])],
                [str(a + 1) for a in range(M.shape[2])],
                "input mode", "output mode", -bound, bound, cmap="RdBu_r"),
    ]  # fmt: skip


__all__: list[str] = []
