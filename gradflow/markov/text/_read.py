"""Reading local files: a path resolved to the files it names (a file, or the
text files of a folder), each checked (not empty, not binary), and their UTF-8
text read whole or as a stream of blocks of `BLOCK_BYTES`, regrouped into
pieces cut before a run of whitespace (no word is split between two pieces).
Every failure is a one-line error naming the argument and the file, never the
filesystem's own `OSError`.
"""

import codecs
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import cast

from ._checks import show


# Suffixes read when `path` is a folder: plain text, WikiText's `.raw` and
# `.tokens` files, TinyStories' `.txt`.
TEXT_SUFFIXES = (".txt", ".raw", ".tokens", ".text", ".md")
# Bytes read at a time, and the size of the blocks tokenised at once.
BLOCK_BYTES = 4 << 20
# A progress bar appears after this many seconds (tqdm's `delay`).
PROGRESS_DELAY = 2.0


def quote(path) -> str:
    """A path for a one-line message (`repr` escapes newlines and control
    characters, which a file name may hold)."""
    return repr(str(path))


def nul_error(name: str, value: str) -> ValueError:
    k = value.index("\x00")
    return ValueError(
        f"{name} holds a NUL byte (at character {k}), so it is neither a path (no "
        f"path can hold one) nor text (binary data?): got {name} = {show(value)}"
    )


def stat(path: Path):
    """`os.stat`, or `None` where the filesystem says the name is not there
    (missing, too long, a file used as a folder, a dangling link)."""
    try:
        return path.stat()
    except (OSError, ValueError):
        return None


def _read_error(name: str, path: Path, error: OSError) -> ValueError:
    return ValueError(
        f"{name}: {quote(path)} cannot be read: {error.strerror or error}"
    )


NUL = b"\x00"


def _binary_error(name: str, path: Path, offset: int) -> ValueError:
    return ValueError(
        f"{name}: {quote(path)} is a binary file, not text (a NUL byte at offset "
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
        raise ValueError(f"{name}: the file {quote(path)} is empty (0 bytes)")
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
            f"{name}: folder {quote(folder)} holds no text files (looked for "
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
        raise nul_error(name, raw)
    if not raw.strip():
        # Path("") is the current folder: never read it by accident.
        raise ValueError(
            f"{name} is an empty string ({raw!r}); pass None for the built-in corpus"
        )
    p = Path(raw).expanduser()
    st = stat(p)
    if st is None:
        raise FileNotFoundError(f"{name}: no such file or folder: {quote(p)}")
    if p.is_dir():
        return _files_in(name, p)
    _check_file(name, p)
    return [p]


def names_a_path(value: str) -> bool:
    """Whether a string names an existing file or folder (a one-line, non-blank
    string the filesystem finds)."""
    if "\n" in value or not value.strip() or len(value.encode()) > 4096:
        return False
    return stat(Path(value).expanduser()) is not None


def looks_like_file_name(value: str) -> bool:
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


def read_utf8(name: str, path: Path) -> str:
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
            f"{name}: {quote(path)} is not UTF-8 text: byte 0x{raw[e.start]:02x} at "
            f"offset {e.start} cannot be decoded ({e.reason}); convert it, for "
            f"example with `iconv -f latin1 -t utf-8`"
        ) from None


def progress_bar(files: list[Path], progress: bool, source: str):
    if not progress:
        return None
    import tqdm

    total = sum(cast(os.stat_result, stat(f)).st_size for f in files)
    return tqdm.tqdm(
        total=total,
        unit="B",
        unit_scale=True,
        delay=PROGRESS_DELAY,
        desc=f"reading {Path(source).name}",
        leave=False,
    )


def _last_run_start(text: str) -> int:
    """The start of the last run of whitespace that follows a non-space (0 if
    none): cutting there splits no word and no whitespace run."""
    i = max(text.rfind(" "), text.rfind("\n"))
    while i > 0 and text[i - 1].isspace():
        i -= 1
    return max(i, 0)


def pieces(blocks: Iterable[str], block_bytes: int = BLOCK_BYTES) -> Iterator[str]:
    """Regroups blocks of text into pieces cut just before a run of whitespace
    (each at least `block_bytes // 2` characters, the last one excepted)."""
    carry = ""
    for block in blocks:
        carry = carry + block if carry else block
        if len(carry) < block_bytes // 2:
            continue
        cut = _last_run_start(carry)
        if cut > 0:
            yield carry[:cut]
            carry = carry[cut:]
    if carry:
        yield carry


def string_blocks(text: str, block_bytes: int = BLOCK_BYTES) -> Iterator[str]:
    for i in range(0, len(text), block_bytes):
        yield text[i : i + block_bytes]


def file_blocks(
    name: str, files: list[Path], bar, block_bytes: int = BLOCK_BYTES
) -> Iterator[str]:
    """The decoded text of `files`, joined by blank lines, in blocks of
    `block_bytes` bytes read; NUL bytes and invalid UTF-8 are reported with
    the file and the byte offset."""
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
                    raw = f.read(block_bytes)
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
        f"{name}: {quote(path)} is not UTF-8 text: byte 0x{e.object[e.start]:02x} "
        f"at offset {base + e.start} cannot be decoded ({e.reason}); convert it, for "
        f"example with `iconv -f latin1 -t utf-8`"
    )
