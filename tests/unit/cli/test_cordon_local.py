"""``dra-gpu cordon`` by local withholding (dra_driver/cli/cordon_local.py, dra_driver/core/local_cordon.py).

Against a fake API server that serves no DeviceTaintRule: cordon falls back by itself with a note
and records the device in the Node annotation; ``--evict`` is refused (exit 2, nothing changed);
a second cordon replaces the reason; a device already withheld (so not published) can be
cordoned again; a conflict is read again; a malformed annotation is not overwritten; uncordon
removes the entry (the annotation with the last one); ``--local`` forces the mode where rules are
served. The annotation's parsing and which devices a cordon withholds (a GPU's MIG devices) are
pure and checked here too.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from dra_driver.cli.cordon_local import local_cordons
from dra_driver.cli.main import main
from dra_driver.core.local_cordon import MalformedCordons, Withholding, annotation_key, parse, render, withheld
from dra_driver.core.schema import Attr
from dra_driver.kube.rest import KubeApiError

DRIVER = "gpu.dra-gpu.dev"
KEY = annotation_key(DRIVER)


class _Nodes:
    def __init__(self, annotations: dict[str, str] | None = None, conflicts: int = 0) -> None:
        self.node: dict[str, Any] = {"metadata": {"name": "node-a", "resourceVersion": "1", "annotations": annotations or {}}}
        self.conflicts = conflicts
        self.patches: list[dict[str, Any]] = []

    def get_node(self, name: str) -> dict[str, Any]:
        if name != "node-a":
            raise KubeApiError(404, "NotFound", "nodes not found")
        copy: dict[str, Any] = json.loads(json.dumps(self.node))
        return copy

    def set_annotation(self, name: str, key: str, value: str | None, *, resource_version: str) -> dict[str, Any]:
        if self.conflicts:
            self.conflicts -= 1
            self.node["metadata"]["resourceVersion"] = str(int(self.node["metadata"]["resourceVersion"]) + 1)
            raise KubeApiError(409, "Conflict", "the object has been modified")
        assert resource_version == self.node["metadata"]["resourceVersion"]
        self.patches.append({key: value})
        notes = self.node["metadata"]["annotations"]
        if value is None:
            notes.pop(key, None)
        else:
            notes[key] = value
        self.node["metadata"]["resourceVersion"] = str(int(resource_version) + 1)
        return self.node


class _Api:
    def __init__(self, nodes: _Nodes, served: str | None = None) -> None:
        self.nodes, self.served = nodes, served
        self.devices: list[dict[str, Any]] = [{"name": "gpu-0", "attributes": {"uuid": {"string": "GPU-0"}}}]
        self.devices += [{"name": "gpu-0-mig-1g10gb-0", "attributes": {"parentUUID": {"string": "GPU-0"}}}, {"name": "gpu-1"}]
        self.created: list[dict[str, Any]] = []

    def served_version(self) -> str | None:
        return self.served

    def server_version_text(self) -> str:
        return "v1.34.4"

    def node_slices(self, driver: str, node: str) -> list[dict[str, Any]]:
        w = Withholding.from_node(self.nodes.node, DRIVER)  # what the node's plugin publishes
        attrs = ((d["name"], {k: v["string"] for k, v in d["attributes"].items()}) for d in self.devices if "attributes" in d)
        gone = withheld([*attrs, ("gpu-1", {})], w.cordoned)
        devices = [] if w.everything else [d for d in self.devices if d["name"] not in gone]
        spec = {"driver": DRIVER, "nodeName": node, "pool": {"name": node, "generation": 1}, "devices": devices}
        return [{"spec": spec}] if node == "node-a" else []

    def node_exists(self, node: str) -> bool:
        return node == "node-a"

    def rules(self, version: str) -> list[dict[str, Any]]:
        return []

    def get_rule(self, version: str, name: str) -> None:
        return None

    def create_rule(self, version: str, rule: dict[str, Any]) -> dict[str, Any]:
        self.created.append(rule)
        return rule


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch) -> _Api:
    api = _Api(_Nodes())
    monkeypatch.setattr("dra_driver.kube.taint_rules_api.connect", lambda _kubeconfig: api)
    return api


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main([*argv, "--kubeconfig", "/dev/null"])
    out, err = capsys.readouterr()
    return code, out, err


def test_cordon_falls_back_to_withholding_with_a_note_and_uncordon_undoes_it(
    cluster: _Api, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _run(capsys, "cordon", "node-a", "gpu-0", "--reason", "fan failing")
    assert code == 0, err
    assert "cordoned node-a gpu-0 and 1 MIG device(s) on it by local withholding" in out and "fan failing" in out
    assert "serves no DeviceTaintRule API" in err and "v1.34.4" in err and "local withholding" in err
    assert parse(cluster.nodes.node["metadata"]["annotations"][KEY]) == {"gpu-0": "fan failing"}
    # Again with another reason: replaced; the GPU is withheld now (not published), yet known.
    code, out, _ = _run(capsys, "cordon", "node-a", "gpu-0", "--reason", "ECC")
    assert code == 0 and parse(cluster.nodes.node["metadata"]["annotations"][KEY]) == {"gpu-0": "ECC"}
    code, out, _ = _run(capsys, "cordon", "node-a", "gpu-1")
    assert code == 0 and parse(cluster.nodes.node["metadata"]["annotations"][KEY]) == {"gpu-0": "ECC", "gpu-1": "cordoned"}
    shown = local_cordons([cluster.nodes.node])
    assert [(c.pool, c.device, c.effect, c.reason) for c in shown] == [
        ("node-a", "gpu-0", "withheld", "ECC"),
        ("node-a", "gpu-1", "withheld", "cordoned"),
    ]
    code, out, _ = _run(capsys, "uncordon", "node-a", "gpu-0")
    assert code == 0 and "uncordoned node-a gpu-0" in out
    code, out, _ = _run(capsys, "uncordon", "node-a", "gpu-1")
    assert code == 0 and KEY not in cluster.nodes.node["metadata"]["annotations"]  # the last entry takes the annotation
    code, out, _ = _run(capsys, "uncordon", "node-a", "gpu-1")
    assert code == 0 and "is not cordoned" in out


def test_evict_is_refused_without_rules_and_nothing_changes(cluster: _Api, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(capsys, "cordon", "node-a", "gpu-0", "--evict")
    assert code == 2 and out == ""
    assert "--evict needs a DeviceTaintRule" in err and "cannot evict" in err and "Nothing was changed" in err
    assert "DRADeviceTaintRules" in err and "1.37" in err
    assert cluster.nodes.patches == []


def test_bad_input_and_unknown_nodes_change_nothing(cluster: _Api, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(capsys, "cordon", "node-x", "gpu-0")
    assert code == 2 and "node 'node-x' not found" in err
    code, _, err = _run(capsys, "cordon", "node-a", "gpu-9")
    assert code == 2 and "device 'gpu-9' is not published" in err
    assert cluster.nodes.patches == []


def test_a_malformed_annotation_is_not_overwritten(cluster: _Api, capsys: pytest.CaptureFixture[str]) -> None:
    cluster.nodes.node["metadata"]["annotations"][KEY] = "gpu-0"
    code, _, err = _run(capsys, "cordon", "node-a", "gpu-1")
    assert code == 2 and "is malformed" in err and f"kubectl annotate node node-a {KEY}-" in err
    code, _, err = _run(capsys, "uncordon", "node-a", "gpu-1")
    assert code == 2 and "is malformed" in err
    assert cluster.nodes.patches == []


def test_a_conflict_is_read_again(cluster: _Api, capsys: pytest.CaptureFixture[str]) -> None:
    cluster.nodes.conflicts = 2
    code, _, err = _run(capsys, "cordon", "node-a", "gpu-1")
    assert code == 0, err
    assert parse(cluster.nodes.node["metadata"]["annotations"][KEY]) == {"gpu-1": "cordoned"}
    cluster.nodes.conflicts = 3
    code, _, err = _run(capsys, "uncordon", "node-a", "gpu-1")
    assert code == 1 and "refused" in err


def test_local_forces_withholding_where_rules_are_served(cluster: _Api, capsys: pytest.CaptureFixture[str]) -> None:
    cluster.served = "v1"
    code, out, err = _run(capsys, "cordon", "node-a", "gpu-1", "--local")
    assert code == 0 and "by local withholding" in out and err == ""  # asked for: no note
    assert cluster.created == []
    code, _, err = _run(capsys, "cordon", "node-a", "gpu-1", "--local", "--evict")
    assert code == 2 and "--local was given" in err
    code, out, _ = _run(capsys, "uncordon", "node-a", "gpu-1")  # rules served: both kinds are looked at
    assert code == 0 and f"node/node-a {KEY}" in out


@pytest.mark.parametrize(
    ("value", "problem"),
    [("gpu-0", "not JSON"), ("[]", "a JSON list"), ('{"gpu-0": 1}', "entry 'gpu-0'"), ('{"": "x"}', "entry ''")],
)
def test_a_malformed_annotation_withholds_everything(value: str, problem: str) -> None:
    with pytest.raises(MalformedCordons, match=problem):
        parse(value)
    w = Withholding.from_node({"metadata": {"annotations": {KEY: value}}}, DRIVER)
    assert w.everything and KEY in w.problem
    assert Withholding.from_node({"metadata": {}}, DRIVER) == Withholding()


def test_render_round_trips_and_empty_removes() -> None:
    assert render({}) is None
    value = render({"gpu-1": "b", "gpu-0": "a"})
    assert value == '{"gpu-0":"a","gpu-1":"b"}' and parse(value) == {"gpu-0": "a", "gpu-1": "b"}


def test_a_gpus_cordon_withholds_its_mig_devices_by_uuid_or_name() -> None:
    devices = [
        ("gpu-0", {"uuid": Attr("string", "GPU-0")}),
        ("gpu-0-mig-1g10gb-0", {}),  # by name
        ("odd-mig", {"parentUUID": Attr("string", "GPU-0")}),  # by parentUUID
        ("gpu-1", {"uuid": Attr("string", "GPU-1")}),
        ("gpu-1-mig-1g10gb-0", {"parentUUID": Attr("string", "GPU-1")}),
    ]
    assert withheld(devices, ["gpu-0"]) == {"gpu-0", "gpu-0-mig-1g10gb-0", "odd-mig"}
    assert withheld(devices, ["gpu-1-mig-1g10gb-0"]) == {"gpu-1-mig-1g10gb-0"}  # one MIG device alone
    assert withheld(devices, []) == set()
