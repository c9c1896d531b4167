"""GPU sharing end to end: the real scheduler and kubelet, our plugin, the sharing simulator's records.

Two real kubelets (fake container runtime), each with a dra-gpu plugin:

* node-t: 8 fake H100s, GPUs allocated whole; sharing is asked for in a claim's GpuConfig
  (demo/shared-claim.yaml: time-slicing, one claim referenced by two pods; demo/mps-claim.yaml:
  one MPS daemon for the claim with its limits, two containers);
* node-s: one fake 80Gi A100 with ``--sharing consumable``: published with
  ``allowMultipleAllocations`` and request policies on memory and computeShare; the chart's
  ``shared.`` DeviceClass (installed with ``sharing.consumable=true``) selects it, and
  demo/consumable-20gi.yaml's claims from two namespaces each get 20Gi of it.

Each test applies demo/ manifests as a user would and checks what must agree: the claim's
allocation (what the scheduler chose: device, shareID, consumedCapacity), the sharing
simulator's state (what the plugin applied at NodePrepareResources: the time slice of the
allocated GPU, the MPS daemon with its limits), the CDI spec (client env, MPS pipe and shm
mounts) and the fake runtime's records (the CDI ids the kubelet passed to each container).
Deleting the pods makes the kubelet unprepare: no time slice, no MPS daemon, no CDI spec is left.
The time-slicing and MPS pods are pinned to node-t with a nodeSelector: on node-s the plain
class also matches the shareable GPU (a claim asking for no capacity gets all of it as one
share) and a share does not take a sharing config; the last test shows both.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from dra_driver.cli.main import inventory_slices
from dra_driver.core.cdi import cdi_device_id, env_prefix
from dra_driver.core.sharing import CONTAINER_MPS_PIPE_DIR, claim_daemon_id, mps_dirs
from dra_driver.sharing_backends.sim import STATE_FILE, read_sharing_state
from e2e.test_kubelet_node import events, get_or_none, resolve_cdi, wait_until
from e2e.test_mig_scheduling import pod_using
from testkit.claimdata import DRIVER
from testkit.cluster import LocalCluster
from testkit.helm_cli import Helm
from testkit.manifests import apply, load
from testkit.node import KubeletNode
from testkit.plugin_process import PluginProcess

DEMO = Path(__file__).resolve().parents[1] / "demo"
NODE_T = "node-t"  # 8x H100: time-slicing and MPS through a claim's config
NODE_S = "node-s"  # 1x A100 80GB, --sharing consumable
NS_A, NS_B = "dra-demo", "dra-demo-b"
RESOURCE = "/apis/resource.k8s.io/v1"
TIMEOUT = 90.0
GIB = 1 << 30
CONTAINER_SHM = "/dev/shm"


def pods_path(ns: str) -> str:
    return f"/api/v1/namespaces/{ns}/pods"


def claims_path(ns: str) -> str:
    return f"{RESOURCE}/namespaces/{ns}/resourceclaims"


@dataclass
class SharingCluster:
    """The cluster, its two kubelet nodes and their plugins."""

    c: LocalCluster
    nodes: dict[str, KubeletNode]
    plugins: dict[str, PluginProcess]

    def diagnostics(self) -> str:
        out = []
        for ns in (NS_A, NS_B):
            pods = self.c.api("GET", pods_path(ns))["items"]
            out.append(f"pods in {ns}: {json.dumps({p['metadata']['name']: p.get('status') for p in pods})[:2500]}")
        for name, plugin in self.plugins.items():
            if plugin.log.exists():
                tail = "\n".join(plugin.log.read_text().splitlines()[-25:])
                out.append(f"--- {name}: plugin log {plugin.log} (last 25 lines):\n{tail}")
            out.append(f"--- {name}: sharing state {self.sharing_state(name)}")
            node = self.nodes[name]
            out.append(f"--- {name}: runtime records {json.dumps(node.cdi_records())[-1500:]}\n{node.diagnostics(20)}")
        out.append(f"(control-plane logs in {self.c.log_dir})")
        return "\n".join(out)

    def sharing_state(self, node: str) -> dict[str, Any]:
        """What the node's sharing simulator recorded: ``timeSlices`` (GPU UUID → interval), ``mps`` (id → daemon)."""
        recorded = read_sharing_state(self.plugins[node].plugin_dir / "fake-gpus" / STATE_FILE)
        return {k: recorded[k] for k in ("timeSlices", "mps")}  # what is applied (the records' boot id aside)

    def empty(self, path: str) -> bool:
        """True when the collection at ``path`` lists nothing."""
        return not self.c.api("GET", path)["items"]

    def undone(self, node: str) -> bool:
        """True when the node's plugin has no CDI spec left and its simulator records no sharing."""
        return not self.plugins[node].cdi_files() and self.sharing_state(node) == {"timeSlices": {}, "mps": {}}

    def publishes(self, node: str, expected: dict[str, dict[str, Any]]) -> bool:
        return self.published(node) == expected

    def mps_root(self, node: str) -> Path:
        return self.plugins[node].plugin_dir / "mps"

    def published(self, node: str) -> dict[str, dict[str, Any]]:
        slices = self.c.api("GET", f"{RESOURCE}/resourceslices?fieldSelector=spec.nodeName={node}")["items"]
        return {d["name"]: d for s in slices if s["spec"]["driver"] == DRIVER for d in s["spec"].get("devices", [])}

    def gpu_uuid(self, node: str, device: str) -> str:
        return str(self.published(node)[device]["attributes"]["uuid"]["string"])

    def wait_running(self, ns: str, name: str) -> dict[str, Any]:
        def running() -> dict[str, Any] | None:
            pod = self.c.api("GET", f"{pods_path(ns)}/{name}")
            return pod if pod.get("status", {}).get("phase") == "Running" else None

        return wait_until(f"pod {ns}/{name} to be Running", running, self.diagnostics, TIMEOUT)

    def claim_of(self, pod: dict[str, Any]) -> dict[str, Any]:
        """The pod's (single) claim, allocated."""
        ns = pod["metadata"]["namespace"]
        (ref,) = pod["spec"]["resourceClaims"]
        name = ref.get("resourceClaimName")
        if name is None:  # made from a template: the claim's name is in the pod's status
            (status,) = pod["status"]["resourceClaimStatuses"]
            name = status["resourceClaimName"]
        claim = self.c.api("GET", f"{claims_path(ns)}/{name}")
        assert (claim.get("status") or {}).get("allocation"), f"claim of {pod['metadata']['name']} not allocated: {claim}"
        return claim

    def runtime_got(self, node: str, pod: dict[str, Any]) -> dict[str, list[str]]:
        """Container name → the distinct CDI ids the kubelet passed to the runtime for it.

        Distinct: when two pods of one claim start together, the kubelet (1.36) calls NodePrepareResources once per
        pod before either marks the claim prepared and appends the answer's devices to its cache entry each time
        (``ClaimInfo.addDevice``), so both containers get the claim's id twice. Our answer lists it once.
        """
        uid = pod["metadata"]["uid"]
        records = [r for r in self.nodes[node].cdi_records() if r["pod_uid"] == uid]
        assert records, f"the runtime saw no CreateContainer for pod {pod['metadata']['name']}\n{self.diagnostics()}"
        return {r["container"]: sorted(set(r["cdi_devices"])) for r in records}

    def cdi_entry(self, node: str, cdi_id: str) -> dict[str, Any]:
        """The CDI device entry the runtime would resolve ``cdi_id`` to, in this node's plugin's specs."""
        _, entry = resolve_cdi(self.plugins[node].cdi, cdi_id)
        return entry

    def pending_reason(self, ns: str, name: str) -> str:
        """The scheduler's message once it has given up on the pod for now."""

        def unschedulable() -> str | None:
            pod = self.c.api("GET", f"{pods_path(ns)}/{name}")
            for cond in pod.get("status", {}).get("conditions", []):
                if cond["type"] == "PodScheduled" and cond["status"] == "False" and cond.get("message"):
                    return str(cond["message"])
            return None

        return wait_until(f"the scheduler to report why {ns}/{name} is pending", unschedulable, self.diagnostics, TIMEOUT)


