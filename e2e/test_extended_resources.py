"""Pods written for the NVIDIA device plugin run unchanged on dra-gpu GPUs; team quotas on GPUs hold.

One real kubelet (fake container runtime) as node-x, whose dra-gpu plugin runs 8 fake H100s with
``--mig dynamic`` (MIG simulator, zero latency), under the real scheduler and controller-manager.
``helm install`` of the chart (``mig.strategy=dynamic``, no DaemonSet: the plugin runs as a
process) creates the DeviceClasses exactly as users get them: the chart reads the server's version
and, from 1.36 on, maps ``nvidia.com/gpu`` to the full-GPU class and ``nvidia.com/mig-<profile>``
to one class per MIG profile (DeviceClass ``extendedResourceName``, KEP-5004).

A pod that asks for ``nvidia.com/gpu: 1`` in its resources and names no claim is then scheduled
onto node-x: the scheduler writes one ResourceClaim for it (annotation
``resource.kubernetes.io/extended-resource-claim``, request ``container-<i>-request-<j>`` per
container resource, owned by the pod), allocates it from our driver's devices and records it in
``pod.status.extendedResourceClaimStatus``; the kubelet has our plugin prepare it and passes our
CDI ids to exactly the containers that asked. Deleting the pod unprepares the claim (CDI spec
removed, a MIG slice destroyed) and the claim goes with the pod. A node whose
``status.allocatable`` lists ``nvidia.com/gpu`` (the device plugin serves it) keeps the
device-plugin path: no claim.

The quota test applies ``demo/team-quota.yaml`` and checks what the API server's ResourceQuota
admission refuses, with its exact message.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from dra_driver.cli.main import inventory_slices
from dra_driver.core.cdi import cdi_device_id, env_prefix
from dra_driver.core.mig import MigStrategy
from dra_driver.sources.fake import FakeGpuSource
from e2e.test_kubelet_node import events, get_or_none, resolve_cdi, wait_until
from e2e.test_mig_scheduling import MigNode
from testkit.claimdata import DRIVER
from testkit.cluster import ApiError, LocalCluster
from testkit.helm_cli import Helm
from testkit.manifests import apply, apply_file, load
from testkit.node import KubeletNode
from testkit.plugin_process import PluginProcess

DEMO = Path(__file__).resolve().parents[1] / "demo"
NODE = "node-x"
NS = "dra-demo"
TEAM = "team-a"  # demo/team-quota.yaml
QUOTA = "gpus"
RESOURCE = "/apis/resource.k8s.io/v1"
ANNOTATION = "resource.kubernetes.io/extended-resource-claim"
GPU = "nvidia.com/gpu"
MIG_1G = "nvidia.com/mig-1g.10gb"
MIG_1G_CLASS = f"mig-1g.10gb.{DRIVER}"
TIMEOUT = 90.0


def pods(ns: str) -> str:
    return f"/api/v1/namespaces/{ns}/pods"


def claims(ns: str) -> str:
    return f"{RESOURCE}/namespaces/{ns}/resourceclaims"


def device_plugin_pod(name: str, ns: str, containers: Mapping[str, Mapping[str, int]], node: str | None = None) -> dict[str, Any]:
    """A pod as written for the device plugin: extended resources in each container's limits, no claim."""
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "containers": [
            {
                "name": cname,
                "image": "registry.k8s.io/e2e-test-images/busybox:1.36.1-1",
                "command": ["sleep", "3600"],
                "resources": {"limits": {r: str(n) for r, n in limits.items()}},
            }
            for cname, limits in containers.items()
        ],
    }
    if node is not None:
        spec["nodeSelector"] = {"kubernetes.io/hostname": node}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns}, "spec": spec}


def one_gpu_claim(name: str, ns: str, count: int) -> dict[str, Any]:
    """An ordinary ResourceClaim for ``count`` full GPUs of the chart's class."""
    request = {"name": "gpu", "exactly": {"deviceClassName": DRIVER, "count": count}}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"devices": {"requests": [request]}},
    }


