"""The per-claim usage collector (dra_driver.obs.usage_metrics), scraped as Prometheus would scrape it."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from dra_driver.core.usage import ProcessUsage, UsageRow, UsageSnapshot
from dra_driver.obs.usage_metrics import register_usage_collector

GIB = 1 << 30


def row(device: str, util: float | None, mem: int | None, idle: float, **kw: object) -> UsageRow:
    base: dict[str, object] = {
        "namespace": "team-a",
        "claim": "train",
        "claim_uid": "uid-1",
        "device": device,
        "gpu_uuid": "GPU-1",
        "mig_uuid": None,
        "utilization": util,
        "memory_used_bytes": mem,
        "idle_seconds": idle,
        "idle_since": None,
    }
    base.update(kw)
    return UsageRow(**base)  # type: ignore[arg-type]  # fields from a dict of mixed types


def scrape(snapshot: UsageSnapshot, *, tenant_labels: bool = True) -> dict[str, list[tuple[dict[str, str], float]]]:
    registry = CollectorRegistry()
    register_usage_collector(registry, lambda: snapshot, "node-a", tenant_labels=tenant_labels)
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for fam in text_string_to_metric_families(generate_latest(registry).decode()):
        out[fam.name] = [(s.labels, s.value) for s in fam.samples]
    return out


def test_with_tenant_labels_one_series_per_device_names_the_claims_namespace_and_pods() -> None:
    snap = UsageSnapshot(
        (
            row("gpu-1", 0.8, 10 * GIB, 0.0, pods=("p1", "p2")),
            row("gpu-0-mig-1g10gb-6", None, 3 * GIB, 0.0, namespace="team-b", claim="nb", claim_uid="uid-2"),
            row("gpu-2", 0.0, None, 2400.0),
        ),
        taken_at=1.0,
    )
    got = scrape(snap)
    labels = {"namespace": "team-a", "claim": "train", "claim_uid": "uid-1", "node": "node-a", "device": "gpu-1", "pod": "p1,p2"}
    assert (labels, 0.8) in got["dra_gpu_claim_gpu_utilization_ratio"]
    assert (labels, 10 * GIB) in got["dra_gpu_claim_memory_used_bytes"]
    assert (labels, 0.0) in got["dra_gpu_claim_idle_seconds"]
    # unknown utilization (MIG on a real GPU) and unknown memory are absent, not 0
    assert {s[0]["device"] for s in got["dra_gpu_claim_gpu_utilization_ratio"]} == {"gpu-1", "gpu-2"}
    assert {s[0]["device"] for s in got["dra_gpu_claim_memory_used_bytes"]} == {"gpu-1", "gpu-0-mig-1g10gb-6"}
    idle = {s[0]["device"]: s[1] for s in got["dra_gpu_claim_idle_seconds"]}
    assert idle == {"gpu-1": 0.0, "gpu-0-mig-1g10gb-6": 0.0, "gpu-2": 2400.0}
    assert all(
        set(s[0]) == {"namespace", "claim", "claim_uid", "node", "device", "pod"} for s in got["dra_gpu_claim_idle_seconds"]
    )
    assert got["dra_gpu_claim_process_gpu_utilization_ratio"] == []  # no per-process numbers: HELP and TYPE, no series


def test_by_default_the_series_name_no_tenant_only_the_claims_uid_node_and_device() -> None:
    """Tenant labels off (the chart's default): no namespace, claim or pod name in any series, per process included."""
    procs = (ProcessUsage(11, 0.5, 4 * GIB),)
    snap = UsageSnapshot(
        (
            row("gpu-1", 0.8, 10 * GIB, 0.0, pods=("p1", "p2"), processes=procs),
            row("gpu-2", 0.0, 1 * GIB, 2400.0, namespace="team-b", claim="nb", claim_uid="uid-2", pods=("nb-0",)),
        ),
        taken_at=1.0,
    )
    got = scrape(snap, tenant_labels=False)
    registry = CollectorRegistry()
    register_usage_collector(registry, lambda: snap, "node-a")  # the default
    text = generate_latest(registry).decode()
    for name in ("team-a", "team-b", "train", "nb", "p1", "p2", "nb-0"):
        assert f'"{name}' not in text and f",{name}" not in text, name
    for label in ("namespace=", "{claim=", ",claim=", "pod="):
        assert label not in text, label
    assert ({"claim_uid": "uid-1", "node": "node-a", "device": "gpu-1"}, 0.8) in got["dra_gpu_claim_gpu_utilization_ratio"]
    assert ({"claim_uid": "uid-2", "node": "node-a", "device": "gpu-2"}, 2400.0) in got["dra_gpu_claim_idle_seconds"]
    assert [({"claim_uid": "uid-1", "node": "node-a", "device": "gpu-1", "pid": "11"}, 4 * GIB)] == got[
        "dra_gpu_claim_process_memory_used_bytes"
    ]
    for series in got.values():
        for labels, _ in series:
            assert set(labels) <= {"claim_uid", "node", "device", "pid"}


def test_per_process_series_carry_a_pid_label_only_where_the_source_gave_numbers() -> None:
    procs = (ProcessUsage(11, 0.5, 4 * GIB), ProcessUsage(12, None, None))
    got = scrape(UsageSnapshot((row("gpu-1", 0.5, 4 * GIB, 0.0, processes=procs),), 1.0))
    util = got["dra_gpu_claim_process_gpu_utilization_ratio"]
    mem = got["dra_gpu_claim_process_memory_used_bytes"]
    assert [(s[0]["pid"], s[1]) for s in util] == [("11", 0.5)]
    assert [(s[0]["pid"], s[1]) for s in mem] == [("11", 4 * GIB)]
    assert util[0][0]["device"] == "gpu-1"


def test_the_scrape_reads_the_snapshot_each_time() -> None:
    snaps = [UsageSnapshot((row("gpu-1", 0.1, 0, 0.0),), 1.0), UsageSnapshot()]
    registry = CollectorRegistry()
    register_usage_collector(registry, lambda: snaps[0], "node-a")
    assert b'device="gpu-1"' in generate_latest(registry)
    snaps[0] = snaps[1]  # the claim was unprepared
    assert b'device="gpu-1"' not in generate_latest(registry)


def test_a_failing_snapshot_yields_no_usage_series_and_the_scrape_still_answers() -> None:
    registry = CollectorRegistry()

    def broken() -> UsageSnapshot:
        raise RuntimeError("boom")

    register_usage_collector(registry, broken, "node-a")
    assert b"dra_gpu_claim_idle_seconds{" not in generate_latest(registry)


def test_registering_twice_on_one_registry_is_refused() -> None:
    registry = CollectorRegistry()
    register_usage_collector(registry, UsageSnapshot, "node-a")
    with pytest.raises(ValueError, match="Duplicated"):
        register_usage_collector(registry, UsageSnapshot, "node-a")
