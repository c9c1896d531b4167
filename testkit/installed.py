"""dra-gpu as platform teams install it: the image, the Helm chart, real containers.

`InstalledCluster` is a local cluster whose nodes run real containers (`ContainerdNode`:
kubelet, containerd, runc, CNI) with the chart installed by ``helm install`` from the image that
``deploy/container/build-local.sh`` builds from ``deploy/container/Dockerfile``, the recipe
Docker users build too. The kubelet-plugin DaemonSet's pods run from that image, register
through the kubelet's plugin registry, publish their node's slices; workload pods run in real
containers that get the plugin's CDI edits from containerd. Used by ``e2e/test_installed.py``
and ``make demo`` (``demo/runner/demo.py``).

There is no registry here: each node's containerd gets the images imported (the pod's
``imagePullPolicy`` never has to pull), and the demo manifests' public workload image name
(busybox) is given to the Debian shell image the build makes, so demo/ runs unchanged here and
on a cluster that can pull.
"""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from dra_driver.core.driver import DEFAULT_DRIVER_NAME
from testkit.cluster import ApiError, ClusterError, LocalCluster
from testkit.helm_cli import CHART, NAMESPACE, RELEASE, Helm
from testkit.runtime_node import ContainerdNode, sweep_leftovers

REPO = Path(__file__).resolve().parents[1]
IMAGE_BUILD = REPO / "deploy" / "container" / "build-local.sh"
APP_REPOSITORY = "localhost/dra-gpu"
SHELL_IMAGE = "localhost/dra-gpu-shell:bookworm"
# The image demo/'s pods name (a public one); here the shell image carries that name.
WORKLOAD_IMAGE = "registry.k8s.io/e2e-test-images/busybox:1.36.1-1"
PLUGIN_LABEL = "app.kubernetes.io/component=kubelet-plugin"


def say(msg: str) -> None:
    print(msg, flush=True)


@dataclass(frozen=True)
class Images:
    """The two OCI archives build-local.sh wrote, and the app image's tag."""

    app: Path
    shell: Path
    tag: str

    @property
    def app_ref(self) -> str:
        return f"{APP_REPOSITORY}:{self.tag}"


def build_images(progress: Callable[[str], None] | None = None, tag: str | None = None) -> Images:
    """Run build-local.sh (cheap when the tree is unchanged); its progress lines go to ``progress``."""
    err_lines: list[str] = []
    argv = [str(IMAGE_BUILD), *([tag] if tag else [])]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO) as proc:
        assert proc.stderr is not None and proc.stdout is not None
        for line in proc.stderr:
            err_lines.append(line.rstrip())
            if progress:
                progress(line.rstrip())
        out = proc.stdout.read().split()
    if proc.returncode != 0 or len(out) < 2:
        raise ClusterError(f"{IMAGE_BUILD} failed ({proc.returncode}):\n" + "\n".join(err_lines[-30:]))
    app, shell = Path(out[-2]), Path(out[-1])
    found = re.fullmatch(r"dra-gpu-(.+)\.oci\.tar", app.name)
    if not found:
        raise ClusterError(f"{IMAGE_BUILD} printed an archive name without a tag: {app}")
    return Images(app, shell, found.group(1))


