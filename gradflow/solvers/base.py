r"""Linearly implicit (Rosenbrock-W) solvers for stiff gradient flows.

The flow $\dot\theta = -\nabla L(\theta)$ has the Jacobian $-\nabla^2 L$:
symmetric, with a real spectrum. Large positive curvature makes explicit
solvers take tiny steps while the motion along a plateau is slow. A
Rosenbrock-W method solves one *linear* system with the matrix
$I - h\gamma W$ per stage, where $W$ is any approximation of the Jacobian; the
method keeps its order for every $W$ (that is what "W" means), so $W$ can be
computed rarely and reused over many steps.

[`AbstractRosenbrockW`][gradflow.solvers.AbstractRosenbrockW] stores $W$ in
eigen-form $W = V \operatorname{diag}(\mu) V^\top$ (orthonormal columns $V$).
Then for *any* step size $h$

$$(I - h\gamma W)^{-1} r = r + V \Big(\big(\tfrac{1}{1 - h\gamma\mu} - 1\big)
\circ V^\top r\Big),$$

two matrix-vector products: changing the step size costs nothing, and one
eigendecomposition serves until the solver decides to refresh it. $V$ is
either the full eigenbasis of the symmetrised Jacobian (`rank=None`, $n$
Jacobian-vector products and one `eigh` per refresh) or the `rank` dominant
eigenpairs found by subspace iteration on Jacobian-vector products (for large
$n$, where a dense $n \times n$ matrix does not fit). With the low-rank form the
remaining directions are treated explicitly ($W = 0$ there), which is still a
valid W-method.
"""

from collections.abc import Callable
from typing import ClassVar

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree
from jaxtyping import Array, Bool, Float, Int

from ._batching import cond_per_member


class RosenbrockWTableau(eqx.Module):
    r"""Coefficients of an $s$-stage Rosenbrock-W method in the form of Hairer
    and Wanner (*Solving ODEs II*, IV.7):

    $$(I - h\gamma W)\,k_i = h f\Big(y_0 + \sum_{j<i} \alpha_{ij} k_j\Big)
    + h W \sum_{j<i} \gamma_{ij} k_j, \qquad y_1 = y_0 + \sum_i b_i k_i,$$

    with the embedded solution $\hat y_1 = y_0 + \sum_i \hat b_i k_i$ giving the
    error estimate $y_1 - \hat y_1$.
    """

    alpha: np.ndarray = eqx.field(converter=np.asarray)  # (s, s), strictly lower
    gamma_lower: np.ndarray = eqx.field(converter=np.asarray)  # (s, s), strictly lower
    gamma: float = eqx.field(converter=float)
    b: np.ndarray = eqx.field(converter=np.asarray)
    b_hat: np.ndarray = eqx.field(converter=np.asarray)
    order: int = eqx.field(static=True)

    def __check_init__(self):
        s = len(self.b)
        for name in ("alpha", "gamma_lower"):
            value = np.asarray(getattr(self, name))
            if value.shape != (s, s) or np.any(np.triu(value) != 0):
                raise ValueError(
                    f"RosenbrockWTableau.{name} must be strictly lower triangular "
                    f"of shape {(s, s)}, got {value!r}"
                )
        if len(self.b_hat) != s:
            raise ValueError(f"b_hat must have {s} entries, got {self.b_hat!r}")

    @property
    def num_stages(self) -> int:
        return len(self.b)

    @property
    def c(self) -> np.ndarray:
        """Stage times as fractions of the step."""
        return np.asarray(self.alpha).sum(axis=1)


