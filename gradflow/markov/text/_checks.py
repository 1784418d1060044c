"""Argument checks shared by the text functions (`level`, `tail`, `progress`,
`min_tokens`, `vocab_size`, `smoothing`): each raises a one-line error that
names the argument and shows the value given. The other text modules take
`show` from here.
"""

import numpy as np

from ..._core.errors import show


LEVELS = ("word", "char", "bpe")
TAILS = ("other", "drop")


def check_level(level) -> str:
    if not isinstance(level, str) or level not in LEVELS:
        raise ValueError(f"level must be one of {LEVELS}, got level = {show(level)}")
    return level


def check_tail(tail) -> str:
    if not isinstance(tail, str) or tail not in TAILS:
        raise ValueError(f"tail must be one of {TAILS}, got tail = {show(tail)}")
    return tail


def check_progress(progress) -> bool:
    if not isinstance(progress, (bool, np.bool_)):
        raise TypeError(f"progress must be True or False, got {show(progress)}")
    return bool(progress)


def _integer(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an integer, got {name} = {show(value)}")
    return int(value)


def check_block_bytes(block_bytes) -> int:
    if _integer("block_bytes", block_bytes) < 1:
        raise ValueError(f"block_bytes must be >= 1, got block_bytes = {block_bytes}")
    return int(block_bytes)


def check_min_tokens(min_tokens) -> int:
    return max(2, _integer("min_tokens", min_tokens))


def check_vocab_size(vocab_size, num_distinct: int, source: str, tail: str) -> int:
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


def check_vocab_type(vocab_size) -> int:
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, (int, np.integer)):
        raise TypeError(f"vocab_size must be an integer, got {show(vocab_size)}")
    if vocab_size < 2:
        raise ValueError(
            f"vocab_size must be >= 2 (at least one token plus <other>), got "
            f"vocab_size = {vocab_size}"
        )
    return int(vocab_size)


def check_smoothing(smoothing) -> float | str:
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
