"""dra-gpu as platform teams install it: ``helm install`` of the built image on nodes that run real containers.

One `InstalledCluster` for the module (tests run in file order and build on each other): the
control plane, two nodes each running the kubelet on containerd + runc with a CNI bridge, the
image built by ``deploy/container/build-local.sh`` from ``deploy/container/Dockerfile``, and the
chart installed with fake H100s and dynamic MIG. Nothing below the kubelet is faked: the
plugin's pods run from the image, register through the kubelet's plugin registry (hostPath),
the workloads are real containers, and containerd applies our CDI specs to them. The tests read
what the containers printed (through the API server and the kubelet, as ``kubectl logs`` does)
and what the node holds (CDI specs, checkpoint, the MIG simulator's state) under each node's
directories.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dra_driver.core.driver import DEFAULT_DRIVER_NAME
from dra_driver.mig_backends.select import SIM_STATE_FILE
from dra_driver.mig_backends.sim import load_instances
from testkit.cluster import ApiError
from testkit.helm_cli import NAMESPACE, Helm
from testkit.installed import WORKLOAD_IMAGE, Images, InstalledCluster, build_images
from testkit.manifests import apply_file, bad_config_claim
from testkit.node_state import carved, cdi_specs, checkpoint_claims, mig_modes_on
from testkit.runtime_node import ContainerdNode

DEMO = Path(__file__).resolve().parents[1] / "demo"
NS = "dra-demo"
DRIVER = DEFAULT_DRIVER_NAME
PLUGIN_DIR = f"/var/lib/kubelet/plugins/{DRIVER}"
PROFILE = "h100x8"
VALUES = (f"gpus.fake.profile={PROFILE}", "mig.strategy=dynamic", "webhook.enabled=true")
REBOOT_BOUND_S = 45.0
"""Node Ready after a reboot → both GPU pods' containers running again (it was 180 s before the plugin prompted them)."""
WORKLOADS = ("gpu-h100.yaml", "two-gpus.yaml", "mig-1g.yaml", "shared-claim.yaml", "mps-claim.yaml")
SLICES = "/apis/resource.k8s.io/v1/resourceslices"
CLAIMS = f"/apis/resource.k8s.io/v1/namespaces/{NS}/resourceclaims"


@pytest.fixture(scope="module")
def images() -> Images:
    return build_images()


@pytest.fixture(scope="module")
def ic(tmp_path_factory: pytest.TempPathFactory, helm: Helm, images: Images) -> Iterator[InstalledCluster]:
    with InstalledCluster(tmp_path_factory.mktemp("installed"), helm, images, values=VALUES, progress=lambda _: None) as ic:
        yield ic


# -- helpers ---------------------------------------------------------------------------------------


def claim_of(ic: InstalledCluster, pod: dict[str, Any]) -> dict[str, Any]:
    """The pod's (first) claim: made from its template, or named in its spec."""
    statuses = pod["status"].get("resourceClaimStatuses") or []
    name = statuses[0]["resourceClaimName"] if statuses else pod["spec"]["resourceClaims"][0]["resourceClaimName"]
    return ic.c.api("GET", f"{CLAIMS}/{name}")


def device_attrs(ic: InstalledCluster, node: str, device: str) -> dict[str, Any]:
    for s in ic.c.api("GET", SLICES)["items"]:
        if s["spec"].get("nodeName") == node:
            for d in s["spec"].get("devices", []):
                if d["name"] == device:
                    return {k: next(iter(v.values())) for k, v in d.get("attributes", {}).items()}
    raise AssertionError(f"{device} not published by {node}")


def printed_env(log: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in log.splitlines() if re.match(r"^(GPU_DEVICE|CUDA_)\w*=", line))


def printed_device_nodes(log: str) -> dict[str, str]:
    """``ls -l /dev/nvidia*`` lines → path: "c <major>, <minor>" (the entries of a directory it
    lists, e.g. ``/dev/nvidia-caps:``, under that directory)."""
    out, directory = {}, ""
    for line in log.splitlines():
        if re.match(r"^/dev/\S+:$", line):
            directory = line[:-1]
            continue
        m = re.match(r"^c\S+\s+\d+\s+\S+\s+\S+\s+(\d+),\s*(\d+)\s.*\s(\S+)$", line)
        if m:
            path = m.group(3) if m.group(3).startswith("/") else f"{directory}/{m.group(3)}"
            out[path] = f"c {m.group(1)}, {m.group(2)}"
    return out


