"""`dra-gpu explain`: the offline form, its JSON contract and its readable report."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
import yaml

from dra_driver.cli.explain import add_explain_parser, load_objects
from dra_driver.cli.main import inventory_slices

DEMO = Path(__file__).resolve().parents[3] / "demo"
DRIVER = "gpu.dra-gpu.dev"


def cli(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="dra-gpu")
    add_explain_parser(p.add_subparsers(dest="command", required=True))
    args = p.parse_args(argv)
    rc: int = args.func(args)
    return rc


@pytest.fixture
def slices_file(tmp_path: Path) -> Path:
    """Two `dra-gpu inventory -o yaml` outputs appended to one file, as a user would."""
    f = tmp_path / "slices.yaml"
    text = "".join(
        yaml.safe_dump_all(inventory_slices(fake_gpus=p, node_name=n, driver=DRIVER), sort_keys=False)
        for p, n in (("h100x8", "node-a"), ("l4x4", "node-b"))
    )
    assert not text.startswith("---")
    f.write_text(text)
    return f


def test_concatenated_inventory_output_reads_as_all_nodes(slices_file: Path) -> None:
    objs = load_objects(str(slices_file))
    assert [o["spec"]["nodeName"] for o in objs] == ["node-a", "node-b"]


def test_json_contract_for_an_allocatable_pod(slices_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = cli(["explain", "-f", str(DEMO / "gpu-40gi.yaml"), "--slices", str(slices_file), "-o", "json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0
    assert list(out) == ["requests"]
    [entry] = out["requests"]
    assert set(entry) == {"claim", "request", "node", "devices", "reason", "candidates"}
    assert (entry["claim"], entry["request"], entry["node"], entry["devices"], entry["reason"]) == (
        "dra-demo/gpu-40gi-gpu",
        "gpu",
        "node-a",
        ["node-a/gpu-0"],
        None,
    )
    assert len(entry["candidates"]) == 12
    assert set(entry["candidates"][0]) == {"node", "device", "verdict", "detail"}
    assert {c["verdict"] for c in entry["candidates"]} <= {"match", "no-match", "error", "unavailable"}


def test_pending_pod_exits_1_with_reason_and_per_device_detail(slices_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = cli(["explain", "-f", str(DEMO / "missing-attribute.yaml"), "--slices", str(slices_file), "-o", "json"])
    [entry] = json.loads(capsys.readouterr().out)["requests"]
    assert rc == 1
    assert entry["node"] is None and entry["devices"] == []
    assert "CEL runtime error: no such key: coolingType" in entry["reason"]
    assert entry["candidates"][0]["verdict"] == "error"


def test_readable_report_names_devices_and_reasons(slices_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = cli(["explain", "-f", str(DEMO / "unsatisfiable.yaml"), "--slices", str(slices_file)])
    captured = capsys.readouterr()
    assert rc == 1
    assert "pod dra-demo/unsatisfiable:" in captured.out
    assert "NOT allocatable: 0/2 nodes can allocate all claims" in captured.out
    assert "node-b/gpu-3" in captured.out and "no-match" in captured.out
    assert "no --classes given" in captured.err


def test_classes_and_allocated_files_are_used(tmp_path: Path, slices_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    classes = tmp_path / "classes.yaml"
    classes.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "DeviceClass",
                "metadata": {"name": DRIVER},
                "spec": {"selectors": [{"cel": {"expression": f'device.attributes["{DRIVER}"].type == "gpu"'}}]},
            }
        )
    )
    allocated = tmp_path / "allocated.yaml"
    allocated.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {"name": "busy", "namespace": "x"},
                "status": {
                    "allocation": {
                        "devices": {"results": [{"request": "gpu", "driver": DRIVER, "pool": "node-b", "device": "gpu-0"}]}
                    }
                },
            }
        )
    )
    rc = cli(
        [
            "explain",
            "-f",
            str(DEMO / "gpu-no-mig.yaml"),
            "--slices",
            str(slices_file),
            "--classes",
            str(classes),
            "--allocated",
            str(allocated),
            "-o",
            "json",
        ]
    )
    [entry] = json.loads(capsys.readouterr().out)["requests"]
    assert rc == 0
    assert entry["devices"] == ["node-b/gpu-1"]
    assert entry["candidates"][8] == {
        "node": "node-b",
        "device": "node-b/gpu-0",
        "verdict": "unavailable",
        "detail": "already allocated to claim x/busy",
    }


def test_a_bare_claim_template_is_explained(tmp_path: Path, slices_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    docs = [d for d in load_objects(str(DEMO / "two-gpus.yaml")) if d["kind"] == "ResourceClaimTemplate"]
    f = tmp_path / "t.yaml"
    f.write_text(yaml.safe_dump_all(docs))
    assert cli(["explain", "-f", str(f), "--slices", str(slices_file), "-o", "json"]) == 0
    [entry] = json.loads(capsys.readouterr().out)["requests"]
    assert entry["devices"] == ["node-a/gpu-0", "node-a/gpu-1"]


def test_missing_template_is_a_usage_error(tmp_path: Path, slices_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pods = [d for d in load_objects(str(DEMO / "two-gpus.yaml")) if d["kind"] == "Pod"]
    f = tmp_path / "p.yaml"
    f.write_text(yaml.safe_dump_all(pods))
    assert cli(["explain", "-f", str(f), "--slices", str(slices_file)]) == 2
    assert "ResourceClaimTemplate two-h100 is not in -f" in capsys.readouterr().err


def test_json_inventory_output_is_accepted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "s.json"
    f.write_text(
        "".join(
            json.dumps({"apiVersion": "v1", "kind": "List", "items": inventory_slices(fake_gpus=p, node_name=n, driver=DRIVER)})
            for p, n in (("h100x8", "a"), ("l4x4", "b"))
        )
    )
    assert cli(["explain", "-f", str(DEMO / "gpu-no-mig.yaml"), "--slices", str(f), "-o", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["requests"][0]["node"] == "b"


def test_a_malformed_slice_is_a_usage_error_naming_the_object_and_field(
    tmp_path: Path, slices_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    slices = load_objects(str(slices_file))
    slices[1]["spec"]["devices"][2]["capacity"] = ["memory", "24Gi"]  # a list where an object belongs
    f = tmp_path / "bad.yaml"
    f.write_text(yaml.safe_dump_all(slices))
    assert cli(["explain", "-f", str(DEMO / "gpu-no-mig.yaml"), "--slices", str(f)]) == 2
    err = capsys.readouterr().err
    assert (
        err
        == "dra-gpu explain: ResourceSlice node-b-gpu.dra-gpu.dev-000: spec.devices[2].capacity: must be an object, not a list\n"
    )


def test_a_slice_with_more_devices_than_the_api_allows_is_refused(
    tmp_path: Path, slices_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    slices = load_objects(str(slices_file))
    slices[0]["spec"]["devices"] = [{"name": f"gpu-{i}"} for i in range(129)]
    f = tmp_path / "big.yaml"
    f.write_text(yaml.safe_dump_all(slices))
    assert cli(["explain", "-f", str(DEMO / "gpu-no-mig.yaml"), "--slices", str(f)]) == 2
    assert "ResourceSlice node-a-gpu.dra-gpu.dev-000: spec.devices: 129 items, at most 128 allowed" in capsys.readouterr().err


def test_a_gpu_tainted_by_health_is_skipped_with_the_taint_as_the_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """What the plugin publishes for a GPU with a fatal XID (``kubelet_plugin.monitoring.health_taints``) explains itself."""
    from dra_driver.appkit.inventory import node_publication
    from dra_driver.core.health import HealthBook, HealthEvent, TaintPolicy, record_event, tainted_devices
    from dra_driver.core.mig import MigStrategy
    from dra_driver.core.slices import slice_objects, split_pool
    from dra_driver.sources.fake import FakeGpuSource

    gpus = FakeGpuSource("h100x8", "node-a").gpus()
    pub = node_publication(gpus, MigStrategy.NONE, None)
    book = record_event(HealthBook(), HealthEvent(gpus[0].uuid, "xid", 1.0, 79))
    devices = tainted_devices(pub.devices, pub.targets, book, DRIVER, TaintPolicy(evict_fatal=True))
    objs = slice_objects(driver=DRIVER, node_name="node-a", contents=split_pool(devices), generation=1, node_uid=None)
    f = tmp_path / "slices.yaml"
    f.write_text(yaml.safe_dump_all(objs, sort_keys=False))
    rc = cli(["explain", "-f", str(DEMO / "gpu-40gi.yaml"), "--slices", str(f), "-o", "json"])
    [entry] = json.loads(capsys.readouterr().out)["requests"]
    assert rc == 0 and entry["devices"] == ["node-a/gpu-1"]  # the next GPU, not the failed one
    (gpu0,) = [c for c in entry["candidates"] if c["device"] == "node-a/gpu-0"]
    assert gpu0["verdict"] == "unavailable"
    assert f"taint {DRIVER}/xid=79:NoExecute is not tolerated" in gpu0["detail"]
