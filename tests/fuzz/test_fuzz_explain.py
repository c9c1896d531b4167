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
harness's CPU limit. The tests after the fuzzers pin the crashes the fuzzer found.
"""

from __future__ import annotations

import copy
import functools
import json
import random
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from dra_driver.cli import explain as cli_explain
from dra_driver.cli.explain import InputError, explain_objects, load_objects, render_text, workloads
from dra_driver.cli.main import inventory_slices
from dra_driver.core.allocator import AllocatedState, Explanation, InvalidObject, NodeAllocator, explain, gather_pools
from dra_driver.core.allocator.simulate import MAX_SEARCH_STEPS
from dra_driver.core.allocator.validate import MAX_DEVICES_PER_SLICE, MAX_SLICES
from dra_driver.core.mig import MigStrategy
from tests.differential.corpus import chart_classes
from tests.fuzz import harness

DRIVER = "gpu.dra-gpu.dev"
NET = "net.example.com"
DEMO = Path(__file__).resolve().parents[2] / "demo"
Docs = list[dict[str, Any]]


def net_slice() -> dict[str, Any]:
    """A pool for nodes labelled ``rack=r1``, with per-device node selection and a tainted device."""
    devices: list[dict[str, Any]] = [
        {
            "name": f"nic-{i}",
            "attributes": {"speed": {"int": 100 * (i + 1)}, "rack": {"string": "r1"}, "fw": {"version": "1.2.3"}},
            "capacity": {"bandwidth": {"value": "100G"}},
            "nodeSelector": {
                "nodeSelectorTerms": [{"matchExpressions": [{"key": "rack", "operator": "In", "values": ["r1", "r2"]}]}]
            },
        }
        for i in range(3)
    ]
    devices[2]["taints"] = [{"key": "example.com/maint", "value": "true", "effect": "NoSchedule"}]
    devices[1]["nodeName"] = "node-b"
    del devices[1]["nodeSelector"]
    devices[0]["allNodes"] = True
    del devices[0]["nodeSelector"]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": "net-0"},
        "spec": {
            "driver": NET,
            "pool": {"name": "net", "generation": 2, "resourceSliceCount": 1},
            "perDeviceNodeSelection": True,
            "devices": devices,
        },
    }


def net_class() -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": NET},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{NET}" && device.attributes["{NET}"].speed >= 100'}}]},
    }


def special_claims() -> Docs:
    """A claim with constraints, tolerations, admin access and a capacity request, and its pod."""
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "special", "namespace": "dra-demo", "uid": "uid-special"},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "gpus",
                        "exactly": {
                            "deviceClassName": DRIVER,
                            "allocationMode": "ExactCount",
                            "count": 2,
                            "selectors": [
                                {"cel": {"expression": f'device.capacity["{DRIVER}"].memory.compareTo(quantity("40Gi")) > 0'}}
                            ],
                        },
                    },
                    {
                        "name": "nic",
                        "exactly": {"deviceClassName": NET, "tolerations": [{"key": "example.com/maint", "operator": "Exists"}]},
                    },
                    {"name": "all", "exactly": {"deviceClassName": NET, "allocationMode": "All", "adminAccess": True}},
                    {
                        "name": "share",
                        "exactly": {"deviceClassName": f"shared.{DRIVER}", "capacity": {"requests": {"memory": "12Gi"}}},
                    },
                ],
                "constraints": [
                    {"requests": ["gpus"], "matchAttribute": "resource.kubernetes.io/pcieRoot"},
                    {"distinctAttribute": f"{DRIVER}/uuid"},
                ],
            }
        },
    }
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "special", "namespace": "dra-demo"},
        "spec": {"resourceClaims": [{"name": "main", "resourceClaimName": "special"}]},
    }
    return [claim, pod]


def allocated_claims() -> Docs:
    """Claims the cluster already allocated: a dedicated GPU, a share of an L4, an admin-access NIC."""
    return [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": "busy", "namespace": "other", "uid": "uid-busy"},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": DRIVER}}]}},
            "status": {
                "allocation": {
                    "devices": {
                        "results": [
                            {"request": "gpu", "driver": DRIVER, "pool": "node-a", "device": "gpu-3"},
                            {
                                "request": "gpu",
                                "driver": DRIVER,
                                "pool": "node-b",
                                "device": "gpu-0",
                                "shareID": "0a1b2c3d-0000-4000-8000-000000000001",
                                "consumedCapacity": {"memory": "4Gi"},
                            },
                            {"request": "gpu", "driver": NET, "pool": "net", "device": "nic-0", "adminAccess": True},
                        ]
                    },
                    "nodeSelector": {
                        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-a"]}]}]
                    },
                }
            },
        }
    ]


@functools.cache
def _seed_json() -> str:
    slices = (
        inventory_slices(fake_gpus="h100x8", node_name="node-a", driver=DRIVER)
        + inventory_slices(fake_gpus="l4x4", node_name="node-b", driver=DRIVER, consumable=True)
        + inventory_slices(fake_gpus="a100-80x1", node_name="node-c", driver=DRIVER, mig=MigStrategy.DYNAMIC)
        + [net_slice()]
    )
    manifests = [
        *load_objects(str(DEMO / "mig-or-full.yaml")),
        *load_objects(str(DEMO / "consumable-20gi.yaml"))[:2],
        *load_objects(str(DEMO / "two-gpus.yaml")),
        *special_claims(),
    ]
    return json.dumps(
        {"manifests": manifests, "slices": slices, "classes": [*chart_classes(), net_class()], "allocated": allocated_claims()}
    )


def seed() -> dict[str, Docs]:
    """A fresh copy of the seed cluster and workloads (each group: a list of documents)."""
    docs: dict[str, Docs] = json.loads(_seed_json())
    return docs


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

    def resource_slices(self) -> Docs:
        return self.docs["slices"]

    def device_classes(self) -> Docs:
        return self.docs["classes"]

    def resource_claims(self) -> Docs:
        return self.docs["allocated"]

    def node_labels(self) -> dict[str, dict[str, str]]:
        return {"node-a": {"kubernetes.io/hostname": "node-a"}}


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


# -- the crashes the fuzzer found, one by one ---------------------------------------------------


def _explain_with(**changes: Callable[[dict[str, Docs]], None]) -> list[tuple[str, Explanation]]:
    docs = seed()
    for change in changes.values():
        change(docs)
    return explain_objects(docs["manifests"], docs["slices"], docs["classes"], docs["allocated"])


def _refused(change: Callable[[dict[str, Docs]], None]) -> str:
    with pytest.raises(InputError) as err:
        _explain_with(change=change)
    return str(err.value)


def _slice_device(docs: dict[str, Docs], **fields: Any) -> None:
    docs["slices"][0]["spec"]["devices"][0].update(fields)


def test_a_list_where_an_object_belongs_names_the_object_and_field() -> None:
    # Was: AttributeError ('list' object has no attribute 'items') in the CEL device view.
    msg = _refused(lambda d: _slice_device(d, attributes=[{"model": {"string": "x"}}]))
    assert msg == "ResourceSlice node-a-gpu.dra-gpu.dev-000: spec.devices[0].attributes: must be an object, not a list"


def test_a_string_where_a_list_belongs_is_refused() -> None:
    # Was: AttributeError ('str' object has no attribute 'get') reading the class's selectors.
    def change(d: dict[str, Docs]) -> None:
        d["classes"][0]["spec"]["selectors"] = "device.driver == 'x'"

    assert _refused(change) == f"DeviceClass {DRIVER}: spec.selectors: must be a list, not a string"


def test_metadata_that_is_not_an_object_is_refused() -> None:
    # Was: AttributeError in workloads() for a pod, a claim or a template.
    def change(d: dict[str, Docs]) -> None:
        d["manifests"][1]["metadata"] = "share-a1"

    assert _refused(change) == "Pod #1: metadata: must be an object, not a string"


def test_a_deeply_nested_name_is_refused_without_printing_it() -> None:
    # Was: RecursionError from str() of the name (and from json.dumps of a deep attribute).
    deep: Any = "x"
    for _ in range(100_000):
        deep = [deep]

    def change(d: dict[str, Docs]) -> None:
        d["slices"][1]["spec"]["devices"][2]["name"] = deep

    msg = _refused(change)
    assert msg == "ResourceSlice node-b-gpu.dra-gpu.dev-000: spec.devices[2].name: must be a string, not a list"

    def attribute(d: dict[str, Docs]) -> None:
        d["slices"][1]["spec"]["devices"][2]["attributes"]["model"] = {"string": deep}

    assert _refused(attribute).endswith("spec.devices[2].attributes.model.string: must be a string, not a list")


def test_attribute_and_integer_fields_of_the_wrong_type_are_refused() -> None:
    # Was: ValueError from int() of an attribute value in CEL conversion, and of a pool generation.
    assert _refused(lambda d: _slice_device(d, attributes={"index": {"int": "zero"}})).endswith(
        "spec.devices[0].attributes.index.int: must be an integer, not a string"
    )

    def generation(d: dict[str, Docs]) -> None:
        d["slices"][0]["spec"]["pool"]["generation"] = "1E+999999999999999999999"

    assert _refused(generation).endswith("spec.pool.generation: must be an integer, not a string")

    def count(d: dict[str, Docs]) -> None:
        d["manifests"][0]["spec"]["spec"]["devices"]["requests"][0]["firstAvailable"][0]["count"] = 2**63

    assert _refused(count) == (
        "ResourceClaimTemplate dra-demo/h100-or-3g: spec.spec.devices.requests[0].firstAvailable[0].count: "
        "integer out of range (int64)"
    )


def test_nulls_and_unknown_fields_are_ignored_as_go_decoding_does() -> None:
    # Was: TypeError from int(None) for {"int": null}; a null where the Go type has a pointer is "unset".
    def change(d: dict[str, Docs]) -> None:
        dev = d["slices"][0]["spec"]["devices"][0]
        dev["attributes"]["index"] = {"int": None, "string": "idx", "future": [[[]]]}
        dev["capacity"]["memory"]["requestPolicy"] = None
        dev["bindingConditions"] = None
        d["allocated"][0]["status"]["allocation"]["devices"]["results"][0]["consumedCapacity"] = None
        d["allocated"][0]["status"]["allocation"]["unknown"] = {"x": 1}

    results = _explain_with(change=change)
    assert results[2][0] == "pod dra-demo/two-gpus"
    assert results[2][1].requests[0].devices == ["node-a/gpu-0", "node-a/gpu-1"]


def test_an_allocated_claim_without_devices_reads_as_no_results() -> None:
    # Was: AttributeError ('NoneType' object has no attribute 'get') for "devices": null.
    claims = [
        {"metadata": {"name": "done", "namespace": "ns"}, "spec": {}, "status": {"allocation": {"devices": None}}},
    ]
    docs = seed()
    ex = explain(claims, docs["slices"], {}, [])
    assert ex.requests == []


def test_a_slice_without_a_pool_is_an_incomplete_pool_not_a_crash() -> None:
    # Was: KeyError 'pool' in gather_pools.
    def change(d: dict[str, Docs]) -> None:
        del d["slices"][0]["spec"]["pool"]

    results = _explain_with(change=change)
    [two_gpus] = results[2][1].requests
    assert two_gpus.node is None and two_gpus.reason is not None
    assert any(c.detail == f"pool {DRIVER}/ is incomplete: 1 of 0 slices" for c in two_gpus.candidates)


def test_more_devices_in_a_slice_than_the_api_allows_is_refused_fast() -> None:
    def devices(n: int) -> Callable[[dict[str, Docs]], None]:
        def change(d: dict[str, Docs]) -> None:
            d["slices"][0]["spec"]["devices"] = [{"name": f"d-{i}"} for i in range(n)]

        return change

    assert _explain_with(change=devices(MAX_DEVICES_PER_SLICE))  # 128 is the API's limit, and allowed
    assert _refused(devices(10_000)) == (
        "ResourceSlice node-a-gpu.dra-gpu.dev-000: spec.devices: 10000 items, at most 128 allowed"
    )


def test_more_slices_than_the_bound_is_refused_before_reading_them() -> None:
    def change(d: dict[str, Docs]) -> None:
        d["slices"] = d["slices"][:1] * (MAX_SLICES + 1)

    assert _refused(change) == f"input: ResourceSlices: {MAX_SLICES + 1} items, at most {MAX_SLICES} allowed"


def test_absurd_quantities_are_refused_and_huge_valid_ones_work() -> None:
    # Was: an unparsable capacity silently counted as zero in capacity checks.
    def capacity(value: Any) -> Callable[[dict[str, Docs]], None]:
        return lambda d: d["slices"][1]["spec"]["devices"][0]["capacity"]["memory"].update(value=value)

    msg = _refused(capacity("12 Gi"))
    assert msg.startswith("ResourceSlice node-b-gpu.dra-gpu.dev-000: spec.devices[0].capacity.memory.value: invalid quantity")
    too_big = "invalid quantity: more than 30 digits before the decimal point (the largest int64 quantity, 8Ei, has 19)"
    assert _refused(capacity("1e2147483647")).endswith(f"capacity.memory.value: {too_big}")

    def step(d: dict[str, Docs]) -> None:  # was: a hang building 10**2147483647 to round a request up to the step
        policy = d["slices"][1]["spec"]["devices"][0]["capacity"]["memory"]["requestPolicy"]
        policy["validRange"]["step"] = "1e2147483647"

    assert _refused(step).endswith(f"capacity.memory.requestPolicy.validRange.step: {too_big}")
    assert _refused(capacity(10**400)).endswith("capacity.memory.value: quantity out of range")
    assert _refused(capacity([])).endswith("capacity.memory.value: must be a quantity string, not a list")
    results = _explain_with(change=capacity("8Ei"))
    share = results[1][1].requests[0]
    assert share.reason is None and share.devices == ["node-b/gpu-0"]


def test_a_selector_longer_than_the_api_allows_is_refused() -> None:
    def change(d: dict[str, Docs]) -> None:
        d["classes"][1]["spec"]["selectors"][0]["cel"]["expression"] = "true && " * 1300 + "true"

    assert (
        _refused(change) == f"DeviceClass mig.{DRIVER}: spec.selectors[0].cel.expression: 10404 characters, at most 10240 allowed"
    )


def test_an_exponential_search_gives_up_like_the_schedulers_filter_timeout() -> None:
    """17 requests that must each take a different NUMA node of 16: the search would backtrack for hours."""
    devices = [{"name": f"d{i}", "attributes": {"numa": {"int": i % 16}}} for i in range(64)]
    pool = {"name": "p", "generation": 1, "resourceSliceCount": 1}
    slices = [{"metadata": {"name": "s"}, "spec": {"driver": DRIVER, "nodeName": "n0", "pool": pool, "devices": devices}}]
    classes = {DRIVER: {"metadata": {"name": DRIVER}, "spec": {}}}
    requests = [{"name": f"r{i}", "exactly": {"deviceClassName": DRIVER}} for i in range(17)]
    claim = {
        "metadata": {"name": "c", "namespace": "ns"},
        "spec": {"devices": {"requests": requests, "constraints": [{"distinctAttribute": f"{DRIVER}/numa"}]}},
    }
    ex = explain([claim], slices, classes, [])
    assert ex.nodes[0].error == (
        f"node n0: timed out trying to allocate devices (the simulation gave up after trying {MAX_SEARCH_STEPS} "
        "devices; the scheduler gives up after its filter timeout, 10s by default)"
    )
    assert ex.requests[0].reason is not None and ex.requests[0].reason.startswith("scheduling aborted")
    requests.pop()  # 16 requests fit, one per NUMA node
    assert explain([claim], slices, classes, []).requests[0].reason is None


def test_unreadable_files_are_input_errors(tmp_path: Path) -> None:
    # Was: UnicodeDecodeError from read_text, RecursionError from the JSON decoder.
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(b"kind: Pod\nmetadata: {name: \xff}\n")
    with pytest.raises(InputError, match="not UTF-8 text"):
        load_objects(str(bad))
    bad.write_bytes(b"[" * 100_000)
    with pytest.raises(InputError, match="nested too deeply"):
        load_objects(str(bad))


def test_real_workloads_stay_far_below_the_search_limit() -> None:
    """Every seed workload on every node: a few hundred devices tried at most, not the 100,000 allowed."""
    docs = seed()
    classes = {c["metadata"]["name"]: c for c in docs["classes"]}
    state = AllocatedState.from_claims(docs["allocated"])
    most = 0
    for _label, claims in workloads(docs["manifests"], docs["allocated"]):
        for node in ("node-a", "node-b", "node-c"):
            pools = gather_pools(docs["slices"], node, {"kubernetes.io/hostname": node, "rack": "r1"})
            alloc = NodeAllocator(claims, classes, pools, state, node)
            outcome = alloc.run()
            assert outcome.error is None or "timed out" not in outcome.error
            most = max(most, alloc.steps)
    assert 0 < most < MAX_SEARCH_STEPS // 100


def test_a_selector_that_crashes_the_cel_front_end_is_a_compile_error() -> None:
    # Was: ValueError (int literal of 4400 digits) escaping compile_selector from the CEL parser.
    def change(d: dict[str, Docs]) -> None:
        d["classes"][2]["spec"]["selectors"][0]["cel"]["expression"] = "9" * 4400

    results = _explain_with(change=change)
    [share] = results[1][1].requests
    assert share.reason is not None
    assert share.reason.startswith(f"scheduling aborted (the pod is retried with backoff): class shared.{DRIVER}: selector #0: ")
    assert "CEL compile error: compilation failed: ValueError: Exceeds the limit (4300 digits)" in share.reason
