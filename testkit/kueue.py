"""Kueue's manager in a `LocalCluster`: its CRDs, its admission webhooks on 127.0.0.1, and a Configuration
that counts DRA devices by DeviceClass.

Kueue is the release ``testkit/go/kueue/go.mod`` pins, built from its Go module by
``testkit/go/kueue/build.sh`` into ``<cache>/kueue-<version>/`` (the manager, and the CRDs and webhook
manifests copied from the module source). `KueueManager` runs it as a host process the way its
Deployment runs it in a cluster, less what needs a Service:

- the webhook configurations of ``config/components/webhook/manifests.yaml`` are registered with a
  URL on 127.0.0.1 (the webhooks of the integrations it runs: Kueue's own kinds and batch/v1 Jobs;
  the mutating one suspends a new Job that names a queue) and a CA from `testkit.webhookcerts`,
  whose serving certificate is in the Configuration's ``webhook.certDir``;
- internal cert management is off (it makes a certificate for ``<service>.<namespace>.svc``), so
  the manager reads its metrics certificate from the path ``cmd/kueue/main.go`` hard-codes,
  ``/etc/kueue/metrics/certs``: the manager runs in a mount namespace of its own (``unshare
  --mount``, as `testkit.node.KubeletNode` runs the kubelet) where a directory of ours is
  bind-mounted there; only the empty mount point is created on the host. The metrics server itself
  is off (``bindAddress: "0"``), and so are leader election and the visibility API server.

The caller's Configuration (``user_configuration``: the demo's ConfigMap) says what is counted: DRA
needs feature gate ``DynamicResourceAllocation`` (alpha in v0.17, off by default) and
``resources.deviceClassMappings``, a logical resource per list of DeviceClasses. Callers:
e2e/test_kueue_quotas.py (the manager) and e2e/test_doc_examples.py (the CRDs, so demo/kueue/ is
validated). Needs root for the mount namespace. Usage::

    config = user_configuration(REPO / "demo/kueue/kueue-config.yaml")  # featureGates, deviceClassMappings
    with KueueManager(cluster, tmp / "kueue", config=config) as kueue:
        ...  # ClusterQueues, LocalQueues, Jobs labelled kueue.x-k8s.io/queue-name
"""

from __future__ import annotations

import base64
import json
import re
import shlex
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import yaml

from testkit.cluster import GO_DIR, ApiError, ClusterError, LocalCluster, cache_dir, free_port, tail_log, terminate
from testkit.node import mount_namespace_works, spawn_logged
from testkit.webhookcerts import make_certs

BUILD = GO_DIR / "kueue" / "build.sh"
NAMESPACE = "kueue-system"
METRICS_CERTS = Path("/etc/kueue/metrics/certs")  # cmd/kueue/main.go (v0.17.0: line 206), without internal certs
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
GROUP = "/apis/kueue.x-k8s.io/v1beta2"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
# Webhooks of what this manager runs (integrations.frameworks: batch/job); a registered webhook whose
# path the manager does not serve would fail every request it covers.
SERVED_PATHS = re.compile(r"^/(mutate|validate)-(kueue-x-k8s-io-v1beta2-[a-z]+|batch-v1-job)$")


@cache
def kueue_version() -> str:
    """The Kueue release testkit/go/kueue/go.mod requires."""
    found = re.search(r"^\s*(?:require\s+)?sigs\.k8s\.io/kueue\s+(v\S+)", (GO_DIR / "kueue" / "go.mod").read_text(), re.M)
    if found is None:
        raise ClusterError(f"{GO_DIR / 'kueue' / 'go.mod'} requires no sigs.k8s.io/kueue")
    return found.group(1)


def kueue_dir() -> Path:
    """``<cache>/kueue-<version>``; ClusterError naming the build script when the build is missing."""
    d = cache_dir() / f"kueue-{kueue_version()}"
    if not (d / "kueue").is_file() or not (d / "webhook" / "manifests.yaml").is_file():
        raise ClusterError(f"Kueue {kueue_version()} is not built in {d}. Build it with: {BUILD} (minutes cold, then cached)")
    return d


