"""Names checked by a regex refuse a trailing newline.

A pattern that ends in ``$`` also matches just before a final ``\\n``, so ``"gpu-0\\n"`` used to pass
as a GPU name, a CDI name, a driver name or a driver version and then reach file names, CDI specs and
the API. Every validator anchors with ``\\Z``; each case here passed before that change.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from dra_driver.core.cdi import cdi_device_name
from dra_driver.core.driver import validate_driver_name
from dra_driver.core.driver_files import DriverNotFound, driver_version, is_candidate_library
from dra_driver.core.mig import parse_mig_device_name
from dra_driver.core.schema import is_gpu_device_name
from dra_driver.files.health_store import request_repair


def test_a_gpu_name_with_a_trailing_newline_is_not_a_gpu_name() -> None:
    assert is_gpu_device_name("gpu-0")
    assert not is_gpu_device_name("gpu-0\n")


def test_a_mig_device_name_with_a_trailing_newline_does_not_parse() -> None:
    assert parse_mig_device_name("gpu-0-mig-1g-10gb-0") is not None
    assert parse_mig_device_name("gpu-0-mig-1g-10gb-0\n") is None


def test_a_driver_name_with_a_trailing_newline_is_refused() -> None:
    assert validate_driver_name("gpu.dra.example.com") == "gpu.dra.example.com"
    with pytest.raises(ValueError, match="DNS subdomain"):
        validate_driver_name("gpu.dra.example.com\n")


def test_a_cdi_name_with_a_trailing_newline_is_refused() -> None:
    with pytest.raises(ValueError, match="CDI"):
        cdi_device_name("0b1e7a4c-5d2f-4c1e-9a57-5b1f2d3c4e5f", "gpu-0\n")


def test_a_driver_version_with_a_trailing_newline_is_not_a_version() -> None:
    assert driver_version(["580.159.04"]) == "580.159.04"
    with pytest.raises(DriverNotFound, match="not a version"):
        driver_version(["580.159.04\n"])
    assert not is_candidate_library("libcuda.so.580.159.04\n")


def test_a_repair_request_for_a_name_with_a_trailing_newline_writes_nothing(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not a GPU device name"):
        request_repair(tmp_path, "gpu-0\n")
    assert list(tmp_path.rglob("*")) == []