@dataclass
class GpuNode(MigNode):
    """The MIG tests' node (cluster, kubelet, plugin, fake GPUs), with two namespaces and extended-resource claims."""

    def diagnostics(self) -> str:
        out = []
        for ns in (NS, TEAM):
            items = self.c.api("GET", pods(ns))["items"]
            out.append(f"pods in {ns}: {json.dumps({p['metadata']['name']: p.get('status') for p in items})[:3000]}")
            out.append(f"claims in {ns}: {json.dumps(self.c.api('GET', claims(ns))['items'])[:2000]}")
        if self.plugin.log.exists():
            tail = "\n".join(self.plugin.log.read_text().splitlines()[-30:])
            out.append(f"--- plugin log {self.plugin.log} (last 30 lines):\n{tail}")
        out.append(f"--- simulator: {self.carved()}")
        out.append(f"--- runtime records: {json.dumps(self.node.cdi_records())[-2000:]}\n{self.node.diagnostics()}")
        out.append(f"(control-plane logs in {self.c.log_dir})")
        return "\n".join(out)

    def wait_pod_running(self, ns: str, name: str) -> dict[str, Any]:
        def running() -> dict[str, Any] | None:
            pod = self.c.api("GET", f"{pods(ns)}/{name}")
            return pod if pod.get("status", {}).get("phase") == "Running" else None

        return wait_until(f"pod {ns}/{name} to be Running", running, self.diagnostics, TIMEOUT)

    def extended_claim(self, pod: Mapping[str, Any]) -> dict[str, Any]:
        """The claim the scheduler wrote for the pod's extended resources, as the pod's status names it."""
        ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        status = pod["status"].get("extendedResourceClaimStatus")
        assert status, f"pod {ns}/{name} has no extendedResourceClaimStatus\n{self.diagnostics()}"
        claim = self.c.api("GET", f"{claims(ns)}/{status['resourceClaimName']}")
        # Written by the scheduler for this pod: the special annotation, the pod as controlling owner.
        assert claim["metadata"]["annotations"][ANNOTATION] == "true"
        (owner,) = claim["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == ("Pod", name, pod["metadata"]["uid"], True)
        assert claim["metadata"]["name"].startswith(f"{name}-extended-resources-")
        # Allocated from our driver on this node and reserved for the pod.
        assert [r["uid"] for r in claim["status"]["reservedFor"]] == [pod["metadata"]["uid"]]
        for r in claim["status"]["allocation"]["devices"]["results"]:
            assert (r["driver"], r["pool"]) == (DRIVER, NODE), r
        return claim

    def runtime_got(self, pod: Mapping[str, Any]) -> dict[str, list[str]]:
        """The CDI ids the kubelet passed to the fake runtime, per container of the pod."""
        records = [r for r in self.node.cdi_records() if r["pod_uid"] == pod["metadata"]["uid"]]
        assert records, f"the runtime saw no CreateContainer for pod {pod['metadata']['name']}\n{self.diagnostics()}"
        return {r["container"]: sorted(r["cdi_devices"]) for r in records}

    def claim_env(self, claim_uid: str, device: str) -> dict[str, str]:
        """The env our CDI spec gives a container for one prepared device."""
        _, entry = resolve_cdi(self.plugin.cdi, cdi_device_id(DRIVER, claim_uid, device))
        return dict(e.split("=", 1) for e in entry["containerEdits"]["env"])

    def quota_used(self) -> dict[str, str]:
        return dict(self.c.api("GET", f"/api/v1/namespaces/{TEAM}/resourcequotas/{QUOTA}").get("status", {}).get("used", {}))


def listed(c: LocalCluster, path: str) -> Callable[[], bool]:
    """A probe: the collection at ``path`` has items."""
    return lambda: bool(c.api("GET", path)["items"])


def gone(c: LocalCluster, path: str) -> Callable[[], bool]:
    """A probe: the collection at ``path`` is empty."""
    return lambda: not c.api("GET", path)["items"]


def requests_of(claim: Mapping[str, Any]) -> list[tuple[str, str, int]]:
    """(request name, device class, count) of each request of a claim."""
    return [(r["name"], r["exactly"]["deviceClassName"], r["exactly"]["count"]) for r in claim["spec"]["devices"]["requests"]]


def results_of(claim: Mapping[str, Any]) -> dict[str, list[str]]:
    """Allocated devices per request."""
    out: dict[str, list[str]] = {}
    for r in claim["status"]["allocation"]["devices"]["results"]:
        out.setdefault(r["request"], []).append(r["device"])
    return out


@pytest.fixture(scope="module")
def gpu_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GpuNode]:
    tmp = tmp_path_factory.mktemp("extended")
    with (
        LocalCluster(with_scheduler=True, with_controller_manager=True, log_dir=tmp / "k8s-logs") as c,
        KubeletNode(c, NODE, tmp / NODE) as node,
    ):
        plugin = PluginProcess.on_node(
            node,
            tmp / "plugin",
            kubeconfig=c.kubeconfig,
            # No periodic GC pass: every unprepare seen here comes from the kubelet.
            extra_args=("--mig", "dynamic", "--fake-mig-latency", "zero", "--gc-interval", "0"),
        )
        g = GpuNode(c, node, plugin, FakeGpuSource("h100x8", NODE).gpus())
        plugin.start()
        try:
            wait_until("the kubelet to register the plugin", lambda: events(plugin, "plugin_registered"), g.diagnostics)
            expected = {
                d["name"]
                for s in inventory_slices(fake_gpus="h100x8", node_name=NODE, driver=DRIVER, mig=MigStrategy.DYNAMIC)
                for d in s["spec"].get("devices", [])
            }

            def published() -> set[str]:
                slices = c.api("GET", f"{RESOURCE}/resourceslices?fieldSelector=spec.nodeName={NODE}")["items"]
                return {d["name"] for s in slices if s["spec"]["driver"] == DRIVER for d in s["spec"].get("devices", [])}

            wait_until("the dynamic MIG catalogue to be published", lambda: published() == expected, g.diagnostics)
            # The DeviceClasses as users install them: the chart decides from the live server's version.
            Helm.built(tmp / "helm-home").install(c, "kubeletPlugin.enabled=false", "mig.strategy=dynamic")
            apply_file(c, DEMO / "namespace.yaml")
            apply_file(c, DEMO / "team-quota.yaml")
            for ns in (NS, TEAM):
                wait_until(
                    f"the default ServiceAccount of {ns}", listed(c, f"/api/v1/namespaces/{ns}/serviceaccounts"), g.diagnostics
                )
            yield g
            node.check_alive()
        finally:
            plugin.stop()


