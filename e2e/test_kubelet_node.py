"""The real kubelet drives our plugin: registration, scheduling, prepare, CDI ids to the runtime, unprepare.

Control plane (etcd, apiserver, scheduler, controller-manager) and the kubelet are upstream
v1.36 binaries built by testkit/go/build.sh; only the container runtime is fake (fakecri records
what the kubelet asked it to create).  The plugin is our daemon, publishing 8 fake H100s.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from testkit.claimdata import DRIVER
from testkit.cluster import ApiError, LocalCluster
from testkit.node import KubeletNode
from testkit.plugin_process import PluginProcess

T = TypeVar("T")
RESOURCE = "/apis/resource.k8s.io/v1"
PODS = "/api/v1/namespaces/default/pods"
TIMEOUT = 60.0
CDI_KIND = f"k8s.{DRIVER}/claim"


def wait_until(what: str, probe: Callable[[], T | None], diagnostics: Callable[[], str], timeout: float = TIMEOUT) -> T:
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}\n{diagnostics()}")
        time.sleep(0.25)


def get_or_none(c: LocalCluster, path: str) -> dict[str, Any] | None:
    try:
        return c.api("GET", path)
    except ApiError as err:
        if err.status == 404:
            return None
        raise


def events(plugin: PluginProcess, name: str) -> list[dict[str, Any]]:
    return [e for e in plugin.logs() if e.get("event") == name]


def resolve_cdi(cdi_root: Path, cdi_id: str) -> tuple[Path, dict[str, Any]]:
    """The (spec file, device entry) a CDI-aware runtime would pick for ``vendor/class=name``."""
    kind, _, name = cdi_id.partition("=")
    hits = []
    for path in sorted(cdi_root.glob("*.json")):
        spec = json.loads(path.read_text())
        hits += [(path, d) for d in spec.get("devices", []) if spec.get("kind") == kind and d.get("name") == name]
    files = sorted(p.name for p in cdi_root.glob("*"))
    assert len(hits) == 1, f"CDI id {cdi_id} resolves to {len(hits)} devices in {cdi_root} (files: {files})"
    return hits[0]


class Harness:
    """A cluster, its kubelet nodes with one plugin each, and the diagnostics for failures."""

    def __init__(self, c: LocalCluster, tmp: Path) -> None:
        self.c = c
        self.tmp = tmp
        self.nodes: dict[str, KubeletNode] = {}
        self.plugins: dict[str, PluginProcess] = {}

    def diagnostics(self) -> str:
        pods = self.c.api("GET", PODS)["items"]
        out = [f"pods: {json.dumps({p['metadata']['name']: p.get('status') for p in pods})[:3000]}"]
        for name, node in self.nodes.items():
            plugin = self.plugins.get(name)
            if plugin is not None and plugin.log.exists():
                tail = "\n".join(plugin.log.read_text().splitlines()[-25:])
                out.append(f"--- {name}: plugin log {plugin.log} (last 25 lines):\n{tail}")
            out.append(f"--- {name}: runtime records: {json.dumps(node.cdi_records())[:2000]}\n{node.diagnostics()}")
        out.append(f"(control-plane logs in {self.c.log_dir})")
        return "\n".join(out)

    def start_plugin(self, node: KubeletNode, extra_args: tuple[str, ...] = ()) -> PluginProcess:
        """Our daemon on ``node``'s kubelet dirs, publishing 8 fake H100s; waits until the kubelet registered it."""
        base = self.tmp / f"plugin-{node.name}"
        base.mkdir()
        plugin = PluginProcess(
            base, kubeconfig=self.c.kubeconfig, node=node.name, profile="h100x8", publish=True, extra_args=extra_args
        )
        plugin.registrar = node.registrar_dir
        plugin.plugin_dir = node.plugins_dir / DRIVER
        plugin.cdi = base / "cdi"
        self.plugins[node.name] = plugin
        plugin.start()
        wait_until(
            f"the kubelet of {node.name} to register the plugin", lambda: events(plugin, "plugin_registered"), self.diagnostics
        )
        wait_until(
            f"the kubelet of {node.name} to log the registration (v1.DRAPlugin)",
            lambda: any(
                "Registered DRA plugin" in line and f'driverName="{DRIVER}"' in line and 'chosenService="v1.DRAPlugin"' in line
                for line in node.log_path.read_text().splitlines()
            ),
            self.diagnostics,
        )
        slices = f"{RESOURCE}/resourceslices?fieldSelector=spec.nodeName={node.name}"

        def devices() -> int:
            return sum(
                len(s["spec"].get("devices", [])) for s in self.c.api("GET", slices)["items"] if s["spec"]["driver"] == DRIVER
            )

        wait_until(f"8 devices published for {node.name}", lambda: devices() == 8, self.diagnostics)
        return plugin

    def create_class_and_template(self) -> None:
        selector = {"cel": {"expression": f'device.driver == "{DRIVER}"'}}
        self.c.api("POST", f"{RESOURCE}/deviceclasses", {"metadata": {"name": DRIVER}, "spec": {"selectors": [selector]}})
        one_gpu = {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": DRIVER}}]}}
        template = {"metadata": {"name": "one-gpu"}, "spec": {"spec": one_gpu}}
        self.c.api("POST", f"{RESOURCE}/namespaces/default/resourceclaimtemplates", template)
        wait_until(
            "the default ServiceAccount",
            lambda: get_or_none(self.c, "/api/v1/namespaces/default/serviceaccounts/default"),
            self.diagnostics,
        )

    def create_gpu_pod(self, name: str, node: str | None = None) -> None:
        container = {"name": "cuda", "image": "registry.example/cuda:12", "resources": {"claims": [{"name": "gpu"}]}}
        spec: dict[str, Any] = {
            "containers": [container],
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}],
        }
        if node is not None:
            spec["nodeSelector"] = {"kubernetes.io/hostname": node}
        self.c.api("POST", PODS, {"metadata": {"name": name}, "spec": spec})

    def wait_running(self, name: str, timeout: float = TIMEOUT) -> dict[str, Any]:
        def running() -> dict[str, Any] | None:
            pod = self.c.api("GET", f"{PODS}/{name}")
            return pod if pod.get("status", {}).get("phase") == "Running" else None

        return wait_until(f"pod {name} to be Running", running, self.diagnostics, timeout)

    def expected_cdi_id(self, pod: dict[str, Any]) -> tuple[str, str]:
        """(claim UID, the CDI id the runtime must get) for the pod's single allocated GPU."""
        (claim_status,) = pod["status"]["resourceClaimStatuses"]
        claim = self.c.api("GET", f"{RESOURCE}/namespaces/default/resourceclaims/{claim_status['resourceClaimName']}")
        (result,) = claim["status"]["allocation"]["devices"]["results"]
        assert (result["driver"], result["pool"]) == (DRIVER, pod["spec"]["nodeName"]), result
        uid: str = claim["metadata"]["uid"]
        return uid, f"{CDI_KIND}={uid}-{result['device']}"

    def our_device_status(self, pod: dict[str, Any]) -> list[dict[str, Any]]:
        """Our driver's ``status.devices`` entries of the pod's single claim ([] once the claim is gone)."""
        (claim_status,) = pod["status"]["resourceClaimStatuses"]
        claim = get_or_none(self.c, f"{RESOURCE}/namespaces/default/resourceclaims/{claim_status['resourceClaimName']}")
        return [d for d in (claim or {}).get("status", {}).get("devices", []) if d["driver"] == DRIVER]

    def assert_runtime_got(self, node: KubeletNode, pod: str, cdi_id: str) -> None:
        records = [r for r in node.cdi_records() if r["pod_name"] == pod]
        assert records, f"the runtime of {node.name} saw no CreateContainer for pod {pod}\n{self.diagnostics()}"
        assert all(r["cdi_devices"] == [cdi_id] for r in records), f"expected CDI ids [{cdi_id}]\n{self.diagnostics()}"


