"""Fuzzing what ``dra-gpu cordon``, ``uncordon`` and ``top`` read: ResourceSlices and DeviceTaintRules.

Both come from the API server and from whoever else may write DeviceTaintRules, so they can be
anything. Per input (a node's slices and the cluster's rules, mutated by the shared harness):

- the pure readers (``dra_driver.core.cordon``) raise nothing but ``CordonError``; the devices they
  return have valid names; the cordoned devices they list have a rule name that can be deleted
  (never empty: a DELETE of the collection) and print as one line each;
- the commands (``dra_driver.cli.main``) end in 0, 1 or 2, never a traceback; they delete and
  write only validly named rules; and ``top``'s reader returns its list.
"""

from __future__ import annotations

import itertools
import random
import re
from collections.abc import Iterator
from typing import Any

import pytest

from dra_driver.cli.cordon import cordon_lines
from dra_driver.cli.main import main
from dra_driver.core.cordon import (
    Cordon,
    CordonError,
    cordoned_devices,
    covered_devices,
    node_devices,
    others_selecting,
    rule_for,
    same_rule,
)
from dra_driver.core.local_cordon import annotation_key
from dra_driver.kube import taint_rules_api
from dra_driver.kube.rest import KubeApiError
from tests.fuzz import harness

DRIVER = "gpu.dra-gpu.dev"
NODE = "node-a"
_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def _dev(name: str, **strings: str) -> dict[str, Any]:
    return {"name": name, "attributes": {k: {"string": v} for k, v in strings.items()}, "capacity": {"memory": {"value": "80Gi"}}}


def slices_seed() -> list[dict[str, Any]]:
    devices = [_dev("gpu-0", uuid="GPU-0"), _dev("gpu-0-mig-1g10gb-0", parentUUID="GPU-0"), _dev("gpu-1", uuid="GPU-1")]
    return [
        {
            "metadata": {"name": f"{NODE}-gpu-{g}", "resourceVersion": "5"},
            "spec": {"driver": DRIVER, "nodeName": NODE, "pool": {"name": NODE, "generation": g}, "devices": devices},
        }
        for g in (1, 2)
    ]


def rules_seed() -> list[dict[str, Any]]:
    c = Cordon(DRIVER, NODE, NODE, "gpu-0", ("gpu-0", "gpu-0-mig-1g10gb-0"), "fan failure", evict=False)
    ours = [rule_for(c, d) for d in c.covered]
    for r in ours:
        r["metadata"]["resourceVersion"] = "9"
    theirs = {
        "metadata": {"name": "hand-written", "resourceVersion": "3"},
        "spec": {"deviceSelector": {"driver": DRIVER, "pool": NODE}, "taint": {"key": "k", "value": "v", "effect": "NoSchedule"}},
    }
    return [*ours, theirs]


def inputs(n: int, name: str) -> Iterator[tuple[Any, Any]]:
    rng = random.Random(harness.seed_for(name))
    slices, rules = slices_seed(), rules_seed()
    for _ in range(n):
        r = rng.random()
        yield (harness.mutate(slices, rng) if r < 0.7 else slices), (harness.mutate(rules, rng) if r > 0.3 else rules)


def _check_cordoned(rules: list[Any]) -> None:
    for c in cordoned_devices(rules):
        assert _SUBDOMAIN.fullmatch(c.rule) and len(c.rule) <= 253, f"listed a rule named {c.rule!r}"
        for text in (c.driver, c.pool, c.device, c.cordoned_as, c.effect, c.reason):
            assert isinstance(text, str) and text.isprintable() and len(text) <= 256


def test_the_readers_return_devices_and_rules_or_a_cordon_error() -> None:
    def read(case: tuple[Any, Any]) -> None:
        slices, rules = case
        slices, rules = (slices if isinstance(slices, list) else []), (rules if isinstance(rules, list) else [])
        _check_cordoned(rules)
        assert all(isinstance(n, str) for n in others_selecting(rules, DRIVER, NODE, "gpu-0"))
        for r in rules:
            same_rule(rules_seed()[0], r) if isinstance(r, dict) else None
        found = node_devices(slices, DRIVER)
        if found is not None:
            assert _SUBDOMAIN.fullmatch(found.pool)
            covered = covered_devices(found, "gpu-0", DRIVER)
            assert covered[0] == "gpu-0" and all(isinstance(d, str) and len(d) <= 63 for d in covered)

    rep = harness.run("cordon readers", inputs(harness.budget(1000), "cordon-read"), read, (CordonError,))
    harness.assert_clean(rep)
    assert rep.accepted > rep.inputs // 4