def env_of(entry: dict[str, Any]) -> dict[str, str]:
    return dict(e.split("=", 1) for e in entry["containerEdits"]["env"])


def mounts_of(entry: dict[str, Any]) -> dict[str, str]:
    """Container path → host path of a CDI entry's mounts."""
    return {m["containerPath"]: m["hostPath"] for m in entry["containerEdits"].get("mounts", [])}


def pinned_to(docs: list[dict[str, Any]], node: str) -> list[dict[str, Any]]:
    """The manifests with their pods pinned to ``node`` (as a user would with a nodeSelector)."""
    for d in docs:
        if d["kind"] == "Pod":
            d["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
    return docs


@pytest.fixture(scope="module")
def sc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharingCluster]:
    tmp = tmp_path_factory.mktemp("sharing")
    with (
        LocalCluster(with_scheduler=True, with_controller_manager=True, log_dir=tmp / "k8s-logs") as c,
        KubeletNode(c, NODE_T, tmp / NODE_T) as node_t,
        KubeletNode(c, NODE_S, tmp / NODE_S) as node_s,
    ):
        assert c.feature_gates.get("DRAConsumableCapacity") is True, c.feature_gates
        nodes = {NODE_T: node_t, NODE_S: node_s}
        runs = {NODE_T: ("h100x8", ()), NODE_S: ("a100-80x1", ("--sharing", "consumable"))}
        plugins = {
            name: PluginProcess(
                tmp / f"plugin-{name}",
                kubeconfig=c.kubeconfig,
                node=name,
                profile=profile,
                publish=True,
                registrar_dir=nodes[name].registrar_dir,
                plugins_dir=nodes[name].plugins_dir,
                # No periodic GC pass: every unprepare seen here comes from the kubelet's DRA manager.
                extra_args=(*extra, "--gc-interval", "0"),
            )
            for name, (profile, extra) in runs.items()
        }
        s = SharingCluster(c, nodes, plugins)
        try:
            for name, plugin in plugins.items():
                plugin.start()
                wait_until(
                    f"{name}'s kubelet to register the plugin", partial(events, plugin, "plugin_registered"), s.diagnostics
                )
            # The API server stored what the plugins publish, requestPolicy and allowMultipleAllocations included:
            # exactly what `dra-gpu inventory` prints for the same flags.
            for name, (profile, extra) in runs.items():
                expected = {
                    d["name"]: d
                    for sl in inventory_slices(fake_gpus=profile, node_name=name, driver=DRIVER, consumable=bool(extra))
                    for d in sl["spec"]["devices"]
                }
                wait_until(f"{name}'s devices to be published", partial(s.publishes, name, expected), s.diagnostics)
            Helm.built(tmp / "helm-home").install(c, "kubeletPlugin.enabled=false", "sharing.consumable=true")
            apply(c, load(DEMO / "namespace.yaml"))
            for ns in (NS_A, NS_B):
                sa = f"/api/v1/namespaces/{ns}/serviceaccounts/default"
                wait_until(f"the default ServiceAccount of {ns}", partial(get_or_none, c, sa), s.diagnostics)
            yield s
            for node in nodes.values():
                node.check_alive()
        finally:
            for plugin in plugins.values():
                plugin.stop()


