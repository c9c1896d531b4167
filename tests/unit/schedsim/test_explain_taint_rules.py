"""``dra-gpu explain`` applies DeviceTaintRules as kube-scheduler's slice tracker does (``allocator/taint_rules.py``).

A rule's taint lands on the devices its selector matches (unset fields match any, no selector
matches nothing), only where the release's scheduler applies rules (1.37 by default, 1.36 with its
gate on, 1.35/1.34 not at their defaults); tolerations in the claim still count; the device's
verdict names the rule and, for a rule of ``dra-gpu cordon``, the reason given. Rules in the input
files are read from ``--slices`` and ``-f``; a malformed one is an input error naming it.
"""

from __future__ import annotations

from typing import Any

import pytest

from dra_driver.cli.explain import InputError, explain_objects
from dra_driver.cli.explain_live import live_rules, withheld_notes
from dra_driver.core.cordon import Cordon, rule_for
from dra_driver.schedsim.allocator import explain
from dra_driver.schedsim.allocator.taint_rules import TaintRule, apply_taint_rules, read_taint_rules
from dra_driver.schedsim.allocator.validate import InvalidObject
from dra_driver.schedsim.rules import rules_for

DRIVER = "gpu.dra-gpu.dev"
R37 = rules_for(37)
CLASSES = {
    DRIVER: {"metadata": {"name": DRIVER}, "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{DRIVER}'"}}]}}
}


def _slice(node: str, names: list[str], driver: str = DRIVER) -> dict[str, Any]:
    return {
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-{driver}"},
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": n} for n in names],
        },
    }


def _claim(tolerations: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    exact: dict[str, Any] = {"deviceClassName": DRIVER, "allocationMode": "ExactCount", "count": 1}
    if tolerations:
        exact["tolerations"] = tolerations
    return {
        "kind": "ResourceClaim",
        "metadata": {"name": "c", "namespace": "ns"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exact}]}},
    }


def _rule(
    name: str, selector: dict[str, str] | None, effect: str = "NoSchedule", key: str = "example.com/broken"
) -> dict[str, Any]:
    spec: dict[str, Any] = {"taint": {"key": key, "value": "yes", "effect": effect}}
    if selector is not None:
        spec["deviceSelector"] = selector
    return {"kind": "DeviceTaintRule", "metadata": {"name": name}, "spec": spec}


def _devices(ex: Any) -> list[str]:
    return [d for r in ex.requests for d in r.devices]


def test_a_rule_taints_the_device_it_selects_and_explain_names_it() -> None:
    slices = [_slice("node-a", ["gpu-0", "gpu-1"])]
    rules = [_rule("broken-gpu-0", {"driver": DRIVER, "pool": "node-a", "device": "gpu-0"})]
    ex = explain([_claim()], slices, CLASSES, [], rules=R37, taint_rules=rules)
    assert _devices(ex) == ["node-a/gpu-1"]
    verdicts = {c.device: (c.verdict, c.detail) for r in ex.requests for c in r.candidates}
    assert verdicts["node-a/gpu-0"] == (
        "unavailable",
        "taint example.com/broken=yes:NoSchedule is not tolerated (from DeviceTaintRule broken-gpu-0)",
    )
    assert explain([_claim()], slices, CLASSES, [], rules=R37).requests[0].devices == ["node-a/gpu-0"]  # no rules


@pytest.mark.parametrize(
    ("selector", "tainted"),
    [
        ({}, {"gpu-0", "gpu-1", "other:gpu-0"}),  # the empty selector matches every device
        (None, set()),  # no selector matches none
        ({"driver": DRIVER}, {"gpu-0", "gpu-1"}),
        ({"pool": "node-a"}, {"gpu-0", "gpu-1", "other:gpu-0"}),  # a pool of any driver
        ({"device": "gpu-0"}, {"gpu-0", "other:gpu-0"}),
        ({"driver": DRIVER, "pool": "node-b"}, set()),
    ],
)
def test_selection_follows_the_trackers_fields(selector: dict[str, str] | None, tainted: set[str]) -> None:
    from dra_driver.schedsim.allocator.objects import read_slice

    slices = [
        read_slice(_slice("node-a", ["gpu-0", "gpu-1"]), 0),
        read_slice(_slice("node-a", ["gpu-0"], "other.example.com"), 1),
    ]
    out = apply_taint_rules(slices, read_taint_rules([_rule("r", selector)]))
    got = {
        ("" if s["spec"]["driver"] == DRIVER else "other:") + d["name"]
        for s in out
        for d in s["spec"]["devices"]
        if d.get("taints")
    }
    assert got == tainted
    for before, after in zip(slices, out, strict=True):  # a slice no rule touches is passed on as it is
        assert (after is before) == (not any(d.get("taints") for d in after["spec"]["devices"]))


def test_slice_taints_come_first_and_rule_taints_are_added_in_name_order() -> None:
    from dra_driver.schedsim.allocator.objects import read_slice

    s = _slice("node-a", ["gpu-0"])
    s["spec"]["devices"][0]["taints"] = [{"key": "own", "effect": "None"}]
    rules = read_taint_rules([_rule("b", {}, key="k/b"), _rule("a", {}, key="k/a")])
    (out,) = apply_taint_rules([read_slice(s, 0)], rules)
    assert [t["key"] for t in out["spec"]["devices"][0]["taints"]] == ["own", "k/a", "k/b"]
    assert s["spec"]["devices"][0]["taints"] == [{"key": "own", "effect": "None"}]  # the input is not changed


