"""The crashes the ``dra-gpu explain`` fuzzer found (``test_fuzz_explain.py``), pinned one by one.

Each test starts from the fuzzers' seed cluster (``explain_seed.py``), changes what the fuzzer
changed, and checks that the input is refused with an :class:`InputError` naming the object and
field, or explained correctly, instead of crashing.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dra_driver.cli.explain import InputError, explain_objects, load_objects, workloads
from dra_driver.schedsim.allocator import AllocatedState, Explanation, NodeAllocator, explain, gather_pools
from dra_driver.schedsim.allocator.simulate import MAX_SEARCH_STEPS
from dra_driver.schedsim.allocator.validate import MAX_DEVICES_PER_SLICE, MAX_SLICES
from tests.fuzz.explain_seed import DRIVER, Docs, seed

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

    msg = _refused(change)
    assert msg.startswith(f"DeviceClass mig.{DRIVER}, class, selector #1 (true && true")
    assert msg.endswith(
        f'DeviceClass.resource.k8s.io "mig.{DRIVER}" is invalid: spec.selectors[0].cel.expression: '
        "Too long: may not be more than 10240 bytes"
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
    # cel-go's parser calls it an invalid int literal; in a class file the API server would refuse it.
    def change(d: dict[str, Docs]) -> None:
        d["classes"][2]["spec"]["selectors"][0]["cel"]["expression"] = "9" * 4400

    msg = _refused(change)
    assert f'DeviceClass.resource.k8s.io "shared.{DRIVER}" is invalid: spec.selectors[0].cel.expression: Invalid value: ' in msg
    assert "compilation failed: ERROR: <input>:1:1: invalid int literal\n" in msg
    docs = seed()
    change(docs)
    classes = {c["metadata"]["name"]: c for c in docs["classes"]}
    claims = workloads(docs["manifests"], [])[1][1]  # as a live cluster serves them: stored, not validated again
    share = explain(claims, docs["slices"], classes, docs["allocated"]).requests[0]
    assert share.reason is not None
    assert share.reason.startswith(f"scheduling aborted (the pod is retried with backoff): class shared.{DRIVER}: selector #0: ")
    assert "CEL compile error: compilation failed: ERROR: <input>:1:1: invalid int literal" in share.reason
