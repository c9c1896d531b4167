"""dra_driver.schedsim.shared_json: a list of slices decodes to what json.loads gives, equal parts shared; else None."""

from __future__ import annotations

import json
import sys
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dra_driver.cli.explain import InputError, load_objects
from dra_driver.cli.main import inventory_slices
from dra_driver.core.mig import MigStrategy
from dra_driver.schedsim.shared_json import SharedDecoder


def _slices(nodes: int) -> dict[str, Any]:
    items = []
    for i in range(nodes):
        items += inventory_slices(fake_gpus="h100x8", node_name=f"node-{i}", driver="gpu.dra-gpu.dev", mig=MigStrategy.DYNAMIC)
    return {"apiVersion": "v1", "kind": "List", "items": items}


def test_a_list_of_slices_decodes_as_json_does_with_equal_parts_shared() -> None:
    data = json.dumps(_slices(2)).encode()
    got = SharedDecoder().decode(data)
    assert got == json.loads(data)
    assert json.dumps(got) == data.decode()  # the same keys in the same order
    a, b = (s["spec"]["devices"] for s in (got["items"][1], got["items"][6]))  # one slice of each node
    assert a[0]["name"] == b[0]["name"]
    assert a[0]["capacity"] is b[0]["capacity"]
    assert a[0]["consumesCounters"] is b[0]["consumesCounters"]
    assert a[0]["attributes"] is not b[0]["attributes"]  # the parent GPU's UUID differs ...
    assert a[0]["attributes"]["profile"] is b[0]["attributes"]["profile"]  # ... the rest is shared


@pytest.mark.parametrize(
    "data",
    [
        b"[1, 2]",  # not an object
        b"apiVersion: v1\nkind: List\n",  # YAML
        b'{"items": []} {"items": []}',  # concatenated documents
        b'{"items": [{"spec": {"devices": [{"name": "\xff"}]}}]}',  # not UTF-8
        b'{"items": [{"spec": {"devices": [{"name": NaN}]}}]}',  # json reads it, msgspec does not
        b'{"items": [{"spec": {"devices": [{"name": "\\ud800"}]}}]}',  # a lone surrogate
        b'{"items": [1, }',  # torn
    ],
)
def test_what_the_fast_reading_does_not_take_is_left_to_the_caller(data: bytes) -> None:
    assert SharedDecoder().decode(data) is None


@pytest.mark.parametrize(
    "data",
    [
        b'{"kind": "List", "items": [1, {"spec": 2}, {"spec": {"devices": {"a": 1}}}, {"spec": {"devices": [3, {"a": 1}]}}]}',
        b'{"kind": "List", "items": [{"spec": {"devices": [{"name": "a", "name": "b", "attributes": {"x": 1, "x": {}}}]}}]}',
        b'{"items": [{"spec": {"devices": [{"attributes": [1], "capacity": {"m": {"value": 1e400}}, '
        b'"n": 123456789012345678901234567890}]}}]}',
        b'{"items": "x", "kind": null}',
        b' \r\n{"\\u0061": {"b": [1.5, -0, true, null, "\\u00e9\xc3\xa9"]}}\n',
    ],
)
def test_odd_layouts_decode_as_json_does(data: bytes) -> None:
    got = SharedDecoder().decode(data)
    assert got == json.loads(data)
    assert json.dumps(got) == json.dumps(json.loads(data))


_scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=5)
_values = st.recursive(
    _scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=3), inner, max_size=4)
)
_device = st.dictionaries(st.sampled_from(["name", "attributes", "capacity", "x"]), _values, max_size=4)
_slice = st.fixed_dictionaries(
    {"spec": st.fixed_dictionaries({"devices": st.lists(_device, max_size=3)}, optional={"sharedCounters": _values})}
)


@settings(max_examples=300, deadline=None)
@given(st.fixed_dictionaries({"items": st.lists(_slice | _values, max_size=4)}, optional={"kind": _values}))
def test_any_list_decodes_as_json_does(doc: dict[str, Any]) -> None:
    data = json.dumps(doc).encode()
    got = SharedDecoder().decode(data)
    assert got is not None
    assert json.dumps(got) == json.dumps(json.loads(data))


def test_a_slices_file_reads_the_same_through_either_path(tmp_path: Any) -> None:
    doc = _slices(1)
    compact, spaced = tmp_path / "compact.json", tmp_path / "concatenated.json"
    compact.write_text(json.dumps(doc))
    spaced.write_text(json.dumps(doc, indent=2) + "\n" + json.dumps({"kind": "List", "items": []}))  # the stream reader's
    assert load_objects(str(compact)) == load_objects(str(spaced)) == doc["items"]


def test_a_file_that_is_not_utf8_is_refused_as_before(tmp_path: Any) -> None:
    bad = tmp_path / "bad.json"
    bad.write_bytes(b'{"kind": "List", "items": [{"a": "\xff"}]}')
    with pytest.raises(InputError, match=r"not UTF-8 text: invalid start byte at byte 34"):
        load_objects(str(bad))


