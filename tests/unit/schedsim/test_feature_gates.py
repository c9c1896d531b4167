"""kube-scheduler's feature gates as dra-gpu computes them, and ``dra-gpu explain --feature-gates``.

The values are those each release's own registry gives a stock kube-scheduler (emulation version =
binary, minimum compatibility version = binary - 1); ``e2e/test_feature_gates.py`` checks the whole
table against each release's Go code, these tests the rules dra-gpu derives from it and the flag.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

import dra_driver.kube.explain_api as explain_api
from dra_driver.cli import explain as cli_explain
from dra_driver.cli.explain import InputError, add_explain_parser
from dra_driver.schedsim.gates import TABLES, GateError, Spec, gate_values, known_gates, parse_feature_gates, spec_at
from dra_driver.schedsim.rules import allocator_variant, rules_for

DRIVER = "gpu.dra-gpu.dev"


def test_fractional_capacity_range_is_beta_but_on_only_from_min_compatibility_1_37() -> None:
    specs = TABLES[37]["DRAFractionalCapacityRange"]
    assert spec_at(specs, 37, 36) == Spec(37, False, "BETA")  # a stock 1.37 scheduler
    assert spec_at(specs, 37, 37) == Spec(37, True, "BETA", min_compatibility=37)  # --min-compatibility-version=1.37
    assert spec_at(specs, 36, 35) is None  # not introduced yet
    assert gate_values(37)["DRAFractionalCapacityRange"] is False


@pytest.mark.parametrize(
    ("minor", "on", "off"),
    [
        (34, {"DRAAdminAccess", "DRAPrioritizedList", "DRAResourceClaimDeviceStatus"}, {"DRAPartitionableDevices"}),
        (35, {"DRAResourceClaimDeviceStatus"}, {"DRAConsumableCapacity", "DRADeviceTaints", "DRADeviceBindingConditions"}),
        (36, {"DRAConsumableCapacity", "DRAPartitionableDevices", "DRADeviceTaints"}, {"DRAListTypeAttributes"}),
        (37, {"DRAConsumableCapacity", "DRADeviceTaints"}, {"DRAFractionalCapacityRange", "DRADerivedAttributes"}),
    ],
)
def test_each_release_has_its_own_defaults(minor: int, on: set[str], off: set[str]) -> None:
    values = gate_values(minor)
    assert all(values[g] for g in on) and not any(values[g] for g in off)


def test_the_allocator_variant_of_each_release_at_its_defaults() -> None:
    assert [rules_for(m).variant for m in (34, 35, 36, 37)] == ["experimental", "incubating", "incubating", "incubating"]
    assert allocator_variant(37, frozenset({"DRAListTypeAttributes"})) == "experimental"


def test_the_flag_is_read_as_kube_scheduler_reads_it() -> None:
    assert parse_feature_gates(" DRAFractionalCapacityRange = true ,,AllBeta=F") == {
        "DRAFractionalCapacityRange": True,
        "AllBeta": False,
    }
    with pytest.raises(GateError, match=r"^missing bool value for DRAPrioritizedList$"):
        parse_feature_gates("DRAPrioritizedList")
    with pytest.raises(GateError, match="invalid value of DRAPrioritizedList=yes"):
        parse_feature_gates("DRAPrioritizedList=yes")


@pytest.mark.parametrize(
    ("minor", "flags", "message"),
    [
        (37, "NoSuchGate=true", "unrecognized feature gate: NoSuchGate"),
        (34, "DRAFractionalCapacityRange=true", "unrecognized feature gate: DRAFractionalCapacityRange"),
        (37, "DRAAdminAccess=false", "cannot set feature gate DRAAdminAccess to false, feature is locked to true"),
        (37, "AllAlpha=true", "WorkloadWithJob is enabled, but depends on features that are disabled"),
        (
            37,
            "DRAConsumableCapacity=false,DRAFractionalCapacityRange=true",
            "DRAFractionalCapacityRange is enabled, but depends on features that are disabled: [DRAConsumableCapacity]",
        ),
    ],
)
def test_values_the_scheduler_refuses_at_start_up_are_refused(minor: int, flags: str, message: str) -> None:
    with pytest.raises(GateError) as err:
        rules_for(minor, parse_feature_gates(flags))
    assert message in str(err.value)


def test_a_gate_that_does_not_change_allocation_is_accepted() -> None:
    some_other = sorted(known_gates(37) - set(TABLES[37]) - {"AllAlpha", "AllBeta"})[0]
    with_it = rules_for(37, {some_other: True})
    assert with_it.overridden == (some_other,) and replace(with_it, overridden=()) == rules_for(37)
    assert rules_for(37, {"DRAExtendedResource": True}).fractional_capacity is False


def test_all_beta_turns_on_fractional_capacity_ranges_in_1_37() -> None:
    r = rules_for(37, {"AllBeta": True})
    assert r.fractional_capacity and r.variant == "incubating"
    assert r.overridden == ("AllBeta",) and "DRAFractionalCapacityRange=true (default)" in r.describe_gates()


@pytest.mark.parametrize(
    ("minor", "flags", "names"),
    [
        (37, "DRAListTypeAttributes=true", "allocator feature DRAListTypeAttributes on"),
        (37, "DRADerivedAttributes=true", "allocator feature DRADerivedAttributes on"),
        (37, "DRADeviceCompatibilityGroups=true", "allocator feature DRADeviceCompatibilityGroups on"),
        (37, "DRAConsumableCapacity=false", "allocator feature DRAConsumableCapacity off"),
        (36, "DRAListTypeAttributes=true", "CEL feature EnableListTypeAttributes on"),
        (34, "DRAResourceClaimDeviceStatus=false", "allocator feature DRAResourceClaimDeviceStatus off"),
    ],
)
def test_gate_values_dra_gpu_does_not_simulate_are_refused_saying_so(minor: int, flags: str, names: str) -> None:
    with pytest.raises(GateError, match=f"dra-gpu does not simulate kube-scheduler 1.{minor} with .*{names}"):
        rules_for(minor, parse_feature_gates(flags))


# -- the CLI -------------------------------------------------------------------------------------------
def cli(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="dra-gpu")
    add_explain_parser(p.add_subparsers(dest="command", required=True))
    args = p.parse_args(argv)
    rc: int = args.func(args)
    return rc


def _shared_gpu() -> dict[str, Any]:
    cores = {"value": "1", "requestPolicy": {"default": "100m", "validRange": {"min": "100m", "step": "100m"}}}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": "node-a-gpu"},
        "spec": {
            "driver": DRIVER,
            "nodeName": "node-a",
            "pool": {"name": "node-a", "generation": 1, "resourceSliceCount": 1},
            "devices": [
                {
                    "name": "gpu-0",
                    "allowMultipleAllocations": True,
                    "capacity": {"cores": cores},
                }
            ],
        },
    }


def _claim(cores: str) -> dict[str, Any]:
    request = {"deviceClassName": DRIVER, "allocationMode": "ExactCount", "count": 1, "capacity": {"requests": {"cores": cores}}}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "c", "namespace": "ns"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": request}]}},
    }


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    slices, claims = tmp_path / "slices.yaml", tmp_path / "claim.yaml"
    slices.write_text(yaml.safe_dump(_shared_gpu()))
    claims.write_text(yaml.safe_dump(_claim("150100u")))  # not a whole number of milli units
    return slices, claims


def test_explain_answers_as_a_scheduler_with_the_given_feature_gates(
    files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    slices, claims = files
    base = ["explain", "-f", str(claims), "--slices", str(slices), "-o", "json"]
    assert cli(base) == 0  # a stock 1.37 scheduler rounds in Value() units: 1 core
    [stock] = json.loads(capsys.readouterr().out)["requests"]
    assert stock["devices"] == ["node-a/gpu-0"] and stock["reason"] is None
    assert cli([*base, "--feature-gates", "DRAFractionalCapacityRange=true"]) == 1
    [gated] = json.loads(capsys.readouterr().out)["requests"]
    assert gated["devices"] == [] and "is not a representable milli value" in gated["reason"]


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ("DRAFractionalCapacityRang=true", "unrecognized feature gate: DRAFractionalCapacityRang"),
        ("DRAListTypeAttributes=true", "dra-gpu does not simulate kube-scheduler 1.37 with DRAListTypeAttributes=true"),
        ("DRAFractionalCapacityRange", "missing bool value for DRAFractionalCapacityRange"),
    ],
)
def test_a_bad_feature_gates_flag_is_a_usage_error(
    files: tuple[Path, Path], capsys: pytest.CaptureFixture[str], flags: str, message: str
) -> None:
    slices, claims = files
    assert cli(["explain", "-f", str(claims), "--slices", str(slices), "--feature-gates", flags]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dra-gpu explain: --feature-gates: ") and message in err


class _Cluster:
    """The reads ``run_live`` makes, answered from objects (a 1.37 server)."""

    def __init__(self, claim: dict[str, Any]) -> None:
        self.claim = claim

    def get(self, kind: str, namespace: str, name: str) -> Any:
        return self.claim

    def resource_slices(self, decode: Any = None) -> list[dict[str, Any]]:
        return [_shared_gpu()]

    def device_classes(self) -> list[dict[str, Any]]:
        return [{"metadata": {"name": DRIVER}, "spec": {}}]

    def resource_claims(self) -> list[dict[str, Any]]:
        return []

    def server_minor(self) -> int | None:
        return 37

    def node_labels(self) -> dict[str, dict[str, str]]:
        return {"node-a": {}}

    def node_metadata(self) -> dict[str, dict[str, Any]]:
        return {name: {"labels": labels} for name, labels in self.node_labels().items()}

    def device_taint_rules(self) -> tuple[str | None, list[dict[str, Any]]]:
        return None, []


def test_live_mode_says_which_gate_values_it_assumed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(explain_api, "connect", lambda _kubeconfig: _Cluster(_claim("150100u")))
    notes: list[str] = []
    [(_, stock)] = cli_explain.run_live(target="resourceclaim/c", namespace="ns", kubeconfig=None, note=notes.append)
    assert stock.requests[0].reason is None
    assert notes[0].startswith("note: kube-scheduler 1.37 feature gates assumed: ")
    assert "DRAFractionalCapacityRange=false (default)" in notes[0]
    gates = {"DRAFractionalCapacityRange": True}
    [(_, gated)] = cli_explain.run_live(target="resourceclaim/c", namespace="ns", kubeconfig=None, gates=gates, note=notes.append)
    assert gated.requests[0].reason is not None and "DRAFractionalCapacityRange=true (set)" in notes[1]
    with pytest.raises(InputError, match=r"^--feature-gates: unrecognized feature gate: Nope$"):
        cli_explain.run_live(target="resourceclaim/c", namespace="ns", kubeconfig=None, gates={"Nope": True})
