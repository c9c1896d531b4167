"""Group commit: the calls that queue while one holds the node lock are done together, under one save.

Used by ``kubelet_plugin.prepare.state`` for NodePrepareResources and NodeUnprepareResources. When many
pods land at once the kubelet sends one call per claim, concurrently; each used to take the
node-wide lock in turn and write the checkpoint (fsyncs included) for itself. Here a call queues
its work and takes the lock; whoever gets it first does every queued call's work at once, and the
calls it did find theirs done when their turn comes. Every answer is still given only after the
checkpoint that records it is saved, and each call still gets its own answer; a call that cannot
get the lock in time gets its timeout only when no holder has taken its work.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from dra_driver.files.lock import LockTimeout

W = TypeVar("W")

TAKEN_WAIT_S = 120.0
"""How long a call whose work a holder took waits for it (the holder's batch is bounded: one claim's MIG
work is seconds); past it the call answers that it timed out and the kubelet retries."""


@dataclass(eq=False)
class Ticket(Generic[W]):
    """One call's work in the queue; ``done`` is set once the batch that took it finished."""

    work: W
    done: threading.Event = field(default_factory=threading.Event)


class GroupCommit(Generic[W]):
    """A queue of calls' work, done in batches by whoever holds ``lock``."""

    def __init__(self, lock: Callable[[], AbstractContextManager[None]]) -> None:
        """``lock()``: the node lock, as a context manager that raises LockTimeout."""
        self._lock = lock
        self._mu = threading.Lock()
        self._queue: list[Ticket[W]] = []

    def run(self, work: W, do_batch: Callable[[list[W]], None]) -> None:
        """Queue ``work``, then do every queued work (``do_batch``) once the lock is held, unless done already.

        ``do_batch`` must record an answer in each work it is given, even when it raises (the
        exception is raised to the caller whose thread ran it; the others see their answers).
        LockTimeout when the lock was not had in time and no holder took ``work``.
        """
        ticket = Ticket(work)
        with self._mu:
            self._queue.append(ticket)
        try:
            with self._lock():
                if ticket.done.is_set():
                    return
                batch = self._take()
                try:
                    do_batch([t.work for t in batch])
                finally:
                    for t in batch:
                        t.done.set()
        except LockTimeout:
            with self._mu:
                if ticket in self._queue:
                    self._queue.remove(ticket)
                    raise
            if not ticket.done.wait(TAKEN_WAIT_S):
                raise

    def _take(self) -> list[Ticket[W]]:
        with self._mu:
            batch, self._queue = self._queue, []
        return batch
