"""Builders for ResourceClaim JSON as the API server returns it (shared by unit and integration tests)."""

from __future__ import annotations

import uuid
from typing import Any

DRIVER = "gpu.dra-gpu.dev"


def new_uid() -> str:
    return str(uuid.uuid4())


def allocated_claim(
    *,
    name: str = "claim-a",
    namespace: str = "default",
    uid: str | None = None,
    node: str = "node-a",
    devices: list[str] | None = None,
    requests: list[str] | None = None,
    driver: str = DRIVER,
    config: list[dict[str, Any]] | None = None,
    pool: str | None = None,
    result_fields: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A claim allocated to ``devices`` of ``node``'s pool, one result per device.

    ``result_fields`` adds fields to each result (e.g. ``shareID``, ``consumedCapacity``).
    """
    devices = devices if devices is not None else ["gpu-0"]
    requests = requests or ["gpu"] * len(devices)
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace, "uid": uid or new_uid()},
        "spec": {
            "devices": {
                "requests": [
                    {"name": r.split("/")[0], "exactly": {"deviceClassName": "gpu.dra-gpu.dev"}} for r in dict.fromkeys(requests)
                ]
            }
        },
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {"request": r, "driver": driver, "pool": pool or node, "device": d, **extra}
                        for r, d, extra in zip(requests, devices, result_fields or [{}] * len(devices), strict=True)
                    ],
                    "config": config or [],
                },
                "nodeSelector": {
                    "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]
                },
            }
        },
    }
