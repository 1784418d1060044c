r"""Checkpoint files: the full state of a long computation, written atomically,
so that a killed run can be continued to the same result.

A checkpoint is a `.npz` file (read with `allow_pickle=False`) holding the
arrays of the state and JSON metadata: the gradflow version, what wrote it
(`kind`: `"integrate"` or `"train_sgd"`), a *fingerprint* of the call (its
settings and a SHA-256 hash of every input array) and the host-side state of
the loop. [`Checkpointer`][] reads it back only if the fingerprint matches the
call that wants to resume; otherwise it refuses, naming each difference.

The state itself is packed and unpacked by the job that owns it (the flow,
the sweep, SGD; see `driver.py`); this module only stores it.
"""

import hashlib
import json
import math
import os
import time
from pathlib import Path
from typing import Any, cast

import jax
import numpy as np

from .._core.files import atomic_write, json_default, read_npz_with_meta, version
from .._core.validate import is_number


FORMAT_NAME = "gradflow-checkpoint"
FORMAT_VERSION = 1
DEFAULT_EVERY = 120.0

# Settings that may change between a run and its resumption: they do not
# change the computed trajectory (`max_steps` only where it stops; raise it
# and resume to continue a run that ran out of steps).
_FREE_SETTINGS = frozenset({"max_steps", "progress"})


# How `differences` names an input array.
_INPUT_NAMES = {
    "ts": "the save times ts",
    "params0": "the initial parameters",
    "save_steps": "the save steps",
}
# The prefix of a problem's arrays among the inputs (`problem/chain.P`).
PROBLEM_PREFIX = "problem/"


def problem_inputs(arrays: dict[str, Any]) -> dict[str, Any]:
    """A problem's arrays (its fingerprint) as checkpoint inputs."""
    return {PROBLEM_PREFIX + k: v for k, v in arrays.items()}


def _input_name(group: str) -> str:
    if group.startswith(PROBLEM_PREFIX):
        return f"the problem's {group[len(PROBLEM_PREFIX) :]}"
    return _INPUT_NAMES.get(group, group)


def digest(x) -> str:
    """A short SHA-256 of an array's dtype, shape and bytes: how a fingerprint
    records an input."""
    x = np.ascontiguousarray(np.asarray(x))
    h = hashlib.sha256()
    h.update(f"{x.dtype.str}{x.shape}".encode())
    h.update(x.tobytes())
    return h.hexdigest()[:32]


def _jsonable(obj):
    """`obj` as it reads back from JSON (so fingerprints compare equal)."""
    return json.loads(json.dumps(obj, default=json_default))


def _fmt(value) -> str:
    text = json.dumps(value, default=json_default)
    return text if len(text) <= 60 else text[:57] + "..."


def pack_tree(prefix: str, tree) -> dict[str, np.ndarray]:
    """The leaves of a pytree as `{prefix/i: array}` (see [`unpack_tree`][])."""
    return {
        f"{prefix}/{i}": np.asarray(leaf)
        for i, leaf in enumerate(jax.tree.leaves(tree))
    }


def unpack_tree(prefix: str, arrays: dict, like) -> Any:
    """Rebuilds a pytree with the structure of `like` (a pytree or its
    `jax.eval_shape`) from the arrays written by [`pack_tree`][], checking
    each leaf's shape and dtype."""
    leaves, treedef = jax.tree.flatten(like)
    out = []
    for i, ref in enumerate(leaves):
        key = f"{prefix}/{i}"
        if key not in arrays:
            raise ValueError(f"the checkpoint has no array {key!r}")
        a = arrays[key]
        if a.shape != tuple(ref.shape) or a.dtype != np.dtype(ref.dtype):
            raise ValueError(
                f"the checkpoint's array {key!r} is {a.dtype}{list(a.shape)}, "
                f"expected {np.dtype(ref.dtype)}{list(ref.shape)}"
            )
        out.append(a)
    if f"{prefix}/{len(leaves)}" in arrays:
        raise ValueError(f"the checkpoint has more {prefix!r} arrays than expected")
    return jax.tree.unflatten(treedef, out)


def check_path(checkpoint) -> Path | None:
    """Validates a `checkpoint=` argument: `None` or a file path."""
    if checkpoint is None:
        return None
    if not isinstance(checkpoint, (str, os.PathLike)):
        raise TypeError(
            "checkpoint must be a file path (str or os.PathLike) or None, got "
            f"{type(checkpoint).__name__}"
        )
    path = Path(checkpoint)
    if str(checkpoint) == "" or path.is_dir():
        raise ValueError(f"checkpoint must be a file path, got {str(checkpoint)!r}")
    return path


def check_every(every) -> float:
    if not is_number(every):
        raise TypeError(f"checkpoint_every must be a number of seconds, got {every!r}")
    every = float(every)
    if not (math.isfinite(every) and every >= 0):
        raise ValueError(
            f"checkpoint_every must be a finite number of seconds >= 0, got {every}"
        )
    return every


