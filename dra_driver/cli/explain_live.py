"""``dra-gpu explain NAME``: the pod, claim or template and everything allocation depends on, read live.

Called by ``dra_driver.cli.explain`` (:func:`run_live`). Reads through the kube adapter
(``dra_driver.kube.explain_api``, loaded only here: offline use never loads kubernetes) every
ResourceSlice (decoded with equal parts shared: the CLI hands the adapter
``dra_driver.schedsim.shared_json``'s decoder), DeviceClass, Node and allocated claim, the
classes, claims, nodes and DeviceTaintRules while the slices are read, and the server's release; a pod's template
claims are the ones its status names, or built from the template when none exists yet. Then the
scheduler simulator (``dra_driver.schedsim``) explains them as the server's release would, with
the DeviceTaintRules' taints on the devices they select (a cordoned GPU is unavailable, naming
the rule and the reason) and a note for each node that withholds devices cordoned locally (its
Node annotation, ``dra_driver.core.local_cordon``: those devices are not published at all).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from dra_driver.cli.explain_inputs import InputError, ident, object_name, pod_refs, template_claim
from dra_driver.cli.kubeconfig import default_kubeconfig
from dra_driver.core.local_cordon import Withholding, annotation_key
from dra_driver.schedsim.allocator import Explanation, InvalidObject, explain
from dra_driver.schedsim.allocator.validate import MAX_POD_CLAIMS
from dra_driver.schedsim.gates import GateError
from dra_driver.schedsim.rules import Rules, rules_for
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


def live_rules(minor: int | None, gates: Mapping[str, bool] | None, *, served: str | None, count: int) -> tuple[Rules, list[str]]:
    """The rules of the server's release, and notes on its DeviceTaintRules.

    A server that serves the DeviceTaintRule API where its release's default leaves the scheduler's
    ``DRADeviceTaintRules`` gate off (1.36's beta) had the gate turned on: the scheduler is assumed
    to have it on too, unless ``--feature-gates`` says otherwise.
    """
    rules = rules_for(minor, gates)
    notes: list[str] = []
    if served is not None and not rules.device_taint_rules and "DRADeviceTaintRules" not in (gates or {}):
        try:
            rules = rules_for(minor, {**(gates or {}), "DRADeviceTaintRules": True})
            notes.append(
                f"note: the API server serves DeviceTaintRules ({served}): kube-scheduler assumed to run with "
                "DRADeviceTaintRules=true (--feature-gates DRADeviceTaintRules=false if it does not)"
            )
        except GateError:
            pass
    if count and not rules.device_taint_rules:
        notes.append(f"note: {count} DeviceTaintRule(s) ignored: kube-scheduler {rules.version} applies none with these gates")
    elif count:
        notes.append(f"note: {count} DeviceTaintRule(s) applied to the devices they select")
    return rules, notes


def withheld_notes(nodes: Mapping[str, Mapping[str, Any]], slices: Sequence[Any]) -> list[str]:
    """One note per node whose kubelet plugin withholds devices cordoned locally (the Node annotation of ``dra-gpu cordon``)."""
    drivers = sorted({str((s.get("spec") or {}).get("driver") or "") for s in slices if isinstance(s, Mapping)} - {""})
    out = []
    for name, meta in sorted(nodes.items()):
        notes = meta.get("annotations") or {}
        for driver in drivers:
            if annotation_key(driver) not in notes:
                continue
            w = Withholding.from_node({"metadata": meta}, driver)
            what = (
                f"every device ({w.problem})"
                if w.everything
                else ", ".join(f"{dev} ({why})" for dev, why in sorted(w.cordoned.items()))
            )
            out.append(f"note: node {name} withholds {driver} devices cordoned locally, not published: {what}")
    return out


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
            nodes_f = pool.submit(api.node_metadata)
            minor_f = pool.submit(api.server_minor)
            taint_f = pool.submit(api.device_taint_rules)
            slice_objs = api.resource_slices(SharedDecoder().decode)  # a cluster's slices repeat themselves
            class_map = {object_name(c): c for c in classes_f.result()}
            mine = {_uid(c) for c in claims} - {""}
            allocated = [c for c in claims_f.result() if _allocated(c) and _uid(c) not in mine]
            nodes = nodes_f.result()
            labels = {name: dict(meta.get("labels") or {}) for name, meta in nodes.items()}
            served, taint_rules = taint_f.result()
            rules, said = live_rules(minor_f.result(), gates, served=served, count=len(taint_rules))
        if note is not None:
            note(f"note: kube-scheduler {rules.version} feature gates assumed: {rules.describe_gates()}")
            for line in [*said, *withheld_notes(nodes, slice_objs)]:
                note(line)
        return [(label, explain(claims, slice_objs, class_map, allocated, labels, rules=rules, taint_rules=taint_rules))]
    except KubeApiError as err:
        what = f"{kind} {namespace}/{name} not found" if err.not_found else str(err)
        raise InputError(what) from None
    except InvalidObject as err:
        raise InputError(str(err)) from None
    except GateError as err:
        raise InputError(f"--feature-gates: {err}") from None
