"""Reboot latency on a real node: from the plugin's process start to a GPU pod's container running again.

``python -m bench.restart_latency --runtime containerd [--peer] [--repeat N] [--orders ...] [--json PATH]``
runs this instead of the fake-CRI scenarios. One control plane (scheduler, controller-manager) and one
``testkit.runtime_node.ContainerdNode``: the upstream kubelet on containerd and runc, CDI specs read from
the node's ``/var/run/cdi``. Each driver in turn (ours, then the Go peer, per round): its plugin started as
a host process on the node's dirs (``--pod-uid`` fixed: a plugin pod keeps its UID across a reboot), a GPU
pod (the pause image, one claim) running, then the node powered off (``ContainerdNode.power_off``: the
plugin SIGKILLed as a power cut does, its sockets left on /var/lib; the kubelet and containerd stopped,
every container killed, /run emptied, a new boot id; the plugin's checkpoint and the kubelet's survive)
and booted in one of two orders:

- ``plugin-after-kubelet``: containerd, the kubelet, then the plugin once the kubelet has failed the GPU
  pod's prepare (the driver is not registered), as a node boots: the kubelet starts the plugin's pod
  beside the GPU pod, whose prepare fails at once;
- ``plugin-before-kubelet``: containerd, the plugin, then the kubelet (its start-up included in the figure).

Timed from the plugin's spawn: the kubelet's "Registered DRA plugin" (``registered_s``) and the pod's
container running with a new container ID (``running_s``; null when not within ``--limit`` seconds).
Both drivers run on the same kubelet and control plane in the same run. Needs root (``ContainerdNode``)
and holds the machine's pod-network lock. Results: docs/perf/2026-11-28-restart-latency-containerd.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import time
from pathlib import Path
from typing import Any

from bench.restart_harness import NodeDirs, Plugin, create_pod, delete_pods, failed_prepares, setup_driver, slices, wait
from testkit.claimdata import DRIVER
from testkit.cluster import LocalCluster
from testkit.peer_process import PEER_DRIVER, peer_binary
from testkit.runtime_node import PAUSE_IMAGE, ContainerdNode, sweep_leftovers

ORDERS = ("plugin-after-kubelet", "plugin-before-kubelet")
SHORT_WORKDIR = Path("/tmp/drgr")
PODS = "/api/v1/namespaces/default/pods"


def node_dirs(node: ContainerdNode) -> NodeDirs:
    """The node's own paths as a plugin pod of the chart mounts them (seen from the machine)."""
    return NodeDirs(
        node.name,
        node.path("/var/lib/kubelet/plugins_registry"),
        node.path("/var/lib/kubelet/plugins"),
        node.kubelet_log,
        cdi=node.path("/var/run/cdi"),
        boot_id=node.boot_id_file,
    )


def container(c: LocalCluster, pod: str) -> tuple[str | None, bool]:
    """The pod's container: its ID and whether it is running."""
    status = (c.api("GET", f"{PODS}/{pod}").get("status", {}).get("containerStatuses") or [{}])[0]
    return status.get("containerID"), "running" in status.get("state", {})


def power_cycle(c: LocalCluster, node: ContainerdNode, plugin: Plugin, pod: str, order: str, limit: float) -> dict[str, Any]:
    """Power off with the pod running, boot in ``order``; the figures from the plugin's spawn."""
    old_id, _ = container(c, pod)
    plugin.kill()  # a power cut: no clean-up, its registration socket stays on /var/lib
    node.power_off()
    node.start_runtime()
    before = plugin.kubelet_registrations()
    out: dict[str, Any] = {}
    if order == "plugin-before-kubelet":
        t0 = plugin.start()
        node.start_kubelet()  # until the Node is Ready
        out["kubelet_ready_s"] = round(time.monotonic() - t0, 2)
    else:
        seen = failed_prepares(node.kubelet_log, pod)
        node.start_kubelet()
        # The kubelet starts the plugin's pod beside the GPU pod, whose prepare fails at once: the plugin
        # process comes after that failure (a Ready Node alone can come before the kubelet has its pods).
        wait(f"the kubelet's failed prepare of {pod}", lambda: failed_prepares(node.kubelet_log, pod) > seen)
        t0 = plugin.start()

    def back() -> bool:
        now = round(time.monotonic() - t0, 2)
        if "registered_s" not in out and plugin.registered(before):
            out["registered_s"] = now
        cid, up = container(c, pod)
        if up and cid != old_id:
            out["running_s"] = now
        return "running_s" in out and "registered_s" in out

    try:
        wait(f"{pod}'s container running again", back, limit)
    except TimeoutError:
        out.setdefault("registered_s", None)
        out.setdefault("running_s", None)
    return out


