r"""Real text (SPEC section 7): read local UTF-8 files, tokenise them (words,
characters or byte-level BPE trained on the corpus itself), keep the
`vocab_size` most frequent tokens, and estimate a strictly positive bigram
[`gradflow.MarkovChain`][].

No download ever happens. Without a path the built-in corpus is used: the
English text of Python's documentation topics (`pydoc_data.topics`), which
ships with every CPython.

Corpora are read as a stream, in blocks of a few MiB, so memory stays bounded
whatever their size (beyond the array of token ids): each block is split into
tokens with vectorised NumPy (no Python object per token), tokens are counted
by a 64-bit hash of their characters, and each is written as a 32-bit id into
the corpus's id array; encoding on a vocabulary maps those ids through one
lookup table into an array of the smallest integer type that holds `d`.
"""

import codecs
import json
import os
import re
import warnings
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import cast

import equinox as eqx
import numpy as np
from jaxtyping import Int

from ._chain import MarkovChain
from ._errors import show


OTHER = "<other>"
LEVELS = ("word", "char", "bpe")
TAILS = ("other", "drop")
DEFAULT_SMOOTHING = "auto"
# With smoothing="auto" the pseudo-counts are this fraction of the bigram
# counts, spread evenly over the d^2 entries (SPEC section 7): small enough not
# to drown the data at any vocabulary size, large enough to keep every entry
# positive.
SMOOTHING_FRACTION = 0.01
# A chain whose pseudo-counts exceed this fraction of all counts gets a warning:
# its pi is pulled towards uniform (the vocabulary is too large for the corpus
# at that smoothing).
DROWNED_FRACTION = 0.1
# Suffixes read when `path` is a folder: plain text, WikiText's `.raw` and
# `.tokens` files, TinyStories' `.txt`.
TEXT_SUFFIXES = (".txt", ".raw", ".tokens", ".text", ".md")
BUILTIN = "builtin"
# Bytes read at a time, and the size of the blocks tokenised at once.
BLOCK_BYTES = 4 << 20
# A progress bar appears after this many seconds (tqdm's `delay`).
PROGRESS_DELAY = 2.0

# A word is a run of letters/digits (Unicode-aware), with inner apostrophes
# kept ("don't"); punctuation, markup (WikiText's "@-@", "= = Title = =") and
# code symbols are dropped, so that the vocabulary is made of words. The
# streaming tokeniser implements exactly this pattern with NumPy (`_word_keys`);
# `tokenize` applies it with `re` (the reference, for small strings).
_WORD = re.compile(r"[^\W_]+(?:'[^\W_]+)*")
_SPACE = re.compile(r"\s+")


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


# ------------------------------------------------------------ reading a stream
def _codepoints(text: str) -> np.ndarray:
    """The code points of `text`: uint8 for ASCII text (one byte each, the
    common case), else uint32 (lone surrogates, which only a Python string can
    hold, pass through)."""
    if text.isascii():
        return np.frombuffer(text.encode("ascii"), np.uint8)
    return np.frombuffer(text.encode("utf-32-le", "surrogatepass"), np.uint32)


class _CharTable:
    """`str.isalnum` or `str.isspace` for every code point, as a lookup table
    filled lazily: only the code points a corpus uses are ever tested."""

    def __init__(self, test):
        self.test = test
        self.values = np.full(0x110000, -1, np.int8)
        self.values[:128] = [test(chr(i)) for i in range(128)]

    def __call__(self, cp: np.ndarray) -> np.ndarray:
        if cp.dtype == np.uint8:  # ASCII: the first 128 entries, all known
            return self.values[:128].view(np.bool_)[cp]
        v = self.values[cp]
        unknown = v < 0
        if unknown.any():
            for u in np.unique(cp[unknown]).tolist():
                self.values[u] = self.test(chr(u))
            v = self.values[cp]
        return v.view(np.bool_)


_tables: dict[str, _CharTable] = {}


def _is(kind: str, cp: np.ndarray) -> np.ndarray:
    if kind not in _tables:
        _tables[kind] = _CharTable(str.isalnum if kind == "alnum" else str.isspace)
    return _tables[kind](cp)


