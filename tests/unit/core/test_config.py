"""The opaque-config API: strict decoding of GpuConfig and MigDeviceConfig, quantities, admission messages, precedence."""

from __future__ import annotations

import time
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dra_driver.core.config import (
    API_VERSION,
    DEFAULT_GPU_CONFIG,
    DEFAULT_MIG_DEVICE_CONFIG,
    AllocationResult,
    ConfigError,
    GpuConfig,
    MigDeviceConfig,
    MpsConfig,
    SharingStrategy,
    TimeSliceInterval,
    decode_gpu_config,
    decode_opaque_config,
    parse_byte_quantity,
    resolve_configs,
    resolve_device_configs,
    validate_claim_configs,
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


# -- MPS, MIG and the one entry point ---------------------------------------------------------


def gpu(sharing: Any = None, kind: str = "GpuConfig") -> dict[str, Any]:
    obj: dict[str, Any] = {"apiVersion": API_VERSION, "kind": kind}
    if sharing is not None:
        obj["sharing"] = sharing
    return obj


def mps(**mps_config: Any) -> dict[str, Any]:
    return {"strategy": "MPS", "mpsConfig": mps_config}


def test_mps_config_is_decoded_with_limits_in_bytes() -> None:
    """Thread percentage kept, pinned limits normalized to bytes, per-device map sorted by device."""
    cfg = decode_opaque_config(
        gpu(
            mps(
                defaultActiveThreadPercentage=50,
                defaultPinnedDeviceMemoryLimit="10Gi",
                defaultPerDevicePinnedMemoryLimit={"gpu-3": "1.5Gi", "gpu-1": "500M"},
            )
        )
    )
    assert isinstance(cfg, GpuConfig) and cfg.sharing is not None
    assert SharingStrategy.MPS == cfg.sharing.strategy
    assert cfg.sharing.time_slicing is None
    assert MpsConfig(50, 10 * 2**30, (("gpu-1", 500_000_000), ("gpu-3", 3 * 2**29))) == cfg.sharing.mps


def test_per_device_pinned_limit_overrides_the_default_for_that_device_only() -> None:
    """The lookup the plugin uses: a device's own entry, else the default, else no limit."""
    m = MpsConfig(None, 4 * 2**30, (("gpu-1", 2**30),))
    assert (2**30, 4 * 2**30) == (m.pinned_memory_limit("gpu-1"), m.pinned_memory_limit("gpu-0"))
    assert MpsConfig().pinned_memory_limit("gpu-0") is None


def test_mps_without_mps_config_means_mps_without_limits() -> None:
    """Strategy MPS alone normalizes to an empty MpsConfig, never to invented limits."""
    cfg = decode_opaque_config(gpu({"strategy": "MPS"}))
    assert cfg.sharing is not None and MpsConfig() == cfg.sharing.mps


@pytest.mark.parametrize(
    ("sharing", "path", "message"),
    [
        (
            {"strategy": "TimeSlicing", "mpsConfig": {}},
            "parameters.sharing.mpsConfig",
            "must not be set with strategy TimeSlicing",
        ),
        (
            {"strategy": "MPS", "timeSlicingConfig": {"interval": "Long"}},
            "parameters.sharing.timeSlicingConfig",
            "must not be set with strategy MPS",
        ),
        (mps(defaultActiveThreadPercentage=0), "parameters.sharing.mpsConfig.defaultActiveThreadPercentage", "between 1 and 100"),
        (mps(defaultActiveThreadPercentage=101), "parameters.sharing.mpsConfig.defaultActiveThreadPercentage", "got 101"),
        (mps(defaultActiveThreadPercentage="50"), "parameters.sharing.mpsConfig.defaultActiveThreadPercentage", "got string"),
        (mps(defaultActiveThreadPercentage=True), "parameters.sharing.mpsConfig.defaultActiveThreadPercentage", "got boolean"),
        (mps(defaultActiveThreadPercentage=50.0), "parameters.sharing.mpsConfig.defaultActiveThreadPercentage", "got number"),
        (
            mps(defaultPinnedDeviceMemoryLimit="0"),
            "parameters.sharing.mpsConfig.defaultPinnedDeviceMemoryLimit",
            "greater than zero",
        ),
        (
            mps(defaultPinnedDeviceMemoryLimit="lots"),
            "parameters.sharing.mpsConfig.defaultPinnedDeviceMemoryLimit",
            "not a quantity",
        ),
        (
            mps(defaultPerDevicePinnedMemoryLimit={"gpu-0": "100m"}),
            "parameters.sharing.mpsConfig.defaultPerDevicePinnedMemoryLimit[gpu-0]",
            "not a whole number of bytes",
        ),
        (
            mps(defaultPerDevicePinnedMemoryLimit={"GPU-0": "1Gi"}),
            "parameters.sharing.mpsConfig.defaultPerDevicePinnedMemoryLimit[GPU-0]",
            "device names",
        ),
        (
            mps(defaultPerDevicePinnedMemoryLimit=["gpu-0"]),
            "parameters.sharing.mpsConfig.defaultPerDevicePinnedMemoryLimit",
            "object",
        ),
        (mps(defaultThreads=5), "parameters.sharing.mpsConfig.defaultThreads", "unknown field"),
        ({"strategy": "MPS", "mpsConfig": "fast"}, "parameters.sharing.mpsConfig", "must be an object, got string"),
    ],
    ids=[
        "ts-with-mps",
        "mps-with-ts",
        "threads-0",
        "threads-101",
        "threads-string",
        "threads-bool",
        "threads-float",
        "pinned-zero",
        "pinned-garbage",
        "per-device-fraction",
        "per-device-key",
        "per-device-type",
        "mps-unknown-field",
        "mps-type",
    ],
)
def test_bad_mps_settings_are_rejected_naming_the_field(sharing: dict[str, Any], path: str, message: str) -> None:
    """Every MPS rule fails with the field path, through both entry points."""
    for decode in (decode_opaque_config, decode_gpu_config):
        with pytest.raises(ConfigError) as err:
            decode(gpu(sharing))
        assert path == err.value.path
        assert message in err.value.message


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("40Gi", 40 * 2**30),
        ("1.5Gi", 3 * 2**29),
        ("0.5Ki", 512),
        ("500M", 500_000_000),
        ("1e9", 10**9),
        ("2E3", 2000),
        ("1E", 10**18),
        ("+2Ki", 2048),
        ("1.0", 1),
        (1048576, 2**20),
    ],
)
def test_quantities_in_every_form_become_bytes(value: Any, expected: int) -> None:
    """Binary and decimal suffixes, exponents, a sign, a JSON integer: all exact bytes."""
    assert expected == parse_byte_quantity(value, "q")


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("100m", "not a whole number of bytes"),
        ("1.5", "not a whole number of bytes"),
        ("1e-3", "not a whole number of bytes"),
        ("0", "greater than zero"),
        ("-1Gi", "greater than zero"),
        ("10E", "too large"),
        ("1gi", "not a quantity"),
        (" 1Gi", "not a quantity"),
        ("", "not a quantity"),
        ("5e", "not a quantity"),
        (1.5, "got number"),
        (True, "got boolean"),
        (None, "got null"),
    ],
)
def test_non_byte_quantities_are_rejected(value: Any, message: str) -> None:
    """Fractions of a byte, zero, negatives, overflow, malformed strings and non-strings fail, naming the path."""
    with pytest.raises(ConfigError) as err:
        parse_byte_quantity(value, "limit")
    assert "limit" == err.value.path
    assert message in err.value.message


