"""Holds the kubelet's calls that arrive while the plugin is still starting, and hands them its parts once it has.

The plugin serves its sockets before it loads the modules of its state (``kubelet_plugin.main``),
so that the kubelet registers it within a fraction of a second of its start: after a reboot or a
restart a pod the kubelet syncs then gets its prepare answered instead of failing and waiting for a
resync. Until ``open`` (the checkpoint recovered, ``kubelet_plugin.bringup``) a call that needs the
state waits in ``wait``, at most ``HOLD_S``; then, or after ``fail`` (start-up stopped), it gets
``NotReady`` and answers each claim with that error: nothing is prepared or unprepared from a state
not yet recovered (fail closed), and the kubelet retries (the waiting-pods prompt, which waits for
the gate, brings such pods back once it opens). At most ``max_held`` calls wait at once; more are
refused at once, so that held calls never take every worker thread of the DRA socket and the
liveness probe's empty call, which never waits, always finds one.

Called by ``kubelet_plugin.servicer`` (prepare, unprepare), ``kubelet_plugin.monitoring.health_services``
(the health streams), ``kubelet_plugin.liveness`` (readiness) and the waiting-pods prompter (through
``kubelet_plugin.main``); opened by ``kubelet_plugin.bringup``, failed by ``kubelet_plugin.main`` and
``kubelet_plugin.servers`` (SIGTERM).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kubelet_plugin.monitoring.device_status import DeviceStatusReporter
    from kubelet_plugin.monitoring.health_stream import HealthStreams
    from kubelet_plugin.prepare.state import DeviceState

HOLD_S = 8.0
"""Seconds a call waits for start-up: with the lock wait (10 s) and the claim lookups' budget (25 s,
``kubelet_plugin.prepare.requests.LOOKUP_BUDGET_S``) it stays below the kubelet's 45 s deadline per
call, so every claim still gets an answer of its own."""
MAX_HELD = 6
"""Calls waiting at once: the DRA socket's 8 worker threads less two (``kubelet_plugin.sockets``)."""


class NotReady(Exception):
    """Start-up did not hand over the state in time, or stopped; the message says which."""


@dataclass(frozen=True, slots=True)
class Parts:
    """What the calls need: the device state, the claim status reporter, the health streams (None: off)."""

    state: DeviceState
    status: DeviceStatusReporter | None = None
    streams: HealthStreams | None = None


class StartGate:
    """Closed until start-up opens it with the plugin's ``Parts`` or fails it with a reason; never closes again."""

    def __init__(self, max_held: int = MAX_HELD) -> None:
        self._done = threading.Event()
        self._parts: Parts | None = None
        self._failure = ""
        self._held = threading.BoundedSemaphore(max_held)
        self._max_held = max_held
        self._on_open: list[Callable[[], None]] = []

    def when_open(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` (on the opening thread) once the gate opens; never if it fails."""
        self._on_open.append(callback)

    @classmethod
    def opened(cls, state: DeviceState, status: DeviceStatusReporter | None = None) -> StartGate:
        """A gate already open over ``state`` (tests, and servicers built after start-up)."""
        gate = cls()
        gate.open(Parts(state, status))
        return gate

    def open(self, parts: Parts) -> None:
        """Start-up is done: every held and later call gets ``parts``."""
        if self._done.is_set():
            raise RuntimeError("the start gate was already opened or failed")
        self._parts = parts
        self._done.set()
        for callback in self._on_open:
            callback()

    def fail(self, reason: str) -> None:
        """Start-up stopped: held and later calls get ``NotReady(reason)`` (a no-op once opened)."""
        if self._done.is_set():
            return
        self._failure = reason
        self._done.set()

    @property
    def is_open(self) -> bool:
        """Whether start-up handed over the parts."""
        return self._parts is not None

    @property
    def parts(self) -> Parts | None:
        """The parts if open, without waiting."""
        return self._parts

    def wait(self, timeout_s: float = HOLD_S) -> Parts:
        """The parts, once start-up has handed them over.

        ``NotReady`` after ``timeout_s``, after a failed start-up, or at once if ``max_held`` calls already wait.
        """
        if not self._done.is_set():
            if not self._held.acquire(blocking=False):
                raise NotReady(f"the plugin is still recovering its state and {self._max_held} calls already wait for it; retry")
            try:
                if not self._done.wait(timeout_s):
                    raise NotReady(f"the plugin is still recovering its state after {timeout_s:g}s; retry")
            finally:
                self._held.release()
        if self._parts is None:
            raise NotReady(f"the plugin failed to start: {self._failure}")
        return self._parts
