"""AdmissionReview builders for the webhook: a claim with opaque configs, the review around it.

Callers: the webhook's unit tests (tests/unit/webhook/), the fuzzer of the HTTP front
(tests/fuzz/test_fuzz_http.py), the plugin metrics test, the listener-attack test and bench
(bench/listener_attacks.py).
"""

from __future__ import annotations

import json
from typing import Any

from dra_driver.core.config import API_VERSION

DRIVER = "gpu.dra-gpu.dev"
GOOD = {"apiVersion": API_VERSION, "kind": "GpuConfig", "sharing": {"strategy": "TimeSlicing"}}
MAGIC = {"apiVersion": API_VERSION, "kind": "GpuConfig", "sharing": {"strategy": "Magic"}}


def claim_obj(*params: Any, driver: str = DRIVER) -> dict[str, Any]:
    configs = [{"opaque": {"driver": driver, "parameters": p}} for p in params]
    requests = [{"name": "gpu", "exactly": {"deviceClassName": "gpu.dra-gpu.dev"}}]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "c", "namespace": "ns"},
        "spec": {"devices": {"requests": requests, "config": configs}},
    }


def request(
    obj: Any, *, operation: str = "CREATE", kind: str = "ResourceClaim", group: str = "resource.k8s.io", old: Any = None
) -> dict[str, Any]:
    req: dict[str, Any] = {
        "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
        "kind": {"group": group, "version": "v1", "kind": kind},
        "resource": {"group": group, "version": "v1", "resource": kind.lower() + "s"},
        "namespace": "ns",
        "operation": operation,
        "object": obj,
    }
    if old is not None:
        req["oldObject"] = old
    return req


def body(req: dict[str, Any]) -> bytes:
    return json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": req}).encode()