@contextmanager
def harness(tmp: Path, *names: str) -> Iterator[Harness]:
    """Control plane with scheduler and controller-manager, one KubeletNode per name."""
    with LocalCluster(with_scheduler=True, with_controller_manager=True, log_dir=tmp / "k8s-logs") as c:
        h = Harness(c, tmp)
        try:
            for name in names:
                h.nodes[name] = KubeletNode(c, name, tmp / name)
                h.nodes[name].start()
            yield h
            for node in h.nodes.values():
                node.check_alive()
        finally:
            for plugin in h.plugins.values():
                plugin.stop()
            for node in h.nodes.values():
                node.stop()


def test_kubelet_prepares_claim_via_plugin_and_runtime_gets_cdi_ids(tmp_path: Path) -> None:
    with harness(tmp_path, "node-a") as h:
        node = h.nodes["node-a"]
        plugin = h.start_plugin(node)
        h.create_class_and_template()
        h.create_gpu_pod("cuda")

        # The real scheduler allocates, the kubelet prepares through our plugin and runs the pod.
        pod = h.wait_running("cuda")
        assert pod["spec"]["nodeName"] == "node-a"
        uid, expected = h.expected_cdi_id(pod)

        # The runtime was told to inject exactly our CDI device, and the id resolves in our spec.
        h.assert_runtime_got(node, "cuda", expected)
        spec_file, device = resolve_cdi(plugin.cdi, expected)
        assert spec_file.name == f"k8s.{DRIVER}-claim_{uid}.json"
        assert device["containerEdits"], f"empty container edits for {expected}: {device}"
        prepared = [e for e in events(plugin, "device_prepared") if expected in e.get("cdi_device_ids", [])]
        assert prepared, f"plugin logged no device_prepared for {expected}\n{h.diagnostics()}"
        assert "Calling NodePrepareResources rpc" in node.log_path.read_text()

        # The plugin reported the device in the claim's status.devices: the GPU UUID the container's CDI
        # edits name, the device and pool of the allocation, a Ready condition.
        (status,) = wait_until("our status.devices entry", lambda: h.our_device_status(pod), h.diagnostics)
        env = dict(e.split("=", 1) for e in device["containerEdits"]["env"])
        gpu = expected.rsplit(f"{uid}-", 1)[1]
        assert (status["pool"], status["device"]) == ("node-a", gpu), status
        assert status["data"]["uuid"] == env[f"GPU_DEVICE_{gpu.upper().replace('-', '_')}_UUID"], (status, env)
        assert status["data"]["uuid"].startswith("GPU-") and status["data"]["cdiDeviceIDs"] == [expected]
        assert [(c["type"], c["status"]) for c in status["conditions"]] == [("Ready", "True")]

        # Deleting the pod makes the kubelet unprepare: the claim's CDI spec goes away.
        h.c.api("DELETE", f"{PODS}/cuda")
        wait_until(
            "NodeUnprepareResources (claim_unprepared, CDI spec removed)",
            lambda: not spec_file.exists() and any(e.get("claim_uid") == uid for e in events(plugin, "claim_unprepared")),
            h.diagnostics,
        )
        wait_until("pod cuda to be gone", lambda: get_or_none(h.c, f"{PODS}/cuda") is None, h.diagnostics)
        assert "Calling NodeUnprepareResource rpc" in node.log_path.read_text()
        # Unprepare removed our entry (or the claim, made for the pod, was deleted first).
        removal = {"device_status_removed", "device_status_claim_gone"}

        def removed() -> bool:
            logged = any(e.get("claim_uid") == uid and e["event"] in removal for e in plugin.logs())
            return logged and not h.our_device_status(pod)

        wait_until("our status.devices entry removed", removed, h.diagnostics)
        assert not list(plugin.cdi.glob(f"k8s.{DRIVER}-claim_*.json")), f"CDI specs left: {plugin.cdi_files()}"


