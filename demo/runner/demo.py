"""``make demo``: dra-gpu installed the way a platform team installs it, on nodes that run real containers.

What runs: the image built here from ``deploy/container/Dockerfile`` by
``deploy/container/build-local.sh`` (no Docker needed; cached, so a warm run builds nothing), a
local control plane (etcd, kube-apiserver, kube-scheduler, kube-controller-manager built from
source) and two nodes, node-a and node-b, each a real kubelet on containerd + runc with a CNI
pod network (``testkit/runtime_node.py``). ``helm install`` of ``deploy/helm/dra-gpu`` from that
image runs the kubelet plugin as a DaemonSet (it registers through each kubelet's plugin
registry and publishes the node's fake GPUs) and the admission webhook as a Deployment. The
manifests in ``demo/`` are applied unchanged; their pods run in real containers to which
containerd applied the plugin's CDI specs, and each prints its ``GPU_DEVICE_*`` / ``CUDA_*``
env and its ``/dev/nvidia*`` nodes (fake GPUs get device nodes backed by /dev/null). On kind or
a real cluster the same chart (with your registry's image) and the same manifests do the same.

Part 1, two nodes with 8 fake H100s each, dynamic MIG (realistic simulator latencies), webhook
on. The ``demo/mig-*.yaml`` pods go first, one at a time, each waiting for its allocation, with
node-b cordoned: so they all land on an empty node-a and the first-fit placements are the same
on every run. Then node-b is uncordoned and the full-GPU and sharing manifests are applied, and
three that cannot be satisfied (``gpu-no-mig.yaml`` asks for a GPU without MIG: every GPU here is
an H100). It prints pod → node → claim → allocated devices (for MIG the instance the plugin
carved: profile@start and MIG UUID), the scheduler's reason for each Pending pod, the time slice
and MPS daemon the sharing simulator recorded, what every container printed, and the webhook
denying a bad GpuConfig. Deleting the objects unprepares; it checks that no CDI spec, checkpoint
entry, MIG instance, GPU in MIG mode, time slice or MPS daemon is left.

Part 2, fractional GPUs: ``helm uninstall``, then ``helm install`` again with one fake 80Gi A100
(``a100-80x1``), ``sharing.consumable=true``, ``mig.strategy=none`` and the plugin on node-a
only (a nodeSelector), so the cluster has exactly one GPU. ``demo/consumable-20gi.yaml``'s four
pods in two namespaces each get a 20Gi share (shareID, consumedCapacity) under the GPU's one MPS
daemon, and their containers print their MPS client limits; a fifth 20Gi pod stays Pending with
the scheduler's reason.

Part 3, GPU health and idle GPUs: ``helm install`` again, 8 fake H100s per node, full GPUs,
``health.evict=true``. ``demo/health-trainer.yaml`` runs a one-replica Deployment (the trainer, its
fake usage scripted busy) and a notebook pod that never uses its GPU. An XID no catalog knows on the
trainer's GPU (injected with the fake GPUs' fault CLI) taints it NoSchedule and the pod's
``allocatedResourcesStatus`` shows the device Unhealthy with the cause (the kubelet's health stream);
XID 79 then taints it NoExecute, the controller-manager evicts the trainer and its replacement runs
on a healthy GPU. ``dra-gpu top`` reads every plugin's /metrics through the API server and marks the
notebook's claim idle; ``dra-gpu health repair`` clears the taints.

Anything unexpected (a pod not Running, a Pending pod without a reason, something left behind)
prints the pod's phase, conditions, events and container log and exits non-zero; every wait has a
deadline. Logs of every component are kept under the printed directory when it fails.
"""

from __future__ import annotations

