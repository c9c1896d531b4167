"""The driver's user space in a claim's CDI spec: the toolkit's spec referenced, or the driver's files mounted, or refused.

In process, with real files in a temp dir (``kubelet_plugin.prepare.state`` over ``dra_driver.core.prepare``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dra_driver.appkit.inventory import node_publication
from dra_driver.core.cdi import FAKE_DEVICE_NODE_HOST, Mount
from dra_driver.core.driver_files import DriverFiles
from dra_driver.core.mig import MigStrategy
from dra_driver.core.prepare import carves
from dra_driver.mig_backends.select import make_mig_backend
from dra_driver.sources.fake import FakeGpuSource
from kubelet_plugin.prepare.mig_ops import MigOps
from kubelet_plugin.prepare.state import DeviceState
from testkit.claimdata import DRIVER, allocated_claim
from tests.unit.kubelet_plugin.device_states import Claims, new_device_state

GPUS = FakeGpuSource("h100x8", "node-a").gpus()
DRIVER_FILES = DriverFiles(
    "580.95.05",
    "host",
    (
        Mount("/usr/lib/x86_64-linux-gnu/libcuda.so.580.95.05", "/usr/local/nvidia/lib64/libcuda.so.1"),
        Mount("/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.580.95.05", "/usr/local/nvidia/lib64/libnvidia-ml.so.1"),
        Mount("/usr/bin/nvidia-smi", "/usr/local/nvidia/bin/nvidia-smi"),
    ),
)
MISSING = "no NVIDIA driver user space for containers on this node: (the start-up's message)"
READ_ONLY = ["ro", "nosuid", "nodev", "bind"]


def make_state(
    tmp_path: Path,
    claims: Claims,
    *,
    toolkit: frozenset[str] = frozenset(),
    files: DriverFiles | None = None,
    missing: str = "",
    mig: bool = False,
) -> DeviceState:
    backend = make_mig_backend(fake=True, gpus=GPUS, state_dir=tmp_path / "sim", boot_id="boot-1") if mig else None
    return new_device_state(
        tmp_path,
        claims,
        publication=node_publication(GPUS, MigStrategy.DYNAMIC if mig else MigStrategy.NONE, backend),
        mig=MigOps(backend, GPUS) if backend is not None else None,
        device_nodes=True,
        device_node_host=FAKE_DEVICE_NODE_HOST,
        toolkit_devices=toolkit,
        driver_files=files,
        driver_missing=missing,
    )


def spec_of(tmp_path: Path, uid: str) -> dict[str, Any]:
    spec: dict[str, Any] = json.loads((tmp_path / "cdi" / f"k8s.{DRIVER}-claim_{uid}.json").read_text())
    return spec


def driver_mounts() -> list[dict[str, Any]]:
    return [{"hostPath": m.host_path, "containerPath": m.container_path, "options": READ_ONLY} for m in DRIVER_FILES.mounts]


def test_a_device_the_toolkit_does_not_list_gets_the_drivers_files_read_only_once_per_claim(tmp_path: Path) -> None:
    claims = Claims()
    ref = claims.add(allocated_claim(devices=["gpu-0", "gpu-1"]))
    out = make_state(tmp_path, claims, files=DRIVER_FILES, missing="").prepare([ref])[ref.uid]
    assert "" == out.error
    assert [(f"k8s.{DRIVER}/claim={ref.uid}-gpu-0",), (f"k8s.{DRIVER}/claim={ref.uid}-gpu-1",)] == [
        d.cdi_device_ids for d in out.devices
    ]
    spec = spec_of(tmp_path, ref.uid)
    assert {"mounts": driver_mounts()} == spec["containerEdits"]
    assert all("mounts" not in d["containerEdits"] for d in spec["devices"])  # not once per device
    assert "LD_LIBRARY_PATH" not in json.dumps(spec)  # an image's own value is never replaced


def test_a_device_the_toolkit_lists_references_its_spec_and_mounts_nothing(tmp_path: Path) -> None:
    """Today's behaviour where the toolkit's spec is present, even when the driver's files were found too."""
    claims = Claims()
    ref = claims.add(allocated_claim(devices=["gpu-2"]))
    out = make_state(tmp_path, claims, toolkit=frozenset({GPUS[2].uuid}), files=DRIVER_FILES).prepare([ref])[ref.uid]
    assert (f"k8s.{DRIVER}/claim={ref.uid}-gpu-2", f"nvidia.com/gpu={GPUS[2].uuid}") == out.devices[0].cdi_device_ids
    assert "containerEdits" not in spec_of(tmp_path, ref.uid)