def printed(ic: InstalledCluster, pod: str, container: str = "") -> str:
    """What a container printed, once it has printed its device nodes (it may run before it printed)."""
    deadline = time.monotonic() + 30
    log = ic.logs(NS, pod, container)
    while "/dev/nvidia" not in log and time.monotonic() < deadline:
        time.sleep(0.3)
        log = ic.logs(NS, pod, container)
    return log


def plugin_logs(ic: InstalledCluster, pod: str) -> list[dict[str, Any]]:
    lines = []
    for line in ic.logs(NAMESPACE, pod).splitlines():
        try:
            lines.append(json.loads(line))
        except ValueError:
            continue
    return lines


def plugin_pod_on(ic: InstalledCluster, node: str) -> dict[str, Any]:
    pods = [p for p in ic.plugin_pods() if p["spec"].get("nodeName") == node and not p["metadata"].get("deletionTimestamp")]
    assert len(pods) == 1, [p["metadata"]["name"] for p in pods]
    return pods[0]


# -- tests -----------------------------------------------------------------------------------------


def test_helm_install_runs_the_plugin_from_the_image_on_every_node_and_it_publishes(ic: InstalledCluster) -> None:
    """The DaemonSet's pods run the built image, register with each node's kubelet, and publish its GPUs."""
    seconds = ic.helm_install()
    assert seconds < 240
    pods = ic.plugin_pods()
    assert {"node-a", "node-b"} == {p["spec"]["nodeName"] for p in pods}
    for p in pods:
        (status,) = p["status"]["containerStatuses"]
        assert status["ready"] and status["image"] == ic.images.app_ref, status
        entries = plugin_logs(ic, p["metadata"]["name"])
        assert any(e.get("event") == "plugin_registered" for e in entries), entries[-5:]
    deadline = time.monotonic() + 60
    while True:
        slices = ic.c.api("GET", SLICES)["items"]
        gpus = {
            (s["spec"]["nodeName"], d["name"]) for s in slices for d in s["spec"].get("devices", []) if "-mig-" not in d["name"]
        }
        if len(gpus) == 16 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert {(n, f"gpu-{i}") for n in ("node-a", "node-b") for i in range(8)} == gpus
    for node in ic.nodes.values():  # the kubelet's plugin registry holds the plugin's registration socket
        assert [s.name for s in node.path("/var/lib/kubelet/plugins_registry").iterdir() if s.name.startswith(DRIVER)]
    ic.wait_webhook()


def test_the_plugin_container_runs_unprivileged_read_only_with_no_capabilities(ic: InstalledCluster) -> None:
    """With fake GPUs the chart's securityContext holds for real: checked on the plugin's process."""
    for name, node in ic.nodes.items():
        pod = plugin_pod_on(ic, name)
        container_id = pod["status"]["containerStatuses"][0]["containerID"].removeprefix("containerd://")
        pid = task_pid(node, container_id)
        status = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
        assert 0 == int(status["CapEff"].strip(), 16), status["CapEff"]
        assert 0 == int(status["CapBnd"].strip(), 16), status["CapBnd"]
        assert "1" == status["NoNewPrivs"].strip()
        root = [m for m in Path(f"/proc/{pid}/mountinfo").read_text().splitlines() if m.split()[4] == "/"]
        assert root and "ro" in root[0].split()[5].split(","), root


def container_mounts(node: ContainerdNode, container_id: str) -> dict[str, str]:
    """A running container's mount points → the source directory on the machine (bind mounts)."""
    pid = task_pid(node, container_id.removeprefix("containerd://"))
    out = {}
    for line in Path(f"/proc/{pid}/mountinfo").read_text().splitlines():
        fields = line.split()
        out[fields[4]] = fields[3]  # mount point -> root of the mount within its filesystem
    return out