@pytest.fixture(autouse=True)
def empty_node(gpu_node: GpuNode) -> Iterator[None]:
    """Each test ends with no pod, no claim, no CDI spec, no MIG instance and an unused quota."""
    yield
    g = gpu_node
    for ns in (NS, TEAM):
        g.c.api("DELETE", pods(ns))
        g.c.api("DELETE", claims(ns))
    for ns in (NS, TEAM):
        wait_until(f"the pods of {ns} to be gone", gone(g.c, pods(ns)), g.diagnostics)
        wait_until(f"the claims of {ns} to be gone", gone(g.c, claims(ns)), g.diagnostics)
    wait_until("the CDI specs to be removed", lambda: not g.plugin.cdi_files(), g.diagnostics)
    wait_until("every MIG instance to be destroyed", lambda: not g.carved(), g.diagnostics)
    wait_until(
        "the team quota to be unused again",
        lambda: g.quota_used() and all(v == "0" for v in g.quota_used().values()),
        lambda: f"{g.quota_used()}\n{g.diagnostics()}",
    )


def test_classes_as_installed_map_the_device_plugin_resource_names(gpu_node: GpuNode) -> None:
    """The API server kept extendedResourceName (it drops it where DRAExtendedResource is off): nvidia.com/gpu on the
    full-GPU class, nvidia.com/mig-<profile> ("+" made ".") on one class per MIG profile."""
    stored = gpu_node.c.api("GET", f"{RESOURCE}/deviceclasses")["items"]
    mapped = {c["spec"]["extendedResourceName"]: c["metadata"]["name"] for c in stored if c["spec"].get("extendedResourceName")}
    assert mapped[GPU] == DRIVER
    assert mapped[MIG_1G] == MIG_1G_CLASS
    assert mapped["nvidia.com/mig-1g.10gb.me"] == f"mig-1g.10gb.me.{DRIVER}"
    assert mapped["nvidia.com/mig-7g.80gb"] == f"mig-7g.80gb.{DRIVER}"
    by_name = {c["metadata"]["name"]: c for c in stored}
    assert "extendedResourceName" not in by_name[f"mig.{DRIVER}"]["spec"]


