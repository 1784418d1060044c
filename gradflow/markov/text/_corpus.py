r"""The corpus (`docs/text.md`): a local UTF-8 file or folder, a string, or
the built-in corpus, read and tokenised into a [`gradflow.text.Corpus`][] (the
ids of its distinct units).

No download ever happens. Without a path the built-in corpus is used: the
English text of Python's documentation topics (`pydoc_data.topics`), which
ships with every CPython.

Corpora are read as a stream, in blocks of a few MiB, so memory stays bounded
whatever their size (beyond the array of token ids): each block is split into
tokens with vectorised NumPy (no Python object per token), tokens are counted
by a 64-bit hash of their characters, and each is written as a 32-bit id into
the corpus's id array.
"""

import os
from collections import Counter
from pathlib import Path

import equinox as eqx
import numpy as np

from ._checks import (
    check_block_bytes,
    check_level,
    check_min_tokens,
    check_progress,
    check_tail,
    check_vocab_size,
)
from ._read import (
    BLOCK_BYTES,
    file_blocks,
    looks_like_file_name,
    names_a_path,
    nul_error,
    progress_bar,
    quote,
    read_utf8,
    resolve_path,
    string_blocks,
)
from ._units import count_units


OTHER = "<other>"


BUILTIN = "builtin"


class Corpus(eqx.Module):
    """A tokenised text, held as the ids of its distinct units.

    For `level="word"` and `"char"` the units are the tokens. For `"bpe"` they
    are the pieces that byte-level BPE merges within (a word with its leading
    space, a run of punctuation, a run of whitespace); the BPE tokens
    themselves are learnt by [`gradflow.text.encode`][] for the vocabulary size
    it is given.

    **Fields:**

    - `level`: `"word"`, `"char"` or `"bpe"`.
    - `source`: where the text came from (a path, `"builtin"` or `"<text>"`).
    - `units`: the distinct units, in order of first occurrence.
    - `unit_counts`: how often each occurs.
    """

    level: str = eqx.field(static=True)
    source: str = eqx.field(static=True)
    units: tuple[str, ...] = eqx.field(static=True)
    unit_counts: np.ndarray
    blocks: tuple[np.ndarray, ...]

    def __len__(self) -> int:
        return int(self.unit_counts.sum())

    @property
    def tokens(self) -> tuple[str, ...]:
        """The token (unit) stream as strings, in reading order: one Python
        string per token, so only for small corpora."""
        units = self.units
        return tuple(units[i] for b in self.blocks for i in b.tolist())

    def counts(self) -> Counter:
        """Unit frequencies."""
        return Counter(dict(zip(self.units, self.unit_counts.tolist(), strict=True)))

    def vocabulary(self, vocab_size: int, tail: str = "other") -> tuple[str, ...]:
        """The `vocab_size - 1` most frequent tokens, most frequent first (ties in
        order of first occurrence), followed by `"<other>"`; with
        `tail="drop"`, the `vocab_size` most frequent tokens."""
        if self.level == "bpe":
            raise ValueError(
                "a BPE vocabulary is learnt for its size: use "
                "gf.text.encode(corpus, vocab_size).chain.tokens"
            )
        tail = check_tail(tail)
        order = _frequency_order(self.unit_counts)
        keep = check_vocab_size(vocab_size, len(self.units), self.source, tail)
        vocab = tuple(self.units[i] for i in order[:keep])
        return vocab + ((OTHER,) if tail == "other" else ())

    def __repr__(self) -> str:
        return (
            f"Corpus({len(self)} {self.level} {'pieces' if self.level == 'bpe' else 'tokens'}, "
            f"{len(self.units)} distinct, from {self.source})"
        )


def builtin_text() -> str:
    """The built-in English corpus: every topic of Python's documentation
    (`pydoc_data.topics`), in sorted topic order."""
    from pydoc_data.topics import topics

    return "\n\n".join(topics[k] for k in sorted(topics))


def read_text(
    path: str | os.PathLike | None = None, *, name: str = "path"
) -> tuple[str, str]:
    """Reads `path` (a UTF-8 file, or a folder of them, joined by blank lines)
    or, for `None`, the built-in corpus, whole into memory. Returns
    `(text, source)`. ([`gradflow.text.load`][] streams instead.)"""
    if path is None or (isinstance(path, str) and path == BUILTIN):
        return builtin_text(), BUILTIN
    files = resolve_path(path, name)
    source = str(Path(os.fspath(path)).expanduser())
    return "\n\n".join(read_utf8(name, f) for f in files), source


