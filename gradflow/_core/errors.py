"""Helpers for error messages: every error gradflow raises for bad input is one
line that names the argument and shows the bad value (see `docs/errors.md`)."""

import numpy as np


_MAX_SHOWN = 80


def show(value, limit: int = _MAX_SHOWN) -> str:
    """A one-line, bounded description of a (bad) value for an error message.

    Arrays are described by shape and dtype (their repr spans several lines),
    NumPy scalars by their Python value, and anything longer than `limit`
    characters is cut with `...`.
    """
    if isinstance(value, np.generic):
        value = value.item()
    elif hasattr(value, "shape") and hasattr(value, "dtype") and np.ndim(value) > 0:
        return f"an array of shape {tuple(np.shape(value))} and dtype {value.dtype}"
    text = " ".join(repr(value).split())
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    return text


def is_number(value) -> bool:
    """Whether `value` is a real scalar number (not a bool, a string or an array)."""
    if isinstance(value, (bool, np.bool_, str, bytes)):
        return False
    if hasattr(value, "shape") and np.ndim(value) > 0:
        return False
    try:
        float(value)
    except (TypeError, ValueError):
        return False
    return not np.iscomplexobj(value)
