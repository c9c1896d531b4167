"""Dynamic MIG end to end: users' MIG selectors, the real scheduler, the kubelet's DRA code, the simulator.

One real kubelet (fake container runtime) as node-m, whose dra-gpu plugin runs 8 fake H100s with
``--mig dynamic`` and the MIG simulator at zero latency, publishing every (profile, placement) and
the full GPUs with shared counters. The Helm chart installs the DeviceClasses (``mig.`` selects
``type == "mig"``). Each test applies demo/ manifests as a user would, waits for the pods to run,
and checks three views that must agree: the claim's allocation (what the scheduler chose), the
simulator's state (what the plugin carved at NodePrepareResources: profile and placement start
equal to the allocated device name, on the named parent GPU) and the fake runtime's records (the
CDI ids the kubelet passed, resolving to the carved MIG device's UUID). Deleting the pods makes the
kubelet unprepare: the instances are destroyed and MIG mode is off again. Every test starts from
an empty node (the autouse fixture deletes the pods and waits for that), so the first-fit
placements are exact: slices pack onto gpu-0 from placement 6 down, the full GPU comes last.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from dra_driver.cli.main import inventory_slices
from dra_driver.core.cdi import cdi_device_id, env_prefix
from dra_driver.core.gpu import GpuInfo
from dra_driver.core.mig import MigInstance, MigStrategy, parse_mig_device_name, profile_slug
from dra_driver.mig_backends.sim import load_instances, load_modes
from dra_driver.sources.fake import FakeGpuSource
from e2e.test_kubelet_node import events, resolve_cdi, wait_until
from testkit.claimdata import DRIVER
from testkit.cluster import LocalCluster
from testkit.helm_cli import Helm
from testkit.manifests import apply, apply_file, load
from testkit.node import KubeletNode
from testkit.plugin_process import PluginProcess

DEMO = Path(__file__).resolve().parents[1] / "demo"
NODE = "node-m"
NS = "dra-demo"
RESOURCE = "/apis/resource.k8s.io/v1"
PODS = f"/api/v1/namespaces/{NS}/pods"
CLAIMS = f"{RESOURCE}/namespaces/{NS}/resourceclaims"
TEMPLATES = f"{RESOURCE}/namespaces/{NS}/resourceclaimtemplates"
TIMEOUT = 90.0


@dataclass
class MigNode:
    """The cluster, the kubelet node and its plugin, and the node's fake GPUs."""

    c: LocalCluster
    node: KubeletNode
    plugin: PluginProcess
    gpus: list[GpuInfo]

    def uuid(self, minor: int) -> str:
        return next(g.uuid for g in self.gpus if g.minor == minor)

    def diagnostics(self) -> str:
        pods = self.c.api("GET", PODS)["items"]
        out = [f"pods: {json.dumps({p['metadata']['name']: p.get('status') for p in pods})[:3000]}"]
        if self.plugin.log.exists():
            tail = "\n".join(self.plugin.log.read_text().splitlines()[-30:])
            out.append(f"--- plugin log {self.plugin.log} (last 30 lines):\n{tail}")
        out.append(f"--- simulator: {self.carved()}")
        out.append(f"--- runtime records: {json.dumps(self.node.cdi_records())[-2000:]}\n{self.node.diagnostics()}")
        out.append(f"(control-plane logs in {self.c.log_dir})")
        return "\n".join(out)

    def carved(self) -> dict[str, list[MigInstance]]:
        """The simulator's instances per GPU uuid (GPUs without any left out)."""
        if not self.plugin.sim_state.exists():
            return {}
        return {uuid: insts for uuid, insts in load_instances(self.plugin.sim_state).items() if insts}

    def mig_mode_on(self) -> set[str]:
        """UUIDs of the GPUs whose MIG mode is on now."""
        if not self.plugin.sim_state.exists():
            return set()
        return {uuid for uuid, mode in load_modes(self.plugin.sim_state).items() if mode.current}

    def published(self) -> dict[str, dict[str, Any]]:
        """This node's published devices by name."""
        slices = self.c.api("GET", f"{RESOURCE}/resourceslices?fieldSelector=spec.nodeName={NODE}")["items"]
        return {d["name"]: d for s in slices if s["spec"]["driver"] == DRIVER for d in s["spec"].get("devices", [])}

    def wait_running(self, name: str) -> dict[str, Any]:
        def running() -> dict[str, Any] | None:
            pod = self.c.api("GET", f"{PODS}/{name}")
            return pod if pod.get("status", {}).get("phase") == "Running" else None

        return wait_until(f"pod {name} to be Running", running, self.diagnostics, TIMEOUT)

    def wait_allocated(self, pod_name: str) -> Allocation:
        """The pod's claim once the scheduler has allocated it (the pod need not run yet)."""

        def allocated() -> Allocation | None:
            pod = self.c.api("GET", f"{PODS}/{pod_name}")
            statuses = pod.get("status", {}).get("resourceClaimStatuses") or []
            if not statuses or not statuses[0].get("resourceClaimName"):
                return None
            claim = self.c.api("GET", f"{CLAIMS}/{statuses[0]['resourceClaimName']}")
            alloc = (claim.get("status") or {}).get("allocation")
            return Allocation(pod_name, pod["metadata"]["uid"], claim, alloc["devices"]["results"]) if alloc else None

        return wait_until(f"the claim of pod {pod_name} to be allocated", allocated, self.diagnostics, TIMEOUT)

    def run(self, *pod_names: str) -> dict[str, Allocation]:
        """Wait until the pods run; their allocations, checked against the runtime's CDI ids."""
        out = {}
        for name in pod_names:
            self.wait_running(name)
            alloc = self.wait_allocated(name)
            self.assert_runtime_got(alloc)
            out[name] = alloc
        return out

    def assert_runtime_got(self, alloc: Allocation) -> None:
        """The fake runtime was asked to inject exactly the claim's CDI ids, and each resolves in our specs."""
        records = [r for r in self.node.cdi_records() if r["pod_uid"] == alloc.pod_uid]  # names recur across tests
        assert records, f"the runtime saw no CreateContainer for pod {alloc.pod}\n{self.diagnostics()}"
        expected = sorted(cdi_device_id(DRIVER, alloc.uid, d) for d in alloc.devices)
        for r in records:
            assert sorted(r["cdi_devices"]) == expected, f"pod {alloc.pod}: {r['cdi_devices']} != {expected}"
        for cdi_id in expected:
            resolve_cdi(self.plugin.cdi, cdi_id)

    def container_env(self, alloc: Allocation, device: str) -> dict[str, str]:
        """The env our CDI spec gives the container for one allocated device."""
        _, entry = resolve_cdi(self.plugin.cdi, cdi_device_id(DRIVER, alloc.uid, device))
        return dict(e.split("=", 1) for e in entry["containerEdits"]["env"])