def task_pid(node: ContainerdNode, container_id: str) -> int:
    for line in node.ctr("tasks", "list").stdout.splitlines()[1:]:
        fields = line.split()
        if fields and fields[0] == container_id:
            return int(fields[1])
    raise AssertionError(f"no task {container_id} on {node.name}")


def test_the_webhook_deployment_denies_a_bad_config_at_create_time(ic: InstalledCluster) -> None:
    """The chart's webhook runs as a Deployment; the real API server calls it through its Service."""
    bad = bad_config_claim("default", DRIVER)
    with pytest.raises(ApiError) as err:
        ic.c.api("POST", "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims", bad)
    assert 422 == err.value.status, err.value.body
    assert "sharing.strategy: unknown value 'Magic'" in err.value.body["message"]
    assert "spec.devices.config[0].opaque.parameters" in err.value.body["message"]
    with pytest.raises(ApiError) as gone:
        ic.c.api("GET", "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/bad-config")
    assert 404 == gone.value.status


def test_workloads_run_in_real_containers_that_see_what_the_cdi_specs_give(ic: InstalledCluster) -> None:
    """demo/ manifests: each container prints its env and /dev/nvidia*; both match the allocation."""
    for f in ("namespace.yaml", *WORKLOADS):
        apply_file(ic.c, DEMO / f)
    names = [p["metadata"]["name"] for p in ic.pods(NS)]
    pods = ic.wait_running(NS, names)
    for name, pod in pods.items():
        node = pod["spec"]["nodeName"]
        claim = claim_of(ic, pod)
        results = claim["status"]["allocation"]["devices"]["results"]
        for container in pod["spec"]["containers"]:
            log = printed(ic, name, container["name"])
            env, nodes = printed_env(log), printed_device_nodes(log)
            for r in results:
                prefix = "GPU_DEVICE_" + re.sub(r"[^A-Z0-9]", "_", r["device"].upper())
                attrs = device_attrs(ic, node, r["device"])
                assert r["device"] == env.get(prefix), (name, env)
                assert claim["metadata"]["uid"] == env.get(f"{prefix}_RESOURCE_CLAIM"), (name, env)
                minor = int(r["device"].split("-")[1])  # gpu-<minor>[-mig-...]
                assert "c 1, 3" == nodes.get(f"/dev/nvidia{minor}"), (name, log)  # the fake GPU's node: /dev/null
                if "-mig-" in r["device"]:
                    assert env.get(f"{prefix}_UUID", "").startswith("MIG-"), (name, env)
                    caps = [p for p in nodes if p.startswith("/dev/nvidia-caps/nvidia-cap")]
                    assert caps and {"c 1, 3"} == {nodes[p] for p in caps}, (name, log)  # the instance's caps
                    assert attrs["parentUUID"] == env.get(f"{prefix}_PARENT_UUID"), (name, env)
                else:
                    assert attrs["uuid"] == env.get(f"{prefix}_UUID"), (name, env)
            assert {"/dev/nvidiactl", "/dev/nvidia-uvm"} <= set(nodes), (name, log)
            if name.startswith("shared-"):
                assert "TimeSlicing" in env.values(), env
            if name == "mps":
                assert "/tmp/nvidia-mps" == env.get("CUDA_MPS_PIPE_DIRECTORY"), env
                assert "MPS" in env.values(), env
                # The daemon's pipe and shm directories, bind-mounted by containerd from the spec.
                status = next(s for s in pod["status"]["containerStatuses"] if s["name"] == container["name"])
                mounts = container_mounts(ic.nodes[node], status["containerID"])
                daemon = f"/plugins/{DRIVER}/mps/"  # under the node's /var/lib/kubelet, wherever that lives
                assert daemon in mounts.get("/tmp/nvidia-mps", "") and mounts["/tmp/nvidia-mps"].endswith("/pipe"), mounts
                assert daemon in mounts.get("/dev/shm", "") and mounts["/dev/shm"].endswith("/shm"), mounts
    for name, node in ic.nodes.items():
        on_node = [p for p in pods.values() if p["spec"]["nodeName"] == name]
        assert len(cdi_specs(node)) == len({claim_of(ic, p)["metadata"]["uid"] for p in on_node})


