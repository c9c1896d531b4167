"""SIGTERM/SIGINT → a stop event, logged. Called by each daemon's ``main``."""

from __future__ import annotations

import signal
import threading
from types import FrameType

import structlog

log = structlog.get_logger(__name__)


def stop_on_signals(stop: threading.Event) -> None:
    """Set ``stop`` when SIGTERM or SIGINT arrives."""

    def on_signal(signum: int, frame: FrameType | None) -> None:
        del frame
        log.info("signal_received", signal=signal.Signals(signum).name)
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)
