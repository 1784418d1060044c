"""Pressing Ctrl-C in a test, as a user does: `SIGINT` to this process, sent
from a thread once the run is under way (used by tests/test_cli_run.py and
tests/test_sgd_checkpoint.py)."""

import contextlib
import os
import signal
import threading
import time


@contextlib.contextmanager
def ctrl_c_when(ready, poll: float = 0.001):
    """Runs the block while a thread checks `ready()` every `poll` seconds
    and, the first time it holds, sends `SIGINT` to this process (once).

    `ready` should hold only while the run is in its loop of chunks (e.g. its
    checkpoint file exists, written after every chunk with
    `--checkpoint-every 0`): gradflow then stops after the current chunk.
    Yields a list that holds `True` once the signal was sent."""
    sent: list[bool] = []
    done = threading.Event()

    def watch():
        while not done.is_set():
            if ready():
                sent.append(True)
                os.kill(os.getpid(), signal.SIGINT)
                return
            time.sleep(poll)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    try:
        yield sent
    finally:
        done.set()
        thread.join()