import copy
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from demo.runner.demo_support import (
    DEMO,
    DRIVER,
    MIG_NODE,
    NODES,
    OTHER_NODE,
    PROFILE,
    REPO,
    SHARE_PROFILE,
    DemoError,
    Progress,
    check_env,
    claim_of,
    cordon,
    env_of,
    kubectl_apply,
    kubectl_delete,
    objects,
    printed,
    published,
    results_of,
    say,
    show_printed,
    started_at,
    stream,
    table,
    wait_allocated,
    wait_clean,
    wait_for,
    wait_for_lock,
    wait_pending,
)
from dra_driver.core.sharing import shared_daemon_id
from dra_driver.sharing_backends.sim import STATE_FILE, read_sharing_state
from dra_driver.sources.fake import FakeGpuSource
from testkit.cluster import ApiError, ClusterError
from testkit.helm_cli import CHART, Helm, HelmError
from testkit.installed import InstalledCluster, build_images
from testkit.manifests import apply, bad_config_claim, load
from testkit.node_state import carved, fake_state, sharing_lines
from testkit.runtime_node import RUNTIME_BUILD, find_runtime

NS = "dra-demo"
VALUES = (f"gpus.fake.profile={PROFILE}", "mig.strategy=dynamic", "gpus.fake.migLatency=realistic", "webhook.enabled=true")
MIG_FILES = ("mig-1g.yaml", "mig-pair.yaml", "mig-20gi.yaml", "mig-or-full.yaml")
GPU_FILES = (
    "gpu-h100.yaml",
    "gpu-40gi.yaml",
    "gpu-driver-570.yaml",
    "two-gpus.yaml",
    "shared-claim.yaml",
    "mps-claim.yaml",
    "device-plugin-style-pod.yaml",  # nvidia.com/gpu: 1, no claim: the scheduler writes one (extendedResourceName)
)
PENDING_FILES = ("unsatisfiable.yaml", "missing-attribute.yaml", "gpu-no-mig.yaml")

SHARE_VALUES = (
    f"gpus.fake.profile={SHARE_PROFILE}",
    "sharing.consumable=true",
    "mig.strategy=none",
    f"kubeletPlugin.nodeSelector.kubernetes\\.io/hostname={MIG_NODE}",
)
SHARE_FILE = "consumable-20gi.yaml"


