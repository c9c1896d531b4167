"""What ``dra-gpu explain`` reads from files: objects of YAML/JSON files, and the workloads among them.

Called by ``dra_driver.cli.explain`` (the offline path, :func:`load_objects` and :func:`workloads`)
and ``dra_driver.cli.explain_live`` (a pod's claim references, a template's claim). Every object is
checked on the way in (``dra_driver.schedsim.allocator.validate``): a malformed file or object, or
one past the API's limits, is an :class:`InputError` naming the object and field, never a crash.
A file that is one JSON object (a large list of slices) is decoded with equal parts shared
(``dra_driver.schedsim.shared_json``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from dra_driver.schedsim.allocator import InvalidObject
from dra_driver.schedsim.allocator.claim_objects import claim_spec
from dra_driver.schedsim.allocator.validate import MAX_POD_CLAIMS, Reader, show
from dra_driver.schedsim.shared_json import SharedDecoder

__all__ = [
    "MAX_WORKLOADS",
    "InputError",
    "default_classes",
    "ident",
    "load_objects",
    "object_name",
    "of_kind",
    "pod_refs",
    "split_concatenated",
    "template_claim",
    "workloads",
]


class InputError(ValueError):
    """A manifest file that cannot be used."""


def load_objects(path: str) -> list[dict[str, Any]]:
    """All objects of a YAML/JSON file: multi-document, ``kind: List`` flattened, empty documents skipped."""
    try:
        data = Path(path).read_bytes()
    except OSError as err:
        raise InputError(f"{path}: {err}") from None
    shared = SharedDecoder().decode(data)  # one JSON object (a large list of slices): equal parts decoded once
    if shared is not None:
        return _flatten([shared])
    try:
        text = data.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")  # as read_text reads it
    except UnicodeDecodeError as err:
        raise InputError(f"{path}: not UTF-8 text: {err.reason} at byte {err.start}") from None
    try:
        docs = _json_stream(text) if text.lstrip().startswith(("{", "[")) else list(yaml.safe_load_all(split_concatenated(text)))
    except (ValueError, yaml.YAMLError) as err:
        raise InputError(f"{path}: {str(err)[:500]}") from None
    except RecursionError:
        raise InputError(f"{path}: nested too deeply") from None
    return _flatten(docs)


def _flatten(docs: Sequence[Any]) -> list[dict[str, Any]]:
    """The objects of the documents: ``kind: List`` flattened, anything but an object skipped."""
    out: list[dict[str, Any]] = []
    for doc in docs:
        if not isinstance(doc, dict):
            continue
        kind = doc.get("kind")
        if isinstance(kind, str) and kind.endswith("List") and isinstance(doc.get("items"), list):
            out.extend(item for item in doc["items"] if isinstance(item, dict))
        else:
            out.append(doc)
    return out


def split_concatenated(text: str) -> str:
    """Insert ``---`` where a new top-level ``apiVersion:`` starts inside a document.

    ``dra-gpu inventory -o yaml`` prints one node's slices without a leading separator, so two
    outputs appended to one file would otherwise read as one document with duplicate keys.
    """
    out: list[str] = []
    seen_top = False
    for line in text.splitlines():
        if line.startswith("---"):
            seen_top = False
        elif line.startswith("apiVersion:"):
            if seen_top:
                out.append("---")
            seen_top = True
        elif line and not line[0].isspace() and not line.startswith("#") and not line.startswith("- "):
            seen_top = True
        out.append(line)
    return "\n".join(out) + "\n"


def _json_stream(text: str) -> list[Any]:
    """Concatenated JSON values (``-o json`` outputs appended to one file)."""
    dec = json.JSONDecoder()
    pos = 0
    out: list[Any] = []
    while True:
        while pos < len(text) and text[pos].isspace():
            pos += 1
        if pos >= len(text):
            return out
        value, pos = dec.raw_decode(text, pos)
        out.append(value)


def of_kind(objs: Sequence[Any], kind: str) -> list[dict[str, Any]]:
    """The objects of ``kind`` (anything that is not an object with that ``kind`` is skipped)."""
    return [o for o in objs if isinstance(o, dict) and isinstance(o.get("kind"), str) and o["kind"] == kind]


def ident(o: Mapping[str, Any], kind: str, index: int) -> tuple[Reader, str, str]:
    """A reader named after the object, its namespace and name (checked: strings, or absent)."""
    r = Reader(f"{kind} #{index + 1}")
    meta = r.obj(r.top(o).get("metadata"), "metadata")
    name = r.text(meta.get("name"), "metadata.name") or ""
    ns = r.text(meta.get("namespace"), "metadata.namespace") or ""
    if name:
        r.label = f"{kind} {show(ns) + '/' if ns else ''}{show(name)}"
    return r, ns, name


def object_name(o: Any) -> str:
    """An object's ``metadata.name`` ("" where it has none, or not a string)."""
    meta = o.get("metadata") if isinstance(o, Mapping) else None
    name = meta.get("name") if isinstance(meta, Mapping) else None
    return name if isinstance(name, str) else ""


