r"""Tokenising text into units and counting them, in bounded memory: each
piece of text is split into units (words, characters, or the pieces that
byte-level BPE merges within) with vectorised NumPy (no Python object per
unit), units are counted by a 64-bit hash of their characters, and each
occurrence is written as an id of the smallest unsigned integer type that
holds the ids seen so far. `tokenize` is the reference, with `re`, for small
strings.
"""

import re
from collections.abc import Iterable

import numpy as np

from ._checks import check_level
from ._read import BLOCK_BYTES, pieces


# A word is a run of letters/digits (Unicode-aware), with inner apostrophes
# kept ("don't"); punctuation, markup (WikiText's "@-@", "= = Title = =") and
# code symbols are dropped, so that the vocabulary is made of words. The
# streaming tokeniser implements exactly this pattern with NumPy (`_word_keys`);
# `tokenize` applies it with `re` (the reference, for small strings).
_WORD = re.compile(r"[^\W_]+(?:'[^\W_]+)*")
_SPACE = re.compile(r"\s+")


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
        ids = found.astype(id_dtype(len(self.names)))
        counts = np.bincount(ids, minlength=len(self.names))
        counts[: self.counts.size] += self.counts
        self.counts = counts
        self.blocks.append(ids)


def count_units(
    blocks: Iterable[str], level: str, block_bytes: int = BLOCK_BYTES
) -> _UnitCounter:
    counter = _UnitCounter()
    units = _UNITS[level]
    for piece in pieces(blocks, block_bytes):
        keys, name_of = units(piece)
        counter.add(keys, name_of)
    return counter


def id_dtype(d: int) -> np.dtype:
    for dtype in (np.uint8, np.uint16, np.uint32):
        if d <= np.iinfo(dtype).max + 1:
            return np.dtype(dtype)
    return np.dtype(np.int64)


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
    level = check_level(level)
    if level == "bpe":
        raise ValueError(
            "level 'bpe' has no fixed tokeniser: its tokens are learnt by "
            "gf.text.encode(text, vocab_size, level='bpe')"
        )
    if level == "word":
        return _WORD.findall(text.lower())
    return list(_SPACE.sub(" ", text))
