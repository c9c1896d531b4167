"""The daemons' Prometheus metrics (``dra_driver.obs.metrics``): the names and labels others build on, what moves
them, bounded labels, the scrape-time gauges, and the HTTP server's start, clash and stop."""

from __future__ import annotations

import http.client
import json
import re
import socket
import ssl
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, cast

import grpc
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from structlog.testing import capture_logs

from controller.main import parse as parse_controller
from dra_driver.appkit.inventory import node_publication
from dra_driver.appkit.publisher import SlicePublisher
from dra_driver.core.api_errors import ApiError
from dra_driver.core.checkpoint import ClaimEntry, ClaimState, MigRecord, PreparedDevice
from dra_driver.core.mig import MigError, MigErrorCode, MigStrategy
from dra_driver.core.schema import node_devices
from dra_driver.core.sharing import MpsDaemon
from dra_driver.files.cdi_store import CdiStore
from dra_driver.files.checkpoint_store import CheckpointStore
from dra_driver.files.lock import file_lock
from dra_driver.mig_backends.select import make_mig_backend
from dra_driver.obs.claim_errors import CLAIM_ERROR_REASONS, claim_error_reason
from dra_driver.obs.metrics import (
    MetricsPortError,
    PluginMetrics,
    PreparedClaimsCollector,
    PublisherMetrics,
    WebhookMetrics,
    dropped_field,
    new_registry,
    serve_metrics,
)
from dra_driver.sources.fake import FakeGpuSource
from kubelet_plugin.prepare.mig_ops import MigOps
from kubelet_plugin.prepare.recovery import StartReport
from kubelet_plugin.prepare.requests import ClaimRef
from kubelet_plugin.servicer import DraV1beta1Servicer, DraV1Servicer, MetricsSlot
from kubelet_plugin.settings import parse as parse_plugin
from kubelet_plugin.start_gate import StartGate
from proto.dra.v1 import api_pb2 as v1
from proto.dra.v1beta1 import api_pb2 as v1beta1
from testkit.admission import GOOD, MAGIC, body, claim_obj, request
from testkit.claimdata import DRIVER, allocated_claim, new_uid
from testkit.webhookcerts import make_certs
from tests.unit.kubelet_plugin.device_states import Claims, new_device_state
from tests.unit.kubelet_plugin.prepare.test_state import make_state
from tests.unit.kubelet_plugin.prepare.test_state_failclosed import GPUS, Node, mig_claim, prepared_pair
from tests.unit.kubelet_plugin.prepare.test_state_failclosed import Claims as MigClaims
from webhook.admission import VALIDATE_PATH
from webhook.main import WebhookSettings, serve
from webhook.main import parse as parse_webhook

NO_CONTEXT = cast(grpc.ServicerContext, object())

# The contract: name as exposed -> (type, label names). Dashboards, alerts and other teams build on it.
CONTRACT: dict[str, tuple[str, frozenset[str]]] = {
    "dra_gpu_requests_total": ("counter", frozenset({"operation", "api"})),
    "dra_gpu_request_duration_seconds": ("histogram", frozenset({"operation"})),
    "dra_gpu_requests_in_flight": ("gauge", frozenset({"operation"})),
    "dra_gpu_claim_operations_total": ("counter", frozenset({"operation", "result"})),
    "dra_gpu_claim_errors_total": ("counter", frozenset({"operation", "reason"})),
    "dra_gpu_checkpoint_recoveries_total": ("counter", frozenset({"kind"})),
    "dra_gpu_prepared_claims": ("gauge", frozenset()),
    "dra_gpu_prepared_devices": ("gauge", frozenset({"kind"})),
    "dra_gpu_mig_instances": ("gauge", frozenset()),
    "dra_gpu_sharing_daemons": ("gauge", frozenset()),
    "dra_gpu_slice_writes_total": ("counter", frozenset({"action"})),
    "dra_gpu_slice_write_conflicts_total": ("counter", frozenset()),
    "dra_gpu_slice_dropped_fields_total": ("counter", frozenset({"field"})),
    "dra_gpu_slice_reconcile_errors_total": ("counter", frozenset()),
    "dra_gpu_admission_requests_total": ("counter", frozenset({"kind", "result"})),
    "dra_gpu_admission_duration_seconds": ("histogram", frozenset()),
}


