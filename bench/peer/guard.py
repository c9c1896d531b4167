"""Process safety: the --deadline (SIGALRM) and SIGTERM become exceptions, and a stuck cleanup ends in SIGKILL.

``Guard`` wraps ``bench.peer.run.run_bench``; ``BenchTimeout`` is caught by ``bench.peer.cli.main``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Callable
from types import FrameType
from typing import Any


class BenchTimeout(Exception):
    """The --deadline passed."""


def _raise_timeout(signum: int, frame: FrameType | None) -> None:
    raise BenchTimeout


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


class Guard:
    """Makes the --deadline (SIGALRM) and SIGTERM exceptions, so the finally-blocks stop every process.

    ``cleaning()`` starts the cleanup: Ctrl-C is ignored from then on, and if stopping takes
    over ``cleanup_s`` every pid ``live`` names gets SIGKILL and the bench exits.
    """

    def __init__(self, deadline_s: int, cleanup_s: int, live: Callable[[], list[int]]) -> None:
        self.deadline_s = deadline_s
        self.cleanup_s = cleanup_s
        self.live = live
        self._old: list[tuple[int, Any]] = []

    def __enter__(self) -> Guard:
        for sig, handler in ((signal.SIGALRM, _raise_timeout), (signal.SIGTERM, _raise_interrupt), (signal.SIGINT, None)):
            self._old.append((sig, signal.getsignal(sig)))
            if handler is not None:
                signal.signal(sig, handler)
        signal.alarm(self.deadline_s)
        return self

    def cleaning(self) -> None:
        signal.alarm(0)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGALRM, self._hard_exit)
        signal.alarm(self.cleanup_s)

    def _hard_exit(self, signum: int, frame: FrameType | None) -> None:
        pids = self.live()
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        print(f"bench: cleanup took over {self.cleanup_s}s; sent SIGKILL to {pids}", file=sys.stderr)
        os._exit(3)

    def __exit__(self, *exc: object) -> None:
        signal.alarm(0)
        for sig, handler in reversed(self._old):
            signal.signal(sig, handler)