def test_two_kubelets_side_by_side(tmp_path: Path) -> None:
    """node-a and node-b on one machine: own ports, sockets, plugins; each runtime sees only its pod."""
    with harness(tmp_path, "node-a", "node-b") as h:
        a, b = h.nodes["node-a"], h.nodes["node-b"]
        assert len({a.port, a.healthz_port, b.port, b.healthz_port}) == 4
        if a.namespaced and b.namespaced:  # the hard-coded device-plugin dir is per node
            assert (a.workdir / "device-plugins" / "kubelet.sock").exists()
            assert (b.workdir / "device-plugins" / "kubelet.sock").exists()
        plugins = {n.name: h.start_plugin(n) for n in (a, b)}
        h.create_class_and_template()
        for n in (a, b):
            h.create_gpu_pod(f"cuda-{n.name}", node=n.name)
        for n in (a, b):
            pod = h.wait_running(f"cuda-{n.name}")
            _, expected = h.expected_cdi_id(pod)
            h.assert_runtime_got(n, f"cuda-{n.name}", expected)
            assert {r["pod_name"] for r in n.cdi_records()} == {f"cuda-{n.name}"}
            resolve_cdi(plugins[n.name].cdi, expected)


def claim_prepares(plugin: PluginProcess) -> dict[str, int]:
    """How many times each claim was freshly prepared (not answered from the checkpoint), over all runs."""
    counts: dict[str, int] = {}
    for e in events(plugin, "device_prepared"):
        counts[e["claim_uid"]] = counts.get(e["claim_uid"], 0) + 1
    return counts


