"""The scheduler's DRA CEL environment on cel-python, plus Kubernetes semantic versions.

Called by the allocation simulator (``dra_driver.schedsim.allocator``) and ``dra-gpu explain``;
see ``environment.py`` for the API. Quantities are the core's (``dra_driver.core.quantity``). The
names below load lazily, so importing one helper module (``semver``, ``regex``) never loads
cel-python or builds its parser.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dra_driver.schedsim.cel.environment import (
        MAX_COST,
        MAX_EXPRESSION_LENGTH,
        CelCompileError,
        CelError,
        CelRuntimeError,
        CompiledSelector,
        DeviceView,
        compile_selector,
        device_value,
        split_qualified_name,
        validate_selector,
    )

__all__ = [
    "MAX_COST",
    "MAX_EXPRESSION_LENGTH",
    "CelCompileError",
    "CelError",
    "CelRuntimeError",
    "CompiledSelector",
    "DeviceView",
    "compile_selector",
    "device_value",
    "split_qualified_name",
    "validate_selector",
]


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(importlib.import_module("dra_driver.schedsim.cel.environment"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
