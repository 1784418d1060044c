r"""Families of Markov chains used in the study and the tests.

Every function returns a validated [`gradflow.MarkovChain`][].

- [`sticky`][gradflow.chains.sticky]: one frequent token, `d - 1` rare ones
  with a small asymmetry `delta`, and a probability `rho` of repeating the
  current token (the paper's scenario).
- [`zipf`][gradflow.chains.zipf]: a Zipf-distributed vocabulary.
- [`random`][gradflow.chains.random]: random rows (Dirichlet) around a Zipf
  profile: a chain with genuine bigram structure.
- [`gaussian_logits`][gradflow.chains.gaussian_logits]: every row a softmax
  of Gaussian logits: dense bigram structure, no zero entries.
"""

import numpy as np

from .._core.errors import show
from .._core.validate import (
    as_float_array,
    check_integer,
    check_number,
    check_seed,
)
from .chain import MarkovChain, OwnedMatrix


def _check_d(d: int, least: int = 2) -> int:
    d = check_integer("d", d)
    if d < least:
        raise ValueError(f"d must be at least {least}, got d = {d}")
    return int(d)


def _check_open_unit(name: str, value: float, low_closed: bool = False) -> float:
    value = check_number(name, value)
    ok = (0 <= value < 1) if low_closed else (0 < value < 1)
    if not np.isfinite(value) or not ok:
        interval = "[0, 1)" if low_closed else "(0, 1)"
        raise ValueError(f"{name} must lie in {interval}, got {name} = {value}")
    return value


def _sticky_matrix(pi: np.ndarray, rho: float) -> np.ndarray:
    """$P = (1 - \\rho) \\mathbf{1} \\pi^T + \\rho I$: its stationary law is `pi`."""
    d = pi.shape[0]
    # the same numbers as `(1 - rho) * outer(ones, pi) + rho * eye(d)`, without
    # its three d x d temporaries
    P = np.empty((d, d))
    P[:] = (1.0 - rho) * pi
    P[np.diag_indices(d)] += rho
    return P


def _check_delta(delta: float) -> float:
    delta = check_number("delta", delta)
    if not np.isfinite(delta) or abs(delta) >= 1:
        raise ValueError(f"delta must lie in (-1, 1), got delta = {delta}")
    return delta


def _check_exponent(exponent: float) -> float:
    exponent = check_number("exponent", exponent)
    if not np.isfinite(exponent) or exponent < 0:
        raise ValueError(f"exponent must be finite and >= 0, got {exponent}")
    return exponent


def sticky_pi(d: int, top_mass: float, delta: float) -> np.ndarray:
    """The stationary distribution of [`sticky`][gradflow.chains.sticky]."""
    d = _check_d(d)
    top_mass = _check_open_unit("top_mass", top_mass)
    delta = _check_delta(delta)
    pi = np.empty(d)
    pi[0] = top_mass
    pi[1:] = (1.0 - top_mass) / (d - 1) * (1.0 + delta * np.linspace(1.0, -1.0, d - 1))
    return pi / pi.sum()


def sticky(
    d: int = 6, top_mass: float = 0.5, rho: float = 0.5, delta: float = 0.05
) -> MarkovChain:
    r"""The paper's chain: one frequent token, `d - 1` nearly equal rare ones.

    $\pi$ is `(top_mass, the rest shared equally)`, the rare part scaled by
    `1 + delta * linspace(1, -1, d - 1)` and the whole renormalised; then
    $P = (1 - \rho)\,\mathbf{1}\pi^\top + \rho I$, so that each token repeats
    with extra probability `rho` and $\pi$ stays stationary.

    `delta` is the asymmetry among rare tokens that lifts the degenerate
    critical point and opens a new embedding direction; `delta = 0` leaves the
    rare tokens exactly symmetric.

    **Arguments:**

    - `d`: vocabulary size, at least 2.
    - `top_mass`: stationary probability of token 0, in (0, 1).
    - `rho`: extra probability of repeating the current token, in [0, 1).
    - `delta`: asymmetry among the rare tokens, in (-1, 1).

    **Example:** `gf.chains.sticky(6, 0.5, 0.5, 0.05)`
    """
    d = _check_d(d)
    top_mass = _check_open_unit("top_mass", top_mass)
    rho = _check_open_unit("rho", rho, low_closed=True)
    pi = sticky_pi(d, top_mass, _check_delta(delta))
    return MarkovChain(OwnedMatrix(_sticky_matrix(pi, rho)), pi=pi)


def zipf_profile(d: int, exponent: float = 1.0) -> np.ndarray:
    r"""$z_k \propto (k + 1)^{-s}$, normalised: the Zipf law of rank `k`."""
    d = _check_d(d, least=1)
    exponent = _check_exponent(exponent)
    z = np.arange(1, d + 1, dtype=np.float64) ** (-exponent)
    return z / z.sum()


def zipf(d: int = 8, exponent: float = 1.0, rho: float = 0.0) -> MarkovChain:
    r"""A chain whose stationary law is Zipf: $\pi_k \propto (k+1)^{-s}$.

    $P = (1 - \rho)\,\mathbf{1}\pi^\top + \rho I$, as in
    [`sticky`][gradflow.chains.sticky]. With `rho = 0` tokens are i.i.d.

    **Arguments:**

    - `d`: vocabulary size, at least 2.
    - `exponent`: the Zipf exponent $s \ge 0$ ($s = 0$ is uniform).
    - `rho`: extra probability of repeating the current token, in [0, 1).
    """
    d = _check_d(d)
    exponent = _check_exponent(exponent)
    rho = _check_open_unit("rho", rho, low_closed=True)
    pi = zipf_profile(d, exponent)
    return MarkovChain(OwnedMatrix(_sticky_matrix(pi, rho)), pi=pi)