@dataclass(frozen=True)
class Allocation:
    """One pod's allocated claim."""

    pod: str
    pod_uid: str
    claim: dict[str, Any]
    results: list[dict[str, Any]]

    @property
    def uid(self) -> str:
        return str(self.claim["metadata"]["uid"])

    @property
    def devices(self) -> list[str]:
        return [str(r["device"]) for r in self.results]

    def by_request(self) -> dict[str, str]:
        return {str(r["request"]): str(r["device"]) for r in self.results}


@pytest.fixture(scope="module")
def mig_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MigNode]:
    tmp = tmp_path_factory.mktemp("mig")
    with (
        LocalCluster(with_scheduler=True, with_controller_manager=True, log_dir=tmp / "k8s-logs") as c,
        KubeletNode(c, NODE, tmp / NODE) as node,
    ):
        plugin = PluginProcess.on_node(
            node,
            tmp / "plugin",
            kubeconfig=c.kubeconfig,
            # No periodic GC pass: every unprepare seen here must come from the kubelet's DRA manager.
            extra_args=("--mig", "dynamic", "--fake-mig-latency", "zero", "--gc-interval", "0"),
        )
        m = MigNode(c, node, plugin, FakeGpuSource("h100x8", NODE).gpus())
        plugin.start()
        try:
            wait_until("the kubelet to register the plugin", lambda: events(plugin, "plugin_registered"), m.diagnostics)
            # What the node publishes is what `dra-gpu inventory --fake-gpus h100x8 --mig dynamic` prints.
            expected = {
                d["name"]
                for s in inventory_slices(fake_gpus="h100x8", node_name=NODE, driver=DRIVER, mig=MigStrategy.DYNAMIC)
                for d in s["spec"].get("devices", [])
            }
            wait_until("the dynamic MIG catalogue to be published", lambda: set(m.published()) == expected, m.diagnostics)
            Helm.built(tmp / "helm-home").install(c, "kubeletPlugin.enabled=false")
            apply_file(c, DEMO / "namespace.yaml")
            wait_until(
                f"the default ServiceAccount of {NS}",
                lambda: c.api("GET", f"/api/v1/namespaces/{NS}/serviceaccounts")["items"],
                m.diagnostics,
            )
            yield m
            node.check_alive()
        finally:
            plugin.stop()


