"""Fuzzing the pod list the waiting-pods prompter reads: malformed pods are skipped, never a crash, never another node's pod.

After each registration the kubelet plugin lists its node's unfinished pods
(``dra_driver.kube.pods_api``) and annotates those waiting on a claim of this driver
(``kubelet_plugin.waiting_pods``). The list and the claims come from the API server, so they can
be anything. Per input (a pod list answer, its pods and claims mutated by the shared harness):
the list's decoding raises only ``KubeApiError``; ``prompt_waiting_pods`` raises nothing; and it
annotates only pods whose ``spec.nodeName`` is this node, with a valid name and namespace, each
once.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterator
from typing import Any, cast

from dra_driver.kube.pods_api import KubePodApi
from dra_driver.kube.rest import KubeApiError
from kubelet_plugin.waiting_pods import prompt_waiting_pods
from tests.fuzz import harness

DRIVER = "gpu.dra-gpu.dev"
NODE = "node-a"
_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def _pod(name: str, node: str, phase: str, claim: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "annotations": {"a": "b"}},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "c", "image": "i"}],
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "t"}, {"name": "d", "resourceClaimName": claim}],
        },
        "status": {
            "phase": phase,
            "resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": f"{name}-gpu"}],
            "containerStatuses": [{"name": "c", "state": {"waiting": {"reason": "ContainerCreating"}}}],
        },
    }


def list_seed() -> dict[str, Any]:
    return {
        "kind": "PodList",
        "apiVersion": "v1",
        "metadata": {"resourceVersion": "7"},
        "items": [
            _pod("p0", NODE, "Pending", "mine"),
            _pod("p1", NODE, "Running", "mine"),
            _pod("p2", "node-b", "Pending", "mine"),
            _pod("p3", NODE, "Pending", "theirs"),
        ],
    }


def claim_seed(driver: str, pool: str) -> dict[str, Any]:
    return {
        "metadata": {"name": "c", "namespace": "ns"},
        "status": {"allocation": {"devices": {"results": [{"driver": driver, "pool": pool, "device": "gpu-0", "request": "r"}]}}},
    }


class _Api:
    """The prompter's calls over one hostile list and hostile claims."""

    def __init__(self, pods: Any, claims: dict[str, Any]) -> None:
        self.pods, self.claims = pods, claims
        self.patched: list[tuple[str, str]] = []

    def pending_pods(self, node: str) -> list[dict[str, Any]]:
        return cast("list[dict[str, Any]]", self.pods)  # hostile on purpose: whatever the fuzzer made

    def get_claim(self, namespace: str, name: str) -> dict[str, Any]:
        if name in self.claims:
            return cast("dict[str, Any]", self.claims[name])  # hostile on purpose
        raise KubeApiError(404, "NotFound", name)

    def annotate(self, namespace: str, name: str, key: str, value: str) -> None:
        assert key == f"{DRIVER}/prepare-retry" and value == "T"
        self.patched.append((namespace, name))


def inputs(n: int, name: str) -> Iterator[tuple[Any, dict[str, Any]]]:
    rng = random.Random(harness.seed_for(name))
    seed = list_seed()
    claims = {"mine": claim_seed(DRIVER, NODE), "theirs": claim_seed("other.example.com", NODE)}
    for _ in range(n):
        items = harness.mutate(seed, rng)
        items = items.get("items") if isinstance(items, dict) and rng.random() < 0.9 else items
        yield items, {k: harness.mutate(v, rng) if rng.random() < 0.3 else v for k, v in claims.items()}


def _pods_of_this_node(pods: Any) -> set[tuple[str, str]]:
    if not isinstance(pods, list):
        return set()
    out = set()
    for p in pods:
        if isinstance(p, dict) and isinstance(p.get("spec"), dict) and p["spec"].get("nodeName") == NODE:
            meta = p.get("metadata")
            if isinstance(meta, dict) and isinstance(meta.get("namespace"), str) and isinstance(meta.get("name"), str):
                out.add((meta["namespace"], meta["name"]))
    return out


def test_the_prompter_skips_malformed_pods_and_annotates_only_this_nodes() -> None:
    def prompt(case: tuple[Any, dict[str, Any]]) -> None:
        pods, claims = case
        api = _Api(pods, claims)
        done = prompt_waiting_pods(api, driver=DRIVER, node=NODE, now=lambda: "T")
        assert len(done) == len(api.patched) == len(set(api.patched))
        ours = _pods_of_this_node(pods)
        for namespace, name in api.patched:
            assert (namespace, name) in ours, f"annotated {namespace}/{name}, not a pod of {NODE}"
            assert _NAME.fullmatch(namespace) and _NAME.fullmatch(name) and len(name) <= 253

    rep = harness.run("waiting pods prompter", inputs(harness.budget(1200), "waiting-pods"), prompt, ())
    harness.assert_clean(rep)
    assert rep.accepted == rep.inputs


class _Conn:
    """A connection answering every request with one body (the API server's answer to the pod list)."""

    def __init__(self) -> None:
        self.body = b""

    def request(self, method: str, target: str, **_: Any) -> Any:
        return _Response(self.body)


class _Response:
    status = 200
    reason = "OK"

    def __init__(self, body: bytes) -> None:
        self.data = body

    def release_conn(self) -> None:
        pass


def test_the_pod_list_decodes_to_objects_or_a_kube_api_error() -> None:
    conn = _Conn()
    api = KubePodApi(conn, lambda namespace, name: {})
    rng = random.Random(harness.seed_for("pod-list"))

    def listed(raw: bytes) -> None:
        conn.body = raw
        pods = api.pending_pods(NODE)
        assert isinstance(pods, list) and all(isinstance(p, dict) for p in pods)

    cases = (harness.to_bytes(harness.mutate(list_seed(), rng), rng) for _ in range(harness.budget(600)))
    rep = harness.run("pod list decode", cases, listed, (KubeApiError,))
    harness.assert_clean(rep)
    assert rep.accepted > 0