def load(
    path: str | os.PathLike | None = None,
    level: str = "word",
    *,
    min_tokens: int = 2,
    progress: bool = True,
    block_bytes: int = BLOCK_BYTES,
    name: str = "path",
) -> Corpus:
    r"""Reads and tokenises a local text corpus, streaming it in blocks.

    **Arguments:**

    - `path`: a UTF-8 text file; or a folder, whose files ending in
      `.txt`, `.raw`, `.tokens`, `.text` or `.md` are read recursively in sorted
      order (hidden and empty files skipped), for example a WikiText copy
      (`wikitext-103-raw/wiki.train.raw`) or TinyStories
      (`TinyStories-train.txt`); or `None` (or `"builtin"`) for the built-in
      corpus, the English text of Python's documentation topics.
    - `level`: `"word"` (lower-cased words, punctuation dropped), `"char"`, or
      `"bpe"` (the pieces byte-level BPE is trained on; see
      [`gradflow.text.encode`][]).
    - `min_tokens`: the fewest tokens accepted (at least one bigram).
    - `progress`: a progress bar over the bytes read, shown after 2 s.
    - `block_bytes`: bytes read, and tokenised, at a time (default 4 MiB):
      the memory a read takes beyond the token ids. The corpus does not
      depend on it: no token is split between two blocks.

    **Returns:** a [`gradflow.text.Corpus`][].

    **Raises:** `FileNotFoundError` for a missing path; `ValueError` for a
    file that is empty, binary (a NUL byte) or not UTF-8 (quoting the byte and
    its offset), a folder without text files, an unknown `level`, or a corpus
    with fewer than `min_tokens` tokens.

    **Example:**

    ```python
    import gradflow as gf
    corpus = gf.text.load()                  # built-in, no download
    corpus = gf.text.load("wikitext-2-raw/wiki.train.raw", level="char")
    ```
    """
    level = check_level(level)
    min_tokens = check_min_tokens(min_tokens)
    progress = check_progress(progress)
    block = check_block_bytes(block_bytes)
    if path is None or (isinstance(path, str) and path == BUILTIN):
        blocks = string_blocks(builtin_text(), block)
        return _corpus(blocks, level, BUILTIN, min_tokens, block)
    files = resolve_path(path, name)
    source = str(Path(os.fspath(path)).expanduser())
    bar = progress_bar(files, progress, source)
    try:
        blocks = file_blocks(name, files, bar, block)
        return _corpus(blocks, level, source, min_tokens, block)
    finally:
        if bar is not None:
            bar.close()


def _corpus(
    blocks, level: str, source: str, min_tokens: int, block_bytes: int = BLOCK_BYTES
) -> Corpus:
    counter = count_units(blocks, level, block_bytes)
    n = int(counter.counts.sum())
    if n < min_tokens:
        raise ValueError(
            f"the corpus from {source} is too small: {n} {level} tokens, "
            f"need at least {min_tokens}"
        )
    return Corpus(
        level=level,
        source=source,
        units=tuple(counter.names),
        unit_counts=counter.counts,
        blocks=tuple(counter.blocks),
    )


def corpus_from_string(
    text: str, level: str = "word", *, source: str = "<text>", min_tokens: int = 2
) -> Corpus:
    """Tokenises a string already in memory (see [`gradflow.text.load`][])."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    level = check_level(level)
    return _corpus(string_blocks(text), level, source, check_min_tokens(min_tokens))


def as_corpus(
    path_or_text, level: str, name: str = "path_or_text", progress: bool = True
) -> Corpus:
    """`None`/`"builtin"` -> built-in; a `Corpus` as is; a `Path`, or a one-line
    string naming an existing file or folder -> read it; any other string is
    the text itself."""
    if isinstance(path_or_text, Corpus):
        if path_or_text.level != level:
            raise ValueError(
                f"the corpus was tokenised at level {path_or_text.level!r}, "
                f"not {level!r}"
            )
        return path_or_text
    if path_or_text is None or isinstance(path_or_text, os.PathLike):
        return load(path_or_text, level, name=name, progress=progress)
    if isinstance(path_or_text, str):
        if path_or_text == BUILTIN:
            return load(None, level, progress=progress)
        if "\x00" in path_or_text:
            raise nul_error(name, path_or_text)
        if names_a_path(path_or_text):
            return load(path_or_text, level, name=name, progress=progress)
        if looks_like_file_name(path_or_text):
            # Looks like a file name, not prose: a typo should not be tokenised.
            raise FileNotFoundError(
                f"{name}: no such file or folder: {quote(path_or_text)}"
            )
        return corpus_from_string(path_or_text, level)
    raise TypeError(
        "path_or_text must be a path, a string of text, a gradflow.text.Corpus or "
        f"None, got {type(path_or_text).__name__}"
    )


def _frequency_order(counts: np.ndarray) -> np.ndarray:
    """Most frequent first; ties in order of first occurrence (the index)."""
    return np.argsort(-np.asarray(counts), kind="stable")
