"""The NVML MIG backend, run against ``SimulatedNvml`` (never the real pynvml in tests).

What it checks: the catalog it reads through NVML equals the product data for every product; GIs at
every placement; NVML errors surface as the right ``MigError`` codes; the compute instance is the
full-size one (never the REV1 CI profile); MIG UUIDs resolve; destroy order; capability device
nodes; and that SimulatedNvml behaves like pynvml where the backend relies on it.
"""

from __future__ import annotations

import ctypes
import subprocess
import sys
import types
from pathlib import Path

import pytest

from dra_driver.core.gpu import GpuInfo
from dra_driver.core.mig import MigError, MigErrorCode, MigMode, Placement
from dra_driver.mig_backends.nvml import NvmlMigBackend
from dra_driver.mig_backends.sim import MigSimulator, NVMLError, SimulatedNvml, product_data
from dra_driver.mig_backends.sim import nvml_api as fn
from dra_driver.mig_backends.sim.rules import caps_minor
from dra_driver.sources.fake import FakeGpuSource

REPO = Path(__file__).resolve().parents[3]


def setup(
    profile: str = "h100x8", *, proc_root: Path | None = None
) -> tuple[NvmlMigBackend, MigSimulator, SimulatedNvml, GpuInfo]:
    gpus = FakeGpuSource(profile, "node-a").gpus()
    sim = MigSimulator(gpus, state_file=None, proc_root=proc_root)
    nvml = SimulatedNvml(sim)
    backend = NvmlMigBackend(nvml=nvml, proc_root=proc_root or Path("/nonexistent"))
    return backend, sim, nvml, gpus[0]


def on(backend: NvmlMigBackend, sim: MigSimulator, gpu: GpuInfo) -> None:
    sim.set_initial_mode(gpu.uuid, True)
    assert backend.mode(gpu).current


@pytest.mark.parametrize("profile", ["h100x8", "a100x8", "a100-80x8", "h200x8", "b200x8"])
def test_catalog_equals_the_product_data(profile: str) -> None:
    backend, _, _, gpu = setup(profile)
    data = product_data(gpu.product_name)
    assert data is not None
    assert backend.catalog(gpu) == data.mig_catalog()


def test_catalog_is_none_for_a_gpu_without_mig() -> None:
    backend, _, _, gpu = setup("l4x4")
    assert backend.catalog(gpu) is None


def test_catalog_works_with_mig_mode_off() -> None:
    backend, _, _, gpu = setup("h100x8")
    assert backend.mode(gpu) == MigMode(False, False)
    catalog = backend.catalog(gpu)
    assert catalog is not None and catalog.memory_slices == 8


def test_a_gi_can_be_created_at_every_placement_of_every_profile() -> None:
    backend, _, _, gpu = setup("h100x8")
    on(backend, backend_sim(backend), gpu)
    catalog = backend.catalog(gpu)
    assert catalog is not None
    for p in catalog.profiles:
        for pl in p.placements:
            gi = backend.create_gpu_instance(gpu, p.profile_id, pl.start)
            [inst] = backend.instances(gpu)
            assert (inst.gi_id, inst.profile_name, inst.placement, inst.ci_id) == (gi, p.name, pl, None)
            backend.destroy_gpu_instance(gpu, gi)
    assert backend.instances(gpu) == []


def backend_sim(backend: NvmlMigBackend) -> MigSimulator:
    nvml = backend._n
    assert isinstance(nvml, SimulatedNvml)
    return nvml.simulator


def test_occupied_placement_is_insufficient_resources() -> None:
    backend, sim, _, gpu = setup()
    on(backend, sim, gpu)
    backend.create_gpu_instance(gpu, 9, 0)
    with pytest.raises(MigError) as e:
        backend.create_gpu_instance(gpu, 14, 2)
    assert e.value.code == MigErrorCode.INSUFFICIENT_RESOURCES


def test_gi_with_mig_off_is_not_supported_and_bad_start_is_invalid() -> None:
    backend, sim, _, gpu = setup()
    with pytest.raises(MigError) as e:
        backend.create_gpu_instance(gpu, 19, 0)
    assert e.value.code == MigErrorCode.NOT_SUPPORTED
    on(backend, sim, gpu)
    with pytest.raises(MigError) as e:
        backend.create_gpu_instance(gpu, 14, 1)
    assert e.value.code == MigErrorCode.INVALID_ARGUMENT
    with pytest.raises(MigError) as e:
        backend.create_gpu_instance(gpu, 77, 0)
    assert e.value.code == MigErrorCode.INVALID_ARGUMENT


