"""A faithful MIG simulator: the MIG state of a node's GPUs and NVML's rules for changing it.

Models MIG mode (current and pending; Ampere needs a reset, Hopper and newer apply at once), GPU
instances at explicit placements (placement, overlap, instance-count and engine-budget rules),
compute instances with MIG device UUIDs, per-operation latency, persistence that survives process
restarts but not reboots, and the procfs capability files the driver creates. Errors carry the NVML
return code real NVML gives.

Used through ``SimulatedNvml`` (``dra_driver.mig_backends.sim.fake_nvml``) by the NVML MIG backend in
tests and on fake-GPU nodes, and directly by the ``python -m dra_driver.mig_backends.sim`` CLI. The
fixed rules (return codes, errors, latencies, capability minors, the engine budget) are in
``dra_driver.mig_backends.sim.rules``.
"""

from __future__ import annotations

import copy
import shutil
import threading
import time
import uuid as uuidlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from dra_driver.core.gpu import GpuInfo
from dra_driver.core.mig import MigInstance, MigMode, MigProfile, Placement
from dra_driver.mig_backends.sim.catalog import CiProfileData, ProductData, product_data
from dra_driver.mig_backends.sim.rules import OPS, ZERO_LATENCY, Latency, NvmlCode, SimError, caps_minor, engine_budget_holds
from dra_driver.mig_backends.sim.state import (
    CiState,
    GiState,
    GpuState,
    NodeState,
    instances_of,
    read_state,
    state_lock,
    write_state,
)

_MIG_UUID_NAMESPACE = uuidlib.UUID("3b0c5a52-6f0e-4c36-9d0b-7a2f1e5c9d41")
_CAP_FILE_MODE = 0o444  # DeviceFileMode as the driver prints it (292)