def test_device_plugin_pod_unchanged_gets_a_gpu_prepared_by_the_plugin(gpu_node: GpuNode) -> None:
    """demo/device-plugin-style-pod.yaml (limits nvidia.com/gpu: 1, no claim): the scheduler's claim is allocated
    from our driver, our plugin prepares it, the container gets our CDI id; deleting the pod unprepares it."""
    g = gpu_node
    (pod_obj,) = load(DEMO / "device-plugin-style-pod.yaml")
    assert "resourceClaims" not in pod_obj["spec"] and pod_obj["spec"]["containers"][0]["resources"] == {"limits": {GPU: 1}}
    apply(g.c, [pod_obj])
    pod = g.wait_pod_running(NS, "device-plugin-style")
    assert pod["spec"]["nodeName"] == NODE
    claim = g.extended_claim(pod)
    assert requests_of(claim) == [("container-0-request-0", DRIVER, 1)]
    assert results_of(claim) == {"container-0-request-0": ["gpu-0"]}  # the first full GPU in the driver's order
    assert pod["status"]["extendedResourceClaimStatus"]["requestMappings"] == [
        {"containerName": "cuda", "resourceName": GPU, "requestName": "container-0-request-0"}
    ]
    uid = claim["metadata"]["uid"]
    cdi_id = cdi_device_id(DRIVER, uid, "gpu-0")
    assert g.runtime_got(pod) == {"cuda": [cdi_id]}
    spec_file, _ = resolve_cdi(g.plugin.cdi, cdi_id)
    assert g.claim_env(uid, "gpu-0")[env_prefix("gpu-0")] == "gpu-0"
    assert any(e.get("claim_uid") == uid for e in events(g.plugin, "device_prepared"))

    g.c.api("DELETE", f"{pods(NS)}/device-plugin-style")
    wait_until(
        "the kubelet to unprepare the claim (claim_unprepared, CDI spec removed)",
        lambda: not spec_file.exists() and any(e.get("claim_uid") == uid for e in events(g.plugin, "claim_unprepared")),
        g.diagnostics,
    )
    # The claim belongs to the pod: it goes with it.
    name = claim["metadata"]["name"]
    wait_until(f"claim {name} to be deleted", lambda: get_or_none(g.c, f"{claims(NS)}/{name}") is None, g.diagnostics)


def test_each_container_gets_exactly_the_gpus_it_asked_for(gpu_node: GpuNode) -> None:
    """nvidia.com/gpu: 2 in one container is one request for two GPUs, both in that container; two containers
    with one each are two requests, and the kubelet gives each container only its own GPU's CDI id."""
    g = gpu_node
    apply(g.c, [device_plugin_pod("two-gpus", NS, {"train": {GPU: 2}})])
    apply(g.c, [device_plugin_pod("pair", NS, {"a": {GPU: 1}, "b": {GPU: 1}})])

    pod = g.wait_pod_running(NS, "two-gpus")
    claim = g.extended_claim(pod)
    assert requests_of(claim) == [("container-0-request-0", DRIVER, 2)]
    (devices,) = results_of(claim).values()
    assert len(set(devices)) == 2 and all(d.startswith("gpu-") and "mig" not in d for d in devices), devices
    uid = claim["metadata"]["uid"]
    assert g.runtime_got(pod) == {"train": sorted(cdi_device_id(DRIVER, uid, d) for d in devices)}

    pod = g.wait_pod_running(NS, "pair")
    claim = g.extended_claim(pod)
    assert requests_of(claim) == [("container-0-request-0", DRIVER, 1), ("container-1-request-0", DRIVER, 1)]
    by_request = results_of(claim)
    uid = claim["metadata"]["uid"]
    assert g.runtime_got(pod) == {
        "a": [cdi_device_id(DRIVER, uid, by_request["container-0-request-0"][0])],
        "b": [cdi_device_id(DRIVER, uid, by_request["container-1-request-0"][0])],
    }
    assert sorted(
        m["containerName"] + "/" + m["requestName"] for m in pod["status"]["extendedResourceClaimStatus"]["requestMappings"]
    ) == [
        "a/container-0-request-0",
        "b/container-1-request-0",
    ]
    # Four different GPUs for the two pods.
    assert len({*devices, *(d for ds in by_request.values() for d in ds)}) == 4


