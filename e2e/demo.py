"""``make demo``: a local cluster, fake GPUs, real scheduling and the kubelet's own DRA code.

Starts etcd, kube-apiserver, kube-scheduler and kube-controller-manager built from source,
two real kubelets (fake container runtime) as node-a (8x H100, dynamic MIG) and node-b (4x L4),
a dra-gpu plugin per node (as local processes: nothing here runs containers), installs the Helm
chart's cluster objects, applies the manifests in demo/, and prints pods → claims → devices → the
CDI ids the kubelet handed to the runtime. Then it deletes the pods (the kubelet unprepares).

Second part, dynamic MIG: node-a's plugin runs ``--mig dynamic`` (the MIG simulator with
realistic latencies), so each of its GPUs publishes the full GPU and every MIG placement. The
``demo/mig-*.yaml`` manifests are applied one after the other (each waits for its allocation,
so the first-fit placements are the same on every run), and the table shows pod → claim →
allocated MIG device → the instance the plugin carved at NodePrepareResources (profile@start,
MIG device UUID, read from the simulator's state). Deleting the pods destroys the instances and
turns MIG mode off again.

Third part, fractional GPUs: a third kubelet, node-c, whose plugin runs one fake 80Gi A100 with
``--sharing consumable`` (published with allowMultipleAllocations and request policies on memory
and computeShare). demo/consumable-20gi.yaml's four pods in two namespaces each get a 20Gi share
of it (shareID, consumedCapacity), under the GPU's one MPS daemon with their limit as MPS client
env; a fifth 20Gi pod stays Pending with the scheduler's reason. The time slice and MPS daemon of
the first part's shared-claim.yaml and mps-claim.yaml are shown from the sharing simulator's
records, and every part checks that unprepare left none behind. Then everything shuts down.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from dra_driver.core.cdi import cdi_device_id
from dra_driver.core.mig import MigInstance, profile_slug
from dra_driver.core.sharing import shared_daemon_id
from dra_driver.mig_backends.sim import load_instances, load_modes
from dra_driver.sharing_backends.sim import STATE_FILE, read_sharing_state
from dra_driver.sources.fake import FakeGpuSource
from e2e.cluster import LocalCluster
from e2e.helm_cli import Helm
from e2e.manifests import apply, apply_file, load
from e2e.node import KubeletNode
from e2e.plugin_process import PluginProcess

DEMO = Path(__file__).resolve().parents[1] / "demo"
NS = "dra-demo"
DRIVER = "gpu.dra-gpu.dev"
MIG_NODE = "node-a"
MIG_ARGS = ("--mig", "dynamic", "--fake-mig-latency", "realistic")
NODES = (("node-a", "h100x8", MIG_ARGS), ("node-b", "l4x4", ()))
EXPECT_PENDING = {"unsatisfiable", "missing-attribute"}
SHARE_NODE, SHARE_PROFILE, SHARE_ARGS = "node-c", "a100-80x1", ("--sharing", "consumable")


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


def claim_results(c: LocalCluster, p: dict[str, Any]) -> tuple[str, list[dict[str, Any]]]:
    """The pod's (first) claim name and its allocation results ([] while unallocated)."""
    statuses = p["status"].get("resourceClaimStatuses") or []
    name = statuses[0].get("resourceClaimName") if statuses else p["spec"]["resourceClaims"][0].get("resourceClaimName")
    if not name:
        return "-", []
    claim = c.api("GET", f"/apis/resource.k8s.io/v1/namespaces/{NS}/resourceclaims/{name}")
    alloc = (claim.get("status") or {}).get("allocation")
    results: list[dict[str, Any]] = alloc["devices"]["results"] if alloc else []
    return str(name), results


