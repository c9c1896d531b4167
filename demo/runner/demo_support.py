"""The demo's steps and views: applying manifests, waiting for pods and allocations, tables, and
what the containers printed. ``demo/runner/demo.py`` tells the story with them.
"""

from __future__ import annotations

import fcntl
import os
import re
import subprocess
import time
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from dra_driver.core.driver import DEFAULT_DRIVER_NAME
from testkit.cluster import POD_NETWORK_LOCK, POD_NETWORK_WAIT_S, ApiError
from testkit.installed import InstalledCluster
from testkit.manifests import apply, load
from testkit.node_state import leftovers

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "demo"
DRIVER = DEFAULT_DRIVER_NAME
SLICES = "/apis/resource.k8s.io/v1/resourceslices"
NODES = ("node-a", "node-b")
MIG_NODE, OTHER_NODE = NODES

PROFILE = "h100x8"  # part 1's fake GPUs
SHARE_PROFILE = "a100-80x1"  # part 2's: one 80Gi GPU shared by capacity


class DemoError(RuntimeError):
    """Something the demo shows did not happen; the message says what (and the pod's story)."""


def say(msg: str = "") -> None:
    print(msg, flush=True)


def table(rows: list[list[str]], indent: str = "  ") -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join(indent + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows)


def wait_for(cond: Callable[[], bool], timeout: float, interval: float = 0.25) -> bool:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(interval)
    return True


class Progress:
    """Build output made readable: the scripts' own lines, and a heartbeat for the tools' chatter."""

    KEEP = re.compile(r"^(have |build |built |made |imported |wrote |removed |buildah |mmdebstrap |STEP |\S+\.sh: )")

    def __init__(self, heartbeat_s: float = 15.0) -> None:
        self.started = time.monotonic()
        self.last = self.started
        self.heartbeat_s = heartbeat_s

    def __call__(self, line: str) -> None:
        now = time.monotonic()
        if self.KEEP.match(line):
            say(f"   {line[:150]}")
            self.last = now
        elif line.strip() and now - self.last > self.heartbeat_s:
            say(f"   ... {now - self.started:.0f}s: {line.strip()[:120]}")
            self.last = now


def stream(argv: Sequence[str], progress: Callable[[str], None]) -> None:
    """Run a build script, its stderr lines through ``progress``; DemoError with the tail on failure."""
    tail: list[str] = []
    with subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=REPO) as proc:
        assert proc.stderr is not None
        for line in proc.stderr:
            tail = [*tail[-29:], line.rstrip()]
            progress(line.rstrip())
    if proc.returncode != 0:
        raise DemoError(f"{argv[0]} exited {proc.returncode}:\n" + "\n".join(tail))