def part1(ic: InstalledCluster) -> None:
    say("")
    say(f"== Part 1: helm install on {' and '.join(NODES)}, 8 fake H100s each, dynamic MIG, admission webhook")
    sets = " ".join(f"--set {v}" for v in VALUES)
    say(f"   helm install dra-gpu {CHART.relative_to(REPO)} -n dra-gpu {sets} (+ the image built here) --wait ...")
    installed_at = time.time()
    seconds = ic.helm_install(*VALUES)
    plugins = sorted(f"{p['metadata']['name']} on {p['spec']['nodeName']}" for p in ic.plugin_pods())
    say(f"   every pod of the release Ready in {seconds:.1f}s: {', '.join(plugins)} (image {ic.images.app_ref})")
    say(f"   webhook reachable through its Service {ic.wait_webhook():.1f}s later")
    if not wait_for(lambda: all(len(full_gpus(devs)) == 8 for devs in nodes_published(ic)), 60):
        raise DemoError(f"the plugins did not publish 8 GPUs per node in 60s: {sorted(published(ic))}")
    for node, devs in sorted(published(ic).items()):
        say(f"   {node} publishes {len(full_gpus(devs))} GPUs and {len(devs) - len(full_gpus(devs))} MIG placements")

    docs = objects(["namespace.yaml", *MIG_FILES, *GPU_FILES, *PENDING_FILES])
    apply(ic.c, objects(["namespace.yaml"]))
    say("")
    say(f"-- MIG first, one manifest at a time, with {OTHER_NODE} cordoned: every slice lands on an empty {MIG_NODE},")
    say("   first fit in the driver's order (GPU by minor, smallest profile, highest start), the same on every run")
    cordon(ic, OTHER_NODE, True)
    mig_pods: list[str] = []
    for f in MIG_FILES:
        for name in kubectl_apply(ic, [f]):
            started = time.monotonic()
            results = wait_allocated(ic, NS, name)
            devices = ", ".join(f"{r['request']}: {r['device']}" for r in results)
            say(f"      {name} allocated {devices} ({time.monotonic() - started:.1f}s)")
            mig_pods.append(name)
    cordon(ic, OTHER_NODE, False)
    say(f"-- {OTHER_NODE} uncordoned; full GPUs, shared GPUs, and three claims nothing here can satisfy")
    gpu_pods = kubectl_apply(ic, GPU_FILES)
    pending = kubectl_apply(ic, PENDING_FILES)
    running = [*mig_pods, *gpu_pods]
    ic.wait_running(NS, running, timeout_s=180)
    reasons = wait_pending(ic, NS, pending)
    pods = {p["metadata"]["name"]: p for p in ic.pods(NS)}
    first = min(t for n in running if (t := started_at(pods[n])) is not None)
    say(f"   all {len(running)} GPU pods Running; the first {first - installed_at:.0f}s after helm install started")

    rows = [["POD", "NODE", "CLAIM", "REQUEST", "ALLOCATED DEVICE", "CARVED AT PREPARE", "MIG DEVICE UUID"]]
    instances = {n: carved(node, PROFILE) for n, node in ic.nodes.items()}
    wrong: list[str] = []
    mig_allocated: set[tuple[str, str]] = set()
    for name in [*running, *pending]:
        pod = pods[name]
        node = pod["spec"].get("nodeName") or "-"
        claim = claim_of(ic, pod)
        results = results_of(claim)
        claim_name = claim["metadata"]["name"] if claim else "-"
        if not results:
            rows.append([name, node, claim_name, "-", "(Pending)", "-", "-"])
            continue
        assert claim is not None
        wrong += check_env(ic, pod, results, claim["metadata"]["uid"])
        for r in results:
            inst = instances.get(node, {}).get(r["device"])
            if "-mig-" in r["device"]:
                mig_allocated.add((node, r["device"]))
                if inst is None:
                    wrong.append(f"{name}: {r['device']} allocated but not carved on {node}")
            what = f"{inst.profile_name}@{inst.placement.start}" if inst else "-"
            rows.append([name, node, claim_name, r["request"], r["device"], what, inst.uuid or "-" if inst else "-"])
    carved_now = {(n, d) for n, insts in instances.items() for d in insts}
    if carved_now != mig_allocated:
        wrong.append(f"MIG instances {sorted(carved_now)} are not the allocated MIG devices {sorted(mig_allocated)}")
    say("")
    say(table(rows))
    say("")
    say("   Pending, in the scheduler's words:")
    for name, reason in reasons.items():
        say(f"      {name}: {reason}")
    say("      (gpu-no-mig asks for a GPU that cannot do MIG, e.g. an L4: every GPU here is an H100)")
    lines = explain(ic, NS, "gpu-no-mig")
    full_gpu = [line for line in lines if re.search(r"/gpu-\d+\s+no-match", line)]
    say("   dra-gpu explain pod/gpu-no-mig -n dra-demo: the scheduler's rules, per device, on the live cluster:")
    for line in [*lines[:2], *full_gpu[:1]]:
        say(f"      {line[:170]}")
    say(f"        ... ({len(lines) - 2} lines in all: devices one by one, MIG placements included, or per node summed up)")
    say("   Sharing set at prepare (the simulators' record of what nvidia-smi / nvidia-cuda-mps-control would set):")
    for n, gpu_node in ic.nodes.items():
        for line in sharing_lines(gpu_node, PROFILE):
            say(f"      {n}: {line}")
    say("")
    say("   What each container printed: its GPU_DEVICE_*/CUDA_* env, which the claim's CDI spec sets (containerd applies")
    say("   it), and ls -l /dev/nvidia*, shortened to the names (a fake GPU's device nodes are /dev/null's, char 1,3):")
    show_printed(ic, [pods[n] for n in running])
    if wrong:
        raise DemoError("the containers' env does not match the allocation:\n  " + "\n  ".join(wrong))
    say("   every container's GPU_DEVICE_<device>[_RESOURCE_CLAIM] names exactly its claim's devices and uid: yes")

    say("")
    show_webhook(ic)

    say("")
    say("-- kubectl delete -f demo/...: the kubelet unprepares each claim, the plugin removes its CDI spec,")
    say("   destroys the MIG instances (MIG mode off when a GPU has none left) and stops the sharing")
    kubectl_delete(ic, docs)
    ic.wait_gone(NS, [*running, *pending])
    seconds, left = wait_clean(ic, PROFILE)
    say(f"   {seconds:.1f}s after the pods were gone, on both nodes: " + ", ".join(f"{k} {v}" for k, v in left.items()))


