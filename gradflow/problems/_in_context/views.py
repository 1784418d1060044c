r"""In-context regression in the animation and the explorer: its
[`views`][gradflow.plot.views], the eigen-components
$\operatorname{diag}(U^\top\Gamma U)$ (`extras["modes"]`, largest eigenvalue
of the inputs' covariance first), each rising in turn to the value the flow
learns it at, and $\Gamma$ itself in that eigenbasis."""

import jax
import numpy as np

from ...plot._timeline import interpolate
from ...plot._views import PALETTE, Bars, Heatmap, views
from .problem import InContextRegression, attention_matrix


@views.register
def _(problem: InContextRegression, result, times) -> list:
    r"""The eigen-components and $U^\top\Gamma U$."""
    lam, U = problem.eigen()
    modes = interpolate(result.ts, np.asarray(result.extras["modes"]), times)
    params = interpolate(result.ts, jax.tree.map(np.asarray, result.params), times)
    gamma = np.asarray(jax.vmap(attention_matrix)(params))  # (F, D, D)
    G = np.einsum("di,fde,ej->fij", U, gamma, U)
    D = modes.shape[1]
    top = max(float(np.nanmax(modes)), 1e-12)
    bound = float(np.nanmax(np.abs(G))) or 1.0
    bottom = float(np.nanmin(modes)) if np.nanmin(modes) < -0.1 * top else 0.0
    names = [f"λ{i + 1} = {lam[i]:.3g}" for i in range(D)]
    return [
        Bars("eigen-components of Γ (U^T Γ U)_ii", modes, names,
             [PALETTE[i % len(PALETTE)] for i in range(D)],
             (bottom, 1.1 * top), "component"),
        Heatmap("Γ in the eigenbasis of Σ (U^T Γ U)", G,
                [str(i + 1) for i in range(D)], [str(i + 1) for i in range(D)],
                "eigen-direction", "eigen-direction", -bound, bound, cmap="RdBu_r"),
    ]  # fmt: skip


__all__: list[str] = []