def claim_of(c: LocalCluster, p: dict[str, Any]) -> tuple[str, list[str]]:
    name, results = claim_results(c, p)
    return name, [f"{r['pool']}/{r['device']}" for r in results]


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
        for name, profile, extra in NODES:
            flags = f" {' '.join(extra)}" if extra else ""
            say(f"== starting kubelet {name} (fake container runtime) and the dra-gpu plugin with fake {profile}{flags}")
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
                extra_args=extra,
            )
            plugin.start()
            stack.callback(plugin.stop)
            plugins.append(plugin)
            if not wait_registered(plugin):
                say(f"   the kubelet did not register the plugin of {name}; log {plugin.log}")
                return 1
        say("== helm install deploy/helm/dra-gpu (DeviceClasses, RBAC, admission policy)")
        Helm.built(workdir / "helm-home").install(c, "kubeletPlugin.enabled=false", "sharing.consumable=true")
        apply_file(c, DEMO / "namespace.yaml")
        names = []
        for f in sorted(DEMO.glob("*.yaml")):
            if f.name == "namespace.yaml" or f.name.startswith(("mig-", "consumable-")):
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
        say("And dra-gpu's answer, read live from the cluster (dra-gpu explain pod/NAME -n dra-demo, first lines):")
        for pname in sorted(EXPECT_PENDING):
            out = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "dra_driver.cli.main",
                    "explain",
                    f"pod/{pname}",
                    "-n",
                    NS,
                    "--kubeconfig",
                    str(c.kubeconfig),
                ],
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            ).stdout
            for line in out.splitlines()[:3]:
                say(f"  {line[:200]}")
        say("")
        say("Sharing applied at prepare (the simulator's records of what nvidia-smi / nvidia-cuda-mps-control would set):")
        for pl in plugins:
            for line in sharing_lines(pl):
                say(f"  {pl.node}: {line}")
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
        kept = [f"{pl.node}: {line}" for pl in plugins for line in sharing_lines(pl)]
        say(f"   claim CDI specs left after unprepare: {left}; time slices and MPS daemons left: {len(kept)}")
        ok = ok and left == 0 and not kept
        ok = run_mig(c, nodes[MIG_NODE], plugins[0]) and ok
        ok = run_consumable(c, stack, workdir) and ok
        say("== shutting down")
    say("demo ok" if ok else "demo FAILED: a pod is not where it should be (see the table)")
    return 0 if ok else 1


def wait_for(cond: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.25)
    return True


def wait_registered(plugin: PluginProcess) -> bool:
    """Wait until the kubelet has registered the plugin: a pod the kubelet gets before that fails to prepare
    ("DRA driver ... is not registered") and waits for the kubelet's retry, about a minute."""
    return wait_for(lambda: any(e.get("event") == "plugin_registered" for e in plugin.logs()), 30)


def carved(plugin: PluginProcess) -> dict[str, MigInstance]:
    """The simulator's instances on the plugin's node under their device names (gpu-<minor>-mig-<slug>-<start>)."""
    if not plugin.sim_state.exists():
        return {}
    minor = {g.uuid: g.minor for g in FakeGpuSource(plugin.profile, plugin.node).gpus()}
    return {
        f"gpu-{minor[uuid]}-mig-{profile_slug(i.profile_name)}-{i.placement.start}": i
        for uuid, insts in load_instances(plugin.sim_state).items()
        for i in insts
    }


def mig_mode_on(plugin: PluginProcess) -> int:
    """How many of the plugin's GPUs have MIG mode on."""
    return sum(m.current for m in load_modes(plugin.sim_state).values()) if plugin.sim_state.exists() else 0


def allocated_yet(c: LocalCluster, pod: str) -> bool:
    return bool(claim_results(c, c.api("GET", f"/api/v1/namespaces/{NS}/pods/{pod}"))[1])


