"""The chart's NOTES.txt says what the server it installs into does not offer (``helm install --dry-run=server``).

Helm 4's ``install --dry-run=client`` takes no ``--api-versions``/``--kube-version``, and ``helm
template`` prints no NOTES, so the notes are rendered the way an installer sees them: a server
dry run against real, stock API servers (etcd + kube-apiserver of the release, no gate changed).
v1.34 serves no DeviceTaintRule: the notes say cordon falls back to local withholding without
``--evict``, and name the features 1.34 lacks (device taints, dynamic MIG); v1.37 serves the rules:
none of that is said. Neither has Kueue: the notes point at the Kueue guide until its
ClusterQueue CRD is there (a stand-in CRD of the same group, version and kind).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from e2e.test_kubelet_node import wait_until
from testkit.cluster import ApiError, LocalCluster
from testkit.helm_cli import CHART, NAMESPACE, RELEASE, Helm

HEADING = "Not available on this server"
CORDON = "DeviceTaintRule API not served"
KUEUE = "docs/guides/team-quotas-kueue.md"

QUEUE_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "clusterqueues.kueue.x-k8s.io"},
    "spec": {
        "group": "kueue.x-k8s.io",
        "scope": "Cluster",
        "names": {"kind": "ClusterQueue", "plural": "clusterqueues", "singular": "clusterqueue", "listKind": "ClusterQueueList"},
        "versions": [
            {
                "name": "v1beta2",
                "served": True,
                "storage": True,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
            }
        ],
    },
}


def notes(helm: Helm, c: LocalCluster) -> str:
    """The NOTES of a server dry run of the chart into ``c``."""
    done = helm.run(
        "install", RELEASE, str(CHART), "--dry-run=server", "--kubeconfig", str(c.kubeconfig), "--namespace", NAMESPACE,
        "--create-namespace",
    )  # fmt: skip
    assert "NOTES:" in done.stdout, done.stdout[-2000:]
    return done.stdout.split("NOTES:", 1)[1]


@pytest.mark.parametrize("version", ["v1.34.4", "v1.37.2"])
def test_the_notes_say_what_the_server_lacks(helm: Helm, tmp_path: Path, version: str) -> None:
    with LocalCluster(stock=True, version=version, log_dir=tmp_path / "logs") as c:
        text = notes(helm, c)
        assert HEADING in text and KUEUE in text, text
        if version == "v1.34.4":
            assert CORDON in text and "local withholding" in text and "--evict` is refused" in text, text
            assert "Device taints (DRADeviceTaints)" in text and "mig.strategy=dynamic" in text, text
        else:
            assert CORDON not in text and "DRADeviceTaints" not in text and "mig.strategy=dynamic" not in text, text
        c.api("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", QUEUE_CRD)

        def served() -> bool:
            try:
                found = c.api("GET", "/apis/kueue.x-k8s.io/v1beta2").get("resources") or []
            except ApiError:
                return False
            return any(r.get("name") == "clusterqueues" for r in found)

        wait_until("the ClusterQueue CRD to be served", served, lambda: f"(logs in {c.log_dir})", 60)
        text = notes(helm, c)
        assert KUEUE not in text, text
        assert (HEADING in text) is (version == "v1.34.4"), text
