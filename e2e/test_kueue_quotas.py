"""Team GPU quotas through Kueue, end to end: Kueue's manager, the real scheduler and kubelet, our plugin.

The control plane (with the Job controller) and the kubelet are the upstream v1.37 binaries; node-a's
kubelet runs on the fake CRI, whose containers exit when their env says (``FAKECRI_EXIT_AFTER``), so
Jobs complete. Our plugin publishes 8 fake H100s with dynamic MIG; the Helm chart installs the
DeviceClasses (gpu.dra-gpu.dev and the per-profile mig-1g.10gb.gpu.dra-gpu.dev). Kueue (v0.17.0, built
from its Go module by testkit/go/kueue/build.sh) runs with its webhooks and the Configuration of
demo/kueue/kueue-config.yaml (DRA counting on, the classes mapped to nvidia.com/gpu and
nvidia.com/mig-1g.10gb); demo/kueue/queues.yaml makes the ClusterQueues (team-a: 2 GPUs + 1 slice,
may borrow; team-b: 2 GPUs, lends, never borrows, one cohort) and the LocalQueues; the Jobs are
gpu-job.yaml and mig-job.yaml, renamed, with the fake runtime's exit time added.

(1) Quota, then queue: team B's third one-GPU Job waits (suspended, Workload not admitted, nothing
failed) while two run; when one finishes its GPU goes to the waiting Job. Team A's second MIG Job
waits likewise. (2) Borrowing: with team B idle, team A runs four one-GPU Jobs, two of them on team
B's quota; a fifth waits, and so does a Job of team B (nothing reclaims lent quota without preemption).
(3) A Job written for the device plugin (``nvidia.com/gpu: 1``, no claim) counts against the same
quota as the claims of gpu.dra-gpu.dev, and gets a dra-gpu GPU through the class's extendedResourceName.
Admission latencies go to stdout (``-s``): Job created -> its Workload seen, Admitted, its pod
Running (polled every 50 ms), and a Job's completion -> the waiting Job's Workload Admitted;
docs/perf/2026-11-28-kueue.md has figures.
"""

from __future__ import annotations

import copy
import statistics
import time
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from dra_driver.core.mig import parse_mig_device_name, profile_slug
from e2e.test_kubelet_node import events, wait_until
from testkit.claimdata import DRIVER
from testkit.cluster import LocalCluster
from testkit.helm_cli import Helm
from testkit.kueue import GROUP, QUEUE_LABEL, KueueManager, user_configuration
from testkit.manifests import apply, load
from testkit.node import KubeletNode
from testkit.plugin_process import PluginProcess

DEMO = Path(__file__).resolve().parents[1] / "demo" / "kueue"
NODE = "node-a"
TEAM_A, TEAM_B = "gpu-team-a", "gpu-team-b"
RESOURCE = "/apis/resource.k8s.io/v1"
POLL = 0.05  # latency figures are at most this much late


@dataclass
class Quotas:
    c: LocalCluster
    node: KubeletNode
    plugin: PluginProcess
    kueue: KueueManager

    def diagnostics(self) -> str:
        out = []
        for ns in (TEAM_A, TEAM_B):
            for wl in self.c.api("GET", f"{GROUP}/namespaces/{ns}/workloads")["items"]:
                conds = {c["type"]: (c["status"], c.get("reason"), c.get("message", "")[:120]) for c in conds_of(wl)}
                out.append(f"workload {ns}/{wl['metadata']['name']}: {conds}")
            for p in self.c.api("GET", f"/api/v1/namespaces/{ns}/pods")["items"]:
                out.append(f"pod {ns}/{p['metadata']['name']}: {p['status'].get('phase')} {p['status'].get('conditions')}")
        out += [self.kueue.diagnostics(), self.node.diagnostics(20), f"(control-plane logs in {self.c.log_dir})"]
        return "\n".join(out)


def conds_of(obj: dict[str, Any]) -> list[dict[str, Any]]:
    return list(obj.get("status", {}).get("conditions") or [])


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    return next((c for c in conds_of(obj) if c["type"] == kind and c["status"] == "True"), None)