class MigSimulator:
    """The MIG state of one node's GPUs, keyed by GPU uuid, with NVML's rules.

    ``state_file``: persist there (shared by every process using the same file, under a flock).
    ``boot_id``: when it differs from the stored one, the node rebooted: instances are gone and pending
    MIG modes become current. An empty boot id means "unknown" and never counts as a reboot.
    ``proc_root``: write the MIG capability files there (``<proc_root>/driver/nvidia/capabilities``).
    """

    def __init__(
        self,
        gpus: list[GpuInfo],
        *,
        state_file: Path | None,
        boot_id: str = "",
        latency: Latency = ZERO_LATENCY,
        proc_root: Path | None = None,
    ) -> None:
        self._gpus = {g.uuid: g for g in gpus}
        self._products: dict[str, ProductData | None] = {
            g.uuid: product_data(g.product_name) if g.mig_capable else None for g in gpus
        }
        self._state_file = state_file
        self._lock_path = state_file.with_name(state_file.name + ".lock") if state_file else None
        self._boot_id = boot_id
        self._latency = latency
        self._proc_root = proc_root
        self._mutex = threading.RLock()
        self._failures: dict[str, NvmlCode] = {}
        self._state = NodeState(boot_id=boot_id)
        self._synced: tuple[int, int] | None = None  # state file (mtime_ns, size) the procfs tree matches
        with self._txn(write=True):
            pass

    # --- state plumbing ---------------------------------------------------------------------

    @contextmanager
    def _txn(self, *, write: bool) -> Iterator[NodeState]:
        """The current state; with ``write`` it is stored when the body succeeds (re-read first)."""
        with self._mutex:
            if self._state_file is None or self._lock_path is None:
                changed = self._adopt(self._state)
                try:
                    yield self._state
                finally:
                    if write or changed:
                        self._sync_proc(self._state)
                return
            with state_lock(self._lock_path):
                state = read_state(self._state_file)
                changed = self._adopt(state)
                yield state
                if write or changed:
                    write_state(self._state_file, state)
                self._state = state
                # The procfs tree follows the state file; re-sync only when the file changed
                # (here or in another process sharing it), not on every read.
                st = self._state_file.stat() if self._state_file.exists() else None
                key = (st.st_mtime_ns, st.st_size) if st else None
                if key is None or key != self._synced:
                    self._sync_proc(state)
                    self._synced = key

    def _adopt(self, state: NodeState) -> bool:
        """Add this simulator's GPUs to ``state`` and apply a reboot; True when that changed it."""
        changed = False
        for g in self._gpus.values():
            if g.uuid not in state.gpus:
                state.gpus[g.uuid] = GpuState(uuid=g.uuid, minor=g.minor)
                changed = True
        if self._boot_id and state.boot_id != self._boot_id:
            # A reboot: MIG mode survives (pending becomes current), instances do not.
            for gpu in state.gpus.values():
                gpu.gis = []
                gpu.mode_current = gpu.mode_pending
            state.boot_id = self._boot_id
            changed = True
        return changed

    def _gpu_state(self, state: NodeState, uuid: str) -> GpuState:
        if uuid not in self._gpus:
            raise SimError(NvmlCode.NOT_FOUND, f"no GPU {uuid}")
        return state.gpus[uuid]

    def _mig_product(self, uuid: str) -> ProductData:
        if uuid not in self._gpus:
            raise SimError(NvmlCode.NOT_FOUND, f"no GPU {uuid}")
        product = self._products[uuid]
        if product is None:
            raise SimError(NvmlCode.NOT_SUPPORTED, f"GPU {uuid} ({self._gpus[uuid].product_name}) is not MIG capable")
        return product

    def _maybe_fail(self, op: str) -> None:
        code = self._failures.pop(op, None)
        if code is not None:
            raise SimError(code, f"{op}: injected failure")

    def _sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)

    # --- procfs ---------------------------------------------------------------------------------

    def _sync_proc(self, state: NodeState) -> None:
        """Make ``<proc_root>/driver/nvidia/capabilities/gpu<m>/mig`` match the instances in ``state``.

        The driver creates these files with each GI and CI and removes them with it; syncing after
        every operation also covers instances made by another process sharing the state file.
        """
        if self._proc_root is None:
            return
        caps = self._proc_root / "driver" / "nvidia" / "capabilities"
        for gpu in state.gpus.values():
            mig_dir = caps / f"gpu{gpu.minor}" / "mig"
            wanted: dict[Path, int] = {}
            for gi in gpu.gis:
                wanted[mig_dir / f"gi{gi.gi_id}" / "access"] = caps_minor(gpu.minor, gi.gi_id)
                for ci in gi.cis:
                    wanted[mig_dir / f"gi{gi.gi_id}" / f"ci{ci.ci_id}" / "access"] = caps_minor(gpu.minor, gi.gi_id, ci.ci_id)
            if mig_dir.is_dir():
                for present in sorted(mig_dir.glob("gi*/**/access"), key=lambda p: len(p.parts), reverse=True):
                    if present not in wanted:
                        shutil.rmtree(present.parent, ignore_errors=True)
            for path, minor in wanted.items():
                text = f"DeviceFileMinor: {minor}\nDeviceFileMode: {_CAP_FILE_MODE}\nDeviceFileModify: 1\n"
                if not path.is_file() or path.read_text() != text:
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.write_text(text)

    # --- queries --------------------------------------------------------------------------------

    @property
    def gpus(self) -> list[GpuInfo]:
        """The simulated GPUs, ordered by minor number."""
        return sorted(self._gpus.values(), key=lambda g: g.minor)

    def product(self, uuid: str) -> ProductData | None:
        """The MIG data of a GPU; None when it is not MIG capable. NOT_FOUND for an unknown uuid."""
        if uuid not in self._gpus:
            raise SimError(NvmlCode.NOT_FOUND, f"no GPU {uuid}")
        return self._products[uuid]

    def snapshot(self, uuid: str) -> GpuState:
        """A copy of one GPU's current state (re-read from the state file)."""
        with self._txn(write=False) as state:
            return copy.deepcopy(self._gpu_state(state, uuid))

    def mode(self, uuid: str) -> MigMode:
        """The GPU's MIG mode; NOT_SUPPORTED when it is not MIG capable."""
        self._mig_product(uuid)
        gpu = self.snapshot(uuid)
        return MigMode(current=gpu.mode_current, pending=gpu.mode_pending)

    def instances(self, uuid: str) -> list[MigInstance]:
        """The GPU's GPU instances with their (lowest) CI and MIG UUID."""
        return instances_of(self.snapshot(uuid))

    def possible_placements(self, uuid: str, profile_id: int) -> tuple[Placement, ...]:
        """Every placement of the profile, occupied or not (as NVML documents)."""
        profile = self._mig_product(uuid).gi_by_id(profile_id)
        if profile is None:
            raise SimError(NvmlCode.INVALID_ARGUMENT, f"no GPU instance profile id {profile_id}")
        return profile.placements

    # --- MIG mode -------------------------------------------------------------------------------

    def set_initial_mode(self, uuid: str, enabled: bool) -> None:
        """Set the mode as it was at boot (current and pending), as if configured before this boot."""
        self._mig_product(uuid)
        with self._txn(write=True) as state:
            gpu = self._gpu_state(state, uuid)
            if not enabled and gpu.gis:
                raise SimError(NvmlCode.IN_USE, f"GPU {uuid} still has GPU instances")
            gpu.mode_current = gpu.mode_pending = enabled

    def set_mig_mode(self, uuid: str, enabled: bool) -> NvmlCode:
        """Set MIG mode; return NVML's activation status (RESET_REQUIRED on Ampere when it changes)."""
        with self._mutex:
            self._maybe_fail("set_mode")
            self._mig_product(uuid)
            with self._txn(write=True) as state:
                gpu = self._gpu_state(state, uuid)
                if self._gpus[uuid].architecture == "Ampere":
                    # The pending mode is written; it becomes current only at a GPU reset or reboot.
                    self._sleep(self._latency.set_mode)
                    gpu.mode_pending = enabled
                    return NvmlCode.SUCCESS if gpu.mode_pending == gpu.mode_current else NvmlCode.RESET_REQUIRED
                if not enabled and gpu.gis:
                    raise SimError(NvmlCode.IN_USE, f"GPU {uuid} still has GPU instances")
                self._sleep(self._latency.set_mode)
                gpu.mode_current = gpu.mode_pending = enabled
                return NvmlCode.SUCCESS

    # --- GPU instances --------------------------------------------------------------------------

    def create_gpu_instance(self, uuid: str, profile_id: int, start: int, size: int | None = None) -> int:
        """Create a GI of ``profile_id`` at exactly ``start`` (and ``size``); return its GI id.

        GI ids are the lowest unused id from 1. Real NVML derives them from the profile and placement
        (seven 1g instances get ids such as 7..13); nothing may rely on either scheme.
        """
        with self._mutex:
            self._maybe_fail("create_gi")
            product = self._mig_product(uuid)
            profile = product.gi_by_id(profile_id)
            if profile is None:
                raise SimError(NvmlCode.INVALID_ARGUMENT, f"no GPU instance profile id {profile_id}")
            wanted = Placement(start, profile.placements[0].size if size is None else size)
            if wanted not in profile.placements:
                raise SimError(NvmlCode.INVALID_ARGUMENT, f"{wanted} is not a placement of {profile.name}")
            with self._txn(write=True) as state:
                gpu = self._gpu_state(state, uuid)
                if not gpu.mode_current:
                    # nvml.h: NVML_ERROR_NOT_SUPPORTED "if device doesn't have MIG mode enabled".
                    raise SimError(NvmlCode.NOT_SUPPORTED, f"MIG mode is off on {uuid}")
                for gi in gpu.gis:
                    if Placement(gi.start, gi.size).overlaps(wanted):
                        raise SimError(NvmlCode.INSUFFICIENT_RESOURCES, f"{wanted} overlaps GPU instance {gi.gi_id}")
                existing = [product.gi_by_id(gi.profile_id) for gi in gpu.gis]
                present = [p for p in existing if p is not None]
                if sum(1 for p in present if p.profile_id == profile_id) >= profile.instance_count:
                    raise SimError(NvmlCode.INSUFFICIENT_RESOURCES, f"no {profile.name} instance left")
                if not engine_budget_holds(product, [*present, profile]):
                    raise SimError(NvmlCode.INSUFFICIENT_RESOURCES, f"not enough engines left for {profile.name}")
                used = {gi.gi_id for gi in gpu.gis}
                gi_id = next(i for i in range(1, len(used) + 2) if i not in used)
                self._sleep(self._latency.create_gi)
                state.creations += 1
                gpu.gis.append(GiState(gi_id, profile_id, profile.name, wanted.start, wanted.size, state.creations))
                return gi_id

    def destroy_gpu_instance(self, uuid: str, gi_id: int) -> None:
        """Destroy a GI; IN_USE while it has compute instances, NOT_FOUND when it does not exist."""
        with self._mutex:
            self._maybe_fail("destroy_gi")
            self._mig_product(uuid)
            with self._txn(write=True) as state:
                gpu = self._gpu_state(state, uuid)
                gi = gpu.gi(gi_id)
                if gi is None:
                    raise SimError(NvmlCode.NOT_FOUND, f"no GPU instance {gi_id} on {uuid}")
                if gi.cis:
                    raise SimError(NvmlCode.IN_USE, f"GPU instance {gi_id} still has compute instances")
                self._sleep(self._latency.destroy_gi)
                gpu.gis.remove(gi)

    # --- compute instances ----------------------------------------------------------------------

    def ci_profiles(self, uuid: str, gi_id: int) -> tuple[MigProfile, tuple[CiProfileData, ...]]:
        """The GI's profile and the CI profiles offered inside it."""
        product = self._mig_product(uuid)
        gi = self.snapshot(uuid).gi(gi_id)
        if gi is None:
            raise SimError(NvmlCode.NOT_FOUND, f"no GPU instance {gi_id} on {uuid}")
        profile = product.gi_by_id(gi.profile_id)
        if profile is None:
            raise SimError(NvmlCode.UNKNOWN, f"GPU instance {gi_id} has an unknown profile")
        return profile, product.ci_profiles_for(profile)

    def create_compute_instance(self, uuid: str, gi_id: int, ci_profile_id: int) -> CiState:
        """Create a CI of ``ci_profile_id`` in a GI; return it with its new MIG device UUID."""
        with self._mutex:
            self._maybe_fail("create_ci")
            product = self._mig_product(uuid)
            with self._txn(write=True) as state:
                gpu = self._gpu_state(state, uuid)
                gi = gpu.gi(gi_id)
                if gi is None:
                    raise SimError(NvmlCode.NOT_FOUND, f"no GPU instance {gi_id} on {uuid}")
                gi_profile = product.gi_by_id(gi.profile_id)
                offered = product.ci_profiles_for(gi_profile) if gi_profile else ()
                ci_profile = next((c for c in offered if c.profile_id == ci_profile_id), None)
                if gi_profile is None or ci_profile is None:
                    raise SimError(NvmlCode.INVALID_ARGUMENT, f"CI profile {ci_profile_id} is not offered in GI {gi_id}")
                if not ci_profile.creatable:
                    raise SimError(NvmlCode.NOT_SUPPORTED, f"CI profile {ci_profile_id} cannot be created in GI {gi_id}")
                if sum(1 for c in gi.cis if c.profile_id == ci_profile_id) >= ci_profile.instance_count:
                    raise SimError(NvmlCode.INSUFFICIENT_RESOURCES, f"no CI of profile {ci_profile_id} left in GI {gi_id}")
                start = self._free_compute_start(gi, gi_profile, ci_profile)
                if start is None:
                    raise SimError(NvmlCode.INSUFFICIENT_RESOURCES, f"no compute slices left in GI {gi_id}")
                used = {c.ci_id for c in gi.cis}
                ci_id = next(i for i in range(len(used) + 1) if i not in used)
                self._sleep(self._latency.create_ci)
                state.creations += 1
                # A new MIG device UUID on every creation, like real hardware; derived, so reproducible.
                mig_uuid = f"MIG-{uuidlib.uuid5(_MIG_UUID_NAMESPACE, f'{uuid}/{gi_id}/{ci_id}/{state.creations}')}"
                ci = CiState(ci_id, ci_profile_id, start, ci_profile.slices, mig_uuid)
                gi.cis.append(ci)
                return copy.deepcopy(ci)

    @staticmethod
    def _free_compute_start(gi: GiState, gi_profile: MigProfile, ci: CiProfileData) -> int | None:
        taken = [Placement(c.start, c.slices) for c in gi.cis]
        starts: list[int] = sorted({*range(0, gi_profile.slices - ci.slices + 1, ci.slices), gi_profile.slices - ci.slices})
        for s in starts:
            if not any(Placement(s, ci.slices).overlaps(t) for t in taken):
                return s
        return None

    def destroy_compute_instance(self, uuid: str, gi_id: int, ci_id: int) -> None:
        """Destroy a CI; IN_USE while a process uses its MIG device, NOT_FOUND when absent."""
        with self._mutex:
            self._maybe_fail("destroy_ci")
            self._mig_product(uuid)
            with self._txn(write=True) as state:
                gpu = self._gpu_state(state, uuid)
                gi = gpu.gi(gi_id)
                ci = next((c for c in gi.cis if c.ci_id == ci_id), None) if gi else None
                if gi is None or ci is None:
                    raise SimError(NvmlCode.NOT_FOUND, f"no compute instance {ci_id} in GPU instance {gi_id} on {uuid}")
                if ci.busy:
                    raise SimError(NvmlCode.IN_USE, f"MIG device {ci.uuid} is in use")
                self._sleep(self._latency.destroy_ci)
                gi.cis.remove(ci)

    # --- test hooks -----------------------------------------------------------------------------

    def mark_busy(self, mig_uuid: str, busy: bool = True) -> None:
        """Mark a MIG device used by a process (destroying its CI then fails with IN_USE), or free it."""
        with self._txn(write=True) as state:
            for gpu in state.gpus.values():
                for gi in gpu.gis:
                    for ci in gi.cis:
                        if ci.uuid == mig_uuid:
                            ci.busy = busy
                            return
            raise SimError(NvmlCode.NOT_FOUND, f"no MIG device {mig_uuid}")

    def fail_next(self, op: str, code: NvmlCode) -> None:
        """Make the next ``op`` (one of ``OPS``) of this simulator object fail with ``code``."""
        if op not in OPS:
            raise ValueError(f"unknown MIG operation {op!r}; known: {', '.join(OPS)}")
        with self._mutex:
            self._failures[op] = code
