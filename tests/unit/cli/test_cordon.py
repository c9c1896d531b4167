"""The pure parts of ``dra-gpu cordon`` (dra_driver/core/cordon.py) and the CLI's refusals before any API call.

Rule names (deterministic, DNS-safe, bounded, distinct), the reason's checks and its label-safe
taint value, the rule built for NoSchedule and --evict, which devices a GPU's cordon covers (its
MIG devices by parentUUID or by name), reading the rules back, and bad input refused with exit 2.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from dra_driver.cli.main import main
from dra_driver.core.cordon import (
    DEFAULT_REASON,
    MAX_NAME,
    Cordon,
    CordonError,
    cordoned_devices,
    covered_devices,
    node_devices,
    others_selecting,
    rule_for,
    rule_name,
    same_rule,
    taint_value,
    validate_reason,
)

DRIVER = "gpu.dra-gpu.dev"
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def _dev(name: str, **strings: str) -> dict[str, Any]:
    return {"name": name, "attributes": {k: {"string": v} for k, v in strings.items()}}


def _slice(devices: list[dict[str, Any]], generation: int = 1, pool: str = "node-a") -> dict[str, Any]:
    pool_ref = {"name": pool, "generation": generation}
    return {"spec": {"driver": DRIVER, "nodeName": "node-a", "pool": pool_ref, "devices": devices}}


def test_rule_names_are_deterministic_dns_safe_bounded_and_distinct() -> None:
    name = rule_name(DRIVER, "node-a", "gpu-3")
    assert name == rule_name(DRIVER, "node-a", "gpu-3")
    assert name.startswith("dra-gpu-cordon-node-a-gpu-3-") and DNS_SUBDOMAIN.match(name)
    assert rule_name(DRIVER, "a-gpu", "0") != rule_name(DRIVER, "a", "gpu-0")  # same joined words, other devices
    assert rule_name(DRIVER, "node-a", "gpu-3") != rule_name("other.example.com", "node-a", "gpu-3")
    long_pool = ".".join(["n" * 60] * 4)  # 243 characters
    long_name = rule_name(DRIVER, long_pool, "gpu-10-mig-1g10gb-6")
    assert len(long_name) <= MAX_NAME and DNS_SUBDOMAIN.match(long_name)


@pytest.mark.parametrize(
    ("reason", "value"),
    [("fan failure", "fan-failure"), ("  ECC: 12 errors!  ", "ECC-12-errors"), ("---", DEFAULT_REASON), ("x" * 200, "x" * 63)],
)
def test_the_taint_value_is_the_reason_made_a_label_value(reason: str, value: str) -> None:
    got = taint_value(validate_reason(reason))
    assert got == value and LABEL_VALUE.match(got) and len(got) <= 63


@pytest.mark.parametrize(("reason", "says"), [("", "empty"), ("x" * 257, "at most 256"), ("a\nb", "control characters")])
def test_bad_reasons_are_refused(reason: str, says: str) -> None:
    with pytest.raises(CordonError, match=says):
        validate_reason(reason)


def test_no_reason_is_the_default() -> None:
    assert validate_reason(None) == DEFAULT_REASON


def _cordon(evict: bool) -> Cordon:
    return Cordon(DRIVER, "node-a", "node-a", "gpu-3", ("gpu-3", "gpu-3-mig-1g10gb-0"), "fan failure", evict)


@pytest.mark.parametrize(("evict", "effect"), [(False, "NoSchedule"), (True, "NoExecute")])
def test_the_rule_selects_one_device_and_taints_it(evict: bool, effect: str) -> None:
    rule = rule_for(_cordon(evict), "gpu-3-mig-1g10gb-0")
    assert rule["spec"]["deviceSelector"] == {"driver": DRIVER, "pool": "node-a", "device": "gpu-3-mig-1g10gb-0"}
    assert rule["spec"]["taint"] == {"key": f"{DRIVER}/cordon", "value": "fan-failure", "effect": effect}
    notes = rule["metadata"]["annotations"]
    assert notes[f"{DRIVER}/cordon-reason"] == "fan failure" and notes[f"{DRIVER}/cordon-device"] == "gpu-3"
    stored = {**rule, "spec": {**rule["spec"], "taint": {**rule["spec"]["taint"], "timeAdded": "2026-11-27T00:00:00Z"}}}
    assert same_rule(rule, stored)
    assert not same_rule(rule_for(_cordon(not evict), "gpu-3-mig-1g10gb-0"), stored)


def test_a_gpus_cordon_covers_its_mig_devices_by_parent_uuid_or_name() -> None:
    devices = [
        _dev("gpu-3", uuid="GPU-3"),
        _dev("gpu-3-mig-1g10gb-0", parentUUID="GPU-3"),
        _dev("gpu-3-mig-2g20gb-4"),  # no attributes: its name says gpu-3
        _dev("gpu-30-mig-1g10gb-0", parentUUID="GPU-30"),  # not gpu-3's
        _dev("gpu-30", uuid="GPU-30"),
    ]
    found = node_devices([_slice(devices[:2], generation=1), _slice(devices, generation=2)], DRIVER)
    assert found is not None and found.pool == "node-a" and len(found.devices) == 5  # the newest generation only
    assert covered_devices(found, "gpu-3", DRIVER) == ("gpu-3", "gpu-3-mig-1g10gb-0", "gpu-3-mig-2g20gb-4")
    assert covered_devices(found, "gpu-3-mig-1g10gb-0", DRIVER) == ("gpu-3-mig-1g10gb-0",)
    with pytest.raises(CordonError, match="'gpu-9' is not published in pool 'node-a'"):
        covered_devices(found, "gpu-9", DRIVER)
    assert node_devices([], DRIVER) is None


def test_rules_read_back_are_ours_only() -> None:
    ours = rule_for(_cordon(True), "gpu-3")
    theirs = {"metadata": {"name": "hand-written"}, "spec": {"deviceSelector": {"driver": DRIVER}, "taint": {"key": "k"}}}
    (c,) = cordoned_devices([ours, theirs], DRIVER)
    assert (c.pool, c.device, c.cordoned_as, c.effect, c.reason) == ("node-a", "gpu-3", "gpu-3", "NoExecute", "fan failure")
    assert cordoned_devices([ours], "other.example.com") == []
    assert others_selecting([ours, theirs], DRIVER, "node-a", "gpu-3") == ["hand-written"]


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["cordon", "Node_A", "gpu-0"], "not a valid node name"),
        (["cordon", "node-a", "GPU 0"], "not a valid device name"),
        (["cordon", "node-a", "gpu-0", "--reason", "x" * 300], "at most 256"),
        (["uncordon", "node-a", "gpu_0"], "not a valid device name"),
        (["cordon", "node-a", "gpu-0", "--driver-name", "Bad"], "driver name"),
    ],
)
def test_bad_input_is_refused_before_any_api_call(argv: list[str], says: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*argv, "--kubeconfig", "/nonexistent/kubeconfig"]) == 2
    err = capsys.readouterr().err
    assert says in err and "nothing was changed" in err


def test_malformed_rules_and_slices_are_skipped_never_a_crash() -> None:
    ours = rule_for(_cordon(True), "gpu-3")
    unnamed = rule_for(_cordon(True), "gpu-3-mig-1g10gb-0")
    unnamed["metadata"]["name"] = ""  # deleting it would DELETE the whole collection
    escapes = rule_for(_cordon(False), "gpu-4")
    escapes["metadata"]["annotations"][f"{DRIVER}/cordon-reason"] = "\x1b[2Jfan\nfailure"
    listed = cordoned_devices([ours, unnamed, escapes, {"metadata": [], "spec": "x"}, {"spec": {"deviceSelector": 5}}], DRIVER)
    assert [c.device for c in listed] == ["gpu-3", "gpu-4"]
    assert listed[1].reason == "?[2Jfan?failure"
    assert others_selecting([{"metadata": {"name": ["x"]}, "spec": {"deviceSelector": None}}], DRIVER, "node-a", "gpu-3") == [
        "(unnamed)"
    ]
    slices: list[Any] = [
        {"spec": {"driver": DRIVER, "pool": {"name": "node-a", "generation": "abc"}, "devices": [_dev("gpu-0")]}},
        {"spec": {"driver": DRIVER, "pool": "node-a"}},
        _slice([_dev("gpu-1"), {"name": "gpu-2\n"}, {"name": ["gpu-3"]}, "gpu-4"]),  # type: ignore[list-item]  # malformed entries on purpose
    ]
    found = node_devices(slices, DRIVER)
    assert found is not None and [d["name"] for d in found.devices] == ["gpu-1"]
    assert node_devices([{"spec": {"driver": DRIVER, "pool": {"name": "", "generation": 1}}}], DRIVER) is None


def test_a_name_with_a_trailing_newline_is_not_a_valid_name() -> None:
    for argv in (["cordon", "node-a\n", "gpu-0"], ["cordon", "node-a", "gpu-0\n"]):
        assert main([*argv, "--kubeconfig", "/nonexistent/kubeconfig"]) == 2


class _StoredWithoutVersion:
    def served_version(self) -> str:
        return "v1"

    def node_slices(self, driver: str, node: str) -> list[dict[str, Any]]:
        return [_slice([_dev("gpu-0")])]

    def get_rule(self, version: str, name: str) -> dict[str, Any]:
        return {"metadata": {"name": name}, "spec": {}}


def test_a_stored_rule_without_a_resource_version_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from dra_driver.kube import taint_rules_api

    monkeypatch.setattr(taint_rules_api, "connect", lambda kubeconfig: _StoredWithoutVersion())
    assert main(["cordon", "node-a", "gpu-0", "--kubeconfig", "/k"]) == 1
    assert "has no metadata.resourceVersion" in capsys.readouterr().err