def cycle(
    c: LocalCluster, node: ContainerdNode, tmp: Path, tag: str, *, peer: Path | None, cdi: Path, order: str, limit: float
) -> dict[str, Any]:
    """One driver: its plugin up and a pod running, one power cycle timed, the pod deleted, the plugin stopped."""
    dirs = dataclasses.replace(node_dirs(node), cdi=cdi)
    plugin = Plugin(dirs, c, tmp / tag, peer=peer, extra=("--pod-uid", f"uid-{tag}"))
    before = plugin.kubelet_registrations()
    plugin.start()
    wait(f"{plugin.driver} registration", lambda: plugin.registered(before))
    wait(f"{plugin.driver} slices", lambda: slices(c, node.name, plugin.driver) == 8 or None)
    pod = f"reboot-{tag}"
    create_pod(c, pod, plugin.driver, PAUSE_IMAGE)
    wait(f"{pod} running", lambda: container(c, pod)[1])
    try:
        return power_cycle(c, node, plugin, pod, order, limit)
    finally:
        delete_pods(c, [pod])
        plugin.stop()


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Median of each figure over the runs that reached it, and how many did not."""
    out: dict[str, Any] = {}
    for key in runs[0]:
        values = [r[key] for r in runs if r.get(key) is not None]
        out[key] = round(statistics.median(values), 2) if values else None
    out["not_back"] = sum(1 for r in runs if r.get("running_s") is None)
    return out


def main(args: argparse.Namespace) -> int:
    """Run by ``python -m bench.restart_latency --runtime containerd`` with its parsed flags."""
    orders = tuple(o for o in args.orders.split(",") if o)
    # Short: socket paths under it must fit a sockaddr_un (108 bytes), the peer's names are long.
    tmp: Path = (args.workdir or SHORT_WORKDIR) / time.strftime("%m%d-%H%M%S")
    tmp.mkdir(parents=True)
    kept_cdi = tmp / "node-a" / "etc-cdi"  # read by containerd, left by a reboot (a node's /etc/cdi)
    kept_cdi.mkdir(parents=True)
    # (name, peer binary, CDI dir: None is the node's /var/run/cdi)
    drivers: list[tuple[str, Path | None, Path | None]] = [("dra-gpu", None, None)]
    if args.peer:
        binary = peer_binary().path
        variants = {"run": ("peer", binary, None), "kept": ("peer, CDI in /etc/cdi", binary, kept_cdi)}
        drivers += [variants[v] for v in args.peer_cdi.split(",") if v]
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {}
    with LocalCluster(with_scheduler=True, with_controller_manager=True, pod_network=True, log_dir=tmp / "k8s-logs") as c:
        for leftover in sweep_leftovers():
            print(f"removed {leftover} left by an earlier run", flush=True)
        with ContainerdNode(c, "node-a", tmp / "node-a", index=1, extra_cdi_dirs=[kept_cdi]) as node:
            setup_driver(c, DRIVER)
            setup_driver(c, PEER_DRIVER)
            accounts = "/api/v1/namespaces/default/serviceaccounts"
            wait("the default ServiceAccount", lambda: c.api("GET", accounts)["items"] or None)
            for rnd in range(args.repeat):
                for order in orders:
                    for i, (name, peer, cdi) in enumerate(drivers):
                        tag = f"{i}-{order[7]}-{rnd}"  # 1-a-0: the second driver, plugin-after, round 0
                        where = cdi or node.path("/var/run/cdi")
                        result = cycle(c, node, tmp, tag, peer=peer, cdi=where, order=order, limit=args.limit)
                        runs.setdefault(order, {}).setdefault(name, []).append(result)
                        print(json.dumps({order: {name: result}}), flush=True)
    results = {"runs": runs, "medians": {o: {n: summary(r) for n, r in by.items()} for o, by in runs.items()}}
    print(json.dumps(results["medians"], indent=2))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0