@pytest.mark.parametrize(("profile_id", "start"), [(19, 3), (20, 0), (15, 2), (14, 4), (9, 4), (5, 0), (0, 0)])
def test_compute_instance_is_full_size_with_a_resolvable_uuid(profile_id: int, start: int) -> None:
    backend, sim, nvml, gpu = setup()
    on(backend, sim, gpu)
    gi = backend.create_gpu_instance(gpu, profile_id, start)
    inst = backend.create_compute_instance(gpu, gi)
    assert inst.uuid is not None and inst.uuid.startswith("MIG-")
    state = sim.snapshot(gpu.uuid).gi(gi)
    assert state is not None
    [ci] = state.cis
    assert ci.slices == product_data(gpu.product_name).gi_by_id(profile_id).slices  # type: ignore[union-attr]
    assert ci.profile_id != fn.NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE_REV1
    assert backend.instances(gpu) == [inst]
    mig = nvml.nvmlDeviceGetHandleByUUID(inst.uuid)
    assert (nvml.nvmlDeviceGetGpuInstanceId(mig), nvml.nvmlDeviceGetComputeInstanceId(mig)) == (gi, inst.ci_id)
    assert nvml.nvmlDeviceGetUUID(nvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(mig)) == gpu.uuid


def test_destroy_order_cis_first_then_the_gi() -> None:
    backend, sim, _, gpu = setup()
    on(backend, sim, gpu)
    gi = backend.create_gpu_instance(gpu, 14, 0)
    backend.create_compute_instance(gpu, gi)
    with pytest.raises(MigError) as e:
        backend.destroy_gpu_instance(gpu, gi)
    assert e.value.code == MigErrorCode.IN_USE
    backend.destroy_compute_instances(gpu, gi)
    backend.destroy_compute_instances(gpu, gi)  # none left is fine
    backend.destroy_gpu_instance(gpu, gi)
    assert backend.instances(gpu) == []
    for call in (backend.destroy_gpu_instance, backend.destroy_compute_instances):
        with pytest.raises(MigError) as e:
            call(gpu, gi)
        assert e.value.code == MigErrorCode.NOT_FOUND


def test_busy_mig_device_makes_destroy_in_use() -> None:
    backend, sim, _, gpu = setup()
    on(backend, sim, gpu)
    gi = backend.create_gpu_instance(gpu, 19, 0)
    inst = backend.create_compute_instance(gpu, gi)
    assert inst.uuid is not None
    sim.mark_busy(inst.uuid)
    with pytest.raises(MigError) as e:
        backend.destroy_compute_instances(gpu, gi)
    assert e.value.code == MigErrorCode.IN_USE


def test_set_mode_on_hopper_and_reset_required_on_ampere() -> None:
    backend, _, _, gpu = setup("h100x8")
    backend.set_mode(gpu, True)
    assert backend.mode(gpu) == MigMode(True, True)
    ampere, _, _, a100 = setup("a100x8")
    with pytest.raises(MigError) as e:
        ampere.set_mode(a100, True)
    assert e.value.code == MigErrorCode.RESET_REQUIRED
    assert ampere.mode(a100) == MigMode(current=False, pending=True)


def test_hopper_disable_with_instances_is_in_use() -> None:
    backend, _, _, gpu = setup("h100x8")
    backend.set_mode(gpu, True)
    backend.create_gpu_instance(gpu, 19, 0)
    with pytest.raises(MigError) as e:
        backend.set_mode(gpu, False)
    assert e.value.code == MigErrorCode.IN_USE


def test_instances_reflect_changes_made_out_of_band() -> None:
    backend, sim, _, gpu = setup()
    on(backend, sim, gpu)
    gi = sim.create_gpu_instance(gpu.uuid, 5, 0)
    ci = sim.create_compute_instance(gpu.uuid, gi, 3)
    [inst] = backend.instances(gpu)
    assert (inst.profile_name, inst.placement, inst.ci_id, inst.uuid) == ("4g.40gb", Placement(0, 4), 0, ci.uuid)