@pytest.fixture(autouse=True)
def clean_slate(sc: SharingCluster) -> Iterator[None]:
    """Each test ends (normally in the test itself) with nothing prepared; this is the backstop when one fails."""
    yield
    delete_all_and_check_undone(sc)


def delete_all_and_check_undone(s: SharingCluster) -> None:
    """Delete every pod, claim and template: the kubelet unprepares, and unprepare undoes every sharing setting."""
    for ns in (NS_A, NS_B):
        s.c.api("DELETE", pods_path(ns))
        s.c.api("DELETE", claims_path(ns))
        s.c.api("DELETE", f"{RESOURCE}/namespaces/{ns}/resourceclaimtemplates")
    for ns in (NS_A, NS_B):
        wait_until(f"the pods of {ns} to be gone", partial(s.empty, pods_path(ns)), s.diagnostics)
        wait_until(f"the claims of {ns} to be gone", partial(s.empty, claims_path(ns)), s.diagnostics)
    for name in s.plugins:
        wait_until(f"{name}'s CDI specs and sharing records to be gone", partial(s.undone, name), s.diagnostics)
        root = s.mps_root(name)
        assert not root.exists() or not list(root.iterdir()), f"MPS dirs left on {name}: {list(root.iterdir())}"


def test_two_pods_share_a_time_sliced_claim_and_its_gpu_gets_the_interval(sc: SharingCluster) -> None:
    """demo/shared-claim.yaml: one claim, two pods, both Running with the same GPU; its time slice is Long until unprepare."""
    s = sc
    apply(s.c, pinned_to(load(DEMO / "shared-claim.yaml"), NODE_T))
    pods = [s.wait_running(NS_A, name) for name in ("shared-1", "shared-2")]
    claim = s.claim_of(pods[0])
    assert claim["metadata"]["name"] == "shared-gpu" == s.claim_of(pods[1])["metadata"]["name"]
    assert {"shared-1", "shared-2"} == {r["name"] for r in claim["status"]["reservedFor"]}
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    assert (result["pool"], result.get("shareID")) == (NODE_T, None)  # a whole GPU, shared by referencing one claim
    device, uuid = result["device"], s.gpu_uuid(NODE_T, result["device"])

    assert {"timeSlices": {uuid: "Long"}, "mps": {}} == s.sharing_state(NODE_T)
    assert {"timeSlices": {}, "mps": {}} == s.sharing_state(NODE_S)
    cdi_id = cdi_device_id(DRIVER, claim["metadata"]["uid"], device)
    for pod in pods:
        assert {"app": [cdi_id]} == s.runtime_got(NODE_T, pod)
    env = env_of(s.cdi_entry(NODE_T, cdi_id))
    prefix = env_prefix(device)
    assert (env[f"{prefix}_UUID"], env[f"{prefix}_SHARING_STRATEGY"], env[f"{prefix}_TIMESLICE_INTERVAL"]) == (
        uuid,
        "TimeSlicing",
        "Long",
    )
    assert "CUDA_MPS_PIPE_DIRECTORY" not in env

    # One pod gone: the claim is still in use, so the GPU keeps its time slice.
    s.c.api("DELETE", f"{pods_path(NS_A)}/shared-1")
    wait_until("shared-1 to be gone", lambda: get_or_none(s.c, f"{pods_path(NS_A)}/shared-1") is None, s.diagnostics)
    assert {uuid: "Long"} == s.sharing_state(NODE_T)["timeSlices"]

    delete_all_and_check_undone(s)


