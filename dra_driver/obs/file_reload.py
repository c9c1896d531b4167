"""A value read from files (a TLS context, a token's digest), re-read when the files change on disk.

Shared by the metrics server's token and TLS files (``dra_driver.obs.scrape_auth``) and the
webhook's serving certificate (``webhook.server.TlsFiles``): a Secret's rotation replaces the
files, and the next request looking (at most every few seconds) gets the new value without a
restart. A change that cannot be read keeps the last value. Standard library only.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Generic, TypeVar

Stamp = tuple[tuple[int, int, int], ...]
"""(inode, modification time, size) of each file: what changes when a file is rewritten or replaced."""
_V = TypeVar("_V")


def stamp_of(paths: Iterable[Path]) -> Stamp:
    """The files' stamp; OSError when one cannot be looked at."""
    stats = [p.stat() for p in paths]
    return tuple((s.st_ino, s.st_mtime_ns, s.st_size) for s in stats)


class Reloaded(Generic[_V]):
    """A value read from files, re-read when their stamp changes (looked at most every ``every_s()`` seconds).

    ``stamp`` and ``load`` run now (their errors are start-up errors, raised); later, a re-read that
    raises one of ``errors`` keeps the last value and calls ``failed``; a successful one calls ``reloaded``.
    """

    def __init__(
        self,
        stamp: Callable[[], Stamp],
        load: Callable[[], _V],
        *,
        every_s: Callable[[], float],
        clock: Callable[[], float],
        errors: tuple[type[Exception], ...],
        reloaded: Callable[[], None],
        failed: Callable[[Exception], None],
    ) -> None:
        self._stamp_of, self._load, self._every_s, self._clock = stamp, load, every_s, clock
        self._errors, self._reloaded, self._failed = errors, reloaded, failed
        self._lock = threading.Lock()
        self._stamp = stamp()
        self.value = load()
        self._checked = clock()

    def current(self) -> _V:
        """The value of the files as they are now, or the last one read."""
        with self._lock:
            now = self._clock()
            if now - self._checked < self._every_s():
                return self.value
            self._checked = now
            try:
                stamp = self._stamp_of()
                if stamp != self._stamp:
                    self.value, self._stamp = self._load(), stamp
                    self._reloaded()
            except self._errors as err:
                self._failed(err)
            return self.value
