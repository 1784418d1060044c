r"""Closed forms for in-context regression with linear attention
([`InContextRegression`][gradflow.problems.InContextRegression]); the
derivations are in `docs/problems.md`, section "In-context regression".

In the eigenbasis of $\Sigma$ (eigenvalues $\lambda_1 > \dots > \lambda_D$,
largest first; indices below count from 0 in that order), with
$A_i = (1 + \frac1N)\lambda_i + \frac\tau N$ and $M_i = A_i\lambda_i$:

- the minimiser $\Gamma^* = ((1 + \frac1N)\Sigma + \frac\tau NI)^{-1}$,
  diagonal with $\gamma_i = 1/A_i$;
- the level with the directions $S$ learnt,
  $L_S = \frac\tau2 - \frac12\sum_{i\in S}g_i$, $g_i = \lambda_i^2/A_i$;
  the staircase $L_{1..k}$, $k = 0..D$;
- separate key and query: the critical point with the directions $S$ learnt,
  one balanced head each ($v = k_i = q_i = \gamma_i^{1/3}$), and the whole
  spectrum of $-\nabla^2L$ there; with $r = 1$ and $S$ the leading
  directions its largest eigenvalue is 0: the next direction grows through
  a free head, cubically, not exponentially;
- from the aligned balanced start the directions decouple and each follows
  $\dot c = \lambda_j^2c^2(1 - c^3/\gamma_j)$, solved in closed form;
- (the rows of the theory report are registered in `report.py`).
"""

import itertools
import math

import jax.numpy as jnp
import numpy as np

from ..._core.errors import show
from ..._core.validate import check_positive_finite
from .problem import Heads, InContextRegression, MergedHeads, SeparateHeads


def _check_problem(problem, name: str) -> InContextRegression:
    if not isinstance(problem, InContextRegression):
        raise TypeError(
            f"{name} takes a gradflow.problems.InContextRegression, got "
            f"{type(problem).__name__}"
        )
    return problem


def _check_learnt(problem: InContextRegression, learnt) -> tuple[int, ...]:
    """Distinct direction indices in `[0, D)`, sorted."""
    D = problem.dimension
    try:
        out = tuple(sorted(int(i) for i in learnt))
        ok = all(float(i) == j for i, j in zip(sorted(learnt), out, strict=True))
    except (TypeError, ValueError):
        ok, out = False, ()
    if not ok or len(set(out)) != len(out) or any(not 0 <= i < D for i in out):
        raise ValueError(
            f"learnt must be distinct eigen-direction indices in [0, {D}) (0 the "
            f"largest eigenvalue), got learnt = {show(learnt)}"
        )
    return out


def eigen_spectrum(problem: InContextRegression):
    """`(lam, A, M)` in the eigenbasis, largest eigenvalue first."""
    lam = problem.eigen()[0]
    N = problem.context
    A = (1 + 1 / N) * lam + problem.tau() / N
    return lam, A, A * lam


def in_context_level(problem: InContextRegression, learnt=()) -> float:
    r"""$L_S = \frac\tau2 - \frac12\sum_{i\in S}\lambda_i^2/((1 + \frac1N)
    \lambda_i + \frac\tau N)$: the least loss with $\Gamma$ restricted to the
    eigen-directions `learnt` (indices from 0, largest eigenvalue first)."""
    problem = _check_problem(problem, "in_context_level")
    S = _check_learnt(problem, learnt)
    gains = problem.gains()
    return 0.5 * (problem.tau() - float(np.sum(gains[list(S)])))


def in_context_staircase(problem: InContextRegression) -> np.ndarray:
    r"""The levels $L_{1..k}$, $k = 0, \dots, D$ (the $k$ leading directions
    learnt): $\tau/2$ first, the global minimum last."""
    problem = _check_problem(problem, "in_context_staircase")
    gains = problem.gains()
    return 0.5 * (problem.tau() - np.concatenate([[0.0], np.cumsum(gains)]))


def in_context_minimiser(problem: InContextRegression) -> np.ndarray:
    r"""$\Gamma^* = ((1 + \frac1N)\Sigma + \frac\tau NI)^{-1}$ (NumPy, in the
    original basis)."""
    problem = _check_problem(problem, "in_context_minimiser")
    sigma = np.asarray(problem.covariance, dtype=np.float64)
    N, D = problem.context, problem.dimension
    return np.linalg.inv((1 + 1 / N) * sigma + problem.tau() / N * np.eye(D))