def explain(ic: InstalledCluster, ns: str, pod: str) -> list[str]:
    """``dra-gpu explain pod/<pod>``'s lines (exit 1: something stays Pending, as expected here)."""
    argv = [sys.executable, "-m", "dra_driver.cli.main", "explain", f"pod/{pod}", "-n", ns, "--kubeconfig", str(ic.c.kubeconfig)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    if done.returncode != 1:
        raise DemoError(f"dra-gpu explain pod/{pod} exited {done.returncode} (1 expected):\n{done.stdout}{done.stderr}")
    return done.stdout.splitlines()


def full_gpus(devices: Iterable[dict[str, Any]]) -> list[str]:
    return [d["name"] for d in devices if "-mig-" not in d["name"]]


def nodes_published(ic: InstalledCluster) -> list[list[dict[str, Any]]]:
    by_node = published(ic)
    return [by_node.get(n, []) for n in NODES]


def show_webhook(ic: InstalledCluster) -> None:
    bad = bad_config_claim(NS, DRIVER)
    say("-- the admission webhook: a ResourceClaim whose GpuConfig says sharing: {strategy: Magic}")
    try:
        ic.c.api("POST", f"/apis/resource.k8s.io/v1/namespaces/{NS}/resourceclaims", bad)
    except ApiError as err:
        say(f"   denied at create, HTTP {err.status}: {err.body.get('message', err.body)}")
        if err.status != 422:
            raise DemoError(f"expected the webhook's 422, got {err.status}") from None
        return
    raise DemoError("the API server accepted a claim with sharing strategy Magic: the webhook did not run")


def part2(ic: InstalledCluster) -> None:
    say("")
    say(f"== Part 2: fractional GPUs: one fake 80Gi A100 ({SHARE_PROFILE}) on {MIG_NODE}, shared by capacity")
    started = time.monotonic()
    ic.helm_uninstall()
    uninstalled = time.monotonic()
    say(f"   helm uninstall dra-gpu --wait: {uninstalled - started:.1f}s")
    sets = " ".join(f"--set {v}" for v in SHARE_VALUES)
    say(f"   helm install dra-gpu {CHART.relative_to(REPO)} -n dra-gpu {sets} ...")
    seconds = ic.helm_install(*SHARE_VALUES)
    say(f"   every pod of the release Ready in {seconds:.1f}s (the plugin on {MIG_NODE} only: nodeSelector)")

    # The first install's slices outlive it: when a plugin unregisters, its kubelet waits 30 s for
    # it to come back before wiping its node's slices. node-a's new plugin re-registers (which
    # cancels the wipe) and replaces them; node-b gets no plugin, so its H100 slices linger until
    # the wipe. Wait for exactly one published GPU, so the scheduler sees what the demo says.
    def one_gpu() -> bool:
        by_node = published(ic)
        return list(by_node) == [MIG_NODE] and [d["name"] for d in by_node[MIG_NODE]] == ["gpu-0"]

    if not wait_for(one_gpu, 90):
        raise DemoError(f"expected only {MIG_NODE}/gpu-0 published, have {published(ic)}")
    (gpu,) = published(ic)[MIG_NODE]
    say(
        f"   {time.monotonic() - uninstalled:.1f}s after the uninstall the only slice is {MIG_NODE}'s gpu-0 "
        f"(allowMultipleAllocations: {gpu.get('allowMultipleAllocations', False)}); {OTHER_NODE}'s old slices "
        "went when its kubelet wiped them (30 s after its plugin left)"
    )

    docs = load(DEMO / SHARE_FILE)
    fifth = copy.deepcopy(next(d for d in docs if d["kind"] == "Pod"))
    fifth["metadata"]["name"] = fifth["metadata"]["name"][:-1] + "3"
    four = [(d["metadata"]["namespace"], d["metadata"]["name"]) for d in docs if d["kind"] == "Pod"]
    kubectl_apply(ic, [SHARE_FILE])
    for ns in sorted({ns for ns, _ in four}):
        ic.wait_running(ns, [n for pns, n in four if pns == ns], timeout_s=120)
    fifth_ns, fifth_name = fifth["metadata"]["namespace"], fifth["metadata"]["name"]
    say(f"   and a fifth pod with a 20Gi claim, {fifth_ns}/{fifth_name} (a copy of share-a1)")
    apply(ic.c, [fifth])
    reason = wait_pending(ic, fifth_ns, [fifth_name])[fifth_name]

    rows = [["POD", "NODE", "CLAIM", "DEVICE", "SHARE ID", "CONSUMED CAPACITY"]]
    pods = []
    wrong: list[str] = []
    for ns, name in [*four, (fifth_ns, fifth_name)]:
        pod = ic.pod(ns, name)
        claim = claim_of(ic, pod)
        results = results_of(claim)
        if not results:
            rows.append([f"{ns}/{name}", "-", claim["metadata"]["name"] if claim else "-", "(Pending)", "-", "-"])
            continue
        assert claim is not None
        pods.append(pod)
        (r,) = results
        consumed = ", ".join(f"{k} {v}" for k, v in sorted((r.get("consumedCapacity") or {}).items()))
        rows.append([f"{ns}/{name}", pod["spec"]["nodeName"], claim["metadata"]["name"], r["device"], r.get("shareID") or "-",
                     consumed])  # fmt: skip
        env = env_of(printed(ic, ns, name, pod["spec"]["containers"][0]["name"]))
        if not env.get("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "").endswith("=20480M"):
            wrong.append(f"{ns}/{name}: no CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=<uuid>=20480M in {sorted(env)}")
    say("")
    say(table(rows))
    say("")
    say(f"   {fifth_name} is Pending, in the scheduler's words: {reason}")
    node = ic.nodes[MIG_NODE]
    for line in sharing_lines(node, SHARE_PROFILE):
        say(f"   {MIG_NODE}: {line}")
    (gpu_info,) = FakeGpuSource(SHARE_PROFILE, MIG_NODE).gpus()
    daemons = list(read_sharing_state(fake_state(node, STATE_FILE))["mps"])
    if daemons != [shared_daemon_id(gpu_info)]:
        wrong.append(f"expected one MPS daemon {shared_daemon_id(gpu_info)}, the simulator has {daemons}")
    say("")
    say("   What each container printed (its share as MPS client limits: CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=<GPU>=20480M):")
    show_printed(ic, pods, qualified=True)
    if len(pods) != len(four) or wrong:
        raise DemoError("the shares are not what the demo says:\n  " + "\n  ".join(wrong or [f"{len(pods)} allocated"]))

    say("")
    say("-- kubectl delete -f demo/consumable-20gi.yaml (and the fifth pod)")
    kubectl_delete(ic, [*docs, fifth])
    for ns in sorted({ns for ns, _ in [*four, (fifth_ns, fifth_name)]}):
        ic.wait_gone(ns, [n for pns, n in [*four, (fifth_ns, fifth_name)] if pns == ns])
    seconds, left = wait_clean(ic, SHARE_PROFILE)
    say(f"   {seconds:.1f}s after the pods were gone: " + ", ".join(f"{k} {v}" for k, v in left.items()))


HEALTH_VALUES = (
    f"gpus.fake.profile={PROFILE}",
    "mig.strategy=none",
    "health.evict=true",
    "health.checkInterval=1",
    "monitoring.usageInterval=2",
)
HEALTH_FILE = "health-trainer.yaml"


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], cwd=REPO, capture_output=True, text=True, check=False)


