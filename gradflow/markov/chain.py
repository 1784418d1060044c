"""Markov chains over a vocabulary of `d` tokens (`docs/model.md`, "Data")."""

import math
import sys
from collections.abc import Sequence
from typing import Any, cast

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import xlogy

from .._core.custom_types import ArrayLikeMatrix, Scalar
from .._core.errors import is_number, show
from .._core.validate import as_float_array
from .custom_types import Distribution, Transition


_ROW_SUM_ATOL = 1e-8
_MAX_LISTED = 6


def _describe_list(items: Sequence, limit: int = _MAX_LISTED) -> str:
    shown = ", ".join(str(x) for x in items[:limit])
    if len(items) > limit:
        shown += f", ... ({len(items) - limit} more)"
    return shown


def _as_matrix(P: ArrayLikeMatrix) -> np.ndarray:
    """Converts to a float64 NumPy matrix, rejecting what is not a real matrix."""
    if P is None:
        raise TypeError(
            "transition matrix P must be a d x d array of probabilities, got None"
        )
    sparse = _is_sparse(P)
    private = sparse or isinstance(P, OwnedMatrix)
    if isinstance(P, OwnedMatrix):
        P = P.array
    try:
        # a SciPy sparse matrix (a bigram count table is mostly zeros) becomes
        # a dense array of gradflow's own: the loss reads P densely
        array = cast(Any, P).toarray() if sparse else np.asarray(P)
    except Exception as e:  # ragged lists and the like
        raise ValueError(
            f"transition matrix P could not be read as an array: {e}"
        ) from None
    if array.dtype == object or array.dtype.kind in "USV":
        raise TypeError(
            "transition matrix P must hold real numbers, got an array of dtype "
            f"{array.dtype}"
        )
    if array.dtype.kind == "c":
        raise TypeError("transition matrix P must be real, got a complex array")
    if array.dtype.kind == "b":
        raise TypeError("transition matrix P must hold probabilities, got booleans")
    if array.size == 0:
        raise ValueError(f"transition matrix P is empty (shape {array.shape})")
    if array.ndim != 2:
        raise ValueError(
            f"transition matrix P must be 2-dimensional, got shape {array.shape}"
        )
    if array.shape[0] != array.shape[1]:
        raise ValueError(f"transition matrix P must be square, got shape {array.shape}")
    if array.shape[0] < 2:
        raise ValueError(f"need at least d = 2 tokens, got d = {array.shape[0]}")
    # gradflow's own float64 copy (exactly one): validation divides it in place,
    # and JAX may share its memory on the CPU, so it must not be the caller's
    if private and array.dtype == np.float64:
        return array
    return array.astype(np.float64)


class OwnedMatrix:
    """A matrix a chain family built for the chain alone (`chains.py`): the
    chain takes it as its own instead of copying it (0.54 GB and 1.5 s of
    first-touch page faults at d = 8,192, measured under load)."""

    def __init__(self, array: np.ndarray):
        self.array = array


def _is_sparse(P) -> bool:
    """Whether P is a SciPy sparse matrix or array (SciPy itself is not
    imported unless the caller already has)."""
    sparse = sys.modules.get("scipy.sparse")
    return sparse is not None and sparse.issparse(P)


# Validation reads P a block of rows at a time (at most this many entries, 32 MB
# of float64), so that it needs O(d) memory beyond P itself: a d = 8,192 chain
# is 0.54 GB, and a boolean copy of it or the int64 indices of its nonzero
# entries (1.07 GB) would cost more than the gradient (docs/performance.md,
# "Large chains").
_BLOCK_ENTRIES = 1 << 22