def listed(c: LocalCluster, path: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = c.api("GET", path)["items"]
    return items


def gone(c: LocalCluster, path: str) -> bool:
    return not listed(c, path)


def active(c: LocalCluster, cluster_queue: str) -> dict[str, Any] | None:
    return condition(c.api("GET", f"{GROUP}/clusterqueues/{cluster_queue}"), "Active")


@pytest.fixture(scope="module")
def quotas(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Quotas]:
    tmp = tmp_path_factory.mktemp("kueue")
    with (
        LocalCluster(with_scheduler=True, with_controller_manager=True, log_dir=tmp / "k8s-logs") as c,
        KubeletNode(c, NODE, tmp / NODE) as node,
    ):
        plugin = PluginProcess.on_node(
            node, tmp / "plugin", kubeconfig=c.kubeconfig, extra_args=("--mig", "dynamic", "--fake-mig-latency", "zero")
        )
        plugin.start()
        try:
            wait_until("the kubelet to register the plugin", lambda: events(plugin, "plugin_registered"), node.diagnostics)
            slices = f"{RESOURCE}/resourceslices?fieldSelector=spec.nodeName={NODE}"
            wait_until("the plugin's slices", lambda: c.api("GET", slices)["items"], node.diagnostics)
            # The chart's classes, the per-profile MIG ones included (rendered with a MIG strategy).
            Helm.built(tmp / "helm-home").install(c, "kubeletPlugin.enabled=false", "mig.strategy=dynamic")
            c.api("GET", f"{RESOURCE}/deviceclasses/mig-1g.10gb.{DRIVER}")
            with KueueManager(c, tmp / "kueue", config=user_configuration(DEMO / "kueue-config.yaml")) as kueue:
                q = Quotas(c, node, plugin, kueue)
                apply(c, load(DEMO / "queues.yaml"))
                templates = [o for f in ("gpu-job.yaml", "mig-job.yaml") for o in load(DEMO / f) if o["kind"] != "Job"]
                for ns in (TEAM_A, TEAM_B):
                    apply(c, [{**t, "metadata": {**t["metadata"], "namespace": ns}} for t in templates])
                    accounts = f"/api/v1/namespaces/{ns}/serviceaccounts"
                    wait_until(f"the default ServiceAccount of {ns}", partial(listed, c, accounts), q.diagnostics)
                for cq in ("team-a", "team-b"):
                    wait_until(f"ClusterQueue {cq} to be active", partial(active, c, cq), q.diagnostics)
                yield q
                kueue.check_alive()
                node.check_alive()
        finally:
            plugin.stop()


@dataclass
class Submitted:
    ns: str
    name: str
    uid: str
    posted: float  # monotonic time the API server answered the POST


def submit(q: Quotas, manifest: str, ns: str, name: str, exit_after: str | None = None) -> Submitted:
    """The demo's Job of ``manifest`` as ``ns/name``; its container exits ``exit_after`` after it starts (None: never)."""
    (job,) = [copy.deepcopy(o) for o in load(DEMO / manifest) if o["kind"] == "Job"]
    job["metadata"].update(name=name, namespace=ns)
    assert job["metadata"]["labels"][QUEUE_LABEL] == "gpus", job["metadata"]  # the namespace's LocalQueue
    if exit_after is not None:
        (container,) = job["spec"]["template"]["spec"]["containers"]
        container["env"] = [{"name": "FAKECRI_EXIT_AFTER", "value": exit_after}]
    stored = q.c.api("POST", f"/apis/batch/v1/namespaces/{ns}/jobs", job)
    posted = time.monotonic()
    assert stored["spec"].get("suspend") is True, f"Kueue's webhook did not suspend {ns}/{name}: {stored['spec']}"
    return Submitted(ns, name, stored["metadata"]["uid"], posted)


def workload(q: Quotas, job: Submitted) -> dict[str, Any] | None:
    """The Workload Kueue made for ``job`` (label kueue.x-k8s.io/job-uid)."""
    found = q.c.api("GET", f"{GROUP}/namespaces/{job.ns}/workloads?labelSelector=kueue.x-k8s.io/job-uid={job.uid}")
    items: list[dict[str, Any]] = found["items"]
    return items[0] if items else None


def poll(what: str, probe: Any, q: Quotas, timeout: float = 60.0) -> Any:
    """wait_until at ``POLL`` resolution, for latency figures."""
    deadline = time.monotonic() + timeout
    while not (value := probe()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}\n{q.diagnostics()}")
        time.sleep(POLL)
    return value


@dataclass
class Admission:
    """Seconds from a Job's creation to its Workload seen, Admitted, and the Job's pod Running."""

    workload: float
    admitted: float
    running: float

    def __str__(self) -> str:
        return f"{self.workload:.2f}/{self.admitted:.2f}/{self.running:.2f}"


def admitted(q: Quotas, job: Submitted) -> tuple[dict[str, Any], Admission]:
    """Wait for ``job``'s Workload to be admitted and its pod to run: (the Workload, when each happened)."""
    poll(f"{job.ns}/{job.name}'s Workload", lambda: workload(q, job), q)
    seen = time.monotonic() - job.posted
    wl = poll(f"{job.ns}/{job.name} to be admitted", lambda: (w := workload(q, job)) and condition(w, "Admitted") and w, q)
    at = time.monotonic() - job.posted
    poll(f"{job.ns}/{job.name}'s pod to run", lambda: any(p["status"].get("phase") == "Running" for p in pods_of(q, job)), q)
    return wl, Admission(seen, at, time.monotonic() - job.posted)


def summary(admissions: list[Admission]) -> str:
    """Median of each figure, and every Job's created -> Workload / Admitted / pod Running."""
    medians = [statistics.median(getattr(a, f) for a in admissions) for f in ("workload", "admitted", "running")]
    return (
        f"Job created -> Workload {medians[0]:.2f}s, -> Admitted {medians[1]:.2f}s, -> pod Running {medians[2]:.2f}s "
        f"(medians of {len(admissions)}; each: {', '.join(map(str, admissions))})"
    )


def assert_queued(q: Quotas, job: Submitted, resource: str) -> str:
    """``job`` waits: Workload without quota for lack of ``resource``, Job suspended and not failed, no pod; the reason."""
    wl = poll(f"{job.ns}/{job.name} to be queued", lambda: (w := workload(q, job)) and conds_of(w) and w, q)
    time.sleep(1.0)  # a wrong admission would come within a Kueue scheduling cycle
    wl = workload(q, job)
    assert wl is not None
    reserved = next(c for c in conds_of(wl) if c["type"] == "QuotaReserved")
    assert reserved["status"] == "False" and reserved["reason"] == "Pending", reserved
    assert "insufficient unused quota" in reserved["message"] and resource in reserved["message"], reserved
    assert not condition(wl, "Admitted") and not condition(wl, "Finished"), conds_of(wl)
    stored = q.c.api("GET", f"/apis/batch/v1/namespaces/{job.ns}/jobs/{job.name}")
    assert stored["spec"]["suspend"] is True and not condition(stored, "Failed"), stored.get("status")
    assert not pods_of(q, job), f"a queued Job has pods: {pods_of(q, job)}"
    return str(reserved["message"])


def pods_of(q: Quotas, job: Submitted) -> list[dict[str, Any]]:
    found = q.c.api("GET", f"/api/v1/namespaces/{job.ns}/pods?labelSelector=batch.kubernetes.io/job-name={job.name}")
    items: list[dict[str, Any]] = found["items"]
    return items


def allocated_device(q: Quotas, job: Submitted) -> str:
    """The device our driver got for ``job``'s pod (waits for its claim to be allocated)."""

    def device() -> str | None:
        for pod in pods_of(q, job):
            for st in pod["status"].get("resourceClaimStatuses") or []:
                claim = q.c.api("GET", f"{RESOURCE}/namespaces/{job.ns}/resourceclaims/{st['resourceClaimName']}")
                results = (claim.get("status", {}).get("allocation") or {}).get("devices", {}).get("results") or []
                if results and results[0]["driver"] == DRIVER:
                    return str(results[0]["device"])
        return None

    return str(wait_until(f"{job.ns}/{job.name}'s claim to be allocated", device, q.diagnostics))


def usage(wl: dict[str, Any]) -> dict[str, str]:
    """What Kueue counted for the Workload's (single) pod set."""
    (assignment,) = wl["status"]["admission"]["podSetAssignments"]
    return dict(assignment["resourceUsage"])


def delete_jobs(q: Quotas) -> None:
    for ns in (TEAM_A, TEAM_B):
        q.c.api("DELETE", f"/apis/batch/v1/namespaces/{ns}/jobs?propagationPolicy=Background")
    for ns in (TEAM_A, TEAM_B):
        wait_until(f"{ns}'s workloads to be gone", partial(gone, q.c, f"{GROUP}/namespaces/{ns}/workloads"), q.diagnostics)
        wait_until(
            f"{ns}'s pods to be gone",
            partial(gone, q.c, f"/api/v1/namespaces/{ns}/pods"),
            q.diagnostics,
            timeout=90,
        )


def test_jobs_over_a_teams_gpu_quota_wait_queued_and_are_admitted_when_a_job_finishes(quotas: Quotas) -> None:
    q = quotas
    latencies: list[Admission] = []
    # Team A's MIG quota: one 1g.10gb slice; team B has none to lend.
    m1 = submit(q, "mig-job.yaml", TEAM_A, "eval-1")
    wl, seconds = admitted(q, m1)
    latencies.append(seconds)
    assert usage(wl) == {"nvidia.com/mig-1g.10gb": "1"}, wl["status"]["admission"]  # counted through the profile's class
    slice_ = parse_mig_device_name(allocated_device(q, m1))
    assert slice_ is not None and slice_.slug == profile_slug("1g.10gb"), slice_
    m2 = submit(q, "mig-job.yaml", TEAM_A, "eval-2")
    assert_queued(q, m2, "nvidia.com/mig-1g.10gb")

    # Team B: 2 GPUs. train-1 runs 10 s, train-2 until deleted; train-3 waits for train-1's GPU.
    b1 = submit(q, "gpu-job.yaml", TEAM_B, "train-1", exit_after="10s")
    wl, seconds = admitted(q, b1)
    latencies.append(seconds)
    assert usage(wl) == {"nvidia.com/gpu": "1"}, wl["status"]["admission"]  # counted through gpu.dra-gpu.dev
    b2 = submit(q, "gpu-job.yaml", TEAM_B, "train-2")
    latencies.append(admitted(q, b2)[1])
    devices = {allocated_device(q, b1), allocated_device(q, b2)}
    assert len(devices) == 2 and all(parse_mig_device_name(d) is None for d in devices), devices
    b3 = submit(q, "gpu-job.yaml", TEAM_B, "train-3")
    why = assert_queued(q, b3, "nvidia.com/gpu")

    # train-1's container exits: the Job completes (not failed) and train-3 gets its GPU.
    def train1_complete() -> dict[str, Any] | None:
        assert not condition(workload(q, b3) or {}, "Admitted"), "train-3 was admitted while train-1 ran"
        return condition(q.c.api("GET", f"/apis/batch/v1/namespaces/{TEAM_B}/jobs/train-1"), "Complete")

    done = poll("train-1 to complete", train1_complete, q, timeout=90)
    t_done = time.monotonic()
    wl3 = poll("train-3 to be admitted", lambda: (w := workload(q, b3)) and condition(w, "Admitted") and w, q)
    handover = time.monotonic() - t_done
    poll("train-3's pod to run", lambda: any(p["status"].get("phase") == "Running" for p in pods_of(q, b3)), q)
    handover_running = time.monotonic() - t_done
    assert usage(wl3) == {"nvidia.com/gpu": "1"}
    assert condition(workload(q, b1) or {}, "Finished"), "train-1's Workload is not Finished"
    allocated_device(q, b3)
    # eval-2 still waits for team A's slice, and has not failed.
    assert not condition(q.c.api("GET", f"/apis/batch/v1/namespaces/{TEAM_A}/jobs/eval-2"), "Failed")
    assert not condition(workload(q, m2) or {}, "Admitted")
    print(
        f"\nKueue admission (v0.17.0, v1.37.2, 1 node, 8 fake H100s): {summary(latencies)}; "
        f"train-1 Complete ({done['lastTransitionTime']}) -> queued train-3 Admitted {handover:.2f}s, "
        f"its pod Running {handover_running:.2f}s; "
        f"queued because: {why[:110]}"
    )
    delete_jobs(q)


def test_a_team_borrows_the_cohorts_unused_gpus_and_waits_beyond_them(quotas: Quotas) -> None:
    q = quotas
    latencies: list[Admission] = []
    jobs = [submit(q, "gpu-job.yaml", TEAM_A, f"sweep-{i}") for i in range(1, 2)]
    latencies.append(admitted(q, jobs[0])[1])
    for i in range(2, 5):  # 2 of team A's own GPUs, then 2 of team B's
        jobs.append(submit(q, "gpu-job.yaml", TEAM_A, f"sweep-{i}"))
        latencies.append(admitted(q, jobs[-1])[1])

    def borrowed() -> dict[str, Any] | None:
        status = q.c.api("GET", f"{GROUP}/clusterqueues/team-a").get("status", {})
        for flavor in status.get("flavorsUsage") or []:
            for r in flavor["resources"]:
                if r["name"] == "nvidia.com/gpu" and r.get("total") == "4":
                    return dict(r)
        return None

    gpu = wait_until("team-a's usage of 4 GPUs", borrowed, q.diagnostics)
    assert gpu["borrowed"] == "2", gpu
    assert len({allocated_device(q, j) for j in jobs}) == 4
    fifth = submit(q, "gpu-job.yaml", TEAM_A, "sweep-5")
    assert_queued(q, fifth, "nvidia.com/gpu")
    # Team B's quota is lent out; without preemption (reclaimWithinCohort) its Job waits too.
    lender = submit(q, "gpu-job.yaml", TEAM_B, "train-late")
    assert_queued(q, lender, "nvidia.com/gpu")
    print(
        f"\nKueue borrowing: team-a runs 4 GPUs on a nominal quota of 2 (borrowed {gpu['borrowed']}); "
        f"{summary(latencies)}; the 5th and team-b's Job wait"
    )
    delete_jobs(q)


def test_a_device_plugin_style_job_counts_against_the_same_gpu_quota(quotas: Quotas) -> None:
    q = quotas
    b1 = submit(q, "gpu-job.yaml", TEAM_B, "train-1")
    admitted(q, b1)
    legacy = submit(q, "device-plugin-style-job.yaml", TEAM_B, "legacy-1")
    wl, timing = admitted(q, legacy)
    assert usage(wl) == {"nvidia.com/gpu": "1"}, wl["status"]["admission"]
    # The scheduler wrote the pod's claim from the class's extendedResourceName and allocated our GPU.
    (pod,) = pods_of(q, legacy)
    assert pod["status"].get("extendedResourceClaimStatus"), pod["status"]
    claim = pod["status"]["extendedResourceClaimStatus"]["resourceClaimName"]
    got = q.c.api("GET", f"{RESOURCE}/namespaces/{TEAM_B}/resourceclaims/{claim}")
    (result,) = got["status"]["allocation"]["devices"]["results"]
    assert result["driver"] == DRIVER and parse_mig_device_name(result["device"]) is None, result
    # Team B's 2 GPUs are in use, one asked for each way: the next Job of either kind waits.
    assert_queued(q, submit(q, "device-plugin-style-job.yaml", TEAM_B, "legacy-2"), "nvidia.com/gpu")
    assert_queued(q, submit(q, "gpu-job.yaml", TEAM_B, "train-2"), "nvidia.com/gpu")
    print(f"\nKueue, a device-plugin-style Job: created -> Workload/Admitted/pod Running {timing}s")
    delete_jobs(q)
