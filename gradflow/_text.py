r"""Real text (SPEC section 7): read local UTF-8 files, tokenise them, keep the
`vocab_size - 1` most frequent tokens plus `<other>`, and estimate a strictly
positive bigram [`gradflow.MarkovChain`][].

No download ever happens. Without a path the built-in corpus is used: the
English text of Python's documentation topics (`pydoc_data.topics`), which
ships with every CPython.
"""

import os
import re
from collections import Counter
from pathlib import Path

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Int

from ._chain import MarkovChain
from ._errors import show


OTHER = "<other>"
LEVELS = ("word", "char")
DEFAULT_SMOOTHING = 1.0
# Suffixes read when `path` is a folder: plain text, WikiText's `.raw` and
# `.tokens` files, TinyStories' `.txt`.
TEXT_SUFFIXES = (".txt", ".raw", ".tokens", ".text", ".md")
BUILTIN = "builtin"

# A word is a run of letters/digits (Unicode-aware), with inner apostrophes
# kept ("don't"); punctuation, markup (WikiText's "@-@", "= = Title = =") and
# code symbols are dropped, so that the vocabulary is made of words.
_WORD = re.compile(r"[^\W_]+(?:'[^\W_]+)*")
_SPACE = re.compile(r"\s+")


class Corpus(eqx.Module):
    """A tokenised text.

    **Fields:**

    - `tokens`: the token stream, in reading order (strings).
    - `level`: `"word"` or `"char"`.
    - `source`: where the text came from (a path, `"builtin"` or `"<text>"`).
    """

    tokens: tuple[str, ...]
    level: str
    source: str

    def __len__(self) -> int:
        return len(self.tokens)

    def counts(self) -> Counter:
        """Token frequencies."""
        return Counter(self.tokens)

    def vocabulary(self, vocab_size: int) -> tuple[str, ...]:
        """The `vocab_size - 1` most frequent tokens, most frequent first (ties in
        order of first occurrence), followed by `"<other>"`."""
        counts = self.counts()
        vocab_size = _check_vocab_size(vocab_size, len(counts), self.source)
        return tuple(t for t, _ in counts.most_common(vocab_size - 1)) + (OTHER,)

    def __repr__(self) -> str:
        return (
            f"Corpus({len(self.tokens)} {self.level} tokens, "
            f"{len(set(self.tokens))} distinct, from {self.source})"
        )


class TokenStream(eqx.Module):
    """A corpus encoded on a fixed vocabulary, with its bigram chain: what
    [`gradflow.train_sgd`][] trains on (windows of the real text) and evaluates
    against (the population loss of `chain`).

    **Fields:**

    - `ids`: token ids, shape `(n,)`; id `k` is `chain.tokens[k]`, the last id is
      `<other>`.
    - `chain`: the bigram [`gradflow.MarkovChain`][] estimated from `ids`.
    - `source`: where the text came from.
    """

    ids: Int[Array, " n"]
    chain: MarkovChain
    source: str = eqx.field(static=True)

    @property
    def d(self) -> int:
        return self.chain.d

    def __len__(self) -> int:
        return int(self.ids.shape[0])

    def __repr__(self) -> str:
        return f"TokenStream({len(self)} tokens, d={self.d}, from {self.source})"


def tokenize(text: str, level: str = "word") -> list[str]:
    """Splits text into tokens.

    - `"word"`: lower-cased runs of letters and digits (inner apostrophes kept);
      punctuation and symbols are dropped.
    - `"char"`: every character, with each run of whitespace collapsed to one
      space.
    """
    level = _check_level(level)
    if level == "word":
        return _WORD.findall(text.lower())
    return list(_SPACE.sub(" ", text))


def builtin_text() -> str:
    """The built-in English corpus: every topic of Python's documentation
    (`pydoc_data.topics`), in sorted topic order."""
    from pydoc_data.topics import topics

    return "\n\n".join(topics[k] for k in sorted(topics))


def _check_level(level) -> str:
    if not isinstance(level, str) or level not in LEVELS:
        raise ValueError(f"level must be one of {LEVELS}, got level = {show(level)}")
    return level


def _read_utf8(path: Path) -> str:
    raw = path.read_bytes()
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(
            f"'{path}' is not UTF-8 text: byte 0x{raw[e.start]:02x} at offset "
            f"{e.start} cannot be decoded ({e.reason}); convert it, for example "
            f"with `iconv -f latin1 -t utf-8`"
        ) from None