class RosenbrockWState(eqx.Module):
    """Solver state carried between steps (and saved by `SaveAt(solver_state=True)`).

    - `f0`: the vector field at the current point (first-same-as-last).
    - `V`, `mu`: the eigen-form $W = V \\operatorname{diag}(\\mu) V^\\top$.
    - `stale`: whether to refresh $W$ at the next step.
    - `age`: accepted steps since the last refresh.
    - `num_refreshes`, `num_jvps`: work done in accepted steps (a refresh made in
      a step that the controller then rejects is repeated and not counted:
      Diffrax discards the state of rejected steps).
    - `basis`: with `carry_basis`, the orthonormal basis the next refresh starts
      from (already advanced by power iteration); otherwise `None`.
    - `rho_floor` (refresh rule `"growth"`): the estimate of $\\lVert J - W
      \\rVert$ made right after the last refresh, what a refresh cannot remove
      (the untracked eigenvalues); otherwise `None`.
    - `level`, `strikes` (adaptive rank): the index of the rank in use among
      `rank, 2 rank, ..., max_rank` (the columns of `V` beyond it have
      $\\mu = 0$ and do nothing), how many refreshes in a row left the
      untracked part stiff, and the power iteration that measures that part:
      `w` (orthogonal to the tracked eigenvectors) and `lam_out`, the estimate
      of the largest untracked eigenvalue made at the last refresh; otherwise
      `None`.
    """

    f0: Float[Array, " n"]
    V: Float[Array, "n r"]
    mu: Float[Array, " r"]
    stale: Bool[Array, ""]
    u: Float[Array, " n"]
    age: Int[Array, ""]
    num_refreshes: Int[Array, ""]
    num_jvps: Int[Array, ""]
    basis: Float[Array, "n r"] | None = None
    rho_floor: Float[Array, ""] | None = None
    level: Int[Array, ""] | None = None
    strikes: Int[Array, ""] | None = None
    w: Float[Array, " n"] | None = None
    lam_out: Float[Array, ""] | None = None


# A low-rank refresh's Jacobian-vector products run vmapped over at most this
# many directions at a time (`jax.lax.map` over batches of them beyond). On
# the 1,024-word text flow (33,280 parameters, width 16), 32 or 64 directions
# vmapped at once made every intermediate of the blocked HVP's scan a
# (r, 128, 1,024) array (32 or 64 MB), and one HVP cost 1.5 to 1.9 times one
# in batches of 16 (docs/performance.md, "Issue 42, ninth pass: where the
# text flow's time goes"). Below `AUTO_MIN_SIZE` (512) parameters (every
# recorded result of the paper's models) and up to 16 directions, the
# products are vmapped whole, as before, bit for bit; beyond, they equal the
# whole vmap's to the last bits (there: 1.4e-26 of the largest entry).
JVP_BATCH = 16


def _columns(lin: Callable, n: int) -> Callable:
    """`lin` (a linear map of `n`-vectors) applied to each column of a
    matrix: vmapped, from `AUTO_MIN_SIZE` entries on in batches of at most
    `JVP_BATCH` columns."""

    def jvps(Q: Array) -> Array:
        if Q.shape[1] <= JVP_BATCH or n < AUTO_MIN_SIZE:
            return jax.vmap(lin, in_axes=1, out_axes=1)(Q)
        return jax.lax.map(lin, Q.T, batch_size=JVP_BATCH).T

    return jvps


def _subspace_iterate(jvps: Callable, Q: Array, times: int) -> Array:
    """`times` steps of subspace iteration: `Q <- qr(J Q)`."""
    for _ in range(times):
        Q, _ = jnp.linalg.qr(jvps(Q))
    return Q


def _ritz(Q: Array, JQ: Array) -> tuple[Array, Array]:
    """Ritz vectors and values of the symmetrised `J` on the columns of `Q`
    (orthonormal), given `J Q`."""
    B = Q.T @ JQ
    mu, U = jnp.linalg.eigh(0.5 * (B + B.T))
    return Q @ U, mu


# The refresh rules of `AbstractRosenbrockW.refresh` ("auto" picks one by size).
REFRESH_RULES = ("auto", "residual", "growth")

# From this many parameters on, `refresh="auto"` is the rule "growth" and
# `max_rank="auto"` is 4 * rank. Below it both keep the rule and the fixed
# rank of every recorded result (the paper's models and the variants of the
# benchmarks have 224 to 488 parameters), bit for bit.
AUTO_MIN_SIZE = 512

# Adaptive rank: at a refresh, h * lambda above this, for the largest
# eigenvalue lambda outside the tracked subspace, means that the untracked part
# sets the step (an explicit method integrates it; its stability interval is a
# few units of h * lambda, and its error grows as (h lambda)^4), and
# RANK_STRIKES such refreshes in a row double the rank. (On the text flows of
# docs/text.md the 17th eigenvalue stays below 0.4 at steps up to about 2:
# below the threshold; on the full variant of docs/variants.md, the 17th is
# 3.4.)
RANK_TOL = 1.5
RANK_STRIKES = 4