def test_caps_device_nodes_come_from_procfs(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    backend, sim, _, _ = setup(proc_root=proc)
    gpu = sim.gpus[3]
    on(backend, sim, gpu)
    gi = backend.create_gpu_instance(gpu, 19, 2)
    inst = backend.create_compute_instance(gpu, gi)
    assert inst.ci_id is not None
    assert backend.caps_device_nodes(gpu, gi, inst.ci_id) == (
        f"/dev/nvidia-caps/nvidia-cap{caps_minor(3, gi)}",
        f"/dev/nvidia-caps/nvidia-cap{caps_minor(3, gi, inst.ci_id)}",
    )
    with pytest.raises(MigError) as e:
        backend.caps_device_nodes(gpu, gi + 1, 0)
    assert e.value.code == MigErrorCode.NOT_FOUND


def test_close_shuts_nvml_down_once() -> None:
    backend, _, nvml, gpu = setup()
    backend.close()
    backend.close()
    assert nvml.calls.count("nvmlShutdown") == 1
    with pytest.raises(NVMLError) as e:
        nvml.nvmlDeviceGetHandleByUUID(gpu.uuid)
    assert e.value.value == fn.NVML_ERROR_UNINITIALIZED


def test_device_handles_are_looked_up_once_per_gpu() -> None:
    backend, sim, nvml, gpu = setup()
    on(backend, sim, gpu)
    backend.catalog(gpu)
    backend.instances(gpu)
    backend.mode(gpu)
    assert nvml.calls.count("nvmlDeviceGetHandleByUUID") == 1


# --- SimulatedNvml behaves like pynvml -------------------------------------------------------


def test_calls_before_init_are_uninitialized() -> None:
    gpus = FakeGpuSource("h100x8", "n").gpus()
    nvml = SimulatedNvml(MigSimulator(gpus, state_file=None))
    with pytest.raises(NVMLError) as e:
        nvml.nvmlDeviceGetCount()
    assert e.value.value == fn.NVML_ERROR_UNINITIALIZED
    assert type(e.value).__name__ == "NVMLError_Uninitialized"
    assert isinstance(e.value, nvml.NVMLError_Uninitialized)


def test_possible_placements_c_style_count_query_and_insufficient_size() -> None:
    _, _, nvml, gpu = setup()
    h = nvml.nvmlDeviceGetHandleByUUID(gpu.uuid)
    count = ctypes.c_uint(0)
    assert nvml.nvmlDeviceGetGpuInstancePossiblePlacements(h, 19, None, ctypes.byref(count)) == fn.NVML_SUCCESS
    assert count.value == 7
    small = (fn.c_nvmlGpuInstancePlacement_t * 2)()
    count.value = 2
    with pytest.raises(NVMLError) as e:
        nvml.nvmlDeviceGetGpuInstancePossiblePlacements(h, 19, small, ctypes.byref(count))
    assert e.value.value == fn.NVML_ERROR_INSUFFICIENT_SIZE
    assert count.value == 7
    big = (fn.c_nvmlGpuInstancePlacement_t * 8)()
    count.value = 8
    nvml.nvmlDeviceGetGpuInstancePossiblePlacements(h, 15, big, ctypes.byref(count))
    assert [(big[i].start, big[i].size) for i in range(count.value)] == [(0, 2), (2, 2), (4, 2), (6, 2)]


def test_profile_info_v2_has_the_mig_name_as_str_and_unsupported_indices_fail() -> None:
    _, _, nvml, gpu = setup()
    h = nvml.nvmlDeviceGetHandleByUUID(gpu.uuid)
    info = nvml.nvmlDeviceGetGpuInstanceProfileInfo(h, fn.NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1)
    assert (info.name, info.id, info.ofaCount, info.version) == ("MIG 1g.10gb+me", 20, 1, fn.nvmlGpuInstanceProfileInfo_v2)
    with pytest.raises(NVMLError) as e:
        nvml.nvmlDeviceGetGpuInstanceProfileInfo(h, fn.NVML_GPU_INSTANCE_PROFILE_8_SLICE)
    assert e.value.value == fn.NVML_ERROR_NOT_SUPPORTED
    with pytest.raises(NVMLError) as e:
        nvml.nvmlDeviceGetGpuInstanceProfileInfo(h, fn.NVML_GPU_INSTANCE_PROFILE_COUNT)
    assert e.value.value == fn.NVML_ERROR_INVALID_ARGUMENT


def test_get_gpu_instances_needs_a_buffer_for_the_instance_count() -> None:
    backend, sim, nvml, gpu = setup()
    on(backend, sim, gpu)
    backend.create_gpu_instance(gpu, 19, 0)
    h = nvml.nvmlDeviceGetHandleByUUID(gpu.uuid)
    count = ctypes.c_uint(0)
    with pytest.raises(NVMLError) as e:
        nvml.nvmlDeviceGetGpuInstances(h, 19, (fn.c_nvmlGpuInstance_t * 3)(), ctypes.byref(count))
    assert e.value.value == fn.NVML_ERROR_INSUFFICIENT_SIZE
    array = (fn.c_nvmlGpuInstance_t * 7)()
    nvml.nvmlDeviceGetGpuInstances(h, 19, array, ctypes.byref(count))
    assert count.value == 1
    assert nvml.nvmlGpuInstanceGetInfo(array[0]).placement.start == 0


def test_stale_gi_handle_is_rejected_after_destroy() -> None:
    backend, sim, nvml, gpu = setup()
    on(backend, sim, gpu)
    gi_id = backend.create_gpu_instance(gpu, 19, 0)
    h = nvml.nvmlDeviceGetHandleByUUID(gpu.uuid)
    gi = nvml.nvmlDeviceGetGpuInstanceById(h, gi_id)
    nvml.nvmlGpuInstanceDestroy(gi)
    backend.create_gpu_instance(gpu, 19, 0)  # same id again, a different GI
    with pytest.raises(NVMLError) as e:
        nvml.nvmlGpuInstanceGetInfo(gi)
    assert e.value.value == fn.NVML_ERROR_INVALID_ARGUMENT


def test_mig_device_walk_and_is_mig_handle() -> None:
    backend, sim, nvml, gpu = setup()
    on(backend, sim, gpu)
    for start in (0, 1):
        backend.create_compute_instance(gpu, backend.create_gpu_instance(gpu, 19, start))
    h = nvml.nvmlDeviceGetHandleByUUID(gpu.uuid)
    assert nvml.nvmlDeviceGetMaxMigDeviceCount(h) == 7
    mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(h, 1)
    assert nvml.nvmlDeviceIsMigDeviceHandle(mig).value == 1
    assert nvml.nvmlDeviceIsMigDeviceHandle(h).value == 0
    with pytest.raises(NVMLError) as e:
        nvml.nvmlDeviceGetMigDeviceHandleByIndex(h, 2)
    assert e.value.value == fn.NVML_ERROR_NOT_FOUND
    assert nvml.nvmlDeviceGetName(mig) == "NVIDIA H100 80GB HBM3 MIG 1g.10gb"


# --- never the real pynvml -------------------------------------------------------------------


def test_backend_never_touches_the_real_pynvml(monkeypatch: pytest.MonkeyPatch) -> None:
    """With a tripwire installed as ``pynvml``, a full create/list/destroy cycle still works."""
    tripwire = types.ModuleType("pynvml")

    def boom(name: str) -> object:
        raise AssertionError(f"real pynvml touched: {name}")

    tripwire.__getattr__ = boom  # type: ignore[method-assign]
    monkeypatch.setitem(sys.modules, "pynvml", tripwire)
    backend, sim, _, gpu = setup()
    backend.set_mode(gpu, True)
    gi = backend.create_gpu_instance(gpu, 15, 6)
    backend.create_compute_instance(gpu, gi)
    assert len(backend.instances(gpu)) == 1
    backend.destroy_compute_instances(gpu, gi)
    backend.destroy_gpu_instance(gpu, gi)
    backend.close()
    assert sim.instances(gpu.uuid) == []


def test_migsim_does_not_import_pynvml() -> None:
    code = (
        "import sys, dra_driver.mig_backends.sim, dra_driver.mig_backends.sim.__main__; "
        "assert 'pynvml' not in sys.modules, 'pynvml imported'"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