def default_classes(slices: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """One DeviceClass per driver, named like the driver, selecting that driver's devices."""
    out: dict[str, dict[str, Any]] = {}
    for s in slices:
        spec = s.get("spec")
        driver = spec.get("driver") if isinstance(spec, Mapping) else None
        if isinstance(driver, str) and driver and driver not in out:
            out[driver] = {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "DeviceClass",
                "metadata": {"name": driver},
                "spec": {"selectors": [{"cel": {"expression": f"device.driver == {json.dumps(driver)}"}}]},
            }
    return out


MAX_WORKLOADS = 1000  # pods (else claims and templates) explained from one -f


def template_claim(t: Mapping[str, Any], r: Reader, name: str, ns: str) -> dict[str, Any]:
    """The claim a template stamps out (its ``spec.spec`` checked, so errors name the template)."""
    spec = r.obj(t.get("spec"), "spec").get("spec")
    claim_spec(r, spec, "spec.spec")
    return {"kind": "ResourceClaim", "metadata": {"name": name, "namespace": ns}, "spec": spec or {}}


def pod_refs(pod: Mapping[str, Any], r: Reader) -> list[dict[str, str]]:
    """``spec.resourceClaims`` of a pod, checked: each entry's name and claim or template name."""
    refs = r.seq(r.obj(pod.get("spec"), "spec").get("resourceClaims"), "spec.resourceClaims", MAX_POD_CLAIMS)
    out = []
    for i, ref in enumerate(refs):
        m = r.obj(ref, f"spec.resourceClaims[{i}]")
        keys = ("name", "resourceClaimName", "resourceClaimTemplateName")
        out.append({k: r.text(m.get(k), f"spec.resourceClaims[{i}].{k}") or "" for k in keys})
    return out


def workloads(objs: Sequence[Any], allocated: Sequence[Any]) -> list[tuple[str, list[dict[str, Any]]]]:
    """(label, claims in pod order) for each pod in ``objs``, else one per claim or template.

    Raises :class:`InputError` for a missing claim or template, or a pod or template that is not
    shaped like one.
    """
    try:
        return _workloads(objs, allocated)
    except InvalidObject as err:
        raise InputError(str(err)) from None


def _workloads(objs: Sequence[Any], allocated: Sequence[Any]) -> list[tuple[str, list[dict[str, Any]]]]:
    claims: dict[tuple[str, str], dict[str, Any]] = {}
    for i, c in enumerate([*of_kind(allocated, "ResourceClaim"), *of_kind(objs, "ResourceClaim")]):
        _, ns, name = ident(c, "ResourceClaim", i)
        claims[(ns, name)] = c
    templates: dict[tuple[str, str], dict[str, Any]] = {}
    for i, t in enumerate(of_kind(objs, "ResourceClaimTemplate")):
        _, ns, name = ident(t, "ResourceClaimTemplate", i)
        templates[(ns, name)] = t
    pods = of_kind(objs, "Pod")
    if len(pods) > MAX_WORKLOADS:
        raise InputError(f"{len(pods)} pods in -f, at most {MAX_WORKLOADS}: explain them in smaller files")
    out = [_pod_claims(pod, i, claims, templates) for i, pod in enumerate(pods)]
    if pods:
        return out
    for i, c in enumerate(of_kind(objs, "ResourceClaim")):
        _, _, name = ident(c, "ResourceClaim", i)
        out.append((f"claim {show(name)}", [c]))
    for i, t in enumerate(of_kind(objs, "ResourceClaimTemplate")):
        r, ns, name = ident(t, "ResourceClaimTemplate", i)
        out.append((f"template {show(name)}", [template_claim(t, r, name, ns)]))
    if not out:
        raise InputError("no Pod, ResourceClaim or ResourceClaimTemplate in -f")
    if len(out) > MAX_WORKLOADS:
        raise InputError(f"{len(out)} claims and templates in -f, at most {MAX_WORKLOADS}: explain them in smaller files")
    return out


def _pod_claims(
    pod: Mapping[str, Any],
    index: int,
    claims: Mapping[tuple[str, str], dict[str, Any]],
    templates: Mapping[tuple[str, str], dict[str, Any]],
) -> tuple[str, list[dict[str, Any]]]:
    """(label, claims in pod order) of one pod: named claims as given, template claims stamped out."""
    r, ns, pod_name = ident(pod, "Pod", index)
    pod_claims: list[dict[str, Any]] = []
    for ref in pod_refs(pod, r):
        if ref["resourceClaimName"]:
            c = claims.get((ns, ref["resourceClaimName"]))
            if c is None:
                raise InputError(f"{r.label}: ResourceClaim {show(ref['resourceClaimName'])} is not in -f or --allocated")
            pod_claims.append(c)
        elif ref["resourceClaimTemplateName"]:
            t = templates.get((ns, ref["resourceClaimTemplateName"]))
            if t is None:
                raise InputError(f"{r.label}: ResourceClaimTemplate {show(ref['resourceClaimTemplateName'])} is not in -f")
            tr, _, _ = ident(t, "ResourceClaimTemplate", 0)
            pod_claims.append(template_claim(t, tr, f"{pod_name}-{ref['name']}", ns))
    return f"pod {show(ns) + '/' if ns else ''}{show(pod_name)}", pod_claims
