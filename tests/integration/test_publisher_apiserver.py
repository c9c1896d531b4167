"""The ResourceSlice publisher against a real kube-apiserver (``testkit.cluster.LocalCluster``).

Aspects: a fake h100x8 node's pool is accepted with exact devices and pool fields; a deleted
slice comes back within seconds; steady state makes no writes; a device change bumps the
generation; a 200-device pool spans two slices; counter sets get their own slice; fields a
disabled feature gate drops are reported once, without endless rewrites; the
``dra-gpu-controller`` app publishes and exits 0 on SIGTERM; ``run`` stops promptly.

Needs the binaries from ``testkit/go/build.sh`` (etcd, kube-apiserver; ``make test`` builds them); without
them the tests fail with the message saying so, they are never skipped.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import structlog

from dra_driver.appkit.publisher import SlicePublisher
from dra_driver.core.driver import DEFAULT_DRIVER_NAME
from dra_driver.core.schema import Attr, DeviceSpec, node_devices
from dra_driver.kube.client import load_api_client
from dra_driver.kube.slices_api import KubeApiError, KubeSliceApi
from dra_driver.sources.fake import FakeGpuSource
from testkit.cluster import LocalCluster

DRIVER = DEFAULT_DRIVER_NAME
SLICES = "/apis/resource.k8s.io/v1/resourceslices"
REPO = Path(__file__).resolve().parents[2]


class CountingSliceApi(KubeSliceApi):
    """KubeSliceApi that counts its writes (create, update, delete)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.writes = 0
        self._count_lock = threading.Lock()

    def _count(self) -> None:
        with self._count_lock:
            self.writes += 1

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        self._count()
        return super().create(obj)

    def update(self, obj: dict[str, Any]) -> dict[str, Any]:
        self._count()
        return super().update(obj)

    def delete(self, name: str) -> None:
        self._count()
        super().delete(name)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """etcd + kube-apiserver for the whole module (each test uses its own node)."""
    with LocalCluster(log_dir=tmp_path_factory.mktemp("k8s-logs")) as c:
        yield c


@pytest.fixture
def node(cluster: LocalCluster, request: pytest.FixtureRequest) -> str:
    """A fresh Node named after the test."""
    name = str(request.node.name).removeprefix("test_").replace("_", "-")[:50].strip("-")
    cluster.add_node(name)
    return name


def slice_api(cluster: LocalCluster) -> CountingSliceApi:
    return CountingSliceApi(load_api_client(str(cluster.kubeconfig)))


def node_slices(cluster: LocalCluster, node: str) -> list[dict[str, Any]]:
    """The node's slices of this driver, by name, read without the publisher's code."""
    query = f"?fieldSelector=spec.driver%3D{DRIVER}%2Cspec.nodeName%3D{node}"
    items: list[dict[str, Any]] = cluster.api("GET", SLICES + query)["items"]
    return sorted(items, key=lambda o: o["metadata"]["name"])


