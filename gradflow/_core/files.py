"""The foundations of gradflow's files: the version written into them, JSON
encoding of their metadata, atomic writes, and the one reader of a gradflow
`.npz` file (clear errors for a missing, damaged, foreign or misdirected file).
Every result and checkpoint module builds on these."""

import importlib.metadata
import io
import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path

import numpy as np


# Every .npz file is a zip archive: a local file header, or the end record of
# an empty archive.
_ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")


def version() -> str:
    """The installed gradflow version (written into every file)."""
    try:
        return importlib.metadata.version("gradflow")
    except importlib.metadata.PackageNotFoundError:  # running from a source tree
        return "0.0.0+unknown"


def json_default(obj):
    """`json.dumps(default=...)` for NumPy and JAX scalars and arrays."""
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (np.floating,)):
        return float(obj)
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if hasattr(obj, "dtype") and hasattr(obj, "tolist"):
        return np.asarray(obj).tolist()
    return str(obj)


def atomic_write(path: Path, write) -> None:
    """Writes through a temporary file in the same folder, then renames it, so
    that a crash never leaves a half-written file under `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        # mkstemp makes the file private (0600); a result file gets the
        # permissions any new file gets (0666 less the umask).
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def existing_path(flag: str, value, *, allow: tuple[str, ...] = ()) -> Path:
    """`value` as a `Path` that exists (a file or a folder), or a one-line
    `FileNotFoundError` naming `flag` (a command line's option, or an
    argument). A value in `allow` (e.g. `builtin`) is a keyword, not a path,
    and is refused here: test for it first."""
    path = Path(os.fspath(value)).expanduser()
    if str(value) in allow:
        raise ValueError(f"{flag}: {value!r} is a keyword, not a path")
    if not str(value).strip() or not path.exists():
        also = f" (or {', '.join(repr(a) for a in allow)})" if allow else ""
        raise FileNotFoundError(
            f"{flag}: no such file or folder: '{path}'; give an existing path{also}"
        )
    return path


def read_array(flag: str, value) -> np.ndarray:
    """The array of a `.npy` file (written by `numpy.save`) named by `flag`;
    a one-line error naming `flag` when it is missing, a folder or not a
    readable `.npy` array."""
    path = existing_path(flag, value)
    if path.is_dir():
        raise ValueError(f"{flag}: '{path}' is a folder, not a .npy file")
    try:
        return np.load(path, allow_pickle=False)
    except Exception as e:
        reason = " ".join(str(e).split())
        raise ValueError(
            f"{flag}: could not read '{path}' as a .npy array: {reason}"
        ) from None


def peek_format(path) -> str | None:
    """The `format` a gradflow `.npz` file declares (reading only its metadata
    member), or `None` if `path` is not a readable gradflow file (the full
    reader then says why)."""
    if not isinstance(path, (str, os.PathLike)):
        return None
    try:
        # the file opened here, so that it is closed whatever np.load raises
        with open(path, "rb") as fh, np.load(fh, allow_pickle=False) as npz:
            if "__gradflow__" not in npz.files:
                return None
            meta = json.loads(str(npz["__gradflow__"]))
    except Exception:
        return None
    found = meta.get("format") if isinstance(meta, dict) else None
    return found if isinstance(found, str) else None


def read_npz_with_meta(
    path: str | os.PathLike, expected_format: str, readers: Mapping[str, str] = {}
) -> tuple[dict, dict]:
    """Reads a gradflow `.npz` file: returns `(meta, arrays)`; raises a clear
    error for a missing, truncated, foreign or too-new file (for a file of
    another format, naming its reader from `readers`: format name to the
    public name of its reader)."""
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a str or os.PathLike, got {type(path).__name__}")
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no such file: '{path}'")
    if path.is_dir():
        raise ValueError(f"'{path}' is a directory, not a {expected_format} file")
    raw = path.read_bytes()
    if not raw.startswith(_ZIP_MAGIC):
        kind = "an empty file" if not raw else f"it starts with {raw[:8]!r}"
        raise ValueError(
            f"'{path}' is not a {expected_format} file: it is not a NumPy .npz "
            f"archive ({kind})"
        )
    try:
        with np.load(io.BytesIO(raw), allow_pickle=False) as npz:
            arrays = {k: npz[k] for k in npz.files}
    except Exception as e:
        reason = " ".join(f"{type(e).__name__}: {e}".split())
        raise ValueError(
            f"'{path}' could not be read as a {expected_format} file: the .npz "
            f"archive is damaged or truncated ({len(raw)} bytes; {reason})"
        ) from None
    if "__gradflow__" not in arrays:
        raise ValueError(
            f"'{path}' is not a {expected_format} file: it holds no gradflow "
            f"metadata (arrays {', '.join(sorted(arrays)[:6]) or 'none'}); it was not "
            "written by gradflow"
        )
    try:
        meta = json.loads(str(arrays.pop("__gradflow__")))
    except json.JSONDecodeError as e:
        raise ValueError(f"'{path}' has corrupt gradflow metadata: {e}") from None
    if not isinstance(meta, dict):
        raise ValueError(f"'{path}' has corrupt gradflow metadata: not a JSON object")
    found = meta.get("format")
    if found != expected_format:
        hint = f"; read it with {readers[found]}" if found in readers else ""  # pyright: ignore[reportArgumentType]
        raise ValueError(
            f"'{path}' is a {found!r} file, not a {expected_format!r} file{hint}"
        )
    return meta, arrays