_ANNOTATIONS: tuple[Any, ...] = (
    None,
    '{"gpu-0": "fan"}',
    "not json",
    '{"gpu-0": 5}',
    '["gpu-0"]',
    '{"gpu-0\\n": "x"}',
    "{" * 5000,
    7,
)
"""Local-cordon annotations the Node answers with, one per case in turn: absent, valid and hostile."""
_TURN = itertools.count()


class _Nodes:
    """The Node reads and annotation writes of a local cordon, answering a hostile annotation."""

    def __init__(self, annotation: Any) -> None:
        self._annotation = annotation
        self.written: list[tuple[str, str | None]] = []

    def get_node(self, name: str) -> dict[str, Any]:
        annotations = {} if self._annotation is None else {annotation_key(DRIVER): self._annotation}
        return {"metadata": {"name": name, "resourceVersion": "3", "annotations": annotations}}

    def set_annotation(self, name: str, key: str, value: str | None, *, resource_version: str) -> dict[str, Any]:
        assert name == NODE and key == annotation_key(DRIVER), f"asked to annotate {name!r} with {key!r}"
        self.written.append((key, value))
        return self.get_node(name)


class _Api:
    """The calls the commands make, answering hostile slices and rules; what it was asked to write is recorded."""

    def __init__(self, slices: Any, rules: Any) -> None:
        self._slices, self._rules = slices, rules
        self.written: list[str] = []
        self.nodes = _Nodes(_ANNOTATIONS[next(_TURN) % len(_ANNOTATIONS)])

    def served_version(self) -> str | None:
        return "v1"

    def server_version_text(self) -> str:
        return "v1.37.0"

    def node_exists(self, node: str) -> bool | None:
        return True

    def node_slices(self, driver: str, node: str) -> list[dict[str, Any]]:
        return [s for s in self._slices if isinstance(s, dict)] if isinstance(self._slices, list) else []

    def rules(self, version: str) -> list[dict[str, Any]]:
        return [r for r in self._rules if isinstance(r, dict)] if isinstance(self._rules, list) else []

    def get_rule(self, version: str, name: str) -> dict[str, Any] | None:
        for r in self.rules(version):
            meta = r.get("metadata")
            if isinstance(meta, dict) and meta.get("name") == name:
                return r
        return None

    def create_rule(self, version: str, rule: dict[str, Any]) -> dict[str, Any]:
        return self._write(rule["metadata"]["name"], rule)

    def replace_rule(self, version: str, rule: dict[str, Any]) -> dict[str, Any]:
        assert isinstance(rule["metadata"]["resourceVersion"], str)
        return self._write(rule["metadata"]["name"], rule)

    def delete_rule(self, version: str, name: str) -> bool:
        self._write(name, {})
        return True

    def _write(self, name: str, rule: dict[str, Any]) -> dict[str, Any]:
        assert _SUBDOMAIN.fullmatch(name) and len(name) <= 253, f"asked to write or delete a rule named {name!r}"
        self.written.append(name)
        return rule


def test_the_commands_end_in_a_status_never_a_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    current: list[_Api] = []
    monkeypatch.setattr(taint_rules_api, "connect", lambda kubeconfig: current[-1])

    def run(case: tuple[Any, Any]) -> None:
        for argv in (["cordon", NODE, "gpu-0", "--reason", "fan"], ["uncordon", NODE, "gpu-0"], ["cordon", NODE, "gpu-1"]):
            current.append(_Api(*case))
            assert main([*argv, "--kubeconfig", "/k"]) in (0, 1, 2)
            capsys.readouterr()
            current.clear()
        assert isinstance(cordon_lines(_Api(*case)), list)  # type: ignore[arg-type]  # a fake of the calls it makes, not the API class

    rep = harness.run("cordon commands", inputs(harness.budget(300), "cordon-cli"), run, (KubeApiError,))
    harness.assert_clean(rep)
    assert rep.accepted == rep.inputs