def every_set(claims: Mapping[str, ClaimEntry] | None = None) -> tuple[CollectorRegistry, PluginMetrics, PublisherMetrics]:
    """A registry with every daemon's metric set (one process never has them all; the contract test wants them)."""
    registry = new_registry()
    plugin = PluginMetrics(registry)
    publisher = PublisherMetrics(registry)
    WebhookMetrics(registry)
    registry.register(PreparedClaimsCollector(lambda: claims or {}, ["gpu-0-mig-1g10gb-6"]))
    return registry, plugin, publisher


def value(registry: CollectorRegistry, name: str, **labels: str) -> float:
    """A sample's value; 0 for a series that does not exist (asserted where it matters)."""
    return registry.get_sample_value(name, labels) or 0.0


def exposed(registry: CollectorRegistry) -> dict[str, tuple[str, frozenset[str]]]:
    """What a scrape shows: ``# TYPE`` name -> (type, the label names of its samples, without ``le``)."""
    text = generate_latest(registry).decode()
    types = dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.MULTILINE))
    labels: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(text):
        exposed_name = next(n for n in types if n in (family.name, family.name + "_total"))
        labels[exposed_name] = {k for s in family.samples for k in s.labels if k != "le"}
    return {n: (t, frozenset(labels.get(n, ()))) for n, t in types.items()}


# -- the contract -------------------------------------------------------------------------------


def test_every_metric_is_exposed_with_its_contract_name_type_and_labels() -> None:
    registry, _, publisher = every_set()
    publisher.fields_dropped(["spec.devices[0].taints"])  # the one family with no series before its first event
    ours = {n: v for n, v in exposed(registry).items() if n.startswith("dra_gpu_")}
    assert CONTRACT == ours


def test_every_series_of_a_known_label_value_exists_at_zero_before_anything_happens() -> None:
    """A rate or an alert on an error reason works before the first error (no absent series)."""
    registry, _, _ = every_set()
    for op in ("prepare", "unprepare"):
        for api in ("v1", "v1beta1"):
            assert 0.0 == registry.get_sample_value("dra_gpu_requests_total", {"operation": op, "api": api})
        for reason in CLAIM_ERROR_REASONS:
            assert 0.0 == registry.get_sample_value("dra_gpu_claim_errors_total", {"operation": op, "reason": reason})
    for kind in ("fresh", "previous_generation", "unreadable", "missing", "rebuilt", "reboot", "too_new"):
        assert 0.0 == registry.get_sample_value("dra_gpu_checkpoint_recoveries_total", {"kind": kind})
    for action in ("create", "update", "delete"):
        assert 0.0 == registry.get_sample_value("dra_gpu_slice_writes_total", {"action": action})


def test_the_process_metrics_come_with_the_registry() -> None:
    text = generate_latest(new_registry()).decode()
    assert "process_resident_memory_bytes" in text
    assert "python_gc_collections_total" in text
    assert "_created" not in text  # no creation-time series beside every counter


# -- what moves them ------------------------------------------------------------------------------


def test_a_call_counts_the_request_its_duration_and_each_claims_result() -> None:
    registry, plugin, _ = every_set()
    plugin.call_started("prepare")
    assert 1.0 == value(registry, "dra_gpu_requests_in_flight", operation="prepare")
    plugin.call_finished("prepare", "v1beta1", 0.003, 3, ["reading claim default/a: claim default/a not found"])
    assert 0.0 == value(registry, "dra_gpu_requests_in_flight", operation="prepare")
    assert 1.0 == value(registry, "dra_gpu_requests_total", operation="prepare", api="v1beta1")
    assert 0.0 == value(registry, "dra_gpu_requests_total", operation="prepare", api="v1")
    assert 1.0 == value(registry, "dra_gpu_request_duration_seconds_count", operation="prepare")
    assert 0.0 == value(registry, "dra_gpu_request_duration_seconds_bucket", operation="prepare", le="0.0025")
    assert 1.0 == value(registry, "dra_gpu_request_duration_seconds_bucket", operation="prepare", le="0.005")
    assert 2.0 == value(registry, "dra_gpu_claim_operations_total", operation="prepare", result="success")
    assert 1.0 == value(registry, "dra_gpu_claim_operations_total", operation="prepare", result="error")
    assert 1.0 == value(registry, "dra_gpu_claim_errors_total", operation="prepare", reason="claim_lookup")


