"""``SimulatedNvml``: the pynvml subset the NVML MIG backend uses, answered by the MIG simulator.

Same names, call signatures, return shapes and errors as nvidia-ml-py 13.x's ``pynvml``: ``NVMLError``
with ``.value`` (and a subclass per code), the ``NVML_*`` constants, ctypes structures with pynvml's
field names (defined here; only the NVML adapters import pynvml), handles that are ctypes pointers,
and the C-style calls that fill a caller's ctypes array and a ``byref(c_uint)`` count. Every call
before ``nvmlInit`` fails with ``NVML_ERROR_UNINITIALIZED``.

Passed as ``nvml=`` to ``dra_driver.sources.nvml_mig.NvmlMigBackend`` by tests and by fake-GPU
nodes; the state behind it is a ``MigSimulator`` (``dra_driver.sources.migsim.simulator``).
"""

# pynvml's names (camelCase functions, arguments and ctypes types) are the interface being reproduced.
# ruff: noqa: N801, N802, N803, N815, N816

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

from dra_driver.core.mig import Placement
from dra_driver.sources.migsim.catalog import CI_PROFILE_1_SLICE_REV1
from dra_driver.sources.migsim.simulator import MigSimulator, NvmlCode, SimError

# --- constants (values as in pynvml / nvml.h) ----------------------------------------------------

NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_ALREADY_INITIALIZED = 5
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_INSUFFICIENT_SIZE = 7
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_RESET_REQUIRED = 16
NVML_ERROR_IN_USE = 19
NVML_ERROR_INSUFFICIENT_RESOURCES = 23
NVML_ERROR_UNKNOWN = 999

NVML_DEVICE_MIG_DISABLE = 0x0
NVML_DEVICE_MIG_ENABLE = 0x1

NVML_GPU_INSTANCE_PROFILE_1_SLICE = 0x0
NVML_GPU_INSTANCE_PROFILE_2_SLICE = 0x1
NVML_GPU_INSTANCE_PROFILE_3_SLICE = 0x2
NVML_GPU_INSTANCE_PROFILE_4_SLICE = 0x3
NVML_GPU_INSTANCE_PROFILE_7_SLICE = 0x4
NVML_GPU_INSTANCE_PROFILE_8_SLICE = 0x5
NVML_GPU_INSTANCE_PROFILE_6_SLICE = 0x6
NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1 = 0x7
NVML_GPU_INSTANCE_PROFILE_2_SLICE_REV1 = 0x8
NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2 = 0x9
NVML_GPU_INSTANCE_PROFILE_COUNT = 0x12

NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE = 0x0
NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE = 0x1
NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE = 0x2
NVML_COMPUTE_INSTANCE_PROFILE_4_SLICE = 0x3
NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE = 0x4
NVML_COMPUTE_INSTANCE_PROFILE_8_SLICE = 0x5
NVML_COMPUTE_INSTANCE_PROFILE_6_SLICE = 0x6
NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE_REV1 = 0x7
NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE_NVL = 0x8
NVML_COMPUTE_INSTANCE_PROFILE_COUNT = 0x9

NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED = 0x0
NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_COUNT = 0x1

NVML_DEVICE_NAME_V2_BUFFER_SIZE = 96
nvmlGpuInstanceProfileInfo_v2 = 0x02000098
nvmlComputeInstanceProfileInfo_v2 = 0x02000088

_ERROR_STRINGS = {
    NVML_ERROR_UNINITIALIZED: "Uninitialized",
    NVML_ERROR_INVALID_ARGUMENT: "Invalid Argument",
    NVML_ERROR_NOT_SUPPORTED: "Not Supported",
    NVML_ERROR_NO_PERMISSION: "Insufficient Permissions",
    NVML_ERROR_ALREADY_INITIALIZED: "Already Initialized",
    NVML_ERROR_NOT_FOUND: "Not Found",
    NVML_ERROR_INSUFFICIENT_SIZE: "Insufficient Size",
    NVML_ERROR_FUNCTION_NOT_FOUND: "Function Not Found",
    NVML_ERROR_RESET_REQUIRED: "GPU requires restart",
    NVML_ERROR_IN_USE: "In use by another client",
    NVML_ERROR_INSUFFICIENT_RESOURCES: "Insufficient Resources",
    NVML_ERROR_UNKNOWN: "Unknown Error",
}

