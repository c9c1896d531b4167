"""What the ResourceSlice publisher needs and reports: the API it writes through, its metrics hook, a pass's result.

Used by ``dra_driver.appkit.publisher`` (``SlicePublisher``); implemented by
``dra_driver.kube.slices_api.KubeSliceApi`` (``SliceApi``) and ``dra_driver.obs.metrics.PublisherMetrics``
(``PublisherMetricsHook``), and by the tests' fakes.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol


class PublisherMetricsHook(Protocol):
    """What the publisher reports (``dra_driver.obs.metrics.PublisherMetrics``)."""

    def slice_written(self, action: str) -> None:
        """One ResourceSlice ``create``, ``update`` or ``delete`` was made."""
        ...

    def write_conflict(self) -> None:
        """A write got 409 Conflict."""
        ...

    def fields_dropped(self, paths: list[str]) -> None:
        """The server dropped these paths from one write."""
        ...

    def reconcile_failed(self) -> None:
        """A reconcile pass raised."""
        ...


class SliceApi(Protocol):
    """What the publisher needs from the API server (``dra_driver.kube.slices_api.KubeSliceApi``)."""

    def list(self, driver: str, node: str) -> tuple[list[dict[str, Any]], str]:
        """Return the node's slices of ``driver`` and the list's resourceVersion."""
        ...

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Create a slice; returns it as stored."""
        ...

    def update(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Replace a slice (guarded by ``metadata.resourceVersion``); returns it as stored."""
        ...

    def delete(self, name: str) -> None:
        """Delete a slice; a missing one is not an error."""
        ...

    def watch(self, driver: str, node: str, resource_version: str, timeout_s: float) -> Iterator[tuple[str, dict[str, Any]]]:
        """Stream ``(type, object)`` events of the node's slices."""
        ...

    def interrupt_watches(self) -> None:
        """End blocked watch streams (shutdown)."""
        ...

    def node_uid(self, node: str) -> str:
        """Return the Node's UID, for the owner reference."""
        ...

    def server_minor_version(self) -> int:
        """Return the API server's minor version."""
        ...


@dataclass(frozen=True, slots=True)
class ReconcileResult:
    """What one reconcile pass did."""

    generation: int
    created: int
    updated: int
    deleted: int
    resource_version: str
    """resourceVersion of the list the pass started from."""

    @property
    def writes(self) -> int:
        """Number of API writes made."""
        return self.created + self.updated + self.deleted