def wait_for(what: str, cond: Callable[[], bool], timeout: float = 10.0) -> float:
    """Poll ``cond`` until true; return the seconds it took, fail naming ``what``."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if cond():
            return time.monotonic() - start
        time.sleep(0.05)
    pytest.fail(f"timed out after {timeout}s waiting for {what}")


def fake_devices(node: str, profile: str = "h100x8") -> list[DeviceSpec]:
    return node_devices(FakeGpuSource(profile, node).gpus())


def many_devices(n: int) -> list[DeviceSpec]:
    return [
        DeviceSpec(f"gpu-{i}", {"type": Attr("string", "gpu"), "index": Attr("int", i)}, {"memory": "80Gi"}) for i in range(n)
    ]


@contextmanager
def running(publisher: SlicePublisher) -> Iterator[SlicePublisher]:
    """Run the publisher in a thread; on exit check it stops within 2 s."""
    stop = threading.Event()
    thread = threading.Thread(target=publisher.run, args=(stop,), daemon=True)
    thread.start()
    try:
        assert publisher.synced.wait(15), f"publisher never synced: {publisher.last_error}"
        yield publisher
    finally:
        stopped_at = time.monotonic()
        stop.set()
        thread.join(5)
        assert not thread.is_alive(), "publisher did not stop"
        assert time.monotonic() - stopped_at < 2.0, "publisher took 2 s or more to stop"


def test_fake_h100x8_pool_is_accepted_with_exact_devices_and_pool_fields(cluster: LocalCluster, node: str) -> None:
    """One slice, 8 devices, pool = node at generation 1, owned by the Node, nothing dropped."""
    api = slice_api(cluster)
    publisher = SlicePublisher(api, DRIVER, node)
    publisher.set_devices(fake_devices(node))
    result = publisher.reconcile_once()

    assert result is not None
    assert 1 == result.created
    (obj,) = node_slices(cluster, node)
    spec = obj["spec"]
    assert DRIVER == spec["driver"]
    assert node == spec["nodeName"]
    assert {"name": node, "generation": 1, "resourceSliceCount": 1} == spec["pool"]
    assert [f"gpu-{i}" for i in range(8)] == [d["name"] for d in spec["devices"]]
    assert {"string": "NVIDIA H100 80GB HBM3"} == spec["devices"][0]["attributes"]["productName"]
    assert {"version": "9.0.0"} == spec["devices"][0]["attributes"]["cudaComputeCapability"]
    node_uid = cluster.api("GET", f"/api/v1/nodes/{node}")["metadata"]["uid"]
    assert [{"apiVersion": "v1", "kind": "Node", "name": node, "uid": node_uid, "controller": True}] == obj["metadata"][
        "ownerReferences"
    ]
    assert publisher.last_error is None
    assert publisher.synced.is_set()


def test_deleted_slice_comes_back_within_seconds(cluster: LocalCluster, node: str) -> None:
    """A slice deleted behind the publisher's back (a kubelet wipe) is re-created, next generation."""
    publisher = SlicePublisher(slice_api(cluster), DRIVER, node, resync_s=300)
    publisher.set_devices(fake_devices(node))
    with running(publisher):
        (obj,) = node_slices(cluster, node)
        cluster.api("DELETE", f"{SLICES}/{obj['metadata']['name']}")
        took = wait_for("the slice to come back", lambda: len(node_slices(cluster, node)) == 1, timeout=5)
        (back,) = node_slices(cluster, node)
    assert took < 3.0
    assert obj["metadata"]["uid"] != back["metadata"]["uid"]
    assert 2 == back["spec"]["pool"]["generation"]
    assert 8 == len(back["spec"]["devices"])


def test_steady_state_makes_no_writes(cluster: LocalCluster, node: str) -> None:
    """With resyncs every 0.5 s and the same devices set again, nothing is written after sync."""
    api = slice_api(cluster)
    publisher = SlicePublisher(api, DRIVER, node, resync_s=0.5)
    publisher.set_devices(fake_devices(node))
    with running(publisher):
        wait_for("the first write", lambda: api.writes >= 1)
        time.sleep(0.5)
        after_sync = api.writes
        publisher.set_devices(fake_devices(node))
        time.sleep(3.0)
        assert after_sync == api.writes
    assert 1 == after_sync
    assert 1 == node_slices(cluster, node)[0]["spec"]["pool"]["generation"]


def test_device_change_bumps_generation(cluster: LocalCluster, node: str) -> None:
    """New devices are published with generation + 1 on the running publisher."""
    publisher = SlicePublisher(slice_api(cluster), DRIVER, node)
    publisher.set_devices(fake_devices(node))
    with running(publisher):
        publisher.set_devices(fake_devices(node)[:4])

        def changed() -> bool:
            (obj,) = node_slices(cluster, node)
            return bool(obj["spec"]["pool"]["generation"] == 2)

        wait_for("generation 2", changed, timeout=5)
        (obj,) = node_slices(cluster, node)
    assert [f"gpu-{i}" for i in range(4)] == [d["name"] for d in obj["spec"]["devices"]]


def test_200_device_pool_spans_two_slices(cluster: LocalCluster, node: str) -> None:
    """128 + 72 devices, both slices at one generation with resourceSliceCount 2."""
    publisher = SlicePublisher(slice_api(cluster), DRIVER, node)
    publisher.set_devices(many_devices(200))
    publisher.reconcile_once()
    objs = node_slices(cluster, node)
    assert [128, 72] == [len(o["spec"]["devices"]) for o in objs]
    assert [{"name": node, "generation": 1, "resourceSliceCount": 2}] * 2 == [o["spec"]["pool"] for o in objs]
    result = publisher.reconcile_once()
    assert result is not None
    assert 0 == result.writes


