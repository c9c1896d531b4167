"""Restart latency: from a kubelet plugin's process start to a waiting GPU pod's containers running.

``python -m bench.restart_latency [--peer] [--json PATH] [--scenarios ...] [--variants ...] [--repeat N]``:
one control plane (scheduler, controller-manager) and one real kubelet (``testkit.node.KubeletNode``,
fake CRI). Scenarios, each timed from the new plugin process's start to the pod's phase Running:

- ``restart``: the plugin stopped (SIGTERM), a GPU pod created, the kubelet's failed prepare seen
  (its log line), the plugin started again;
- ``rolling``: a second plugin with another ``--pod-uid`` started while the first serves, a pod created
  at once, the first stopped once the second is registered (what the chart's readiness probe and
  ``maxSurge`` do), the first having served a pod already; the pod's Running is watched from the
  start, not after the handover;
- ``reboot``: the plugin killed (SIGKILL: its sockets stay), a pod bound and its prepare failed, a new
  boot id, the kubelet restarted (it fails the prepare again), the plugin started.

dra-gpu runs with ``--retry-waiting-pods=false`` (before) and ``true`` (after); with ``--peer`` the
Go reference driver (``testkit.peer_process``, its own ``--pod-uid``) runs the same three on the
same kubelet and control plane; ``--repeat`` rounds interleave the drivers, medians reported.
``--runtime containerd`` runs ``bench.reboot_containerd`` instead (a real node's reboot).
Results: docs/perf/2026-11-27-restart-latency.md, docs/perf/2026-11-28-restart-latency-containerd.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
from pathlib import Path
from typing import Any

from bench.restart_harness import NodeDirs, Plugin, create_pod, delete_pods, failed_prepares, running, setup_driver, slices, wait
from testkit.claimdata import DRIVER
from testkit.cluster import LocalCluster
from testkit.node import KubeletNode
from testkit.peer_process import PEER_DRIVER, peer_binary


def scenario_restart(c: LocalCluster, node: KubeletNode, plugin: Plugin, pod: str, *, reboot: bool = False) -> dict[str, float]:
    """Plugin gone, a pod bound and its prepare failed, (reboot: the kubelet restarted and failed it again), plugin started."""
    if reboot:
        plugin.kill()  # power loss: its sockets stay, the slices too (the kubelet wipes them 30 s later)
    else:
        plugin.stop()
    create_pod(c, pod, plugin.driver)
    wait(f"the kubelet's failed prepare of {pod}", lambda: failed_prepares(node.log_path, pod) > 0)
    if reboot:
        boot = getattr(plugin.p, "boot_id", None)
        if boot is not None:
            boot.write_text(f"boot-{time.time()}\n")
        seen = failed_prepares(node.log_path, pod)
        node.restart_kubelet()  # its start-up wipes the node's slices and syncs the pod again
        wait(f"the restarted kubelet's failed prepare of {pod}", lambda: failed_prepares(node.log_path, pod) > seen)
    before = plugin.kubelet_registrations()
    t0 = plugin.start()
    wait("registration", lambda: plugin.registered(before))
    t_reg = time.monotonic() - t0
    wait(f"{pod} Running", lambda: running(c, pod))
    return {"registered_s": round(t_reg, 2), "running_s": round(time.monotonic() - t0, 2)}


def scenario_rolling(c: LocalCluster, node: KubeletNode, old: Plugin, new: Plugin, pod: str) -> dict[str, float]:
    """The new plugin started and a pod created at once; the old one stopped (on a thread) once the new one
    has registered. The pod's Running is watched all along: it need not wait for the new plugin."""
    before = new.kubelet_registrations()
    t0 = new.start()
    create_pod(c, pod, new.driver)
    seen: dict[str, float] = {}
    stopper = threading.Thread(target=old.stop, name="old-plugin-stop")

    def both() -> bool:
        if "registered_s" not in seen and new.registered(before):
            seen["registered_s"] = round(time.monotonic() - t0, 2)
            stopper.start()
        if "running_s" not in seen and running(c, pod):
            seen["running_s"] = round(time.monotonic() - t0, 2)
        return len(seen) == 2

    wait(f"registration and {pod} Running", both)
    stopper.join()
    return {"registered_s": seen["registered_s"], "running_s": seen["running_s"]}


SCENARIOS = ("rolling", "restart", "reboot")


