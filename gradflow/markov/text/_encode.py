r"""Encoding a corpus on a vocabulary (`docs/text.md`): keep the `vocab_size`
most frequent tokens (words, characters or byte-level BPE tokens trained on
the corpus itself), map the corpus's unit ids through one lookup table into an
array of the smallest integer type that holds `d` (optionally a memory-mapped
cache file), and estimate its strictly positive bigram
[`gradflow.MarkovChain`][]: `encode` and `from_text`.
"""

import json
import os
from pathlib import Path
from typing import cast

import equinox as eqx
import numpy as np

from ._bigram import DEFAULT_SMOOTHING, MarkovChain, TokenStream, smoothed_stream
from ._bpe import bpe_labels, bpe_sequences, train_bpe
from ._checks import (
    check_level,
    check_progress,
    check_smoothing,
    check_tail,
    check_vocab_size,
    check_vocab_type,
    show,
)
from ._corpus import BUILTIN, OTHER, Corpus, as_corpus
from ._read import names_a_path, quote, resolve_path, stat
from ._units import id_dtype


class _Units(eqx.Module):
    """How the units of a corpus become tokens: unit `u` is the token sequence
    `flat[offsets[u]:offsets[u] + lengths[u]]`; `labels[t]` names token `t`."""

    flat: np.ndarray
    lengths: np.ndarray
    labels: tuple[str, ...] = eqx.field(static=True)

    @property
    def offsets(self) -> np.ndarray:
        return np.concatenate([[0], np.cumsum(self.lengths)[:-1]]).astype(np.int64)

    def token_counts(self, unit_counts: np.ndarray) -> np.ndarray:
        weights = np.repeat(np.asarray(unit_counts, np.float64), self.lengths)
        counts = np.bincount(self.flat, weights=weights, minlength=len(self.labels))
        return np.rint(counts).astype(np.int64)

    def first_seen(self) -> np.ndarray:
        """Tokens in order of first occurrence in the stream (units are)."""
        tokens, first = np.unique(self.flat, return_index=True)
        seen = np.full(len(self.labels), self.flat.size, np.int64)
        seen[tokens] = first
        return seen


def _units_to_tokens(corpus: Corpus, vocab_size: int, tail: str):
    if corpus.level != "bpe":
        n = len(corpus.units)
        return _Units(
            flat=np.arange(n, dtype=np.int64),
            lengths=np.ones(n, np.int64),
            labels=corpus.units,
        )
    # Train to `vocab_size` tokens; where fewer than the vocabulary needs occur
    # in the encoded stream (a merged-away intermediate), train a little larger.
    need = vocab_size
    target = vocab_size
    for _ in range(4):
        tokenizer = train_bpe(corpus, target)
        flat, lengths = bpe_sequences(corpus, tokenizer)
        units = _Units(flat=flat, lengths=lengths, labels=tuple(bpe_labels(tokenizer)))
        occurring = int((units.token_counts(corpus.unit_counts) > 0).sum())
        if occurring >= need or tokenizer.get_vocab_size() < target:
            return units
        target += need - occurring
    return units


def _vocab_map(corpus: Corpus, units: _Units, vocab_size: int, tail: str):
    """(labels of the vocabulary, token -> vocabulary id, -1 for dropped)."""
    counts = units.token_counts(corpus.unit_counts)
    occurring = np.flatnonzero(counts > 0)
    seen = units.first_seen()
    # most frequent first, ties in order of first occurrence
    order = occurring[np.lexsort((seen[occurring], -counts[occurring]))]
    keep = check_vocab_size(vocab_size, order.size, corpus.source, tail)
    kept = order[:keep]
    remap = np.full(len(units.labels), -1 if tail == "drop" else keep, np.int64)
    remap[kept] = np.arange(keep)
    labels = tuple(units.labels[t] for t in kept)
    if tail == "other":
        labels += (OTHER,)
    return labels, remap


def _write_ids(corpus: Corpus, units: _Units, remap: np.ndarray, out) -> int:
    """Writes the encoded stream into `out` (or, for `out=None`, only counts
    it); returns its length."""
    seq = remap[units.flat]
    lengths = units.lengths
    if (seq < 0).any():  # tail="drop": tokens outside the vocabulary vanish
        kept = seq >= 0
        owner = np.repeat(np.arange(lengths.size), lengths)
        lengths = np.bincount(owner[kept], minlength=lengths.size)
        seq = seq[kept]
    offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    simple = bool((lengths == 1).all())
    n = 0
    for block in corpus.blocks:
        if simple:
            piece = seq[block]
        else:
            length = lengths[block]
            total = int(length.sum())
            start = np.repeat(offsets[block] - np.cumsum(length) + length, length)
            piece = seq[start + np.arange(total)]
        if out is not None:
            out[n : n + piece.size] = piece
        n += piece.size
    return n


