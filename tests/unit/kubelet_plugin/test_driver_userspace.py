"""The plugin's start-up decision on the driver's user space: flags, sources, the log line and the Node Event."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from dra_driver.core.driver_files import CONTAINER_LIB_DIR
from dra_driver.files.checkpoint_store import Notice
from dra_driver.sources.fake import FakeGpuSource
from kubelet_plugin.driver_userspace import EVENT_REASON, driver_supply
from kubelet_plugin.settings import parse
from testkit.fake_driver import HOST_DEBIAN, VERSION, Builder, install_driver

GPUS = FakeGpuSource("h100x8", "node-a").gpus()
BASE = ["--node-name", "node-a"]


@pytest.fixture(scope="module")
def builder(tmp_path_factory: pytest.TempPathFactory) -> Builder:
    return Builder(tmp_path_factory.mktemp("elf-cache"))


def toolkit_spec(directory: Path, uuids: list[str]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    doc = {"cdiVersion": "0.5.0", "kind": "nvidia.com/gpu", "devices": [{"name": u, "containerEdits": {}} for u in uuids]}
    (directory / "nvidia.json").write_text(json.dumps(doc))


def test_real_gpus_look_at_the_charts_mount_and_fake_ones_only_when_asked() -> None:
    real = parse(BASE)
    assert (Path("/driver-root"), "/driver-root") == (real.driver_root, real.driver_root_host_path)
    fake = parse([*BASE, "--fake-gpus", "h100x8"])
    assert fake.driver_root is None
    given = parse(
        [*BASE, "--fake-gpus", "h100x8", "--driver-root", "/driver-root", "--driver-root-host-path", "/run/nvidia/driver"]
    )
    assert (Path("/driver-root"), "/run/nvidia/driver") == (given.driver_root, given.driver_root_host_path)


def test_relative_driver_roots_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    for args in (["--driver-root", "driver"], ["--driver-root-host-path", "run/nvidia"]):
        with pytest.raises(SystemExit):
            parse([*BASE, *args])
        assert "is not an absolute path" in capsys.readouterr().err


def test_fake_gpus_without_a_driver_root_need_no_driver_and_read_nothing(tmp_path: Path) -> None:
    toolkit_spec(tmp_path / "cdi", [GPUS[0].uuid])
    sent: list[Notice] = []
    supply = driver_supply(gpus=GPUS, driver_root=None, host_root="/", toolkit_dirs=[tmp_path / "cdi"], notify=sent.append)
    assert (frozenset(), None, "", []) == (supply.toolkit_devices, supply.files, supply.missing, sent)


def test_a_found_driver_is_logged_with_what_containers_get(tmp_path: Path, builder: Builder) -> None:
    install_driver(builder, tmp_path / "root", HOST_DEBIAN)
    sent: list[Notice] = []
    with capture_logs() as logs:
        supply = driver_supply(
            gpus=GPUS, driver_root=tmp_path / "root", host_root="/", toolkit_dirs=[tmp_path / "cdi"], notify=sent.append
        )
    assert supply.files is not None and "" == supply.missing and [] == sent
    assert ["libcuda.so.1", "libnvidia-ml.so.1"] == supply.files.names(CONTAINER_LIB_DIR)
    (found,) = [e for e in logs if e["event"] == "driver_userspace_found"]
    assert (VERSION, "host", ["nvidia-cuda-mps-control", "nvidia-smi"]) == (
        found["driver_version"],
        found["layout"],
        found["utilities"],
    )


def test_neither_source_raises_one_node_event_and_one_error_line_with_the_claims_message(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    sent: list[Notice] = []
    with capture_logs() as logs:
        supply = driver_supply(
            gpus=GPUS,
            driver_root=tmp_path / "empty",
            host_root="/opt/driver",
            toolkit_dirs=[tmp_path / "cdi"],
            notify=sent.append,
        )
    assert supply.files is None and supply.missing.startswith("no NVIDIA driver user space for containers on this node")
    assert f"no libcuda.so.{VERSION} or libnvidia-ml.so.{VERSION}" in supply.missing
    assert f"the driver root /opt/driver (at {tmp_path / 'empty'} in the plugin)" in supply.missing
    assert [Notice(EVENT_REASON, supply.missing, warning=True)] == sent
    (line,) = [e for e in logs if e["event"] == "driver_userspace_missing"]
    assert ("error", supply.missing, len(GPUS)) == (line["log_level"], line["message"], len(line["gpus_not_in_toolkit_spec"]))


def test_a_toolkit_spec_listing_every_gpu_raises_no_event(tmp_path: Path) -> None:
    """The GPUs get the toolkit's spec; the message is kept for devices it cannot list (MIG slices carved later)."""
    toolkit_spec(tmp_path / "cdi", [g.uuid for g in GPUS])
    sent: list[Notice] = []
    supply = driver_supply(
        gpus=GPUS, driver_root=tmp_path / "nope", host_root="/", toolkit_dirs=[tmp_path / "cdi"], notify=sent.append
    )
    assert {g.uuid for g in GPUS} == supply.toolkit_devices
    assert [] == sent and "not a directory" in supply.missing


def test_gpus_reporting_two_driver_versions_are_not_guessed(tmp_path: Path, builder: Builder) -> None:
    install_driver(builder, tmp_path / "root", HOST_DEBIAN)
    gpus = [GPUS[0], dataclasses.replace(GPUS[1], driver_version="535.104.05")]
    supply = driver_supply(gpus=gpus, driver_root=tmp_path / "root", host_root="/", toolkit_dirs=[], notify=lambda _: None)
    assert supply.files is None and "several driver versions (535.104.05, 580.95.05)" in supply.missing