def _check_count(name: str, value, least: int, *, optional: bool = False) -> None:
    """A count option: an `int` (not a `bool`) `>= least`, or `None` when
    `optional`; a one-line `ValueError` naming it otherwise."""
    if optional and value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        what = "None or an integer" if optional else "an integer"
        raise ValueError(f"{name} must be {what} >= {least}, got {value!r}")


class AbstractRosenbrockW(dfx.AbstractAdaptiveSolver):
    r"""A Rosenbrock-W method with the W-matrix kept in eigen-form.

    Subclasses set the class variable `tableau`. Fields:

    - `rank`: how much of the Jacobian $J$ goes into $W$. An integer $r$
      (default 16): the $r$ eigenpairs of the symmetrised $J$ of largest
      magnitude, tracked by subspace iteration warm-started from the previous
      basis ($(q+1)\,r$ Jacobian-vector products per refresh,
      $q$ = `power_iterations`); the other directions are integrated
      explicitly, so the step is limited by the $(r+1)$-th eigenvalue. `None`:
      the full eigendecomposition ($n$ Jacobian-vector products and a dense
      $n \times n$ `eigh` per refresh). When $r \ge n$ the full one is used.
    - `refresh_every`: recompute $W$ at least every this many accepted steps
      (default 8).
    - `jacobian_tol`: also recompute $W$ after a step of size $h$ when
      $h \rho >$ `jacobian_tol` (default 0.5), where $\rho$ estimates
      $\lVert J - W \rVert$ by one step of power iteration per step (one
      Jacobian-vector product, taken together with $f(y_1)$): a W-method stays
      stable while $h (J - W)$ is small.
    - `power_iterations`: subspace iterations per refresh when `rank` is set
      (default 1).
    - `carry_basis`: when `rank` is set, take $W$ from the Rayleigh-Ritz pairs of
      the basis $Q$ carried from the previous refresh, and carry the
      power-iterated $\operatorname{qr}(JQ)$ to the next one: the products
      $JQ$ serve both, so a refresh costs $q\,r$ Jacobian-vector products
      instead of $(q+1)\,r$ (half at $q = 1$), and $W$ is one power step
      behind. Default `False` (every recorded result uses the default). For
      large models, where Jacobian-vector products dominate the cost
      (`docs/performance.md`). Needs `power_iterations >= 1`.
    - `refresh`: the rule that says when $W$ is stale. `"residual"`: when
      $h \rho >$ `jacobian_tol` (above). `"growth"`: when
      $h (\rho - \rho_0) >$ `jacobian_tol`, where $\rho_0$ is $\rho$
      measured right after the last refresh: the part of $J - W$ that a
      refresh cannot remove (the untracked eigenvalues, explicit in a low-rank
      W) no longer triggers one; a refresh is made when $J$ has moved away
      from $W$. `"auto"` (default): `"growth"` from `AUTO_MIN_SIZE` (512)
      parameters on and with a low-rank W, `"residual"` below (every recorded
      result of the paper's models, bit for bit).
    - `max_rank`: an adaptive rank. An integer: start at `rank` and double it
      (up to `max_rank`) when, at a refresh, the untracked part still sets the
      step ($h \lambda_{out} >$ `RANK_TOL` (1.5) for the largest eigenvalue
      outside the tracked subspace, at `RANK_STRIKES` (4) refreshes in a row):
      the Hessian has more large eigenvalues than the rank. `None`: the rank stays `rank`.
      `"auto"` (default): `4 * rank` from `AUTO_MIN_SIZE` parameters on,
      `None` below. Not with `carry_basis`.

    Why low rank is the default: on the sticky scenario of the benchmark the
    Hessian has at most 6 eigenvalues above 1 (up to 108) at every time
    measured, and the 17th is below 0.1, so 16 tracked directions remove the
    stiffness (see `docs/performance.md`).

    Only ODE terms (`diffrax.ODETerm`). The Jacobian is symmetrised before it
    is decomposed, which is exact for gradient flows; for other problems the
    method keeps its order (any $W$ is allowed) but may lose stability.
    Time-dependence is handled by the W-method itself ($\partial f/\partial t$
    is not needed). Dense output: cubic Hermite from $y_0, y_1, f(y_0), f(y_1)$
    (third order), good for `SaveAt(ts=...)` and `diffrax.Event` root finding.
    """

    tableau: eqx.AbstractClassVar[RosenbrockWTableau]
    term_structure: ClassVar = dfx.AbstractTerm
    interpolation_cls: ClassVar[Callable[..., dfx.AbstractLocalInterpolation]] = (
        dfx.ThirdOrderHermitePolynomialInterpolation
    )

    rank: int | None = eqx.field(static=True, default=16)
    refresh_every: int = eqx.field(static=True, default=8)
    jacobian_tol: float = eqx.field(static=True, default=0.5)
    power_iterations: int = eqx.field(static=True, default=1)
    carry_basis: bool = eqx.field(static=True, default=False)
    refresh: str = eqx.field(static=True, default="auto")
    max_rank: int | str | None = eqx.field(static=True, default="auto")

    def __check_init__(self):
        _check_count("rank", self.rank, 1, optional=True)
        _check_count("refresh_every", self.refresh_every, 1)
        if not (np.isfinite(self.jacobian_tol) and self.jacobian_tol > 0):
            raise ValueError(f"jacobian_tol must be > 0, got {self.jacobian_tol!r}")
        _check_count("power_iterations", self.power_iterations, 0)
        if not isinstance(self.carry_basis, bool):
            raise ValueError(
                f"carry_basis must be True or False, got {self.carry_basis!r}"
            )
        if self.carry_basis and (self.rank is None or self.power_iterations < 1):
            raise ValueError(
                "carry_basis needs an integer rank and power_iterations >= 1, got "
                f"rank = {self.rank!r}, power_iterations = {self.power_iterations!r}"
            )
        if self.refresh not in REFRESH_RULES:
            raise ValueError(
                f"refresh must be one of {REFRESH_RULES}, got {self.refresh!r}"
            )
        if self.max_rank not in (None, "auto") and (
            isinstance(self.max_rank, bool)
            or not isinstance(self.max_rank, int)
            or self.rank is None
            or self.max_rank < self.rank
        ):
            raise ValueError(
                "max_rank must be None, 'auto' or an integer >= rank (with an integer "
                f"rank), got max_rank = {self.max_rank!r} with rank = {self.rank!r}"
            )
        if isinstance(self.max_rank, int) and self.carry_basis:
            raise ValueError(
                "max_rank (an adaptive rank) does not work with carry_basis; give "
                f"one of them, got max_rank = {self.max_rank!r}, carry_basis = True"
            )

    def order(self, terms):
        del terms
        return self.tableau.order

    def error_order(self, terms):
        del terms
        return self.tableau.order

    # -- helpers ---------------------------------------------------------------

    def _ranks(self, n: int) -> tuple[int, ...]:
        """The ranks W may use for a state of `n` entries: `(rank,)`, or with
        an adaptive rank `rank, 2 rank, ...` up to `max_rank` (and `n`)."""
        if self.rank is None or self.rank >= n:
            return (n,)
        top = self.max_rank
        if top == "auto":
            auto = n >= AUTO_MIN_SIZE and not self.carry_basis
            top = 4 * self.rank if auto else None
        if top is None:
            return (self.rank,)
        assert isinstance(top, int)
        ranks = [self.rank]
        while ranks[-1] < min(top, n):
            ranks.append(min(2 * ranks[-1], top, n))
        return tuple(ranks)

    def _width(self, n: int) -> int:
        return self._ranks(n)[-1]

    def _growth(self, n: int) -> bool:
        """Whether the refresh rule is `"growth"` for a state of `n` entries."""
        if self.refresh == "auto":
            return n >= AUTO_MIN_SIZE and self.rank is not None and self.rank < n
        return self.refresh == "growth"

    def _carries(self, n: int) -> bool:
        return self.carry_basis and self.rank is not None and self.rank < n

    def _decompose(
        self, f: Callable, x0, V_prev, basis
    ) -> tuple[Array, Array, Array, Array | None]:
        """Eigen-form of the symmetrised Jacobian of `f` at `x0`, the number of
        Jacobian-vector products it took, and the next refresh's `basis`."""
        _, lin = jax.linearize(f, x0)
        n = x0.shape[0]
        jvps = _columns(lin, n)
        if self.rank is None or self.rank >= n:
            J = jax.vmap(lin, in_axes=1, out_axes=1)(jnp.eye(n, dtype=x0.dtype))
            mu, V = jnp.linalg.eigh(0.5 * (J + J.T))
            return V, mu, jnp.asarray(n, jnp.int32), basis
        if self._carries(n):
            Q = basis
            JQ = jvps(Q)
            V, mu = _ritz(Q, JQ)
            nxt, _ = jnp.linalg.qr(JQ)
            nxt = _subspace_iterate(jvps, nxt, self.power_iterations - 1)
            count = self.power_iterations * self.rank
            return V, mu, jnp.asarray(count, jnp.int32), nxt
        Q = _subspace_iterate(jvps, V_prev, self.power_iterations)
        V, mu = _ritz(Q, jvps(Q))
        count = (self.power_iterations + 1) * self.rank
        return V, mu, jnp.asarray(count, jnp.int32), basis

    def _decompose_adaptive(self, f: Callable, x0, V_prev, level, w):
        r"""`_decompose` at the rank `self._ranks(n)[level]`: the leading
        columns of `V_prev` are the warm start, the result is padded back to
        all columns (the extra ones keep their previous vectors, with
        $\mu = 0$). Also one step of power iteration on the Jacobian outside
        the new tracked subspace, $(I - VV^\top) J (I - VV^\top)$, from `w`:
        the next `w` and the estimate of the largest untracked eigenvalue
        (one more Jacobian-vector product)."""
        _, lin = jax.linearize(f, x0)
        jvps = _columns(lin, x0.shape[0])
        ranks = self._ranks(x0.shape[0])

        def outside(V, x):
            return x - V @ (V.T @ x)

        def at_rank(r):
            def run(V_prev, w):
                Q = _subspace_iterate(jvps, V_prev[:, :r], self.power_iterations)
                V, mu = _ritz(Q, jvps(Q))
                w = outside(V, w)
                w = w / jnp.maximum(jnp.linalg.norm(w), jnp.finfo(w.dtype).tiny)
                Jw = outside(V, lin(w))
                lam = jnp.linalg.norm(Jw)
                w = jnp.where(lam > 0, Jw / jnp.where(lam > 0, lam, 1.0), w)
                pad = ranks[-1] - r
                mu = jnp.concatenate([mu, jnp.zeros(pad, mu.dtype)])
                V = jnp.concatenate([V, V_prev[:, r:]], axis=1)
                count = (self.power_iterations + 1) * r + 1
                return V, mu, jnp.asarray(count, jnp.int32), w, lam

            return run

        return jax.lax.switch(level, [at_rank(r) for r in ranks], V_prev, w)

    # -- diffrax interface -----------------------------------------------------

    def init(self, terms, t0, t1, y0, args) -> RosenbrockWState:
        del t1
        x0, unravel = ravel_pytree(y0)
        n = x0.shape[0]
        r = self._width(n)
        f0 = ravel_pytree(terms.vf(t0, y0, args))[0]
        if self.rank is None or self.rank >= n:
            V = jnp.eye(n, dtype=x0.dtype)
        else:
            # A fixed random start for subspace iteration (orthonormal columns).
            G = jax.random.normal(jax.random.key(0), (n, r), dtype=x0.dtype)
            V, _ = jnp.linalg.qr(G)
        zero = jnp.asarray(0)
        adaptive = len(self._ranks(n)) > 1
        return RosenbrockWState(
            f0=f0,
            V=V,
            mu=jnp.zeros(r, dtype=x0.dtype),
            stale=jnp.asarray(True),
            u=jnp.full(n, 1.0 / np.sqrt(n), dtype=x0.dtype),
            age=zero,
            num_refreshes=zero,
            num_jvps=zero,
            basis=V if self._carries(n) else None,
            rho_floor=jnp.zeros((), x0.dtype) if self._growth(n) else None,
            level=jnp.zeros((), jnp.int32) if adaptive else None,
            strikes=jnp.zeros((), jnp.int32) if adaptive else None,
            # a fixed start for the power iteration outside the tracked part
            w=jax.random.normal(jax.random.key(1), (n,), x0.dtype)
            if adaptive
            else None,
            lam_out=jnp.zeros((), x0.dtype) if adaptive else None,
        )

    def step(self, terms, t0, t1, y0, args, solver_state: RosenbrockWState, made_jump):
        # Coefficients enter as Python floats (weakly typed), so float32 states
        # stay float32 under strict dtype promotion.
        tab = self.tableau
        x0, unravel = ravel_pytree(y0)
        h = terms.contr(t0, t1)
        h = jnp.asarray(h, dtype=x0.dtype)

        # The vector field as a function of explicit operands (`dynamic`), so
        # that the branches below close over no traced value.
        dynamic, static = eqx.partition((terms, args), eqx.is_array)

        def field(dynamic, t, x):
            terms_, args_ = eqx.combine(dynamic, static)
            return ravel_pytree(terms_.vf(t, unravel(x), args_))[0].astype(x0.dtype)

        def f(t, x):
            return field(dynamic, t, x)

        state = solver_state
        f0 = cond_per_member(
            jnp.asarray(made_jump),
            lambda dynamic, t, x, _: field(dynamic, t, x),
            lambda dynamic, t, x, f0: f0,
            (dynamic, t0, x0, state.f0),
        )
        # A refresh is a few dozen Jacobian-vector products; in a batch of
        # members (a sweep) only the members that need one pay for it.
        # A member that has finished while others go on steps with h = 0 (its
        # state is then discarded): it needs no refresh.
        refresh = (state.stale | (state.age >= self.refresh_every)) & (h != 0)
        n = x0.shape[0]
        ranks = self._ranks(n)
        if len(ranks) > 1:
            V, mu, jvps, w, lam_out = cond_per_member(
                refresh,
                lambda dynamic, t, x, V, mu, level, w, lam: self._decompose_adaptive(
                    lambda x: field(dynamic, t, x), x, V, level, w
                ),
                lambda dynamic, t, x, V, mu, level, w, lam: (
                    V,
                    mu,
                    jnp.zeros((), jnp.int32),
                    w,
                    lam,
                ),
                (
                    dynamic,
                    t0,
                    x0,
                    state.V,
                    state.mu,
                    state.level,
                    state.w,
                    state.lam_out,
                ),
            )
            basis = state.basis
        else:
            w, lam_out = state.w, state.lam_out
            V, mu, jvps, basis = cond_per_member(
                refresh,
                lambda dynamic, t, x, V, mu, basis: self._decompose(
                    lambda x: field(dynamic, t, x), x, V, basis
                ),
                lambda dynamic, t, x, V, mu, basis: (
                    V,
                    mu,
                    jnp.zeros((), jnp.int32),
                    basis,
                ),
                (dynamic, t0, x0, state.V, state.mu, state.basis),
            )
        hg = h * tab.gamma
        # (I - h gamma W)^{-1} = I + V diag(shift) V^T
        shift = 1.0 / (1.0 - hg * mu) - 1.0

        ks = []
        khat = []  # V^T k_j
        fi = f0
        for i in range(tab.num_stages):
            if i > 0:
                xi = x0
                for j in range(i):
                    if tab.alpha[i, j] != 0:
                        xi = xi + float(tab.alpha[i, j]) * ks[j]
                fi = f(t0 + float(tab.c[i]) * h, xi)
            fhat = V.T @ fi
            ghat = jnp.zeros_like(mu)
            for j in range(i):
                if tab.gamma_lower[i, j] != 0:
                    ghat = ghat + float(tab.gamma_lower[i, j]) * khat[j]
            # right-hand side h f_i + h W g_i, in eigen-coordinates: h fhat + h mu ghat
            rhat = h * fhat + h * mu * ghat
            coeff = h * mu * ghat + shift * rhat
            ks.append(h * fi + V @ coeff)
            khat.append(rhat + shift * rhat)
        x1 = x0
        err = jnp.zeros_like(x0)
        for i in range(tab.num_stages):
            x1 = x1 + float(tab.b[i]) * ks[i]
            e = float(tab.b[i] - tab.b_hat[i])
            if e != 0:
                err = err + e * ks[i]
        # f(y1) and one Jacobian-vector product J(y1) u in one pass: a step of
        # power iteration on J - W across steps tracks the direction in which W
        # is most wrong, and its size rho. A W-method loses stability when
        # h * rho is no longer small, so that decides the next refresh.
        f1, Ju = jax.jvp(lambda x: f(t1, x), (x1,), (state.u,))
        resid = Ju - V @ (mu * (V.T @ state.u))
        rho = jnp.linalg.norm(resid)
        u = jnp.where(rho > 0, resid / jnp.where(rho > 0, rho, 1.0), state.u)
        stale, rho_floor, level, strikes = self._next_refresh(
            state, refresh, h, rho, lam_out=lam_out, num_ranks=len(ranks)
        )
        age = jnp.where(refresh, 1, state.age + 1)
        new_state = RosenbrockWState(
            f0=f1,
            V=V,
            mu=mu,
            stale=stale,
            u=u,
            age=age,
            num_refreshes=state.num_refreshes
            + refresh.astype(state.num_refreshes.dtype),
            num_jvps=state.num_jvps + 1 + jvps.astype(state.num_jvps.dtype),
            basis=basis,
            rho_floor=rho_floor,
            level=level,
            strikes=strikes,
            w=w,
            lam_out=lam_out,
        )
        y1 = unravel(x1)
        dense_info = dict(y0=y0, y1=y1, k0=unravel(h * f0), k1=unravel(h * f1))
        return y1, unravel(err), dense_info, new_state, dfx.RESULTS.successful

    def _next_refresh(
        self, state: RosenbrockWState, refresh, h, rho, *, lam_out, num_ranks: int
    ):
        """Whether W is stale for the next step, and the refresh rule's and
        the adaptive rank's state after this one: `(stale, rho_floor, level,
        strikes)`."""
        rho_floor, level, strikes = state.rho_floor, state.level, state.strikes
        if rho_floor is not None:
            # Rule "growth": measured right after a refresh, rho is what a
            # refresh cannot remove (the untracked eigenvalues); refresh again
            # only when J - W has grown by more than jacobian_tol / h since.
            rho_floor = jnp.where(refresh, rho, rho_floor)
            stale = jnp.abs(h) * (rho - rho_floor) > self.jacobian_tol
        else:
            stale = jnp.abs(h) * rho > self.jacobian_tol
        if level is not None and strikes is not None:
            # Adaptive rank: when at a refresh the largest untracked
            # eigenvalue is large for the step (h lam_out > RANK_TOL) at
            # RANK_STRIKES refreshes in a row, the next refresh tracks twice as
            # many eigenpairs.
            assert lam_out is not None
            stiff = jnp.abs(h) * lam_out > RANK_TOL
            strikes = jnp.where(refresh, jnp.where(stiff, strikes + 1, 0), strikes)
            grow = (strikes >= RANK_STRIKES) & (level < num_ranks - 1)
            level = jnp.where(grow, level + 1, level)
            strikes = jnp.where(grow, 0, strikes)
            stale = stale | grow
        return stale, rho_floor, level, strikes

    def func(self, terms, t0, y0, args):
        return terms.vf(t0, y0, args)

    # -- counting --------------------------------------------------------------

    def num_grad_evals_per_step(self) -> int:
        """Vector-field evaluations per attempted step: stages 2..s and $f(y_1)$."""
        return self.tableau.num_stages

    def rank_in_use(self, solver_state: RosenbrockWState) -> int:
        """How many eigenpairs W tracks at the end of a solve (the adaptive
        rank's last level; otherwise the rank)."""
        ranks = self._ranks(int(np.shape(solver_state.u)[-1]))
        level = 0 if solver_state.level is None else int(solver_state.level)
        return ranks[level]

    def num_hvps(self, solver_state: RosenbrockWState) -> int:
        """Jacobian-vector products made in accepted steps (see `RosenbrockWState`)."""
        return int(solver_state.num_jvps)


__all__ = ["AbstractRosenbrockW", "RosenbrockWState", "RosenbrockWTableau"]