_FACTORS = {"": 1, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}


@given(st.integers(min_value=1, max_value=2**20), st.sampled_from(sorted(_FACTORS)))
def test_any_whole_quantity_is_its_exact_byte_count(n: int, suffix: str) -> None:
    """<n><suffix> is n times the suffix's factor, whatever the suffix."""
    assert n * _FACTORS[suffix] == parse_byte_quantity(f"{n}{suffix}", "q")


def test_mig_device_config_takes_mps_and_accepts_time_slicing_without_effect() -> None:
    """MIG: MPS limits decode; TimeSlicing is accepted but carries no interval; no sharing = default."""
    cfg = decode_opaque_config(gpu(mps(defaultActiveThreadPercentage=25), kind="MigDeviceConfig"))
    assert isinstance(cfg, MigDeviceConfig) and cfg.sharing is not None and cfg.sharing.mps == MpsConfig(25)
    ts = decode_opaque_config(gpu({"strategy": "TimeSlicing"}, kind="MigDeviceConfig"))
    assert isinstance(ts, MigDeviceConfig) and ts.sharing is not None
    assert (SharingStrategy.TIME_SLICING, None, None) == (ts.sharing.strategy, ts.sharing.time_slicing, ts.sharing.mps)
    assert DEFAULT_MIG_DEVICE_CONFIG == decode_opaque_config(gpu(kind="MigDeviceConfig"))