def test_mps_claim_gets_a_daemon_with_its_limits_and_both_containers_its_pipe_dir(sc: SharingCluster) -> None:
    """demo/mps-claim.yaml: one MPS daemon for the claim (50% of the SMs, 10Gi pinned per client), mounted into both
    containers."""
    s = sc
    apply(s.c, pinned_to(load(DEMO / "mps-claim.yaml"), NODE_T))
    pod = s.wait_running(NS_A, "mps")
    claim = s.claim_of(pod)
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    assert (result["pool"], result.get("shareID")) == (NODE_T, None)
    device, uuid, claim_uid = result["device"], s.gpu_uuid(NODE_T, result["device"]), claim["metadata"]["uid"]

    daemon_id = claim_daemon_id(claim_uid, [device])
    expected_daemon: dict[str, Any] = {
        "id": daemon_id,
        "gpuUUIDs": [uuid],
        "exclusiveGPUs": [uuid],  # a full GPU: exclusive-process compute mode while the daemon runs
        "activeThreadPercentage": 50,
        "pinnedMemoryLimits": {uuid: 10 * GIB},
        "shared": False,
    }
    assert {"timeSlices": {}, "mps": {daemon_id: expected_daemon}} == s.sharing_state(NODE_T)
    dirs = mps_dirs(str(s.mps_root(NODE_T)), daemon_id)
    assert Path(dirs.pipe).is_dir() and Path(dirs.shm).is_dir()

    cdi_id = cdi_device_id(DRIVER, claim_uid, device)
    assert {"app-1": [cdi_id], "app-2": [cdi_id]} == s.runtime_got(NODE_T, pod)
    entry = s.cdi_entry(NODE_T, cdi_id)
    assert {CONTAINER_MPS_PIPE_DIR: dirs.pipe, CONTAINER_SHM: dirs.shm} == mounts_of(entry)
    env = env_of(entry)
    assert env["CUDA_MPS_PIPE_DIRECTORY"] == CONTAINER_MPS_PIPE_DIR
    assert env[f"{env_prefix(device)}_SHARING_STRATEGY"] == "MPS"
    # The limits are the daemon's defaults, not per-client overrides.
    assert "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT" not in env and "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE" not in env

    delete_all_and_check_undone(s)


