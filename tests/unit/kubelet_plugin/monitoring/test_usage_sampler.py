"""The plugin's usage sampler (kubelet_plugin.monitoring.usage) over a real DeviceState on fake GPUs and the scripted fake usage.

What it checks: rows name the claim, its devices and GPUs and its pods (from the claims the plugin
read at prepare); the idle clock starts at the claim's CDI spec time; a scripted busy claim is not
idle and an untouched one is; a pass never takes the node lock; unprepared claims disappear; MIG
devices are read by MIG UUID (and never as their parent GPU without one); a failing source makes
devices unknown, not idle.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from dra_driver.appkit.inventory import node_publication
from dra_driver.core.checkpoint import ClaimEntry, ClaimState, MigRecord, PreparedDevice
from dra_driver.core.mig import MigStrategy
from dra_driver.core.mig_publish import DeviceTarget
from dra_driver.core.usage import DeviceKey, UsageSample, UsageTarget
from dra_driver.mig_backends.select import make_mig_backend
from dra_driver.sources.fake import FakeGpuSource
from dra_driver.sources.fake_usage import FakeUsageSource
from dra_driver.sources.fake_usage import main as fake_usage
from kubelet_plugin.monitoring.pod_notes import PodNotes
from kubelet_plugin.monitoring.usage import UsageSampler, cdi_spec_mtime, prepared_targets
from testkit.claimdata import DRIVER, allocated_claim
from tests.unit.kubelet_plugin.device_states import Claims, new_device_state

GIB = 1 << 30


def reserved(obj: dict[str, Any], *pods: str) -> dict[str, Any]:
    obj["status"]["reservedFor"] = [{"resource": "pods", "name": p, "uid": f"uid-{p}"} for p in pods]
    return obj


class Node:
    """A DeviceState on 8 fake H100s with its claims read through PodNotes, and a sampler over the fake usage."""

    def __init__(self, tmp_path: Path, *, now: list[float] | None = None) -> None:
        self.tmp = tmp_path
        self.claims = Claims()
        self.mono = [0.0]
        self.pods = PodNotes(clock=lambda: self.mono[0])
        self.state = new_device_state(tmp_path, self.pods.watching(self.claims))
        clock = (lambda: now[0]) if now is not None else time.time
        self.sampler = UsageSampler(
            source=FakeUsageSource(tmp_path / "fake-gpus"),
            claims=self.state.prepared_snapshot,
            targets=self.state.targets,
            prepared_at=cdi_spec_mtime(tmp_path / "cdi", DRIVER),
            pods=self.pods,
            clock=clock,
        )

    def prepare(self, obj: dict[str, Any]) -> str:
        ref = self.claims.add(obj)
        assert self.state.prepare([ref])[ref.uid].error == ""
        return ref.uid

    def script(self, *args: str) -> None:
        assert fake_usage(["--state-dir", str(self.tmp / "fake-gpus"), *args]) == 0


def test_rows_name_claim_devices_gpus_and_pods_and_a_claim_from_before_a_restart_is_idle_from_the_first_sample(
    tmp_path: Path,
) -> None:
    node = Node(tmp_path)
    uid = node.prepare(reserved(allocated_claim(name="train", namespace="team-a", devices=["gpu-1", "gpu-2"]), "p2", "p1"))
    spec = tmp_path / "cdi" / f"k8s.{DRIVER}-claim_{uid}.json"
    prepared = time.time() - 2400
    os.utime(spec, (prepared, prepared))  # prepared 40 minutes ago (before a plugin restart, say)
    rows = node.sampler.sample_once().rows
    gpus = {g.minor: g.uuid for g in FakeGpuSource("h100x8", "node-a").gpus()}
    assert [(r.namespace, r.claim, r.claim_uid, r.device, r.gpu_uuid, r.mig_uuid) for r in rows] == [
        ("team-a", "train", uid, "gpu-1", gpus[1], None),
        ("team-a", "train", uid, "gpu-2", gpus[2], None),
    ]
    assert all(r.pods == ("p1", "p2") for r in rows)
    assert all(r.utilization == 0.0 and r.memory_used_bytes == 0 for r in rows)
    # Prepared before this sampler started (a plugin restart): it may have been busy until a moment
    # ago, so its idle clock starts now, not 40 minutes ago (no false idle alert after a restart).
    assert all(r.idle_since is not None and r.idle_since > prepared + 2000 for r in rows)
    assert all(r.idle_seconds < 60 for r in rows)


def test_a_busy_claim_is_not_idle_and_becomes_idle_from_its_first_idle_sample(tmp_path: Path) -> None:
    now = [time.time() - 1.0]  # the sampler started before the claims were prepared
    node = Node(tmp_path, now=now)
    busy = node.prepare(allocated_claim(name="busy", devices=["gpu-0"]))
    node.prepare(allocated_claim(name="quiet", devices=["gpu-3"]))
    t0 = now[0] = time.time() + 100.0  # 100 s after both claims were prepared
    node.script("set", "--claim", busy, "--utilization", "0.8", "--memory", "10Gi")
    first = {r.claim: r for r in node.sampler.sample_once().rows}
    assert (first["busy"].utilization, first["busy"].memory_used_bytes, first["busy"].idle_seconds) == (0.8, 10 * GIB, 0)
    assert first["busy"].idle_since is None
    assert 99 <= first["quiet"].idle_seconds <= 160  # idle since its prepare
    node.script("idle", "--claim", busy)
    now[0] += 10
    node.sampler.sample_once()
    now[0] += 30
    later = {r.claim: r for r in node.sampler.sample_once().rows}
    assert later["busy"].idle_since == t0 + 10
    assert later["busy"].idle_seconds == 30


def test_a_pass_never_takes_the_node_lock(tmp_path: Path) -> None:
    node = Node(tmp_path)
    node.prepare(allocated_claim(devices=["gpu-0"]))
    done: list[int] = []
    with node.state._lock.held(1.0):  # a prepare in flight holds it
        t = threading.Thread(target=lambda: done.append(len(node.sampler.sample_once().rows)))
        t.start()
        t.join(timeout=5.0)
    assert done == [1]


def test_unprepared_claims_leave_the_rows_and_their_pods_are_forgotten(tmp_path: Path) -> None:
    node = Node(tmp_path)
    obj = reserved(allocated_claim(devices=["gpu-0"]), "p")
    uid = node.prepare(obj)
    assert len(node.sampler.sample_once().rows) == 1
    m = obj["metadata"]
    from kubelet_plugin.prepare.requests import ClaimRef

    assert node.state.unprepare([ClaimRef(m["namespace"], uid, m["name"])]) == {uid: ""}
    assert node.sampler.sample_once().rows == ()
    assert node.pods.pods(uid) == ("p",)  # noted recently: kept a while (a prepare may be in flight)
    node.mono[0] += PodNotes.RETAIN_S + 1
    node.sampler.sample_once()
    assert node.pods.pods(uid) == ()


def test_pods_noted_by_a_prepare_still_in_flight_survive_a_pass() -> None:
    now = [1000.0]
    notes = PodNotes(clock=lambda: now[0])
    notes.note(reserved(allocated_claim(uid="u-1"), "p"))  # read at prepare; not in the checkpoint yet
    notes.retain(set())  # a sampler pass in between
    assert notes.pods("u-1") == ("p",)
    now[0] += PodNotes.RETAIN_S + 1
    notes.retain(set())
    assert notes.pods("u-1") == ()


def test_the_snapshot_is_empty_before_the_first_pass(tmp_path: Path) -> None:
    node = Node(tmp_path)
    snap = node.sampler.snapshot()
    assert snap.rows == ()
    assert snap.taken_at == 0.0


class Broken:
    """A source that always fails."""

    def __init__(self) -> None:
        self.closed = 0

    def sample(self, targets: Sequence[UsageTarget], now: float) -> dict[DeviceKey, UsageSample]:
        raise RuntimeError("NVML went away")

    def describe(self) -> str:
        return "broken"

    def close(self) -> None:
        self.closed += 1


def entry(namespace: str, name: str, *devices: PreparedDevice, **kw: Any) -> ClaimEntry:
    return ClaimEntry(ClaimState.PREPARE_COMPLETED, namespace, name, devices, **kw)


def dev(name: str, **kw: Any) -> PreparedDevice:
    return PreparedDevice(("gpu",), "node-a", name, (), **kw)


def full_targets() -> dict[str, DeviceTarget]:
    return dict(node_publication(FakeGpuSource("h100x8", "node-a").gpus(), MigStrategy.NONE, None).targets)


def test_a_failing_source_makes_devices_unknown_not_idle_and_is_logged_once() -> None:
    src = Broken()
    claims = {"u1": entry("ns", "c", dev("gpu-0"))}
    sampler = UsageSampler(source=src, claims=lambda: claims, targets=full_targets(), prepared_at=lambda _u: 0.0)
    with capture_logs() as logs:
        for _ in range(3):
            rows = sampler.sample_once().rows
    assert [(r.utilization, r.idle_seconds, r.idle_since) for r in rows] == [(None, 0.0, None)]
    assert [e["event"] for e in logs if e["event"] == "usage_sample_failed"] == ["usage_sample_failed"]


def test_the_loop_samples_until_stopped_and_closes_its_source() -> None:
    src = Broken()
    sampler = UsageSampler(source=src, claims=dict, targets={}, interval_s=0.01)
    stop = threading.Event()
    t = threading.Thread(target=sampler.run, args=(stop,))
    t.start()
    time.sleep(0.05)
    stop.set()
    t.join(timeout=5.0)
    assert not t.is_alive()
    assert src.closed == 1
    assert sampler.snapshot().taken_at > 0


def test_unreadable_claims_keep_the_last_rows() -> None:
    calls = [0]

    def claims() -> dict[str, ClaimEntry]:
        calls[0] += 1
        if calls[0] > 1:
            raise OSError("gone")
        return {"u1": entry("ns", "c", dev("gpu-0"))}

    sampler = UsageSampler(source=Broken(), claims=claims, targets=full_targets())
    first = sampler.sample_once()
    assert sampler.sample_once() is first


def test_targets_mig_by_uuid_shared_gpus_admin_access_and_started_claims() -> None:
    gpus = FakeGpuSource("h100x8", "node-a").gpus()
    targets = node_publication(gpus, MigStrategy.DYNAMIC, make_mig_backend(fake=True, gpus=gpus)).targets
    rec = MigRecord(gpus[0].uuid, 19, "1g.10gb", 6, 1, gi_id=9, ci_id=0, mig_uuid="MIG-abc")
    claims = {
        "a": entry("ns", "mig", dev("gpu-0-mig-1g10gb-6", mig=rec)),
        "b": entry("ns", "uncarved", dev("gpu-0-mig-1g10gb-5")),  # no MIG UUID known
        "c": entry("ns", "share1", dev("gpu-3", share_id="s1")),
        "d": entry("ns", "whole-a", dev("gpu-4")),
        "e": entry("ns", "whole-b", dev("gpu-4")),  # two claims on one full GPU
        "f": entry("ns", "alone", dev("gpu-5"), dev("gpu-6", admin_access=True)),
        "g": ClaimEntry(ClaimState.PREPARE_STARTED, "ns", "started", (dev("gpu-7"),)),
    }
    got = {(p.target.claim_uid, p.target.device): p for p in prepared_targets(claims, targets)}
    assert set(got) == {
        ("a", "gpu-0-mig-1g10gb-6"),
        ("b", "gpu-0-mig-1g10gb-5"),
        ("c", "gpu-3"),
        ("d", "gpu-4"),
        ("e", "gpu-4"),
        ("f", "gpu-5"),
    }
    mig = got[("a", "gpu-0-mig-1g10gb-6")]
    assert (mig.target.mig_uuid, mig.target.gpu_uuid, mig.target.shared, mig.readable) == ("MIG-abc", gpus[0].uuid, False, True)
    assert got[("b", "gpu-0-mig-1g10gb-5")].readable is False
    assert got[("c", "gpu-3")].target.shared is True
    assert got[("d", "gpu-4")].target.shared is got[("e", "gpu-4")].target.shared is True
    assert got[("f", "gpu-5")].target.shared is False


def test_a_mig_device_without_a_uuid_is_never_read_as_its_parent_gpu(tmp_path: Path) -> None:
    gpus = FakeGpuSource("h100x8", "node-a").gpus()
    targets = node_publication(gpus, MigStrategy.DYNAMIC, make_mig_backend(fake=True, gpus=gpus)).targets
    asked: list[UsageTarget] = []

    class Recording(FakeUsageSource):
        def sample(self, targets: Sequence[UsageTarget], now: float) -> dict[DeviceKey, UsageSample]:
            asked.extend(targets)
            return super().sample(targets, now)

    claims = {"b": entry("ns", "uncarved", dev("gpu-0-mig-1g10gb-5"))}
    sampler = UsageSampler(source=Recording(tmp_path), claims=lambda: claims, targets=targets, prepared_at=lambda _u: 0.0)
    rows = sampler.sample_once().rows
    assert asked == []
    assert [(r.utilization, r.idle_seconds) for r in rows] == [(None, 0.0)]


@pytest.mark.parametrize(
    "obj",
    [
        None,
        [],
        {"metadata": {}},
        {"metadata": {"uid": 5}},
        {"metadata": {"uid": "u"}, "status": {"reservedFor": "p"}},
        {"metadata": {"uid": "u"}, "status": {"reservedFor": [None, {"resource": "pods"}, {"resource": "x", "name": "n"}]}},
        {"metadata": {"uid": "u"}, "status": {"reservedFor": [{"resource": "pods", "apiGroup": "other.io", "name": "n"}]}},
    ],
)
def test_pod_notes_ignore_malformed_claims(obj: Any) -> None:
    notes = PodNotes()
    notes.note(obj)
    assert notes.pods("u") == ()


def test_interval_must_be_positive() -> None:
    with pytest.raises(ValueError, match="interval"):
        UsageSampler(source=Broken(), claims=dict, targets={}, interval_s=0)


def test_pods_follow_the_claims_the_garbage_collection_pass_reads(tmp_path: Path) -> None:
    node = Node(tmp_path)
    obj = reserved(allocated_claim(devices=["gpu-0"]), "first")
    node.prepare(obj)
    reserved(obj, "second", "third")  # the same object the reader returns: the pods changed since prepare
    assert node.sampler.sample_once().rows[0].pods == ("first",)
    node.state.collect_garbage()  # reads every prepared claim (the claim exists: nothing is unprepared)
    assert node.sampler.sample_once().rows[0].pods == ("second", "third")


def test_fake_gpus_get_the_scripted_source_in_the_state_dir(tmp_path: Path) -> None:
    from kubelet_plugin.monitoring.usage import make_usage_source

    src = make_usage_source(fake=True, state_dir=tmp_path)
    assert src.describe() == f"fake-usage:{tmp_path / 'usage-script.json'}"
