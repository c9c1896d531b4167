"""Restart latency: from a kubelet plugin's process start to a waiting GPU pod's containers running.

``python -m bench.restart_latency [--peer] [--json PATH]``: one control plane (scheduler,
controller-manager) and one real kubelet (``testkit.node.KubeletNode``, fake CRI). Scenarios, each
timed from the new plugin process's start to the pod's phase Running:

- ``restart``: the plugin stopped (SIGTERM), a GPU pod created, the kubelet's failed prepare seen
  (its log line), the plugin started again;
- ``rolling``: a second plugin with another ``--pod-uid`` started while the first serves, a pod created
  at once, the first stopped once the second is registered (what the chart's readiness probe and
  ``maxSurge`` do);
- ``reboot``: the plugin killed (SIGKILL: its sockets stay), a pod bound and its prepare failed, a new
  boot id, the kubelet restarted (it fails the prepare again), the plugin started.

dra-gpu runs with ``--retry-waiting-pods=false`` (before) and ``true`` (after); with ``--peer`` the
Go reference driver (``testkit.peer_process``, its own ``--pod-uid``) runs the same three on the
same kubelet and control plane. Results: docs/perf/2026-11-27-restart-latency.md.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from testkit.claimdata import DRIVER
from testkit.cluster import LocalCluster
from testkit.node import KubeletNode
from testkit.peer_process import PEER_DRIVER, PeerProcess, peer_binary
from testkit.plugin_process import PluginProcess

RESOURCE = "/apis/resource.k8s.io/v1"
PODS = "/api/v1/namespaces/default/pods"
LIMIT_S = 150.0


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


def create_pod(c: LocalCluster, name: str, driver: str) -> None:
    container = {"name": "cuda", "image": "registry.example/cuda:12", "resources": {"claims": [{"name": "gpu"}]}}
    spec = {"containers": [container], "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": driver}]}
    c.api("POST", PODS, {"metadata": {"name": name}, "spec": spec})


def running(c: LocalCluster, name: str) -> bool:
    return bool(c.api("GET", f"{PODS}/{name}").get("status", {}).get("phase") == "Running")


def failed_prepares(node: KubeletNode, name: str) -> int:
    """How often the kubelet has logged a failed prepare of pod ``default/<name>``."""
    lines = node.log_path.read_text(errors="replace").splitlines()
    return sum(1 for line in lines if "Failed to prepare dynamic resources" in line and f'pod="default/{name}"' in line)


def slices(c: LocalCluster, node: str, driver: str) -> int:
    items = c.api("GET", f"{RESOURCE}/resourceslices?fieldSelector=spec.nodeName={node}")["items"]
    return sum(len(s["spec"].get("devices", [])) for s in items if s["spec"]["driver"] == driver)


class _Peer(PeerProcess):
    """The peer with extra flags (``--pod-uid``)."""

    def __init__(self, binary: Path, base: Path, *, kubeconfig: Path, node: str, extra: tuple[str, ...]) -> None:
        super().__init__(binary, base, kubeconfig=kubeconfig, node=node)
        self.extra = extra

    def argv(self) -> list[str]:
        return [*super().argv(), *self.extra]


class Plugin:
    """dra-gpu's plugin or the peer on the node's dirs, behind one start/stop/kill interface."""

    def __init__(self, node: KubeletNode, c: LocalCluster, base: Path, *, peer: Path | None, extra: tuple[str, ...] = ()) -> None:
        self.peer = peer
        self.driver = PEER_DRIVER if peer else DRIVER
        base.mkdir(parents=True, exist_ok=True)
        if peer is not None:
            self.p: Any = _Peer(peer, base, kubeconfig=c.kubeconfig, node=node.name, extra=extra)
            self.p.registrar, self.p.plugins = node.registrar_dir, node.plugins_dir
        else:
            self.p = PluginProcess.on_node(node, base, kubeconfig=c.kubeconfig, extra_args=("--health", "off", *extra))
            self.p.cdi = base / "cdi"
        self.node = node

    def start(self) -> float:
        """Spawn; return the monotonic time just before the spawn."""
        t0 = time.monotonic()
        self.p.start()
        return t0

    def stop(self) -> None:
        self.p.stop()

    def kill(self) -> None:
        proc = self.p.proc
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()

    def registered(self, since: int) -> bool:
        return self.kubelet_registrations() > since

    def kubelet_registrations(self) -> int:
        lines = self.node.log_path.read_text(errors="replace").splitlines()
        return sum(1 for line in lines if "Registered DRA plugin" in line and f'driverName="{self.driver}"' in line)


def scenario_restart(c: LocalCluster, node: KubeletNode, plugin: Plugin, pod: str, *, reboot: bool = False) -> dict[str, float]:
    """Plugin gone, a pod bound and its prepare failed, (reboot: the kubelet restarted and failed it again), plugin started."""
    if reboot:
        plugin.kill()  # power loss: its sockets stay, the slices too (the kubelet wipes them 30 s later)
    else:
        plugin.stop()
    create_pod(c, pod, plugin.driver)
    wait(f"the kubelet's failed prepare of {pod}", lambda: failed_prepares(node, pod) > 0)
    if reboot:
        boot = getattr(plugin.p, "boot_id", None)
        if boot is not None:
            boot.write_text(f"boot-{time.time()}\n")
        seen = failed_prepares(node, pod)
        node.restart_kubelet()  # its start-up wipes the node's slices and syncs the pod again
        wait(f"the restarted kubelet's failed prepare of {pod}", lambda: failed_prepares(node, pod) > seen)
    before = plugin.kubelet_registrations()
    t0 = plugin.start()
    wait("registration", lambda: plugin.registered(before))
    t_reg = time.monotonic() - t0
    wait(f"{pod} Running", lambda: running(c, pod))
    return {"registered_s": round(t_reg, 2), "running_s": round(time.monotonic() - t0, 2)}


def scenario_rolling(c: LocalCluster, node: KubeletNode, old: Plugin, new: Plugin, pod: str) -> dict[str, float]:
    before = new.kubelet_registrations()
    t0 = new.start()
    create_pod(c, pod, new.driver)
    wait("registration", lambda: new.registered(before))
    t_reg = time.monotonic() - t0
    old.stop()
    wait(f"{pod} Running", lambda: running(c, pod))
    return {"registered_s": round(t_reg, 2), "running_s": round(time.monotonic() - t0, 2)}


def run_driver(
    c: LocalCluster, node: KubeletNode, tmp: Path, tag: str, *, peer: Path | None, extra: tuple[str, ...] = ()
) -> dict[str, Any]:
    """The three scenarios for one driver: ``rolling`` (uid 1 → uid 2), then ``restart`` and ``reboot`` of uid 2."""
    first = Plugin(node, c, tmp / f"{tag}-1", peer=peer, extra=(*extra, "--pod-uid", f"uid-{tag}-1"))
    before = first.kubelet_registrations()
    first.start()
    wait(f"{first.driver} registration", lambda: first.registered(before))  # else its line could be taken for the second's
    wait(f"{first.driver} slices", lambda: slices(c, node.name, first.driver) == 8 or None)
    second = Plugin(node, c, tmp / f"{tag}-2", peer=peer, extra=(*extra, "--pod-uid", f"uid-{tag}-2"))
    out: dict[str, Any] = {"rolling": scenario_rolling(c, node, first, second, f"rolling-{tag}")}
    out["restart"] = scenario_restart(c, node, second, f"restart-{tag}")
    out["reboot"] = scenario_restart(c, node, second, f"reboot-{tag}", reboot=True)
    second.stop()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.restart_latency", description=__doc__.splitlines()[0])
    parser.add_argument("--peer", action="store_true", help="also run the Go reference driver")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/dra-gpu-restart-latency"))
    parser.add_argument("--json", type=Path, help="write the results here too")
    args = parser.parse_args(argv)
    tmp: Path = args.workdir / time.strftime("%Y%m%d-%H%M%S")
    tmp.mkdir(parents=True)
    results: dict[str, Any] = {}
    with (
        LocalCluster(with_scheduler=True, with_controller_manager=True, log_dir=tmp / "k8s-logs") as c,
        KubeletNode(c, "node-a", tmp / "node-a") as node,
    ):
        setup_driver(c, DRIVER)
        setup_driver(c, PEER_DRIVER)
        accounts = "/api/v1/namespaces/default/serviceaccounts"
        wait("the default ServiceAccount", lambda: c.api("GET", accounts)["items"] or None)
        for tag, retry in (("before", "false"), ("after", "true")):
            results[f"dra-gpu {tag}"] = run_driver(c, node, tmp, tag, peer=None, extra=("--retry-waiting-pods", retry))
            print(json.dumps(results), flush=True)
        if args.peer:
            results["peer"] = run_driver(c, node, tmp, "peer", peer=peer_binary().path)
    print(json.dumps(results, indent=2))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
