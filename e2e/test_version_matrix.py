"""Every supported Kubernetes release as a platform team runs it: default feature gates and API versions.

For the default release (``testkit/go/K8S_VERSION``) and each release of ``testkit/go/K8S_MATRIX``: one control
plane started stock (no feature gate or API version changed), one real kubelet on the fake
runtime, the chart installed by Helm against that server (so it adapts to the server's version),
and our plugin publishing 8 fake H100s, one of them with a MIG instance made beforehand. Each
release must:

- publish: every device stored as sent, no field dropped;
- schedule with CEL: a demo pod with a ``productName`` selector runs with our CDI device, and is
  unprepared when deleted;
- MIG: static MIG everywhere (the instance is published, allocated and prepared); dynamic MIG
  where the release serves shared counters by default (1.36+), and below that the chart refuses
  ``mig.strategy=dynamic`` at install and the plugin refuses to publish, saying why in a Node Event;
- sharing: time-slicing through a claim config everywhere;
- explain agreement: ``dra-gpu explain`` gives the Pending pod's reason, and the release's own
  allocator (``celdiff`` built against it, with its default gates) agrees with dra-gpu's simulator on
  every demo workload over the node layouts the release serves.

``FEATURES`` is the one table of what each release serves by default; the README's version table
says the same in words.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from dra_driver.core.cdi import cdi_device_id
from dra_driver.core.mig import MigStrategy
from dra_driver.sources.fake import FakeGpuSource
from e2e.test_kubelet_node import events, wait_until
from e2e.test_mig_scheduling import CLAIMS, DEMO, NODE, NS, PODS, TEMPLATES, Allocation, MigNode
from testkit.claimdata import DRIVER
from testkit.cluster import K8S_VERSION, LocalCluster, matrix_versions, minor_of, wait_for_matrix_build
from testkit.explain_cli import explain_json
from testkit.helm_cli import CHART, Helm
from testkit.manifests import apply_file
from testkit.node import KubeletNode
from testkit.oracle.corpus import chart_classes, demo_workloads, inventory
from testkit.oracle.oracle import Celdiff, allocate_case, exact_quantities, python_allocate
from testkit.plugin_process import PluginProcess

REPO = Path(__file__).resolve().parents[1]
VERSIONS = [K8S_VERSION, *matrix_versions()]
STATIC_MIG_GPU = 7
TIMEOUT = 90.0


@dataclass(frozen=True)
class Served:
    """What a release serves with its default feature gates (the parts dra-gpu uses)."""

    counters: bool  # DRAPartitionableDevices: dynamic MIG
    consumable: bool  # DRAConsumableCapacity: GPUs shared by capacity
    extended_resources: bool  # DRAExtendedResource: nvidia.com/gpu on DeviceClasses


def served(version: str) -> Served:
    """Beta and on by default from 1.36 (alpha and off in 1.34 and 1.35)."""
    on = minor_of(version) >= 36
    return Served(counters=on, consumable=on, extended_resources=on)


@dataclass
class Release:
    """One release's cluster, node, plugin and Helm."""

    version: str
    m: MigNode
    helm: Helm
    tmp: Path

    @property
    def served(self) -> Served:
        return served(self.version)


def sim(plugin: PluginProcess, *args: str) -> None:
    """The mig-parted stand-in on the plugin's simulator state (as an admin would, before the driver runs)."""
    plugin.sim_state.parent.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "dra_driver.mig_backends.sim", "--state", str(plugin.sim_state)]
    cmd += ["--fake-gpus", "h100x8", "--node-name", NODE, "--boot-id", plugin.boot_id.read_text().strip(), *args]
    subprocess.run(cmd, cwd=REPO, check=True, capture_output=True, timeout=60)


@pytest.fixture(scope="module", params=VERSIONS)
def release(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Release]:
    version: str = request.param
    if version != K8S_VERSION:
        wait_for_matrix_build()  # make test builds the matrix releases in the background
    tmp = tmp_path_factory.mktemp(f"k8s-{version}")
    with (
        LocalCluster(stock=True, version=version, with_scheduler=True, with_controller_manager=True, log_dir=tmp / "logs") as c,
        KubeletNode(c, NODE, tmp / NODE) as node,
    ):
        plugin = PluginProcess.on_node(
            node,
            tmp / "plugin",
            kubeconfig=c.kubeconfig,
            extra_args=("--mig", "static", "--fake-mig-latency", "zero", "--gc-interval", "0"),
        )
        sim(plugin, "mode", "--gpu", str(STATIC_MIG_GPU), "on", "--initial")
        sim(plugin, "carve", "--gpu", str(STATIC_MIG_GPU), "--profile", "1g.10gb")
        m = MigNode(c, node, plugin, FakeGpuSource("h100x8", NODE).gpus())
        plugin.start()
        try:
            wait_until("the kubelet to register the plugin", lambda: events(plugin, "plugin_registered"), m.diagnostics)
            wait_until("8 devices published", lambda: len(m.published()) == 8, m.diagnostics)
            helm = Helm.built(tmp / "helm-home")
            helm.install(c, "kubeletPlugin.enabled=false", "mig.strategy=static")
            apply_file(c, DEMO / "namespace.yaml")
            wait_until(
                f"the default ServiceAccount of {NS}",
                lambda: c.api("GET", f"/api/v1/namespaces/{NS}/serviceaccounts")["items"],
                m.diagnostics,
            )
            yield Release(version, m, helm, tmp)
            node.check_alive()
        finally:
            plugin.stop()