def test_plugin_killed_mid_run_converges_without_double_prepare_or_leaks(tmp_path: Path) -> None:
    """kill -9 the plugin with a pod running and again in the middle of a prepare; restart it each time.

    The kubelet re-registers it, running pods keep their devices, new pods get other devices,
    every claim is prepared exactly once, and after the pods are deleted nothing is left:
    no CDI spec, no checkpoint entry.
    """
    with harness(tmp_path, "node-a") as h:
        node = h.nodes["node-a"]
        plugin = h.start_plugin(node)
        h.create_class_and_template()
        h.create_gpu_pod("first")
        _, first_id = h.expected_cdi_id(h.wait_running("first"))

        # 1. kill -9 while a pod runs, restart: the kubelet re-registers the new instance.
        registered = len(events(plugin, "plugin_registered"))
        plugin.kill9()
        plugin.start()
        wait_until("re-registration", lambda: len(events(plugin, "plugin_registered")) > registered, h.diagnostics)
        h.create_gpu_pod("second")
        _, second_id = h.expected_cdi_id(h.wait_running("second"))
        assert first_id != second_id
        resolve_cdi(plugin.cdi, first_id)  # the running pod's spec survived the kill

        # 2. kill -9 in the middle of a prepare (CDI written, checkpoint not written), restart. A full
        # GPU's only side effect is its CDI spec, so no PrepareStarted entry precedes it: the restart
        # finds a spec no claim owns (never answered to the kubelet, so no container has it) and
        # removes it; the kubelet's retry prepares the claim once.
        plugin.stop()
        registered = len(events(plugin, "plugin_registered"))
        plugin.start(crash_at="after_cdi_written")
        wait_until("re-registration", lambda: len(events(plugin, "plugin_registered")) > registered, h.diagnostics)
        h.create_gpu_pod("third")
        wait_until("the plugin to die in prepare", lambda: plugin.proc is not None and plugin.proc.poll() == -9, h.diagnostics)
        plugin.start()  # its registration prompts the kubelet to retry "third" now, not at its resync 60-90 s later
        third_uid, third_id = h.expected_cdi_id(h.wait_running("third"))
        assert any(e.get("claim_uid") == third_uid for e in events(plugin, "cdi_orphan_removed"))
        resolve_cdi(plugin.cdi, third_id)

        counts = claim_prepares(plugin)
        assert 3 == len(counts) and {1} == set(counts.values()), f"prepares per claim: {counts}"
        assert 3 == len(plugin.cdi_files())

        for pod in ("first", "second", "third"):
            h.c.api("DELETE", f"{PODS}/{pod}")

        # Unprepare removes a claim's CDI spec before it saves the checkpoint: wait for both.
        def checkpoint_claims() -> dict[str, Any]:
            claims: dict[str, Any] = json.loads((plugin.plugin_dir / "checkpoint.json").read_text())["data"]["claims"]
            return claims

        wait_until("all claims unprepared", lambda: not plugin.cdi_files() and not checkpoint_claims(), h.diagnostics)
        assert {} == checkpoint_claims()
