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


def _quote(path) -> str:
    """A path for a one-line message (`repr` escapes newlines and control
    characters, which a file name may hold)."""
    return repr(str(path))


def _nul_error(name: str, value: str) -> ValueError:
    k = value.index("\x00")
    return ValueError(
        f"{name} holds a NUL byte (at character {k}), so it is neither a path (no "
        f"path can hold one) nor text (binary data?): got {name} = {show(value)}"
    )


def _stat(path: Path):
    """`os.stat`, or `None` where the filesystem says the name is not there
    (missing, too long, a file used as a folder, a dangling link)."""
    try:
        return path.stat()
    except (OSError, ValueError):
        return None


def _read_error(name: str, path: Path, error: OSError) -> ValueError:
    return ValueError(
        f"{name}: {_quote(path)} cannot be read: {error.strerror or error}"
    )


NUL = b"\x00"


def _binary_error(name: str, path: Path, offset: int) -> ValueError:
    return ValueError(
        f"{name}: {_quote(path)} is a binary file, not text (a NUL byte at offset "
        f"{offset})"
    )


def _check_file(name: str, path: Path, *, in_folder: bool = False) -> bool:
    """Rejects a file that is empty or binary (a NUL byte in its first 8 KiB);
    in a folder, empty files are skipped (returns False)."""
    try:
        with open(path, "rb") as f:
            head = f.read(8192)
    except OSError as e:
        raise _read_error(name, path, e) from None
    if not head:
        if in_folder:
            return False
        raise ValueError(f"{name}: the file {_quote(path)} is empty (0 bytes)")
    if NUL in head:
        raise _binary_error(name, path, head.index(NUL))
    return True


def _files_in(name: str, folder: Path) -> list[Path]:
    try:
        found = sorted(
            p
            for p in folder.rglob("*")
            if p.suffix.lower() in TEXT_SUFFIXES
            and not any(part.startswith(".") for part in p.relative_to(folder).parts)
            and p.is_file()
        )
    except OSError as e:
        raise _read_error(name, folder, e) from None
    files = [p for p in found if _check_file(name, p, in_folder=True)]
    if not files:
        raise ValueError(
            f"{name}: folder {_quote(folder)} holds no text files (looked for "
            f"non-empty files ending in {', '.join(TEXT_SUFFIXES)})"
        )
    return files


def resolve_path(path, name: str = "path") -> list[Path]:
    """The files a path names: itself, or the text files of a folder. Raises a
    one-line `FileNotFoundError`/`ValueError` naming `name`, never the
    filesystem's own `OSError`."""
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(
            f"{name} must be a str or os.PathLike, got {type(path).__name__}"
        )
    raw = os.fspath(path)
    if isinstance(raw, bytes):
        raise TypeError(f"{name} must be a str path, got bytes {show(raw)}")
    if "\x00" in raw:
        raise _nul_error(name, raw)
    if not raw.strip():
        # Path("") is the current folder: never read it by accident.
        raise ValueError(
            f"{name} is an empty string ({raw!r}); pass None for the built-in corpus"
        )
    p = Path(raw).expanduser()
    st = _stat(p)
    if st is None:
        raise FileNotFoundError(f"{name}: no such file or folder: {_quote(p)}")
    if p.is_dir():
        return _files_in(name, p)
    _check_file(name, p)
    return [p]


def _names_a_path(value: str) -> bool:
    """Whether a string names an existing file or folder (a one-line, non-blank
    string the filesystem finds)."""
    if "\n" in value or not value.strip() or len(value.encode()) > 4096:
        return False
    return _stat(Path(value).expanduser()) is not None


def _looks_like_file_name(value: str) -> bool:
    """A one-line string ending in a text suffix, each part short enough to be
    a file name: a typo of a path, not prose."""
    if "\n" in value or value != value.strip():
        return False
    parts = Path(value).parts
    return (
        Path(value).suffix.lower() in TEXT_SUFFIXES
        and bool(parts)
        and all(len(part.encode()) <= 255 for part in parts)
    )


def _read_utf8(name: str, path: Path) -> str:
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise _read_error(name, path, e) from None
    if NUL in raw:
        raise _binary_error(name, path, raw.index(NUL))
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(
            f"{name}: {_quote(path)} is not UTF-8 text: byte 0x{raw[e.start]:02x} at "
            f"offset {e.start} cannot be decoded ({e.reason}); convert it, for "
            f"example with `iconv -f latin1 -t utf-8`"
        ) from None


def read_text(
    path: str | os.PathLike | None = None, *, name: str = "path"
) -> tuple[str, str]:
    """Reads `path` (a UTF-8 file, or a folder of them) or, for `None`, the
    built-in corpus. Returns `(text, source)`."""
    if path is None or (isinstance(path, str) and path == BUILTIN):
        return builtin_text(), BUILTIN
    files = resolve_path(path, name)
    source = str(Path(os.fspath(path)).expanduser())
    return "\n\n".join(_read_utf8(name, f) for f in files), source


def load(
    path: str | os.PathLike | None = None,
    level: str = "word",
    *,
    min_tokens: int = 2,
    name: str = "path",
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
    text, source = read_text(path, name=name)
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


def _as_corpus(path_or_text, level: str, name: str = "path_or_text") -> Corpus:
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
        return load(path_or_text, level, name=name)
    if isinstance(path_or_text, str):
        if path_or_text == BUILTIN:
            return load(None, level)
        if "\x00" in path_or_text:
            raise _nul_error(name, path_or_text)
        if _names_a_path(path_or_text):
            return load(path_or_text, level, name=name)
        if _looks_like_file_name(path_or_text):
            # Looks like a file name, not prose: a typo should not be tokenised.
            raise FileNotFoundError(
                f"{name}: no such file or folder: {_quote(path_or_text)}"
            )
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