_ERROR_CLASS_NAMES = {
    NVML_ERROR_UNINITIALIZED: "NVMLError_Uninitialized",
    NVML_ERROR_INVALID_ARGUMENT: "NVMLError_InvalidArgument",
    NVML_ERROR_NOT_SUPPORTED: "NVMLError_NotSupported",
    NVML_ERROR_NO_PERMISSION: "NVMLError_NoPermission",
    NVML_ERROR_ALREADY_INITIALIZED: "NVMLError_AlreadyInitialized",
    NVML_ERROR_NOT_FOUND: "NVMLError_NotFound",
    NVML_ERROR_INSUFFICIENT_SIZE: "NVMLError_InsufficientSize",
    NVML_ERROR_FUNCTION_NOT_FOUND: "NVMLError_FunctionNotFound",
    NVML_ERROR_RESET_REQUIRED: "NVMLError_ResetRequired",
    NVML_ERROR_IN_USE: "NVMLError_InUse",
    NVML_ERROR_INSUFFICIENT_RESOURCES: "NVMLError_InsufficientResources",
    NVML_ERROR_UNKNOWN: "NVMLError_Unknown",
}


class NVMLError(Exception):
    """An NVML failure; ``value`` is the NVML return code. ``NVMLError(code)`` builds the code's subclass."""

    value: int
    _by_code: ClassVar[dict[int, type[NVMLError]]] = {}

    def __new__(cls, value: int) -> NVMLError:  # noqa: D102 - see the class docstring
        target = cls._by_code.get(value, cls) if cls is NVMLError else cls
        obj = Exception.__new__(target)
        obj.value = value
        return obj

    def __init__(self, value: int) -> None:
        super().__init__(value)

    def __str__(self) -> str:
        return _ERROR_STRINGS.get(self.value, f"NVML Error with code {self.value}")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, NVMLError) and self.value == other.value

    def __hash__(self) -> int:
        return hash(self.value)


def _make_error_class(code: int, name: str) -> type[NVMLError]:
    def new(cls: type[NVMLError], *_args: Any) -> NVMLError:
        return NVMLError.__new__(NVMLError, code)

    return type(name, (NVMLError,), {"__new__": new, "__init__": lambda self, *_a: Exception.__init__(self, code)})


for _code, _name in _ERROR_CLASS_NAMES.items():
    NVMLError._by_code[_code] = _make_error_class(_code, _name)


def nvmlErrorString(result: int) -> str:
    """The text NVML gives for a return code."""
    return _ERROR_STRINGS.get(result, "Unknown Error")


# --- ctypes structures (field names as in pynvml) ------------------------------------------------


class _PrintableStructure(ctypes.Structure):
    """A structure whose char-array fields read back as ``str`` (pynvml's behaviour)."""

    def __getattribute__(self, name: str) -> Any:
        value = super().__getattribute__(name)
        return value.decode() if isinstance(value, bytes) else value

    def __setattr__(self, name: str, value: Any) -> None:
        super().__setattr__(name, value.encode() if isinstance(value, str) else value)


class struct_c_nvmlDevice_t(ctypes.Structure):
    """Opaque device."""


class struct_c_nvmlGpuInstance_t(ctypes.Structure):
    """Opaque GPU instance."""


class struct_c_nvmlComputeInstance_t(ctypes.Structure):
    """Opaque compute instance."""


c_nvmlDevice_t = ctypes.POINTER(struct_c_nvmlDevice_t)
c_nvmlGpuInstance_t = ctypes.POINTER(struct_c_nvmlGpuInstance_t)
c_nvmlComputeInstance_t = ctypes.POINTER(struct_c_nvmlComputeInstance_t)


class c_nvmlGpuInstancePlacement_t(ctypes.Structure):
    """A GI placement in memory slices."""

    _fields_ = [("start", ctypes.c_uint), ("size", ctypes.c_uint)]


class c_nvmlGpuInstanceProfileInfo_t(ctypes.Structure):
    """GI profile info, version 1."""

    _fields_ = [
        ("id", ctypes.c_uint),
        ("isP2pSupported", ctypes.c_uint),
        ("sliceCount", ctypes.c_uint),
        ("instanceCount", ctypes.c_uint),
        ("multiprocessorCount", ctypes.c_uint),
        ("copyEngineCount", ctypes.c_uint),
        ("decoderCount", ctypes.c_uint),
        ("encoderCount", ctypes.c_uint),
        ("jpegCount", ctypes.c_uint),
        ("ofaCount", ctypes.c_uint),
        ("memorySizeMB", ctypes.c_ulonglong),
    ]


class c_nvmlGpuInstanceProfileInfo_v2_t(_PrintableStructure):
    """GI profile info, version 2 (with the profile name)."""

    _fields_ = [
        ("version", ctypes.c_uint),
        ("id", ctypes.c_uint),
        ("isP2pSupported", ctypes.c_uint),
        ("sliceCount", ctypes.c_uint),
        ("instanceCount", ctypes.c_uint),
        ("multiprocessorCount", ctypes.c_uint),
        ("copyEngineCount", ctypes.c_uint),
        ("decoderCount", ctypes.c_uint),
        ("encoderCount", ctypes.c_uint),
        ("jpegCount", ctypes.c_uint),
        ("ofaCount", ctypes.c_uint),
        ("memorySizeMB", ctypes.c_ulonglong),
        ("name", ctypes.c_char * NVML_DEVICE_NAME_V2_BUFFER_SIZE),
    ]

    def __init__(self) -> None:
        super().__init__(version=nvmlGpuInstanceProfileInfo_v2)