def _allocated_device(ic: InstalledCluster, pod: dict[str, Any]) -> str:
    (r,) = results_of(claim_of(ic, pod))
    return str(r["device"])


def _running(ic: InstalledCluster, selector: str) -> list[dict[str, Any]]:
    return [
        p
        for p in ic.pods(NS, selector)
        if p.get("status", {}).get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
    ]


def _device_health(pod: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        r
        for cs in pod.get("status", {}).get("containerStatuses", [])
        for a in cs.get("allocatedResourcesStatus") or []
        for r in a.get("resources") or []
    ]


def _taints(ic: InstalledCluster, node: str, device: str) -> list[str]:
    devs = [d for d in published(ic).get(node, []) if d["name"] == device]
    return [f"{t['key']}={t.get('value', '')}:{t['effect']}" for d in devs for t in d.get("taints") or []]


def part3(ic: InstalledCluster) -> None:
    """GPU health: a fault taints the GPU, the pod's status says so, eviction moves it; an idle claim is flagged."""
    say("")
    say("== Part 3: GPU health and idle GPUs: 8 fake H100s per node, health.evict=true")
    ic.helm_uninstall()
    sets = " ".join(f"--set {v}" for v in HEALTH_VALUES)
    say(f"   helm install dra-gpu {CHART.relative_to(REPO)} -n dra-gpu {sets} ...")
    seconds = ic.helm_install(*HEALTH_VALUES)
    say(f"   every pod of the release Ready in {seconds:.1f}s")
    if not wait_for(lambda: all(len(full_gpus(devs)) == 8 and len(devs) == 8 for devs in nodes_published(ic)), 90):
        raise DemoError(f"expected 8 full GPUs per node, have {sorted(published(ic))}")
    docs = objects(["namespace.yaml", HEALTH_FILE])
    apply(ic.c, [d for d in docs if d["kind"] == "Namespace" and not _exists(ic, d)])
    kubectl_apply(ic, [HEALTH_FILE])
    ic.wait_running(NS, ["notebook"], timeout_s=120)
    if not wait_for(lambda: len(_running(ic, "app=trainer")) == 1, 120):
        raise DemoError("the trainer Deployment's pod did not run")
    (trainer,) = _running(ic, "app=trainer")
    name, node = trainer["metadata"]["name"], trainer["spec"]["nodeName"]
    device = _allocated_device(ic, trainer)
    minor = device.removeprefix("gpu-")
    say(f"   trainer pod {name} runs on {node}/{device}; notebook on "
        f"{ic.pod(NS, 'notebook')['spec']['nodeName']}/{_allocated_device(ic, ic.pod(NS, 'notebook'))}")  # fmt: skip
    busy_claim = claim_of(ic, trainer)
    assert busy_claim is not None
    state_dir = fake_state(ic.nodes[node], "")
    _cli("dra_driver.sources.fake_usage", "--state-dir", str(state_dir), "set", "--claim",
         busy_claim["metadata"]["uid"], "--utilization", "0.9", "--memory", "30Gi")  # fmt: skip
    faults = ("dra_driver.sources.fake_health", "--state-dir", str(state_dir), "--fake-gpus", PROFILE, "--node-name", node)

    say("")
    say(f"-- an XID no catalog knows (4242) on {node}/{device}: degraded, NoSchedule; the trainer keeps running")
    say(f"   python -m dra_driver.sources.fake_health ... xid --gpu {minor} --xid 4242")
    _cli(*faults, "xid", "--gpu", minor, "--xid", "4242")
    if not wait_for(lambda: any(r.get("health") == "Unhealthy" for r in _device_health(ic.pod(NS, name))), 60):
        raise DemoError(f"pod {name}'s status never showed its device Unhealthy: {_device_health(ic.pod(NS, name))}")
    (entry,) = _device_health(ic.pod(NS, name))
    say(f"   slice taint on {device}: {', '.join(_taints(ic, node, device))}")
    say(f"   kubectl get pod {name} -o jsonpath='{{.status.containerStatuses[0].allocatedResourcesStatus}}':")
    say(f"      {entry['resourceID']}: {entry['health']}: {entry.get('message', '')}")

    say("")
    say(f"-- XID 79 (GPU has fallen off the bus) on {node}/{device}: fatal, NoExecute")
    _cli(*faults, "xid", "--gpu", minor, "--xid", "79")
    started = time.monotonic()

    def replaced() -> bool:
        return any(p["metadata"]["name"] != name for p in _running(ic, "app=trainer"))

    if not wait_for(replaced, 120):
        raise DemoError(f"the trainer was not evicted and replaced; taints: {_taints(ic, node, device)}")
    (new,) = [p for p in _running(ic, "app=trainer") if p["metadata"]["name"] != name]
    new_node, new_device = new["spec"]["nodeName"], _allocated_device(ic, new)
    say(f"   slice taints on {device}: {', '.join(_taints(ic, node, device))}")
    say(f"   the controller-manager evicted {name}; its replacement {new['metadata']['name']} runs on "
        f"{new_node}/{new_device} ({time.monotonic() - started:.1f}s after the fault)")  # fmt: skip
    if (new_node, new_device) == (node, device):
        raise DemoError("the replacement landed on the failed GPU")

    say("")
    say("-- dra-gpu top (every plugin's /metrics through the API server); the notebook never used its GPU:")
    new_claim = claim_of(ic, new)
    assert new_claim is not None
    _cli("dra_driver.sources.fake_usage", "--state-dir", str(fake_state(ic.nodes[new_node], "")), "set", "--claim",
         new_claim["metadata"]["uid"], "--utilization", "0.9", "--memory", "30Gi")  # fmt: skip
    time.sleep(5)  # two usage samples
    top = _cli("dra_driver.cli.main", "top", "--kubeconfig", str(ic.c.kubeconfig), "--idle-after", "5")
    for line in top.stdout.splitlines():
        say(f"   {line}")
    flagged = [line for line in top.stdout.splitlines() if "dra-demo/notebook" in line and line.rstrip().endswith("!")]
    if top.returncode != 0 or not flagged or "trainer" not in top.stdout:
        raise DemoError(f"dra-gpu top did not flag the idle notebook ({top.returncode}): {top.stdout} {top.stderr}")
    say("   (! idle past --idle-after; the chart's DraGpuAllocatedIdle alert fires on the same metric after 30 min)")

    say("")
    say(f"-- the GPU is repaired: dra-gpu health repair {device} (kubectl exec into the plugin on {node})")
    _cli("dra_driver.cli.main", "health", "repair", device, "--plugin-dir", str(fake_state(ic.nodes[node], "").parent))
    if not wait_for(lambda: not _taints(ic, node, device), 30):
        raise DemoError(f"the taints of {device} stayed after the repair: {_taints(ic, node, device)}")
    say(f"   {node}/{device} has no taints again")
    say("")
    say(f"-- kubectl delete -f demo/{HEALTH_FILE}")
    kubectl_delete(ic, [d for d in docs if d["kind"] != "Namespace"])
    if not wait_for(lambda: not ic.pods(NS), 120):
        raise DemoError(f"pods left in {NS}: {[p['metadata']['name'] for p in ic.pods(NS)]}")
    seconds, left = wait_clean(ic, PROFILE)
    say(f"   {seconds:.1f}s after the pods were gone: " + ", ".join(f"{k} {v}" for k, v in left.items()))