def _stream_length(corpus: Corpus, units: _Units, remap: np.ndarray) -> int:
    lengths = units.lengths
    seq = remap[units.flat]
    if (seq < 0).any():
        owner = np.repeat(np.arange(lengths.size), lengths)
        lengths = np.bincount(owner[seq >= 0], minlength=lengths.size)
    return int(np.dot(corpus.unit_counts, lengths))


def _cache_key(path_or_text, level, vocab_size, tail) -> dict | None:
    """What a cache file must match: the files (sizes and modification times)
    or the text's digest, and the tokenisation settings."""
    import hashlib

    if isinstance(path_or_text, Corpus):
        return None
    key = {"format": "gradflow-token-ids", "version": 1, "level": level}
    key.update(vocab_size=int(vocab_size), tail=tail)
    if path_or_text is None or path_or_text == BUILTIN:
        import sys

        key["source"] = [BUILTIN, sys.version]
    elif isinstance(path_or_text, os.PathLike) or names_a_path(path_or_text):
        files = resolve_path(path_or_text, "path_or_text")
        key["source"] = [
            [
                str(f.resolve()),
                cast(os.stat_result, stat(f)).st_size,
                cast(os.stat_result, stat(f)).st_mtime_ns,
            ]
            for f in files
        ]
    else:
        digest = hashlib.blake2b(path_or_text.encode("utf-8", "surrogatepass"))
        key["source"] = ["<text>", digest.hexdigest()]
    return key


def _check_cache(cache) -> Path | None:
    if cache is None:
        return None
    if not isinstance(cache, (str, os.PathLike)) or isinstance(cache, bytes):
        raise TypeError(f"cache must be a path or None, got {type(cache).__name__}")
    raw = os.fspath(cache)
    if "\x00" in raw or not raw.strip():
        raise ValueError(
            f"cache must be a file path ending in .npy, got cache = {show(raw)}"
        )
    path = Path(raw).expanduser()
    if path.suffix != ".npy":
        raise ValueError(
            f"cache must be a file path ending in .npy, got cache = {show(raw)}"
        )
    if not path.parent.is_dir():
        raise FileNotFoundError(f"cache: no such folder: {quote(path.parent)}")
    return path


def _read_cache(path: Path, key: dict):
    meta_path = path.with_name(path.name + ".json")
    try:
        meta = json.loads(meta_path.read_text())
        if {k: meta.get(k) for k in key} != json.loads(json.dumps(key)):
            return None
        return np.load(path, mmap_mode="r"), tuple(meta["tokens"]), meta["source_label"]
    except (OSError, ValueError, KeyError):
        return None