def test_mig_device_config_has_no_time_slicing_config() -> None:
    """A MIG device's time slice cannot be set, so timeSlicingConfig is an unknown field there."""
    raw = gpu({"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}}, kind="MigDeviceConfig")
    with pytest.raises(ConfigError) as err:
        decode_opaque_config(raw)
    assert "parameters.sharing.timeSlicingConfig" == err.value.path
    assert "allowed: mpsConfig, strategy" in err.value.message


def test_decode_gpu_config_refuses_a_mig_device_config() -> None:
    """The GpuConfig-only entry point names the kind; the general one accepts both kinds."""
    with pytest.raises(ConfigError) as err:
        decode_gpu_config(gpu(kind="MigDeviceConfig"))
    assert "parameters.kind" == err.value.path
    with pytest.raises(ConfigError, match="supported: GpuConfig, MigDeviceConfig"):
        decode_opaque_config(gpu(kind="VfioDeviceConfig"))


def test_error_splits_into_object_path_and_detail() -> None:
    """``base`` is the config object, ``detail`` the field inside it and the message."""
    with pytest.raises(ConfigError) as err:
        decode_opaque_config(gpu({"strategy": "Magic"}), "x.opaque.parameters")
    e = err.value
    assert ("x.opaque.parameters", "sharing.strategy") == (e.base, e.field)
    assert "sharing.strategy: unknown value 'Magic'; supported: TimeSlicing, MPS" == e.detail
    assert f"object at x.opaque.parameters is invalid: {e.detail}" == e.admission_message()
    assert f"x.opaque.parameters.{e.detail}" == str(e)
    with pytest.raises(ConfigError) as whole:
        decode_opaque_config("garbage", "x.opaque.parameters")
    assert "object at x.opaque.parameters is invalid: must be an object, got string" == whole.value.admission_message()


# -- admission: validate_claim_configs ---------------------------------------------------------


def claim_config(params: Any, driver: str = DRIVER) -> dict[str, Any]:
    return {"opaque": {"driver": driver, "parameters": params}}


def claim(configs: list[dict[str, Any]], api: str = "resource.k8s.io/v1") -> dict[str, Any]:
    requests = [{"name": "gpu", "exactly": {"deviceClassName": "gpu.dra-gpu.dev"}}]
    return {"apiVersion": api, "kind": "ResourceClaim", "spec": {"devices": {"requests": requests, "config": configs}}}


def template(configs: list[dict[str, Any]], api: str = "resource.k8s.io/v1beta1") -> dict[str, Any]:
    requests = [{"name": "gpu", "deviceClassName": "gpu.dra-gpu.dev"}]  # the v1beta1 request shape
    inner = {"spec": {"devices": {"requests": requests, "config": configs}}}
    return {"apiVersion": api, "kind": "ResourceClaimTemplate", "spec": inner}


BAD = gpu({"strategy": "Magic"})


def test_valid_claim_and_template_give_no_messages() -> None:
    """Good configs of ours, other drivers' garbage and no config at all pass."""
    good = [
        claim_config(ts("Long")),
        claim_config(gpu(mps(defaultPinnedDeviceMemoryLimit="1Gi"))),
        claim_config("x", "other.dev"),
    ]
    assert [] == validate_claim_configs(claim(good), DRIVER)
    assert [] == validate_claim_configs(template(good), DRIVER)
    assert [] == validate_claim_configs({"kind": "ResourceClaim", "spec": {"devices": {"requests": []}}}, DRIVER)


def test_each_bad_config_gets_one_message_with_its_path() -> None:
    """Index, spec path (spec.spec for templates) and the decoder's detail, one message per bad entry."""
    configs = [claim_config(ts("Long")), claim_config(BAD), claim_config(gpu(mps(defaultActiveThreadPercentage=0)))]
    msgs = validate_claim_configs(claim(configs), DRIVER)
    assert [
        "object at spec.devices.config[1].opaque.parameters is invalid: sharing.strategy: unknown value 'Magic'; "
        "supported: TimeSlicing, MPS",
        "object at spec.devices.config[2].opaque.parameters is invalid: sharing.mpsConfig.defaultActiveThreadPercentage: "
        "must be between 1 and 100, got 0",
    ] == msgs
    (tmsg,) = validate_claim_configs(template([claim_config(BAD)], api="resource.k8s.io/v1beta2"), DRIVER)
    assert tmsg.startswith("object at spec.spec.devices.config[0].opaque.parameters is invalid: sharing.strategy: ")


def test_only_claims_and_templates_are_validated() -> None:
    """Any other kind is the caller's mistake, not a valid object."""
    with pytest.raises(ValueError, match="'Pod'"):
        validate_claim_configs({"kind": "Pod", "spec": {}}, DRIVER)


@pytest.mark.parametrize(
    "params",
    [
        BAD,
        gpu(mps(defaultPinnedDeviceMemoryLimit="1.5")),
        {"junk": 1},
        "garbage",
        gpu({"strategy": "MPS", "timeSlicingConfig": {}}),
    ],
    ids=["strategy", "quantity", "unknown-field", "not-object", "mixed-strategies"],
)
def test_admission_and_prepare_report_the_same_detail(params: Any) -> None:
    """What the webhook says after ``is invalid: `` is what prepare says after the config's path."""
    (msg,) = validate_claim_configs(claim([claim_config(params)]), DRIVER)
    entry = {"source": "FromClaim", "requests": [], **claim_config(params)}
    with pytest.raises(ConfigError) as err:
        resolve_device_configs(DRIVER, R, [entry])
    assert msg.split(" is invalid: ", 1)[1] == err.value.detail
    assert str(err.value).startswith("allocation.devices.config[0].opaque.parameters")
    assert str(err.value).endswith(err.value.message)


# -- precedence with MIG devices ---------------------------------------------------------------


MIG_R = [AllocationResult("full", "n", "gpu-0"), AllocationResult("slice", "n", "gpu-1-mig-1g10gb-0")]


def test_each_kind_applies_only_to_its_device_type() -> None:
    """A class-wide GpuConfig skips MIG devices and a class-wide MigDeviceConfig skips full GPUs."""
    entries = [entry(ts("Long")), entry(gpu(mps(defaultActiveThreadPercentage=30), kind="MigDeviceConfig"))]
    cfgs = resolve_configs(DRIVER, MIG_R, entries, mig_devices={"gpu-1-mig-1g10gb-0"})
    full, mig = cfgs["gpu-0"], cfgs["gpu-1-mig-1g10gb-0"]
    assert isinstance(full, GpuConfig) and full.sharing is not None and full.sharing.time_slicing is not None
    assert TimeSliceInterval.LONG == full.sharing.time_slicing.interval
    assert isinstance(mig, MigDeviceConfig) and mig.sharing is not None and MpsConfig(30) == mig.sharing.mps


def test_no_config_means_no_sharing_for_either_kind() -> None:
    """Defaults are exclusive: nothing is shared unless a config says so."""
    cfgs = resolve_configs(DRIVER, MIG_R, [], mig_devices={"gpu-1-mig-1g10gb-0"})
    assert {"gpu-0": DEFAULT_GPU_CONFIG, "gpu-1-mig-1g10gb-0": DEFAULT_MIG_DEVICE_CONFIG} == cfgs
    assert all(c.sharing is None for c in cfgs.values())


def test_a_kind_named_for_the_wrong_device_type_is_an_error() -> None:
    """Naming a MIG request in a GpuConfig is a mistake the user must hear about, with the kind's path."""
    with pytest.raises(ConfigError) as err:
        resolve_configs(DRIVER, MIG_R, [entry(ts("Long"), requests=["slice"])], mig_devices={"gpu-1-mig-1g10gb-0"})
    assert "allocation.devices.config[0].opaque.parameters.kind" == err.value.path
    assert "GpuConfig does not apply to device gpu-1-mig-1g10gb-0" in err.value.message
    assert "use MigDeviceConfig" in err.value.message


def test_resolve_device_configs_validates_but_never_applies_mig_device_configs() -> None:
    """The full-GPU entry point ignores a good MigDeviceConfig and still fails on a bad one."""
    mig_cfg = gpu(mps(), kind="MigDeviceConfig")
    assert DEFAULT_GPU_CONFIG == resolve_device_configs(DRIVER, R, [entry(mig_cfg, requests=["gpu"])])["gpu-0"]
    with pytest.raises(ConfigError, match=r"config\[1\]\.opaque\.parameters\.sharing\.strategy"):
        resolve_device_configs(DRIVER, R, [entry(ts("Long")), entry(gpu({"strategy": "X"}, kind="MigDeviceConfig"))])


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("1e2147483647", "too large"),
        ("1e10000000", "too large"),
        ("1E+999999999999999999999", "is not a quantity"),
        ("1e-2147483648", "not a whole number of bytes"),
        ("9" * 4400, "4400 characters"),
        ("0." + "0" * 4400 + "1", "characters"),
        (10**400, "too large"),
    ],
    ids=["exp-2^31", "exp-1e7", "exp-not-int64", "exp-neg-2^31", "4400-digits", "4400-decimals", "huge-json-int"],
)
def test_absurd_quantities_are_refused_in_bounded_time(value: Any, message: str) -> None:
    """Observation 1: one quantity froze the plugin (10**exp under the node-wide lock)."""
    t0 = time.process_time()
    with pytest.raises(ConfigError, match=message):
        parse_byte_quantity(value, "mpsConfig.defaultPinnedDeviceMemoryLimit")
    assert time.process_time() - t0 < 0.5


def test_validate_claim_configs_refuses_non_objects_with_its_own_error() -> None:
    objs: list[Any] = [None, [], "claim", 7]
    for obj in objs:
        with pytest.raises(ValueError, match="not a ResourceClaim"):
            validate_claim_configs(obj, "gpu.dra-gpu.dev")