def test_a_rolling_upgrade_keeps_running_pods_and_their_claims_and_the_new_plugin_takes_over(ic: InstalledCluster) -> None:
    """helm upgrade to a new image tag while GPU pods run: containers untouched, nothing unprepared;
    then deleting a pod unprepares it through the new plugin pod."""
    before = {p["metadata"]["name"]: p for p in ic.pods(NS)}
    specs = {n: cdi_specs(node) for n, node in ic.nodes.items()}
    old_plugins = {p["metadata"]["name"] for p in ic.plugin_pods()}
    new_tag = f"{ic.images.tag}-next"
    for node in ic.nodes.values():
        node.tag_image(ic.images.app_ref, f"localhost/dra-gpu:{new_tag}")
    ic.helm_upgrade(f"image.tag={new_tag}")
    deadline = time.monotonic() + 120
    while True:
        plugins = ic.plugin_pods()
        fresh = [p for p in plugins if p["metadata"]["name"] not in old_plugins]
        done = (
            len(fresh) == 2
            and len(plugins) == 2
            and all(p["status"].get("containerStatuses", [{}])[0].get("ready") for p in fresh)
        )
        if done or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert done, [(p["metadata"]["name"], p["status"].get("phase")) for p in plugins]
    # (Both tags name one image here, so the runtime may report either name in the status.)
    assert {f"localhost/dra-gpu:{new_tag}"} == {p["spec"]["containers"][0]["image"] for p in fresh}
    after = {p["metadata"]["name"]: p for p in ic.pods(NS)}
    for name, pod in before.items():
        old = [(s["containerID"], s["restartCount"]) for s in pod["status"]["containerStatuses"]]
        new = [(s["containerID"], s["restartCount"]) for s in after[name]["status"]["containerStatuses"]]
        assert old == new, name
    assert specs == {n: cdi_specs(node) for n, node in ic.nodes.items()}
    # A pod whose claim is its own (made from a template): delete it, watch the new plugin unprepare.
    victim = next(p for p in after.values() if p["status"].get("resourceClaimStatuses"))
    uid = claim_of(ic, victim)["metadata"]["uid"]
    ic.c.api("DELETE", f"/api/v1/namespaces/{NS}/pods/{victim['metadata']['name']}?gracePeriodSeconds=0")
    ic.wait_gone(NS, [victim["metadata"]["name"]])
    node = ic.nodes[victim["spec"]["nodeName"]]
    deadline = time.monotonic() + 60
    # Unprepare removes the CDI spec before it saves the checkpoint: wait for both.
    while (any(uid in s for s in cdi_specs(node)) or uid in checkpoint_claims(node)) and time.monotonic() < deadline:
        time.sleep(0.3)
    assert not any(uid in s for s in cdi_specs(node))
    assert uid not in checkpoint_claims(node)
    new_a = plugin_pod_on(ic, node.name)["metadata"]["name"]
    assert any(e.get("event") == "claim_unprepared" and e.get("claim_uid") == uid for e in plugin_logs(ic, new_a))


def gpu_pod(name: str, template: str, node: str) -> dict[str, Any]:
    """A pod that restarts (as a Deployment's would), on ``node``, with one claim from ``template``."""
    cmd = "env | grep -E '^(GPU_DEVICE|CUDA_)' | sort; ls -l /dev/nvidia* 2>/dev/null; sleep 3600"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "restartPolicy": "Always",
            "nodeSelector": {"kubernetes.io/hostname": node},
            "containers": [
                {
                    "name": "app",
                    "image": WORKLOAD_IMAGE,
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["sh", "-c", cmd],
                    "resources": {"claims": [{"name": "gpu"}]},
                }
            ],
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": template}],
        },
    }