def test_counter_sets_are_published_in_their_own_slice(cluster: LocalCluster, node: str) -> None:
    """Partitionable devices: the counter set slice and the device slice form one pool."""
    counters = [{"name": "gpu-0-counters", "counters": {"memory": {"value": "80Gi"}}}]
    consumes = {"consumesCounters": [{"counterSet": "gpu-0-counters", "counters": {"memory": {"value": "40Gi"}}}]}
    devices = [DeviceSpec(f"gpu-0-half-{i}", {"type": Attr("string", "partition")}, {}, dict(consumes)) for i in range(2)]
    publisher = SlicePublisher(slice_api(cluster), DRIVER, node)
    publisher.set_devices(devices, counters)
    publisher.reconcile_once()
    objs = node_slices(cluster, node)
    assert [["gpu-0-counters"], []] == [[c["name"] for c in o["spec"].get("sharedCounters", [])] for o in objs]
    assert [0, 2] == [len(o["spec"].get("devices", [])) for o in objs]
    assert "consumesCounters" in objs[1]["spec"]["devices"][0]
    assert publisher.last_error is None


def test_dropped_fields_are_reported_once_without_rewrites(tmp_path: Path) -> None:
    """With DRADeviceTaints off the server drops taints: logged as an error, not rewritten forever."""
    taint = {"taints": [{"key": "dra-gpu.dev/unhealthy", "value": "xid-79", "effect": "NoSchedule"}]}
    devices = [DeviceSpec("gpu-0", {"type": Attr("string", "gpu")}, {}, taint)]
    with LocalCluster(feature_gates={"DRADeviceTaints": False, "DRADeviceTaintRules": False}, log_dir=tmp_path) as c:
        c.add_node("tainted")
        api = slice_api(c)
        publisher = SlicePublisher(api, DRIVER, "tainted")
        publisher.set_devices(devices)
        with structlog.testing.capture_logs() as logs:
            publisher.reconcile_once()
            second = publisher.reconcile_once()
    dropped = [e for e in logs if e["event"] == "slice_fields_dropped"]
    assert 1 == len(dropped)
    assert ["spec.devices[0].taints"] == dropped[0]["fields"]
    assert "feature gate" in dropped[0]["likely_cause"]
    assert "error" == dropped[0]["log_level"]
    assert second is not None
    assert 0 == second.writes
    assert 1 == api.writes
    assert publisher.last_error is not None
    assert "spec.devices[0].taints" in publisher.last_error


class OldServerSliceApi(CountingSliceApi):
    """The real API server, claiming to be Kubernetes 1.34."""

    def server_minor_version(self) -> int:
        return 34


def test_counters_on_a_pre_1_35_server_are_refused(cluster: LocalCluster, node: str) -> None:
    """Counter sets need their own slices (1.35+): on 1.34 nothing is written and the error says why."""
    counters = [{"name": "gpu-0-counters", "counters": {"memory": {"value": "80Gi"}}}]
    api = OldServerSliceApi(load_api_client(str(cluster.kubeconfig)))
    publisher = SlicePublisher(api, DRIVER, node)
    publisher.set_devices(many_devices(1), counters)
    with structlog.testing.capture_logs() as logs:
        assert publisher.reconcile_once() is None
    assert 0 == api.writes
    assert [] == node_slices(cluster, node)
    assert publisher.last_error is not None
    assert "shared counters, which need Kubernetes >= 1.35 (the API server is 1.34)" in publisher.last_error
    assert ["slice_pool_refused"] == [e["event"] for e in logs if e["log_level"] == "error"]
    assert not publisher.synced.is_set()


def test_a_server_dropping_counters_gets_no_slice_of_the_pool(tmp_path: Path) -> None:
    """DRAPartitionableDevices off (1.34/1.35 defaults): the server drops the counters, so the pool
    is withdrawn instead of left published with overlapping placements the scheduler could both
    hand out; the refusal is reported once (log, last_error, on_refusal) and nothing is rewritten."""
    counters = [{"name": "gpu-0-counters", "counters": {"memory": {"value": "80Gi"}}}]
    consumes = {"consumesCounters": [{"counterSet": "gpu-0-counters", "counters": {"memory": {"value": "40Gi"}}}]}
    devices = [DeviceSpec(f"gpu-0-half-{i}", {"type": Attr("string", "partition")}, {}, dict(consumes)) for i in range(2)]
    refusals: list[str] = []
    off = {g: False for g in ("DRAPartitionableDevices", "DRAPartitionableDevicesType", "DRADeviceCompatibilityGroups")}
    with LocalCluster(feature_gates=off, log_dir=tmp_path) as c:  # and the 1.37 alpha gates that need it
        c.add_node("no-counters")
        api = slice_api(c)
        publisher = SlicePublisher(api, DRIVER, "no-counters", on_refusal=refusals.append)
        publisher.set_devices(devices, counters)
        with structlog.testing.capture_logs() as logs:
            assert publisher.reconcile_once() is None
            writes = api.writes
            assert publisher.reconcile_once() is None
        left = node_slices(c, "no-counters")
    assert [] == left
    assert writes == api.writes, "a refused pool is not rewritten on the next pass"
    assert 1 == len(refusals)
    assert "dropped spec.sharedCounters" in refusals[0] and "DRAPartitionableDevices" in refusals[0], refusals[0]
    assert publisher.last_error == refusals[0]
    assert 1 == sum(1 for e in logs if e["event"] == "slice_pool_refused")