def _row_slices(d: int):
    """Consecutive blocks of the rows of a d x d matrix, each at most
    `_BLOCK_ENTRIES` entries."""
    step = max(1, _BLOCK_ENTRIES // d)
    for start in range(0, d, step):
        yield slice(start, min(start + step, d))


def _chunks(rows: np.ndarray, length: int):
    """Consecutive pieces of the row indices `rows`, each at most
    `_BLOCK_ENTRIES` entries of rows of `length` entries."""
    step = max(1, _BLOCK_ENTRIES // length)
    for start in range(0, rows.size, step):
        yield rows[start : start + step]


def _reachable(P: np.ndarray, start: int, reverse: bool = False) -> np.ndarray:
    """Breadth-first search over the edges `P[u, v] > 0` (reversed: `v -> u`),
    a block of rows at a time: the BFS level of each node, -1 where it is not
    reached. Each row (reversed: each unreached row's entries in the frontier's
    columns) is read at most once per level, O(d^2) in all."""
    d = P.shape[0]
    level = np.full(d, -1, dtype=np.int64)
    level[start] = 0
    frontier = np.array([start])
    depth = 0
    while frontier.size and (level < 0).any():
        depth += 1
        reached = np.zeros(d, dtype=bool)
        if reverse:
            unseen = np.flatnonzero(level < 0)
            for rows in _chunks(unseen, frontier.size):
                reached[rows] = (P[np.ix_(rows, frontier)] > 0).any(axis=1)
        else:
            for rows in _chunks(frontier, d):
                reached |= (P[rows] > 0).any(axis=0)
        reached &= level < 0
        level[reached] = depth
        frontier = np.flatnonzero(reached)
    return level


def _communicating_classes(P: np.ndarray) -> list[list[int]]:
    """Strongly connected components (iterative Tarjan), each sorted. Only for
    the error message of a reducible chain."""
    d = P.shape[0]
    successors = [np.flatnonzero(P[i] > 0).tolist() for i in range(d)]
    index = [-1] * d
    low = [0] * d
    on_stack = [False] * d
    stack: list[int] = []
    classes: list[list[int]] = []
    counter = 0
    for root in range(d):
        if index[root] >= 0:
            continue
        work = [(root, 0)]
        while work:
            node, pos = work.pop()
            if pos == 0:
                index[node] = low[node] = counter
                counter += 1
                stack.append(node)
                on_stack[node] = True
            recurse = False
            succ = successors[node]
            while pos < len(succ):
                nxt = succ[pos]
                pos += 1
                if index[nxt] < 0:
                    work.append((node, pos))
                    work.append((nxt, 0))
                    recurse = True
                    break
                if on_stack[nxt]:
                    low[node] = min(low[node], index[nxt])
            if recurse:
                continue
            if low[node] == index[node]:
                members = []
                while True:
                    w = stack.pop()
                    on_stack[w] = False
                    members.append(w)
                    if w == node:
                        break
                classes.append(sorted(members))
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
    classes.sort(key=lambda c: c[0])
    return classes


def _period(P: np.ndarray, level: np.ndarray) -> int:
    """The period of an irreducible chain: the gcd over edges u -> v of
    level[u] + 1 - level[v], with BFS levels from any node; a block of rows at
    a time, stopping at 1 (a self-loop gives 1 at once)."""
    if (np.diagonal(P) > 0).any():
        return 1
    period = 0
    for rows in _row_slices(P.shape[0]):
        steps = np.abs(level[rows, None] + 1 - level[None, :])
        # gcd(0, g) = g: the entries that are not edges leave the gcd as it is
        period = int(
            np.gcd(period, np.gcd.reduce(np.where(P[rows] > 0, steps, 0), axis=None))
        )
        if period == 1:
            break
    return period


def _check_irreducible_aperiodic(P: np.ndarray) -> None:
    level = _reachable(P, 0)
    if (level < 0).any() or (_reachable(P, 0, reverse=True) < 0).any():
        classes = _communicating_classes(P)
        text = "; ".join("{" + _describe_list(c) + "}" for c in classes[:_MAX_LISTED])
        if len(classes) > _MAX_LISTED:
            text += f"; ... ({len(classes) - _MAX_LISTED} more)"
        raise ValueError(
            "transition matrix P is reducible (not every token can reach every "
            f"other): {len(classes)} communicating classes: {text}"
        )
    period = _period(P, level)
    if period != 1:
        raise ValueError(
            f"transition matrix P is periodic with period {period}; the chain must "
            "be aperiodic (for example, add a small probability of staying put)"
        )


def _first_and_count(masks) -> tuple[tuple[int, int] | None, int]:
    """The first (row, column) where a block's mask is set, and the count."""
    first, count = None, 0
    for start, mask in masks:
        n = int(np.count_nonzero(mask))
        if n and first is None:
            i, j = np.argwhere(mask)[0]
            first = (start + int(i), int(j))
        count += n
    return first, count


def _validate_transition(P: ArrayLikeMatrix, atol: float) -> np.ndarray:
    array = _as_matrix(P)
    d = array.shape[0]
    blocks = [(b.start, array[b]) for b in _row_slices(d)]
    first, count = _first_and_count((s, ~np.isfinite(x)) for s, x in blocks)
    if first is not None:
        i, j = first
        raise ValueError(
            f"transition matrix P has a non-finite entry: P[{i}, {j}] = {array[i, j]}"
            f" ({count} non-finite entries in all)"
        )
    first, count = _first_and_count((s, x < 0) for s, x in blocks)
    if first is not None:
        i, j = first
        raise ValueError(
            f"transition matrix P has a negative entry: P[{i}, {j}] = {float(array[i, j])!r}"
            f" ({count} negative entries in all)"
        )
    sums = np.concatenate([x.sum(axis=1) for _, x in blocks])
    off = np.abs(sums - 1.0) > atol
    if off.any():
        i = int(np.flatnonzero(off)[0])
        raise ValueError(
            f"row {i} of transition matrix P sums to {float(sums[i])!r}, not 1 (tolerance "
            f"{atol:g}; {int(off.sum())} rows off); normalise counts with "
            "P / P.sum(axis=1, keepdims=True)"
        )
    _check_irreducible_aperiodic(array)
    # Rows off by more than round-off are renormalised so that pi and the loss
    # see a stochastic matrix; a matrix already stochastic to round-off is kept
    # bit for bit (saving and loading a chain must not change it). `array` is
    # gradflow's own copy (`_as_matrix`), so it is divided in place.
    roundoff = 8 * np.finfo(np.float64).eps * d
    rescale = np.flatnonzero(np.abs(sums - 1.0) > roundoff)
    array[rescale] /= sums[rescale, None]
    return array


def stationary_distribution(P: np.ndarray) -> np.ndarray:
    r"""The stationary distribution $\pi$ of an irreducible transition matrix.

    Solved directly in float64 from $\pi (P - I) = 0$, $\sum_k \pi_k = 1$ (one
    LU solve plus one step of iterative refinement), not by power iteration.
    """
    P = np.asarray(P, dtype=np.float64)
    d = P.shape[0]
    # P^T - I built in place (the same numbers as `P.T - np.eye(d)`, one d x d
    # array fewer at d = 8,192)
    system = P.T.copy()
    system[np.diag_indices(d)] -= 1.0
    system[-1, :] = 1.0
    rhs = np.zeros(d)
    rhs[-1] = 1.0
    pi = np.linalg.solve(system, rhs)
    pi = pi + np.linalg.solve(system, rhs - system @ pi)
    # Irreducible chains have pi > 0; round-off can leave -1e-17 on tiny entries.
    pi = np.maximum(pi, np.finfo(np.float64).tiny)
    return pi / pi.sum()


def _check_known_pi(pi: ArrayLikeMatrix, P: np.ndarray) -> np.ndarray:
    pi = as_float_array("pi", pi, f"an array of {P.shape[0]} probabilities")
    if pi.shape != (P.shape[0],):
        raise ValueError(f"pi must have shape ({P.shape[0]},), got {pi.shape}")
    if not (np.all(np.isfinite(pi)) and np.all(pi > 0)):
        k = int(np.flatnonzero(~(np.isfinite(pi) & (pi > 0)))[0])
        raise ValueError(f"pi must be finite and > 0, got pi[{k}] = {float(pi[k])!r}")
    residual = float(np.max(np.abs(pi @ P - pi)))
    if abs(pi.sum() - 1) > 1e-12 or residual > 1e-12:
        raise ValueError(
            f"pi is not the stationary distribution of P: sum(pi) = "
            f"{float(pi.sum())!r}, max |pi P - pi| = {residual:.3g}"
        )
    return pi


def _check_tokens(tokens, d: int) -> tuple[str, ...]:
    if isinstance(tokens, str):
        raise TypeError(
            f"tokens must be a sequence of strings, got one string {show(tokens)}"
        )
    try:
        tokens = tuple(str(t) for t in tokens)
    except TypeError:
        raise TypeError(
            f"tokens must be a sequence of strings, got {type(tokens).__name__}"
        ) from None
    if len(tokens) != d:
        raise ValueError(
            f"got {len(tokens)} token labels for a chain of d = {d} tokens"
        )
    first: dict[str, int] = {}
    for k, t in enumerate(tokens):
        if t in first:
            raise ValueError(
                f"tokens must be distinct, but {t!r} labels both token {first[t]} "
                f"and token {k}"
            )
        first[t] = k
    return tokens


class MarkovChain(eqx.Module):
    r"""An irreducible, aperiodic Markov chain on tokens $0, \dots, d-1$.

    `P[i, j]` is the probability that token `j` follows token `i`. The chain is
    validated on construction and its stationary distribution `pi`
    ($\pi P = \pi$, $\sum \pi = 1$, $\pi > 0$) is solved exactly in float64.

    The chain is an `equinox.Module` whose arrays are data, so passing a new
    chain of the same size to a compiled function does not recompile it.

    **Arguments:**

    - `P`: a $d \times d$ array-like of transition probabilities, or a SciPy
      sparse matrix of them (a bigram table is mostly zeros: normalise its
      counts with `counts.multiply(1 / counts.sum(axis=1)).tocsr()`); the
      chain keeps its own dense float64 copy.
    - `tokens`: optional labels, one string per token (kept for figures).
    - `atol`: tolerance on each row sum; rows within it are renormalised.
    - `pi`: optional known stationary distribution (checked: $|\pi P - \pi|
      \le 10^{-12}$); families that know it exactly pass it, so that exact
      symmetries of $\pi$ survive (a linear solve would break them by
      round-off).

    **Raises:**

    `ValueError` naming the problem and the offending value: non-finite or
    negative entry, a row that does not sum to one, not 2-D, not square,
    $d < 2$, empty, reducible (listing the communicating classes) or periodic
    (giving the period); `pi` given but not stationary; duplicate or too
    few/many `tokens`. `TypeError` for `None`, strings, objects, complex or
    booleans. Each message is one line (see `docs/errors.md`).

    **Example:**

    ```python
    import gradflow as gf
    chain = gf.MarkovChain([[0.9, 0.1], [0.5, 0.5]])
    chain.pi  # Array([0.8333..., 0.1666...])
    ```
    """

    P: Transition
    pi: Distribution
    tokens: tuple[str, ...] | None = eqx.field(static=True)

    def __init__(
        self,
        P: ArrayLikeMatrix,
        tokens: Sequence[str] | None = None,
        *,
        atol: float = _ROW_SUM_ATOL,
        pi: ArrayLikeMatrix | None = None,
    ):
        if not is_number(atol) or not (math.isfinite(float(atol)) and atol >= 0):
            raise ValueError(
                f"atol must be a finite number >= 0, got atol = {show(atol)}"
            )
        matrix = _validate_transition(P, float(atol))
        if pi is None:
            pi = stationary_distribution(matrix)
        else:
            pi = _check_known_pi(pi, matrix)
        if tokens is not None:
            tokens = _check_tokens(tokens, matrix.shape[0])
        self.P = jnp.asarray(matrix, dtype=jnp.float64)
        self.pi = jnp.asarray(pi, dtype=jnp.float64)
        self.tokens = tokens

    @property
    def d(self) -> int:
        """The vocabulary size."""
        return self.P.shape[-1]

    @property
    def unigram_entropy(self) -> Scalar:
        r"""$H(\pi) = -\sum_k \pi_k \log \pi_k$: the loss of the unigram model."""
        return -jnp.sum(xlogy(self.pi, self.pi))

    @property
    def conditional_entropy(self) -> Scalar:
        r"""$\sum_i \pi_i H(P_{i\cdot})$: the entropy rate, a floor for the loss."""
        return -jnp.sum(self.pi * jnp.sum(xlogy(self.P, self.P), axis=-1))

    def label(self, k: int) -> str:
        """The label of token `k` (its index when the chain has no labels)."""
        return self.tokens[k] if self.tokens is not None else str(k)

    def __repr__(self) -> str:
        pi = np.asarray(self.pi)
        return (
            f"MarkovChain(d={self.d}, pi=[{', '.join(f'{p:.4g}' for p in pi[:8])}"
            f"{', ...' if self.d > 8 else ''}])"
        )


def entropy_bounds(chain: MarkovChain) -> dict[str, float]:
    """The three loss levels a trajectory is read against: `log d`, `H(pi)` and
    the conditional entropy."""
    return {
        "log_d": math.log(chain.d),
        "unigram": float(chain.unigram_entropy),
        "conditional": float(chain.conditional_entropy),
    }
