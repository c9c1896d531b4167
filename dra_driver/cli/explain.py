"""``dra-gpu explain``: why a pod, claim or claim template would (not) get devices.

Registered by ``dra_driver.cli.main`` through :func:`add_explain_parser`. Live: ``NAME``
(``pod/x``, ``resourceclaim/x``, ``resourceclaimtemplate/x``) is read from the API server
(``--kubeconfig``, ``-n``) with every ResourceSlice, DeviceClass, Node and allocated claim
(``dra_driver.kube.explain_api``); a pod's template claims are the ones its status names, or
built from the template when none exists yet. Offline: the manifests (``-f``; a pod's claim
templates come from the same file), ResourceSlices (``--slices``, e.g. ``dra-gpu inventory -o
yaml`` output, several nodes concatenated), DeviceClasses (``--classes``; without it each driver
in the slices gets a class of its own name that selects its devices) and already-allocated claims
(``--allocated``). Either way the allocation simulator from the core does the rest.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from dra_driver.core.allocator import Explanation, explain

if TYPE_CHECKING:
    from dra_driver.kube.explain_api import KubeExplainApi


class InputError(ValueError):
    """A manifest file that cannot be used."""


def load_objects(path: str) -> list[dict[str, Any]]:
    """All objects of a YAML/JSON file: multi-document, ``kind: List`` flattened, empty documents skipped."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as err:
        raise InputError(f"{path}: {err}") from None
    try:
        docs = _json_stream(text) if text.lstrip().startswith(("{", "[")) else list(yaml.safe_load_all(split_concatenated(text)))
    except (ValueError, yaml.YAMLError) as err:
        raise InputError(f"{path}: {err}") from None
    out: list[dict[str, Any]] = []
    for doc in docs:
        if not isinstance(doc, dict):
            continue
        if str(doc.get("kind", "")).endswith("List") and isinstance(doc.get("items"), list):
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


def _of_kind(objs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objs if o.get("kind") == kind]


def _name(o: Mapping[str, Any]) -> str:
    return str((o.get("metadata") or {}).get("name", ""))


