"""SIGTERM/SIGINT → a stop event, logged. Called by each daemon's ``main``.

The handler itself takes no lock: it only writes the signal's number to a pipe, and a thread of
its own reads it, logs ``signal_received`` and sets the event. A handler that logged (or set the
event) itself could run while the main thread held the same lock, in the middle of writing a log
line, and wait for it forever: a daemon told to stop right after start-up hung that way.
"""

from __future__ import annotations

import os
import signal
import threading
from types import FrameType

import structlog

log = structlog.get_logger(__name__)


def stop_on_signals(stop: threading.Event) -> None:
    """Set ``stop`` when SIGTERM or SIGINT arrives (and log which)."""
    read_fd, write_fd = os.pipe()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        del frame
        try:
            os.write(write_fd, bytes([signum]))  # async-signal-safe; no Python lock
        except OSError:
            stop.set()  # the pipe is full or gone: stop anyway

    def watch() -> None:
        while True:
            data = os.read(read_fd, 64)
            if not data:
                return
            for signum in data:
                log.info("signal_received", signal=signal.Signals(signum).name)
            stop.set()

    threading.Thread(target=watch, name="signals", daemon=True).start()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)