# Polynomial hashing modulo 2**64 (NumPy's unsigned arithmetic wraps): a unit
# (word, BPE piece) is counted by the key sum_j c_j B^j of its code points.
# Two distinct units of a natural corpus share a key with probability about
# V**2 / 2**64 (V distinct units): 1e-9 for a million.
_B = 0x9E3779B97F4A7C15  # odd, so invertible modulo 2**64
_B_INV = pow(_B, -1, 1 << 64)
_powers: list[np.ndarray] = []


def _pow_tables(n: int) -> tuple[np.ndarray, np.ndarray]:
    if not _powers or _powers[0].size < n:
        n = max(n, BLOCK_BYTES + 2)
        with np.errstate(over="ignore"):
            pw = np.cumprod(np.full(n, _B, np.uint64), dtype=np.uint64)
            inv = np.cumprod(np.full(n, _B_INV, np.uint64), dtype=np.uint64)
        pw[1:], pw[0] = pw[:-1], 1
        inv[1:], inv[0] = inv[:-1], 1
        _powers[:] = [pw, inv]
    return _powers[0], _powers[1]


def _run_keys(c: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """The polynomial key of each run `c[starts[k]:ends[k]]`."""
    pw, inv = _pow_tables(c.size + 1)
    prefix = np.zeros(c.size + 1, np.uint64)
    with np.errstate(over="ignore"):
        np.cumsum(c.astype(np.uint64) * pw[: c.size], out=prefix[1:])
        return (prefix[ends] - prefix[starts]) * inv[starts]


def _run_bounds(breaks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    starts = np.flatnonzero(breaks)
    return starts, np.append(starts[1:], breaks.size)


_ASCII_LOWER = np.frombuffer(bytes(range(128)).decode().lower().encode(), np.uint8)


def _word_units(piece: str):
    """Keys and names of the words of `piece` (exactly `_WORD.findall(piece.lower())`)."""
    if piece.isascii():
        low = piece
        cp = _ASCII_LOWER[_codepoints(piece)]
    else:
        low = piece.lower()
        cp = _codepoints(low)
    alnum = _is("alnum", cp)
    word = alnum.copy()
    # an apostrophe between two letters/digits is inside a word ("don't")
    word[1:-1] |= (cp[1:-1] == 39) & alnum[:-2] & alnum[2:]
    where = np.flatnonzero(word)
    if where.size == 0:
        return np.empty(0, np.uint64), None
    breaks = np.ones(where.size, bool)
    np.not_equal(where[1:], where[:-1] + 1, out=breaks[1:])
    starts, ends = _run_bounds(breaks)
    keys = _run_keys(cp[where], starts, ends)
    return keys, lambda k: low[where[starts[k]] : where[ends[k] - 1] + 1].lower()


def _char_units(piece: str):
    """Characters, each run of whitespace as one space (`_SPACE.sub(" ", piece)`);
    `piece` starts at the start of a whitespace run or of the text."""
    cp = _codepoints(piece)
    space = _is("space", cp)
    keep = np.ones(cp.size, bool)
    keep[1:] = ~(space[1:] & space[:-1])
    keys = np.where(space, 32, cp)[keep].astype(np.uint64)
    return keys, lambda k: chr(int(keys[k]))


def _bpe_units(piece: str):
    """Pieces for BPE: runs of one class (letters/digits, other symbols,
    whitespace), a single space joined to the run it precedes (`" the"`,
    `" ("`): the units byte-level BPE merges within, as GPT-2's
    pre-tokeniser makes them (to within its special cases for `'s`, `'t`)."""
    cp = _codepoints(piece)
    space = _is("space", cp)
    cls = np.where(space, 0, np.where(_is("alnum", cp), 1, 2)).astype(np.int8)
    breaks = np.ones(cp.size, bool)
    np.not_equal(cls[1:], cls[:-1], out=breaks[1:])
    joined = np.flatnonzero((cp[:-1] == 32) & (cls[1:] != 0)) + 1
    breaks[joined] = False
    breaks[joined - 1] = True
    starts, ends = _run_bounds(breaks)
    keys = _run_keys(cp, starts, ends)
    return keys, lambda k: piece[starts[k] : ends[k]]


_UNITS = {"word": _word_units, "char": _char_units, "bpe": _bpe_units}


def _last_run_start(text: str) -> int:
    """The start of the last run of whitespace that follows a non-space (0 if
    none): cutting there splits no word and no whitespace run."""
    i = max(text.rfind(" "), text.rfind("\n"))
    while i > 0 and text[i - 1].isspace():
        i -= 1
    return max(i, 0)


def _pieces(blocks: Iterable[str]) -> Iterator[str]:
    """Regroups blocks of text into pieces cut just before a run of whitespace."""
    carry = ""
    for block in blocks:
        carry = carry + block if carry else block
        if len(carry) < BLOCK_BYTES // 2:
            continue
        cut = _last_run_start(carry)
        if cut > 0:
            yield carry[:cut]
            carry = carry[cut:]
    if carry:
        yield carry


def _string_blocks(text: str) -> Iterator[str]:
    for i in range(0, len(text), BLOCK_BYTES):
        yield text[i : i + BLOCK_BYTES]


def _file_blocks(name: str, files: list[Path], bar) -> Iterator[str]:
    """The decoded text of `files`, joined by blank lines, in blocks; NUL bytes
    and invalid UTF-8 are reported with the file and the byte offset."""
    for k, path in enumerate(files):
        if k:
            yield "\n\n"
        decoder = codecs.getincrementaldecoder("utf-8")()
        offset = 0
        try:
            f = open(path, "rb")
        except OSError as e:
            raise _read_error(name, path, e) from None
        with f:
            while True:
                try:
                    raw = f.read(BLOCK_BYTES)
                except OSError as e:
                    raise _read_error(name, path, e) from None
                if NUL in raw:
                    raise _binary_error(name, path, offset + raw.index(NUL))
                pending = len(decoder.getstate()[0])
                try:
                    text = decoder.decode(raw, final=not raw)
                except UnicodeDecodeError as e:
                    raise _utf8_error(name, path, e, offset - pending) from None
                offset += len(raw)
                if bar is not None:
                    bar.update(len(raw))
                if text:
                    yield text
                if not raw:
                    break


def _utf8_error(name: str, path: Path, e: UnicodeDecodeError, base: int):
    return ValueError(
        f"{name}: {_quote(path)} is not UTF-8 text: byte 0x{e.object[e.start]:02x} "
        f"at offset {base + e.start} cannot be decoded ({e.reason}); convert it, for "
        f"example with `iconv -f latin1 -t utf-8`"
    )


def _mix(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser: a bijection of 64-bit keys that spreads short
    units (one letter, one character: small keys) over the top bits that pick
    their slot in `_KeyTable`."""
    with np.errstate(over="ignore"):
        x = x ^ (x >> np.uint64(30))
        x = x * np.uint64(0xBF58476D1CE4E5B9)
        x = x ^ (x >> np.uint64(27))
        x = x * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


class _KeyTable:
    """An open-addressing hash table from 64-bit keys to ids, probed with
    vectorised NumPy (linear probing from the key's top bits; key 0 marks an
    empty slot, so a key 0 is stored as 1)."""

    def __init__(self, capacity: int = 1 << 12):
        self.bits = max(12, int(capacity - 1).bit_length())
        self.keys = np.zeros(1 << self.bits, np.uint64)
        self.ids = np.zeros(1 << self.bits, np.int64)
        self.size = 0

    def _home(self, keys: np.ndarray) -> np.ndarray:
        return (keys >> np.uint64(64 - self.bits)).astype(np.int64)

    def find(self, keys: np.ndarray) -> np.ndarray:
        """The id of each key, -1 where absent."""
        slot = self._home(keys)
        there = self.keys[slot]
        hit = there == keys
        out = np.where(hit, self.ids[slot], -1)
        # most keys sit in their home slot; probe on for the others
        todo = np.flatnonzero(~hit & (there != 0))
        mask = (1 << self.bits) - 1
        slot[todo] = (slot[todo] + 1) & mask
        while todo.size:
            s = slot[todo]
            there = self.keys[s]
            hit = there == keys[todo]
            out[todo[hit]] = self.ids[s[hit]]
            todo = todo[~hit & (there != 0)]
            slot[todo] = (slot[todo] + 1) & mask
        return out

    def insert(self, keys: np.ndarray, ids: np.ndarray) -> None:
        """Adds distinct keys that are not in the table yet."""
        if 4 * (self.size + keys.size) > self.keys.size:
            old_keys, old_ids = self.keys[self.keys != 0], self.ids[self.keys != 0]
            self.__init__(8 * (self.size + keys.size))
            self.insert(old_keys, old_ids)
        slot = self._home(keys)
        todo = np.arange(keys.size)
        mask = (1 << self.bits) - 1
        while todo.size:
            s = slot[todo]
            free = self.keys[s] == 0
            # one winner per free slot in this round; the others probe on
            _, first = np.unique(s[free], return_index=True)
            won = todo[free][first]
            self.keys[slot[won]] = keys[won]
            self.ids[slot[won]] = ids[won]
            placed = np.zeros(keys.size, bool)
            placed[won] = True
            todo = todo[~placed[todo]]
            slot[todo] = (slot[todo] + 1) & mask
        self.size += keys.size


class _UnitCounter:
    """Distinct units in order of first occurrence, their counts, and the id of
    every occurrence (one array per piece of text, each of the smallest
    unsigned type that holds the ids known when it was read)."""

    def __init__(self):
        self.table = _KeyTable()
        self.names: list[str] = []
        self.counts = np.zeros(0, np.int64)
        self.blocks: list[np.ndarray] = []

    def add(self, keys: np.ndarray, name_of) -> None:
        if keys.size == 0:
            return
        keys = np.maximum(_mix(keys), np.uint64(1))
        found = self.table.find(keys)
        miss = np.flatnonzero(found < 0)
        if miss.size:
            new, first, inverse = np.unique(
                keys[miss], return_index=True, return_inverse=True
            )
            order = np.argsort(first, kind="stable")
            rank = np.empty(order.size, np.int64)
            rank[order] = np.arange(order.size)
            base = len(self.names)
            found[miss] = base + rank[inverse.reshape(-1)]
            self.names.extend(name_of(int(miss[first[j]])) for j in order)
            self.table.insert(new, base + rank)
        # the smallest type that holds the ids seen so far (blocks may differ)
        ids = found.astype(_id_dtype(len(self.names)))
        counts = np.bincount(ids, minlength=len(self.names))
        counts[: self.counts.size] += self.counts
        self.counts = counts
        self.blocks.append(ids)


def _count_units(blocks: Iterable[str], level: str) -> _UnitCounter:
    counter = _UnitCounter()
    units = _UNITS[level]
    for piece in _pieces(blocks):
        keys, name_of = units(piece)
        counter.add(keys, name_of)
    return counter


# ------------------------------------------------------------------- corpora
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
        tail = _check_tail(tail)
        order = _frequency_order(self.unit_counts)
        keep = _check_vocab_size(vocab_size, len(self.units), self.source, tail)
        vocab = tuple(self.units[i] for i in order[:keep])
        return vocab + ((OTHER,) if tail == "other" else ())

    def __repr__(self) -> str:
        return (
            f"Corpus({len(self)} {self.level} {'pieces' if self.level == 'bpe' else 'tokens'}, "
            f"{len(self.units)} distinct, from {self.source})"
        )


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
        return _smoothed_stream(
            self.ids, self.chain.tokens or (), _check_smoothing(smoothing), self.source
        )

    def __repr__(self) -> str:
        return (
            f"TokenStream({len(self)} tokens, d={self.d}, from {self.source}; "
            f"smoothing {self.smoothing:.3g} per entry = "
            f"{100 * self.smoothing_fraction:.3g} % of the counts, pi within "
            f"{self.pi_distance:.2g} (total variation) of the unigram frequencies)"
        )


def tokenize(text: str, level: str = "word") -> list[str]:
    """Splits a (small) string into tokens, with `re`: the reference that the
    streaming tokeniser of [`gradflow.text.load`][] reproduces exactly.

    - `"word"`: lower-cased runs of letters and digits (inner apostrophes kept);
      punctuation and symbols are dropped.
    - `"char"`: every character, with each run of whitespace collapsed to one
      space.

    (`"bpe"` has no fixed tokeniser: its tokens are learnt by
    [`gradflow.text.encode`][].)
    """
    level = _check_level(level)
    if level == "bpe":
        raise ValueError(
            "level 'bpe' has no fixed tokeniser: its tokens are learnt by "
            "gf.text.encode(text, vocab_size, level='bpe')"
        )
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


def _check_tail(tail) -> str:
    if not isinstance(tail, str) or tail not in TAILS:
        raise ValueError(f"tail must be one of {TAILS}, got tail = {show(tail)}")
    return tail


def _check_progress(progress) -> bool:
    if not isinstance(progress, (bool, np.bool_)):
        raise TypeError(f"progress must be True or False, got {show(progress)}")
    return bool(progress)


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
    return "\n\n".join(_read_utf8(name, f) for f in files), source


def _progress_bar(files: list[Path], progress: bool, source: str):
    if not progress:
        return None
    import tqdm

    total = sum(cast(os.stat_result, _stat(f)).st_size for f in files)
    return tqdm.tqdm(
        total=total,
        unit="B",
        unit_scale=True,
        delay=PROGRESS_DELAY,
        desc=f"reading {Path(source).name}",
        leave=False,
    )


def load(
    path: str | os.PathLike | None = None,
    level: str = "word",
    *,
    min_tokens: int = 2,
    progress: bool = True,
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
    level = _check_level(level)
    min_tokens = _check_min_tokens(min_tokens)
    progress = _check_progress(progress)
    if path is None or (isinstance(path, str) and path == BUILTIN):
        return _corpus(_string_blocks(builtin_text()), level, BUILTIN, min_tokens)
    files = resolve_path(path, name)
    source = str(Path(os.fspath(path)).expanduser())
    bar = _progress_bar(files, progress, source)
    try:
        return _corpus(_file_blocks(name, files, bar), level, source, min_tokens)
    finally:
        if bar is not None:
            bar.close()


def _check_min_tokens(min_tokens) -> int:
    if isinstance(min_tokens, bool) or not isinstance(min_tokens, (int, np.integer)):
        raise TypeError(
            f"min_tokens must be an integer, got min_tokens = {show(min_tokens)}"
        )
    return max(2, int(min_tokens))


def _corpus(blocks, level: str, source: str, min_tokens: int) -> Corpus:
    counter = _count_units(blocks, level)
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
    level = _check_level(level)
    return _corpus(_string_blocks(text), level, source, _check_min_tokens(min_tokens))


def _check_vocab_size(vocab_size, num_distinct: int, source: str, tail: str) -> int:
    """Returns how many tokens are kept by name (`vocab_size - 1` with an
    `<other>` token, `vocab_size` without)."""
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, (int, np.integer)):
        raise TypeError(f"vocab_size must be an integer, got {show(vocab_size)}")
    if vocab_size < 2:
        what = "at least one token plus <other>" if tail == "other" else "two tokens"
        raise ValueError(
            f"vocab_size must be >= 2 ({what}), got vocab_size = {vocab_size}"
        )
    if vocab_size > num_distinct:
        raise ValueError(
            f"vocab_size = {vocab_size} is larger than the {num_distinct} distinct "
            f"tokens of the corpus from {source}"
        )
    return int(vocab_size) - (tail == "other")


def _check_vocab_type(vocab_size) -> int:
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, (int, np.integer)):
        raise TypeError(f"vocab_size must be an integer, got {show(vocab_size)}")
    if vocab_size < 2:
        raise ValueError(
            f"vocab_size must be >= 2 (at least one token plus <other>), got "
            f"vocab_size = {vocab_size}"
        )
    return int(vocab_size)


def _as_corpus(
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
            return load(None, level)
        if "\x00" in path_or_text:
            raise _nul_error(name, path_or_text)
        if _names_a_path(path_or_text):
            return load(path_or_text, level, name=name, progress=progress)
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


def _frequency_order(counts: np.ndarray) -> np.ndarray:
    """Most frequent first; ties in order of first occurrence (the index)."""
    return np.argsort(-np.asarray(counts), kind="stable")


def _id_dtype(d: int) -> np.dtype:
    for dtype in (np.uint8, np.uint16, np.uint32):
        if d <= np.iinfo(dtype).max + 1:
            return np.dtype(dtype)
    return np.dtype(np.int64)


def bigram_counts(ids: np.ndarray, d: int, block: int = 1 << 23) -> np.ndarray:
    r"""$c_{ij} = \#\{t: x_t = i, x_{t+1} = j\}$, counted in blocks of `ids`
    (which may be a memory map)."""
    counts = np.zeros(d * d, np.int64)
    n = ids.shape[0]
    for a in range(0, max(n - 1, 0), block):
        x = np.asarray(ids[a : min(a + block, n - 1) + 1], np.int64)
        counts += np.bincount(x[:-1] * d + x[1:], minlength=d * d)
    return counts.reshape(d, d)


def bigram_matrix(ids: np.ndarray, d: int, smoothing: float) -> np.ndarray:
    r"""$P_{ij} \propto \#\{t: x_t = i, x_{t+1} = j\} + \text{smoothing}$."""
    counts = bigram_counts(ids, d) + smoothing
    return counts / counts.sum(axis=1, keepdims=True)


def _check_smoothing(smoothing) -> float | str:
    if isinstance(smoothing, str):
        if smoothing == "auto":
            return smoothing
        raise ValueError(
            f"smoothing must be 'auto' or a number > 0, got smoothing = {smoothing!r}"
        )
    if isinstance(smoothing, bool):
        raise TypeError(f"smoothing must be a number or 'auto', got {show(smoothing)}")
    try:
        value = float(smoothing)
    except (TypeError, ValueError):
        raise TypeError(
            f"smoothing must be a number or 'auto', got {show(smoothing)}"
        ) from None
    if not np.isfinite(value) or value <= 0:
        raise ValueError(
            f"smoothing must be finite and > 0 (it keeps every transition "
            f"probability positive), got smoothing = {value}"
        )
    return value


def _smoothed_stream(
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


# ------------------------------------------------------------------------ BPE
def _byte_decoder() -> dict[str, int]:
    """GPT-2's byte-to-character map (used by byte-level BPE), inverted."""
    bs = [*range(33, 127), *range(161, 173), *range(174, 256)]
    cs = list(bs)
    extra = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(bs, cs, strict=True)}


def _bpe_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    tokenizer = Tokenizer(models.BPE())
    # The pieces are made by `_bpe_units`; NUL (never in accepted text)
    # separates them in the training feed, and ByteLevel maps bytes to symbols.
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split("\x00", "removed"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    return tokenizer


def _bpe_feed(corpus: Corpus, block_chars: int = 1 << 16) -> Iterator[str]:
    """Every piece as often as it occurs (NUL-separated, in strings of about
    `block_chars` characters): the trainer counts the same pieces the corpus
    holds, without re-reading it. The strings are kept short because
    `train_from_iterator` buffers a few hundred of them at a time: with 4 MiB
    strings that buffer was about 1.5 GB (peak RSS 1,983 MiB training on a
    100 MB file, 499 MiB with 64 KiB strings; the same merges, the same time)."""
    batch, size = [], 0
    for piece, count in zip(corpus.units, corpus.unit_counts.tolist(), strict=True):
        unit = piece + "\x00"
        per = max(1, block_chars // len(unit))
        while count > 0:
            k = min(count, per)
            batch.append(unit * k)
            size += k * len(unit)
            count -= k
            if size >= block_chars:
                yield "".join(batch)
                batch, size = [], 0
    if batch:
        yield "".join(batch)


def train_bpe(corpus: Corpus, vocab_size: int):
    """A byte-level BPE tokenizer (Hugging Face `tokenizers`) trained on the
    pieces of `corpus` to `vocab_size` tokens: its alphabet is the bytes the
    corpus uses, then the most frequent merges. Nothing is downloaded."""
    from tokenizers import trainers

    tokenizer = _bpe_tokenizer()
    trainer = trainers.BpeTrainer(vocab_size=int(vocab_size), show_progress=False)
    tokenizer.train_from_iterator(_bpe_feed(corpus), trainer=trainer)
    return tokenizer


def _bpe_labels(tokenizer) -> list[str]:
    """Each BPE token as text (bytes that are not whole UTF-8 characters as
    `\\xNN` escapes)."""
    decode = _byte_decoder()
    labels = [""] * tokenizer.get_vocab_size()
    for symbol, k in tokenizer.get_vocab().items():
        raw = bytes(decode[c] for c in symbol)
        labels[k] = raw.decode("utf-8", "backslashreplace")
    return labels


def _bpe_sequences(corpus: Corpus, tokenizer):
    """The BPE token ids of every distinct piece: (flat ids, lengths)."""
    flat, lengths = [], []
    units = list(corpus.units)
    for a in range(0, len(units), 1 << 16):
        for e in tokenizer.encode_batch(
            units[a : a + (1 << 16)], add_special_tokens=False
        ):
            flat.extend(e.ids)
            lengths.append(len(e.ids))
    return np.asarray(flat, np.int64), np.asarray(lengths, np.int64)


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
        flat, lengths = _bpe_sequences(corpus, tokenizer)
        units = _Units(flat=flat, lengths=lengths, labels=tuple(_bpe_labels(tokenizer)))
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
    keep = _check_vocab_size(vocab_size, order.size, corpus.source, tail)
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


# --------------------------------------------------------------------- encode
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
    elif isinstance(path_or_text, os.PathLike) or _names_a_path(path_or_text):
        files = resolve_path(path_or_text, "path_or_text")
        key["source"] = [
            [
                str(f.resolve()),
                cast(os.stat_result, _stat(f)).st_size,
                cast(os.stat_result, _stat(f)).st_mtime_ns,
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
        raise FileNotFoundError(f"cache: no such folder: {_quote(path.parent)}")
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
    level = _check_level(level)
    tail = _check_tail(tail)
    vocab_size = _check_vocab_type(vocab_size)
    progress = _check_progress(progress)
    smoothing = _check_smoothing(smoothing)
    cache = _check_cache(cache)
    key = None
    if cache is not None:
        key = _cache_key(path_or_text, level, vocab_size, tail)
        hit = None if key is None else _read_cache(cache, key)
        if hit is not None:
            ids, tokens, source = hit
            return _smoothed_stream(ids, tokens, smoothing, source)
    corpus = _as_corpus(path_or_text, level, progress=progress)
    units = _units_to_tokens(corpus, vocab_size, tail)
    labels, remap = _vocab_map(corpus, units, vocab_size, tail)
    d = len(labels)
    n = _stream_length(corpus, units, remap)
    if n < 2:
        raise ValueError(
            f"the corpus from {corpus.source} is too small: {n} tokens are left "
            f"in the vocabulary of {vocab_size} (tail='drop'), need at least 2"
        )
    dtype = _id_dtype(d)
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
    return _smoothed_stream(ids, labels, smoothing, corpus.source)


def from_text(
    path_or_text=None,
    vocab_size: int = 30,
    *,
    level: str = "word",
    smoothing: float | str = DEFAULT_SMOOTHING,
    tail: str = "other",
    progress: bool = True,
) -> MarkovChain:
    r"""The bigram Markov chain of a text (SPEC section 7).

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


__all__ = [
    "BUILTIN",
    "Corpus",
    "LEVELS",
    "OTHER",
    "TAILS",
    "TokenStream",
    "bigram_counts",
    "builtin_text",
    "corpus_from_string",
    "encode",
    "from_text",
    "load",
    "read_text",
    "resolve_path",
    "tokenize",
    "train_bpe",
]