class c_nvmlGpuInstanceInfo_t(ctypes.Structure):
    """A GI: its device, id, profile id and placement."""

    _fields_ = [
        ("device", c_nvmlDevice_t),
        ("id", ctypes.c_uint),
        ("profileId", ctypes.c_uint),
        ("placement", c_nvmlGpuInstancePlacement_t),
    ]


class c_nvmlComputeInstancePlacement_t(ctypes.Structure):
    """A CI placement in compute slices of its GI."""

    _fields_ = [("start", ctypes.c_uint), ("size", ctypes.c_uint)]


class c_nvmlComputeInstanceProfileInfo_t(ctypes.Structure):
    """CI profile info, version 1."""

    _fields_ = [
        ("id", ctypes.c_uint),
        ("sliceCount", ctypes.c_uint),
        ("instanceCount", ctypes.c_uint),
        ("multiprocessorCount", ctypes.c_uint),
        ("sharedCopyEngineCount", ctypes.c_uint),
        ("sharedDecoderCount", ctypes.c_uint),
        ("sharedEncoderCount", ctypes.c_uint),
        ("sharedJpegCount", ctypes.c_uint),
        ("sharedOfaCount", ctypes.c_uint),
    ]


class c_nvmlComputeInstanceProfileInfo_v2_t(_PrintableStructure):
    """CI profile info, version 2 (with the profile name)."""

    _fields_ = [
        ("version", ctypes.c_uint),
        ("id", ctypes.c_uint),
        ("sliceCount", ctypes.c_uint),
        ("instanceCount", ctypes.c_uint),
        ("multiprocessorCount", ctypes.c_uint),
        ("sharedCopyEngineCount", ctypes.c_uint),
        ("sharedDecoderCount", ctypes.c_uint),
        ("sharedEncoderCount", ctypes.c_uint),
        ("sharedJpegCount", ctypes.c_uint),
        ("sharedOfaCount", ctypes.c_uint),
        ("name", ctypes.c_char * NVML_DEVICE_NAME_V2_BUFFER_SIZE),
    ]

    def __init__(self) -> None:
        super().__init__(version=nvmlComputeInstanceProfileInfo_v2)


class c_nvmlComputeInstanceInfo_t(ctypes.Structure):
    """A CI: its MIG device, GI, id, profile id and placement."""

    _fields_ = [
        ("device", c_nvmlDevice_t),
        ("gpuInstance", c_nvmlGpuInstance_t),
        ("id", ctypes.c_uint),
        ("profileId", ctypes.c_uint),
        ("placement", c_nvmlComputeInstancePlacement_t),
    ]


# --- handles ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Gpu:
    uuid: str


@dataclass(frozen=True, slots=True)
class _MigDevice:
    uuid: str
    gi_id: int
    ci_id: int
    mig_uuid: str


@dataclass(frozen=True, slots=True)
class _Gi:
    uuid: str
    gi_id: int
    serial: int


@dataclass(frozen=True, slots=True)
class _Ci:
    uuid: str
    gi_id: int
    gi_serial: int
    ci_id: int
    mig_uuid: str


_Target = _Gpu | _MigDevice | _Gi | _Ci
_T = TypeVar("_T")
_TOKEN_BASE = 0x5100_0000


def _deref(ref: Any) -> Any:
    """The ctypes object behind ``byref(x)``, ``pointer(x)`` or ``x`` itself."""
    obj = getattr(ref, "_obj", None)
    if obj is not None:
        return obj
    if isinstance(ref, ctypes._Pointer):
        return ref.contents
    return ref