class Checkpointer:
    """Reads and writes one checkpoint file for one call.

    **Arguments:**

    - `path`: the file (a `.npz`; written through a temporary file and a
      rename, so it is always either the previous or the new checkpoint).
    - `kind`: what writes it (`"integrate"`, `"train_sgd"`).
    - `settings`: the call's settings (JSON-able); `inputs`: its input arrays
      (the problem's, the initial parameters, save times, ...), compared by
      hash.
    - `every`: seconds of wall time between periodic writes ([`due`][]).

    Creating it reads an existing file at `path` (raising a `ValueError` that
    lists what differs if it was made by another call), so a mismatch is
    reported before any computation; `state` then holds `(meta, arrays)` to
    resume from, or `None`.
    """

    def __init__(
        self,
        path,
        kind: str,
        settings: dict,
        inputs: dict[str, Any],
        every: float = DEFAULT_EVERY,
    ):
        self.path = cast(Path, check_path(path))  # `path` is never None here
        self.kind = kind
        self.every = check_every(every)
        self.fingerprint = {
            "kind": kind,
            "settings": _jsonable(
                {k: v for k, v in settings.items() if k not in _FREE_SETTINGS}
            ),
            "inputs": {k: digest(v) for k, v in sorted(inputs.items())},
        }
        self.last_write = time.monotonic()
        self.num_writes = 0
        self.state = self._read() if self.path.exists() else None

    def _read(self):
        meta, arrays = read_npz_with_meta(self.path, FORMAT_NAME)
        found = meta.get("format_version")
        if found != FORMAT_VERSION:
            raise ValueError(
                f"checkpoint '{self.path}' has format version {found} (gradflow "
                f"{meta.get('gradflow_version')}); this gradflow ({version()}) "
                f"writes version {FORMAT_VERSION}: delete it or use another path"
            )
        diffs = self.differences(meta.get("fingerprint", {}))
        if meta.get("gradflow_version") != version():
            diffs.insert(
                0,
                f"gradflow version {meta.get('gradflow_version')} there, "
                f"{version()} here",
            )
        if diffs:
            raise ValueError(
                f"checkpoint '{self.path}' was made by a different call: "
                + "; ".join(diffs)
                + ". Delete it, pass another checkpoint path, or repeat that call"
            )
        return meta["state"], arrays

    def restore(self, prefix: str, like, fit=None):
        """The state this checkpoint holds (written with `pack_tree(prefix,
        ...)`), in the structure of `like`, as NumPy arrays; a `ValueError`
        naming the file if its arrays do not fit. `fit(arrays, like, prefix)`:
        the arrays adapted first (`loop.fit_save_buffer`: a save buffer of
        another length)."""
        if self.state is None:
            raise ValueError(f"checkpoint '{self.path}' holds no state yet")
        arrays = self.state[1]
        if fit is not None:
            arrays = fit(arrays, like, prefix)
        try:
            return unpack_tree(prefix, arrays, like)
        except ValueError as e:
            raise ValueError(
                f"checkpoint '{self.path}' does not fit this call: {e}; delete it "
                "to start afresh"
            ) from None

    def differences(self, other: dict) -> list[str]:
        """What differs between this call's fingerprint and `other`, in words."""
        mine = self.fingerprint
        diffs = []
        if other.get("kind") != mine["kind"]:
            return [f"written by {other.get('kind')!r}, not {mine['kind']!r}"]
        theirs_s, mine_s = other.get("settings", {}), mine["settings"]
        for key in sorted(set(theirs_s) | set(mine_s)):
            a, b = theirs_s.get(key, "(unset)"), mine_s.get(key, "(unset)")
            if a != b:
                diffs.append(f"{key} = {_fmt(a)} there, {_fmt(b)} here")
        theirs_i, mine_i = other.get("inputs", {}), mine["inputs"]
        differing = []  # inputs named once per group: params0/0, params0/1 -> params0
        for key in sorted(set(theirs_i) | set(mine_i)):
            group = key if key.startswith(PROBLEM_PREFIX) else key.split("/")[0]
            if theirs_i.get(key) != mine_i.get(key) and group not in differing:
                differing.append(group)
        diffs += [f"{_input_name(g)} differs" for g in differing]
        return diffs

    def due(self) -> bool:
        """Whether `every` seconds have passed since the last write (or start)."""
        return time.monotonic() - self.last_write >= self.every

    def write(self, state: dict, arrays: dict[str, np.ndarray]) -> None:
        """Writes `state` (JSON-able) and `arrays` atomically."""
        meta = {
            "format": FORMAT_NAME,
            "format_version": FORMAT_VERSION,
            "gradflow_version": version(),
            "fingerprint": self.fingerprint,
            "state": state,
            "written": time.strftime("%Y-%m-%d %H:%M:%S"),
        }
        arrays = dict(arrays)
        arrays["__gradflow__"] = np.array(json.dumps(meta, default=json_default))
        atomic_write(self.path, lambda f: np.savez(f, **arrays))  # pyright: ignore[reportArgumentType]
        self.last_write = time.monotonic()
        self.num_writes += 1


__all__ = [
    "Checkpointer",
    "check_every",
    "check_path",
    "digest",
    "pack_tree",
    "problem_inputs",
    "unpack_tree",
]