def in_context_saddle(problem: InContextRegression, learnt=()) -> Heads:
    r"""The critical point with the eigen-directions `learnt` (indices from 0,
    largest eigenvalue first) learnt and the others not: its loss is
    [`in_context_level`][gradflow.theory.in_context_level].

    Separate key and query: head $h$ carries the $h$-th direction of
    `learnt`, balanced, $v_h = c$, first key and query rows $c\,u_i$ with
    $c = \gamma_i^{1/3}$; the other heads and rows are zero (needs
    `len(learnt) <= heads`). Merged key-query: only the origin (`learnt=()`)
    and the minimum (every direction: $v_1 = \|\Gamma^*\|_F^{1/2}$,
    $W_1 = \Gamma^*/v_1$) are critical.
    """
    problem = _check_problem(problem, "in_context_saddle")
    S = _check_learnt(problem, learnt)
    H, D = problem.heads, problem.dimension
    lam, A, _ = eigen_spectrum(problem)
    U = problem.eigen()[1]
    if problem.key_dim is None:
        W, v = np.zeros((H, D, D)), np.zeros(H)
        if len(S) == D:
            star = in_context_minimiser(problem)
            v[0] = math.sqrt(np.linalg.norm(star))
            W[0] = star / v[0]
        elif S:
            raise ValueError(
                "merged key-query has two critical points, the origin (learnt=()) "
                f"and the minimum (all {D} directions), got learnt = {show(learnt)}"
            )
        return MergedHeads(v=jnp.asarray(v), W=jnp.asarray(W))
    if len(S) > H:
        raise ValueError(
            f"learnt needs one head per direction, at most heads = {H}, got "
            f"{len(S)} directions"
        )
    v, K = np.zeros(H), np.zeros((H, problem.key_dim, D))
    for h, i in enumerate(S):
        c = (1 / A[i]) ** (1 / 3)
        v[h], K[h, 0] = c, c * U[:, i]
    return SeparateHeads(v=jnp.asarray(v), K=jnp.asarray(K), Q=jnp.asarray(K))


def _separate_hessian(problem: InContextRegression, S: tuple[int, ...]) -> list:
    """The eigenvalues of $\\nabla^2L$ at the separate model's saddle `S`, by
    block (`docs/problems.md`)."""
    lam, A, M = eigen_spectrum(problem)
    c = (1 / A) ** (1 / 3)
    D, H = problem.dimension, problem.heads
    r = int(problem.key_dim or 1)  # the separate model (its callers check)
    rest = [j for j in range(D) if j not in S]
    out = []
    for i in S:  # v, k_i, q_i of head i: the rescalings are flat
        out += [3 * M[i] * lam[i] * c[i] ** 4, 0.0, 0.0]
    for a, b in itertools.combinations(S, 2):  # entries (a, b), (b, a)
        s = c[a] ** 4 + c[b] ** 4
        out += [M[a] * lam[b] * s, M[b] * lam[a] * s, 0.0, 0.0]
    for i, j in itertools.product(S, rest):  # k_j, q_j of head i
        block = [
            [M[j] * lam[i] * c[i] ** 4, -c[i] * lam[j] ** 2],
            [-c[i] * lam[j] ** 2, M[i] * lam[j] * c[i] ** 4],
        ]
        out += list(np.linalg.eigvalsh(np.array(block)))
    for i in S:  # the other rows of head i: bilinear, +-c_i lam_j^2
        for m in range(D):
            e = c[i] * lam[m] ** 2 if m in rest else 0.0
            out += [e, -e] * (r - 1)
    return out + [0.0] * (H - len(S)) * (1 + 2 * r * D)  # free heads: cubic


def in_context_saddle_spectrum(problem: InContextRegression, learnt=()) -> np.ndarray:
    r"""The eigenvalues of $-\nabla^2L$ (the flow linearised) at
    [`in_context_saddle`][gradflow.theory.in_context_saddle]`(problem,
    learnt)`, in descending order, in closed form (`docs/problems.md`).

    Separate key and query, with $c_i = \gamma_i^{1/3}$, $S$ = `learnt`:
    $-3M_i\lambda_ic_i^4$ and two zeros per $i \in S$;
    $-M_a\lambda_b(c_a^4 + c_b^4)$, $-M_b\lambda_a(c_a^4 + c_b^4)$ and two
    zeros per pair $a, b \in S$; the eigenvalues of
    $-\begin{pmatrix}M_j\lambda_ic_i^4 & -c_i\lambda_j^2\\ -c_i\lambda_j^2 &
    M_i\lambda_jc_i^4\end{pmatrix}$ per $i \in S$, $j \notin S$ (both negative
    iff $g_j < g_i$); $\pm c_i\lambda_j^2$ per further key row ($r > 1$) and
    $j \notin S$; zeros for the free heads. Merged key-query, at the origin:
    $\pm\|\Sigma^2\|_F$ once per head, zeros otherwise.
    """
    problem = _check_problem(problem, "in_context_saddle_spectrum")
    S = _check_learnt(problem, learnt)
    if problem.key_dim is None:
        if S:
            raise ValueError(
                "the merged model's spectrum is derived at the origin (learnt=()), "
                f"got learnt = {show(learnt)}"
            )
        lam, H, D = problem.eigen()[0], problem.heads, problem.dimension
        rate = float(np.sqrt(np.sum(lam**4)))
        out = [rate] * H + [-rate] * H + [0.0] * (H * (D * D - 1))
        return np.sort(np.array(out))[::-1]
    if len(S) > problem.heads:
        raise ValueError(
            f"learnt needs one head per direction, at most heads = {problem.heads}, "
            f"got {len(S)} directions"
        )
    return np.sort(-np.array(_separate_hessian(problem, S)))[::-1]


