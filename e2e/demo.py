"""``make demo``: a local cluster, fake GPUs, real scheduling and the kubelet's own DRA code.

Starts etcd, kube-apiserver, kube-scheduler and kube-controller-manager built from source,
two real kubelets (fake container runtime) as node-a (8x H100) and node-b (4x L4), a dra-gpu
plugin per node (as local processes: nothing here runs containers), installs the Helm chart's
cluster objects, applies every manifest in demo/, and prints pods → claims → devices → the CDI
ids the kubelet handed to the runtime. Then it deletes the pods (the kubelet unprepares) and
shuts everything down.
"""

from __future__ import annotations

import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from e2e.cluster import LocalCluster
from e2e.helm_cli import Helm
from e2e.manifests import apply_file, load
from e2e.node import KubeletNode
from e2e.plugin_process import PluginProcess

DEMO = Path(__file__).resolve().parents[1] / "demo"
NS = "dra-demo"
NODES = (("node-a", "h100x8"), ("node-b", "l4x4"))
EXPECT_PENDING = {"unsatisfiable", "missing-attribute"}


def say(msg: str) -> None:
    print(msg, flush=True)


def pods(c: LocalCluster) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = c.api("GET", f"/api/v1/namespaces/{NS}/pods")["items"]
    return items


def settled(p: dict[str, Any]) -> bool:
    if p["status"].get("phase") == "Running":
        return True
    return any(
        c["type"] == "PodScheduled" and c["status"] == "False" and c.get("message") for c in p["status"].get("conditions", [])
    )


def claim_of(c: LocalCluster, p: dict[str, Any]) -> tuple[str, list[str]]:
    statuses = p["status"].get("resourceClaimStatuses") or []
    name = statuses[0].get("resourceClaimName") if statuses else p["spec"]["resourceClaims"][0].get("resourceClaimName")
    if not name:
        return "-", []
    claim = c.api("GET", f"/apis/resource.k8s.io/v1/namespaces/{NS}/resourceclaims/{name}")
    alloc = (claim.get("status") or {}).get("allocation")
    devices = [f"{r['pool']}/{r['device']}" for r in alloc["devices"]["results"]] if alloc else []
    return name, devices


def specs_left(plugins: list[PluginProcess]) -> int:
    """Claim CDI specs still on disk across the nodes' plugins."""
    return sum(len(pl.cdi_files()) for pl in plugins)


def table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in rows)


def run(workdir: Path) -> int:
    with ExitStack() as stack:
        say("== starting etcd, kube-apiserver, kube-scheduler, kube-controller-manager (built from source)")
        c = stack.enter_context(LocalCluster(with_scheduler=True, with_controller_manager=True, log_dir=workdir / "logs"))
        nodes: dict[str, KubeletNode] = {}
        plugins: list[PluginProcess] = []
        for name, profile in NODES:
            say(f"== starting kubelet {name} (fake container runtime) and the dra-gpu plugin with fake {profile}")
            node = stack.enter_context(KubeletNode(c, name, workdir / name))
            nodes[name] = node
            plugin = PluginProcess(
                workdir / f"plugin-{name}",
                kubeconfig=c.kubeconfig,
                node=name,
                profile=profile,
                publish=True,
                registrar_dir=node.registrar_dir,
                plugins_dir=node.plugins_dir,
            )
            plugin.start()
            stack.callback(plugin.stop)
            plugins.append(plugin)
        say("== helm install deploy/helm/dra-gpu (DeviceClasses, RBAC, admission policy)")
        Helm.built(workdir / "helm-home").install(c, "kubeletPlugin.enabled=false")
        apply_file(c, DEMO / "namespace.yaml")
        names = []
        for f in sorted(DEMO.glob("*.yaml")):
            if f.name == "namespace.yaml":
                continue
            say(f"   kubectl apply -f demo/{f.name}")
            apply_file(c, f)
            names += [d["metadata"]["name"] for d in load(f) if d["kind"] == "Pod"]
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not (len(pods(c)) == len(names) and all(settled(p) for p in pods(c))):
            time.sleep(0.5)
        records: dict[str, list[str]] = {}
        for node in nodes.values():
            for rec in node.cdi_records():
                records.setdefault(rec["pod_name"], []).extend(rec.get("cdi_devices") or [])
        rows = [["POD", "NODE", "STATUS", "CLAIM", "DEVICES", "CDI IDS (as the kubelet passed them to the runtime)"]]
        ok = True
        why: list[str] = []
        for p in sorted(pods(c), key=lambda p: str(p["metadata"]["name"])):
            pname = p["metadata"]["name"]
            claim, devices = claim_of(c, p)
            status = p["status"].get("phase", "?")
            if status != "Running":
                cond: dict[str, Any] = next((x for x in p["status"].get("conditions", []) if x["type"] == "PodScheduled"), {})
                why.append(f"{pname}: {cond.get('message', '')}")
            ok = ok and (pname in EXPECT_PENDING) != (p["status"].get("phase") == "Running")
            cdi = ", ".join(sorted(set(records.get(pname, [])))) or "-"
            rows.append([pname, p["spec"].get("nodeName") or "-", status, claim, ", ".join(devices) or "-", cdi])
        say("")
        say(table(rows))
        say("")
        say("Why the pending pods are pending (the scheduler's words):")
        for line in why:
            say(f"  {line}")
        say("")
        prepared = specs_left(plugins)
        say(f"== deleting the pods: the kubelet calls NodeUnprepareResources ({prepared} claim CDI specs on disk now)")
        for pname in names:
            c.api("DELETE", f"/api/v1/namespaces/{NS}/pods/{pname}?gracePeriodSeconds=0")
        deadline = time.monotonic() + 90
        left = specs_left(plugins)
        while time.monotonic() < deadline and left > 0:
            time.sleep(0.5)
            left = specs_left(plugins)
        say(f"   claim CDI specs left after unprepare: {left}")
        ok = ok and left == 0
        say("== shutting down")
    say("demo ok" if ok else "demo FAILED: a pod is not where it should be (see the table)")
    return 0 if ok else 1


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="dra-gpu-demo-") as tmp:
        return run(Path(tmp))


if __name__ == "__main__":
    sys.exit(main())
