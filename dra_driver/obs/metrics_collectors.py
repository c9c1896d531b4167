"""Scrape-time collectors of the kubelet plugin: its prepared claims and its GPUs' health, read when scraped.

Registered by ``kubelet_plugin.main`` on the plugin's registry (``dra_driver.obs.metrics.new_registry``;
re-exported by ``dra_driver.obs.metrics``). Each reads a snapshot (the checkpoint's claims as the
plugin last saved or read them; the health monitor's book) without a lock or I/O, so prepare pays
nothing for these gauges and a scrape never waits on it.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass, field
from typing import ClassVar, Final, Generic, TypeVar

import structlog
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from dra_driver.core.checkpoint import ClaimEntry, ClaimState
from dra_driver.core.health import HealthBook, is_unhealthy

log = structlog.get_logger(__name__)
_S = TypeVar("_S")

DEVICE_KINDS: Final = ("gpu", "mig", "share")


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


class ScrapedCollector(Collector, Generic[_S]):
    """Gauges computed when scraped from a snapshot read without a lock or I/O (``read``); ``describe`` reads nothing.

    A subclass gives ``read`` (the snapshot now), ``empty`` (a snapshot with every series, for the
    registry's duplicate check), ``families`` (the gauges of a snapshot) and ``unreadable_event``
    (logged, with nothing collected, when ``read`` fails: a scrape must not take the server down).
    Also the base of ``dra_driver.obs.usage_metrics.UsageCollector``.
    """

    unreadable_event: ClassVar[str]

    def read(self) -> _S:
        """The snapshot now."""
        raise NotImplementedError

    def empty(self) -> _S:
        """A snapshot whose gauges name every metric, computed from nothing."""
        raise NotImplementedError

    def families(self, snapshot: _S) -> Iterator[Metric]:
        """The gauges of ``snapshot``."""
        raise NotImplementedError

    def describe(self) -> Iterator[Metric]:
        """The metric names (for the registry's duplicate check), without reading anything."""
        yield from self.families(self.empty())

    def collect(self) -> Iterator[Metric]:
        """The gauges now; nothing (and a log line) when the snapshot cannot be read."""
        try:
            snapshot = self.read()
        except Exception as err:  # noqa: BLE001 - a scrape must not take the HTTP server down
            log.warning(self.unreadable_event, error=f"{type(err).__name__}: {err}")
            return
        yield from self.families(snapshot)


class PreparedClaimsCollector(ScrapedCollector[PreparedSummary]):
    """Gauges of the plugin's prepared claims, computed when scraped from ``claims()`` (no lock, no I/O)."""

    def __init__(self, claims: Callable[[], Mapping[str, ClaimEntry]], mig_devices: Collection[str]) -> None:
        self._claims = claims
        self._mig_devices = frozenset(mig_devices)

    unreadable_event = "metrics_claims_unreadable"

    def read(self) -> PreparedSummary:
        """What the claims hold now."""
        return summarize(self._claims(), self._mig_devices)

    def empty(self) -> PreparedSummary:
        """No claims."""
        return PreparedSummary(devices=dict.fromkeys(DEVICE_KINDS, 0))

    def families(self, snapshot: PreparedSummary) -> Iterator[Metric]:
        """The claim, device, MIG instance and MPS daemon gauges."""
        s = snapshot
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


class HealthCollector(ScrapedCollector[HealthBook]):
    """The GPUs' health, computed when scraped from the health monitor's book (no lock, no I/O).

    ``dra_gpu_gpu_healthy{gpu,uuid}`` is 1 or 0 per GPU; ``dra_gpu_gpu_health_conditions{gpu,cause,value,severity}``
    is 1 per active condition (causes and values come from a fixed vocabulary and XID numbers).
    """

    def __init__(self, book: Callable[[], HealthBook], gpus: Mapping[str, str]) -> None:
        """``gpus`` maps each GPU's UUID to its device name (``gpu-<minor>``)."""
        self._book = book
        self._gpus = dict(gpus)

    unreadable_event = "metrics_health_unreadable"

    def read(self) -> HealthBook:
        """The monitor's book now."""
        return self._book()

    def empty(self) -> HealthBook:
        """No conditions."""
        return HealthBook()

    def families(self, snapshot: HealthBook) -> Iterator[Metric]:
        """Healthy per GPU, and each active condition."""
        book = snapshot
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