def test_mig_profile_pod_gets_a_slice_carved_at_prepare_and_destroyed_at_delete(gpu_node: GpuNode) -> None:
    """nvidia.com/mig-1g.10gb: 1 (the device plugin's mixed-strategy name): the class of that profile is allocated,
    the plugin carves the 1g.10gb placement the scheduler chose, and destroys it when the pod is deleted."""
    g = gpu_node
    apply(g.c, [device_plugin_pod("mig-1g", NS, {"cuda": {MIG_1G: 1}})])
    pod = g.wait_pod_running(NS, "mig-1g")
    claim = g.extended_claim(pod)
    assert requests_of(claim) == [("container-0-request-0", MIG_1G_CLASS, 1)]
    # First fit: the lowest GPU, placements of the smallest profile from the highest start down.
    assert results_of(claim) == {"container-0-request-0": ["gpu-0-mig-1g10gb-6"]}
    (instances,) = g.carved().values()
    (inst,) = instances
    assert (inst.parent_uuid, inst.profile_name, inst.placement.start) == (g.uuid(0), "1g.10gb", 6)
    assert inst.uuid is not None and inst.uuid.startswith("MIG-")
    uid = claim["metadata"]["uid"]
    assert g.runtime_got(pod) == {"cuda": [cdi_device_id(DRIVER, uid, "gpu-0-mig-1g10gb-6")]}
    env = g.claim_env(uid, "gpu-0-mig-1g10gb-6")
    prefix = env_prefix("gpu-0-mig-1g10gb-6")
    assert (env[f"{prefix}_UUID"], env[f"{prefix}_MIG_PROFILE"]) == (inst.uuid, "1g.10gb")

    g.c.api("DELETE", f"{pods(NS)}/mig-1g")
    wait_until("the MIG instance to be destroyed", lambda: not g.carved(), g.diagnostics)
    wait_until("MIG mode to be off again", lambda: not g.mig_mode_on(), g.diagnostics)
    wait_until("the CDI spec to be removed", lambda: not g.plugin.cdi_files(), g.diagnostics)


