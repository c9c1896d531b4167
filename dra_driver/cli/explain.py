"""``dra-gpu explain``: why a pod, claim or claim template would (not) get devices.

Registered by ``dra_driver.cli.main`` through :func:`add_explain_parser`. Live: ``NAME``
(``pod/x``, ``resourceclaim/x``, ``resourceclaimtemplate/x``) is read from the API server
(``--kubeconfig``, ``-n``) with every ResourceSlice, DeviceClass, Node and allocated claim
(``dra_driver.kube.explain_api``; classes, claims and nodes read while the slices are); a pod's
template claims are the ones its status names, or built from the template when none exists yet.
Offline: the manifests (``-f``; a pod's claim templates come from the same file), ResourceSlices
(``--slices``, e.g. ``dra-gpu inventory -o yaml`` output, several nodes concatenated),
DeviceClasses (``--classes``; without it each driver in the slices gets a class of its own name
that selects its devices) and already-allocated claims (``--allocated``). Either way the
scheduler simulator (``dra_driver.schedsim``) does the rest.

:func:`explain_objects` is the whole offline path on parsed documents. Every object is checked
on the way in (``dra_driver.schedsim.allocator.validate``): a malformed file or object, or one past
the API's limits, is an :class:`InputError` naming the object and field, never a crash. So is a
claim, template or class of the files whose selectors the API server would refuse (too long, not
compiling, too complex: ``dra_driver.schedsim.allocator.admission``), before anything is
evaluated; objects read live were validated when stored. The text report (summarized per group
of nodes on a large cluster) is ``explain_text.py``'s.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from dra_driver.cli.explain_text import render_text
from dra_driver.schedsim.allocator import Explanation, InvalidObject, explain
from dra_driver.schedsim.allocator.admission import all_refusals
from dra_driver.schedsim.allocator.objects import claim_spec
from dra_driver.schedsim.allocator.validate import MAX_POD_CLAIMS, Reader, show
from dra_driver.schedsim.gates import GateError, parse_feature_gates
from dra_driver.schedsim.rules import NEWEST, Rules, rules_for
from dra_driver.schedsim.shared_json import SharedDecoder

if TYPE_CHECKING:
    from dra_driver.kube.explain_api import KubeExplainApi

__all__ = ["InputError", "add_explain_parser", "explain_objects", "load_objects", "render_text", "run_explain", "run_live"]


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


def _of_kind(objs: Sequence[Any], kind: str) -> list[dict[str, Any]]:
    """The objects of ``kind`` (anything that is not an object with that ``kind`` is skipped)."""
    return [o for o in objs if isinstance(o, dict) and isinstance(o.get("kind"), str) and o["kind"] == kind]


def _ident(o: Mapping[str, Any], kind: str, index: int) -> tuple[Reader, str, str]:
    """A reader named after the object, its namespace and name (checked: strings, or absent)."""
    r = Reader(f"{kind} #{index + 1}")
    meta = r.obj(r.top(o).get("metadata"), "metadata")
    name = r.text(meta.get("name"), "metadata.name") or ""
    ns = r.text(meta.get("namespace"), "metadata.namespace") or ""
    if name:
        r.label = f"{kind} {show(ns) + '/' if ns else ''}{show(name)}"
    return r, ns, name


def _name(o: Any) -> str:
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


def _template_claim(t: Mapping[str, Any], r: Reader, name: str, ns: str) -> dict[str, Any]:
    """The claim a template stamps out (its ``spec.spec`` checked, so errors name the template)."""
    spec = r.obj(t.get("spec"), "spec").get("spec")
    claim_spec(r, spec, "spec.spec")
    return {"kind": "ResourceClaim", "metadata": {"name": name, "namespace": ns}, "spec": spec or {}}


def _pod_refs(pod: Mapping[str, Any], r: Reader) -> list[dict[str, str]]:
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
    for i, c in enumerate([*_of_kind(allocated, "ResourceClaim"), *_of_kind(objs, "ResourceClaim")]):
        _, ns, name = _ident(c, "ResourceClaim", i)
        claims[(ns, name)] = c
    templates: dict[tuple[str, str], dict[str, Any]] = {}
    for i, t in enumerate(_of_kind(objs, "ResourceClaimTemplate")):
        _, ns, name = _ident(t, "ResourceClaimTemplate", i)
        templates[(ns, name)] = t
    pods = _of_kind(objs, "Pod")
    if len(pods) > MAX_WORKLOADS:
        raise InputError(f"{len(pods)} pods in -f, at most {MAX_WORKLOADS}: explain them in smaller files")
    out = [_pod_claims(pod, i, claims, templates) for i, pod in enumerate(pods)]
    if pods:
        return out
    for i, c in enumerate(_of_kind(objs, "ResourceClaim")):
        _, _, name = _ident(c, "ResourceClaim", i)
        out.append((f"claim {show(name)}", [c]))
    for i, t in enumerate(_of_kind(objs, "ResourceClaimTemplate")):
        r, ns, name = _ident(t, "ResourceClaimTemplate", i)
        out.append((f"template {show(name)}", [_template_claim(t, r, name, ns)]))
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
    r, ns, pod_name = _ident(pod, "Pod", index)
    pod_claims: list[dict[str, Any]] = []
    for ref in _pod_refs(pod, r):
        if ref["resourceClaimName"]:
            c = claims.get((ns, ref["resourceClaimName"]))
            if c is None:
                raise InputError(f"{r.label}: ResourceClaim {show(ref['resourceClaimName'])} is not in -f or --allocated")
            pod_claims.append(c)
        elif ref["resourceClaimTemplateName"]:
            t = templates.get((ns, ref["resourceClaimTemplateName"]))
            if t is None:
                raise InputError(f"{r.label}: ResourceClaimTemplate {show(ref['resourceClaimTemplateName'])} is not in -f")
            tr, _, _ = _ident(t, "ResourceClaimTemplate", 0)
            pod_claims.append(_template_claim(t, tr, f"{pod_name}-{ref['name']}", ns))
    return f"pod {show(ns) + '/' if ns else ''}{show(pod_name)}", pod_claims


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
    r, _, _ = _ident(template, "ResourceClaimTemplate", 0)
    return _template_claim(template, r, name, namespace)


def _live_claims(api: KubeExplainApi, kind: str, name: str, namespace: str) -> tuple[str, list[dict[str, Any]]]:
    """(label, claims in pod order) for the live object; a pod's template claims come from its status."""
    obj = api.get(kind, namespace, name)
    if kind == "resourceclaim":
        return f"claim {namespace}/{name}", [obj]
    if kind == "resourceclaimtemplate":
        return f"template {namespace}/{name}", [_claim_from_template(obj, name, namespace)]
    r, _, _ = _ident(obj, "Pod", 0)
    status = r.obj(obj.get("status"), "status")
    statuses = r.seq(status.get("resourceClaimStatuses"), "status.resourceClaimStatuses", MAX_POD_CLAIMS)
    generated: dict[str, str] = {}
    for i, st in enumerate(statuses):
        m = r.obj(st, f"status.resourceClaimStatuses[{i}]")
        claim_name = r.text(m.get("resourceClaimName"), f"status.resourceClaimStatuses[{i}].resourceClaimName")
        if claim_name:
            generated[r.text(m.get("name"), f"status.resourceClaimStatuses[{i}].name") or ""] = claim_name
    claims: list[dict[str, Any]] = []
    for ref in _pod_refs(obj, r):
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
            class_map = {_name(c): c for c in classes_f.result()}
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


