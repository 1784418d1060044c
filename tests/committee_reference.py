"""An independent implementation of the soft committee machine's population
gradient flow (Saad and Solla 1995), for tests/test_committee.py and
benchmarks/problems.py: the gradient derived by hand in the order parameters
and written in NumPy (no JAX, no autodiff, nothing of gradflow), solved with
SciPy's `DOP853`.

With $F(c, a, b) = \\frac2\\pi\\arcsin(c/\\sqrt{(1 + a)(1 + b)})$,

    L = 1/2 sum_kl F(Q_kl, Q_kk, Q_ll) - sum_kn F(R_kn, Q_kk, T_nn) + const,

$Q = WW^T$, $R = WV^T$, $T = VV^T$. With $G_Q = \\partial L/\\partial Q$ (each
entry an independent variable) and $G_R = \\partial L/\\partial R$:
$\\nabla_W L = (G_Q + G_Q^T)W + G_R V$.
"""

import numpy as np


def _f_parts(c, a, b):
    """F and its partial derivatives in c, a and b (arrays that broadcast)."""
    root = np.sqrt((1 + a) * (1 + b))
    z = c / root
    fp = (2 / np.pi) / np.sqrt(1 - z * z)
    F = (2 / np.pi) * np.arcsin(z)
    return F, fp / root, -fp * z / (2 * (1 + a)), -fp * z / (2 * (1 + b))


def loss(W, V):
    """The population loss (constant term included)."""
    Q, R, T = W @ W.T, W @ V.T, V @ V.T
    q, t = np.diag(Q), np.diag(T)
    FQ = _f_parts(Q, q[:, None], q[None, :])[0]
    FR = _f_parts(R, q[:, None], t[None, :])[0]
    FT = _f_parts(T, t[:, None], t[None, :])[0]
    return 0.5 * FQ.sum() - FR.sum() + 0.5 * FT.sum()


def grad(W, V):
    """The gradient of `loss` with respect to the students' weights `W`."""
    Q, R = W @ W.T, W @ V.T
    q, t = np.diag(Q), np.sum(V * V, axis=1)
    _, Fc, Fa, Fb = _f_parts(Q, q[:, None], q[None, :])
    GQ = 0.5 * Fc
    # Q_kk is the a of row k and the b of column k of the first sum
    GQ[np.diag_indices_from(GQ)] += 0.5 * (Fa.sum(axis=1) + Fb.sum(axis=0))
    _, Rc, Ra, _ = _f_parts(R, q[:, None], t[None, :])
    GQ[np.diag_indices_from(GQ)] -= Ra.sum(axis=1)
    return (GQ + GQ.T) @ W - Rc @ V


def solve(W0, V, ts, *, rtol=1e-11, atol=1e-13, events=()):
    """`scipy.integrate.solve_ivp` with `DOP853` on dW/dt = -grad(W): the
    states at `ts` (shape `(len(ts), K, N)`) and, for each level in `events`,
    the first time the loss falls through it."""
    from scipy.integrate import solve_ivp

    shape = np.shape(W0)

    def field(t, y):
        return -grad(y.reshape(shape), V).ravel()

    def crossing(level):
        def event(t, y):
            return loss(y.reshape(shape), V) - level

        event.direction = -1
        return event

    sol = solve_ivp(
        field,
        (float(ts[0]), float(ts[-1])),
        np.ravel(W0),
        method="DOP853",
        t_eval=np.asarray(ts),
        rtol=rtol,
        atol=atol,
        events=[crossing(level) for level in events],
    )
    assert sol.success, sol.message
    times = [float(e[0]) if len(e) else float("nan") for e in sol.t_events or []]
    return sol.y.T.reshape((len(ts), *shape)), times, sol


__all__ = ["grad", "loss", "solve"]
