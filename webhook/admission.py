"""AdmissionReview in, AdmissionReview out: the webhook's decision, without any I/O.

Called by ``webhook.server`` for every ``POST /validate-resource-claim-parameters``. The
verdict on a ResourceClaim or ResourceClaimTemplate comes from
``dra_driver.core.config.validate_claim_configs``, so the webhook rejects exactly the configs
the kubelet plugin would fail at prepare, with the same words.

Decisions beyond "valid or not", and why:

- A body that is not an ``admission.k8s.io/v1`` AdmissionReview with a request is a protocol
  error (``BadReview``, HTTP 400): the API server never sends one, so answering "allowed" would
  hide a broken caller, and with ``failurePolicy: Fail`` the API server then rejects the write.
- A request for anything other than a resource.k8s.io ResourceClaim or ResourceClaimTemplate
  is allowed, with a warning and a log line: such an object holds none of this driver's
  configs, and denying it would turn a mistake in the ValidatingWebhookConfiguration into an
  outage of unrelated writes across the cluster.
- An UPDATE that leaves ``spec`` unchanged is allowed without decoding: objects stored before
  the webhook was installed (or by an older dra-gpu) must still take metadata and finalizer
  updates, or deleting them could hang. A claim's spec is immutable anyway; a template's
  changed spec is validated like a new one.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dra_driver.core.config import SUPPORTED_OBJECT_KINDS, validate_claim_configs

ADMISSION_API_VERSION = "admission.k8s.io/v1"
RESOURCE_GROUP = "resource.k8s.io"
VALIDATE_PATH = "/validate-resource-claim-parameters"
VALIDATED_OPERATIONS = ("CREATE", "UPDATE")


class BadReview(ValueError):
    """The body is not an AdmissionReview this webhook can answer (answered with HTTP 400)."""


@dataclass(frozen=True, slots=True)
class Subject:
    """What a request is about, for the log line."""

    operation: str = ""
    kind: str = ""
    namespace: str = ""
    name: str = ""


@dataclass(frozen=True, slots=True)
class Verdict:
    """The decision on one AdmissionReview request."""

    uid: str
    allowed: bool
    subject: Subject = Subject()
    message: str = ""
    warnings: tuple[str, ...] = ()
    invalid_configs: int = 0

    def response(self) -> dict[str, Any]:
        """The AdmissionReview (admission.k8s.io/v1) that answers the request."""
        resp: dict[str, Any] = {"uid": self.uid, "allowed": self.allowed}
        if not self.allowed:
            resp["status"] = {"status": "Failure", "code": 422, "reason": "Invalid", "message": self.message}
        if self.warnings:
            resp["warnings"] = list(self.warnings)
        return {"apiVersion": ADMISSION_API_VERSION, "kind": "AdmissionReview", "response": resp}


def parse_review(body: bytes) -> Mapping[str, Any]:
    """The ``request`` of an admission.k8s.io/v1 AdmissionReview; BadReview saying what is wrong otherwise."""
    try:
        review = json.loads(body)
    except RecursionError:
        raise BadReview("body is not JSON this webhook reads: nested too deeply") from None
    except (ValueError, UnicodeDecodeError) as err:  # ValueError: syntax, or an integer of over 4300 digits
        raise BadReview(f"body is not JSON: {str(err)[:200]}") from None
    if not isinstance(review, dict):
        raise BadReview("body is not a JSON object")
    if review.get("apiVersion") != ADMISSION_API_VERSION or review.get("kind") != "AdmissionReview":
        raise BadReview(
            f"expected an AdmissionReview of {ADMISSION_API_VERSION}, got kind {review.get('kind')!r} "
            f"of {review.get('apiVersion')!r} (set admissionReviewVersions: [v1])"
        )
    request = review.get("request")
    if not isinstance(request, dict):
        raise BadReview("AdmissionReview has no request")
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        raise BadReview("AdmissionReview request has no uid")
    return request


def failure_message(messages: list[str]) -> str:
    """``1 config failed to validate: ...`` / ``N configs failed to validate: a; b``."""
    noun = "config" if len(messages) == 1 else "configs"
    return f"{len(messages)} {noun} failed to validate: {'; '.join(messages)}"


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _object_name(obj: Any) -> str:
    """``metadata.name``, or ``generateName`` (a CREATE before the name is generated), or ""."""
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    if not isinstance(meta, Mapping):
        return ""
    return _str(meta.get("name")) or _str(meta.get("generateName"))


def decide(request: Mapping[str, Any], driver: str) -> Verdict:
    """Allow or deny one AdmissionReview request for ``driver``'s opaque configs (see the module docstring)."""
    uid = _str(request.get("uid"))
    kind_ref = request.get("kind")
    group, kind = ("", "")
    if isinstance(kind_ref, Mapping):
        group, kind = _str(kind_ref.get("group")), _str(kind_ref.get("kind"))
    operation = _str(request.get("operation"))
    obj = request.get("object")
    name = _str(request.get("name")) or _object_name(obj)
    subject = Subject(operation, kind, _str(request.get("namespace")), name)
    if group != RESOURCE_GROUP or kind not in SUPPORTED_OBJECT_KINDS:
        warning = (
            f"dra-gpu's webhook validates only {RESOURCE_GROUP} {' and '.join(SUPPORTED_OBJECT_KINDS)}s, "
            f"not {group or 'core'}/{kind or '?'}; check its ValidatingWebhookConfiguration"
        )
        return Verdict(uid, True, subject, warnings=(warning,))
    if operation not in VALIDATED_OPERATIONS:
        return Verdict(uid, True, subject)
    if not isinstance(obj, Mapping):
        raise BadReview(f"{operation} request for a {kind} has no object")
    old = request.get("oldObject")
    if operation == "UPDATE" and isinstance(old, Mapping) and old.get("spec") == obj.get("spec"):
        return Verdict(uid, True, subject)
    messages = validate_claim_configs({**obj, "kind": kind}, driver)
    if messages:
        return Verdict(uid, False, subject, message=failure_message(messages), invalid_configs=len(messages))
    return Verdict(uid, True, subject)


def review(body: bytes, driver: str) -> Verdict:
    """Parse an AdmissionReview body and decide; BadReview when it is not one."""
    return decide(parse_review(body), driver)
