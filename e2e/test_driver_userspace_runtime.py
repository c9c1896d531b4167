"""The driver's user space in the claim, in real containers: containerd + runc apply the claim's CDI spec.

One node for the module (tests run in file order, each restarting the plugin with its own
driver root): the control plane, a `ContainerdNode` (kubelet, containerd, runc, CNI), and our
plugin as a host process with fake H100s and ``--driver-root`` (with it, fake GPUs need a
driver as real ones do), its registry, plugin and CDI directories the node's own. The driver
root is made at test time with gcc (``testkit.fake_driver``): ``libcuda.so.580.95.05`` with SONAME
``libcuda.so.1`` exporting ``cuInit`` (returns 0), ``libnvidia-ml.so.580.95.05`` with SONAME
``libnvidia-ml.so.1`` exporting ``nvmlInit_v2``, a ``nvidia-smi``, and an older driver's
``libcuda.so.535.104.05`` whose ``cuInit`` returns 35. The workload image is the stock Debian
image the build makes (no driver in it); the probe program (gcc-built against this machine's
glibc, the image's release) comes in through a read-only hostPath and ``dlopen``s the libraries
by SONAME, with ``LD_LIBRARY_PATH`` and ``PATH`` as CUDA images set them.

1. The driver root holds the driver: the probe prints what cuInit and nvmlInit_v2 of the running
   driver return (0), ``nvidia-smi`` runs from ``/usr/local/nvidia/bin``, the mounts are
   read-only; the same probe in a pod without a claim cannot dlopen anything.
2. The toolkit's CDI spec lists the device: the claim references ``nvidia.com/gpu=<uuid>``,
   containerd applies that spec (its env, its library mount), ours mounts nothing.
3. Neither: the plugin raises the Node Event; the pod stays ContainerCreating with the plugin's
   message in its events; no CDI spec, no checkpoint entry.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest

from dra_driver.sources.fake import FakeGpuSource
from testkit.claimdata import DRIVER
from testkit.cluster import ApiError, LocalCluster, cache_dir
from testkit.fake_driver import HOST_DEBIAN, OLD_VERSION, VERSION, Builder, install_driver
from testkit.installed import SHELL_IMAGE, build_images
from testkit.plugin_process import PluginProcess
from testkit.runtime_node import ContainerdNode, sweep_leftovers

T = TypeVar("T")
RESOURCE = "/apis/resource.k8s.io/v1"
PODS = "/api/v1/namespaces/default/pods"
UUIDS = [g.uuid for g in FakeGpuSource("h100x8", "node-a").gpus()]
# As CUDA images set them (nvidia/cuda: ENV LD_LIBRARY_PATH, PATH): the claim's mounts are there.
CUDA_IMAGE_ENV = [
    {"name": "LD_LIBRARY_PATH", "value": "/usr/local/nvidia/lib:/usr/local/nvidia/lib64"},
    {"name": "PATH", "value": "/usr/local/nvidia/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
]
PROBE_SCRIPT = (
    "/probe/probe; echo probe-exit=$?; nvidia-smi || echo no-nvidia-smi; "
    "ls /usr/local/nvidia/lib64 2>&1 | sed 's/^/lib64: /'; "
    "if (echo x > /usr/local/nvidia/lib64/libcuda.so.1) 2>/dev/null; then echo written; else echo write-refused; fi; "
    "env | grep '^TOOLKIT_' | sort; echo probe-done; sleep 3600"
)


def wait_until(what: str, probe: Callable[[], T | None], diagnostics: Callable[[], str], timeout: float = 90.0) -> T:
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}\n{diagnostics()}")
        time.sleep(0.3)


@dataclass
class Env:
    """The module's cluster, node, plugin and fake driver."""

    c: LocalCluster
    node: ContainerdNode
    plugin: PluginProcess
    driver_root: Path
    empty_root: Path
    probe_dir: Path

    def diagnostics(self) -> str:
        pods = self.c.api("GET", PODS)["items"]
        plugin_tail = "\n".join(self.plugin.log.read_text().splitlines()[-25:]) if self.plugin.log.exists() else ""
        return (
            f"pods: {json.dumps({p['metadata']['name']: p.get('status') for p in pods})[:3000]}\n"
            f"--- plugin log {self.plugin.log}:\n{plugin_tail}\n{self.node.diagnostics()}"
        )

    def restart_plugin(self, driver_root: Path) -> None:
        """(Re)start the plugin with ``driver_root``; return once the kubelet registered it and its 8 GPUs are published."""
        self.plugin.stop()
        registered = (
            sum(1 for e in self.plugin.logs() if e.get("event") == "plugin_registered") if self.plugin.log.exists() else 0
        )
        self.plugin.extra_args = ("--driver-root", str(driver_root))
        self.plugin.start()
        wait_until(
            "the kubelet to register the plugin",
            lambda: sum(1 for e in self.plugin.logs() if e.get("event") == "plugin_registered") > registered,
            self.diagnostics,
        )

    def events(self, name: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self.c.api(
            "GET", f"/api/v1/namespaces/default/events?fieldSelector=involvedObject.name={name}"
        )["items"]
        return items

    def create_probe_pod(self, name: str, *, claim: bool = True) -> None:
        container: dict[str, Any] = {
            "name": "probe",
            "image": SHELL_IMAGE,
            "imagePullPolicy": "Never",
            "command": ["/bin/sh", "-c", PROBE_SCRIPT],
            "env": CUDA_IMAGE_ENV,
            "volumeMounts": [{"name": "probe", "mountPath": "/probe", "readOnly": True}],
        }
        spec: dict[str, Any] = {
            "containers": [container],
            "volumes": [{"name": "probe", "hostPath": {"path": str(self.probe_dir), "type": "Directory"}}],
            "terminationGracePeriodSeconds": 0,
        }
        if claim:
            container["resources"] = {"claims": [{"name": "gpu"}]}
            spec["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]
        self.c.api("POST", PODS, {"metadata": {"name": name}, "spec": spec})

    def printed(self, name: str) -> str:
        """What the probe pod printed, once it is done."""

        def log() -> str | None:
            try:
                text = self.c.api_text("GET", f"{PODS}/{name}/log", {"Accept": "*/*"})
            except ApiError:
                return None
            return text if "probe-done" in text else None

        return wait_until(f"pod {name} to print its probe", log, self.diagnostics)

    def claim_of(self, name: str) -> dict[str, Any]:
        pod = self.c.api("GET", f"{PODS}/{name}")
        (status,) = pod["status"]["resourceClaimStatuses"]
        claim: dict[str, Any] = self.c.api("GET", f"{RESOURCE}/namespaces/default/resourceclaims/{status['resourceClaimName']}")
        return claim

    def delete_pods(self, *names: str) -> None:
        for name in names:
            self.c.api("DELETE", f"{PODS}/{name}")

        def gone() -> bool:
            left = {p["metadata"]["name"] for p in self.c.api("GET", PODS)["items"]}
            return not left & set(names) and not self.claim_specs()

        wait_until(f"pods {names} gone and their claims unprepared", gone, self.diagnostics)

    def claim_specs(self) -> list[Path]:
        return sorted(self.node.path("/var/run/cdi").glob(f"k8s.{DRIVER}-claim_*.json"))

    def checkpoint_claims(self) -> dict[str, Any]:
        path = self.plugin.plugin_dir / "checkpoint.json"
        claims: dict[str, Any] = json.loads(path.read_text())["data"]["claims"] if path.exists() else {}
        return claims


def stock_image() -> Path:
    """The Debian shell image's archive (deploy/container/build-local.sh writes it beside the app's), built if missing.

    Only the shell image is needed: the app image, whose tag follows the tree, is not rebuilt for this module.
    """
    archive = cache_dir() / "images" / "dra-gpu-shell-bookworm.oci.tar"
    return archive if archive.is_file() else build_images().shell


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    shell_image = stock_image()
    work = tmp_path_factory.mktemp("drv")
    builder = Builder(work / "elf-cache")
    driver_root, empty_root, probe_dir = work / "driver-root", work / "empty-root", work / "probe"
    install_driver(builder, driver_root, HOST_DEBIAN)
    install_driver(builder, work / "old", HOST_DEBIAN, version=OLD_VERSION, cuda_returns=35)  # a leftover beside it
    shutil.copyfile(
        work / "old" / HOST_DEBIAN.lib_dir / f"libcuda.so.{OLD_VERSION}",
        driver_root / HOST_DEBIAN.lib_dir / f"libcuda.so.{OLD_VERSION}",
    )
    empty_root.mkdir()
    probe_dir.mkdir()
    shutil.copyfile(builder.probe(), probe_dir / "probe")
    (probe_dir / "probe").chmod(0o755)
    with LocalCluster(with_scheduler=True, with_controller_manager=True, pod_network=True, log_dir=work / "k8s-logs") as c:
        sweep_leftovers()
        with ContainerdNode(c, "node-a", work / "node-a", index=1, images=[shell_image]) as node:
            plugin = PluginProcess(
                work / "plugin",
                kubeconfig=c.kubeconfig,
                node="node-a",
                publish=True,
                registrar_dir=node.path("/var/lib/kubelet/plugins_registry"),
                plugins_dir=node.path("/var/lib/kubelet/plugins"),
                cdi_root=node.path("/var/run/cdi"),
            )
            e = Env(c, node, plugin, driver_root, empty_root, probe_dir)
            try:
                e.restart_plugin(driver_root)
                selector = {"cel": {"expression": f'device.driver == "{DRIVER}"'}}
                c.api("POST", f"{RESOURCE}/deviceclasses", {"metadata": {"name": DRIVER}, "spec": {"selectors": [selector]}})
                one_gpu = {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": DRIVER}}]}}
                template = {"metadata": {"name": "one-gpu"}, "spec": {"spec": one_gpu}}
                c.api("POST", f"{RESOURCE}/namespaces/default/resourceclaimtemplates", template)
                wait_until(
                    "the default ServiceAccount",
                    lambda: any(
                        s["metadata"]["name"] == "default"
                        for s in c.api("GET", "/api/v1/namespaces/default/serviceaccounts")["items"]
                    ),
                    e.diagnostics,
                )
                yield e
            finally:
                plugin.stop()


def test_a_stock_image_runs_the_drivers_libraries_through_the_claims_mounts_alone(env: Env) -> None:
    env.create_probe_pod("with-claim")
    env.create_probe_pod("no-claim", claim=False)
    out = env.printed("with-claim")
    # cuInit and nvmlInit_v2 of the running driver (the leftover 535's cuInit returns 35)
    assert "cuInit=0\nnvmlInit_v2=0\nprobe-exit=0\n" in out, out
    assert f"nvidia-smi of driver {VERSION}\n" in out, out
    assert {"lib64: libcuda.so.1", "lib64: libnvidia-ml.so.1"} == {line for line in out.splitlines() if line.startswith("lib64:")}
    assert "write-refused" in out, out  # read-only bind mounts
    # the same stock image without the claim has no driver at all
    bare = env.printed("no-claim")
    assert "libcuda.so.1: dlopen failed" in bare and "probe-exit=1" in bare and "no-nvidia-smi" in bare, bare
    # what containerd applied: our spec, its own containerEdits, read-only, the running driver's files
    (spec_file,) = env.claim_specs()
    mounts = json.loads(spec_file.read_text())["containerEdits"]["mounts"]
    assert {m["hostPath"] for m in mounts if "lib64" in m["containerPath"]} == {
        f"{env.driver_root}/{HOST_DEBIAN.lib_dir}/libcuda.so.{VERSION}",
        f"{env.driver_root}/{HOST_DEBIAN.lib_dir}/libnvidia-ml.so.{VERSION}",
    }
    env.delete_pods("with-claim", "no-claim")


def test_where_the_toolkits_spec_lists_the_device_the_claim_references_it_and_mounts_nothing(env: Env) -> None:
    lib = env.driver_root / HOST_DEBIAN.lib_dir
    toolkit = {
        "cdiVersion": "0.5.0",
        "kind": "nvidia.com/gpu",
        "containerEdits": {
            "env": ["TOOLKIT_SPEC=applied"],
            "mounts": [
                {
                    "hostPath": str(lib / f"libcuda.so.{VERSION}"),
                    "containerPath": "/usr/lib/x86_64-linux-gnu/libcuda.so.1",
                    "options": ["ro", "nosuid", "nodev", "bind"],
                },
                {
                    "hostPath": str(lib / f"libnvidia-ml.so.{VERSION}"),
                    "containerPath": "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1",
                    "options": ["ro", "nosuid", "nodev", "bind"],
                },
            ],
        },
        "devices": [{"name": uuid, "containerEdits": {"env": [f"TOOLKIT_DEVICE={uuid}"]}} for uuid in UUIDS],
    }
    toolkit_file = env.node.path("/var/run/cdi") / "nvidia.yaml"
    toolkit_file.write_text(json.dumps(toolkit))
    try:
        env.restart_plugin(env.driver_root)  # the toolkit's spec is read at start-up
        env.create_probe_pod("toolkit")
        out = env.printed("toolkit")
        (spec_file,) = env.claim_specs()
        spec = json.loads(spec_file.read_text())
        assert "containerEdits" not in spec, spec  # nothing of ours to mount
        (uuid,) = [e.split("=", 1)[1] for e in spec["devices"][0]["containerEdits"]["env"] if e.endswith(tuple(UUIDS))]
        claim_uid = env.claim_of("toolkit")["metadata"]["uid"]
        (prepared,) = [e for e in env.plugin.logs() if e.get("event") == "device_prepared" and e.get("claim_uid") == claim_uid]
        assert f"nvidia.com/gpu={uuid}" in prepared["cdi_device_ids"], prepared  # the kubelet passed it to containerd
        assert f"TOOLKIT_DEVICE={uuid}\nTOOLKIT_SPEC=applied\n" in out, out  # which applied the toolkit's spec
        assert "cuInit=0\nnvmlInit_v2=0\n" in out, out  # through the toolkit's mounts
        assert "lib64: ls: cannot access" in out, out  # and none of ours
        env.delete_pods("toolkit")
    finally:
        toolkit_file.unlink()


def test_without_either_the_pod_waits_with_the_plugins_message_and_nothing_is_prepared(env: Env) -> None:
    env.restart_plugin(env.empty_root)
    (line,) = [e for e in env.plugin.logs() if e.get("event") == "driver_userspace_missing"]
    message = line["message"]
    assert str(env.empty_root) in message and f"libcuda.so.{VERSION}" in message
    wait_until(
        "the DriverUserspaceMissing Node Event",
        lambda: [e for e in env.events("node-a") if e["reason"] == "DriverUserspaceMissing" and e["message"] == message],
        env.diagnostics,
    )
    env.create_probe_pod("refused")

    def failed_prepare() -> list[dict[str, Any]]:
        return [e for e in env.events("refused") if e["reason"] == "FailedPrepareDynamicResources" and message in e["message"]]

    wait_until("the pod's FailedPrepareDynamicResources event with the plugin's message", failed_prepare, env.diagnostics)
    pod = env.c.api("GET", f"{PODS}/refused")
    assert "Pending" == pod["status"]["phase"]
    states = [s["state"] for s in pod["status"].get("containerStatuses", [])]
    assert all(s.get("waiting", {}).get("reason") == "ContainerCreating" for s in states), states
    claim = env.claim_of("refused")
    assert claim["status"].get("allocation"), claim  # scheduled and allocated; only the node refuses it
    assert [] == env.claim_specs() and {} == env.checkpoint_claims()
    env.delete_pods("refused")