def encode(
    path_or_text=None,
    vocab_size: int = 30,
    *,
    level: str = "word",
    smoothing: float | str = DEFAULT_SMOOTHING,
    tail: str = "other",
    cache: str | os.PathLike | None = None,
    progress: bool = True,
) -> TokenStream:
    r"""Encodes a corpus on its `vocab_size` most frequent tokens and estimates
    its bigram chain.

    With `tail="other"` (default) the vocabulary is the `vocab_size - 1` most
    frequent tokens (most frequent first, ties by first occurrence) plus
    `<other>`, which stands for every remaining token; with `tail="drop"` it is
    the `vocab_size` most frequent tokens, and every other token is removed
    from the stream (its neighbours become adjacent). At `level="bpe"`, a
    byte-level BPE tokenizer is first trained on the corpus to `vocab_size`
    tokens (see [`gradflow.text.train_bpe`][]).

    The bigram chain is $P_{ij} \propto c_{ij} + \alpha$ with $c_{ij}$ the
    number of times token `j` follows token `i` in the encoded stream; any
    $\alpha > 0$ makes every entry positive, so the chain is irreducible and
    aperiodic. With `smoothing="auto"` (default) $\alpha$ scales with the
    corpus: the $d^2 \alpha$ pseudo-counts are 1 % of all counts
    ($\alpha = \frac{0.01}{0.99} (n - 1) / d^2$ for $n - 1$ bigrams), so they
    never drown the data, whatever $d$. The stream reports $\alpha$, that
    fraction and the distance of `pi` from the unigram frequencies; a chain
    whose pseudo-counts are over 10 % of all counts (a fixed `smoothing` on a
    corpus too small for `vocab_size`) gets a `UserWarning` saying so.

    **Arguments:** as [`gradflow.chains.from_text`][], and

    - `cache`: a `.npy` path: the ids are written there as a memory map (with
      the settings in `<cache>.json` beside it) and read back from it by a
      later call with the same files, sizes, modification times and settings.
      Without it nothing is written anywhere.
    - `progress`: a progress bar over the bytes read (after 2 s).

    **Returns:** a [`gradflow.text.TokenStream`][] (`ids` and `chain`).
    """
    level = check_level(level)
    tail = check_tail(tail)
    vocab_size = check_vocab_type(vocab_size)
    progress = check_progress(progress)
    smoothing = check_smoothing(smoothing)
    cache = _check_cache(cache)
    key = None
    if cache is not None:
        key = _cache_key(path_or_text, level, vocab_size, tail)
        hit = None if key is None else _read_cache(cache, key)
        if hit is not None:
            ids, tokens, source = hit
            return smoothed_stream(ids, tokens, smoothing, source)
    corpus = as_corpus(path_or_text, level, progress=progress)
    units = _units_to_tokens(corpus, vocab_size, tail)
    labels, remap = _vocab_map(corpus, units, vocab_size, tail)
    d = len(labels)
    n = _stream_length(corpus, units, remap)
    if n < 2:
        raise ValueError(
            f"the corpus from {corpus.source} is too small: {n} tokens are left "
            f"in the vocabulary of {vocab_size} (tail='drop'), need at least 2"
        )
    dtype = id_dtype(d)
    if cache is None:
        ids = np.empty(n, dtype)
    else:
        ids = np.lib.format.open_memmap(cache, mode="w+", dtype=dtype, shape=(n,))
    _write_ids(corpus, units, remap, ids)
    if cache is not None:
        assert isinstance(ids, np.memmap)
        ids.flush()
        del ids
        meta = {**(key or {}), "tokens": list(labels), "source_label": corpus.source}
        cache.with_name(cache.name + ".json").write_text(json.dumps(meta))
        ids = np.load(cache, mmap_mode="r")
    return smoothed_stream(ids, labels, smoothing, corpus.source)


def from_text(
    path_or_text=None,
    vocab_size: int = 30,
    *,
    level: str = "word",
    smoothing: float | str = DEFAULT_SMOOTHING,
    tail: str = "other",
    progress: bool = True,
) -> MarkovChain:
    r"""The bigram Markov chain of a text (`docs/text.md`, "Tokens and vocabulary").

    **Arguments:**

    - `path_or_text`: a path to a UTF-8 file or a folder of them (see
      [`gradflow.text.load`][]); a string of text; a
      [`gradflow.text.Corpus`][]; or `None` for the built-in corpus (Python's
      documentation topics). A string is a path when it names an existing file
      or folder, and text otherwise (a one-line string that ends in a text
      suffix and does not exist is a missing file).
    - `vocab_size`: $d$, from 2 up to the number of distinct tokens.
    - `level`: `"word"`, `"char"` or `"bpe"` (byte-level BPE trained on the
      corpus to `vocab_size` tokens with Hugging Face `tokenizers`).
    - `smoothing`: `"auto"` (default: pseudo-counts 1 % of the bigram counts,
      spread evenly over the $d^2$ entries) or a number $\alpha > 0$ added to
      every bigram count (1 is Laplace's add-one, which at $d^2 \gg n$ makes
      the chain nearly uniform).
    - `tail`: `"other"` (the `vocab_size - 1` most frequent tokens plus
      `<other>` for all the rest) or `"drop"` (the `vocab_size` most frequent
      tokens; the rest are removed from the stream).
    - `progress`: a progress bar over the bytes read (after 2 s).

    **Returns:** a [`gradflow.MarkovChain`][] whose `tokens` are the vocabulary,
    most frequent first (`"<other>"` last with `tail="other"`).

    **Raises:** `FileNotFoundError` (missing file), `ValueError` (empty,
    binary or non-UTF-8 file, a string with a NUL byte, a too-small corpus,
    `vocab_size < 2` or above the number of distinct tokens, `smoothing <= 0`
    or a string other than `"auto"`,
    an unknown `level` or `tail`).

    **Example:**

    ```python
    chain = gf.chains.from_text(None, vocab_size=30)   # built-in corpus
    chain.tokens[:3]                                    # ('the', 'a', 'is') ...
    chain = gf.chains.from_text(None, vocab_size=512, level="bpe", tail="drop")
    ```
    """
    return encode(
        path_or_text,
        vocab_size,
        level=level,
        smoothing=smoothing,
        tail=tail,
        progress=progress,
    ).chain