def test_node_advertising_nvidia_gpu_keeps_the_device_plugin_path(gpu_node: GpuNode) -> None:
    """A node whose status.allocatable lists nvidia.com/gpu (a device plugin serves it) gets the same pod through the
    device-plugin path, with no claim; on node-x, which does not advertise it, the pod gets a claim from our driver.
    A node that lists it with 0 (the kubelet's mark of a device plugin that has gone) is left to DRA: with no
    dra-gpu device there, the pod does not fit it and the scheduler says so for claims, not for nvidia.com/gpu."""
    g = gpu_node
    for name, count in (("dp-node", "4"), ("dp-gone", "0")):
        g.c.add_node(name)
        status = {"capacity": {"cpu": "32", "memory": "256Gi", "pods": "110", GPU: count}}
        status["allocatable"] = status["capacity"]
        g.c.api("PATCH", f"/api/v1/nodes/{name}/status", {"status": status}, "application/merge-patch+json")
    try:
        apply(g.c, [device_plugin_pod("on-dp-node", NS, {"cuda": {GPU: 1}}, node="dp-node")])
        apply(g.c, [device_plugin_pod("on-dp-gone", NS, {"cuda": {GPU: 1}}, node="dp-gone")])
        apply(g.c, [device_plugin_pod("on-node-x", NS, {"cuda": {GPU: 1}}, node=NODE)])
        dra = g.wait_pod_running(NS, "on-node-x")
        g.extended_claim(dra)

        def bound() -> dict[str, Any] | None:
            pod = g.c.api("GET", f"{pods(NS)}/on-dp-node")
            return pod if pod["spec"].get("nodeName") else None

        pod = wait_until("on-dp-node to be bound", bound, g.diagnostics)
        assert pod["spec"]["nodeName"] == "dp-node"
        assert "extendedResourceClaimStatus" not in pod["status"]

        def unschedulable() -> str | None:
            pod = g.c.api("GET", f"{pods(NS)}/on-dp-gone")
            cond = next((c for c in pod["status"].get("conditions", []) if c["type"] == "PodScheduled"), None)
            return cond["message"] if cond and cond["status"] == "False" else None

        message = wait_until("on-dp-gone to be found unschedulable", unschedulable, g.diagnostics)
        assert "cannot allocate all claims" in message and "Insufficient nvidia.com/gpu" not in message, message
        assert "nodeName" not in g.c.api("GET", f"{pods(NS)}/on-dp-gone")["spec"]
        owners = {o["name"] for c in g.c.api("GET", claims(NS))["items"] for o in c["metadata"].get("ownerReferences", [])}
        assert owners == {"on-node-x"}, owners
    finally:
        # No kubelet runs on the fake nodes to confirm the deletion of a pod bound there.
        g.c.api("DELETE", f"{pods(NS)}/on-dp-node?gracePeriodSeconds=0")
        for name in ("dp-node", "dp-gone"):
            g.c.api("DELETE", f"/api/v1/nodes/{name}")


def forbidden(g: GpuNode, obj: dict[str, Any]) -> str:
    """Create ``obj``; it must be refused with 403 Forbidden: the API server's message."""
    with pytest.raises(ApiError) as refused:
        apply(g.c, [obj])
    assert refused.value.status == 403, refused.value.body
    assert refused.value.body["reason"] == "Forbidden"
    message: str = refused.value.body["message"]
    return message


def test_team_quota_refuses_claims_and_pods_over_the_gpu_budget(gpu_node: GpuNode) -> None:
    """demo/team-quota.yaml: 2 full GPUs per team, counted over ResourceClaims and device-plugin style pods alike.
    The API server refuses what would go over, saying which limit, and admits again once GPUs are given back."""
    g = gpu_node
    devices = f"{DRIVER}.deviceclass.resource.k8s.io/devices"
    # A device-plugin style pod takes one GPU: its nvidia.com/gpu counts, and the claim the scheduler writes
    # for it counts one device of the class (but not a second nvidia.com/gpu).
    apply(g.c, [device_plugin_pod("train", TEAM, {"cuda": {GPU: 1}})])
    g.extended_claim(g.wait_pod_running(TEAM, "train"))
    wait_until("the quota to count the pod and its claim", lambda: g.quota_used().get(devices) == "1", g.diagnostics)
    assert (g.quota_used()["requests.nvidia.com/gpu"], g.quota_used()["count/resourceclaims.resource.k8s.io"]) == ("1", "1")

    # A claim for two more GPUs would make three, under both names.
    assert forbidden(g, one_gpu_claim("two-gpus", TEAM, 2)) == (
        'resourceclaims.resource.k8s.io "two-gpus" is forbidden: exceeded quota: gpus, '
        f"requested: {devices}=2,requests.nvidia.com/gpu=2, "
        f"used: {devices}=1,requests.nvidia.com/gpu=1, "
        f"limited: {devices}=2,requests.nvidia.com/gpu=2"
    )
    # So would a pod asking for two, the device-plugin way.
    assert forbidden(g, device_plugin_pod("big", TEAM, {"cuda": {GPU: 2}})) == (
        'pods "big" is forbidden: exceeded quota: gpus, requested: requests.nvidia.com/gpu=2, '
        "used: requests.nvidia.com/gpu=1, limited: requests.nvidia.com/gpu=2"
    )
    # MIG slices of a profile have their own budget (2 x 1g.10gb).
    assert forbidden(g, device_plugin_pod("mig-x3", TEAM, {"cuda": {MIG_1G: 3}})) == (
        'pods "mig-x3" is forbidden: exceeded quota: gpus, requested: requests.nvidia.com/mig-1g.10gb=3, '
        "used: requests.nvidia.com/mig-1g.10gb=0, limited: requests.nvidia.com/mig-1g.10gb=2"
    )

    # One more GPU as a claim fills the budget: a claim of the mapped class counts as nvidia.com/gpu too,
    # so the next device-plugin style pod is refused.
    apply(g.c, [one_gpu_claim("one-gpu", TEAM, 1)])
    assert forbidden(g, device_plugin_pod("one-more", TEAM, {"cuda": {GPU: 1}})) == (
        'pods "one-more" is forbidden: exceeded quota: gpus, requested: requests.nvidia.com/gpu=1, '
        "used: requests.nvidia.com/gpu=2, limited: requests.nvidia.com/gpu=2"
    )

    # Giving the claim back makes room again (the quota controller recounts), and the pod runs.
    g.c.api("DELETE", f"{claims(TEAM)}/one-gpu")
    wait_until("the quota to count one GPU again", lambda: g.quota_used().get("requests.nvidia.com/gpu") == "1", g.diagnostics)
    apply(g.c, [device_plugin_pod("one-more", TEAM, {"cuda": {GPU: 1}})])
    claim = g.extended_claim(g.wait_pod_running(TEAM, "one-more"))
    assert results_of(claim) == {"container-0-request-0": ["gpu-1"]}  # gpu-0 is train's