def delete_pods_and_wait_unprepared(r: Release) -> None:
    """Delete every pod, claim and template of the demo namespace; wait until no CDI spec is left."""
    c = r.m.c
    for pod in c.api("GET", PODS)["items"]:
        c.api("DELETE", f"{PODS}/{pod['metadata']['name']}")
    wait_until("the pods to be gone", lambda: not c.api("GET", PODS)["items"], r.m.diagnostics, TIMEOUT)
    wait_until("every claim unprepared (no CDI spec)", lambda: not r.m.plugin.cdi_files(), r.m.diagnostics, TIMEOUT)
    for path in (CLAIMS, TEMPLATES):
        for obj in c.api("GET", path)["items"]:
            c.api("DELETE", f"{path}/{obj['metadata']['name']}")


def test_the_server_is_the_release_and_stores_every_device_as_sent(release: Release) -> None:
    assert release.m.c.api("GET", "/version")["gitVersion"] == release.version
    published = release.m.published()
    mig = [n for n in published if n.startswith(f"gpu-{STATIC_MIG_GPU}-mig-")]
    assert sorted(n for n in published if n not in mig) == [f"gpu-{i}" for i in range(7)]
    assert len(mig) == 1, f"the static MIG instance is published as one device: {sorted(published)}"
    problems = [e for e in release.m.plugin.logs() if e.get("event") in ("slice_fields_dropped", "slice_pool_refused")]
    assert not problems, problems


def test_a_cel_selected_gpu_runs_and_is_unprepared_when_the_pod_goes(release: Release) -> None:
    apply_file(release.m.c, DEMO / "gpu-h100.yaml")
    (alloc,) = release.m.run("gpu-h100").values()
    assert alloc.devices[0].startswith("gpu-") and "-mig-" not in alloc.devices[0]
    spec = release.m.plugin.cdi / f"k8s.{DRIVER}-claim_{alloc.uid}.json"
    assert spec.exists(), release.m.plugin.cdi_files()
    delete_pods_and_wait_unprepared(release)
    assert any(e.get("claim_uid") == alloc.uid for e in events(release.m.plugin, "claim_unprepared"))


def test_a_static_mig_instance_is_allocated_and_prepared(release: Release) -> None:
    apply_file(release.m.c, DEMO / "mig-1g.yaml")
    (alloc,) = release.m.run("mig-1g").values()
    (device,) = alloc.devices
    assert device.startswith(f"gpu-{STATIC_MIG_GPU}-mig-1g10gb-"), device
    env = release.m.container_env(alloc, device)
    (instance,) = release.m.carved()[release.m.uuid(STATIC_MIG_GPU)]
    assert instance.uuid in env.values(), env
    delete_pods_and_wait_unprepared(release)
    assert release.m.carved()[release.m.uuid(STATIC_MIG_GPU)] == [instance], "static MIG instances are the admin's: kept"


def test_time_slicing_from_a_claim_config_reaches_both_pods(release: Release) -> None:
    m = release.m
    apply_file(m.c, DEMO / "shared-claim.yaml")
    pods = [m.wait_running(name) for name in ("shared-1", "shared-2")]
    claim = m.c.api("GET", f"{CLAIMS}/shared-gpu")
    alloc = Allocation("shared-1", pods[0]["metadata"]["uid"], claim, claim["status"]["allocation"]["devices"]["results"])
    (device,) = alloc.devices
    cdi_id = cdi_device_id(DRIVER, alloc.uid, device)
    for pod in pods:  # one claim, one GPU, the same CDI device in both pods (distinct: see SharingCluster.runtime_got)
        records = [r for r in m.node.cdi_records() if r["pod_uid"] == pod["metadata"]["uid"]]
        assert records and all(set(r["cdi_devices"]) == {cdi_id} for r in records), records
    env = m.container_env(alloc, alloc.devices[0])
    assert "Long" in [v for k, v in env.items() if k.endswith("TIMESLICE_INTERVAL")], env
    delete_pods_and_wait_unprepared(release)