def test_a_claim_with_a_listed_and_an_unlisted_device_gets_both(tmp_path: Path) -> None:
    claims = Claims()
    ref = claims.add(allocated_claim(devices=["gpu-2", "gpu-3"]))
    out = make_state(tmp_path, claims, toolkit=frozenset({GPUS[2].uuid}), files=DRIVER_FILES).prepare([ref])[ref.uid]
    assert [2, 1] == [len(d.cdi_device_ids) for d in out.devices]
    assert {"mounts": driver_mounts()} == spec_of(tmp_path, ref.uid)["containerEdits"]


def test_without_either_source_the_claim_is_refused_with_the_message_and_nothing_is_written(tmp_path: Path) -> None:
    claims = Claims()
    ref = claims.add(allocated_claim(devices=["gpu-0"]))
    listed = claims.add(allocated_claim(name="listed", devices=["gpu-5"]))
    state = make_state(tmp_path, claims, toolkit=frozenset({GPUS[5].uuid}), missing=MISSING)
    out = state.prepare([ref, listed])
    assert MISSING == out[ref.uid].error and () == out[ref.uid].devices
    assert [] == sorted(p.name for p in (tmp_path / "cdi").iterdir() if ref.uid in p.name)
    assert ref.uid not in state.prepared_claims()
    # the toolkit's spec lists gpu-5: that claim is prepared as before
    assert "" == out[listed.uid].error and listed.uid in state.prepared_claims()
    assert f"nvidia.com/gpu={GPUS[5].uuid}" in out[listed.uid].devices[0].cdi_device_ids
    # asked again (the kubelet retries), the same answer and still nothing
    assert MISSING == state.prepare([ref])[ref.uid].error
    assert ref.uid not in state.prepared_claims()


def test_a_dynamic_mig_slice_without_a_driver_is_refused_before_it_is_carved(tmp_path: Path) -> None:
    """The toolkit's spec lists the parent GPU, not a slice carved later: refused, and no MIG instance, no MIG mode change."""
    claims = Claims()
    state = make_state(tmp_path, claims, toolkit=frozenset(g.uuid for g in GPUS), missing=MISSING, mig=True)
    name = next(n for n, t in state.targets.items() if carves(t))
    ref = claims.add(allocated_claim(devices=[name]))
    assert MISSING == state.prepare([ref])[ref.uid].error
    assert {} == dict(state.prepared_claims())
    assert [] == list((tmp_path / "cdi").iterdir())
    backend = make_mig_backend(fake=True, gpus=GPUS, state_dir=tmp_path / "sim", boot_id="boot-1")
    assert all(backend.instances(g) == [] and not backend.mode(g).current for g in GPUS)


@pytest.mark.parametrize("files", [DRIVER_FILES, None])
def test_a_dynamic_mig_slice_with_the_drivers_files_is_carved_and_gets_them(tmp_path: Path, files: DriverFiles | None) -> None:
    """With the files, the slice gets them; with no source required (fake GPUs, no --driver-root), it is prepared as before."""
    claims = Claims()
    state = make_state(tmp_path, claims, files=files, mig=True)
    name = next(n for n, t in state.targets.items() if carves(t))
    ref = claims.add(allocated_claim(devices=[name]))
    assert "" == state.prepare([ref])[ref.uid].error
    spec = spec_of(tmp_path, ref.uid)
    assert ({"mounts": driver_mounts()} if files else None) == spec.get("containerEdits")
