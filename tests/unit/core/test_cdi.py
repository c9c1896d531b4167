"""CDI naming and spec validity."""

from __future__ import annotations

import pytest

from dra_driver.core.cdi import (
    CDI_VERSION,
    DeviceEdits,
    Mount,
    cdi_device_id,
    claim_spec,
    env_prefix,
    spec_file_name,
    validate_spec,
)

UID = "0123abcd-0000-4000-8000-000000000001"


def test_ids_files_and_names_carry_the_claim_uid() -> None:
    """Runtime CDI caches can never confuse two claims: the UID is in the file, the name and the id."""
    assert f"k8s.gpu.dra-gpu.dev/claim={UID}-gpu-0" == cdi_device_id("gpu.dra-gpu.dev", UID, "gpu-0")
    assert f"k8s.gpu.dra-gpu.dev/claim={UID}-gpu-0-share1" == cdi_device_id("gpu.dra-gpu.dev", UID, "gpu-0", "share1")
    assert f"k8s.gpu.dra-gpu.dev-claim_{UID}.json" == spec_file_name("gpu.dra-gpu.dev", UID)


def test_spec_is_valid_and_uses_a_version_that_allows_leading_digits() -> None:
    """Claim UIDs often start with a digit, which needs cdiVersion >= 0.5.0."""
    spec = claim_spec("gpu.dra-gpu.dev", UID, [DeviceEdits("gpu-0", None, {"A": "1"}, ("/dev/nvidia0",))])
    validate_spec(spec)
    assert "0.5.0" == CDI_VERSION == spec["cdiVersion"]
    assert {"env": ["A=1"], "deviceNodes": [{"path": "/dev/nvidia0"}]} == spec["devices"][0]["containerEdits"]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"cdiVersion": "0.3.0", "kind": "a.b/claim", "devices": [{"name": "x"}]}, "cdiVersion"),
        ({"cdiVersion": CDI_VERSION, "kind": "nokind", "devices": [{"name": "x"}]}, "vendor/class"),
        ({"cdiVersion": CDI_VERSION, "kind": "a.b/claim", "devices": []}, "no devices"),
        ({"cdiVersion": CDI_VERSION, "kind": "a.b/claim", "devices": [{"name": "x"}, {"name": "x"}]}, "duplicate"),
        ({"cdiVersion": CDI_VERSION, "kind": "a.b/claim", "devices": [{"name": "a b"}]}, "invalid"),
    ],
)
def test_invalid_specs_are_caught(spec: dict[str, object], message: str) -> None:
    """The validator enforces what runtimes reject."""
    with pytest.raises(ValueError, match=message):
        validate_spec(spec)


def test_env_prefix_is_a_valid_variable_name() -> None:
    """Device names become upper-case env names."""
    assert "GPU_DEVICE_GPU_12" == env_prefix("gpu-12")


def test_read_only_mounts_go_once_in_the_specs_own_edits_and_sharing_mounts_stay_as_they_were() -> None:
    """The driver's files: one set for the claim, ro/nosuid/nodev bind; an MPS mount keeps rbind/rw; devices keep theirs."""
    mps = Mount("/var/lib/kubelet/plugins/x/mps/pipe", "/tmp/nvidia-mps")
    devices = [DeviceEdits("gpu-0", None, {"A": "1"}, mounts=(mps,)), DeviceEdits("gpu-1", None, {"B": "2"})]
    driver = [Mount("/usr/lib64/libcuda.so.580.95.05", "/usr/local/nvidia/lib64/libcuda.so.1")]
    spec = claim_spec("gpu.dra-gpu.dev", UID, devices, driver)
    validate_spec(spec)
    assert {
        "mounts": [
            {
                "hostPath": "/usr/lib64/libcuda.so.580.95.05",
                "containerPath": "/usr/local/nvidia/lib64/libcuda.so.1",
                "options": ["ro", "nosuid", "nodev", "bind"],
            }
        ]
    } == spec["containerEdits"]
    assert [{"hostPath": mps.host_path, "containerPath": mps.container_path, "options": ["rbind", "rw"]}] == spec["devices"][0][
        "containerEdits"
    ]["mounts"]
    assert "mounts" not in spec["devices"][1]["containerEdits"]
    assert "containerEdits" not in claim_spec("gpu.dra-gpu.dev", UID, devices)  # nothing to mount: as before