@pytest.fixture(autouse=True)
def empty_node(mig_node: MigNode) -> Iterator[None]:
    """Each test starts with no pod, no claim, no carved instance and MIG mode off everywhere (tests end
    with ``delete_pods_and_check_destroyed``; this is the backstop when one fails half-way)."""
    yield
    delete_pods_and_check_destroyed(mig_node)


def delete_pods_and_check_destroyed(m: MigNode) -> None:
    """Delete every pod (and template) of the namespace: the kubelet unprepares their claims, the plugin
    destroys the carved instances and turns MIG mode off again once a GPU has none left."""
    m.c.api("DELETE", PODS)
    m.c.api("DELETE", TEMPLATES)
    wait_until("the pods to be gone", lambda: not m.c.api("GET", PODS)["items"], m.diagnostics)
    wait_until("the claims to be gone", lambda: not m.c.api("GET", CLAIMS)["items"], m.diagnostics)
    wait_until("the CDI specs to be removed", lambda: not m.plugin.cdi_files(), m.diagnostics)
    wait_until("every MIG instance to be destroyed", lambda: not m.carved(), m.diagnostics)
    # Destroying the last instance turns MIG mode off (Hopper toggles without a reset).
    assert set() == m.mig_mode_on(), m.diagnostics()


def carved_names(m: MigNode) -> dict[str, MigInstance]:
    """Every carved instance under the device name of its placement (``gpu-<minor>-mig-<slug>-<start>``)."""
    minor_of = {g.uuid: g.minor for g in m.gpus}
    return {
        f"gpu-{minor_of[uuid]}-mig-{profile_slug(i.profile_name)}-{i.placement.start}": i
        for uuid, insts in m.carved().items()
        for i in insts
    }


def assert_carved_as_allocated(m: MigNode, *allocs: Allocation) -> dict[str, MigInstance]:
    """The simulator holds exactly the allocated MIG placements, each on its parent GPU, complete (CI and MIG UUID),
    and each container's env names the carved MIG device; returns the instances by device name."""
    allocated = {d for a in allocs for d in a.devices if parse_mig_device_name(d)}
    carved = carved_names(m)
    assert set(carved) == allocated, f"carved {sorted(carved)} but allocated {sorted(allocated)}\n{m.diagnostics()}"
    published = m.published()
    for name, inst in carved.items():
        parsed = parse_mig_device_name(name)
        assert parsed is not None
        assert inst.parent_uuid == m.uuid(parsed.minor)
        assert inst.parent_uuid == published[name]["attributes"]["parentUUID"]["string"]
        assert inst.profile_name == published[name]["attributes"]["profile"]["string"]
        assert inst.ci_id is not None and inst.uuid is not None and inst.uuid.startswith("MIG-"), inst
    assert {i.parent_uuid for i in carved.values()} == m.mig_mode_on()
    for a in allocs:
        for device in a.devices:
            if device in carved:
                env = m.container_env(a, device)
                prefix = env_prefix(device)
                assert env[f"{prefix}_UUID"] == carved[device].uuid
                assert env[f"{prefix}_MIG_PROFILE"] == carved[device].profile_name
                assert env[f"{prefix}_PARENT_UUID"] == carved[device].parent_uuid
    return carved


def test_1g_slice_is_carved_at_the_allocated_placement(mig_node: MigNode) -> None:
    """demo/mig-1g.yaml: the first 1g.10gb placement in the driver's order (gpu-0, start 6) is carved, and only it."""
    m = mig_node
    apply_file(m.c, DEMO / "mig-1g.yaml")
    alloc = m.run("mig-1g")["mig-1g"]
    assert ["gpu-0-mig-1g10gb-6"] == alloc.devices
    (inst,) = assert_carved_as_allocated(m, alloc).values()
    assert ("1g.10gb", 6, 1) == (inst.profile_name, inst.placement.start, inst.placement.size)
    assert {m.uuid(0)} == m.mig_mode_on()

    delete_pods_and_check_destroyed(m)


