"""Fuzzing what ``dra-gpu explain`` reads: ResourceSlices, DeviceClasses, claims, templates and pods.

A small but complete cluster is the seed: full H100s on node-a, shareable L4s (consumable
capacity) on node-b, a partitionable A100 (dynamic MIG: shared counters in a slice of their own)
on node-c, a network pool selected by node labels with per-device node selection and taints, the
chart's DeviceClasses, pods from ``demo/`` (templates, ``firstAvailable``, capacity requests), a
claim with constraints, tolerations and admin access, and a claim already allocated in the
cluster. Each input mutates one object (or, rarely, the list holding it) and goes through
:func:`dra_driver.cli.explain.explain_objects` (the offline path on parsed documents) and the
report renderers; the only error allowed is :class:`InputError`. The core's ``explain`` is
fuzzed with already-allocated pod claims and node labels (only ``InvalidObject``), the live path
with a fake API server, and file bytes through ``load_objects``. Every input is bounded by the
harness's CPU limit. The seed is built by ``tests/fuzz/explain_seed.py``; the crashes the fuzzer
found are pinned one by one in ``test_fuzz_explain_findings.py``.
"""

from __future__ import annotations

import copy
import json
import random
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from dra_driver.cli import explain as cli_explain
from dra_driver.cli.explain import InputError, explain_objects, load_objects, render_text
from dra_driver.schedsim.allocator import Explanation, InvalidObject, explain
from dra_driver.schedsim.allocator.validate import MAX_DEVICES_PER_SLICE
from tests.fuzz import harness
from tests.fuzz.explain_seed import DRIVER, Docs, seed

CEL_EXPRESSIONS: tuple[str, ...] = (
    "true",
    "device.nope",
    f'device.attributes["{DRIVER}"].productName.matches("^(a+)+$")',
    "(" * 200 + "true" + ")" * 200,
    "[" * 500,
    " || ".join(["true"] * 2000),
    f'device.attributes["{DRIVER}"].uuid + "x" == "y"',
    f'device.capacity["{DRIVER}"].memory.compareTo(quantity("1e18")) > 0',
    "1 / 0 == 1",
    'quantity("1Ki") == quantity("1024")',
    "x" * 10_241,
    '"' + "\\u0000" * 3000 + '"',
)


def _random_expression(rng: random.Random) -> dict[str, Any]:
    return {"cel": {"expression": rng.choice(CEL_EXPRESSIONS)}}


def _many_devices(rng: random.Random) -> list[dict[str, Any]]:
    n = rng.choice([MAX_DEVICES_PER_SLICE, MAX_DEVICES_PER_SLICE + 1, 10_000])
    return [{"name": f"d-{i}", "attributes": {"i": {"int": i}}} for i in range(n)]


def _node_selector(rng: random.Random) -> dict[str, Any]:
    op = rng.choice(["In", "NotIn", "Exists", "DoesNotExist", "Gt", ""])
    return {
        "nodeSelectorTerms": [
            {
                "matchExpressions": [
                    {"key": rng.choice(["rack", "kubernetes.io/hostname"]), "operator": op, "values": ["node-a", "r1"]}
                ]
            }
        ]
    }


def _attribute(rng: random.Random) -> dict[str, Any]:
    return rng.choice(
        [
            {"int": rng.choice([0, -1, 2**63 - 1, 2**63])},
            {"version": rng.choice(["1.2.3", "01.2.3", "v1", "1.2.3-" + "a" * 70])},
            {"string": "s" * rng.choice([1, 64, 65])},
            {"bool": "true"},
            {"ints": [1, 2, 3]},
            {"strings": ["a"] * 49},
            {},
            {"int": 1, "string": "both"},
        ]
    )


EXTRA: tuple[Callable[[random.Random], Any], ...] = (_random_expression, _many_devices, _node_selector, _attribute)
GROUPS = ("manifests", "slices", "classes", "allocated")


def _mutated(rng: random.Random) -> dict[str, Docs]:
    """The seed with one object mutated (rarely: one whole group)."""
    docs = seed()
    group = rng.choices(GROUPS, weights=(4, 4, 1, 1))[0]
    items: list[Any] = docs[group]
    if rng.random() < 0.03:
        docs[group] = harness.mutate(items, rng, EXTRA)
    else:
        i = rng.randrange(len(items))
        items[i] = harness.mutate(items[i], rng, EXTRA)
    return docs


def _check_rendered(results: list[tuple[str, Explanation]]) -> None:
    """What the CLI prints: the report and the JSON contract (every request allocated or with a reason)."""
    assert render_text(results).endswith("\n")
    for _, ex in results:
        json.dumps(ex.to_json())
        for r in ex.requests:
            if r.reason is not None:  # not allocatable: a reason in words, and no node or devices
                assert r.reason and r.node is None and not r.devices


@pytest.fixture(autouse=True)
def warm() -> None:
    """Explain the seed once first: the CEL parser is built and the seed's selectors compiled.

    That happens once per process; it is not the per-input cost the harness bounds.
    """
    docs = seed()
    explain_objects(docs["manifests"], docs["slices"], docs["classes"], docs["allocated"])


def test_seed_cluster_explains_cleanly() -> None:
    """The seed itself is valid: every workload is explained, and some requests are allocated."""
    docs = seed()
    results = explain_objects(docs["manifests"], docs["slices"], docs["classes"], docs["allocated"])
    assert [label for label, _ in results] == [
        "pod dra-demo/mig-or-full",
        "pod dra-demo/share-a1",
        "pod dra-demo/two-gpus",
        "pod dra-demo/special",
    ]
    allocated = [r for _, ex in results for r in ex.requests if r.reason is None]
    assert len(allocated) >= 3
    _check_rendered(results)


