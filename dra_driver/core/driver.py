"""The one place that defines the driver's identity: default driver name and its validation.

Everyone who needs the driver name (schema, CDI naming, publisher, plugin, CLI) imports it
from here; the name itself is configurable per install (``--driver-name``).
"""

from __future__ import annotations

import re

# A DNS subdomain of this project's own, so dra-gpu can run beside NVIDIA's gpu.nvidia.com.
DEFAULT_DRIVER_NAME = "gpu.dra-gpu.dev"

_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\Z")


def validate_driver_name(name: str) -> str:
    """Return ``name`` if it is a valid ResourceSlice ``spec.driver``; raise ValueError naming the problem."""
    if not name:
        raise ValueError("driver name must not be empty")
    if len(name) > 63:
        raise ValueError(f"driver name {name!r} is longer than 63 characters")
    if not _DNS_SUBDOMAIN.match(name):
        raise ValueError(f"driver name {name!r} is not a lower-case DNS subdomain")
    return name