class FlakySliceApi(CountingSliceApi):
    """Fails its first list calls (HTTP 500 twice, then a bug-like RuntimeError), then works."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.failures: list[BaseException] = [
            KubeApiError(500, "InternalError", "etcd is sad"),
            KubeApiError(500, "InternalError", "etcd is still sad"),
            RuntimeError("unexpected"),
        ]

    def list(self, driver: str, node: str) -> tuple[list[dict[str, Any]], str]:
        if self.failures:
            raise self.failures.pop(0)
        return super().list(driver, node)


def test_api_errors_are_retried_with_backoff_and_never_kill_the_loop(cluster: LocalCluster, node: str) -> None:
    """Three failing passes are logged with growing delays; the fourth publishes."""
    api = FlakySliceApi(load_api_client(str(cluster.kubeconfig)))
    publisher = SlicePublisher(api, DRIVER, node, backoff_initial_s=0.2, backoff_max_s=0.4)
    publisher.set_devices(many_devices(2))
    with structlog.testing.capture_logs() as logs, running(publisher):
        pass
    failed = [e for e in logs if e["event"] == "slice_reconcile_failed"]
    assert [500, 500, None] == [e["status"] for e in failed]
    assert ["KubeApiError", "KubeApiError", "RuntimeError"] == [e["error_type"] for e in failed]
    delays = [e["retry_in_s"] for e in failed]
    assert 0.1 <= delays[0] <= 0.2
    assert 0.2 <= delays[1] <= 0.4
    assert 0.2 <= delays[2] <= 0.4  # capped
    assert 1 == len(node_slices(cluster, node))
    assert publisher.last_error is None


def test_controller_app_publishes_and_exits_zero_on_sigterm(cluster: LocalCluster, node: str) -> None:
    """``dra-gpu-controller --fake-gpus h100x8`` publishes the node's pool and stops cleanly."""
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "NODE_NAME": node,
        "FAKE_GPUS": "l4x4",
        "KUBECONFIG": str(cluster.kubeconfig),
        "METRICS_PORT": "0",  # any free port: not the host's 9421, which another run may hold
        "METRICS_ADDRESS": "127.0.0.1",
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "controller.main", "--log-level", "debug"],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for("the controller's slice", lambda: len(node_slices(cluster, node)) == 1, timeout=20)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=5)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert 0 == proc.returncode, err[-2000:]
    assert '"event": "slice_created"' in err
    (obj,) = node_slices(cluster, node)
    assert {"string": "NVIDIA L4"} == obj["spec"]["devices"][0]["attributes"]["productName"]


def test_a_server_dropping_allow_multiple_allocations_gets_no_slice_and_no_rewrite_later(tmp_path: Path) -> None:
    """DRAConsumableCapacity off: shared GPUs would be handed out whole, so the pool is refused, and the
    passes after the refusal write nothing at all (no create-then-withdraw on every resync)."""
    shared = {"allowMultipleAllocations": True}
    devices = [DeviceSpec(f"gpu-{i}", {"type": Attr("string", "gpu")}, {"memory": "80Gi"}, dict(shared)) for i in range(2)]
    refusals: list[str] = []
    off = {"DRAConsumableCapacity": False, "DRAFractionalCapacityRange": False}  # 1.37: the second needs the first
    with LocalCluster(feature_gates=off, log_dir=tmp_path) as c:
        c.add_node("no-sharing")
        api = slice_api(c)
        publisher = SlicePublisher(api, DRIVER, "no-sharing", on_refusal=refusals.append)
        publisher.set_devices(devices)
        assert publisher.reconcile_once() is None
        writes = api.writes  # the create that showed the drop, and the withdrawal
        for _ in range(3):
            assert publisher.reconcile_once() is None
        left = node_slices(c, "no-sharing")
    assert [] == left
    assert writes == api.writes, "nothing is written once the pool is refused"
    assert 1 == len(refusals)
    assert "allowMultipleAllocations" in refusals[0] and "DRAConsumableCapacity" in refusals[0], refusals[0]
