"""Prometheus metrics of the dra-gpu daemons: one registry per process, one class per daemon's metric set.

Called by the daemons' ``main`` (``kubelet_plugin.main``, ``controller.main``, ``webhook.main``):
each makes a registry (``new_registry``), the metric sets it needs on it, and serves it with
``serve_metrics`` (``--metrics-port``/``METRICS_PORT``, ``--metrics-address``/``METRICS_ADDRESS``;
-1 is off) on the bounded server of ``dra_driver.obs.http_server`` (``METRICS_LIMITS``: a
connection cap, deadlines, two threads; a scrape flood cannot take the daemon's threads or
descriptors). The code that observes calls a set through a small Protocol of
its own and never imports this module: ``kubelet_plugin.servicer`` (``PluginMetrics``),
``dra_driver.appkit.publisher`` (``PublisherMetrics``), ``webhook.server`` (``WebhookMetrics``).
The kubelet plugin imports this module only after its DRA sockets serve (prometheus_client takes
about 0.1 s to import).

Names follow Prometheus conventions (``dra_gpu_`` prefix, base units, ``_total`` counters) and
are a contract: dashboards and alerts use them (``deploy/helm/dra-gpu``). Every label has a
fixed, small set of values; a value from outside (an error message, an object's kind, a field
path) is reduced to that set, ``other`` for anything unknown. Counters and histograms of known
label values are created at zero, so a rate exists before the first event.

What the plugin holds (prepared claims and devices, MIG instances, MPS daemons) is read at scrape
time from the checkpoint as the plugin last saved or read it (``PreparedClaimsCollector``): prepare
pays nothing for it and a scrape takes no lock.

The scrape-time collectors are in ``dra_driver.obs.metrics_collectors`` and the listener in
``dra_driver.obs.metrics_serve``; this module re-exports both, so the daemons import one module.

Device health metrics will join this module as a set of their own.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Final

import structlog
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    disable_created_metrics,
)

from dra_driver.obs.claim_errors import CLAIM_ERROR_REASONS, claim_error_reason
from dra_driver.obs.metrics_collectors import DEVICE_KINDS, HealthCollector, PreparedClaimsCollector, PreparedSummary, summarize
from dra_driver.obs.metrics_serve import METRICS_LIMITS, MetricsApp, MetricsPortError, MetricsServer, serve_metrics, serve_or_log

__all__ = [
    "ADMISSION_BUCKETS",
    "ADMISSION_KINDS",
    "ADMISSION_RESULTS",
    "APIS",
    "CHECKPOINT_RECOVERY_KINDS",
    "CLAIM_RESULTS",
    "DEVICE_KINDS",
    "METRICS_LIMITS",
    "OPERATIONS",
    "REQUEST_BUCKETS",
    "SLICE_ACTIONS",
    "SLICE_FIELDS",
    "HealthCollector",
    "MetricsApp",
    "MetricsPortError",
    "MetricsServer",
    "PluginMetrics",
    "PreparedClaimsCollector",
    "PreparedSummary",
    "PublisherMetrics",
    "Registry",
    "WebhookMetrics",
    "dropped_field",
    "new_registry",
    "serve_metrics",
    "serve_or_log",
    "summarize",
]

log = structlog.get_logger(__name__)

OPERATIONS: Final = ("prepare", "unprepare")
APIS: Final = ("v1", "v1beta1")
CLAIM_RESULTS: Final = ("success", "error")
SLICE_ACTIONS: Final = ("create", "update", "delete")
ADMISSION_KINDS: Final = ("ResourceClaim", "ResourceClaimTemplate", "other")
ADMISSION_RESULTS: Final = ("allowed", "denied", "error")

REQUEST_BUCKETS: Final = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
"""Seconds, 1 ms to 30 s: a full-GPU prepare takes milliseconds, a MIG carve seconds, the kubelet waits 45 s."""
ADMISSION_BUCKETS: Final = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0)
"""Seconds: a review takes about a millisecond; the API server gives up after the webhook's timeout (at most 30 s)."""