def _files_in(folder: Path) -> list[Path]:
    files = sorted(
        p
        for p in folder.rglob("*")
        if p.is_file()
        and p.suffix.lower() in TEXT_SUFFIXES
        and not any(part.startswith(".") for part in p.relative_to(folder).parts)
    )
    if not files:
        raise ValueError(
            f"folder '{folder}' holds no text files (looked for suffixes "
            f"{', '.join(TEXT_SUFFIXES)})"
        )
    return files


def read_text(path: str | os.PathLike | None = None) -> tuple[str, str]:
    """Reads `path` (a UTF-8 file, or a folder of them) or, for `None`, the
    built-in corpus. Returns `(text, source)`."""
    if path is None or (isinstance(path, str) and path == BUILTIN):
        return builtin_text(), BUILTIN
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a str or os.PathLike, got {type(path).__name__}")
    if isinstance(path, str) and not path.strip():
        # Path("") is the current folder: never read it by accident.
        raise ValueError(
            f"path is an empty string ({path!r}); pass None for the built-in corpus"
        )
    p = Path(path).expanduser()
    if not p.exists():
        raise FileNotFoundError(f"no such file or folder: '{p}'")
    if p.is_dir():
        return "\n\n".join(_read_utf8(f) for f in _files_in(p)), str(p)
    return _read_utf8(p), str(p)


def load(
    path: str | os.PathLike | None = None, level: str = "word", *, min_tokens: int = 2
) -> Corpus:
    r"""Reads and tokenises a local text corpus.

    **Arguments:**

    - `path`: a UTF-8 text file; or a folder, whose files ending in
      `.txt`, `.raw`, `.tokens`, `.text` or `.md` are read recursively in sorted
      order (hidden files skipped), for example a WikiText copy
      (`wikitext-2-raw/wiki.train.raw`) or TinyStories
      (`TinyStories-train.txt`); or `None` (or `"builtin"`) for the built-in
      corpus, the English text of Python's documentation topics.
    - `level`: `"word"` (lower-cased words, punctuation dropped) or `"char"`.
    - `min_tokens`: the fewest tokens accepted (at least one bigram).

    **Returns:** a [`gradflow.text.Corpus`][].

    **Raises:** `FileNotFoundError` for a missing path; `ValueError` for a
    file that is not UTF-8 (quoting the byte and its offset), a folder without
    text files, an unknown `level`, or a corpus with fewer than `min_tokens`
    tokens.

    **Example:**

    ```python
    import gradflow as gf
    corpus = gf.text.load()                  # built-in, no download
    corpus = gf.text.load("wikitext-2-raw/wiki.train.raw", level="char")
    ```
    """
    level = _check_level(level)
    text, source = read_text(path)
    return corpus_from_string(text, level, source=source, min_tokens=min_tokens)


def corpus_from_string(
    text: str, level: str = "word", *, source: str = "<text>", min_tokens: int = 2
) -> Corpus:
    """Tokenises a string already in memory (see [`gradflow.text.load`][])."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    if isinstance(min_tokens, bool) or not isinstance(min_tokens, (int, np.integer)):
        raise TypeError(
            f"min_tokens must be an integer, got min_tokens = {show(min_tokens)}"
        )
    tokens = tokenize(text, level)
    if len(tokens) < max(2, int(min_tokens)):
        raise ValueError(
            f"the corpus from {source} is too small: {len(tokens)} {level} tokens, "
            f"need at least {max(2, int(min_tokens))}"
        )
    return Corpus(tokens=tuple(tokens), level=level, source=source)


def _check_vocab_size(vocab_size, num_distinct: int, source: str) -> int:
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, (int, np.integer)):
        raise TypeError(f"vocab_size must be an integer, got {show(vocab_size)}")
    if vocab_size < 2:
        raise ValueError(
            f"vocab_size must be >= 2 (at least one token plus <other>), got "
            f"vocab_size = {vocab_size}"
        )
    if vocab_size > num_distinct:
        raise ValueError(
            f"vocab_size = {vocab_size} is larger than the {num_distinct} distinct "
            f"tokens of the corpus from {source}"
        )
    return int(vocab_size)


def _as_corpus(path_or_text, level: str) -> Corpus:
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
        return load(path_or_text, level)
    if isinstance(path_or_text, str):
        if path_or_text == BUILTIN:
            return load(None, level)
        one_line = "\n" not in path_or_text and len(path_or_text) < 4096
        # An empty or blank string is (empty) text, not the current folder.
        named = one_line and path_or_text.strip() != ""
        if named and Path(path_or_text).expanduser().exists():
            return load(path_or_text, level)
        if one_line and Path(path_or_text).suffix.lower() in TEXT_SUFFIXES:
            # Looks like a file name, not prose: a typo should not be tokenised.
            raise FileNotFoundError(f"no such file or folder: '{path_or_text}'")
        return corpus_from_string(path_or_text, level)
    raise TypeError(
        "path_or_text must be a path, a string of text, a gradflow.text.Corpus or "
        f"None, got {type(path_or_text).__name__}"
    )


def bigram_matrix(ids: np.ndarray, d: int, smoothing: float) -> np.ndarray:
    r"""$P_{ij} \propto \#\{t: x_t = i, x_{t+1} = j\} + \text{smoothing}$."""
    counts = np.zeros((d, d))
    np.add.at(counts, (ids[:-1], ids[1:]), 1.0)
    counts += smoothing
    return counts / counts.sum(axis=1, keepdims=True)


