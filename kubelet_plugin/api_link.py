"""The kubelet plugin's link to the API server, loaded in a thread while the plugin starts.

Called by ``kubelet_plugin.main``: loading the connection (its TLS context and credentials, and
HTTP modules) is the slowest part of start-up left, and nothing but claim lookups, Node Events, device
status and the slice publisher needs it, so the DRA and registration sockets serve without waiting
for it. ``start`` is called before the GPUs are read: NVML's calls release the interpreter lock,
so on a GPU node the load overlaps them (with fake GPUs, which are pure Python, it only shares the
lock; measured, the order made no difference there). A claim
lookup made before it is loaded waits for it (the state's lookup budget bounds the wait). Node
Events raised before it is loaded (checkpoint recovery at start) are sent, in order, as soon as it
is, and before any lookup is answered; an Event that cannot be sent is logged and dropped, as
Events are best effort. ``wait`` gives the main thread the client, or the error that loading it
raised (a bad kubeconfig), so the plugin still fails at start-up on bad configuration.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

import structlog

if TYPE_CHECKING:
    from dra_driver.files.checkpoint_store import Notice
    from dra_driver.kube.claims_api import KubeClaimApi

log = structlog.get_logger(__name__)


class ApiLink:
    """Loads the API client in the background; a ``ClaimReader`` and the Node Event sender meanwhile."""

    def __init__(self, *, kubeconfig: str | None, node_name: str, component: str) -> None:
        self._kubeconfig = kubeconfig
        self._node = node_name
        self._component = component
        self._ready = threading.Event()
        self._lock = threading.Lock()
        self._pending: list[Notice] = []
        self._client: Any = None
        self._claims: KubeClaimApi | None = None
        self._error: Exception | None = None
        self._thread = threading.Thread(target=self._load, name="api-link", daemon=True)

    def start(self) -> None:
        """Start loading the client; ``wait`` and the lookups wait for it."""
        self._thread.start()

    def _load(self) -> None:
        try:
            from dra_driver.kube.claims_api import KubeClaimApi
            from dra_driver.kube.client import load_api_client

            self._client = load_api_client(self._kubeconfig)
            self._claims = KubeClaimApi(self._client)
        except Exception as err:  # noqa: BLE001 - handed to the main thread by wait(), which fails start-up with it
            self._error = err
        while True:  # Events raised while loading go out first, in order; then lookups may proceed
            with self._lock:
                pending, self._pending = self._pending, []
                if not pending:
                    self._ready.set()
                    return
            for notice in pending:
                self._send(notice)

    def wait(self) -> Any:
        """The loaded ``ApiConnection``; raises what loading it raised."""
        self._ready.wait()
        if self._error is not None:
            raise self._error
        return self._client

    def get_claim(self, namespace: str, name: str) -> dict[str, Any]:
        """``KubeClaimApi.get_claim`` once the client is loaded."""
        from kubelet_plugin.prepare.requests import LOOKUP_BUDGET_S  # loaded with the state, before any lookup

        if not self._ready.wait(LOOKUP_BUDGET_S):
            raise TimeoutError("the API client is still loading")  # the caller names the claim
        if self._claims is None:
            raise RuntimeError(f"no API client: {self._error}")
        return self._claims.get_claim(namespace, name)

    def notify(self, notice: Notice) -> None:
        """Send a Node Event now, or as soon as the client is loaded."""
        with self._lock:
            if not self._ready.is_set():
                self._pending.append(notice)
                return
        self._send(notice)

    def _send(self, notice: Notice) -> None:
        if self._claims is None:
            log.warning("event_failed", reason=notice.reason, error=f"no API client: {self._error}")
            return
        try:
            self._claims.node_event(
                node_name=self._node,
                reason=notice.reason,
                message=notice.message,
                warning=notice.warning,
                component=self._component,
            )
        except Exception as err:  # noqa: BLE001 - an Event is best effort; the log line stays
            log.warning("event_failed", reason=notice.reason, error=str(err))
