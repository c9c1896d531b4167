"""Holds the kubelet's calls that arrive while the plugin is still starting, and hands them its parts once it has.

The plugin serves its sockets before it loads the modules of its state (``kubelet_plugin.main``),
so that the kubelet registers it within a fraction of a second of its start: after a reboot or a
restart a pod the kubelet syncs then gets its prepare answered instead of failing and waiting for a
resync. Until ``open`` (the checkpoint recovered, ``kubelet_plugin.bringup``) a call that needs the
state waits in ``wait``, at most ``HOLD_S`` (below the kubelet's 45 s call deadline); then, or after
``fail`` (start-up stopped), it gets ``NotReady`` and answers each claim with that error: nothing is
prepared or unprepared from a state not yet recovered (fail closed), and the kubelet retries.

Called by ``kubelet_plugin.servicer`` (prepare, unprepare), ``kubelet_plugin.monitoring.health_services``
(the health streams) and ``kubelet_plugin.liveness`` (readiness); opened by ``kubelet_plugin.main``.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kubelet_plugin.monitoring.device_status import DeviceStatusReporter
    from kubelet_plugin.monitoring.health_stream import HealthStreams
    from kubelet_plugin.prepare.state import DeviceState

HOLD_S = 30.0
"""Seconds a call waits for start-up (the kubelet's deadline per call is 45 s)."""


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

    def __init__(self) -> None:
        self._done = threading.Event()
        self._parts: Parts | None = None
        self._failure = ""

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
        """The parts, once start-up has handed them over; ``NotReady`` after ``timeout_s`` or a failed start-up."""
        if not self._done.wait(timeout_s):
            raise NotReady(f"the plugin is still recovering its state after {timeout_s:g}s; retry")
        if self._parts is None:
            raise NotReady(f"the plugin failed to start: {self._failure}")
        return self._parts