def test_the_duration_buckets_span_a_millisecond_to_thirty_seconds() -> None:
    registry, plugin, _ = every_set()
    plugin.call_started("unprepare")
    plugin.call_finished("unprepare", "v1", 45.0, 1, [])
    buckets = sorted(
        float(s.labels["le"])
        for f in text_string_to_metric_families(generate_latest(registry).decode())
        if f.name == "dra_gpu_request_duration_seconds"
        for s in f.samples
        if s.name.endswith("_bucket") and s.labels["operation"] == "unprepare"
    )
    assert (0.001, 30.0, float("inf")) == (buckets[0], buckets[-2], buckets[-1])
    assert 0.0 == value(registry, "dra_gpu_request_duration_seconds_bucket", operation="unprepare", le="30.0")
    assert 1.0 == value(registry, "dra_gpu_request_duration_seconds_bucket", operation="unprepare", le="+Inf")


def test_the_servicers_report_every_call_once_the_slot_is_filled(tmp_path: Path) -> None:
    claims = Claims()
    good = claims.add(allocated_claim(name="good", devices=["gpu-1"]))
    missing = ClaimRef("default", new_uid(), "gone")
    state = make_state(tmp_path, claims)
    slot = MetricsSlot()
    servicer = DraV1Servicer(StartGate.opened(state), metrics=slot)
    request = v1.NodePrepareResourcesRequest(claims=[v1.Claim(namespace=good.namespace, uid=good.uid, name=good.name)])
    servicer.NodePrepareResources(request, NO_CONTEXT)  # before the metrics exist: not counted, no error
    registry = new_registry()
    slot.sink = PluginMetrics(registry)
    both = [v1.Claim(namespace=r.namespace, uid=r.uid, name=r.name) for r in (good, missing)]
    resp = servicer.NodePrepareResources(v1.NodePrepareResourcesRequest(claims=both), NO_CONTEXT)
    assert "" == resp.claims[good.uid].error and "not found" in resp.claims[missing.uid].error
    old = DraV1beta1Servicer(StartGate.opened(state), metrics=slot)
    old.NodeUnprepareResources(
        v1beta1.NodeUnprepareResourcesRequest(claims=[v1beta1.Claim(namespace=good.namespace, uid=good.uid, name=good.name)]),
        NO_CONTEXT,
    )
    assert 1.0 == value(registry, "dra_gpu_requests_total", operation="prepare", api="v1")
    assert 1.0 == value(registry, "dra_gpu_requests_total", operation="unprepare", api="v1beta1")
    assert 1.0 == value(registry, "dra_gpu_claim_operations_total", operation="prepare", result="success")
    assert 1.0 == value(registry, "dra_gpu_claim_errors_total", operation="prepare", reason="claim_lookup")
    assert 1.0 == value(registry, "dra_gpu_claim_operations_total", operation="unprepare", result="success")
    assert 0.0 == value(registry, "dra_gpu_requests_in_flight", operation="prepare")


def test_a_failing_metrics_sink_never_changes_the_kubelets_answer(tmp_path: Path) -> None:
    class Broken:
        def call_started(self, operation: str) -> None:
            pass

        def call_finished(self, *args: object) -> None:
            raise RuntimeError("broken sink")

    claims = Claims()
    ref = claims.add(allocated_claim(devices=["gpu-2"]))
    servicer = DraV1Servicer(StartGate.opened(make_state(tmp_path, claims)), metrics=MetricsSlot(Broken()))
    request = v1.NodePrepareResourcesRequest(claims=[v1.Claim(namespace=ref.namespace, uid=ref.uid, name=ref.name)])
    with capture_logs() as logs:
        resp = servicer.NodePrepareResources(request, NO_CONTEXT)
    assert "" == resp.claims[ref.uid].error and ["gpu-2"] == [d.device_name for d in resp.claims[ref.uid].devices]
    assert "metrics_failed" in [e["event"] for e in logs]


def test_checkpoint_recoveries_count_the_start_up_reports_kinds() -> None:
    registry, plugin, _ = every_set()
    plugin.checkpoint_loaded(["CheckpointRecovered", "CheckpointRebuilt", "SomethingNew"], fresh=False)
    plugin.checkpoint_loaded([], fresh=True)
    assert 1.0 == value(registry, "dra_gpu_checkpoint_recoveries_total", kind="previous_generation")
    assert 1.0 == value(registry, "dra_gpu_checkpoint_recoveries_total", kind="rebuilt")
    assert 1.0 == value(registry, "dra_gpu_checkpoint_recoveries_total", kind="fresh")
    kinds = {k for (n, labels) in series(registry) if n == "dra_gpu_checkpoint_recoveries_total" for _, k in labels}
    assert "SomethingNew" not in kinds


def start_report(node: Node) -> StartReport:
    """A plugin (re)start on ``node``'s files, as ``Node.start`` makes it, and what its start-up found."""
    backend = make_mig_backend(fake=True, gpus=GPUS, state_dir=node.root / "sim", boot_id="boot-1")
    publication = node_publication(GPUS, MigStrategy.DYNAMIC, backend)
    return new_device_state(node.root, node.claims, publication=publication, mig=MigOps(backend, GPUS), start=False).startup()