def run_mig(c: LocalCluster, node: KubeletNode, plugin: PluginProcess) -> bool:
    """The dynamic MIG part: the demo/mig-*.yaml pods on node-a, what was allocated and what was carved."""
    say("")
    say(f"== dynamic MIG on {node.name}: every GPU publishes the full GPU and each MIG placement (shared counters)")
    names: list[str] = []
    started = time.monotonic()
    for f in sorted(DEMO.glob("mig-*.yaml")):
        say(f"   kubectl apply -f demo/{f.name}")
        apply_file(c, f)
        for pname in [d["metadata"]["name"] for d in load(f) if d["kind"] == "Pod"]:
            names.append(pname)
            # One at a time, so the first-fit placements do not depend on the scheduler's queue order.
            wait_for(lambda: allocated_yet(c, names[-1]), 60)

    def running() -> bool:
        return all(p["status"].get("phase") == "Running" for p in pods(c) if p["metadata"]["name"] in names)

    ok = wait_for(running, 120)
    say(f"   all MIG pods Running {time.monotonic() - started:.1f}s after the first apply (carving included)")
    instances = carved(plugin)
    runtime: dict[str, set[str]] = {}
    for rec in node.cdi_records():
        runtime.setdefault(rec["pod_name"], set()).update(rec.get("cdi_devices") or [])
    cdi_ok = True
    rows = [["POD", "CLAIM", "REQUEST", "ALLOCATED DEVICE", "CARVED AT PREPARE (profile@start)", "MIG DEVICE UUID"]]
    allocated: set[str] = set()
    for p in sorted(pods(c), key=lambda p: str(p["metadata"]["name"])):
        pname = p["metadata"]["name"]
        claim, results = claim_results(c, p)
        ok = ok and p["status"].get("phase") == "Running" and bool(results)
        if results:
            uid = c.api("GET", f"/apis/resource.k8s.io/v1/namespaces/{NS}/resourceclaims/{claim}")["metadata"]["uid"]
            cdi_ok = cdi_ok and runtime.get(pname) == {cdi_device_id(DRIVER, uid, r["device"]) for r in results}
        for r in results:
            device = r["device"]
            inst = instances.get(device)
            if inst is not None:
                allocated.add(device)
                what, uuid = f"{inst.profile_name}@{inst.placement.start}", inst.uuid or "-"
            else:
                what, uuid = "- (a full GPU: nothing to carve)", "-"
            rows.append([pname, claim, r["request"], f"{r['pool']}/{device}", what, uuid])
    say("")
    say(table(rows))
    say("")
    mig_results = {r[3].split("/", 1)[1] for r in rows[1:] if "-mig-" in r[3]}
    match = allocated == mig_results == set(instances)
    ok = ok and match
    verdict = "exactly the allocated MIG devices" if match else f"MISMATCH: allocated {sorted(mig_results)}"
    say(f"   MIG instances on the simulated GPUs: {len(instances)}, {verdict}")
    say(f"   the runtime got each claim's CDI ids (k8s.{DRIVER}/claim=<claim uid>-<device>): {'yes' if cdi_ok else 'NO'}")
    ok = ok and cdi_ok
    say("== deleting the MIG pods: the kubelet unprepares, the plugin destroys the instances and turns MIG mode off")
    started = time.monotonic()
    for pname in names:
        c.api("DELETE", f"/api/v1/namespaces/{NS}/pods/{pname}?gracePeriodSeconds=0")
    gone = wait_for(lambda: not carved(plugin) and not plugin.cdi_files() and not mig_mode_on(plugin), 90)
    say(
        f"   after {time.monotonic() - started:.1f}s: MIG instances left {len(carved(plugin))}, "
        f"GPUs in MIG mode {mig_mode_on(plugin)}, claim CDI specs left {len(plugin.cdi_files())}"
    )
    return ok and gone


def sharing_state(plugin: PluginProcess) -> dict[str, Any]:
    return read_sharing_state(plugin.plugin_dir / "fake-gpus" / STATE_FILE)


def sharing_lines(plugin: PluginProcess) -> list[str]:
    """One line per time slice and MPS daemon the plugin's simulator records now."""
    minor = {g.uuid: g.minor for g in FakeGpuSource(plugin.profile, plugin.node).gpus()}
    state = sharing_state(plugin)
    out = [f"time slice {interval} on gpu-{minor[uuid]}" for uuid, interval in sorted(state["timeSlices"].items())]
    for daemon_id, d in sorted(state["mps"].items()):
        limits = [f"{b >> 30}Gi pinned on gpu-{minor[u]}" for u, b in sorted(d["pinnedMemoryLimits"].items())]
        threads = [f"{d['activeThreadPercentage']}% of the SMs"] if d["activeThreadPercentage"] else []
        gpus = ", ".join(f"gpu-{minor[u]}" for u in d["gpuUUIDs"])
        out.append(f"MPS daemon {daemon_id} on {gpus} ({', '.join([*threads, *limits]) or 'no default limits'})")
    return out


def cdi_env(plugin: PluginProcess, cdi_id: str) -> dict[str, str]:
    """The env our CDI spec gives a container for ``cdi_id`` ({} if no spec has it)."""
    name = cdi_id.partition("=")[2]
    for path in sorted(plugin.cdi.glob("*.json")):
        for d in json.loads(path.read_text()).get("devices", []):
            if d["name"] == name:
                return dict(e.split("=", 1) for e in d["containerEdits"].get("env", []))
    return {}


