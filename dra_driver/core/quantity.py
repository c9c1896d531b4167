"""Rendering byte counts as Kubernetes quantities (canonical binary-SI form).

Called by the attribute schema when it publishes capacities. Parsing quantities is not needed
in the core yet; when it is, use a library rather than growing this module.
"""

from __future__ import annotations

_SUFFIXES = (("Ei", 1 << 60), ("Pi", 1 << 50), ("Ti", 1 << 40), ("Gi", 1 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10))


def format_bytes(value: int) -> str:
    """Format a non-negative byte count the way the API server canonicalizes a BinarySI quantity.

    ``85899345920`` → ``80Gi``; a value not divisible by 1024 stays a plain integer.
    """
    if value < 0:
        raise ValueError(f"quantity must not be negative, got {value}")
    for suffix, factor in _SUFFIXES:
        if value >= factor and value % factor == 0:
            return f"{value // factor}{suffix}"
    return str(value)