def install_crds(cluster: LocalCluster, timeout: float = 60.0) -> list[str]:
    """Create Kueue's CRDs (existing ones are kept) and wait until each is Established; their names."""
    names = []
    for path in sorted((kueue_dir() / "crds").glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        names.append(crd["metadata"]["name"])
        try:
            cluster.api("POST", CRDS, crd)
        except ApiError as err:
            if err.status != 409:
                raise
    deadline = time.monotonic() + timeout
    for name in names:
        while not any(
            c["type"] == "Established" and c["status"] == "True"
            for c in cluster.api("GET", f"{CRDS}/{name}").get("status", {}).get("conditions") or []
        ):
            if time.monotonic() > deadline:
                raise ClusterError(f"CRD {name} not Established after {timeout:.0f}s")
            time.sleep(0.1)
    return names


def webhook_configurations(port: int, ca_bundle: bytes) -> list[dict[str, Any]]:
    """Kueue's webhook configurations with the served webhooks only, each calling https://127.0.0.1:``port``."""
    out = []
    for doc in yaml.safe_load_all((kueue_dir() / "webhook" / "manifests.yaml").read_text()):
        if not doc:
            continue
        hooks = [h for h in doc["webhooks"] if SERVED_PATHS.match(h["clientConfig"]["service"]["path"])]
        for hook in hooks:
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {"url": f"https://127.0.0.1:{port}{path}", "caBundle": base64.b64encode(ca_bundle).decode()}
        doc["metadata"]["name"] = f"kueue-{doc['metadata']['name']}"
        out.append({**doc, "webhooks": hooks})
    return out


def user_configuration(configmap: Path) -> dict[str, Any]:
    """The Configuration a ConfigMap manifest holds (Kueue's install reads ``controller_manager_config.yaml``)."""
    (cm,) = [d for d in yaml.safe_load_all(configmap.read_text()) if d and d.get("kind") == "ConfigMap"]
    config: dict[str, Any] = yaml.safe_load(cm["data"]["controller_manager_config.yaml"])
    return config


def configuration(user: Mapping[str, Any], *, webhook_port: int, health_port: int, cert_dir: Path) -> dict[str, Any]:
    """``user``'s Configuration (config.kueue.x-k8s.io/v1beta2) with what a host process needs instead
    of a Deployment: loopback ports, our serving certificate, no leader election, metrics or visibility server."""
    gates = {**user.get("featureGates", {}), "VisibilityOnDemand": False}
    return {
        **user,
        "namespace": NAMESPACE,
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        "metrics": {"bindAddress": "0"},
        "webhook": {"host": "127.0.0.1", "port": webhook_port, "certDir": str(cert_dir)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "featureGates": gates,
    }


class KueueManager:
    """Kueue's manager for ``cluster``, with its CRDs and webhooks installed; ``workdir`` keeps config, certs and log."""

    def __init__(
        self,
        cluster: LocalCluster,
        workdir: Path,
        *,
        config: Mapping[str, Any],
        ready_timeout: float = 90.0,
    ) -> None:
        self.dir = kueue_dir()
        self.cluster = cluster
        self.workdir = workdir.resolve()
        self.user_config = config
        self.ready_timeout = ready_timeout
        self.log_path = self.workdir / "kueue.log"
        self.health_port = 0
        self.webhook_port = 0
        self._proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    def start(self) -> None:
        """CRDs, namespace, manager; then its webhooks, once it serves them."""
        if not mount_namespace_works():
            raise ClusterError(f"Kueue's manager needs {METRICS_CERTS}: running it needs root and unshare --mount")
        try:
            self.workdir.mkdir(parents=True, exist_ok=True)
            install_crds(self.cluster)
            try:
                self.cluster.api("POST", "/api/v1/namespaces", {"metadata": {"name": NAMESPACE}})
            except ApiError as err:
                if err.status != 409:
                    raise
            certs = make_certs(self.workdir / "certs")
            self.health_port, self.webhook_port = free_port(), free_port()
            config = configuration(
                self.user_config, webhook_port=self.webhook_port, health_port=self.health_port, cert_dir=certs.cert.parent
            )
            config_path = self.workdir / "config.yaml"
            config_path.write_text(json.dumps(config, indent=2) + "\n")
            self._spawn(config_path, certs.cert.parent)
            self._wait_ready()
            for wh in webhook_configurations(self.webhook_port, certs.ca.read_bytes()):
                kind = wh["kind"].lower() + "s"
                self.cluster.api("POST", f"/apis/admissionregistration.k8s.io/v1/{kind}", wh)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """SIGTERM the manager (SIGKILL after 10 s); its webhook configurations are removed first."""
        for kind in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations"):
            for name in ("kueue-mutating-webhook-configuration", "kueue-validating-webhook-configuration"):
                try:
                    self.cluster.api("DELETE", f"/apis/admissionregistration.k8s.io/v1/{kind}/{name}")
                except (ApiError, OSError):
                    pass
        terminate(self._proc, 10.0)
        self._proc = None

    def check_alive(self) -> None:
        """ClusterError with the log tail if the manager has exited."""
        if self._proc is not None and self._proc.poll() is not None:
            raise ClusterError(f"kueue exited with {self._proc.returncode}; log {self.log_path}:\n{tail_log(self.log_path)}")

    def diagnostics(self, lines: int = 30) -> str:
        return f"--- kueue log {self.log_path} (last {lines} lines):\n{tail_log(self.log_path, lines)}"

    def _spawn(self, config_path: Path, metrics_certs: Path) -> None:
        METRICS_CERTS.mkdir(parents=True, exist_ok=True)  # a mount point must exist on the host
        argv = [
            str(self.dir / "kueue"),
            f"--config={config_path}",
            f"--kubeconfig={self.cluster.kubeconfig}",
            "--zap-log-level=2",
        ]
        bind = f"mount --bind {shlex.quote(str(metrics_certs))} {shlex.quote(str(METRICS_CERTS))}"
        unshare = [shutil.which("unshare") or "unshare", "--mount", "--propagation", "private", "--"]
        (self.workdir / "cwd").mkdir(exist_ok=True)
        self._proc = spawn_logged(
            [*unshare, "sh", "-c", f'{bind} && exec "$@"', "kueue", *argv], self.log_path, cwd=self.workdir / "cwd"
        )

    def _wait_ready(self) -> None:
        """Until /readyz answers ok (Kueue's check waits for its webhook server to listen)."""
        deadline = time.monotonic() + self.ready_timeout
        last = ""
        while time.monotonic() < deadline:
            self.check_alive()
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}/readyz", timeout=2) as resp:
                    if resp.status == 200:
                        return
            except (OSError, urllib.error.URLError) as err:
                last = str(err)
            time.sleep(0.2)
        raise ClusterError(f"kueue not ready after {self.ready_timeout:.0f}s ({last})\n{self.diagnostics()}")
