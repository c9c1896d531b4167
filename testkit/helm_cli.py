"""The Helm CLI built from source (``testkit/go/helm/build.sh``), for the tests and the demo, and what its output is read with.

``Helm.built`` finds the pinned binary (failing, never skipping, with the build command when it
is missing) and runs it with a private home, so nothing of the user's Helm config is touched.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from testkit.cluster import GO_DIR, LocalCluster, cache_dir

REPO = Path(__file__).resolve().parents[1]
CHART = REPO / "deploy" / "helm" / "dra-gpu"
HELM_BUILD = GO_DIR / "helm" / "build.sh"
RELEASE = "dra-gpu"
NAMESPACE = "dra-gpu"
# Object names for release "dra-gpu" of chart "dra-gpu" (the release name is the prefix).
PLUGIN = "dra-gpu-kubelet-plugin"  # DaemonSet, ServiceAccount, ClusterRole(Binding)
POLICY = "dra-gpu-resourceslices"  # ValidatingAdmissionPolicy and its binding
DENIED = "may only create, update and delete ResourceSlices of its own node"
SLICES = "/apis/resource.k8s.io/v1/resourceslices"


class HelmError(RuntimeError):
    """Helm exited non-zero, or is not built."""


def helm_version() -> str:
    """The Helm release pinned in testkit/go/helm/go.mod (the one place it is written)."""
    gomod = (GO_DIR / "helm" / "go.mod").read_text()
    found = re.search(r"^\s*helm\.sh/helm/v\d+ (v\S+)", gomod, re.MULTILINE)
    if not found:
        raise HelmError("testkit/go/helm/go.mod requires no helm.sh/helm module")
    return found.group(1)


@dataclass(frozen=True)
class Helm:
    """The Helm CLI with a private config/cache/data home (nothing of the user's is read or written)."""

    binary: Path
    home: Path

    @classmethod
    def built(cls, home: Path) -> Helm:
        """The pinned, built Helm; HelmError naming testkit/go/helm/build.sh when it is missing."""
        version = helm_version()
        binary = cache_dir() / f"helm-{version}" / "bin" / "helm"
        if not os.access(binary, os.X_OK):
            raise HelmError(f"Helm {version} is not built ({binary} missing). Build it with: {HELM_BUILD}")
        h = cls(binary, home)
        out = h.run("version", "--template", "{{ .Version }}").stdout.strip()
        if out != version:
            raise HelmError(f"{binary} reports version {out!r}, expected {version}")
        return h

    def install(self, cluster: LocalCluster, *sets: str, release: str = RELEASE, namespace: str = NAMESPACE) -> None:
        """``helm install`` into ``cluster`` without waiting for pods (none can run here)."""
        args = ["install", release, str(CHART), "--kubeconfig", str(cluster.kubeconfig), "--wait=hookOnly"]
        args += ["--namespace", namespace, "--create-namespace"]
        for s in sets:
            args += ["--set", s]
        self.run(*args)

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run ``helm args...``; with ``check``, fail the test with Helm's output on a non-zero exit."""
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(self.home),
            "HELM_CACHE_HOME": str(self.home / "cache"),
            "HELM_CONFIG_HOME": str(self.home / "config"),
            "HELM_DATA_HOME": str(self.home / "data"),
            "KUBECONFIG": str(self.home / "no-kubeconfig"),  # only an explicit --kubeconfig reaches a cluster
        }
        proc = subprocess.run([str(self.binary), *args], capture_output=True, text=True, env=env, timeout=180, check=False)
        if check and proc.returncode != 0:
            raise HelmError(f"helm {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
        return proc

    def template(self, *sets: str) -> list[dict[str, Any]]:
        """Render the chart (release dra-gpu, namespace dra-gpu) with ``--set`` values; the manifests."""
        args = ["template", RELEASE, str(CHART), "--namespace", NAMESPACE]
        for s in sets:
            args += ["--set", s]
        return [d for d in yaml.safe_load_all(self.run(*args).stdout) if d]


def by_kind(docs: Sequence[Mapping[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    """Rendered objects of one kind, by name."""
    return {d["metadata"]["name"]: dict(d) for d in docs if d["kind"] == kind}


def env_of(container: Mapping[str, Any]) -> dict[str, Any]:
    """A container's env as name -> value (or valueFrom)."""
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}
