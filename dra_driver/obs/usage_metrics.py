"""Per-claim GPU usage as Prometheus metrics: a collector over the usage sampler's latest snapshot.

Registered by ``kubelet_plugin.main`` on the plugin's registry (``dra_driver.obs.metrics``) with
``register_usage_collector``; the rows come from ``kubelet_plugin.monitoring.usage.UsageSampler.snapshot``.
Everything is computed at scrape time from that immutable snapshot: no metric object per sample,
no lock, no I/O, and a device no longer prepared is simply absent from the next scrape.

Labels: ``claim_uid, node, device`` by default; with tenant labels (``--metrics-tenant-labels``,
the chart's ``metrics.tenantLabels``) also ``namespace, claim, pod`` (``pod``: the claim's pods from
its ``status.reservedFor``, comma-separated and sorted; empty until the plugin has read the claim,
e.g. right after a plugin restart). Off by default because /metrics is read by whoever can reach
the port: the names of other tenants' namespaces, claims and pods are theirs. The UID names no one
and is enough to find the claim (``dra-gpu top`` resolves it through the API server, as does
``kubectl get resourceclaims -A -o jsonpath`` on ``.metadata.uid``).

Metrics (gauges):

* ``dra_gpu_claim_gpu_utilization_ratio``: 0..1; absent while the source cannot tell (a MIG
  device on a real GPU, a read error);
* ``dra_gpu_claim_memory_used_bytes``: device memory in use (the MIG device's own); absent when unknown;
* ``dra_gpu_claim_idle_seconds``: how long the device has been idle, 0 while busy or unknown
  (the chart's ``DraGpuAllocatedIdle`` alert: its ``min`` per claim, ``by (claim_uid)`` or with
  tenant labels ``by (namespace, claim)``);
* ``dra_gpu_claim_process_gpu_utilization_ratio`` and ``dra_gpu_claim_process_memory_used_bytes``,
  with a ``pid`` label: per process, only where the source gives it (shared GPUs on NVML), the
  ``MAX_PROCESSES`` holding the most memory. On a shared GPU the processes are the whole GPU's,
  not the claim's alone. The ``pod`` label names at most ``MAX_PODS_IN_LABEL`` pods (``,+N more``):
  label values stay bounded however many pods share a claim.

With tenant labels, ``namespace`` and ``pod`` name the claim's, not the plugin's: a scrape that
attaches the target's own ``namespace``/``pod`` labels (the Prometheus Operator's ServiceMonitor
does) must honor the exposed labels (``honorLabels: true``), or Prometheus renames these to
``exported_namespace`` and ``exported_pod`` and the chart's alert groups by the plugin's
namespace. With ``honorLabels`` an empty ``pod`` stays absent (Prometheus drops empty labels after
the merge, so the plugin pod's name is not put in its place).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from dra_driver.core.usage import ProcessUsage, UsageRow, UsageSnapshot
from dra_driver.obs.metrics_collectors import ScrapedCollector

LABELS = ("claim_uid", "node", "device")
"""The labels of every per-claim series (tenant labels off: the default)."""
TENANT_LABELS = ("namespace", "claim", "claim_uid", "node", "device", "pod")
"""The labels with tenant labels on: the claim's namespace, name and pods too."""

UTILIZATION = "dra_gpu_claim_gpu_utilization_ratio"
MEMORY = "dra_gpu_claim_memory_used_bytes"
IDLE = "dra_gpu_claim_idle_seconds"
PROCESS_UTILIZATION = "dra_gpu_claim_process_gpu_utilization_ratio"
PROCESS_MEMORY = "dra_gpu_claim_process_memory_used_bytes"


MAX_PODS_IN_LABEL = 4
MAX_PROCESSES = 8


def pods_label(pods: Sequence[str]) -> str:
    """The ``pod`` label: the claim's pods, sorted, at most ``MAX_PODS_IN_LABEL`` named (``+N more``)."""
    shown = sorted(pods)[:MAX_PODS_IN_LABEL]
    more = len(pods) - len(shown)
    return ",".join(shown) + (f",+{more} more" if more else "")


def top_processes(processes: Sequence[ProcessUsage]) -> list[ProcessUsage]:
    """The ``MAX_PROCESSES`` processes holding the most memory (bounded series per device)."""
    return sorted(processes, key=lambda p: (-(p.memory_bytes or 0), p.pid))[:MAX_PROCESSES]


class UsageCollector(ScrapedCollector[UsageSnapshot]):
    """The per-claim usage gauges, built from ``snapshot()`` when scraped."""

    def __init__(self, snapshot: Callable[[], UsageSnapshot], node: str, *, tenant_labels: bool = False) -> None:
        self._snapshot = snapshot
        self._node = node
        self._tenant = tenant_labels
        self._names = TENANT_LABELS if tenant_labels else LABELS

    unreadable_event = "usage_metrics_unreadable"

    def read(self) -> UsageSnapshot:
        """The sampler's snapshot now."""
        return self._snapshot()

    def empty(self) -> UsageSnapshot:
        """No claims sampled."""
        return UsageSnapshot()

    def _labels(self, row: UsageRow) -> list[str]:
        if self._tenant:
            return [row.namespace, row.claim, row.claim_uid, self._node, row.device, pods_label(row.pods)]
        return [row.claim_uid, self._node, row.device]

    def families(self, snapshot: UsageSnapshot) -> Iterator[Metric]:
        """The per-claim (and per-process) usage gauges."""
        snap = snapshot
        names = self._names
        process_labels = (*names, "pid")
        util = GaugeMetricFamily(
            UTILIZATION, "GPU utilization of a claim's device (0..1; the whole GPU's on a shared GPU).", labels=names
        )
        mem = GaugeMetricFamily(MEMORY, "Device memory in use on a claim's device (a MIG device's own).", labels=names)
        idle = GaugeMetricFamily(IDLE, "Seconds a claim's device has been idle (0 while busy or unknown).", labels=names)
        putil = GaugeMetricFamily(
            PROCESS_UTILIZATION, "SM utilization of one process on a claim's device (0..1).", labels=process_labels
        )
        pmem = GaugeMetricFamily(PROCESS_MEMORY, "Device memory one process on a claim's device holds.", labels=process_labels)
        for row in snap.rows:
            labels = self._labels(row)
            if row.utilization is not None:
                util.add_metric(labels, row.utilization)
            if row.memory_used_bytes is not None:
                mem.add_metric(labels, row.memory_used_bytes)
            idle.add_metric(labels, row.idle_seconds)
            for p in top_processes(row.processes):
                plabels = [*labels, str(p.pid)]
                if p.utilization is not None:
                    putil.add_metric(plabels, p.utilization)
                if p.memory_bytes is not None:
                    pmem.add_metric(plabels, p.memory_bytes)
        yield util
        yield mem
        yield idle
        yield putil
        yield pmem


def register_usage_collector(
    registry: CollectorRegistry, snapshot_fn: Callable[[], UsageSnapshot], node: str, *, tenant_labels: bool = False
) -> UsageCollector:
    """Register the per-claim usage collector on ``registry``; ``snapshot_fn`` is ``UsageSampler.snapshot``.

    ``tenant_labels``: the series name the claim's namespace, name and pods (``TENANT_LABELS``), not only its UID.
    """
    collector = UsageCollector(snapshot_fn, node, tenant_labels=tenant_labels)
    registry.register(collector)
    return collector