def encode(
    path_or_text=None,
    vocab_size: int = 30,
    *,
    level: str = "word",
    smoothing: float = DEFAULT_SMOOTHING,
) -> TokenStream:
    r"""Encodes a corpus on its `vocab_size` most useful tokens and estimates its
    bigram chain.

    The vocabulary is the `vocab_size - 1` most frequent tokens (most frequent
    first) plus `<other>`, which stands for every remaining token. The bigram
    chain is $P_{ij} \propto c_{ij} + \text{smoothing}$ with $c_{ij}$ the number
    of times token `j` follows token `i`; any `smoothing > 0` makes every entry
    positive, so the chain is irreducible and aperiodic.

    **Arguments:** as [`gradflow.chains.from_text`][].

    **Returns:** a [`gradflow.text.TokenStream`][] (`ids` and `chain`).
    """
    level = _check_level(level)
    try:
        smoothing = float(smoothing)
    except (TypeError, ValueError):
        raise TypeError(f"smoothing must be a number, got {show(smoothing)}") from None
    if not np.isfinite(smoothing) or smoothing <= 0:
        raise ValueError(
            f"smoothing must be finite and > 0 (it keeps every transition "
            f"probability positive), got smoothing = {smoothing}"
        )
    corpus = _as_corpus(path_or_text, level)
    vocab = corpus.vocabulary(vocab_size)
    index = {t: k for k, t in enumerate(vocab[:-1])}
    other = len(vocab) - 1
    ids = np.fromiter((index.get(t, other) for t in corpus.tokens), dtype=np.int32)
    chain = MarkovChain(bigram_matrix(ids, len(vocab), smoothing), tokens=vocab)
    return TokenStream(ids=jnp.asarray(ids), chain=chain, source=corpus.source)


def from_text(
    path_or_text=None,
    vocab_size: int = 30,
    *,
    level: str = "word",
    smoothing: float = DEFAULT_SMOOTHING,
) -> MarkovChain:
    r"""The bigram Markov chain of a text (SPEC section 7).

    **Arguments:**

    - `path_or_text`: a path to a UTF-8 file or a folder of them (see
      [`gradflow.text.load`][]); a string of text; a
      [`gradflow.text.Corpus`][]; or `None` for the built-in corpus (Python's
      documentation topics). A one-line string naming an existing file or
      folder is read as a path.
    - `vocab_size`: $d$; the `vocab_size - 1` most frequent tokens plus
      `<other>`. At least 2 and at most the number of distinct tokens.
    - `level`: `"word"` or `"char"`.
    - `smoothing`: add-`smoothing` to every bigram count (default 1, Laplace).

    **Returns:** a [`gradflow.MarkovChain`][] whose `tokens` are the vocabulary,
    most frequent first, `"<other>"` last.

    **Raises:** `FileNotFoundError` (missing file), `ValueError` (not UTF-8,
    empty or too-small corpus, `vocab_size < 2` or above the number of distinct
    tokens, `smoothing <= 0`, unknown `level`).

    **Example:**

    ```python
    chain = gf.chains.from_text(None, vocab_size=30)   # built-in corpus
    chain.tokens[:3]                                    # ('the', 'a', 'is') ...
    ```
    """
    return encode(path_or_text, vocab_size, level=level, smoothing=smoothing).chain


__all__ = [
    "BUILTIN",
    "Corpus",
    "LEVELS",
    "OTHER",
    "TokenStream",
    "builtin_text",
    "corpus_from_string",
    "encode",
    "from_text",
    "load",
    "read_text",
    "tokenize",
]
