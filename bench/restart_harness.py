"""What the restart-latency benches share: a kubelet plugin (ours or the Go peer) on a node's dirs, pods, waits.

``bench.restart_latency`` (the fake-CRI node, ``testkit.node.KubeletNode``) and ``bench.reboot_containerd``
(a real containerd node, ``testkit.runtime_node.ContainerdNode``) start and stop the plugins through
`Plugin`, which spawns both drivers without waiting for them (so a scenario goes on at the same moment
after the spawn for either) and reads their registrations from the kubelet's log.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from testkit.claimdata import DRIVER
from testkit.cluster import LocalCluster
from testkit.node import KubeletNode
from testkit.peer_process import PEER_DRIVER, PeerProcess
from testkit.plugin_process import PluginProcess

RESOURCE = "/apis/resource.k8s.io/v1"
PODS = "/api/v1/namespaces/default/pods"
LIMIT_S = 150.0
FAKE_IMAGE = "registry.example/cuda:12"
"""The fake CRI runs any image name."""


def wait(what: str, probe: Callable[[], Any], timeout: float = LIMIT_S) -> Any:
    deadline = time.monotonic() + timeout
    while (value := probe()) is None or value is False:
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.1)
    return value


def setup_driver(c: LocalCluster, driver: str) -> None:
    """A DeviceClass and a one-device ResourceClaimTemplate named ``driver``."""
    selector = {"cel": {"expression": f'device.driver == "{driver}"'}}
    c.api("POST", f"{RESOURCE}/deviceclasses", {"metadata": {"name": driver}, "spec": {"selectors": [selector]}})
    one = {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": driver}}]}}
    c.api("POST", f"{RESOURCE}/namespaces/default/resourceclaimtemplates", {"metadata": {"name": driver}, "spec": {"spec": one}})


def create_pod(c: LocalCluster, name: str, driver: str, image: str = FAKE_IMAGE) -> None:
    container = {"name": "cuda", "image": image, "imagePullPolicy": "IfNotPresent", "resources": {"claims": [{"name": "gpu"}]}}
    spec = {"containers": [container], "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": driver}]}
    c.api("POST", PODS, {"metadata": {"name": name}, "spec": spec})


def running(c: LocalCluster, name: str) -> bool:
    return bool(c.api("GET", f"{PODS}/{name}").get("status", {}).get("phase") == "Running")


def delete_pods(c: LocalCluster, names: list[str], timeout: float = LIMIT_S) -> None:
    """Delete the pods and wait until they are gone: a graceful delete, so the kubelet has stopped their
    containers and unprepared their claims before it removes them (0 would remove them at once)."""
    for name in names:
        c.api("DELETE", f"{PODS}/{name}?gracePeriodSeconds=1")

    def gone() -> bool:
        left = {p["metadata"]["name"] for p in c.api("GET", PODS)["items"]}
        return not left & set(names)

    wait(f"pods {names} gone", gone, timeout)


def failed_prepares(kubelet_log: Path, name: str) -> int:
    """How often the kubelet has logged a failed prepare of pod ``default/<name>``."""
    lines = kubelet_log.read_text(errors="replace").splitlines()
    return sum(1 for line in lines if "Failed to prepare dynamic resources" in line and f'pod="default/{name}"' in line)


def slices(c: LocalCluster, node: str, driver: str) -> int:
    items = c.api("GET", f"{RESOURCE}/resourceslices?fieldSelector=spec.nodeName={node}")["items"]
    return sum(len(s["spec"].get("devices", [])) for s in items if s["spec"]["driver"] == driver)


@dataclass(frozen=True, slots=True)
class NodeDirs:
    """Where a plugin of node ``name`` meets its kubelet: the registry and plugins dirs, the kubelet's log.

    ``cdi`` and ``boot_id``: the node's own (a containerd node reads CDI specs there and changes its boot id
    on a reboot); None, the plugin's own under its base dir (the fake CRI reads no CDI spec).
    """

    name: str
    registrar: Path
    plugins: Path
    kubelet_log: Path
    cdi: Path | None = None
    boot_id: Path | None = None

    @classmethod
    def of(cls, node: KubeletNode) -> NodeDirs:
        return cls(node.name, node.registrar_dir, node.plugins_dir, node.log_path)


class _Peer(PeerProcess):
    """The peer with extra flags (``--pod-uid``)."""

    def __init__(self, binary: Path, base: Path, *, kubeconfig: Path, node: str, extra: tuple[str, ...]) -> None:
        super().__init__(binary, base, kubeconfig=kubeconfig, node=node)
        self.extra = extra

    def argv(self) -> list[str]:
        return [*super().argv(), *self.extra]


class Plugin:
    """dra-gpu's plugin or the peer on the node's dirs, behind one start/stop/kill interface."""

    def __init__(self, node: NodeDirs, c: LocalCluster, base: Path, *, peer: Path | None, extra: tuple[str, ...] = ()) -> None:
        self.peer = peer
        self.driver = PEER_DRIVER if peer else DRIVER
        base.mkdir(parents=True, exist_ok=True)
        if peer is not None:
            self.p: Any = _Peer(peer, base, kubeconfig=c.kubeconfig, node=node.name, extra=extra)
            self.p.registrar, self.p.plugins = node.registrar, node.plugins
        else:
            self.p = PluginProcess(
                base,
                kubeconfig=c.kubeconfig,
                node=node.name,
                profile="h100x8",
                publish=True,
                registrar_dir=node.registrar,
                plugins_dir=node.plugins,
                extra_args=("--health", "off", *extra),
            )
            if node.boot_id is not None:
                self.p.boot_id = node.boot_id
        self.p.cdi = node.cdi or base / "cdi"
        self.node = node
        self.failure: RuntimeError | None = None
        self.starter: threading.Thread | None = None

    def start(self) -> float:
        """Spawn and return at once (ours: ``PluginProcess.start`` waits for its ``plugin_started`` on a
        thread, so both drivers' scenarios go on at the same moment); the monotonic time just before."""
        t0 = time.monotonic()
        if self.peer is not None:
            self.p.start()
            return t0
        self.failure = None

        def spawn() -> None:
            try:
                self.p.start()
            except RuntimeError as e:  # it exited or never started: registered() raises it
                self.failure = e

        self.starter = threading.Thread(target=spawn, name="plugin-start", daemon=True)
        self.starter.start()
        return t0

    def stop(self) -> None:
        if self.starter is not None:
            self.starter.join()
        self.p.stop()

    def kill(self) -> None:
        """SIGKILL, as a power cut: its sockets stay."""
        if self.starter is not None:
            self.starter.join()
        proc = self.p.proc
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()

    def registered(self, since: int) -> bool:
        if self.failure is not None:
            raise self.failure
        return self.kubelet_registrations() > since

    def kubelet_registrations(self) -> int:
        lines = self.node.kubelet_log.read_text(errors="replace").splitlines()
        return sum(1 for line in lines if "Registered DRA plugin" in line and f'driverName="{self.driver}"' in line)