FOUR = ((NS_A, "share-a1"), (NS_A, "share-a2"), (NS_B, "share-b1"), (NS_B, "share-b2"))


def assert_share(s: SharingCluster, pod: dict[str, Any]) -> str:
    """The pod's claim got 20Gi of node-s's GPU as a share, and its container that share as MPS client limits;
    returns the share id."""
    claim = s.claim_of(pod)
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    assert (result["pool"], result["device"]) == (NODE_S, "gpu-0"), result
    share_id = result.get("shareID")
    assert share_id, f"no shareID in {result}"
    assert {"memory": "20Gi", "computeShare": "0"} == result["consumedCapacity"], result
    uuid = s.gpu_uuid(NODE_S, "gpu-0")
    cdi_id = cdi_device_id(DRIVER, claim["metadata"]["uid"], "gpu-0", share_id)
    assert {"app": [cdi_id]} == s.runtime_got(NODE_S, pod)
    entry = s.cdi_entry(NODE_S, cdi_id)
    env = env_of(entry)
    prefix = env_prefix(f"gpu-0-{share_id}")
    assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == f"{uuid}=20480M"
    assert env["CUDA_MPS_PIPE_DIRECTORY"] == CONTAINER_MPS_PIPE_DIR
    assert "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE" not in env  # computeShare 0: no cap
    assert (env[f"{prefix}_SHARING_STRATEGY"], env[f"{prefix}_MEMORY_LIMIT"]) == ("ConsumableCapacity", str(20 * GIB))
    dirs = mps_dirs(str(s.mps_root(NODE_S)), "gpu-0-shared")
    assert {CONTAINER_MPS_PIPE_DIR: dirs.pipe, CONTAINER_SHM: dirs.shm} == mounts_of(entry)
    return str(share_id)


def test_four_claims_from_two_namespaces_each_get_20gi_of_one_gpu_and_a_fifth_waits(sc: SharingCluster) -> None:
    """demo/consumable-20gi.yaml: four 20Gi shares of node-s's one 80Gi GPU under one MPS daemon; a fifth 20Gi claim
    stays Pending (the scheduler's words) until one of the four is deleted, then takes its place."""
    s = sc
    apply(s.c, load(DEMO / "consumable-20gi.yaml"))
    pods = {name: s.wait_running(ns, name) for ns, name in FOUR}
    shares = {name: assert_share(s, pod) for name, pod in pods.items()}
    assert len(set(shares.values())) == 4, shares
    assert {ns for ns, _ in FOUR} == {p["metadata"]["namespace"] for p in pods.values()}
    uuid = s.gpu_uuid(NODE_S, "gpu-0")
    gpu_daemon: dict[str, Any] = {
        "id": "gpu-0-shared",
        "gpuUUIDs": [uuid],
        "exclusiveGPUs": [uuid],
        "activeThreadPercentage": None,
        "pinnedMemoryLimits": {},
        "shared": True,
    }
    assert {"timeSlices": {}, "mps": {"gpu-0-shared": gpu_daemon}} == s.sharing_state(NODE_S)

    apply(s.c, [pod_using("share-a3", "gpu-20gi")])  # the namespace's template: a fifth 20Gi claim
    reason = s.pending_reason(NS_A, "share-a3")
    # "0/2 nodes are available: 2 cannot allocate all claims. still not schedulable, preemption: ..." (node-t has no
    # shareable GPU, node-s's has 0Gi left)
    assert reason.startswith("0/2 nodes are available: 2 cannot allocate all claims."), reason
    fifth = s.c.api("GET", f"{pods_path(NS_A)}/share-a3")
    assert not fifth["spec"].get("nodeName")

    s.c.api("DELETE", f"{pods_path(NS_B)}/share-b1")
    share = assert_share(s, s.wait_running(NS_A, "share-a3"))
    assert share != shares["share-b1"]
    assert {"gpu-0-shared": gpu_daemon} == s.sharing_state(NODE_S)["mps"]  # the GPU's daemon served throughout

    delete_all_and_check_undone(s)