class InstalledCluster:
    """A control plane, ``nodes`` running real containers, and the chart installed with ``values``.

    ``values`` are ``--set`` strings on top of the image ones (repository, tag, pullPolicy
    Never). Use as a context manager; ``workdir`` keeps every log afterwards.
    """

    def __init__(
        self,
        workdir: Path,
        helm: Helm,
        images: Images,
        *,
        nodes: Sequence[str] = ("node-a", "node-b"),
        values: Sequence[str] = (),
        progress: Callable[[str], None] = say,
    ) -> None:
        self.workdir = workdir
        self.helm = helm
        self.images = images
        self.node_names = list(nodes)
        self.values = list(values)
        self.progress = progress
        self.cluster: LocalCluster | None = None
        self.nodes: dict[str, ContainerdNode] = {}
        self._stack = ExitStack()

    def __enter__(self) -> Self:
        try:
            self.start()
        except BaseException:
            self._stack.close()
            raise
        return self

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self._stack.close()

    @property
    def c(self) -> LocalCluster:
        if self.cluster is None:
            raise ClusterError("not started")
        return self.cluster

    def start(self) -> None:
        started = time.monotonic()
        self.cluster = self._stack.enter_context(
            LocalCluster(
                with_scheduler=True, with_controller_manager=True, pod_network=True, log_dir=self.workdir / "control-plane"
            )
        )
        for leftover in sweep_leftovers():  # of a run killed before it could clean up
            self.progress(f"removed {leftover} left by an earlier run")
        for i, name in enumerate(self.node_names, start=1):
            node = ContainerdNode(self.c, name, self.workdir / name, index=i, images=[self.images.app, self.images.shell])
            self.nodes[name] = self._stack.enter_context(node)
            node.tag_image(SHELL_IMAGE, WORKLOAD_IMAGE)
        self.progress(f"cluster up: {len(self.nodes)} nodes on containerd, {time.monotonic() - started:.1f}s")

    def helm_install(self, *extra: str, timeout_s: int = 300) -> float:
        """``helm install --wait`` of the chart; seconds until every pod of the release is Ready."""
        started = time.monotonic()
        self.helm.run(*self._helm_args("install", *extra, timeout_s=timeout_s, create_namespace=True))
        return time.monotonic() - started

    def helm_upgrade(self, *extra: str, timeout_s: int = 300) -> float:
        started = time.monotonic()
        self.helm.run(*self._helm_args("upgrade", *extra, timeout_s=timeout_s))
        return time.monotonic() - started

    def helm_uninstall(self, timeout_s: int = 120) -> None:
        args = ["uninstall", RELEASE, "--namespace", NAMESPACE, "--kubeconfig", str(self.c.kubeconfig)]
        self.helm.run(*args, "--wait", "--timeout", f"{timeout_s}s")

    def _helm_args(self, verb: str, *extra: str, timeout_s: int, create_namespace: bool = False) -> list[str]:
        args = [verb, RELEASE, str(CHART), "--namespace", NAMESPACE, "--kubeconfig", str(self.c.kubeconfig)]
        args += ["--wait=watcher", "--timeout", f"{timeout_s}s"]
        args += ["--create-namespace"] if create_namespace else []
        sets = [f"image.repository={APP_REPOSITORY}", f"image.tag={self.images.tag}", "image.pullPolicy=Never"]
        for s in [*sets, *self.values, *extra]:
            args += ["--set", s]
        return args

    def wait_webhook(self, timeout_s: float = 60.0) -> float:
        """Seconds until the API server reaches the chart's admission webhook through its Service.

        ``helm install --wait`` returns once the webhook's pod is Ready, but kube-proxy may not
        have programmed the Service yet; until it has, every claim create fails closed (the
        webhook's failurePolicy is Fail). Probe with a dry-run create of a valid claim.
        """
        started = time.monotonic()
        probe = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": "webhook-probe", "namespace": "default"},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": self.driver}}]}},
        }
        while True:
            try:
                self.c.api("POST", "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims?dryRun=All", probe)
                return time.monotonic() - started
            except ApiError as err:
                if err.status != 500 or time.monotonic() - started > timeout_s:
                    raise
            time.sleep(0.2)

    @property
    def driver(self) -> str:
        for s in self.values:
            if s.startswith("driverName="):
                return s.split("=", 1)[1]
        return DEFAULT_DRIVER_NAME

    # -- pods ------------------------------------------------------------------

    def pods(self, namespace: str, selector: str = "") -> list[dict[str, Any]]:
        query = f"?labelSelector={selector}" if selector else ""
        items: list[dict[str, Any]] = self.c.api("GET", f"/api/v1/namespaces/{namespace}/pods{query}")["items"]
        return items

    def plugin_pods(self) -> list[dict[str, Any]]:
        return self.pods(NAMESPACE, PLUGIN_LABEL)

    def pod(self, namespace: str, name: str) -> dict[str, Any]:
        return self.c.api("GET", f"/api/v1/namespaces/{namespace}/pods/{name}")

    def logs(self, namespace: str, name: str, container: str = "") -> str:
        """The container's output, through the API server and the kubelet (``kubectl logs``)."""
        query = f"?container={container}" if container else ""
        path = f"/api/v1/namespaces/{namespace}/pods/{name}/log{query}"
        req_headers = {"Accept": "*/*"}
        return self.c.api_text("GET", path, req_headers)

    def events(self, namespace: str, name: str) -> list[str]:
        items = self.c.api("GET", f"/api/v1/namespaces/{namespace}/events?fieldSelector=involvedObject.name={name}")["items"]
        return [f"{e.get('type')} {e.get('reason')}: {e.get('message')}" for e in items]

    def wait_running(self, namespace: str, names: Sequence[str], timeout_s: float = 180.0) -> dict[str, dict[str, Any]]:
        """Until every named pod's containers run; on timeout or a failed pod, ClusterError with its
        events and container log (never a silent hang)."""
        deadline = time.monotonic() + timeout_s
        while True:
            pods = {p["metadata"]["name"]: p for p in self.pods(namespace) if p["metadata"]["name"] in names}
            running = {n for n, p in pods.items() if _containers_running(p)}
            failed = [n for n, p in pods.items() if p["status"].get("phase") == "Failed"]
            if running == set(names):
                return pods
            if failed or time.monotonic() > deadline:
                stuck = failed or sorted(set(names) - running)
                raise ClusterError("pods not running: " + "; ".join(self.explain_pod(namespace, n) for n in stuck))
            time.sleep(0.5)

    def explain_pod(self, namespace: str, name: str) -> str:
        """Phase, conditions, events and container log of a pod, for failure messages."""
        try:
            p = self.pod(namespace, name)
        except ApiError as err:
            return f"{name}: {err}"
        conds = [f"{c['type']}={c['status']} {c.get('message', '')}".strip() for c in p["status"].get("conditions", [])]
        states = [f"{s['name']}: {s.get('state')}" for s in p["status"].get("containerStatuses", [])]
        try:
            log = self.logs(namespace, name)[-1500:]
        except (ApiError, ClusterError) as err:
            log = f"(no log: {err})"
        return (
            f"{name} phase={p['status'].get('phase')} node={p['spec'].get('nodeName')} conditions={conds} "
            f"containers={states} events={self.events(namespace, name)} log:\n{log}"
        )

    def wait_gone(self, namespace: str, names: Sequence[str], timeout_s: float = 120.0) -> None:
        deadline = time.monotonic() + timeout_s
        while any(p["metadata"]["name"] in names for p in self.pods(namespace)):
            if time.monotonic() > deadline:
                raise ClusterError(f"pods {list(names)} still there after {timeout_s:.0f}s")
            time.sleep(0.5)

    def node_diagnostics(self) -> Iterator[str]:
        for node in self.nodes.values():
            yield node.diagnostics()


def _containers_running(pod: Mapping[str, Any]) -> bool:
    statuses = pod.get("status", {}).get("containerStatuses") or []
    return bool(statuses) and all("running" in s.get("state", {}) for s in statuses)