def default_kubeconfig() -> str | None:
    """``$KUBECONFIG`` (first entry), else ``~/.kube/config`` if present, else None (in-cluster)."""
    env = os.environ.get("KUBECONFIG", "").split(os.pathsep)[0]
    if env:
        return env
    home = Path.home() / ".kube" / "config"
    return str(home) if home.is_file() else None


def explain_objects(
    manifests: Sequence[Any],
    slices: Sequence[Any],
    classes: Sequence[Any] | None = None,
    allocated: Sequence[Any] = (),
    rules: Rules = NEWEST,
) -> list[tuple[str, Explanation]]:
    """Explain each workload of the parsed documents (what :func:`load_objects` returns for each file).

    ``manifests``: pods, claims and templates; ``slices``: the ResourceSlices; ``classes``: the
    DeviceClasses (None: one per driver, see :func:`default_classes`); ``allocated``: claims already
    allocated. Documents of other kinds are ignored. Raises :class:`InputError` for anything
    malformed or past the bounds of ``dra_driver.schedsim.allocator.validate``, naming it, and for
    a claim, template or class whose selectors the API server would refuse (too long, not
    compiling, too complex: ``dra_driver.schedsim.allocator.admission``), before anything is evaluated.
    """
    try:
        slice_objs = _of_kind(slices, "ResourceSlice")
        if classes is None:
            class_map = default_classes(slice_objs)
        else:
            class_map = {}
            for i, c in enumerate(_of_kind(classes, "DeviceClass")):
                class_map[_ident(c, "DeviceClass", i)[2]] = c
        refused = all_refusals([*_of_kind(manifests, "ResourceClaim"), *_of_kind(manifests, "ResourceClaimTemplate")], rules)
        refused += all_refusals(_of_kind(classes or [], "DeviceClass"), rules)
        if refused:
            raise InputError("\n".join(str(r) for r in refused))
        alloc_objs = _of_kind(allocated, "ResourceClaim")
        return [
            (label, explain(claims, slice_objs, class_map, alloc_objs, rules=rules))
            for label, claims in workloads(manifests, alloc_objs)
        ]
    except InvalidObject as err:
        raise InputError(str(err)) from None