def test_device_quota_below_the_resource_quota_leaves_the_pod_pending_with_the_schedulers_error(gpu_node: GpuNode) -> None:
    """The pod is admitted under requests.nvidia.com/gpu, but the claim the scheduler writes for it counts under
    <class>.deviceclass.resource.k8s.io/devices when it is created: with that limit lower, the scheduler cannot
    create it and says why in the pod's PodScheduled condition; raising the limit lets the pod run."""
    g = gpu_node
    devices = f"{DRIVER}.deviceclass.resource.k8s.io/devices"
    path = f"/api/v1/namespaces/{TEAM}/resourcequotas/{QUOTA}"

    def set_devices(limit: str) -> None:
        g.c.api("PATCH", path, {"spec": {"hard": {devices: limit}}}, "application/merge-patch+json")
        wait_until(
            f"the quota to enforce {devices}={limit}",
            lambda: g.c.api("GET", path)["status"]["hard"].get(devices) == limit,
            g.diagnostics,
        )

    set_devices("1")
    try:
        apply(g.c, [device_plugin_pod("train", TEAM, {"cuda": {GPU: 1}})])
        g.extended_claim(g.wait_pod_running(TEAM, "train"))
        apply(g.c, [device_plugin_pod("second", TEAM, {"cuda": {GPU: 1}})])  # 2 <= requests.nvidia.com/gpu: admitted

        def refused() -> str | None:
            pod = g.c.api("GET", f"{pods(TEAM)}/second")
            cond = next((c for c in pod["status"].get("conditions", []) if c["type"] == "PodScheduled"), None)
            return cond["message"] if cond and cond["status"] == "False" and "exceeded quota" in cond.get("message", "") else None

        message = wait_until("the scheduler to report the quota", refused, g.diagnostics)
        assert message.startswith(
            'running PreBind plugin "DynamicResources": create claim for extended resources team-a/: '
            'resourceclaims.resource.k8s.io "second-extended-resources-'
        ), message
        assert message.endswith(
            f'" is forbidden: exceeded quota: gpus, requested: {devices}=1, used: {devices}=1, limited: {devices}=1'
        ), message
        assert g.c.api("GET", f"{pods(TEAM)}/second")["status"]["phase"] == "Pending"
    finally:
        set_devices("2")
    g.extended_claim(g.wait_pod_running(TEAM, "second"))
