"""The error an API server adapter raises, as the apps see it. Pure.

The publisher (``dra_driver.appkit.publisher``) reacts to an API call's HTTP status (a 410 on a
watch means list again; the status goes into its error record) without knowing which client
made the call. The Kubernetes adapter's ``dra_driver.kube.slices_api.KubeApiError`` is this
error; fakes in tests raise it directly.
"""

from __future__ import annotations


class ApiError(Exception):
    """An API call failed: ``status`` is the HTTP code (0 for transport errors, no answer)."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"{status} {reason}: {message}" if status else f"{reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message

    @property
    def not_found(self) -> bool:
        """HTTP 404: the object does not exist."""
        return self.status == 404

    @property
    def conflict(self) -> bool:
        """HTTP 409: stale resourceVersion on update, or the name already exists on create."""
        return self.status == 409

    @property
    def gone(self) -> bool:
        """HTTP 410: a watch or list resourceVersion is too old; list again."""
        return self.status == 410
