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

Device health metrics will join this module as a set of their own.
"""

from __future__ import annotations

import gzip
import threading
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final
from urllib.parse import parse_qs

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
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import choose_encoder, gzip_accepted
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from dra_driver.core.checkpoint import ClaimEntry, ClaimState
from dra_driver.core.health import HealthBook, is_unhealthy
from dra_driver.obs.claim_errors import CLAIM_ERROR_REASONS, claim_error_reason
from dra_driver.obs.http_server import HttpServer
from dra_driver.obs.http_types import Authorize, Limits, Request, RequestHead, Response, TlsSource, text
from dra_driver.obs.ports import IPV6_MISSING, METRICS_FLAGS, bind_host

log = structlog.get_logger(__name__)

OPERATIONS: Final = ("prepare", "unprepare")
APIS: Final = ("v1", "v1beta1")
CLAIM_RESULTS: Final = ("success", "error")
DEVICE_KINDS: Final = ("gpu", "mig", "share")
SLICE_ACTIONS: Final = ("create", "update", "delete")
ADMISSION_KINDS: Final = ("ResourceClaim", "ResourceClaimTemplate", "other")
ADMISSION_RESULTS: Final = ("allowed", "denied", "error")

REQUEST_BUCKETS: Final = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
"""Seconds, 1 ms to 30 s: a full-GPU prepare takes milliseconds, a MIG carve seconds, the kubelet waits 45 s."""
ADMISSION_BUCKETS: Final = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0)
"""Seconds: a review takes about a millisecond; the API server gives up after the webhook's timeout (at most 30 s)."""