def run_consumable(c: LocalCluster, stack: ExitStack, workdir: Path) -> bool:
    """The fractional-GPU part: four 20Gi shares of node-c's one 80Gi GPU from two namespaces, a fifth Pending."""
    say("")
    say(f"== fractional GPUs: kubelet {SHARE_NODE} and the plugin with fake {SHARE_PROFILE} {' '.join(SHARE_ARGS)}")
    say("   (one 80Gi GPU, published with allowMultipleAllocations; DeviceClass shared.gpu.dra-gpu.dev selects it)")
    started = time.monotonic()
    node = stack.enter_context(KubeletNode(c, SHARE_NODE, workdir / SHARE_NODE))
    plugin = PluginProcess(
        workdir / f"plugin-{SHARE_NODE}",
        kubeconfig=c.kubeconfig,
        node=SHARE_NODE,
        profile=SHARE_PROFILE,
        publish=True,
        registrar_dir=node.registrar_dir,
        plugins_dir=node.plugins_dir,
        extra_args=SHARE_ARGS,
    )
    plugin.start()
    stack.callback(plugin.stop)
    slices = f"/apis/resource.k8s.io/v1/resourceslices?fieldSelector=spec.nodeName={SHARE_NODE}"
    if not (wait_registered(plugin) and wait_for(lambda: bool(c.api("GET", slices)["items"]), 30)):
        say(f"   the plugin of {SHARE_NODE} did not register or publish; log {plugin.log}")
        return False
    say("   kubectl apply -f demo/consumable-20gi.yaml")
    docs = load(DEMO / "consumable-20gi.yaml")
    apply(c, docs)
    four = [(d["metadata"]["namespace"], d["metadata"]["name"]) for d in docs if d["kind"] == "Pod"]

    def pod(ns: str, name: str) -> dict[str, Any]:
        return c.api("GET", f"/api/v1/namespaces/{ns}/pods/{name}")

    ok = wait_for(lambda: all(pod(ns, n)["status"].get("phase") == "Running" for ns, n in four), 60)
    fifth = next(d for d in docs if d["kind"] == "Pod")
    fifth["metadata"]["name"] = fifth["metadata"]["name"][:-1] + "3"
    fifth_ns, fifth_name = fifth["metadata"]["namespace"], fifth["metadata"]["name"]
    say(f"   and a fifth 20Gi pod, {fifth_ns}/{fifth_name}")
    apply(c, [fifth])
    ok = wait_for(lambda: settled(pod(fifth_ns, fifth_name)), 30) and ok
    rows = [["POD", "STATUS", "CLAIM", "DEVICE", "SHARE ID", "CONSUMED", "CONTAINER'S MPS CLIENT LIMIT (from our CDI spec)"]]
    for ns, name in [*four, (fifth_ns, fifth_name)]:
        p = pod(ns, name)
        statuses = p["status"].get("resourceClaimStatuses") or [{}]
        claim_name = statuses[0].get("resourceClaimName") or "-"
        results: list[dict[str, Any]] = []
        uid = ""
        if claim_name != "-":
            claim = c.api("GET", f"/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims/{claim_name}")
            uid = claim["metadata"]["uid"]
            results = ((claim.get("status") or {}).get("allocation") or {"devices": {"results": []}})["devices"]["results"]
        if not results:
            rows.append([f"{ns}/{name}", p["status"].get("phase", "?"), claim_name, "-", "-", "-", "-"])
            continue
        (r,) = results
        env = cdi_env(plugin, cdi_device_id(DRIVER, uid, r["device"], r.get("shareID")))
        consumed = ", ".join(f"{k} {v}" for k, v in sorted((r.get("consumedCapacity") or {}).items()))
        limit = env.get("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "-")
        rows.append([f"{ns}/{name}", p["status"]["phase"], claim_name, f"{r['pool']}/{r['device']}", r.get("shareID") or "-",
                     consumed, limit])  # fmt: skip
        ok = ok and (ns, name) in four and limit.endswith("=20480M")
    say("")
    say(table(rows))
    say("")
    fifth_pod = pod(fifth_ns, fifth_name)
    reason = next((x.get("message", "") for x in fifth_pod["status"].get("conditions", []) if x["type"] == "PodScheduled"), "")
    say(f"   {fifth_name} is Pending (the scheduler's words): {reason}")
    ok = ok and fifth_pod["status"].get("phase") == "Pending"
    for line in sharing_lines(plugin):
        say(f"   {SHARE_NODE}: {line}")
    gpu = FakeGpuSource(SHARE_PROFILE, SHARE_NODE).gpus()[0]
    ok = ok and list(sharing_state(plugin)["mps"]) == [shared_daemon_id(gpu)]
    say(f"   ({time.monotonic() - started:.1f}s from starting {SHARE_NODE}); deleting the pods: the kubelet unprepares")
    for ns, name in [*four, (fifth_ns, fifth_name)]:
        c.api("DELETE", f"/api/v1/namespaces/{ns}/pods/{name}?gracePeriodSeconds=0")
    empty: dict[str, Any] = {"timeSlices": {}, "mps": {}}
    gone = wait_for(lambda: not plugin.cdi_files() and sharing_state(plugin) == empty, 60)
    say(f"   claim CDI specs left {len(plugin.cdi_files())}, MPS daemons left {len(sharing_state(plugin)['mps'])}")
    return ok and gone


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="dra-gpu-demo-") as tmp:
        return run(Path(tmp))


if __name__ == "__main__":
    sys.exit(main())
