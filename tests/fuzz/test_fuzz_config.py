"""Fuzzing claim configs and AdmissionReview bodies: only the modules' own errors, bounded time.

Opaque ``GpuConfig``/``MigDeviceConfig`` parameters through the decoder, whole claims and
templates through ``validate_claim_configs``, and AdmissionReview bodies (as bytes, torn and
flipped too) through the webhook's ``review``: a config is accepted or refused with a
``ConfigError``; a review is a verdict or a ``BadReview`` (HTTP 400), never a crash (HTTP 500).
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from typing import Any

from dra_driver.core.config import API_VERSION, ConfigError, decode_opaque_config, validate_claim_configs
from tests.fuzz import harness
from webhook.admission import BadReview, review
from webhook.server import MAX_BODY_BYTES

DRIVER = "gpu.dra-gpu.dev"
PARAMS: list[dict[str, Any]] = [
    {
        "apiVersion": API_VERSION,
        "kind": "GpuConfig",
        "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}},
    },
    {
        "apiVersion": API_VERSION,
        "kind": "GpuConfig",
        "sharing": {
            "strategy": "MPS",
            "mpsConfig": {
                "defaultActiveThreadPercentage": 50,
                "defaultPinnedDeviceMemoryLimit": "10Gi",
                "defaultPerDevicePinnedMemoryLimit": {"gpu-0": "5Gi"},
            },
        },
    },
    {
        "apiVersion": API_VERSION,
        "kind": "MigDeviceConfig",
        "sharing": {"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 10}},
    },
]


def claim(params: Any, template: bool = False) -> dict[str, Any]:
    spec = {
        "devices": {
            "requests": [{"name": "gpu"}],
            "config": [{"requests": ["gpu"], "opaque": {"driver": DRIVER, "parameters": params}}],
        }
    }
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate" if template else "ResourceClaim",
        "metadata": {"name": "c", "namespace": "ns"},
        "spec": {"spec": spec} if template else spec,
    }


def review_doc(obj: Any) -> dict[str, Any]:
    kind = obj.get("kind", "ResourceClaim") if isinstance(obj, dict) else "ResourceClaim"
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
            "kind": {"group": "resource.k8s.io", "version": "v1", "kind": kind},
            "resource": {"group": "resource.k8s.io", "version": "v1", "resource": "resourceclaims"},
            "namespace": "ns",
            "operation": "CREATE",
            "object": obj,
        },
    }


def test_hostile_opaque_configs_are_refused_with_config_errors_only() -> None:
    rng = random.Random(harness.seed_for("config-decode"))

    def inputs() -> Iterator[Any]:
        for _ in range(harness.budget(6000)):
            yield harness.mutate(rng.choice(PARAMS), rng)

    rep = harness.run("config decode", inputs(), decode_opaque_config, (ConfigError,))
    harness.assert_clean(rep)
    assert rep.rejected > rep.inputs // 4 and rep.accepted > 0


def test_hostile_claims_and_templates_get_messages_not_crashes() -> None:
    rng = random.Random(harness.seed_for("config-objects"))

    def inputs() -> Iterator[Any]:
        for _ in range(harness.budget(3000)):
            yield harness.mutate(claim(rng.choice(PARAMS), template=rng.random() < 0.5), rng)

    def validate(obj: Any) -> None:
        messages = validate_claim_configs(obj, DRIVER)
        assert all(isinstance(m, str) and m for m in messages)

    rep = harness.run("claim/template configs", inputs(), validate, (ValueError,))
    harness.assert_clean(rep)


def test_hostile_admission_reviews_are_verdicts_or_bad_requests() -> None:
    rng = random.Random(harness.seed_for("webhook-review"))

    def inputs() -> Iterator[bytes]:
        for _ in range(harness.budget(5000)):
            doc = review_doc(claim(rng.choice(PARAMS), template=rng.random() < 0.3))
            yield harness.to_bytes(harness.mutate(doc, rng), rng)

    def decide(body: bytes) -> None:
        if len(body) > MAX_BODY_BYTES:
            return  # the server answers 413 before reading it
        verdict = review(body, DRIVER)
        json.dumps(verdict.response())  # the answer is serializable

    rep = harness.run("webhook reviews", inputs(), decide, (BadReview,))
    harness.assert_clean(rep)
