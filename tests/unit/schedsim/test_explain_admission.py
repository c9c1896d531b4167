"""``dra-gpu explain -f`` refuses what the API server would refuse: selectors too long, not compiling, too complex.

Nothing is simulated for such a claim: the API server would not store it, so the scheduler would
never see it. The refusal exits 2 and names the object, the request (or class), the selector and
the API server's own field error.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest
import yaml

from dra_driver.cli.explain import InputError, add_explain_parser, explain_objects
from dra_driver.cli.main import inventory_slices
from dra_driver.schedsim.allocator import explain
from dra_driver.schedsim.allocator.admission import refusals
from dra_driver.schedsim.rules import rules_for

DRIVER = "gpu.dra-gpu.dev"
RUNAWAY = "lists.range(1000).all(i, lists.range(1000).all(j, i + j >= 0))"
FINE = f'device.driver == "{DRIVER}"'


def cli(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="dra-gpu")
    add_explain_parser(p.add_subparsers(dest="command", required=True))
    args = p.parse_args(argv)
    rc: int = args.func(args)
    return rc


def claim(*expressions: str, name: str = "heavy") -> dict[str, Any]:
    selectors = [{"cel": {"expression": e}} for e in expressions]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": DRIVER, "selectors": selectors}}]}},
    }


@pytest.fixture
def slices() -> list[dict[str, Any]]:
    return inventory_slices(fake_gpus="h100x8", node_name="node-a", driver=DRIVER)


def test_a_claim_the_api_server_finds_too_complex_exits_2_naming_request_selector_and_reason(
    tmp_path: Path, slices: list[dict[str, Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "claim.yaml").write_text(yaml.safe_dump(claim(FINE, RUNAWAY)))
    (tmp_path / "slices.yaml").write_text(yaml.safe_dump_all(slices))
    rc = cli(["explain", "-f", str(tmp_path / "claim.yaml"), "--slices", str(tmp_path / "slices.yaml")])
    err = capsys.readouterr()
    assert rc == 2
    assert err.out == ""
    assert 'ResourceClaim default/heavy, request "gpu", selector #2 (lists.range(1000)' in err.err
    assert (
        'ResourceClaim.resource.k8s.io "heavy" is invalid: spec.devices.requests[0].exactly.selectors[1].cel.expression: '
        "Forbidden: too complex, exceeds cost limit"
    ) in err.err


def test_an_oversize_selector_in_a_class_file_is_refused(slices: list[dict[str, Any]]) -> None:
    big = FINE + " && " + " && ".join(["true"] * 2100)
    assert len(big.encode()) > 10 * 1024
    cls = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": DRIVER}}
    cls["spec"] = {"selectors": [{"cel": {"expression": FINE}}, {"cel": {"expression": big}}]}
    with pytest.raises(InputError) as err:
        explain_objects([claim(FINE)], slices, [cls])
    assert str(err.value).startswith(f"DeviceClass {DRIVER}, class, selector #2 (")
    assert str(err.value).endswith(
        f'DeviceClass.resource.k8s.io "{DRIVER}" is invalid: spec.selectors[1].cel.expression: '
        "Too long: may not be more than 10240 bytes"
    )


def test_a_template_subrequest_is_named_with_its_path(slices: list[dict[str, Any]]) -> None:
    template = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "t", "namespace": "ns"},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "gpu",
                            "firstAvailable": [
                                {"name": "big", "deviceClassName": DRIVER},
                                {
                                    "name": "small",
                                    "deviceClassName": DRIVER,
                                    "selectors": [{"cel": {"expression": "device.nope"}}],
                                },
                            ],
                        }
                    ]
                }
            }
        },
    }
    with pytest.raises(InputError) as err:
        explain_objects([template], slices)
    message = str(err.value)
    assert message.startswith('ResourceClaimTemplate ns/t, request "gpu", subrequest "small", selector #1 (device.nope)')
    assert (
        'ResourceClaimTemplate.resource.k8s.io "t" is invalid: spec.spec.devices.requests[0].firstAvailable[1].selectors[0]'
        ".cel.expression: Invalid value: \"device.nope\": compilation failed: ERROR: <input>:1:7: undefined field 'nope'"
    ) in message


def test_claims_the_api_server_takes_are_explained_as_before(slices: list[dict[str, Any]]) -> None:
    [(label, explanation)] = explain_objects([claim(FINE, name="fine")], slices)
    assert label == "claim fine"
    assert [r.reason for r in explanation.requests] == [None]


def test_every_refused_selector_is_reported() -> None:
    found = refusals(claim(RUNAWAY, "device.nope", FINE, RUNAWAY), rules_for(37))
    assert [(r.index, r.problem.split(":")[0]) for r in found] == [
        (0, "Forbidden"),
        (1, "Invalid value"),
        (3, "Forbidden"),
    ]


def test_allocated_claims_are_not_validated_again(slices: list[dict[str, Any]]) -> None:
    stored = claim(RUNAWAY, name="old")
    stored["status"] = {"allocation": {"devices": {"results": []}}}
    [(_, explanation)] = explain_objects([claim(FINE, name="fine")], slices, allocated=[stored])
    assert [r.reason for r in explanation.requests] == [None]


@pytest.mark.parametrize("minor", [36, 37])
def test_a_stored_runaway_selector_aborts_the_attempt_with_the_schedulers_cost_error(
    slices: list[dict[str, Any]], minor: int
) -> None:
    # As the live path reads it (stored, not validated again): the scheduler evaluates it, the
    # cost limit cancels the evaluation, and a selector error aborts the scheduling attempt.
    classes = {DRIVER: {"metadata": {"name": DRIVER}, "spec": {"selectors": [{"cel": {"expression": FINE}}]}}}
    ex = explain([claim(RUNAWAY)], slices, classes, [], rules=rules_for(minor))
    [request] = ex.requests
    assert request.reason is not None
    assert request.reason.startswith("scheduling aborted (the pod is retried with backoff): claim default/heavy: selector #0")
    assert request.reason.endswith("CEL runtime error: operation cancelled: actual cost limit exceeded")
