"""The errors a DRA CEL selector fails with, worded as the scheduler words them.

Raised by the environment (``environment.py``: compiling and evaluating selectors) and by the
conversion of a device into CEL's ``device`` value (``device.py``); caught by the allocation
simulator (``dra_driver.schedsim.allocator``), which reports them as the scheduler does.
"""

from __future__ import annotations


class CelError(Exception):
    """A selector failed; ``kind`` is ``compile`` or ``runtime``; ``str()`` is the scheduler's text."""

    kind = "error"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class CelCompileError(CelError):
    """The expression does not compile (syntax, types, result not bool); ``stage``: check, result or plan."""

    kind = "compile"

    def __init__(self, message: str, *, stage: str = "check") -> None:
        super().__init__(message)
        self.stage = stage


class CelRuntimeError(CelError):
    """Evaluating against one device failed (missing attribute, no such overload, overflow, cost).

    ``cost``: for a cancelled evaluation, the cost charged when it went over the limit.
    """

    kind = "runtime"

    def __init__(self, message: str, *, cost: int | None = None) -> None:
        super().__init__(message)
        self.cost = cost
