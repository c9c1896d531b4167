"""The scheduler's DRA CEL environment on cel-python, plus Kubernetes quantities and semver.

Called by the allocation simulator and ``dra-gpu explain``; see ``environment.py`` for the API.
The names below load lazily, so importing ``dra_driver.core.cel.quantity`` alone (as config
decoding does) never loads cel-python or builds its parser.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dra_driver.core.cel.environment import (
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
        return getattr(importlib.import_module("dra_driver.core.cel.environment"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
