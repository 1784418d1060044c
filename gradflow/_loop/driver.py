r"""The one host driver of compiled chunks, shared by the flow, the sweep and
SGD.

Each of them keeps its whole state between chunks in one PyTree (a
[`gradflow._loop.loop.LoopState`][], a batch of them, or SGD's state) and
advances it by a pure compiled chunk function. What the host does between
chunks is the same for all three and written once here: run the next chunk
while the job has work, read what the chunk located (events), move the
progress bar, stop cleanly on Ctrl-C and write checkpoints (when due, after a
chunk with events, and at the end). A [`Job`][] says what is specific: how to
advance, when to stop, what to read and what a checkpoint holds.

An interrupted run raises one [`gradflow.Interrupted`][] (a
`KeyboardInterrupt` carrying the partial result), built by
[`interrupted`][].
"""

import abc
import contextlib
import dataclasses
import signal
import sys
import threading
import time
from typing import Any

import numpy as np

from .._core.progress import host_progress
from .._core.threads import limited_blas_threads
from .checkpoint import Checkpointer


class Interrupted(KeyboardInterrupt):
    """Raised when a run is interrupted (Ctrl-C, `SIGINT`): a `KeyboardInterrupt`
    that carries what was computed.

    - `result`: the partial [`gradflow.Trajectory`][], [`gradflow.Sweep`][] or
      [`gradflow.SGDRun`][] up to the interruption (result code `interrupted`).
    - `checkpoint`: the checkpoint file written on the way out, or `None`.

    ```python
    try:
        traj = gf.integrate(chain, 1e-3, run=gf.Run(checkpoint="run.ckpt.npz"))
    except gf.Interrupted as e:
        traj = e.result  # everything up to the interruption
    ```
    """

    def __init__(self, message: str, result: Any = None, checkpoint=None):
        super().__init__(message)
        self.result = result
        self.checkpoint = checkpoint


def interrupted_message(what: str, checkpoint: Checkpointer | None) -> str:
    """`what` (e.g. `"interrupted at t = 12 of t1 = 100"`) and how to resume:
    the one message of every interrupted run."""
    if checkpoint is not None:
        return (
            f"{what}; the checkpoint '{checkpoint.path}' holds the state: run the "
            "same call again to resume"
        )
    return f"{what}; pass checkpoint=PATH to be able to resume"


def interrupted(message: str, result, checkpoint: Checkpointer | None) -> Interrupted:
    """The [`gradflow.Interrupted`][] of a run stopped by Ctrl-C."""
    return Interrupted(
        message,
        result=result,
        checkpoint=None if checkpoint is None else checkpoint.path,
    )


class _InterruptFlag:
    requested = False


@contextlib.contextmanager
def deferred_interrupt():
    """Defers Ctrl-C (`SIGINT`) inside the block: the first one only sets
    `flag.requested`, which the driver checks between chunks (so it can stop at
    a consistent state, write its checkpoint and return what it has); a second
    one raises `KeyboardInterrupt` at once. Outside the main thread (where
    Python cannot install signal handlers) nothing is deferred, and a process
    that ignores `SIGINT` (started with `nohup`, or in the background of a
    non-interactive shell) keeps ignoring it."""
    flag = _InterruptFlag()
    if threading.current_thread() is not threading.main_thread():
        yield flag
        return
    previous = signal.getsignal(signal.SIGINT)
    if previous is signal.SIG_IGN:
        yield flag
        return
    if previous is None:  # installed outside Python: restore Python's default
        previous = signal.default_int_handler

    def handler(signum, frame):
        if flag.requested:
            signal.signal(signal.SIGINT, previous)
            raise KeyboardInterrupt
        flag.requested = True
        # on a line of its own: a progress bar may stand on the current line
        # (it is redrawn below this one)
        print(
            "\ngradflow: interrupt received; stopping after the current chunk of "
            "steps (press Ctrl-C again to abort at once)",
            file=sys.stderr,
        )

    signal.signal(signal.SIGINT, handler)
    try:
        yield flag
    finally:
        signal.signal(signal.SIGINT, previous)


class Job(abc.ABC):
    """What the driver needs of one run (host side; the state is a PyTree)."""

    @abc.abstractmethod
    def running(self, state) -> bool:
        """Whether another chunk is due (checked before each chunk)."""

    @abc.abstractmethod
    def advance(self, state):
        """One compiled chunk: the state after it."""

    def collect(self, state) -> tuple[Any, bool]:
        """Reads what the chunk located (events) out of the state: `(state
        with an empty buffer, whether anything was read)`."""
        return state, False

    @abc.abstractmethod
    def progress(self, state) -> tuple[float, str | None]:
        """`(value, suffix)` of the progress bar (`suffix` may be `None`)."""

    @abc.abstractmethod
    def snapshot(self, state) -> tuple[dict, dict[str, np.ndarray]]:
        """`(meta, arrays)`: what a checkpoint of this state holds."""

    def agree(self, flags: np.ndarray) -> np.ndarray:
        """Host decisions (interrupt, checkpoint due) taken by one process and
        followed by all (a sweep over several hosts); identity by default."""
        return flags

    @property
    def writes(self) -> bool:
        """Whether this process writes the checkpoint (one of several hosts
        does)."""
        return True


@dataclasses.dataclass(frozen=True)
class Driven:
    """How a drive ended: the final state, whether Ctrl-C stopped it, the
    chunks run and the wall time of the drive."""

    state: Any
    interrupted: bool
    num_chunks: int
    wall_time: float


def drive(
    job: Job,
    state,
    *,
    total: float,
    start: float = 0.0,
    description: str = "gradflow",
    progress: bool = True,
    checkpoint: Checkpointer | None = None,
) -> Driven:
    """Runs `job.advance` chunk by chunk while `job.running(state)`, until Ctrl-C
    (the first one stops after the current chunk; a second aborts at once).

    After each chunk: the located events are read (`job.collect`), the bar
    moves (`total` is its end, `start` where a resumed run begins), and the
    checkpoint is written when one is due or the chunk had events; it is
    written once more at the end, however the drive ended.
    """
    wall = time.perf_counter()
    chunks = 0
    stopped = False

    def write(state):
        if checkpoint is not None:
            # on every process: a job spanning hosts gathers its state
            meta, arrays = job.snapshot(state)
            if job.writes:
                checkpoint.write(meta, arrays)

    with (
        # one BLAS thread for the solve (gradflow/_core/threads.py says why)
        limited_blas_threads(),
        deferred_interrupt() as interrupt,
        host_progress(
            total, enabled=progress, description=description, start=start
        ) as bar,
    ):
        while job.running(state):
            state = job.advance(state)
            chunks += 1
            state, fired = job.collect(state)
            bar.update(*job.progress(state))
            flags = job.agree(
                np.array(
                    [
                        interrupt.requested,
                        checkpoint is not None and (fired or checkpoint.due()),
                    ]
                )
            )
            if flags[0]:
                # a run whose last chunk finished it was not interrupted
                stopped = job.running(state)
                break
            if flags[1]:
                write(state)
        bar.update(*job.progress(state))
        write(state)
    return Driven(
        state=state,
        interrupted=stopped,
        num_chunks=chunks,
        wall_time=time.perf_counter() - wall,
    )


__all__ = [
    "Driven",
    "Interrupted",
    "Job",
    "deferred_interrupt",
    "drive",
    "interrupted",
    "interrupted_message",
]