def test_hostile_objects_give_input_errors_only() -> None:
    rng = random.Random(harness.seed_for("explain-objects"))

    def inputs() -> Iterator[dict[str, Docs]]:
        for _ in range(harness.budget(2600)):
            yield _mutated(rng)

    def target(docs: dict[str, Docs]) -> None:
        results = explain_objects(docs["manifests"], docs["slices"], docs["classes"], docs["allocated"])
        _check_rendered(results)

    rep = harness.run("explain objects", inputs(), target, (InputError,))
    harness.assert_clean(rep)
    assert rep.rejected > rep.inputs // 5  # the mutations reach the checks
    assert rep.accepted > rep.inputs // 5  # and many survive to a full simulation


def test_hostile_pod_claims_and_node_labels_through_the_core() -> None:
    """The core ``explain`` as live mode calls it: claims of the pod (some already allocated), node labels."""
    rng = random.Random(harness.seed_for("explain-core"))
    docs = seed()
    classes = {c["metadata"]["name"]: c for c in docs["classes"]}
    labels = {"node-a": {"kubernetes.io/hostname": "node-a", "rack": "r1"}, "node-b": {"rack": "r2"}}
    claims = [docs["manifests"][6], *docs["allocated"]]  # the special claim, and one with status.allocation
    assert claims[0]["metadata"]["name"] == "special"

    def inputs() -> Iterator[tuple[Any, Any]]:
        for _ in range(harness.budget(700)):
            if rng.random() < 0.2:
                yield claims, harness.mutate(labels, rng)
            else:
                i = rng.randrange(len(claims))
                yield [*claims[:i], harness.mutate(claims[i], rng, EXTRA), *claims[i + 1 :]], labels

    def target(value: tuple[Any, Any]) -> None:
        ex = explain(value[0], docs["slices"], classes, docs["allocated"], value[1])
        _check_rendered([("pod", ex)])

    rep = harness.run("explain core", inputs(), target, (InvalidObject,))
    harness.assert_clean(rep)
    assert rep.rejected > 0 and rep.accepted > 0


class FakeExplainApi:
    """The reads ``run_live`` makes, answered from documents (which the fuzzer mutates)."""

    def __init__(self, docs: dict[str, Docs], pod: Any, template: Any) -> None:
        self.docs, self.pod, self.template = docs, pod, template

    def get(self, kind: str, namespace: str, name: str) -> Any:
        return {"pod": self.pod, "resourceclaimtemplate": self.template}.get(kind, self.docs["manifests"][6])

    def resource_slices(self, decode: Any = None) -> Docs:
        return self.docs["slices"]

    def device_classes(self) -> Docs:
        return self.docs["classes"]

    def resource_claims(self) -> Docs:
        return self.docs["allocated"]

    def server_minor(self) -> int | None:
        return None  # a server that does not say: the newest rules

    def node_labels(self) -> dict[str, dict[str, str]]:
        return {"node-a": {"kubernetes.io/hostname": "node-a"}}

    def node_metadata(self) -> dict[str, dict[str, Any]]:
        return {name: {"labels": labels} for name, labels in self.node_labels().items()}

    def device_taint_rules(self) -> tuple[str | None, list[dict[str, Any]]]:
        return None, []


def test_hostile_live_objects_give_input_errors_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Live mode: the pod, its template and the cluster's objects as a (fake) API server returns them."""
    import dra_driver.kube.explain_api as explain_api

    rng = random.Random(harness.seed_for("explain-live"))
    docs = seed()
    pod = copy.deepcopy(docs["manifests"][1])
    pod["status"] = {"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": None}]}
    pod["spec"]["resourceClaims"].append({"name": "named", "resourceClaimName": "special"})
    template = docs["manifests"][0]
    assert (pod["kind"], template["kind"]) == ("Pod", "ResourceClaimTemplate")

    def inputs() -> Iterator[FakeExplainApi]:
        for _ in range(harness.budget(400)):
            r = rng.random()
            if r < 0.4:
                yield FakeExplainApi(docs, harness.mutate(pod, rng), template)
            elif r < 0.6:
                yield FakeExplainApi(docs, pod, harness.mutate(template, rng, EXTRA))
            else:
                yield FakeExplainApi(_mutated(rng), pod, template)

    def target(api: FakeExplainApi) -> None:
        monkeypatch.setattr(explain_api, "connect", lambda _kubeconfig: api)
        _check_rendered(cli_explain.run_live(target="pod/mig-or-full", namespace="dra-demo", kubeconfig=None))

    rep = harness.run("explain live", inputs(), target, (InputError,))
    harness.assert_clean(rep)
    assert rep.rejected > 0 and rep.accepted > 0


def test_hostile_files_give_input_errors_only(tmp_path: Path) -> None:
    """Bytes of manifest files (JSON, torn, flipped, nested deep) through ``load_objects`` and explain."""
    rng = random.Random(harness.seed_for("explain-files"))
    docs = seed()
    path = tmp_path / "manifests.json"

    def inputs() -> Iterator[bytes]:
        for _ in range(harness.budget(400)):
            yield harness.to_bytes(
                harness.mutate({"apiVersion": "v1", "kind": "List", "items": docs["manifests"]}, rng, EXTRA), rng
            )

    def target(raw: bytes) -> None:
        path.write_bytes(raw)
        _check_rendered(explain_objects(load_objects(str(path)), docs["slices"], docs["classes"], docs["allocated"]))

    rep = harness.run("explain files", inputs(), target, (InputError,))
    harness.assert_clean(rep)
    assert rep.rejected > 0 and rep.accepted > 0