CHECKPOINT_RECOVERY_KINDS: Final[Mapping[str, str]] = {
    # the reason of a notice the plugin's start-up load told (dra_driver.files.checkpoint_store,
    # kubelet_plugin.prepare.recovery, kubelet_plugin.prepare.state) -> the kind counted
    "CheckpointRecovered": "previous_generation",
    "CheckpointLost": "unreadable",
    "CheckpointMissing": "missing",
    "CheckpointRebuilt": "rebuilt",
    "NodeRebooted": "reboot",
    "CheckpointTooNew": "too_new",
}
"""``dra_gpu_checkpoint_recoveries_total{kind}``: besides these, ``fresh`` (no checkpoint at all)."""

SLICE_FIELDS: Final = frozenset(
    {
        # the fields of a ResourceSlice spec (resource.k8s.io/v1) the publisher writes, at any depth
        "driver", "pool", "name", "generation", "resourceSliceCount", "nodeName", "nodeSelector", "allNodes",
        "perDeviceNodeSelection", "devices", "sharedCounters", "counters", "value", "attributes", "capacity",
        "consumesCounters", "counterSet", "taints", "key", "effect", "timeAdded", "bindsToNode",
        "bindingConditions", "bindingFailureConditions", "allowMultipleAllocations", "requestPolicy", "default",
        "validValues", "validRange", "min", "max", "step", "int", "bool", "string", "version",
    }
)  # fmt: skip
"""``dra_gpu_slice_dropped_fields_total{field}``: a dropped path's field, one of these or ``other``."""


def new_registry() -> CollectorRegistry:
    """A registry of this process's own (tests make several), with the process, platform and GC collectors.

    Counters and histograms export no ``_created`` series (process-wide: only this driver's daemons use it).
    """
    disable_created_metrics()  # type: ignore[no-untyped-call]  # prometheus-client 0.26 leaves it unannotated
    registry = CollectorRegistry()
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    return registry


Registry = CollectorRegistry
"""The registry type, for apps that must not import prometheus_client themselves (import-linter)."""


# -- the kubelet plugin ------------------------------------------------------------------------


class PluginMetrics:
    """The kubelet plugin's DRA calls, per-claim results and checkpoint recoveries (``kubelet_plugin.servicer``)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        requests = Counter(
            "dra_gpu_requests_total",
            "NodePrepareResources and NodeUnprepareResources calls answered, by DRA API version.",
            ["operation", "api"],
            registry=registry,
        )
        duration = Histogram(
            "dra_gpu_request_duration_seconds",
            "Time to answer a NodePrepareResources or NodeUnprepareResources call (all its claims).",
            ["operation"],
            buckets=REQUEST_BUCKETS,
            registry=registry,
        )
        in_flight = Gauge(
            "dra_gpu_requests_in_flight",
            "NodePrepareResources and NodeUnprepareResources calls being answered now.",
            ["operation"],
            registry=registry,
        )
        claims = Counter(
            "dra_gpu_claim_operations_total",
            "Claims prepared or unprepared, by result (a call carries one or more claims).",
            ["operation", "result"],
            registry=registry,
        )
        self._errors = Counter(
            "dra_gpu_claim_errors_total",
            "Claims a call failed, by reason (see dra_driver/obs/claim_errors.py).",
            ["operation", "reason"],
            registry=registry,
        )
        self._recoveries = Counter(
            "dra_gpu_checkpoint_recoveries_total",
            "What the plugin's start-up found in its checkpoint when it was not simply there and good: "
            "fresh (none at all), previous_generation, unreadable, missing, rebuilt, reboot, too_new.",
            ["kind"],
            registry=registry,
        )
        # Children bound once: a call pays a dict lookup, not label resolution.
        self._requests = {(op, api): requests.labels(op, api) for op in OPERATIONS for api in APIS}
        self._duration = {op: duration.labels(op) for op in OPERATIONS}
        self._in_flight = {op: in_flight.labels(op) for op in OPERATIONS}
        self._claims = {(op, r): claims.labels(op, r) for op in OPERATIONS for r in CLAIM_RESULTS}
        for op in OPERATIONS:
            for reason in CLAIM_ERROR_REASONS:
                self._errors.labels(op, reason)
        for kind in ("fresh", *CHECKPOINT_RECOVERY_KINDS.values()):
            self._recoveries.labels(kind)

    def call_started(self, operation: str) -> None:
        """A call of ``operation`` (prepare or unprepare) is being answered."""
        self._in_flight[operation].inc()

    def call_finished(self, operation: str, api: str, seconds: float, claims: int, errors: Sequence[str]) -> None:
        """A call answered ``claims`` claims in ``seconds``; ``errors``: the failed claims' messages."""
        self._in_flight[operation].dec()
        self._requests[(operation, api)].inc()
        self._duration[operation].observe(seconds)
        if claims > len(errors):
            self._claims[(operation, "success")].inc(claims - len(errors))
        if errors:
            self._claims[(operation, "error")].inc(len(errors))
            for message in errors:
                self._errors.labels(operation, claim_error_reason(message)).inc()

    def checkpoint_loaded(self, reasons: Iterable[str], *, fresh: bool) -> None:
        """Count what the start-up load told (notice reasons, ``CHECKPOINT_RECOVERY_KINDS``); ``fresh``: none existed."""
        if fresh:
            self._recoveries.labels("fresh").inc()
        for reason in reasons:
            kind = CHECKPOINT_RECOVERY_KINDS.get(reason)
            if kind is not None:
                self._recoveries.labels(kind).inc()