CHECKPOINT_RECOVERY_KINDS: Final[Mapping[str, str]] = {
    # the reason of a notice the plugin's start-up load told (dra_driver.files.checkpoint_store,
    # kubelet_plugin.recovery, kubelet_plugin.state) -> the kind counted
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

_ANY_ADDRESS_V6: Final = ("::", "[::]")


class MetricsPortError(Exception):
    """The metrics server cannot listen where it was told (port taken, address not on this host)."""


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


@dataclass(frozen=True, slots=True)
class PreparedSummary:
    """What a node's prepared claims hold, as the gauges show it."""

    claims: int = 0
    devices: Mapping[str, int] = field(default_factory=dict)
    """Per kind (``DEVICE_KINDS``)."""
    mig_instances: int = 0
    sharing_daemons: int = 0


def summarize(claims: Mapping[str, ClaimEntry], mig_devices: Collection[str]) -> PreparedSummary:
    """Count completed claims and their devices (a share, a MIG device or a GPU), and what the driver holds.

    MIG instances: those this driver carved (not static ones), of completed claims and of claims
    recovered after a lost checkpoint, each once. MPS daemons: distinct daemons of those claims (a
    consumable-capacity GPU's daemon serves several). ``mig_devices``: the node's MIG device names.
    """
    completed = 0
    devices = dict.fromkeys(DEVICE_KINDS, 0)
    instances: set[tuple[str, int | None, str | None]] = set()
    daemons: set[str] = set()
    for entry in claims.values():
        done = entry.state is ClaimState.PREPARE_COMPLETED
        if not done and not entry.recovered:
            continue
        if done:
            completed += 1
            for d in entry.devices:
                kind = "share" if d.share_id else "mig" if d.mig is not None or d.device_name in mig_devices else "gpu"
                devices[kind] += 1
        instances.update((r.parent_uuid, r.gi_id, r.mig_uuid) for r in entry.mig_records() if r.gi_id is not None)
        daemons.update(d.daemon_id for d in entry.mps_daemons)
    return PreparedSummary(completed, devices, len(instances), len(daemons))


class PreparedClaimsCollector(Collector):
    """Gauges of the plugin's prepared claims, computed when scraped from ``claims()`` (no lock, no I/O)."""

    def __init__(self, claims: Callable[[], Mapping[str, ClaimEntry]], mig_devices: Collection[str]) -> None:
        self._claims = claims
        self._mig_devices = frozenset(mig_devices)

    def describe(self) -> Iterator[Metric]:
        """The metric names (for the registry's duplicate check), without computing anything."""
        yield from self._families(PreparedSummary(devices=dict.fromkeys(DEVICE_KINDS, 0)))

    def collect(self) -> Iterator[Metric]:
        """The gauges now; nothing (and a log line) if the claims cannot be read."""
        try:
            summary = summarize(self._claims(), self._mig_devices)
        except Exception as err:  # noqa: BLE001 - a scrape must not take the HTTP server down
            log.warning("metrics_claims_unreadable", error=f"{type(err).__name__}: {err}")
            return
        yield from self._families(summary)

    @staticmethod
    def _families(s: PreparedSummary) -> Iterator[Metric]:
        yield GaugeMetricFamily("dra_gpu_prepared_claims", "Claims prepared on this node (PrepareCompleted).", value=s.claims)
        devices = GaugeMetricFamily(
            "dra_gpu_prepared_devices", "Devices of prepared claims, by kind (gpu, mig, share).", labels=["kind"]
        )
        for kind in DEVICE_KINDS:
            devices.add_metric([kind], s.devices.get(kind, 0))
        yield devices
        yield GaugeMetricFamily(
            "dra_gpu_mig_instances", "MIG instances this driver carved and holds for claims.", value=s.mig_instances
        )
        yield GaugeMetricFamily("dra_gpu_sharing_daemons", "MPS control daemons running for claims.", value=s.sharing_daemons)


class HealthCollector(Collector):
    """The GPUs' health, computed when scraped from the health monitor's book (no lock, no I/O).

    ``dra_gpu_gpu_healthy{gpu,uuid}`` is 1 or 0 per GPU; ``dra_gpu_gpu_health_conditions{gpu,cause,value,severity}``
    is 1 per active condition (causes and values come from a fixed vocabulary and XID numbers).
    """

    def __init__(self, book: Callable[[], HealthBook], gpus: Mapping[str, str]) -> None:
        """``gpus`` maps each GPU's UUID to its device name (``gpu-<minor>``)."""
        self._book = book
        self._gpus = dict(gpus)

    def describe(self) -> Iterator[Metric]:
        """The metric names, without computing anything."""
        yield from self._families(HealthBook())

    def collect(self) -> Iterator[Metric]:
        """The gauges now."""
        try:
            book = self._book()
        except Exception as err:  # noqa: BLE001 - a scrape must not take the HTTP server down
            log.warning("metrics_health_unreadable", error=f"{type(err).__name__}: {err}")
            return
        yield from self._families(book)

    def _families(self, book: HealthBook) -> Iterator[Metric]:
        healthy = GaugeMetricFamily(
            "dra_gpu_gpu_healthy", "1 while the GPU is healthy, 0 while a fatal or degraded cause holds.", labels=["gpu", "uuid"]
        )
        conditions = GaugeMetricFamily(
            "dra_gpu_gpu_health_conditions",
            "Active health conditions of each GPU (1 each), by cause, value and severity.",
            labels=["gpu", "cause", "value", "severity"],
        )
        for uuid, name in sorted(self._gpus.items(), key=lambda kv: kv[1]):
            conds = book.of(uuid)
            healthy.add_metric([name, uuid], 0 if is_unhealthy(conds) else 1)
            for c in conds:
                conditions.add_metric([name, c.key, c.value, c.severity.value], 1)
        yield healthy
        yield conditions


# -- the slice publisher (kubelet plugin and controller) ----------------------------------------


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
    """The ResourceSlice publisher's writes and errors (``dra_driver.appkit.publisher.PublisherMetricsHook``)."""

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

METRICS_LIMITS: Final = Limits(
    max_connections=32,  # Prometheus holds one kept-alive connection per target; a few scrapers and probes
    request_timeout_s=10.0,
    handshake_timeout_s=5.0,
    idle_timeout_s=120.0,  # longer than a scrape interval: a kept-alive scraper is never cut (the cap evicts idle ones)
    max_body_bytes=0,  # a scrape has no body
    workers=2,
)
"""The /metrics listener's bounds (``dra_driver.obs.http_server``): 2 threads, at most 32 connections."""


class MetricsApp:
    """prometheus-client's exposition of one registry, as its own WSGI app answers (any path; OPTIONS, GET, HEAD)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._registry = registry

    def check(self, head: RequestHead) -> Response | None:
        """OPTIONS is answered here; any method but GET and HEAD is 405."""
        allow = (("Allow", "OPTIONS,GET"),)
        if head.method == "OPTIONS":
            return Response(200, headers=allow, content_type=None)
        if head.method not in ("GET", "HEAD"):
            return text(405, f"# HTTP 405 Method Not Allowed: {head.method[:32]}; use OPTIONS or GET", headers=allow)
        return None

    def handle(self, request: Request) -> Response:
        """The registry's samples in the format the scraper accepts (gzip if it asks), ``name[]`` filtering as upstream."""
        head = request.head
        if head.path == "/favicon.ico":
            return Response(200, content_type=None)
        encoder, content_type = choose_encoder(head.headers.get("accept", ""))
        names = parse_qs(head.query).get("name[]")
        registry = self._registry.restricted_registry(names) if names else self._registry
        output = encoder(registry)
        if gzip_accepted(head.headers.get("accept-encoding", "")):
            return Response(200, gzip.compress(output), content_type, headers=(("Content-Encoding", "gzip"),))
        return Response(200, output, content_type)


@dataclass(slots=True)
class MetricsServer:
    """The bounded HTTP server serving one registry's ``/metrics``; ``stop`` at shutdown."""

    port: int
    """The bound port (the one asked for, or the one the system chose for 0)."""
    server: HttpServer

    def stop(self, *, wait: bool = True) -> None:
        """Stop serving and close the socket.

        With ``wait=False`` this returns at once and the socket closes in the background (a
        daemon's shutdown: its process exits anyway, and its SIGTERM path gets no slower).
        """
        closer = threading.Thread(target=self.server.stop, kwargs={"grace_s": 1.0}, name="metrics-stop", daemon=True)
        closer.start()
        if wait:
            closer.join()


def serve_metrics(
    registry: CollectorRegistry,
    address: str,
    port: int,
    *,
    authorize: Authorize | None = None,
    ssl_context: TlsSource | None = None,
    limits: Limits = METRICS_LIMITS,
) -> MetricsServer:
    """Serve ``registry`` on ``address:port`` (0: any free port) from a daemon thread; log ``metrics_listening``.

    ``::`` (or ``[::]``) is every address, IPv4 too; on a host without IPv6 it falls back to
    ``0.0.0.0``. ``authorize``: a scrape's headers -> whether to answer it (401 otherwise);
    ``ssl_context``: serve HTTPS. Raises MetricsPortError naming the address, the port and the
    flags when the port is taken or the address is not this host's.
    """
    if not 0 <= port <= 65535:
        raise MetricsPortError(f"metrics port {port} is not a port number (0-65535; -1 turns metrics off); set {METRICS_FLAGS}")
    host = bind_host(address)
    try:
        server = HttpServer("metrics", host, port, MetricsApp(registry), limits, tls=ssl_context, authorize=authorize)
    except OSError as err:
        if host != "::" or err.errno not in IPV6_MISSING:
            raise MetricsPortError(
                f"cannot serve metrics on {address} port {port}: {err.strerror or err}; "
                f"choose another with {METRICS_FLAGS}, or -1 to turn metrics off"
            ) from err
        log.info("metrics_ipv6_unavailable", error=str(err), address="0.0.0.0")  # noqa: S104 - every address, as asked
        every_ipv4 = "0.0.0.0"  # noqa: S104 - every IPv4 address: "::" was asked for
        return serve_metrics(
            registry,
            every_ipv4,
            port,
            authorize=authorize,
            ssl_context=ssl_context,
            limits=limits,
        )
    server.start()
    log.info("metrics_listening", address=address, port=server.port, path="/metrics", max_connections=server.max_connections)
    return MetricsServer(server.port, server)


def serve_or_log(
    registry: CollectorRegistry,
    address: str,
    port: int,
    *,
    authorize: Authorize | None = None,
    ssl_context: TlsSource | None = None,
    limits: Limits = METRICS_LIMITS,
) -> MetricsServer | None:
    """``serve_metrics``, or None after logging ``metrics_port_unavailable`` (the daemon then exits 2)."""
    try:
        return serve_metrics(registry, address, port, authorize=authorize, ssl_context=ssl_context, limits=limits)
    except MetricsPortError as err:
        log.error("metrics_port_unavailable", error=str(err), address=address, port=port)
        return None