def test_everything_at_once_then_deleting_every_pod_undoes_all_sharing(sc: SharingCluster) -> None:
    """Time slice, MPS daemon and four shares prepared side by side; after the pods and claims go, nothing is left:
    no time slice, no MPS daemon or its directories, no CDI spec, on either node."""
    s = sc
    apply(s.c, pinned_to(load(DEMO / "shared-claim.yaml") + load(DEMO / "mps-claim.yaml"), NODE_T))
    apply(s.c, load(DEMO / "consumable-20gi.yaml"))
    for ns, name in ((NS_A, "shared-1"), (NS_A, "shared-2"), (NS_A, "mps"), *FOUR):
        s.wait_running(ns, name)
    on_t, on_s = s.sharing_state(NODE_T), s.sharing_state(NODE_S)
    assert (len(on_t["timeSlices"]), len(on_t["mps"])) == (1, 1), on_t
    assert (on_s["timeSlices"], list(on_s["mps"])) == ({}, ["gpu-0-shared"]), on_s
    assert len(s.plugins[NODE_T].cdi_files()) == 2 and len(s.plugins[NODE_S].cdi_files()) == 4

    delete_all_and_check_undone(s)


def test_on_a_consumable_node_a_plain_claim_takes_the_whole_gpu_as_one_share_and_a_sharing_config_is_refused(
    sc: SharingCluster,
) -> None:
    """A claim of the plain gpu.<driver> class that asks for no capacity gets the request policy's default, all 80Gi,
    as a share (under the GPU's MPS daemon); a time-slicing claim pinned to that node is refused at prepare with the
    plugin's message, in the pod's events."""
    s = sc
    plain = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "one-gpu", "namespace": NS_A},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": DRIVER}}]}}},
    }
    apply(s.c, [plain, *pinned_to([pod_using("whole", "one-gpu")], NODE_S)])
    claim = s.claim_of(s.wait_running(NS_A, "whole"))
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    assert (result["pool"], result["device"], result["consumedCapacity"]) == (
        NODE_S,
        "gpu-0",
        {"memory": "80Gi", "computeShare": "0"},
    )
    assert result.get("shareID"), result
    env = env_of(s.cdi_entry(NODE_S, cdi_device_id(DRIVER, claim["metadata"]["uid"], "gpu-0", result["shareID"])))
    assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == f"{s.gpu_uuid(NODE_S, 'gpu-0')}=81920M"
    delete_all_and_check_undone(s)

    apply(s.c, pinned_to(load(DEMO / "shared-claim.yaml"), NODE_S))

    def refused() -> str | None:
        evs = s.c.api("GET", f"/api/v1/namespaces/{NS_A}/events?fieldSelector=involvedObject.name=shared-1")["items"]
        return next((e["message"] for e in evs if "does not apply to a share" in e.get("message", "")), None)

    message = wait_until("the kubelet to report the refused prepare of shared-1", refused, s.diagnostics)
    assert "a TimeSlicing config does not apply to a share of a GPU shared by capacity" in message, message
    assert s.c.api("GET", f"{pods_path(NS_A)}/shared-1")["status"].get("phase") == "Pending"
    assert {"timeSlices": {}, "mps": {}} == s.sharing_state(NODE_S)  # nothing applied for the refused claim

    delete_all_and_check_undone(s)
