r"""The bigram chain of a stream of token ids: the bigram counts, their
smoothing (`"auto"`: pseudo-counts 1 % of the counts), and the
[`gradflow.text.TokenStream`][] that holds the ids with the strictly positive
bigram [`gradflow.MarkovChain`][] estimated from them.
"""

import warnings

import equinox as eqx
import numpy as np
from jaxtyping import Int

from ..chain import MarkovChain
from ._checks import check_smoothing


DEFAULT_SMOOTHING = "auto"
# With smoothing="auto" the pseudo-counts are this fraction of the bigram
# counts, spread evenly over the d^2 entries (`docs/text.md`, "Tokens and vocabulary"): small enough not
# to drown the data at any vocabulary size, large enough to keep every entry
# positive.
SMOOTHING_FRACTION = 0.01
# A chain whose pseudo-counts exceed this fraction of all counts gets a warning:
# its pi is pulled towards uniform (the vocabulary is too large for the corpus
# at that smoothing).
DROWNED_FRACTION = 0.1


class TokenStream(eqx.Module):
    r"""A corpus encoded on a fixed vocabulary, with its bigram chain: what
    [`gradflow.train_sgd`][] trains on (windows of the real text) and evaluates
    against (the population loss of `chain`).

    **Fields:**

    - `ids`: token ids, shape `(n,)`, of the smallest unsigned integer type that
      holds `d` (a NumPy array, or a read-only memory map of the cache file);
      id `k` is `chain.tokens[k]`; with `tail="other"` the last id is `<other>`.
    - `chain`: the bigram [`gradflow.MarkovChain`][] estimated from `ids`.
    - `source`: where the text came from.
    - `smoothing`: the pseudo-count added to every bigram count.
    - `smoothing_fraction`: the pseudo-counts' share of all counts,
      $d^2 \alpha / (n - 1 + d^2 \alpha)$ ($\alpha$ = `smoothing`, $n - 1$
      bigrams).
    - `pi_distance`: the total-variation distance between the chain's `pi` and
      the unigram frequencies of `ids`, $\frac12 \sum_k |\pi_k - f_k|$: how far
      smoothing moved the stationary distribution away from the text.
    """

    ids: Int[np.ndarray, " n"]
    chain: MarkovChain
    source: str = eqx.field(static=True)
    smoothing: float = eqx.field(static=True, default=float("nan"))
    smoothing_fraction: float = eqx.field(static=True, default=float("nan"))
    pi_distance: float = eqx.field(static=True, default=float("nan"))

    @property
    def d(self) -> int:
        return self.chain.d

    def __len__(self) -> int:
        return int(self.ids.shape[0])

    def with_smoothing(self, smoothing: float | str) -> "TokenStream":
        """The same ids with the bigram chain re-estimated at another
        `smoothing` (`"auto"` or a pseudo-count per entry; see
        [`gradflow.text.encode`][])."""
        return smoothed_stream(
            self.ids, self.chain.tokens or (), check_smoothing(smoothing), self.source
        )

    def __repr__(self) -> str:
        return (
            f"TokenStream({len(self)} tokens, d={self.d}, from {self.source}; "
            f"smoothing {self.smoothing:.3g} per entry = "
            f"{100 * self.smoothing_fraction:.3g} % of the counts, pi within "
            f"{self.pi_distance:.2g} (total variation) of the unigram frequencies)"
        )


def bigram_counts(ids: np.ndarray, d: int, block: int = 1 << 23) -> np.ndarray:
    r"""$c_{ij} = \#\{t: x_t = i, x_{t+1} = j\}$, counted in blocks of `ids`
    (which may be a memory map)."""
    counts = np.zeros(d * d, np.int64)
    n = ids.shape[0]
    for a in range(0, max(n - 1, 0), block):
        x = np.asarray(ids[a : min(a + block, n - 1) + 1], np.int64)
        counts += np.bincount(x[:-1] * d + x[1:], minlength=d * d)
    return counts.reshape(d, d)


def smoothed_stream(
    ids: np.ndarray, tokens: tuple[str, ...], smoothing: float | str, source: str
) -> "TokenStream":
    """The stream with its bigram chain; `smoothing="auto"` puts
    `SMOOTHING_FRACTION` of the bigram count on the table, evenly."""
    d = len(tokens)
    counts = bigram_counts(ids, d)
    n_bigrams = int(counts.sum())
    if smoothing == "auto":
        # total pseudo-count f / (1 - f) of the data, so that it is f of all
        alpha = SMOOTHING_FRACTION / (1 - SMOOTHING_FRACTION) * n_bigrams / d**2
    else:
        alpha = float(smoothing)
    table = counts + alpha
    chain = MarkovChain(table / table.sum(axis=1, keepdims=True), tokens=tokens)
    fraction = alpha * d**2 / (n_bigrams + alpha * d**2)
    # unigram counts from the bigram counts (every token but the last starts a
    # bigram): the same integers as a bincount of the stream, without an int64
    # copy of it (1.2 GB for 150 M tokens)
    unigrams = counts.sum(axis=1)
    unigrams[int(ids[-1])] += 1
    freq = unigrams / ids.shape[0]
    distance = 0.5 * float(np.abs(np.asarray(chain.pi) - freq).sum())
    if fraction > DROWNED_FRACTION:
        warnings.warn(
            f"vocab_size = {d} is too large for this corpus at smoothing = "
            f"{alpha:.3g}: {alpha * d**2:.4g} pseudo-counts against {n_bigrams} "
            f"bigrams ({100 * fraction:.0f} % of all counts), so pi is "
            f"{distance:.2f} (total variation) from the unigram frequencies; use "
            f"smoothing='auto' (1 %), a smaller vocab_size or a larger corpus",
            stacklevel=3,
        )
    return TokenStream(
        ids=ids,
        chain=chain,
        source=source,
        smoothing=float(alpha),
        smoothing_fraction=float(fraction),
        pi_distance=distance,
    )