def default_classes(slices: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """One DeviceClass per driver, named like the driver, selecting that driver's devices."""
    out: dict[str, dict[str, Any]] = {}
    for s in slices:
        driver = str((s.get("spec") or {}).get("driver", ""))
        if driver and driver not in out:
            out[driver] = {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "DeviceClass",
                "metadata": {"name": driver},
                "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{driver}"'}}]},
            }
    return out


def workloads(objs: list[dict[str, Any]], allocated: list[dict[str, Any]]) -> list[tuple[str, list[dict[str, Any]]]]:
    """(label, claims in pod order) for each pod in ``objs``, else one per claim or template."""
    claims = {
        (str((c.get("metadata") or {}).get("namespace", "")), _name(c)): c for c in [*allocated, *_of_kind(objs, "ResourceClaim")]
    }
    templates = {
        (str((t.get("metadata") or {}).get("namespace", "")), _name(t)): t for t in _of_kind(objs, "ResourceClaimTemplate")
    }
    pods = _of_kind(objs, "Pod")
    out: list[tuple[str, list[dict[str, Any]]]] = []
    for pod in pods:
        ns = str((pod.get("metadata") or {}).get("namespace", ""))
        pod_claims: list[dict[str, Any]] = []
        for ref in (pod.get("spec") or {}).get("resourceClaims") or []:
            if ref.get("resourceClaimName"):
                c = claims.get((ns, str(ref["resourceClaimName"])))
                if c is None:
                    raise InputError(f"pod {_name(pod)}: ResourceClaim {ref['resourceClaimName']} is not in -f or --allocated")
                pod_claims.append(c)
            elif ref.get("resourceClaimTemplateName"):
                t = templates.get((ns, str(ref["resourceClaimTemplateName"])))
                if t is None:
                    raise InputError(f"pod {_name(pod)}: ResourceClaimTemplate {ref['resourceClaimTemplateName']} is not in -f")
                meta = {"name": f"{_name(pod)}-{ref.get('name', '')}", "namespace": ns}
                pod_claims.append({"kind": "ResourceClaim", "metadata": meta, "spec": (t.get("spec") or {}).get("spec") or {}})
        out.append((f"pod {ns + '/' if ns else ''}{_name(pod)}", pod_claims))
    if pods:
        return out
    for c in _of_kind(objs, "ResourceClaim"):
        out.append((f"claim {_name(c)}", [c]))
    for t in _of_kind(objs, "ResourceClaimTemplate"):
        meta = {"name": _name(t), "namespace": (t.get("metadata") or {}).get("namespace", "")}
        out.append(
            (
                f"template {_name(t)}",
                [{"kind": "ResourceClaim", "metadata": meta, "spec": (t.get("spec") or {}).get("spec") or {}}],
            )
        )
    if not out:
        raise InputError("no Pod, ResourceClaim or ResourceClaimTemplate in -f")
    return out


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
    return {
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": (template.get("spec") or {}).get("spec") or {},
    }


def _live_claims(api: KubeExplainApi, kind: str, name: str, namespace: str) -> tuple[str, list[dict[str, Any]]]:
    """(label, claims in pod order) for the live object; a pod's template claims come from its status."""
    obj = api.get(kind, namespace, name)
    if kind == "resourceclaim":
        return f"claim {namespace}/{name}", [obj]
    if kind == "resourceclaimtemplate":
        return f"template {namespace}/{name}", [_claim_from_template(obj, name, namespace)]
    generated = {
        str(st.get("name")): str(st.get("resourceClaimName"))
        for st in (obj.get("status") or {}).get("resourceClaimStatuses") or []
        if st.get("resourceClaimName")
    }
    claims: list[dict[str, Any]] = []
    for ref in (obj.get("spec") or {}).get("resourceClaims") or []:
        ref_name = str(ref.get("name", ""))
        if ref.get("resourceClaimName"):
            claims.append(api.get("resourceclaim", namespace, str(ref["resourceClaimName"])))
        elif ref_name in generated:
            claims.append(api.get("resourceclaim", namespace, generated[ref_name]))
        elif ref.get("resourceClaimTemplateName"):
            template = api.get("resourceclaimtemplate", namespace, str(ref["resourceClaimTemplateName"]))
            claims.append(_claim_from_template(template, f"{name}-{ref_name}", namespace))
    return f"pod {namespace}/{name}", claims


def run_live(*, target: str, namespace: str, kubeconfig: str | None) -> list[tuple[str, Explanation]]:
    """Read the object, slices, classes and allocated claims from the API server and explain."""
    from dra_driver.kube.explain_api import KubeApiError, connect  # lazy: offline use never loads kubernetes

    kind, name = parse_target(target)
    try:
        api = connect(kubeconfig)
        label, claims = _live_claims(api, kind, name, namespace)
        slice_objs = api.resource_slices()
        class_map = {_name(c): c for c in api.device_classes()}
        mine = {str((c.get("metadata") or {}).get("uid") or "") for c in claims} - {""}
        allocated = [
            c
            for c in api.resource_claims()
            if (c.get("status") or {}).get("allocation") and str((c.get("metadata") or {}).get("uid") or "") not in mine
        ]
        labels = api.node_labels()
    except KubeApiError as err:
        what = f"{kind} {namespace}/{name} not found" if err.not_found else str(err)
        raise InputError(what) from None
    return [(label, explain(claims, slice_objs, class_map, allocated, labels))]


def default_kubeconfig() -> str | None:
    """``$KUBECONFIG`` (first entry), else ``~/.kube/config`` if present, else None (in-cluster)."""
    env = os.environ.get("KUBECONFIG", "").split(os.pathsep)[0]
    if env:
        return env
    home = Path.home() / ".kube" / "config"
    return str(home) if home.is_file() else None


def run_explain(
    *, manifests: str, slices: str, classes: str | None = None, allocated: str | None = None
) -> list[tuple[str, Explanation]]:
    """Load the files and explain each workload in them."""
    objs = load_objects(manifests)
    slice_objs = _of_kind(load_objects(slices), "ResourceSlice")
    class_map = {_name(c): c for c in _of_kind(load_objects(classes), "DeviceClass")} if classes else default_classes(slice_objs)
    alloc_objs = _of_kind(load_objects(allocated), "ResourceClaim") if allocated else []
    return [(label, explain(claims, slice_objs, class_map, alloc_objs)) for label, claims in workloads(objs, alloc_objs)]


def render_text(results: list[tuple[str, Explanation]]) -> str:
    """The human-readable report."""
    lines: list[str] = []
    for label, ex in results:
        lines.append(f"{label}:")
        for r in ex.requests:
            head = f"  claim {r.claim}, request {r.request}: "
            if r.reason is None:
                lines.append(head + f"allocated on node {r.node}: {', '.join(r.devices)}")
            else:
                lines.append(head + f"NOT allocatable: {r.reason}")
            for c in r.candidates:
                where = f"{c.node}: " if c.node else ""
                detail = f"  {c.detail}" if c.detail else ""
                lines.append(f"    {where}{c.device:<24} {c.verdict}{detail}")
    return "\n".join(lines) + "\n"


def _explain_cmd(args: argparse.Namespace) -> int:
    live = args.target is not None
    usage = ""
    if live and (args.filename or args.slices or args.classes or args.allocated):
        usage = "give either NAME (read from the cluster) or -f with --slices (files), not both"
    elif not live and (not args.filename or not args.slices):
        usage = "give NAME to read from the cluster, or -f and --slices for files"
    if usage:
        print(f"dra-gpu explain: {usage}", file=sys.stderr)
        return 2
    try:
        if live:
            results = run_live(target=args.target, namespace=args.namespace, kubeconfig=args.kubeconfig or default_kubeconfig())
        else:
            results = run_explain(manifests=args.filename, slices=args.slices, classes=args.classes, allocated=args.allocated)
    except InputError as err:
        print(f"dra-gpu explain: {err}", file=sys.stderr)
        return 2
    if args.output == "json":
        entries = [r.to_json() for _, ex in results for r in ex.requests]
        print(json.dumps({"requests": entries}, indent=2))
    else:
        if not live and not args.classes:
            print("note: no --classes given; each driver's devices form a class named like the driver", file=sys.stderr)
        print(render_text(results), end="")
    allocated_all = all(r.reason is None for _, ex in results for r in ex.requests)
    return 0 if allocated_all else 1


def add_explain_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``explain`` on the CLI's subparsers; dispatch is through ``args.func(args)``."""
    p: argparse.ArgumentParser = subparsers.add_parser(
        "explain",
        help="explain which devices a pod's claims could get and why (a simulation of the scheduler)",
        description="Live: dra-gpu explain pod/NAME [-n NS] [--kubeconfig FILE] (also resourceclaim/NAME, "
        "resourceclaimtemplate/NAME). Offline: dra-gpu explain -f MANIFESTS --slices SLICES [--classes ...] [--allocated ...].",
    )
    p.add_argument(
        "target", nargs="?", metavar="NAME", help="pod/NAME, resourceclaim/NAME or resourceclaimtemplate/NAME, read live"
    )
    p.add_argument("-n", "--namespace", default="default", help="namespace of NAME (default: default)")
    p.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config, or in-cluster)")
    p.add_argument("-f", "--filename", help="Pod, ResourceClaim or ResourceClaimTemplate YAML (multi-document)")
    p.add_argument("--slices", help="ResourceSlices YAML, e.g. `dra-gpu inventory -o yaml` output")
    p.add_argument("--classes", help="DeviceClasses YAML (default: one class per driver, named like the driver)")
    p.add_argument("--allocated", help="ResourceClaims with status.allocation already in the cluster")
    p.add_argument("-o", "--output", choices=["text", "json"], default="text")
    p.set_defaults(func=_explain_cmd)
    return p