def test_the_plugins_start_up_says_what_it_found_in_the_checkpoint(tmp_path: Path) -> None:
    """A new node is fresh; a torn newest generation is recovered and rebuilt; then it is trusted; a newer one refused."""
    assert StartReport((), fresh=True) == start_report(Node(tmp_path / "new", MigClaims()))
    node, _, _ = prepared_pair(tmp_path / "torn")
    assert StartReport() == start_report(node)  # a plain restart: nothing to count
    node.checkpoint.write_bytes(node.checkpoint.read_bytes()[:100])
    assert StartReport(("CheckpointRecovered", "CheckpointRebuilt")) == start_report(node)
    assert StartReport() == start_report(node)  # recovered and saved: trusted again
    node.checkpoint.write_bytes(node.checkpoint.read_bytes().replace(b"dra-gpu.dev/v1", b"dra-gpu.dev/v2"))
    assert StartReport(("CheckpointTooNew",)) == start_report(node)


# -- bounded labels --------------------------------------------------------------------------------


def series(registry: CollectorRegistry) -> set[tuple[str, frozenset[tuple[str, str]]]]:
    return {
        (s.name, frozenset(s.labels.items()))
        for f in text_string_to_metric_families(generate_latest(registry).decode())
        for s in f.samples
    }


def test_error_reasons_stay_in_the_vocabulary_whatever_the_message() -> None:
    registry, plugin, _ = every_set()
    messages = [f"some new failure #{i}: {'x' * i}" for i in range(200)] + ["", "\x00", "é" * 5000, "preparing: ", "claim "]
    plugin.call_started("prepare")
    plugin.call_finished("prepare", "v1", 0.01, len(messages), messages)
    reasons = {dict(labels)["reason"] for name, labels in series(registry) if name == "dra_gpu_claim_errors_total"}
    assert reasons <= set(CLAIM_ERROR_REASONS)
    assert len(messages) == value(registry, "dra_gpu_claim_operations_total", operation="prepare", result="error")