def _exists(ic: InstalledCluster, doc: dict[str, Any]) -> bool:
    try:
        ic.c.api("GET", f"/api/v1/namespaces/{doc['metadata']['name']}")
    except ApiError:
        return False
    return True


def run(workdir: Path) -> int:
    started = time.monotonic()
    say("== dra-gpu as a platform team installs it: the image, helm install, pods in real containers")
    try:
        find_runtime()
    except ClusterError:
        say(f"   building the container runtime (containerd, runc shim, CNI, pause; once): {RUNTIME_BUILD.relative_to(REPO)}")
        stream([str(RUNTIME_BUILD)], Progress())
    say("   image: deploy/container/build-local.sh (deploy/container/Dockerfile; builds only when the tree changed)")
    images = build_images(Progress())
    helm = Helm.built(workdir / "helm-home")
    waited = wait_for_lock()
    with InstalledCluster(workdir, helm, images, nodes=NODES, progress=lambda line: say(f"   {line}")) as ic:
        try:
            part1(ic)
            part2(ic)
            part3(ic)
        except (ClusterError, HelmError, DemoError) as err:
            say("")
            say(f"demo FAILED: {err}")
            for diag in ic.node_diagnostics():
                say(diag)
            return 1
        say("")
        say("== shutting down (kubelets, containerd, control plane)")
    took = time.monotonic() - started - waited
    say(f"demo ok ({took:.0f}s" + (f", plus {waited:.0f}s waiting for the other cluster)" if waited else ")"))
    return 0


def main() -> int:
    workdir = Path(tempfile.mkdtemp(prefix="dra-gpu-demo-"))
    code = 1
    try:
        code = run(workdir)
    except (ClusterError, HelmError, DemoError) as err:
        say(f"demo FAILED: {err}")
    finally:
        if code == 0:
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            say(f"logs of every component: {workdir}")
    return code


if __name__ == "__main__":
    sys.exit(main())