_no_floats = st.none() | st.booleans() | st.integers() | st.text(max_size=5)
_values_no_floats = st.recursive(
    _no_floats, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=3), inner, max_size=4)
)
_typed_device = st.dictionaries(st.sampled_from(["name", "attributes", "capacity", "x"]), _values_no_floats, max_size=4)
_typed_spec = st.dictionaries(
    st.sampled_from(["driver", "pool", "devices", "sharedCounters", "nodeName", "allNodes"]),
    st.lists(st.dictionaries(st.text(max_size=3), _values_no_floats, max_size=3), max_size=3)
    | st.lists(_typed_device, max_size=3)
    | _values_no_floats,
    max_size=5,
)
_typed_item = st.dictionaries(st.sampled_from(["kind", "metadata", "spec"]), _typed_spec | _values_no_floats, max_size=3)


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(["apiVersion", "kind", "metadata", "items"]), st.lists(_typed_item, max_size=3) | _values_no_floats
    )
)
def test_the_one_pass_reading_decodes_as_json_does(doc: dict[str, Any]) -> None:
    """Layouts near the usual one (no floats): the one-pass reading or, where it does not apply, the other; the same value."""
    data = json.dumps(doc).encode()
    got = SharedDecoder().decode(data)
    assert got is not None
    assert json.dumps(got) == json.dumps(json.loads(data))


@pytest.mark.parametrize(
    "data",
    [
        b'{"kind": "List", "metadata": {"resourceVersion": "7", "remainingItemCount": 3}, "items": [{"metadata": '
        b'{"name": "s", "generation": 2, "labels": {"a": "b"}, "finalizers": ["x"]}, "spec": {"devices": [{"name": "d"}]}}]}',
        b'{"items": [{"spec": {"devices": [{"name": "d", "attributes": {"a": {"int": 1}}}], "sharedCounters": {"odd": 1}}}]}',
        b'{"items": [{"spec": {"devices": {"a": 1}, "pool": {"name": "p", "generation": 1.5}}}], "kind": "List"}',
        b'{"items": [{"spec": {"devices": [{"name": "d"}, 7]}}], "x": 1.0}',
        b'{"items": [{"spec": {"driver": "\\ud800", "devices": [{"name": "d"}]}}]}',
        b'{"items": [], "items": [{"spec": {"devices": [{"name": "a", "name": "b"}]}}], "kind": "List", "kind": 2}',
    ],
)
def test_layouts_the_one_pass_reading_refuses_or_takes_decode_as_json_does(data: bytes) -> None:
    got = SharedDecoder().decode(data)
    if got is None:  # (a lone surrogate: neither reading takes it, json.loads does)
        assert b"\\ud800" in data
        return
    assert got == json.loads(data)
    assert json.dumps(got) == json.dumps(json.loads(data))


def test_the_usual_layout_is_read_in_one_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    data = json.dumps(_slices(1)).encode()
    decoder = SharedDecoder()
    monkeypatch.setattr(decoder, "_objects_decoder", None)  # the reading level by level would fail
    got = decoder.decode(data)
    assert got is not None
    assert json.dumps(got) == data.decode()


def _nested(depth: int, where: str) -> bytes:
    """A list of one slice with a value ``depth`` lists deep: an attribute's, a device field's, or the metadata's."""
    deep = "[" * depth + "]" * depth
    device = {"name": "a", "attributes": {"x": {"int": 1}}}
    meta: dict[str, Any] = {"name": "s"}
    text = json.dumps({"kind": "List", "items": [{"metadata": meta, "spec": {"driver": "d", "devices": [device]}}]})
    marks = {"attribute": '{"int": 1}', "device": '"a"', "metadata": '"s"'}
    return text.replace(marks[where], deep, 1).encode()


@pytest.mark.parametrize("where", ["attribute", "device", "metadata"])
def test_a_value_too_deep_for_json_loads_is_left_to_the_caller(where: str) -> None:
    """Where ``json.loads`` of the whole text exceeds the recursion limit, the decoder gives None, never a value.

    A part decoded on its own is less deep than within the whole text (by the objects and lists
    that hold it): without care, the few depths in between would read here and fail there.
    """
    limit = sys.getrecursionlimit()
    depths = range(limit - 60, limit + 20)
    outcomes = []
    for depth in depths:
        data = _nested(depth, where)
        try:
            want = json.loads(data)
        except RecursionError:
            want = None
        got = SharedDecoder().decode(data)
        if want is None:
            assert got is None, depth
        elif got is not None:
            assert got == want, depth
        outcomes.append(want is None)
    assert any(outcomes) and not all(outcomes)  # the range spans the limit


def test_a_part_with_many_brackets_but_shallow_decodes_as_json_does() -> None:
    wide = "[" + ",".join(["[[1],{}]"] * 400) + "]"  # 1,201 brackets, 3 deep
    data = _nested(1, "attribute").replace(b"[]", wide.encode(), 1)
    got = SharedDecoder().decode(data)
    assert got is not None
    assert got == json.loads(data)