def test_pair_of_slices_shares_one_parent_gpu(mig_node: MigNode) -> None:
    """demo/mig-pair.yaml: a 1g.10gb and a 2g.20gb with matchAttribute parentUUID land on one GPU, without overlap."""
    m = mig_node
    apply_file(m.c, DEMO / "mig-pair.yaml")
    alloc = m.run("mig-pair")["mig-pair"]
    assert {"small": "gpu-0-mig-1g10gb-6", "medium": "gpu-0-mig-2g20gb-4"} == alloc.by_request()
    carved = assert_carved_as_allocated(m, alloc)
    small, medium = carved["gpu-0-mig-1g10gb-6"], carved["gpu-0-mig-2g20gb-4"]
    assert small.parent_uuid == medium.parent_uuid == m.uuid(0)
    assert not small.placement.overlaps(medium.placement)
    assert small.gi_id != medium.gi_id

    delete_pods_and_check_destroyed(m)


def test_pair_constraint_moves_both_slices_to_a_gpu_with_room_for_both(mig_node: MigNode) -> None:
    """With gpu-0 left with room for a 1g.10gb but not a 2g.20gb, matchAttribute puts both slices on gpu-1.

    Without the constraint the first fit would split them (1g on gpu-0, 2g on gpu-1).
    """
    m = mig_node
    docs = load(DEMO / "mig-pair.yaml")
    template = next(d for d in docs if d["kind"] == "ResourceClaimTemplate")
    # Fill gpu-0 except memory slice 0: six 1g.10gb (placements 6..1) -- a 2g.20gb needs slices 0-1.
    filler = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "six-1g", "namespace": NS},
        "spec": {"spec": {"devices": {"requests": [one_1g_request(count=6)]}}},
    }
    apply(m.c, [filler, template, pod_using("filler", "six-1g")])
    filled = m.run("filler")["filler"]
    assert sorted(f"gpu-0-mig-1g10gb-{i}" for i in range(1, 7)) == sorted(filled.devices)
    apply(m.c, [pod_using("mig-pair", template["metadata"]["name"])])
    alloc = m.run("mig-pair")["mig-pair"]
    assert {"small": "gpu-1-mig-1g10gb-6", "medium": "gpu-1-mig-2g20gb-4"} == alloc.by_request()
    assert_carved_as_allocated(m, filled, alloc)
    assert {m.uuid(0), m.uuid(1)} == m.mig_mode_on()

    delete_pods_and_check_destroyed(m)


def test_any_slice_with_20gi_gets_the_smallest_big_enough_profile(mig_node: MigNode) -> None:
    """demo/mig-20gi.yaml: a capacity selector, no profile named. The "20gb" profiles have 20096Mi (< 20Gi), so the
    smallest slice that qualifies is a 3g.40gb; it is carved where allocated."""
    m = mig_node
    apply_file(m.c, DEMO / "mig-20gi.yaml")
    alloc = m.run("mig-20gi")["mig-20gi"]
    assert ["gpu-0-mig-3g40gb-4"] == alloc.devices
    published = m.published()
    for name in ("gpu-0-mig-1g20gb-6", "gpu-0-mig-2g20gb-4"):  # passed over: just under 20Gi
        assert "20096Mi" == published[name]["capacity"]["memory"]["value"]
    assert "40448Mi" == published["gpu-0-mig-3g40gb-4"]["capacity"]["memory"]["value"]
    (inst,) = assert_carved_as_allocated(m, alloc).values()
    assert ("3g.40gb", 4, 4) == (inst.profile_name, inst.placement.start, inst.placement.size)

    delete_pods_and_check_destroyed(m)