def test_tolerations_in_the_claim_still_count_and_noexecute_blocks_too() -> None:
    slices = [_slice("node-a", ["gpu-0"])]
    for effect in ("NoSchedule", "NoExecute"):
        rules = [_rule("r", {"device": "gpu-0"}, effect=effect)]
        assert _devices(explain([_claim()], slices, CLASSES, [], rules=R37, taint_rules=rules)) == []
        tolerated = _claim([{"key": "example.com/broken", "operator": "Exists"}])
        assert _devices(explain([tolerated], slices, CLASSES, [], rules=R37, taint_rules=rules)) == ["node-a/gpu-0"]
    info = [_rule("r", {"device": "gpu-0"}, effect="None")]
    assert _devices(explain([_claim()], slices, CLASSES, [], rules=R37, taint_rules=info)) == ["node-a/gpu-0"]


def test_a_dra_gpu_cordon_names_its_reason() -> None:
    c = Cordon(driver=DRIVER, node="node-a", pool="node-a", device="gpu-0", covered=("gpu-0",), reason="fan failing", evict=False)
    rule = {"apiVersion": "resource.k8s.io/v1", **rule_for(c, "gpu-0")}
    ex = explain([_claim()], [_slice("node-a", ["gpu-0"])], CLASSES, [], rules=R37, taint_rules=[rule])
    (cand,) = ex.requests[0].candidates
    assert cand.verdict == "unavailable"
    assert f"(from DeviceTaintRule {rule['metadata']['name']}: cordoned by dra-gpu: fan failing)" in cand.detail
    assert ex.requests[0].reason is not None


@pytest.mark.parametrize(
    ("minor", "gates", "applied"),
    [(37, {}, True), (36, {}, False), (36, {"DRADeviceTaintRules": True}, True), (35, {}, False), (34, {}, False)],
)
def test_rules_apply_only_where_the_releases_scheduler_applies_them(minor: int, gates: dict[str, bool], applied: bool) -> None:
    rules = rules_for(minor, gates)
    assert rules.device_taint_rules is applied
    ex = explain([_claim()], [_slice("node-a", ["gpu-0"])], CLASSES, [], rules=rules, taint_rules=[_rule("r", {})])
    assert _devices(ex) == ([] if applied else ["node-a/gpu-0"])


def test_live_mode_assumes_the_gate_where_the_server_serves_rules() -> None:
    rules, notes = live_rules(36, None, served="v1beta2", count=2)
    assert rules.device_taint_rules and "DRADeviceTaintRules=true" in notes[0] and "2 DeviceTaintRule(s) applied" in notes[1]
    rules, notes = live_rules(36, {"DRADeviceTaintRules": False}, served="v1beta2", count=1)
    assert not rules.device_taint_rules and "ignored" in notes[0]
    rules, notes = live_rules(34, None, served=None, count=0)
    assert not rules.device_taint_rules and notes == []


def test_rules_in_the_files_are_applied_and_bad_ones_refused() -> None:
    rule = _rule("broken", {"device": "gpu-0"})
    got = explain_objects([_claim()], [_slice("node-a", ["gpu-0", "gpu-1"]), rule], rules=R37)
    assert [d for _, ex in got for d in _devices(ex)] == ["node-a/gpu-1"]
    got = explain_objects([_claim(), rule], [_slice("node-a", ["gpu-0", "gpu-1"])], rules=R37)  # among the manifests
    assert [d for _, ex in got for d in _devices(ex)] == ["node-a/gpu-1"]
    bad = {"kind": "DeviceTaintRule", "metadata": {"name": "bad"}, "spec": {"taint": {"key": 3}}}
    with pytest.raises(InputError, match=r"DeviceTaintRule bad: spec\.taint\.key"):
        explain_objects([_claim()], [_slice("node-a", ["gpu-0"]), bad], rules=R37)


def test_class_and_cel_selectors_of_1_34_are_refused_later_ones_ignore_them() -> None:
    rule = _rule("by-class", {"deviceClassName": "gpu"})
    with pytest.raises(InvalidObject, match="deviceClassName or CEL selectors"):
        read_taint_rules([rule], class_selectors=True)
    assert read_taint_rules([rule]) == [
        TaintRule("by-class", {}, {"key": "example.com/broken", "value": "yes", "effect": "NoSchedule", "rule": "by-class"})
    ]


def test_withheld_notes_name_each_nodes_local_cordons() -> None:
    nodes = {
        "node-a": {"annotations": {f"{DRIVER}/cordoned-devices": '{"gpu-1":"fan","gpu-0":"ecc"}'}},
        "node-b": {"annotations": {f"{DRIVER}/cordoned-devices": "[1]"}},
        "node-c": {},
    }
    notes = withheld_notes(nodes, [_slice("node-a", ["gpu-0"])])
    assert notes[0] == f"note: node node-a withholds {DRIVER} devices cordoned locally, not published: gpu-0 (ecc), gpu-1 (fan)"
    assert notes[1].startswith(f"note: node node-b withholds {DRIVER} devices cordoned locally, not published: every device (")
    assert len(notes) == 2