def run_explain(
    *, manifests: str, slices: str, classes: str | None = None, allocated: str | None = None, rules: Rules = NEWEST
) -> list[tuple[str, Explanation]]:
    """Load the files and explain each workload in them (as ``rules``' scheduler: default, the newest release's defaults)."""
    return explain_objects(
        load_objects(manifests),
        load_objects(slices),
        load_objects(classes) if classes else None,
        load_objects(allocated) if allocated else [],
        rules,
    )


def _explain_cmd(args: argparse.Namespace) -> int:
    """Run ``explain`` as the CLI does; the exit code (0: everything allocatable, 1: not, 2: bad input).

    The cyclic garbage collector is off while the inputs are read and simulated and the report is
    written (then back as it was): a large cluster's slices are millions of (acyclic) JSON objects,
    and every collection walks all of them again, which more than doubles the time of decoding them;
    the report's lines, one per device, would be walked likewise. Reference counting still frees them.
    """
    live = args.target is not None
    usage = ""
    if live and (args.filename or args.slices or args.classes or args.allocated):
        usage = "give either NAME (read from the cluster) or -f with --slices (files), not both"
    elif not live and (not args.filename or not args.slices):
        usage = "give NAME to read from the cluster, or -f and --slices for files"
    if usage:
        print(f"dra-gpu explain: {usage}", file=sys.stderr)
        return 2
    enabled = gc.isenabled()
    gc.disable()  # see _explain_cmd's docstring
    try:
        return _explain_and_print(args, live)
    finally:
        if enabled:
            gc.enable()


def _explain_and_print(args: argparse.Namespace, live: bool) -> int:
    """Explain and print the results; the exit code (see :func:`_explain_cmd`)."""
    try:
        gates = parse_feature_gates(args.feature_gates) if args.feature_gates else None
        if live:
            results = run_live(
                target=args.target,
                namespace=args.namespace,
                kubeconfig=args.kubeconfig or default_kubeconfig(),
                gates=gates,
                note=lambda text: print(text, file=sys.stderr),
            )
        else:
            rules = rules_for(None, gates)
            results = run_explain(
                manifests=args.filename, slices=args.slices, classes=args.classes, allocated=args.allocated, rules=rules
            )
    except GateError as err:
        print(f"dra-gpu explain: --feature-gates: {err}", file=sys.stderr)
        return 2
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
    p.add_argument(
        "--feature-gates",
        metavar="GATES",
        help="kube-scheduler's --feature-gates (Foo=true,Bar=false) where the cluster changed them "
        "(default: the release's defaults; offline: the newest release's)",
    )
    p.set_defaults(func=_explain_cmd)
    return p