def random(
    d: int = 8,
    *,
    seed: int = 0,
    concentration: float = 1.0,
    exponent: float = 1.0,
) -> MarkovChain:
    r"""Random rows around a Zipf profile: a chain with real bigram structure.

    Each row is drawn independently, $P_{i\cdot} \sim
    \mathrm{Dirichlet}(\text{concentration} \cdot d \cdot z)$, with $z$ the
    Zipf profile of `exponent`. Rows have mean $z$; a large `concentration`
    makes every row close to $z$, a small one makes rows sparse and different.
    Entries are floored at `1e-12` (then renormalised) so the chain is always
    irreducible and aperiodic.

    **Arguments:**

    - `d`: vocabulary size, at least 2.
    - `seed`: NumPy seed; the same seed gives the same chain everywhere.
    - `concentration`: Dirichlet concentration per token, > 0.
    - `exponent`: Zipf exponent of the mean row, finite and $\ge 0$.
    """
    d = _check_d(d)
    concentration = check_number("concentration", concentration)
    if not np.isfinite(concentration) or concentration <= 0:
        raise ValueError(f"concentration must be > 0, got {concentration}")
    exponent = _check_exponent(exponent)
    seed = check_seed(seed)
    if seed < 0:
        raise ValueError(f"seed must be >= 0 (a NumPy seed), got seed = {seed}")
    rng = np.random.default_rng(seed)
    alpha = concentration * d * zipf_profile(d, exponent)
    P = rng.dirichlet(alpha, size=d)
    P = np.maximum(P, 1e-12)
    return MarkovChain(OwnedMatrix(P / P.sum(axis=1, keepdims=True)))


def gaussian_logits(d: int = 8, *, seed: int = 0, scale: float = 1.0) -> MarkovChain:
    r"""Rows that are softmaxes of Gaussian logits: dense bigram structure.

    $P_{i\cdot} = \mathrm{softmax}(\text{scale} \cdot g_i)$ with every entry of
    $g_i \in \mathbb{R}^d$ i.i.d. $\mathcal{N}(0, 1)$. Every entry is positive,
    so the chain is irreducible and aperiodic; a larger `scale` makes rows more
    peaked (lower conditional entropy) and more different from each other.

    **Arguments:**

    - `d`: vocabulary size, at least 2.
    - `seed`: NumPy seed; the same seed gives the same chain everywhere.
    - `scale`: standard deviation of the logits, finite and > 0.
    """
    d = _check_d(d)
    scale = check_number("scale", scale)
    if not np.isfinite(scale) or scale <= 0:
        raise ValueError(f"scale must be finite and > 0, got scale = {scale}")
    seed = check_seed(seed)
    if seed < 0:
        raise ValueError(f"seed must be >= 0 (a NumPy seed), got seed = {seed}")
    logits = scale * np.random.default_rng(seed).standard_normal((d, d))
    logits -= logits.max(axis=1, keepdims=True)
    P = np.exp(logits)
    return MarkovChain(OwnedMatrix(P / P.sum(axis=1, keepdims=True)))


def from_pi(pi, lam: float = 0.5) -> MarkovChain:
    r"""The paper's chain for a stationary law of your choice:
    $P = \lambda I + (1 - \lambda)\,\mathbf{1}\pi^\top$.

    Each next token repeats the current one with probability $\lambda$ and is
    otherwise drawn afresh from $\pi$, so $\pi$ is stationary ($\pi P = \pi$)
    for every $\lambda$. [`sticky`][gradflow.chains.sticky] is this chain with
    its own one-frequent-token $\pi$; here $\pi$ is yours (for example a
    strongly skewed one, `[0.7, 0.12, 0.1, 0.08]`, the main scenario of
    `docs/paper.md`).

    **Arguments:**

    - `pi`: the stationary distribution, a 1-D sequence of at least 2
      probabilities, each > 0, summing to 1 (to 1e-8; then renormalised).
    - `lam`: the probability $\lambda$ of repeating the current token, in
      [0, 1) (`lam = 0`: i.i.d. tokens).

    **Returns:** a [`gradflow.MarkovChain`][] with `P` as above and `pi` as given.

    **Example:** `gf.chains.from_pi([0.7, 0.12, 0.1, 0.08], lam=0.5)`
    """
    if isinstance(pi, (str, bytes)) or pi is None or np.ndim(pi) == 0:
        raise TypeError(
            f"pi must be a 1-D sequence of probabilities, got pi = {show(pi)}"
        )
    array = as_float_array("pi", pi, "a 1-D sequence of probabilities")
    if array.ndim != 1 or array.size < 2:
        raise ValueError(
            f"pi must be 1-D with at least 2 entries, got shape {array.shape}"
        )
    bad = np.flatnonzero(~np.isfinite(array) | (array <= 0))
    if bad.size:
        k = int(bad[0])
        raise ValueError(
            f"pi must be finite and > 0 everywhere, got pi[{k}] = {array[k]}"
        )
    total = float(array.sum())
    if abs(total - 1.0) > 1e-8:
        raise ValueError(
            f"pi must sum to 1, got sum(pi) = {total:.10g}; pass pi / sum(pi)"
        )
    lam = _check_open_unit("lam", lam, low_closed=True)
    array = array / total
    return MarkovChain(OwnedMatrix(_sticky_matrix(array, lam)), pi=array)


from .text._encode import from_text as from_text  # noqa: E402


__all__ = [
    "from_pi",
    "from_text",
    "gaussian_logits",
    "random",
    "sticky",
    "sticky_pi",
    "zipf",
    "zipf_profile",
]