def in_context_saddle_rate(problem: InContextRegression, learnt=()) -> float:
    r"""The largest eigenvalue of $-\nabla^2L$ at the saddle `learnt`: the
    exponential escape rate. 0 for separate key and query with $r = 1$ at the
    leading directions (the next direction grows cubically, see
    [`in_context_learning_time`][gradflow.theory.in_context_learning_time]);
    $\gamma_{i}^{1/3}\lambda_{j}^2$ maximised over learnt $i$ and unlearnt
    $j$ for $r > 1$; $\|\Sigma^2\|_F$ for merged key-query at the origin."""
    return float(in_context_saddle_spectrum(problem, learnt)[0]) + 0.0  # not -0.0


def in_context_aligned_start(problem: InContextRegression, c0) -> SeparateHeads:
    r"""The aligned balanced start of separate key and query: head $j$ carries
    eigen-direction $j$ ($j < \min(H, D)$), $v_j = c_0$, first key and
    query rows $c_0u_j$; everything else zero. From it the directions
    decouple exactly (`docs/problems.md`). `c0`: a number or one per
    direction."""
    problem = _check_problem(problem, "in_context_aligned_start")
    if problem.key_dim is None:
        raise ValueError("in_context_aligned_start needs separate key and query")
    H, D = problem.heads, problem.dimension
    k = min(H, D)
    c = _check_c0(c0, k)
    U = problem.eigen()[1]
    v, K = np.zeros(H), np.zeros((H, problem.key_dim, D))
    v[:k] = c
    K[:k, 0] = c[:, None] * U[:, :k].T
    return SeparateHeads(v=jnp.asarray(v), K=jnp.asarray(K), Q=jnp.asarray(K))


def _check_c0(c0, k: int) -> np.ndarray:
    arr = np.asarray(c0, dtype=np.float64)
    arr = np.full(k, float(arr)) if arr.ndim == 0 else arr
    if arr.shape != (k,) or not (np.isfinite(arr).all() and (arr > 0).all()):
        raise ValueError(
            f"c0 must be a positive number or {k} of them, got c0 = {show(c0)}"
        )
    return arr


def cubic_antiderivative(c, g):
    r"""$F$ with $F'(c) = 1/(c^2(1 - c^3/g^3))$."""
    root3 = math.sqrt(3.0)
    return (
        -1 / c
        + np.log((c * c + g * c + g * g) / (g - c) ** 2) / (6 * g)
        - np.arctan((2 * c + g) / (root3 * g)) / (root3 * g)
    )


def in_context_learning_time(
    problem: InContextRegression, c0, fraction: float = 0.5
) -> np.ndarray:
    r"""From [`in_context_aligned_start`][gradflow.theory.in_context_aligned_start]
    `(problem, c0)`: the time at which each direction's component
    $\gamma_j(t) = (U^\top\Gamma U)_{jj} = c^3$ reaches `fraction` of its
    learnt value $1/A_j$. Each obeys $\dot c = \lambda_j^2c^2(1 - c^3/g^3)$,
    $g = A_j^{-1/3}$, so $t = (F(g f^{1/3}) - F(c_0))/\lambda_j^2$ with
    $F(c) = -\frac1c + \frac1{6g}\log\frac{c^2 + gc + g^2}{(g - c)^2}
    - \frac1{\sqrt3g}\arctan\frac{2c + g}{\sqrt3g}$; for small $c_0$, about
    $1/(\lambda_j^2c_0)$: inversely proportional to $\lambda_j^2$ and to the
    initial scale (not its logarithm). One time per direction carried,
    $\min(H, D)$."""
    problem = _check_problem(problem, "in_context_learning_time")
    if problem.key_dim is None:
        raise ValueError("in_context_learning_time needs separate key and query")
    fraction = check_positive_finite("fraction", fraction)
    if fraction >= 1:
        raise ValueError(f"fraction must lie in (0, 1), got fraction = {fraction!r}")
    k = min(problem.heads, problem.dimension)
    c = _check_c0(c0, k)
    lam, A, _ = eigen_spectrum(problem)
    g = (1 / A[:k]) ** (1 / 3)
    c1 = g * fraction ** (1 / 3)
    if (c >= c1).any():
        raise ValueError(
            f"c0 must lie below (fraction / A_j)^(1/3) = {show(c1.tolist())}, got "
            f"c0 = {show(c0)}"
        )
    return (cubic_antiderivative(c1, g) - cubic_antiderivative(c, g)) / lam[:k] ** 2


__all__ = [
    "in_context_aligned_start",
    "in_context_learning_time",
    "in_context_level",
    "in_context_minimiser",
    "in_context_saddle",
    "in_context_saddle_rate",
    "in_context_saddle_spectrum",
    "in_context_staircase",
]
