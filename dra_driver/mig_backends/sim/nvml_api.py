"""pynvml's interface as data: the ``NVML_*`` constants, ``NVMLError`` and its subclasses, ctypes structures.

Values, class names, field names and error texts as in nvidia-ml-py 13.x's ``pynvml`` (defined here,
since only the NVML adapters may import pynvml). Used by the simulator's NVML calls
(``dra_driver.mig_backends.sim.fake_nvml.SimulatedNvml`` and its parts), which hand these to the
NVML MIG backend exactly as pynvml would.
"""

# pynvml's names (camelCase functions and ctypes types) are the interface being reproduced.
# ruff: noqa: N801, N802, N816

from __future__ import annotations

import ctypes
from typing import Any, ClassVar

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


_GI_PROFILE_FIELDS: tuple[tuple[str, Any], ...] = (
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
)
"""The fields of a GI profile's info (version 2 adds its version first and its name last)."""

_CI_PROFILE_FIELDS: tuple[tuple[str, Any], ...] = (
    ("id", ctypes.c_uint),
    ("sliceCount", ctypes.c_uint),
    ("instanceCount", ctypes.c_uint),
    ("multiprocessorCount", ctypes.c_uint),
    ("sharedCopyEngineCount", ctypes.c_uint),
    ("sharedDecoderCount", ctypes.c_uint),
    ("sharedEncoderCount", ctypes.c_uint),
    ("sharedJpegCount", ctypes.c_uint),
    ("sharedOfaCount", ctypes.c_uint),
)
"""The fields of a CI profile's info (version 2 adds its version first and its name last)."""


class c_nvmlGpuInstanceProfileInfo_t(ctypes.Structure):
    """GI profile info, version 1."""

    _fields_ = list(_GI_PROFILE_FIELDS)


class c_nvmlGpuInstanceProfileInfo_v2_t(_PrintableStructure):
    """GI profile info, version 2 (with the profile name)."""

    _fields_ = [("version", ctypes.c_uint), *_GI_PROFILE_FIELDS, ("name", ctypes.c_char * NVML_DEVICE_NAME_V2_BUFFER_SIZE)]

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

    _fields_ = list(_CI_PROFILE_FIELDS)


class c_nvmlComputeInstanceProfileInfo_v2_t(_PrintableStructure):
    """CI profile info, version 2 (with the profile name)."""

    _fields_ = [("version", ctypes.c_uint), *_CI_PROFILE_FIELDS, ("name", ctypes.c_char * NVML_DEVICE_NAME_V2_BUFFER_SIZE)]

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