def run_driver(
    c: LocalCluster,
    node: KubeletNode,
    tmp: Path,
    tag: str,
    *,
    peer: Path | None,
    extra: tuple[str, ...] = (),
    scenarios: tuple[str, ...] = SCENARIOS,
) -> dict[str, Any]:
    """The scenarios for one driver: ``rolling`` (uid 1 → uid 2), then ``restart`` and ``reboot`` of uid 2."""
    first = Plugin(NodeDirs.of(node), c, tmp / f"{tag}-1", peer=peer, extra=(*extra, "--pod-uid", f"uid-{tag}-1"))
    before = first.kubelet_registrations()
    first.start()
    wait(f"{first.driver} registration", lambda: first.registered(before))  # else its line could be taken for the second's
    wait(f"{first.driver} slices", lambda: slices(c, node.name, first.driver) == 8 or None)
    second = Plugin(NodeDirs.of(node), c, tmp / f"{tag}-2", peer=peer, extra=(*extra, "--pod-uid", f"uid-{tag}-2"))
    out: dict[str, Any] = {}
    pods: list[str] = []
    if "rolling" in scenarios:
        # The old plugin of a rolling update has been serving: one pod prepared through it first.
        pods.append(f"serving-{tag}")
        create_pod(c, pods[-1], first.driver)
        wait(f"{pods[-1]} Running", lambda: running(c, pods[-1]))
        out["rolling"] = scenario_rolling(c, node, first, second, f"rolling-{tag}")
    else:
        first, second = second, first  # the restarts below act on the one plugin that runs
    if "restart" in scenarios:
        out["restart"] = scenario_restart(c, node, second, f"restart-{tag}")
    if "reboot" in scenarios:
        out["reboot"] = scenario_restart(c, node, second, f"reboot-{tag}", reboot=True)
    delete_pods(c, [*pods, *(f"{s}-{tag}" for s in out)])  # their devices are free for the next round
    second.stop()
    first.stop()
    return out


def medians(runs: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per scenario, the median of each figure over ``runs``."""
    out: dict[str, dict[str, float]] = {}
    for scenario in runs[0]:
        figures = runs[0][scenario]
        out[scenario] = {k: round(statistics.median(r[scenario][k] for r in runs), 2) for k in figures}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.restart_latency", description=__doc__.splitlines()[0])
    parser.add_argument("--peer", action="store_true", help="also run the Go reference driver")
    parser.add_argument("--workdir", type=Path, help="default /tmp/dra-gpu-restart-latency (containerd: /tmp/drgr)")
    parser.add_argument("--json", type=Path, help="write the results here too")
    parser.add_argument("--scenarios", default=",".join(SCENARIOS), help="comma-separated, of: " + ", ".join(SCENARIOS))
    parser.add_argument("--variants", default="before,after", help="dra-gpu's runs: before (no prompting), after, or both")
    parser.add_argument("--repeat", type=int, default=1, help="rounds, each running every driver once (medians reported)")
    parser.add_argument("--runtime", choices=("fake", "containerd"), default="fake", help="containerd: a real node's reboot")
    parser.add_argument(
        "--orders",
        default="plugin-after-kubelet,plugin-before-kubelet",
        help="containerd: the boot orders to time (plugin-after-kubelet, plugin-before-kubelet)",
    )
    parser.add_argument(
        "--peer-cdi",
        default="run,kept",
        help="containerd: the peer's CDI dir, run (/var/run/cdi, its chart's) and/or kept (/etc/cdi, left by a reboot)",
    )
    parser.add_argument("--limit", type=float, default=150.0, help="containerd: seconds to wait for the pod after a boot")
    args = parser.parse_args(argv)
    if args.runtime == "containerd":
        from bench.reboot_containerd import main as containerd_main

        return containerd_main(args)
    scenarios = tuple(x for x in args.scenarios.split(",") if x)
    tmp: Path = (args.workdir or Path("/tmp/dra-gpu-restart-latency")) / time.strftime("%Y%m%d-%H%M%S")
    tmp.mkdir(parents=True)
    runs: dict[str, list[dict[str, Any]]] = {}
    drivers: list[tuple[str, Path | None, tuple[str, ...]]] = [
        (f"dra-gpu {v}", None, ("--retry-waiting-pods", "false" if v == "before" else "true"))
        for v in args.variants.split(",")
        if v
    ]
    if args.peer:
        drivers.append(("peer", peer_binary().path, ()))
    with (
        LocalCluster(with_scheduler=True, with_controller_manager=True, log_dir=tmp / "k8s-logs") as c,
        KubeletNode(c, "node-a", tmp / "node-a") as node,
    ):
        setup_driver(c, DRIVER)
        setup_driver(c, PEER_DRIVER)
        accounts = "/api/v1/namespaces/default/serviceaccounts"
        wait("the default ServiceAccount", lambda: c.api("GET", accounts)["items"] or None)
        for rnd in range(args.repeat):
            for name, peer, extra in drivers:
                tag = f"{name.split()[-1]}-{rnd}"
                runs.setdefault(name, []).append(run_driver(c, node, tmp, tag, peer=peer, extra=extra, scenarios=scenarios))
                print(json.dumps({name: runs[name][-1]}), flush=True)
    results = {"runs": runs, "medians": {name: medians(r) for name, r in runs.items()}}
    print(json.dumps(results["medians"], indent=2))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