def real_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """What the plugin's state answers for claims that fail in each way, by what the test did."""

    def config(strategy: str) -> list[dict[str, Any]]:
        parameters = {"apiVersion": "resource.dra-gpu.dev/v1alpha1", "kind": "GpuConfig", "sharing": {"strategy": strategy}}
        return [{"source": "FromClaim", "requests": [], "opaque": {"driver": DRIVER, "parameters": parameters}}]

    mps, bad = config("MPS"), config("Magic")
    claims = Claims()
    refs = {
        "config": claims.add(allocated_claim(name="bad-config", config=bad)),
        # words in a claim's name mislead nothing
        "other-node": claims.add(allocated_claim(name="mps-cdi-checkpoint-mig", node="node-b")),
        "other-driver": claims.add(allocated_claim(name="other-driver", driver="gpu.example.com")),
        "unknown-device": claims.add(allocated_claim(name="unknown-device", devices=["gpu-99"])),
        "not-found": ClaimRef("default", new_uid(), "not-there"),
        "bad-uid": ClaimRef("default", "../../etc", "bad-uid"),
        "bad-name": ClaimRef("default", new_uid(), "Bad_Name"),
    }
    for sub in ("a", "b"):
        (tmp_path / sub).mkdir()
    state = make_state(tmp_path / "a", claims)
    out = {k: state.prepare([r])[r.uid].error for k, r in refs.items()}
    dup = ClaimRef("default", new_uid(), "dup")
    out["uid-twice"] = state.unprepare([dup, dup])[dup.uid]
    held = claims.add(allocated_claim(name="holder", devices=["gpu-3"]))
    assert "" == state.prepare([held])[held.uid].error
    taken = claims.add(allocated_claim(name="taker", devices=["gpu-3"]))
    out["device-held"] = state.prepare([taken])[taken.uid].error

    no_sharing = make_state(tmp_path / "b", claims, sharing=False)
    asks_mps = claims.add(allocated_claim(name="asks-mps", config=mps))
    out["no-sharing-backend"] = no_sharing.prepare([asks_mps])[asks_mps.uid].error

    node = Node(tmp_path / "mig", MigClaims())
    mig_state = node.start()
    backend = make_mig_backend(fake=True, gpus=GPUS, state_dir=node.root / "sim", boot_id="boot-1")
    backend.set_mode(GPUS[0], True)
    backend.create_gpu_instance(GPUS[0], 19, 5)  # 1g.10gb at 5, out of band
    carve = mig_claim(node.claims, "gpu-0-mig-1g10gb-5")
    out["mig-placement-taken"] = mig_state.prepare([carve])[carve.uid].error

    slow = new_device_state(tmp_path / "c", claims, lock_timeout_s=0.1)
    waits = claims.add(allocated_claim(name="waits", devices=["gpu-4"]))
    with file_lock(tmp_path / "c" / "serialize.lock"):  # another plugin pod holds the node's lock
        out["lock-held"] = slow.prepare([waits])[waits.uid].error

    full = claims.add(allocated_claim(name="disk-full", devices=["gpu-5"]))

    def no_space(self: CheckpointStore, cp: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(CheckpointStore, "save", no_space)
    out["checkpoint-save-fails"] = state.prepare([full])[full.uid].error
    monkeypatch.undo()

    spec_fails = claims.add(allocated_claim(name="spec-fails", devices=["gpu-6"]))

    def cannot_write(self: CdiStore, uid: str, spec: object) -> None:
        raise OSError(30, "Read-only file system", f"/var/run/cdi/k8s.{DRIVER}-claim_{uid}.json")

    monkeypatch.setattr(CdiStore, "write", cannot_write)
    out["cdi-write-fails"] = state.prepare([spec_fails])[spec_fails.uid].error
    monkeypatch.undo()

    prepared, first, _ = prepared_pair(tmp_path / "too-new")
    raw = prepared.checkpoint.read_bytes().replace(b"checkpoint.dra-gpu.dev/v1", b"checkpoint.dra-gpu.dev/v2")
    prepared.checkpoint.write_bytes(raw)
    out["newer-checkpoint"] = prepared.start().prepare([first])[first.uid].error
    return out


EXPECTED_REASONS = {
    "config": "config",
    "other-node": "allocation",
    "other-driver": "allocation",
    "unknown-device": "allocation",
    "device-held": "allocation",
    "not-found": "claim_lookup",
    "bad-uid": "request",
    "bad-name": "request",
    "uid-twice": "request",
    "no-sharing-backend": "sharing",
    "mig-placement-taken": "mig",
    "lock-held": "lock",
    "checkpoint-save-fails": "checkpoint",
    "cdi-write-fails": "cdi",
    "newer-checkpoint": "refused",
}


def test_the_plugins_real_errors_map_to_their_reasons(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each reason is pinned to a message the plugin's state really answers: a reworded message fails here."""
    errors = real_errors(tmp_path, monkeypatch)
    assert all(errors.values()), errors  # every case did fail
    assert EXPECTED_REASONS == {case: claim_error_reason(message) for case, message in errors.items()}, errors


def test_the_wrapped_errors_state_py_builds_map_to_their_reasons() -> None:
    """The wrappers of one claim's side effects and of a whole batch (the formats of kubelet_plugin.prepare.state)."""
    mig = MigError("destroy_gi", MigErrorCode.IN_USE, "GPU instance 3 on GPU-1234")
    cases = {
        f"unpreparing claim default/a: {mig}": "mig",
        f"rolling back an earlier attempt of claim default/a: {mig}": "mig",
        "unpreparing claim default/a: nvidia-cuda-mps-control -d exited 1: boom": "sharing",
        "unpreparing claim default/a: saving the checkpoint: [Errno 5] Input/output error": "checkpoint",
        "preparing: [Errno 5] Input/output error": "checkpoint",
        "unpreparing: timed out after 10s waiting for the prepare lock": "lock",
        "internal error preparing claim default/a: KeyError: 'x'": "internal",
        "internal error decoding claim default/a: RecursionError": "internal",
        "internal error: claim not handled": "internal",
        "this node's checkpoint cannot be used: apiVersion ...": "refused",
        "preparing claim default/a: something nobody foresaw": "other",
    }
    assert cases == {m: claim_error_reason(m) for m in cases}


def test_dropped_field_paths_reduce_to_bounded_field_names() -> None:
    cases = {
        "spec.devices[3].consumesCounters": "consumesCounters",
        "spec.sharedCounters": "sharedCounters",
        "spec.devices[0].allowMultipleAllocations": "allowMultipleAllocations",
        "spec.devices[0].attributes.gpu.dra-gpu.dev/productName": "attributes",  # a key, not a field: its map
        "spec.devices[7]": "devices",
        "spec.devices[1].capacity.memory.requestPolicy.validRange.step": "step",
        "spec.somethingFromTheFuture": "other",
        "": "other",
    }
    assert cases == {p: dropped_field(p) for p in cases}


def test_webhook_reviews_count_by_bounded_kind_and_result() -> None:
    registry = CollectorRegistry()
    webhook = WebhookMetrics(registry)
    webhook.reviewed("ResourceClaim", "denied", 0.002)
    webhook.reviewed("Pod", "allowed", 0.001)  # a kind the webhook configuration should not route: "other"
    webhook.reviewed("", "exploded", 0.001)
    assert 1.0 == value(registry, "dra_gpu_admission_requests_total", kind="ResourceClaim", result="denied")
    assert 1.0 == value(registry, "dra_gpu_admission_requests_total", kind="other", result="allowed")
    assert 1.0 == value(registry, "dra_gpu_admission_requests_total", kind="other", result="error")
    assert 3.0 == value(registry, "dra_gpu_admission_duration_seconds_count")
    labels = {v for name, ls in series(registry) if name == "dra_gpu_admission_requests_total" for _, v in ls}
    assert not {"Pod", "", "exploded"} & labels


# -- what the plugin holds, at scrape time -------------------------------------------------------------


def mig(gi: int, parent: str = "GPU-a", carved: bool = True) -> MigRecord:
    return MigRecord(parent, 19, "1g.10gb", gi, 1, gi_id=gi, ci_id=0, mig_uuid=f"MIG-{parent}-{gi}", carved=carved)


def device(name: str, *, share: str | None = None, mig_record: MigRecord | None = None) -> PreparedDevice:
    return PreparedDevice(("r",), "node-a", name, (f"k8s.{DRIVER}/claim=x-{name}",), share_id=share, mig=mig_record)


def test_the_gauges_count_completed_claims_their_devices_and_what_the_driver_holds() -> None:
    shared = MpsDaemon("gpu-0-shared", ("GPU-0",), shared=True)
    completed = ClaimState.PREPARE_COMPLETED
    claims = {
        "two-gpus": ClaimEntry(completed, "ns", "a", (device("gpu-1"), device("gpu-2"))),
        "carved": ClaimEntry(completed, "ns", "b", (device("gpu-3-mig-1g10gb-0", mig_record=mig(1)),)),
        "static-mig": ClaimEntry(completed, "ns", "c", (device("gpu-0-mig-1g10gb-6"),)),  # named MIG by the node
        "share-1": ClaimEntry(completed, "ns", "d", (device("gpu-0", share="s1"),), mps_daemons=(shared,)),
        "share-2": ClaimEntry(completed, "ns", "e", (device("gpu-0", share="s2"),), mps_daemons=(shared,)),
        "half-done": ClaimEntry(ClaimState.PREPARE_STARTED, "ns", "f", mig_intents=(mig(9, "GPU-b"),)),
        "recovered": ClaimEntry(ClaimState.PREPARE_STARTED, "", "", mig_intents=(mig(2, "GPU-c"),), recovered=True),
    }
    registry, _, _ = every_set(claims)
    assert 5.0 == value(registry, "dra_gpu_prepared_claims")
    assert {"gpu": 2.0, "mig": 2.0, "share": 2.0} == {
        k: value(registry, "dra_gpu_prepared_devices", kind=k) for k in ("gpu", "mig", "share")
    }
    assert 2.0 == value(registry, "dra_gpu_mig_instances")  # carved and held; not the half-done one's intent
    assert 1.0 == value(registry, "dra_gpu_sharing_daemons")  # one daemon serves both shares


def test_the_gauges_read_the_plugins_state_without_its_lock(tmp_path: Path) -> None:
    claims = Claims()
    ref = claims.add(allocated_claim(devices=["gpu-1", "gpu-2"]))
    state = make_state(tmp_path, claims)
    registry = CollectorRegistry()
    registry.register(PreparedClaimsCollector(state.prepared_snapshot, []))
    assert 0.0 == value(registry, "dra_gpu_prepared_claims")
    assert "" == state.prepare([ref])[ref.uid].error
    with file_lock(tmp_path / "serialize.lock", timeout_s=1.0):  # a call in flight holds the lock: the scrape waits not
        assert 1.0 == value(registry, "dra_gpu_prepared_claims")
        assert 2.0 == value(registry, "dra_gpu_prepared_devices", kind="gpu")
    assert {ref.uid: ""} == state.unprepare([ref])
    assert 0.0 == value(registry, "dra_gpu_prepared_claims")


def test_a_failing_state_read_leaves_the_scrape_working_without_those_gauges() -> None:
    def broken() -> Mapping[str, ClaimEntry]:
        raise OSError("gone")

    registry = new_registry()
    PluginMetrics(registry)
    registry.register(PreparedClaimsCollector(broken, []))
    with capture_logs() as logs:
        text = generate_latest(registry).decode()
    assert "dra_gpu_requests_total" in text and "dra_gpu_prepared_claims" not in text
    assert "metrics_claims_unreadable" in [e["event"] for e in logs]


# -- the publisher's hook -------------------------------------------------------------------------------


class FakeSliceApi:
    """An API server for one node's slices: stores what it gets, less the devices' ``drop`` field; ``conflicts``: 409s
    to answer updates with."""

    def __init__(self, drop: str = "", conflicts: int = 0) -> None:
        self.slices: dict[str, dict[str, object]] = {}
        self.drop = drop
        self.conflicts = conflicts
        self.rv = 0

    def _store(self, obj: dict[str, object]) -> dict[str, object]:
        self.rv += 1
        stored = {**obj, "metadata": {**cast(dict[str, object], obj["metadata"]), "resourceVersion": str(self.rv)}}
        spec = dict(cast(dict[str, Any], obj["spec"]))
        if self.drop:  # what a server without a feature gate does: the field is gone from every device
            spec["devices"] = [{k: v for k, v in d.items() if k != self.drop} for d in spec["devices"]]
        stored["spec"] = spec
        self.slices[str(cast(dict[str, object], obj["metadata"])["name"])] = stored
        return stored

    def list(self, driver: str, node: str) -> tuple[list[dict[str, object]], str]:
        return list(self.slices.values()), str(self.rv)

    def create(self, obj: dict[str, object]) -> dict[str, object]:
        return self._store(obj)

    def update(self, obj: dict[str, object]) -> dict[str, object]:
        if self.conflicts:
            self.conflicts -= 1
            raise ApiError(409, "Conflict", "the object has been modified")
        return self._store(obj)

    def delete(self, name: str) -> None:
        self.slices.pop(name, None)

    def watch(self, driver: str, node: str, resource_version: str, timeout_s: float) -> Iterator[tuple[str, dict[str, object]]]:
        return iter(())

    def interrupt_watches(self) -> None:
        pass

    def node_uid(self, node: str) -> str:
        return "node-uid"

    def server_minor_version(self) -> int:
        return 37


def test_the_publisher_reports_writes_conflicts_dropped_fields_and_failed_passes() -> None:
    registry = CollectorRegistry()
    metrics = PublisherMetrics(registry)
    api = FakeSliceApi(drop="capacity", conflicts=1)
    gpus = FakeGpuSource("l4x4", "node-a").gpus()
    publisher = SlicePublisher(api, DRIVER, "node-a", metrics=metrics)
    publisher.set_devices(node_devices(gpus))
    publisher.reconcile_once()
    assert 1.0 == value(registry, "dra_gpu_slice_writes_total", action="create")
    assert 4.0 == value(registry, "dra_gpu_slice_dropped_fields_total", field="capacity")  # one per GPU
    api.drop = ""  # the feature gate turned on
    publisher.set_devices(node_devices(gpus[:3]))  # a change: an update, refused once with 409
    with pytest.raises(ApiError):
        publisher.reconcile_once()
    assert 1.0 == value(registry, "dra_gpu_slice_write_conflicts_total")
    assert 1.0 == value(registry, "dra_gpu_slice_reconcile_errors_total")
    publisher.reconcile_once()
    assert 1.0 == value(registry, "dra_gpu_slice_writes_total", action="update")


# -- the HTTP server --------------------------------------------------------------------------------------


def test_port_zero_serves_the_registry_on_the_port_it_logs_and_stop_closes_it() -> None:
    registry, plugin, _ = every_set()
    plugin.call_started("prepare")
    with capture_logs() as logs:
        server = serve_metrics(registry, "127.0.0.1", 0)
    try:
        (listening,) = [e for e in logs if e["event"] == "metrics_listening"]
        assert listening["port"] == server.port > 0
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics", timeout=5) as resp:
            body = resp.read().decode()
        assert 'dra_gpu_requests_in_flight{operation="prepare"} 1.0' in body
    finally:
        server.stop()
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics", timeout=2)


def test_a_port_in_use_is_a_metrics_port_error_naming_address_port_and_flag() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(MetricsPortError) as err:
            serve_metrics(new_registry(), "127.0.0.1", port)
    message = str(err.value)
    for part in ("127.0.0.1", str(port), "--metrics-port", "METRICS_PORT", "in use"):
        assert part in message, message


def test_an_address_not_on_this_host_is_a_metrics_port_error_naming_it() -> None:
    with pytest.raises(MetricsPortError) as err:
        serve_metrics(new_registry(), "no-such-host.invalid", 0)
    assert "no-such-host.invalid" in str(err.value) and "--metrics-address" in str(err.value)
    with pytest.raises(MetricsPortError, match="70000"):
        serve_metrics(new_registry(), "127.0.0.1", 70000)


def test_every_address_in_brackets_is_accepted() -> None:
    server = serve_metrics(new_registry(), "[::]", 0)
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics", timeout=5) as resp:
            assert 200 == resp.status
    finally:
        server.stop()


# -- the daemons' flags and the webhook's wiring ------------------------------------------------------


def test_each_daemon_has_its_own_metrics_port_by_default_and_takes_the_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Distinct defaults: daemons sharing a host network never clash; METRICS_PORT and METRICS_ADDRESS set them."""
    for var in ("METRICS_PORT", "METRICS_ADDRESS"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NODE_NAME", "node-a")
    tls = ["--tls-cert-file", "c", "--tls-private-key-file", "k"]
    assert (9420, 9421, 9422) == (
        parse_plugin([]).metrics_port,
        parse_controller([]).metrics_port,
        parse_webhook(tls).metrics_port,
    )
    assert "127.0.0.1" == parse_plugin([]).metrics_address  # this host only; the chart passes the pod IP
    monkeypatch.setenv("METRICS_PORT", "-1")
    monkeypatch.setenv("METRICS_ADDRESS", "127.0.0.1")
    off = parse_plugin([])
    assert (-1, "127.0.0.1") == (off.metrics_port, off.metrics_address)
    assert 9000 == parse_controller(["--metrics-port", "9000"]).metrics_port  # a flag beats its env var


@pytest.mark.parametrize("bad", ["70000", "-2", "http"])
def test_a_bad_metrics_port_is_a_usage_error(
    bad: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:

    monkeypatch.setenv("NODE_NAME", "node-a")
    with pytest.raises(SystemExit) as exc:
        parse_plugin(["--metrics-port", bad])
    assert 2 == exc.value.code
    assert "--metrics-port" in capsys.readouterr().err


def test_the_webhook_serves_its_reviews_counts_on_its_metrics_port(tmp_path: Path) -> None:
    """``serve`` with a metrics port: each review is counted by kind and result; a taken port exits 2."""

    certs = make_certs(tmp_path)
    settings = WebhookSettings("127.0.0.1", 0, certs.cert, certs.key, DRIVER, "info", metrics_port=0, metrics_address="127.0.0.1")
    stop = threading.Event()
    result: list[int] = []
    with capture_logs() as logs:
        thread = threading.Thread(target=lambda: result.append(serve(settings, stop)))
        thread.start()
        deadline = time.monotonic() + 10
        while not any(e["event"] == "webhook_serving" for e in logs) and time.monotonic() < deadline:
            time.sleep(0.02)
        port = next(e["port"] for e in logs if e["event"] == "webhook_serving")
        metrics_port = next(e["port"] for e in logs if e["event"] == "metrics_listening")
        conn = http.client.HTTPSConnection(
            "127.0.0.1", port, context=ssl.create_default_context(cafile=str(certs.ca)), timeout=10
        )
        try:
            for payload in (body(request(claim_obj(GOOD))), body(request(claim_obj(MAGIC))), b"{oops"):
                conn.request("POST", VALIDATE_PATH, body=payload, headers={"Content-Type": "application/json"})
                answer = conn.getresponse().read()
                assert payload == b"{oops" or "response" in json.loads(answer)
        finally:
            conn.close()
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5) as resp:
            text = resp.read().decode()
        stop.set()
        thread.join(10)
    assert [0] == result
    assert 'dra_gpu_admission_requests_total{kind="ResourceClaim",result="allowed"} 1.0' in text
    assert 'dra_gpu_admission_requests_total{kind="ResourceClaim",result="denied"} 1.0' in text
    assert 'dra_gpu_admission_requests_total{kind="other",result="error"} 1.0' in text
    assert "dra_gpu_admission_duration_seconds_count 3.0" in text

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        clash = WebhookSettings(
            "127.0.0.1",
            0,
            certs.cert,
            certs.key,
            DRIVER,
            "info",
            metrics_port=taken.getsockname()[1],
            metrics_address="127.0.0.1",
        )
        with capture_logs() as logs:
            assert 2 == serve(clash, threading.Event())
    assert ["metrics_port_unavailable"] == [e["event"] for e in logs]