def test_first_available_takes_a_full_gpu_while_one_is_free_then_a_3g_slice(mig_node: MigNode) -> None:
    """demo/mig-or-full.yaml: "a full H100, or else a 3g slice".

    First run: every GPU is free, so the first subrequest wins: the full gpu-0, nothing carved and
    MIG mode stays off. Then a claim takes six full GPUs (gpu-1..6) and a 1g.10gb lands on gpu-7,
    so no full GPU is left; the second run falls back to the 3g subrequest on gpu-7. (Taking all
    eight full GPUs would leave no 3g placement either -- a full GPU consumes every counter of its
    GPU -- so the fallback is only reachable with the last GPU partly carved; one claim for six
    GPUs keeps this at four pods.)
    """
    m = mig_node
    apply_file(m.c, DEMO / "mig-or-full.yaml")
    first = m.run("mig-or-full")["mig-or-full"]
    assert {"gpu/full": "gpu-0"} == first.by_request()
    assert {} == m.carved()
    assert set() == m.mig_mode_on()
    env = m.container_env(first, "gpu-0")
    assert env[f"{env_prefix('gpu-0')}_UUID"] == m.uuid(0)

    six_full = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "six-h100", "namespace": NS},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": DRIVER, "count": 6}}]}}},
    }
    apply(m.c, [six_full, pod_using("hog", "six-h100")])
    hog = m.run("hog")["hog"]
    assert sorted(f"gpu-{i}" for i in range(1, 7)) == sorted(hog.devices)
    apply_file(m.c, DEMO / "mig-1g.yaml")
    one_g = m.run("mig-1g")["mig-1g"]
    assert ["gpu-7-mig-1g10gb-6"] == one_g.devices

    pod = next(d for d in load(DEMO / "mig-or-full.yaml") if d["kind"] == "Pod")
    pod["metadata"]["name"] = "mig-or-full-2"
    apply(m.c, [pod])
    second = m.run("mig-or-full-2")["mig-or-full-2"]
    assert {"gpu/slice-3g": "gpu-7-mig-3g40gb-0"} == second.by_request()  # 3g at 4 would overlap the 1g at 6
    carved = assert_carved_as_allocated(m, first, hog, one_g, second)
    assert {"gpu-7-mig-1g10gb-6", "gpu-7-mig-3g40gb-0"} == set(carved)
    assert {m.uuid(7)} == m.mig_mode_on()

    delete_pods_and_check_destroyed(m)


def test_1g_slices_fill_gpu_0_from_the_top_before_touching_gpu_1(mig_node: MigNode) -> None:
    """Eight pods asking 1g.10gb one after the other: first fit packs the seven placements of gpu-0 (6, 5, ..., 0),
    the eighth goes to gpu-1 at 6; all eight instances are carved, and all are destroyed when the pods go."""
    m = mig_node
    template = next(d for d in load(DEMO / "mig-1g.yaml") if d["kind"] == "ResourceClaimTemplate")
    apply(m.c, [template])
    names = [f"slice-{i}" for i in range(8)]
    order = []
    for name in names:
        apply(m.c, [pod_using(name, template["metadata"]["name"])])
        order += m.wait_allocated(name).devices
    allocs = m.run(*names)
    assert [f"gpu-0-mig-1g10gb-{s}" for s in range(6, -1, -1)] + ["gpu-1-mig-1g10gb-6"] == order
    carved = assert_carved_as_allocated(m, *allocs.values())
    on_gpu0 = sorted(i.placement.start for i in carved.values() if i.parent_uuid == m.uuid(0))
    assert list(range(7)) == on_gpu0
    assert {m.uuid(0), m.uuid(1)} == m.mig_mode_on()
    assert len({i.uuid for i in carved.values()}) == 8

    delete_pods_and_check_destroyed(m)


def one_1g_request(count: int = 1) -> dict[str, Any]:
    selector = {"cel": {"expression": f'device.attributes["{DRIVER}"].profile == "1g.10gb"'}}
    return {"name": "mig", "exactly": {"deviceClassName": f"mig.{DRIVER}", "count": count, "selectors": [selector]}}


def pod_using(name: str, template: str) -> dict[str, Any]:
    """A pod like the demo's whose one container uses a claim made from ``template``."""
    container = {
        "name": "app",
        "image": "registry.k8s.io/e2e-test-images/busybox:1.36.1-1",
        "command": ["sh", "-c", "env | grep GPU_DEVICE; sleep 3600"],
        "resources": {"claims": [{"name": "gpu"}]},
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "restartPolicy": "Never",
            "containers": [container],
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": template}],
        },
    }