def dropped_field(path: str) -> str:
    """The field a dropped path names (``spec.devices[3].consumesCounters`` -> ``consumesCounters``), bounded.

    The last segment that is a ResourceSlice field (``SLICE_FIELDS``): an attribute whose key was
    dropped counts as ``attributes``, a whole device as ``devices``; ``other`` when none is.
    """
    for segment in reversed(path.replace("[", ".[").split(".")):
        if segment in SLICE_FIELDS:
            return segment
    return "other"


class PublisherMetrics:
    """The ResourceSlice publisher's writes and errors (``dra_driver.appkit.slice_api.PublisherMetricsHook``)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        writes = Counter(
            "dra_gpu_slice_writes_total",
            "ResourceSlice writes made by the publisher, by action.",
            ["action"],
            registry=registry,
        )
        self._conflicts = Counter(
            "dra_gpu_slice_write_conflicts_total",
            "ResourceSlice writes the API server refused with 409 Conflict (someone else wrote first).",
            registry=registry,
        )
        self._dropped = Counter(
            "dra_gpu_slice_dropped_fields_total",
            "Fields the API server dropped from a written ResourceSlice (a feature gate off), by field.",
            ["field"],
            registry=registry,
        )
        self._failures = Counter(
            "dra_gpu_slice_reconcile_errors_total",
            "Publisher reconcile passes that failed (retried with backoff).",
            registry=registry,
        )
        self._writes = {a: writes.labels(a) for a in SLICE_ACTIONS}

    def slice_written(self, action: str) -> None:
        """One create, update or delete was made."""
        self._writes[action].inc()

    def write_conflict(self) -> None:
        """A write got 409 Conflict."""
        self._conflicts.inc()

    def fields_dropped(self, paths: Sequence[str]) -> None:
        """The server dropped these paths from one write; each counts under its field's name."""
        for path in paths:
            self._dropped.labels(dropped_field(path)).inc()

    def reconcile_failed(self) -> None:
        """A reconcile pass raised."""
        self._failures.inc()


# -- the admission webhook --------------------------------------------------------------------


class WebhookMetrics:
    """The admission webhook's reviews (``webhook.server.ReviewMetrics``)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        reviews = Counter(
            "dra_gpu_admission_requests_total",
            "AdmissionReviews answered, by the object's kind and the result (error: not a review it could answer).",
            ["kind", "result"],
            registry=registry,
        )
        self._duration = Histogram(
            "dra_gpu_admission_duration_seconds",
            "Time to answer an AdmissionReview, from its body read to the answer sent.",
            buckets=ADMISSION_BUCKETS,
            registry=registry,
        )
        self._reviews = {(k, r): reviews.labels(k, r) for k in ADMISSION_KINDS for r in ADMISSION_RESULTS}

    def reviewed(self, kind: str, result: str, seconds: float) -> None:
        """One review answered: ``kind`` of the object (others count as ``other``), allowed, denied or error."""
        key = (kind if kind in ADMISSION_KINDS else "other", result if result in ADMISSION_RESULTS else "error")
        self._reviews[key].inc()
        self._duration.observe(seconds)


# -- the HTTP server ----------------------------------------------------------------------------
