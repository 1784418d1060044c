"""An independent NumPy implementation of `docs/model.md` ("Population loss"): the loss and a
hand-derived gradient (no autodiff), used to check gradflow's JAX code."""

import numpy as np


def _softmax(x, axis):
    x = x - x.max(axis=axis, keepdims=True)
    e = np.exp(x)
    return e / e.sum(axis=axis, keepdims=True)


def loss_and_grad(W0, W1, WQ, WK, P, pi):
    E = W0
    Q, K = WQ @ E, WK @ E
    S = Q.T @ K
    A = _softmax(S + np.log(pi)[None, :], axis=1)
    H = E @ A.T
    Z = W1 @ H
    Zmax = Z.max(axis=0)
    lse = Zmax + np.log(np.exp(Z - Zmax).sum(axis=0))
    loss = float(pi @ (lse - np.sum(P.T * Z, axis=0)))
    # Backward pass, by hand.
    G_Z = (_softmax(Z, axis=0) - P.T) * pi[None, :]
    G_W1 = G_Z @ H.T
    G_H = W1.T @ G_Z
    G_E = G_H @ A
    G_A = G_H.T @ E
    G_S = A * (G_A - np.sum(A * G_A, axis=1, keepdims=True))
    G_Q = K @ G_S.T
    G_K = Q @ G_S
    G_WQ = G_Q @ E.T
    G_WK = G_K @ E.T
    G_E = G_E + WQ.T @ G_Q + WK.T @ G_K
    return loss, (G_E, G_W1, G_WQ, G_WK)


def flatten(mats):
    return np.concatenate([np.ravel(m) for m in mats])


def unflatten(theta, d, m):
    sizes = [(m, d), (d, m), (m, m), (m, m)]
    out, k = [], 0
    for s in sizes:
        n = s[0] * s[1]
        out.append(theta[k : k + n].reshape(s))
        k += n
    return out


def sample_sequences(P, pi, num, length, seed):
    """`num` sequences of `length` tokens from the stationary chain."""
    rng = np.random.default_rng(seed)
    cum = np.cumsum(P, axis=1)
    x = np.empty((num, length), dtype=np.int64)
    x[:, 0] = np.searchsorted(np.cumsum(pi), rng.random(num) * np.cumsum(pi)[-1])
    for t in range(1, length):
        u = rng.random(num) * cum[x[:, t - 1], -1]
        x[:, t] = (cum[x[:, t - 1]] < u[:, None]).sum(axis=1)
    return np.minimum(x, P.shape[0] - 1)
