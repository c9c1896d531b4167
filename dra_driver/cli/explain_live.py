"""``dra-gpu explain NAME``: the pod, claim or template and everything allocation depends on, read live.

Called by ``dra_driver.cli.explain`` (:func:`run_live`). Reads through the kube adapter
(``dra_driver.kube.explain_api``, loaded only here: offline use never loads kubernetes) every
ResourceSlice (decoded with equal parts shared: the CLI hands the adapter
``dra_driver.schedsim.shared_json``'s decoder), DeviceClass, Node and allocated claim, the
classes, claims and nodes while the slices are read, and the server's release; a pod's template
claims are the ones its status names, or built from the template when none exists yet. Then the
scheduler simulator (``dra_driver.schedsim``) explains them as the server's release would.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from dra_driver.cli.explain_inputs import InputError, ident, object_name, pod_refs, template_claim
from dra_driver.cli.kubeconfig import default_kubeconfig
from dra_driver.schedsim.allocator import Explanation, InvalidObject, explain
from dra_driver.schedsim.allocator.validate import MAX_POD_CLAIMS
from dra_driver.schedsim.gates import GateError
from dra_driver.schedsim.rules import rules_for
from dra_driver.schedsim.shared_json import SharedDecoder

if TYPE_CHECKING:
    from dra_driver.kube.explain_api import KubeExplainApi

__all__ = ["default_kubeconfig", "parse_target", "run_live"]


_KINDS = {
    "pod": "pod",
    "pods": "pod",
    "po": "pod",
    "resourceclaim": "resourceclaim",
    "resourceclaims": "resourceclaim",
    "claim": "resourceclaim",
    "resourceclaimtemplate": "resourceclaimtemplate",
    "resourceclaimtemplates": "resourceclaimtemplate",
    "template": "resourceclaimtemplate",
}


def parse_target(target: str) -> tuple[str, str]:
    """``pod/x``, ``resourceclaim/x``, ``resourceclaimtemplate/x`` (kubectl's spellings) or ``x`` (a pod)."""
    kind, sep, name = target.partition("/")
    if not sep:
        return "pod", kind
    k = _KINDS.get(kind.lower().split(".", 1)[0])
    if k is None or not name:
        raise InputError(f"{target}: expected pod/NAME, resourceclaim/NAME or resourceclaimtemplate/NAME")
    return k, name


def _claim_from_template(template: Mapping[str, Any], name: str, namespace: str) -> dict[str, Any]:
    r, _, _ = ident(template, "ResourceClaimTemplate", 0)
    return template_claim(template, r, name, namespace)


def _live_claims(api: KubeExplainApi, kind: str, name: str, namespace: str) -> tuple[str, list[dict[str, Any]]]:
    """(label, claims in pod order) for the live object; a pod's template claims come from its status."""
    obj = api.get(kind, namespace, name)
    if kind == "resourceclaim":
        return f"claim {namespace}/{name}", [obj]
    if kind == "resourceclaimtemplate":
        return f"template {namespace}/{name}", [_claim_from_template(obj, name, namespace)]
    r, _, _ = ident(obj, "Pod", 0)
    status = r.obj(obj.get("status"), "status")
    statuses = r.seq(status.get("resourceClaimStatuses"), "status.resourceClaimStatuses", MAX_POD_CLAIMS)
    generated: dict[str, str] = {}
    for i, st in enumerate(statuses):
        m = r.obj(st, f"status.resourceClaimStatuses[{i}]")
        claim_name = r.text(m.get("resourceClaimName"), f"status.resourceClaimStatuses[{i}].resourceClaimName")
        if claim_name:
            generated[r.text(m.get("name"), f"status.resourceClaimStatuses[{i}].name") or ""] = claim_name
    claims: list[dict[str, Any]] = []
    for ref in pod_refs(obj, r):
        if ref["resourceClaimName"]:
            claims.append(api.get("resourceclaim", namespace, ref["resourceClaimName"]))
        elif ref["name"] in generated:
            claims.append(api.get("resourceclaim", namespace, generated[ref["name"]]))
        elif ref["resourceClaimTemplateName"]:
            template = api.get("resourceclaimtemplate", namespace, ref["resourceClaimTemplateName"])
            claims.append(_claim_from_template(template, f"{name}-{ref['name']}", namespace))
    return f"pod {namespace}/{name}", claims


def _uid(c: Any) -> str:
    meta = c.get("metadata") if isinstance(c, Mapping) else None
    uid = meta.get("uid") if isinstance(meta, Mapping) else None
    return uid if isinstance(uid, str) else ""


def _allocated(c: Any) -> bool:
    status = c.get("status") if isinstance(c, Mapping) else None
    return isinstance(status, Mapping) and bool(status.get("allocation"))


def run_live(
    *,
    target: str,
    namespace: str,
    kubeconfig: str | None,
    gates: Mapping[str, bool] | None = None,
    note: Callable[[str], None] | None = None,
) -> list[tuple[str, Explanation]]:
    """Read the object, slices, classes and allocated claims from the API server and explain.

    The answers are kube-scheduler's of the server's release with ``gates`` (its ``--feature-gates``;
    default: the release's defaults); ``note`` is told which gate values that assumes.
    """
    from dra_driver.kube.explain_api import KubeApiError, connect  # lazy: offline use never loads kubernetes

    kind, name = parse_target(target)
    try:
        api = connect(kubeconfig)
        label, claims = _live_claims(api, kind, name, namespace)
        # The smaller reads go on in the background while the slices are read (errors still in this order).
        with ThreadPoolExecutor(max_workers=4, thread_name_prefix="explain-read") as pool:
            classes_f = pool.submit(api.device_classes)
            claims_f = pool.submit(api.resource_claims)
            labels_f = pool.submit(api.node_labels)
            minor_f = pool.submit(api.server_minor)
            slice_objs = api.resource_slices(SharedDecoder().decode)  # a cluster's slices repeat themselves
            class_map = {object_name(c): c for c in classes_f.result()}
            mine = {_uid(c) for c in claims} - {""}
            allocated = [c for c in claims_f.result() if _allocated(c) and _uid(c) not in mine]
            labels = labels_f.result()
            rules = rules_for(minor_f.result(), gates)  # the server's release; unknown or newer: the newest rules
        if note is not None:
            note(f"note: kube-scheduler {rules.version} feature gates assumed: {rules.describe_gates()}")
        return [(label, explain(claims, slice_objs, class_map, allocated, labels, rules=rules))]
    except KubeApiError as err:
        what = f"{kind} {namespace}/{name} not found" if err.not_found else str(err)
        raise InputError(what) from None
    except InvalidObject as err:
        raise InputError(str(err)) from None
    except GateError as err:
        raise InputError(f"--feature-gates: {err}") from None