class SimulatedNvml:
    """An object answering like the ``pynvml`` module for the GPUs of a ``MigSimulator``."""

    NVMLError = NVMLError
    c_nvmlDevice_t = c_nvmlDevice_t
    c_nvmlGpuInstance_t = c_nvmlGpuInstance_t
    c_nvmlComputeInstance_t = c_nvmlComputeInstance_t
    c_nvmlGpuInstancePlacement_t = c_nvmlGpuInstancePlacement_t
    c_nvmlGpuInstanceProfileInfo_t = c_nvmlGpuInstanceProfileInfo_t
    c_nvmlGpuInstanceProfileInfo_v2_t = c_nvmlGpuInstanceProfileInfo_v2_t
    c_nvmlGpuInstanceInfo_t = c_nvmlGpuInstanceInfo_t
    c_nvmlComputeInstancePlacement_t = c_nvmlComputeInstancePlacement_t
    c_nvmlComputeInstanceProfileInfo_t = c_nvmlComputeInstanceProfileInfo_t
    c_nvmlComputeInstanceProfileInfo_v2_t = c_nvmlComputeInstanceProfileInfo_v2_t
    c_nvmlComputeInstanceInfo_t = c_nvmlComputeInstanceInfo_t

    def __init__(self, simulator: MigSimulator) -> None:
        self.simulator = simulator
        self._lock = threading.RLock()
        self._refcount = 0
        self._tokens: dict[_Target, int] = {}
        self._targets: dict[int, _Target] = {}
        self.calls: list[str] = []
        """Names of the NVML functions called, in order (for tests)."""

    def __getattr__(self, name: str) -> Any:
        # The NVML_* constants of this module, like pynvml's module attributes.
        if name.startswith(("NVML_", "nvmlGpuInstanceProfileInfo_v", "nvmlComputeInstanceProfileInfo_v")):
            value = globals().get(name)
            if value is not None:
                return value
        if name.startswith("NVMLError_"):
            for cls in NVMLError._by_code.values():
                if cls.__name__ == name:
                    return cls
        raise AttributeError(name)

    # --- plumbing ------------------------------------------------------------------------------

    def _enter(self, name: str) -> None:
        self.calls.append(name)
        if self._refcount == 0:
            raise NVMLError(NVML_ERROR_UNINITIALIZED)

    def _handle(self, target: _Target, kind: Any) -> Any:
        with self._lock:
            token = self._tokens.get(target)
            if token is None:
                token = _TOKEN_BASE + 16 * len(self._tokens)
                self._tokens[target] = token
                self._targets[token] = target
        return ctypes.cast(ctypes.c_void_p(token), kind)

    def _target(self, handle: Any, kind: type[_T]) -> _T:
        try:
            token = ctypes.cast(handle, ctypes.c_void_p).value
        except ctypes.ArgumentError:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT) from None
        target = self._targets.get(token or 0)
        if not isinstance(target, kind):
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return target

    def _sim(self, fn: Callable[[], _T]) -> _T:
        try:
            return fn()
        except SimError as err:
            raise NVMLError(int(err.code)) from err

    def _gi_state(self, gi: _Gi) -> Any:
        state = self._sim(lambda: self.simulator.snapshot(gi.uuid))
        found = state.gi(gi.gi_id)
        if found is None or found.serial != gi.serial:
            # The GI behind this handle was destroyed: the handle is dangling.
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return found

    def _gpu_handle(self, uuid: str) -> Any:
        return self._handle(_Gpu(uuid), c_nvmlDevice_t)

    def _mig_devices(self, uuid: str) -> list[_MigDevice]:
        state = self._sim(lambda: self.simulator.snapshot(uuid))
        if not state.mode_current:
            return []
        return [
            _MigDevice(uuid, gi.gi_id, ci.ci_id, ci.uuid)
            for gi in sorted(state.gis, key=lambda g: g.gi_id)
            for ci in sorted(gi.cis, key=lambda c: c.ci_id)
        ]

    # --- init ------------------------------------------------------------------------------------

    def nvmlInit(self) -> None:
        """Initialise (reference counted, like NVML)."""
        self.nvmlInitWithFlags(0)

    def nvmlInitWithFlags(self, flags: int) -> None:
        """Initialise with flags (ignored)."""
        self.calls.append("nvmlInitWithFlags")
        with self._lock:
            self._refcount += 1

    def nvmlShutdown(self) -> None:
        """Drop one initialisation; UNINITIALIZED when there is none."""
        self._enter("nvmlShutdown")
        with self._lock:
            self._refcount -= 1

    # --- devices ---------------------------------------------------------------------------------

    def nvmlDeviceGetCount(self) -> int:
        """The number of GPUs."""
        self._enter("nvmlDeviceGetCount")
        return len(self.simulator.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any:
        """The handle of the index-th GPU (ordered by minor)."""
        self._enter("nvmlDeviceGetHandleByIndex")
        gpus = self.simulator.gpus
        if not 0 <= index < len(gpus):
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return self._gpu_handle(gpus[index].uuid)

    def nvmlDeviceGetHandleByUUID(self, uuid: str | bytes) -> Any:
        """The handle of the GPU (or MIG device) with this UUID; NOT_FOUND when none has it."""
        self._enter("nvmlDeviceGetHandleByUUID")
        text = uuid.decode() if isinstance(uuid, bytes) else uuid
        for g in self.simulator.gpus:
            if g.uuid == text:
                return self._gpu_handle(g.uuid)
            for mig in self._mig_devices(g.uuid) if self.simulator.product(g.uuid) else ():
                if mig.mig_uuid == text:
                    return self._handle(mig, c_nvmlDevice_t)
        raise NVMLError(NVML_ERROR_NOT_FOUND)

    def _any_device(self, handle: Any) -> _Gpu | _MigDevice:
        try:
            return self._target(handle, _Gpu)
        except NVMLError:
            return self._target(handle, _MigDevice)

    def nvmlDeviceGetUUID(self, handle: Any) -> str:
        """The GPU's ``GPU-...`` or the MIG device's ``MIG-...`` UUID."""
        self._enter("nvmlDeviceGetUUID")
        dev = self._any_device(handle)
        return dev.mig_uuid if isinstance(dev, _MigDevice) else dev.uuid

    def nvmlDeviceGetName(self, handle: Any) -> str:
        """The product name (``NVIDIA H100 80GB HBM3``; MIG devices add ``MIG <profile>``)."""
        self._enter("nvmlDeviceGetName")
        dev = self._any_device(handle)
        gpu = next(g for g in self.simulator.gpus if g.uuid == dev.uuid)
        if isinstance(dev, _MigDevice):
            gi = self.simulator.snapshot(dev.uuid).gi(dev.gi_id)
            return f"{gpu.product_name} MIG {gi.profile_name if gi else '?'}"
        return gpu.product_name

    def nvmlDeviceGetMinorNumber(self, handle: Any) -> int:
        """The GPU's minor number; NOT_SUPPORTED for a MIG device (it has none)."""
        self._enter("nvmlDeviceGetMinorNumber")
        dev = self._any_device(handle)
        if isinstance(dev, _MigDevice):
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return next(g.minor for g in self.simulator.gpus if g.uuid == dev.uuid)

    # --- MIG mode --------------------------------------------------------------------------------

    def nvmlDeviceGetMigMode(self, device: Any) -> list[int]:
        """``[current, pending]``; NOT_SUPPORTED when the GPU is not MIG capable."""
        self._enter("nvmlDeviceGetMigMode")
        uuid = self._target(device, _Gpu).uuid
        mode = self._sim(lambda: self.simulator.mode(uuid))
        return [int(mode.current), int(mode.pending)]

    def nvmlDeviceSetMigMode(self, device: Any, mode: int) -> int:
        """Set MIG mode; return the activation status (``NVML_ERROR_RESET_REQUIRED`` until a reset)."""
        self._enter("nvmlDeviceSetMigMode")
        uuid = self._target(device, _Gpu).uuid
        if mode not in (NVML_DEVICE_MIG_DISABLE, NVML_DEVICE_MIG_ENABLE):
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return int(self._sim(lambda: self.simulator.set_mig_mode(uuid, mode == NVML_DEVICE_MIG_ENABLE)))

    # --- GPU instance profiles -------------------------------------------------------------------

    def _product(self, uuid: str) -> Any:
        product = self._sim(lambda: self.simulator.product(uuid))
        if product is None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return product

    def nvmlDeviceGetGpuInstanceProfileInfo(self, device: Any, profile: int, version: int = 2) -> Any:
        """Info of the GI profile at NVML profile index ``profile``; NOT_SUPPORTED when the GPU lacks it."""
        self._enter("nvmlDeviceGetGpuInstanceProfileInfo")
        product = self._product(self._target(device, _Gpu).uuid)
        if not 0 <= profile < NVML_GPU_INSTANCE_PROFILE_COUNT:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        p = product.gi_by_index(profile)
        if p is None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return self._gi_info(p, version)

    def nvmlDeviceGetGpuInstanceProfileInfoById(self, device: Any, profileId: int) -> Any:
        """Info of the GI profile with this profile id (version 2)."""
        self._enter("nvmlDeviceGetGpuInstanceProfileInfoById")
        p = self._product(self._target(device, _Gpu).uuid).gi_by_id(profileId)
        if p is None:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return self._gi_info(p, 2)

    @staticmethod
    def _gi_info(p: Any, version: int) -> Any:
        if version == 2:
            info: Any = c_nvmlGpuInstanceProfileInfo_v2_t()
            info.name = f"MIG {p.name}"
        elif version == 1:
            info = c_nvmlGpuInstanceProfileInfo_t()
        else:
            raise NVMLError(NVML_ERROR_FUNCTION_NOT_FOUND)
        info.id = p.profile_id
        info.isP2pSupported = 0
        info.sliceCount = p.slices
        info.instanceCount = p.instance_count
        info.multiprocessorCount = p.multiprocessors
        info.copyEngineCount = p.copy_engines
        info.decoderCount = p.decoders
        info.encoderCount = p.encoders
        info.jpegCount = p.jpeg_engines
        info.ofaCount = p.ofa_engines
        info.memorySizeMB = p.memory_mib
        return info

    def nvmlDeviceGetGpuInstancePossiblePlacements(self, device: Any, profileId: int, placementsRef: Any, countRef: Any) -> int:
        """Fill ``placementsRef`` (capacity: ``*countRef``) with every placement of the profile.

        A None array asks for the count only; a too small capacity fails with INSUFFICIENT_SIZE and
        leaves the needed count in ``*countRef``. Occupancy and MIG mode do not matter.
        """
        self._enter("nvmlDeviceGetGpuInstancePossiblePlacements")
        uuid = self._target(device, _Gpu).uuid
        placements = self._sim(lambda: self.simulator.possible_placements(uuid, profileId))
        count = _deref(countRef)
        if placementsRef is None:
            count.value = len(placements)
            return NVML_SUCCESS
        self._fill(_deref(placementsRef), count, [(p.start, p.size) for p in placements], self._set_placement)
        return NVML_SUCCESS

    @staticmethod
    def _set_placement(slot: Any, value: tuple[int, int]) -> None:
        slot.start, slot.size = value

    @staticmethod
    def _fill(array: Any, count: Any, values: list[_T], put: Callable[[Any, _T], None]) -> None:
        capacity = int(count.value)
        if capacity < len(values):
            count.value = len(values)
            raise NVMLError(NVML_ERROR_INSUFFICIENT_SIZE)
        if len(array) < len(values):  # a capacity larger than the buffer would overrun it in C
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        for i, v in enumerate(values):
            put(array[i], v)
        count.value = len(values)

    # --- GPU instances ---------------------------------------------------------------------------

    def _gi_handle(self, uuid: str, gi: Any) -> Any:
        return self._handle(_Gi(uuid, gi.gi_id, gi.serial), c_nvmlGpuInstance_t)

    def nvmlDeviceCreateGpuInstanceWithPlacement(self, device: Any, profileId: int, placement: Any) -> Any:
        """Create a GI of the profile at exactly ``placement`` (a struct, or ``byref``/pointer to one)."""
        self._enter("nvmlDeviceCreateGpuInstanceWithPlacement")
        uuid = self._target(device, _Gpu).uuid
        pl = _deref(placement)
        gi_id = self._sim(lambda: self.simulator.create_gpu_instance(uuid, profileId, int(pl.start), int(pl.size)))
        gi = self.simulator.snapshot(uuid).gi(gi_id)
        return self._gi_handle(uuid, gi)

    def nvmlDeviceCreateGpuInstance(self, device: Any, profileId: int) -> Any:
        """Create a GI of the profile wherever it fits (the lowest free placement)."""
        self._enter("nvmlDeviceCreateGpuInstance")
        uuid = self._target(device, _Gpu).uuid
        placements = self._sim(lambda: self.simulator.possible_placements(uuid, profileId))
        taken = [Placement(g.start, g.size) for g in self.simulator.snapshot(uuid).gis]
        free = [p for p in placements if not any(p.overlaps(t) for t in taken)]
        if free:
            first = free[0]
            gi_id = self._sim(lambda: self.simulator.create_gpu_instance(uuid, profileId, first.start, first.size))
            return self._gi_handle(uuid, self.simulator.snapshot(uuid).gi(gi_id))
        # Let the simulator say why nothing fits (MIG mode off, or insufficient resources).
        self._sim(lambda: self.simulator.create_gpu_instance(uuid, profileId, placements[0].start, placements[0].size))
        raise NVMLError(NVML_ERROR_INSUFFICIENT_RESOURCES)

    def nvmlDeviceGetGpuInstances(self, device: Any, profileId: int, gpuInstancesRef: Any, countRef: Any) -> int:
        """Fill ``gpuInstancesRef`` with the GIs of the profile; ``*countRef`` gets how many.

        The buffer must hold the profile's instance count (nvml.h), else INSUFFICIENT_SIZE.
        """
        self._enter("nvmlDeviceGetGpuInstances")
        uuid = self._target(device, _Gpu).uuid
        product = self._product(uuid)
        profile = product.gi_by_id(profileId)
        if profile is None:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        state = self._sim(lambda: self.simulator.snapshot(uuid))
        if not state.mode_current:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        array = _deref(gpuInstancesRef)
        count = _deref(countRef)
        if array is None or len(array) < profile.instance_count:
            raise NVMLError(NVML_ERROR_INSUFFICIENT_SIZE)
        gis = sorted((g for g in state.gis if g.profile_id == profileId), key=lambda g: g.gi_id)
        for i, gi in enumerate(gis):
            array[i] = self._gi_handle(uuid, gi)
        count.value = len(gis)
        return NVML_SUCCESS

    def nvmlDeviceGetGpuInstanceById(self, device: Any, gpuInstanceId: int) -> Any:
        """The GI with this id; NOT_FOUND when absent, NOT_SUPPORTED when MIG mode is off."""
        self._enter("nvmlDeviceGetGpuInstanceById")
        uuid = self._target(device, _Gpu).uuid
        self._product(uuid)
        state = self._sim(lambda: self.simulator.snapshot(uuid))
        if not state.mode_current:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        gi = state.gi(gpuInstanceId)
        if gi is None:
            raise NVMLError(NVML_ERROR_NOT_FOUND)
        return self._gi_handle(uuid, gi)

    def nvmlGpuInstanceGetInfo(self, gpuInstance: Any) -> Any:
        """The GI's device, id, profile id and placement."""
        self._enter("nvmlGpuInstanceGetInfo")
        target = self._target(gpuInstance, _Gi)
        gi = self._gi_state(target)
        info = c_nvmlGpuInstanceInfo_t()
        info.device = self._gpu_handle(target.uuid)
        info.id = gi.gi_id
        info.profileId = gi.profile_id
        info.placement.start = gi.start
        info.placement.size = gi.size
        return info

    def nvmlGpuInstanceDestroy(self, gpuInstance: Any) -> int:
        """Destroy the GI; IN_USE while it has compute instances."""
        self._enter("nvmlGpuInstanceDestroy")
        target = self._target(gpuInstance, _Gi)
        self._gi_state(target)
        self._sim(lambda: self.simulator.destroy_gpu_instance(target.uuid, target.gi_id))
        return NVML_SUCCESS

    # --- compute instances -----------------------------------------------------------------------

    def nvmlGpuInstanceGetComputeInstanceProfileInfo(self, device: Any, profile: int, engProfile: int, version: int = 2) -> Any:
        """Info of the CI profile at NVML CI profile index ``profile`` inside the GI ``device``."""
        self._enter("nvmlGpuInstanceGetComputeInstanceProfileInfo")
        target = self._target(device, _Gi)
        self._gi_state(target)
        if not 0 <= profile < NVML_COMPUTE_INSTANCE_PROFILE_COUNT or engProfile != NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        gi_profile, offered = self._sim(lambda: self.simulator.ci_profiles(target.uuid, target.gi_id))
        ci = next((c for c in offered if c.index == profile), None)
        if ci is None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        product = self._product(target.uuid)
        if version == 2:
            info: Any = c_nvmlComputeInstanceProfileInfo_v2_t()
            if ci.index == CI_PROFILE_1_SLICE_REV1:
                info.name = f"MIG 1c.{gi_profile.name}+rev1"
            else:
                info.name = f"MIG {gi_profile.name}" if ci.slices == gi_profile.slices else f"MIG {ci.slices}c.{gi_profile.name}"
        elif version == 1:
            info = c_nvmlComputeInstanceProfileInfo_t()
        else:
            raise NVMLError(NVML_ERROR_FUNCTION_NOT_FOUND)
        info.id = ci.profile_id
        info.sliceCount = ci.slices
        info.instanceCount = ci.instance_count
        info.multiprocessorCount = product.ci_multiprocessors(gi_profile, ci)
        info.sharedCopyEngineCount = gi_profile.copy_engines
        info.sharedDecoderCount = gi_profile.decoders
        info.sharedEncoderCount = gi_profile.encoders
        info.sharedJpegCount = gi_profile.jpeg_engines
        info.sharedOfaCount = gi_profile.ofa_engines
        return info

    def _ci_handle(self, target: _Gi, ci: Any) -> Any:
        return self._handle(_Ci(target.uuid, target.gi_id, target.serial, ci.ci_id, ci.uuid), c_nvmlComputeInstance_t)

    def nvmlGpuInstanceCreateComputeInstance(self, gpuInstance: Any, profileId: int) -> Any:
        """Create a CI of the CI profile id in the GI."""
        self._enter("nvmlGpuInstanceCreateComputeInstance")
        target = self._target(gpuInstance, _Gi)
        self._gi_state(target)
        ci = self._sim(lambda: self.simulator.create_compute_instance(target.uuid, target.gi_id, profileId))
        return self._ci_handle(target, ci)

    def nvmlGpuInstanceGetComputeInstances(
        self, gpuInstance: Any, profileId: int, computeInstancesRef: Any, countRef: Any
    ) -> int:
        """Fill ``computeInstancesRef`` with the GI's CIs of the CI profile id; ``*countRef`` gets how many."""
        self._enter("nvmlGpuInstanceGetComputeInstances")
        target = self._target(gpuInstance, _Gi)
        gi = self._gi_state(target)
        _, offered = self._sim(lambda: self.simulator.ci_profiles(target.uuid, target.gi_id))
        ci_profile = next((c for c in offered if c.profile_id == profileId), None)
        if ci_profile is None:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        array = _deref(computeInstancesRef)
        count = _deref(countRef)
        if array is None or len(array) < ci_profile.instance_count:
            raise NVMLError(NVML_ERROR_INSUFFICIENT_SIZE)
        cis = sorted((c for c in gi.cis if c.profile_id == profileId), key=lambda c: c.ci_id)
        for i, ci in enumerate(cis):
            array[i] = self._ci_handle(target, ci)
        count.value = len(cis)
        return NVML_SUCCESS

    def nvmlGpuInstanceGetComputeInstanceById(self, gpuInstance: Any, computeInstanceId: int) -> Any:
        """The GI's CI with this id; NOT_FOUND when absent."""
        self._enter("nvmlGpuInstanceGetComputeInstanceById")
        target = self._target(gpuInstance, _Gi)
        gi = self._gi_state(target)
        ci = next((c for c in gi.cis if c.ci_id == computeInstanceId), None)
        if ci is None:
            raise NVMLError(NVML_ERROR_NOT_FOUND)
        return self._ci_handle(target, ci)

    def _ci_state(self, target: _Ci) -> Any:
        gi = self._gi_state(_Gi(target.uuid, target.gi_id, target.gi_serial))
        ci = next((c for c in gi.cis if c.ci_id == target.ci_id and c.uuid == target.mig_uuid), None)
        if ci is None:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return ci

    def nvmlComputeInstanceGetInfo_v2(self, computeInstance: Any) -> Any:
        """The CI's MIG device, GI, id, profile id and placement."""
        self._enter("nvmlComputeInstanceGetInfo_v2")
        target = self._target(computeInstance, _Ci)
        ci = self._ci_state(target)
        info = c_nvmlComputeInstanceInfo_t()
        info.device = self._handle(_MigDevice(target.uuid, target.gi_id, ci.ci_id, ci.uuid), c_nvmlDevice_t)
        info.gpuInstance = self._handle(_Gi(target.uuid, target.gi_id, target.gi_serial), c_nvmlGpuInstance_t)
        info.id = ci.ci_id
        info.profileId = ci.profile_id
        info.placement.start = ci.start
        info.placement.size = ci.slices
        return info

    def nvmlComputeInstanceGetInfo(self, computeInstance: Any) -> Any:
        """Alias of ``nvmlComputeInstanceGetInfo_v2`` (as in pynvml)."""
        return self.nvmlComputeInstanceGetInfo_v2(computeInstance)

    def nvmlComputeInstanceDestroy(self, computeInstance: Any) -> int:
        """Destroy the CI; IN_USE while a process uses its MIG device."""
        self._enter("nvmlComputeInstanceDestroy")
        target = self._target(computeInstance, _Ci)
        self._ci_state(target)
        self._sim(lambda: self.simulator.destroy_compute_instance(target.uuid, target.gi_id, target.ci_id))
        return NVML_SUCCESS

    # --- MIG devices -----------------------------------------------------------------------------

    def nvmlDeviceIsMigDeviceHandle(self, device: Any) -> ctypes.c_uint:
        """A ``c_uint`` (not an int: pynvml returns the ctypes object) that is 1 for a MIG device."""
        self._enter("nvmlDeviceIsMigDeviceHandle")
        return ctypes.c_uint(1 if isinstance(self._any_device(device), _MigDevice) else 0)

    def nvmlDeviceGetMaxMigDeviceCount(self, device: Any) -> int:
        """How many MIG devices the GPU can have at most (its 1-slice instance count)."""
        self._enter("nvmlDeviceGetMaxMigDeviceCount")
        product = self._product(self._target(device, _Gpu).uuid)
        return int(max(p.instance_count for p in product.gi_profiles if p.slices == 1))

    def nvmlDeviceGetMigDeviceHandleByIndex(self, device: Any, index: int) -> Any:
        """The index-th MIG device of the GPU; NOT_FOUND when there is none at that index."""
        self._enter("nvmlDeviceGetMigDeviceHandleByIndex")
        uuid = self._target(device, _Gpu).uuid
        product = self._product(uuid)
        if not 0 <= index < max(p.instance_count for p in product.gi_profiles if p.slices == 1):
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        migs = self._mig_devices(uuid)
        if index >= len(migs):
            raise NVMLError(NVML_ERROR_NOT_FOUND)
        return self._handle(migs[index], c_nvmlDevice_t)

    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, migDevice: Any) -> Any:
        """The parent GPU of a MIG device."""
        self._enter("nvmlDeviceGetDeviceHandleFromMigDeviceHandle")
        return self._gpu_handle(self._target(migDevice, _MigDevice).uuid)

    def nvmlDeviceGetGpuInstanceId(self, device: Any) -> int:
        """The GI id of a MIG device; INVALID_ARGUMENT for a full GPU."""
        self._enter("nvmlDeviceGetGpuInstanceId")
        return self._target(device, _MigDevice).gi_id

    def nvmlDeviceGetComputeInstanceId(self, device: Any) -> int:
        """The CI id of a MIG device; INVALID_ARGUMENT for a full GPU."""
        self._enter("nvmlDeviceGetComputeInstanceId")
        return self._target(device, _MigDevice).ci_id

    def nvmlErrorString(self, result: int) -> str:
        """The text NVML gives for a return code."""
        return nvmlErrorString(result)


__all__ = ["NVMLError", "NvmlCode", "SimulatedNvml"]