def test_after_a_node_reboot_claims_are_prepared_afresh_and_containers_start_with_their_devices(
    ic: InstalledCluster,
) -> None:
    """Power-cycle node-a (containers die, /run emptied, new boot id): the plugin pod comes back,
    sees the new boot, and the kubelet's prepare calls re-carve MIG and rewrite the CDI specs."""
    node = ic.nodes["node-a"]
    for name, template in (("reboot-mig", "mig-1g"), ("reboot-gpu", "h100")):
        ic.c.api("POST", f"/api/v1/namespaces/{NS}/pods", gpu_pod(name, template, "node-a"))
    pods = ic.wait_running(NS, ["reboot-mig", "reboot-gpu"])
    before = {n: p["status"]["containerStatuses"][0]["containerID"] for n, p in pods.items()}
    uids = {n: claim_of(ic, p)["metadata"]["uid"] for n, p in pods.items()}
    mig_before = printed_env(printed(ic, "reboot-mig"))
    boot_id = node.reboot()
    # The plugin's pod starts, registers and prompts the pods that wait: back in 4-8 s from the plugin's
    # start on the 2-core VM (docs/perf/2026-11-28-restart-latency-containerd.md). Without the prompt the
    # kubelet's resync comes 60-90 s after its failed prepare, which this bound does not reach.
    deadline = time.monotonic() + REBOOT_BOUND_S
    while True:
        now = {p["metadata"]["name"]: p for p in ic.pods(NS) if p["metadata"]["name"] in before}
        ids = {n: (p["status"].get("containerStatuses") or [{}])[0].get("containerID") for n, p in now.items()}
        restarted = all(
            ids[n] and ids[n] != before[n] and "running" in now[n]["status"]["containerStatuses"][0]["state"] for n in ids
        )
        if restarted or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert restarted, [ic.explain_pod(NS, n) for n in before]
    for name, uid in uids.items():
        assert any(uid in spec for spec in cdi_specs(node)), (name, cdi_specs(node))
        env = printed_env(printed(ic, name))
        assert uid in env.values(), env
        assert "c 1, 3" in printed_device_nodes(printed(ic, name)).values()
    mig_after = printed_env(printed(ic, "reboot-mig"))
    (key,) = [k for k in mig_after if k.endswith("_UUID") and not k.endswith("PARENT_UUID")]
    assert mig_after[key].startswith("MIG-") and mig_after[key] != mig_before[key]  # carved again after the reboot
    # The plugin saw the new boot: it said so (a Node Event too) and started its checkpoint afresh.
    plugin = plugin_pod_on(ic, "node-a")["metadata"]["name"]
    notices = [e for e in plugin_logs(ic, plugin) if e.get("event") == "checkpoint_notice"]
    assert "NodeRebooted" in [e.get("reason") for e in notices], notices
    cp = json.loads(node.path(f"{PLUGIN_DIR}/checkpoint.json").read_text())["data"]
    assert boot_id == cp["nodeBootID"]
    assert set(uids.values()) <= set(cp["claims"])
    live = {
        inst.uuid for insts in load_instances(node.path(f"{PLUGIN_DIR}/fake-gpus/{SIM_STATE_FILE}")).values() for inst in insts
    }
    assert mig_after[key] in live and mig_before[key] not in live


def test_deleting_the_pods_and_helm_uninstall_leave_nothing_behind(ic: InstalledCluster) -> None:
    """No CDI spec, checkpoint entry, MIG instance (or MIG mode), sharing daemon or ResourceSlice."""
    names = [p["metadata"]["name"] for p in ic.pods(NS)]
    for name in names:
        ic.c.api("DELETE", f"/api/v1/namespaces/{NS}/pods/{name}?gracePeriodSeconds=0")
    ic.wait_gone(NS, names)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        left = {n: (cdi_specs(node), checkpoint_claims(node), len(carved(node, PROFILE))) for n, node in ic.nodes.items()}
        if all(v == ([], [], 0) for v in left.values()):
            break
        time.sleep(0.5)
    assert all(v == ([], [], 0) for v in left.values()), left
    assert 0 == sum(mig_modes_on(node) for node in ic.nodes.values())
    for node in ic.nodes.values():
        sharing = node.path(f"{PLUGIN_DIR}/fake-gpus/sharing-state.json")
        state = json.loads(sharing.read_text()) if sharing.exists() else {}
        assert not state.get("mps") and not state.get("timeSlices"), state
    ic.helm_uninstall()
    deadline = time.monotonic() + 60
    while ic.c.api("GET", SLICES)["items"] and time.monotonic() < deadline:
        time.sleep(0.5)
    assert [] == ic.c.api("GET", SLICES)["items"]
    assert [] == ic.plugin_pods()
