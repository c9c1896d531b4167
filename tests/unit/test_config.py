"""GpuConfig decoding and the DRA precedence rules for opaque configs."""

from __future__ import annotations

from typing import Any

import pytest

from dra_driver.core.config import (
    API_VERSION,
    DEFAULT_GPU_CONFIG,
    AllocationResult,
    ConfigError,
    TimeSliceInterval,
    decode_gpu_config,
    resolve_device_configs,
)

DRIVER = "gpu.dra-gpu.dev"


def ts(interval: str) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "GpuConfig",
        "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": interval}},
    }


def entry(params: Any, *, source: str = "FromClaim", requests: list[str] | None = None, driver: str = DRIVER) -> dict[str, Any]:
    return {"source": source, "requests": requests or [], "opaque": {"driver": driver, "parameters": params}}


@pytest.mark.parametrize(
    ("raw", "path"),
    [
        ({"apiVersion": API_VERSION, "kind": "GpuConfig", "shareing": {}}, "parameters.shareing"),
        ({"apiVersion": "v1", "kind": "GpuConfig"}, "parameters.apiVersion"),
        ({"apiVersion": API_VERSION, "kind": "MigConfig"}, "parameters.kind"),
        ({"apiVersion": API_VERSION, "kind": "GpuConfig", "sharing": "TimeSlicing"}, "parameters.sharing"),
        ({"apiVersion": API_VERSION, "kind": "GpuConfig", "sharing": {}}, "parameters.sharing.strategy"),
        ({"apiVersion": API_VERSION, "kind": "GpuConfig", "sharing": {"strategy": "Magic"}}, "parameters.sharing.strategy"),
        ({"apiVersion": API_VERSION, "kind": "GpuConfig", "sharing": {"strategy": 3}}, "parameters.sharing.strategy"),
        (ts("Forever"), "parameters.sharing.timeSlicingConfig.interval"),
        (
            {
                "apiVersion": API_VERSION,
                "kind": "GpuConfig",
                "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long", "x": 1}},
            },
            "parameters.sharing.timeSlicingConfig.x",
        ),
        ("garbage", "parameters"),
        (None, "parameters"),
    ],
    ids=[
        "unknown-field",
        "api-version",
        "kind",
        "sharing-type",
        "missing-strategy",
        "bad-strategy",
        "strategy-type",
        "bad-interval",
        "unknown-nested",
        "string",
        "null",
    ],
)
def test_bad_config_is_rejected_naming_the_field(raw: Any, path: str) -> None:
    """Every kind of bad input names the offending field."""
    with pytest.raises(ConfigError) as err:
        decode_gpu_config(raw)
    assert path == err.value.path
    assert str(err.value).startswith(path + ": ")


def test_time_slicing_without_interval_normalizes_to_default() -> None:
    """TimeSlicing alone means the Default interval."""
    cfg = decode_gpu_config({"apiVersion": API_VERSION, "kind": "GpuConfig", "sharing": {"strategy": "TimeSlicing"}})
    assert cfg.sharing is not None and cfg.sharing.time_slicing is not None
    assert TimeSliceInterval.DEFAULT == cfg.sharing.time_slicing.interval


def test_no_sharing_is_exclusive_and_never_implicit_time_slicing() -> None:
    """Without a config a GPU is not time-sliced: old GPUs break on an implicit default."""
    assert DEFAULT_GPU_CONFIG == decode_gpu_config({"apiVersion": API_VERSION, "kind": "GpuConfig"})
    assert DEFAULT_GPU_CONFIG.sharing is None


def interval(cfgs: dict[str, Any], device: str) -> str | None:
    c = cfgs[device]
    return None if c.sharing is None else c.sharing.time_slicing.interval.value


R = [AllocationResult("gpu", "n", "gpu-0"), AllocationResult("other/b", "n", "gpu-1"), AllocationResult("third", "n", "gpu-2")]


def test_claim_config_beats_class_config_whatever_the_order() -> None:
    """FromClaim outranks FromClass even when listed first."""
    cfgs = resolve_device_configs(DRIVER, R, [entry(ts("Short")), entry(ts("Long"), source="FromClass")])
    assert "Short" == interval(cfgs, "gpu-0")


def test_later_entry_wins_within_a_source() -> None:
    """Within claim configs the last applicable entry wins."""
    cfgs = resolve_device_configs(DRIVER, R, [entry(ts("Short")), entry(ts("Medium"))])
    assert "Medium" == interval(cfgs, "gpu-0")


def test_entry_naming_requests_applies_only_to_them() -> None:
    """An entry with requests applies to those (main name covers subrequests); empty means all."""
    cfgs = resolve_device_configs(DRIVER, R, [entry(ts("Short")), entry(ts("Long"), requests=["other"])])
    assert ("Short", "Long", "Short") == (interval(cfgs, "gpu-0"), interval(cfgs, "gpu-1"), interval(cfgs, "gpu-2"))
    cfgs = resolve_device_configs(DRIVER, R, [entry(ts("Long"), requests=["other/b"])])
    assert (None, "Long") == (interval(cfgs, "gpu-0"), interval(cfgs, "gpu-1"))


def test_other_drivers_configs_are_ignored_even_if_invalid_for_us() -> None:
    """A config for another driver is not ours to judge."""
    cfgs = resolve_device_configs(DRIVER, R, [entry("garbage", driver="gpu.nvidia.com")])
    assert DEFAULT_GPU_CONFIG == cfgs["gpu-0"]


def test_a_bad_config_of_ours_is_an_error_even_where_another_wins() -> None:
    """A bad entry fails the claim rather than being silently shadowed."""
    with pytest.raises(ConfigError, match=r"config\[0\]\.opaque\.parameters\.sharing\.strategy"):
        resolve_device_configs(
            DRIVER, R, [entry({"apiVersion": API_VERSION, "kind": "GpuConfig", "sharing": {"strategy": "X"}}), entry(ts("Long"))]
        )