def test_a_pending_pod_is_explained_and_the_releases_allocator_agrees(release: Release) -> None:
    c = release.m.c
    apply_file(c, DEMO / "unsatisfiable.yaml")

    def unschedulable() -> str | None:
        conds = c.api("GET", f"{PODS}/unsatisfiable").get("status", {}).get("conditions") or []
        return next((x.get("message") for x in conds if x["type"] == "PodScheduled" and x["status"] == "False"), None)

    message = wait_until("the scheduler to report the pod unschedulable", unschedulable, release.m.diagnostics, TIMEOUT)
    assert "cannot allocate all claims" in message, message
    _, doc = explain_json(c.kubeconfig, "unsatisfiable", NS)
    (req,) = doc["requests"]
    assert req["node"] is None and req["devices"] == [], req
    assert "request gpu needs 1 device; at most 0 usable on one node" in req["reason"], req
    verdicts = {c["device"]: c["verdict"] for c in req["candidates"] if c["device"].startswith(f"{NODE}/gpu-")}
    assert verdicts and set(verdicts.values()) == {"no-match"}, verdicts
    delete_pods_and_wait_unprepared(release)

    # The release's own allocator on the demo workloads, over the layouts it serves.
    layouts: list[tuple[str, ...]] = [("h100x8",), ("h100x8", "--mig", "static", "--fake-mig-layout", "3g.40gb,2g.20gb,1g.10gb")]
    if release.served.counters:
        layouts.append(("h100x8", "--mig", "dynamic"))
    if release.served.consumable:
        layouts.append(("h100x8", "--sharing", "consumable"))
    oracle = Celdiff(release.version)
    try:
        compared = 0
        for layout in layouts:
            slices = inventory(layout[0], *layout[1:], node="node-a")
            for label, claims in demo_workloads():
                case = allocate_case(node="node-a", slices=slices, classes=chart_classes(), claims=claims, allocated=[])
                go = exact_quantities(oracle.ask(case))
                assert python_allocate(case, minor=minor_of(release.version)) == go, f"{release.version} {layout} {label}"
                compared += 1
    finally:
        oracle.close()
    assert compared >= 20


def test_dynamic_mig_is_served_or_refused_with_the_reason(release: Release) -> None:
    """Last in the module: restarts the plugin with dynamic MIG."""
    m, c = release.m, release.m.c
    render = release.helm.run(
        "template",
        "x",
        str(CHART),
        "--kube-version",
        release.version.removeprefix("v"),
        "--set",
        "mig.strategy=dynamic",
        check=False,
    )
    m.plugin.stop()
    m.plugin.sim_state.unlink()  # the admin undoes the static layout: GPUs as they came
    m.plugin.extra_args = ("--mig", MigStrategy.DYNAMIC.value, "--fake-mig-latency", "zero", "--gc-interval", "0")
    m.plugin.start()
    if release.served.counters:
        assert render.returncode == 0, render.stderr
        wait_until("the dynamic MIG catalogue", lambda: len(m.published()) > 100, m.diagnostics, TIMEOUT)
        apply_file(c, DEMO / "mig-1g.yaml")
        m.run("mig-1g")
        assert [i.profile_name for insts in m.carved().values() for i in insts] == ["1g.10gb"]
        delete_pods_and_wait_unprepared(release)
        assert not m.carved(), "the carved instance is destroyed at unprepare"
        return
    # 1.34 cannot hold counter sets in their own slices at all; 1.35 can, behind the alpha gate.
    why = "needs Kubernetes 1.35 or newer" if minor_of(release.version) < 35 else "needs the DRAPartitionableDevices feature gate"
    assert render.returncode != 0 and why in render.stderr, render.stderr

    def refusal() -> dict[str, Any] | None:
        return next((e for e in m.plugin.logs() if e.get("event") == "slice_pool_refused"), None)

    refused = wait_until("the plugin to refuse the pool", refusal, m.diagnostics, TIMEOUT)
    why = "which need Kubernetes >= 1.35" if minor_of(release.version) < 35 else "the feature gate DRAPartitionableDevices is off"
    assert why in refused["error"], refused
    wait_until("no device of ours left in the API server", lambda: not m.published(), m.diagnostics, TIMEOUT)

    def node_event() -> dict[str, Any] | None:
        items = c.api("GET", "/api/v1/namespaces/default/events")["items"]
        return next((e for e in items if e.get("reason") == "DevicesNotPublished"), None)

    event = wait_until("a DevicesNotPublished Node Event", node_event, m.diagnostics, TIMEOUT)
    assert event["type"] == "Warning" and event["involvedObject"]["name"] == NODE, event
    assert event["message"] == refused["error"]