def lock_holder() -> str | None:
    """The pid holding the machine-wide pod-network lock, or None when it is free (probe only)."""
    POD_NETWORK_LOCK.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(POD_NETWORK_LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return None
    except BlockingIOError:
        return os.pread(fd, 64, 0).decode(errors="replace").strip() or "?"
    finally:
        os.close(fd)  # closing drops the probe's lock, if it got it


def wait_for_lock() -> float:
    """Say so while another pod-network cluster runs here (LocalCluster waits for it silently); seconds waited."""
    holder = lock_holder()
    if holder is None:
        return 0.0
    say(f"   another local cluster with a pod network runs on this machine (pid {holder}); only one can: waiting ...")
    started = last = time.monotonic()
    while lock_holder() is not None and time.monotonic() - started < POD_NETWORK_WAIT_S:
        if time.monotonic() - last > 30:
            say(f"   ... still waiting ({time.monotonic() - started:.0f}s)")
            last = time.monotonic()
        time.sleep(1)
    say(f"   it is done; waited {time.monotonic() - started:.0f}s")
    return time.monotonic() - started


def objects(files: Iterable[str]) -> list[dict[str, Any]]:
    return [d for f in files for d in load(DEMO / f)]


def pod_names(docs: Iterable[dict[str, Any]]) -> list[str]:
    return [d["metadata"]["name"] for d in docs if d["kind"] == "Pod"]


def kubectl_apply(ic: InstalledCluster, files: Sequence[str]) -> list[str]:
    """Create every object of ``files`` (in order); the names of their pods."""
    docs = objects(files)
    say(f"   kubectl apply -f demo/{{{','.join(files)}}}" if len(files) > 1 else f"   kubectl apply -f demo/{files[0]}")
    apply(ic.c, docs)
    return pod_names(docs)


def kubectl_delete(ic: InstalledCluster, docs: Iterable[dict[str, Any]]) -> None:
    """Delete what ``kubectl delete -f`` would: pods first (at once), then their claims and templates."""
    docs = list(docs)
    for d in sorted(docs, key=lambda d: d["kind"] != "Pod"):
        if d["kind"] == "Namespace":
            continue
        ns, name = d["metadata"].get("namespace", "default"), d["metadata"]["name"]
        base = "/api/v1" if d["apiVersion"] == "v1" else f"/apis/{d['apiVersion']}"
        plural = {
            "Pod": "pods",
            "ResourceClaim": "resourceclaims",
            "ResourceClaimTemplate": "resourceclaimtemplates",
            "Deployment": "deployments",
        }
        try:
            ic.c.api("DELETE", f"{base}/namespaces/{ns}/{plural[d['kind']]}/{name}?gracePeriodSeconds=0")
        except ApiError as err:
            if err.status != 404:
                raise


def claim_of(ic: InstalledCluster, pod: dict[str, Any]) -> dict[str, Any] | None:
    """The pod's (first) claim, made from its template, named in its spec, or written by the scheduler for
    its extended resources (``nvidia.com/gpu``); None before it exists."""
    ns = pod["metadata"]["namespace"]
    statuses = pod["status"].get("resourceClaimStatuses") or []
    extended = pod["status"].get("extendedResourceClaimStatus") or {}
    if statuses:
        name = statuses[0].get("resourceClaimName")
    elif pod["spec"].get("resourceClaims"):
        name = pod["spec"]["resourceClaims"][0].get("resourceClaimName")
    else:
        name = extended.get("resourceClaimName")
    if not name:
        return None
    try:
        return ic.c.api("GET", f"/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims/{name}")
    except ApiError as err:
        if err.status == 404:
            return None
        raise


def results_of(claim: dict[str, Any] | None) -> list[dict[str, Any]]:
    alloc = ((claim or {}).get("status") or {}).get("allocation")
    return list(alloc["devices"]["results"]) if alloc else []


def schedule_message(pod: dict[str, Any]) -> str:
    """The scheduler's PodScheduled=False message ("" while it has not said anything)."""
    for c in pod["status"].get("conditions", []):
        if c["type"] == "PodScheduled" and c["status"] == "False":
            return str(c.get("message", ""))
    return ""


def started_at(pod: dict[str, Any]) -> float | None:
    """When the pod's first container started running (epoch seconds, the kubelet's 1 s resolution)."""
    times = [s["state"]["running"]["startedAt"] for s in pod["status"].get("containerStatuses", []) if "running" in s["state"]]
    return min(datetime.fromisoformat(t.replace("Z", "+00:00")).timestamp() for t in times) if times else None


def printed(ic: InstalledCluster, ns: str, pod: str, container: str) -> list[str]:
    """The lines the container printed (env, then ls -l /dev/nvidia*), once it printed them."""
    lines: list[str] = []

    def done() -> bool:
        nonlocal lines
        lines = ic.logs(ns, pod, container).splitlines()
        return any("/dev/nvidia" in line for line in lines)

    if not wait_for(done, 20, 0.3):
        raise DemoError(f"{pod}/{container} printed no /dev/nvidia* line in 20s: {ic.explain_pod(ns, pod)}")
    return lines


def env_of(lines: Iterable[str]) -> dict[str, str]:
    return dict(line.split("=", 1) for line in lines if ENV_LINE.match(line))


def env_prefix(device: str) -> str:
    return "GPU_DEVICE_" + re.sub(r"[^A-Z0-9]", "_", device.upper())


def published(ic: InstalledCluster) -> dict[str, list[dict[str, Any]]]:
    """Node → the devices this driver's ResourceSlices publish for it."""
    out: dict[str, list[dict[str, Any]]] = {}
    for s in ic.c.api("GET", SLICES)["items"]:
        if s["spec"].get("driver") == DRIVER:
            out.setdefault(s["spec"].get("nodeName", ""), []).extend(s["spec"].get("devices", []))
    return out


def cordon(ic: InstalledCluster, node: str, on: bool) -> None:
    patch = {"spec": {"unschedulable": on or None}}
    ic.c.api("PATCH", f"/api/v1/nodes/{node}", patch, content_type="application/merge-patch+json")


def wait_allocated(ic: InstalledCluster, ns: str, name: str, timeout: float = 60.0) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []

    def allocated() -> bool:
        nonlocal found
        found = results_of(claim_of(ic, ic.pod(ns, name)))
        return bool(found)

    if not wait_for(allocated, timeout):
        raise DemoError(f"{name}: no allocation after {timeout:.0f}s: {ic.explain_pod(ns, name)}")
    return found


def wait_pending(ic: InstalledCluster, ns: str, names: Sequence[str], timeout: float = 60.0) -> dict[str, str]:
    """Pod → the scheduler's reason, once it gave one for each (DemoError with the pod's story if not)."""
    reasons: dict[str, str] = {}
    deadline = time.monotonic() + timeout
    for name in names:
        while not (reason := schedule_message(pod := ic.pod(ns, name))):
            if pod["spec"].get("nodeName") or time.monotonic() > deadline:
                raise DemoError(f"{name} should stay Pending with the scheduler's reason: {ic.explain_pod(ns, name)}")
            time.sleep(0.3)
        reasons[name] = reason
    return reasons


def wait_clean(ic: InstalledCluster, profile: str, timeout: float = 90.0) -> tuple[float, dict[str, int]]:
    started = time.monotonic()
    left = leftovers(ic.nodes.values(), profile)
    while any(left.values()) and time.monotonic() - started < timeout:
        time.sleep(0.3)
        left = leftovers(ic.nodes.values(), profile)
    if any(left.values()):
        raise DemoError(f"left behind {timeout:.0f}s after the pods were deleted: {left}")
    return time.monotonic() - started, left


ENV_LINE = re.compile(r"^(GPU_DEVICE|CUDA_)\w*=")


LS_LINE = re.compile(r"^c\S+\s+\d+\s+\S+\s+\S+\s+(\d+),\s*(\d+)\s.*\s(\S+)$")


def compact(lines: Sequence[str]) -> list[str]:
    """The env lines as printed; ``ls -l /dev/nvidia*`` as one line of names (with major,minor unless 1,3).

    Fake GPUs get device nodes backed by /dev/null (char 1,3); any other line is kept as printed.
    """
    env, other, nodes = [], [], []
    where = "/dev"
    for line in lines:
        found = LS_LINE.match(line)
        if ENV_LINE.match(line):
            env.append(line)
        elif line.startswith("/dev/") and line.endswith(":"):
            where = line[:-1]
        elif found:
            major, minor, name = found.groups()
            path = name if name.startswith("/") else f"{where}/{name}"
            nodes.append(path.removeprefix("/dev/") + ("" if (major, minor) == ("1", "3") else f" (char {major},{minor})"))
        elif line.strip() and not line.startswith("total "):
            other.append(line)
    return [*env, *other, f"ls -l /dev/nvidia*: {' '.join(nodes) or '(none)'}"]


def show_printed(ic: InstalledCluster, pods: Sequence[dict[str, Any]], *, qualified: bool = False) -> None:
    """Each running pod's containers' lines, indented under the pod name (and the container's, if several)."""
    seen: dict[tuple[str, ...], str] = {}
    for pod in pods:
        ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        containers = [c["name"] for c in pod["spec"]["containers"]]
        label = f"{ns}/{name}" if qualified else name
        for cname in containers:
            head = f"{label}, container {cname}" if len(containers) > 1 else label
            lines = tuple(compact(printed(ic, ns, name, cname)))
            if lines in seen:
                say(f"  {head} (on {pod['spec']['nodeName']}): the same lines as {seen[lines]}")
                continue
            seen[lines] = head
            say(f"  {head} (on {pod['spec']['nodeName']}):")
            for line in lines:
                say(f"      {line}")


def check_env(ic: InstalledCluster, pod: dict[str, Any], results: Sequence[dict[str, Any]], claim_uid: str) -> list[str]:
    """What is wrong with the env the pod's containers printed, against its claim's allocation ([] when right)."""
    wrong = []
    ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
    for c in pod["spec"]["containers"]:
        env = env_of(printed(ic, ns, name, c["name"]))
        for r in results:
            prefix = env_prefix(r["device"])
            if env.get(prefix) != r["device"] or env.get(f"{prefix}_RESOURCE_CLAIM") != claim_uid:
                wrong.append(f"{name}/{c['name']}: no {prefix}={r['device']} for claim {claim_uid} in {sorted(env)}")
    return wrong
