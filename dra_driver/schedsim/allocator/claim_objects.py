"""Reads the DeviceClasses and ResourceClaims the simulator takes (and claim templates' specs) into clean copies.

Called by :func:`dra_driver.schedsim.allocator.explain` (through ``read_inputs``) and by
``dra-gpu explain`` (:func:`claim_spec` of claim templates). As ``objects.py`` reads slices: each
reader copies only the fields the simulator reads, field by field through a
:class:`~dra_driver.schedsim.allocator.validate.Reader` (which checks each one's type and the API's
item limits and raises ``InvalidObject``), and drops what Go would ignore: unknown fields and nulls.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dra_driver.schedsim.allocator.objects import node_selector
from dra_driver.schedsim.allocator.validate import (
    MAX_ATTRIBUTES_AND_CAPACITIES,
    MAX_CONSTRAINTS,
    MAX_DERIVED_ATTRIBUTES,
    MAX_EXPRESSION_LENGTH,
    MAX_NAME_LENGTH,
    MAX_REQUESTS,
    MAX_RESULTS,
    MAX_SELECTORS,
    MAX_STRING_LENGTH,
    MAX_SUBREQUESTS,
    MAX_TOLERATIONS,
    Reader,
    named_reader,
    put_present,
    read_metadata,
    show,
)

__all__ = ["claim_spec", "read_allocated", "read_claim", "read_class"]


def read_class(obj: Any, name: str) -> dict[str, Any]:
    """A DeviceClass's fields the simulator reads (``name``: the name it is known by)."""
    r, o = named_reader("DeviceClass", obj, 0)
    if r.label.startswith("DeviceClass #"):
        r.label = f"DeviceClass {show(name)}"
    sp = r.obj(o.get("spec"), "spec")
    selectors = _selectors(r, sp.get("selectors"), "spec.selectors")
    return {"metadata": read_metadata(r, o.get("metadata")), "spec": {"selectors": selectors}}


def _selectors(r: Reader, v: Any, path: str) -> list[dict[str, Any]]:
    out = []
    for i, s in enumerate(r.seq(v, path, MAX_SELECTORS)):
        sm = r.obj(s, f"{path}[{i}]")
        sel: dict[str, Any] = {}
        if sm.get("cel") is not None:
            cm = r.obj(sm["cel"], f"{path}[{i}].cel")
            cel: dict[str, Any] = {}
            put_present(cel, "expression", r.text(cm.get("expression"), f"{path}[{i}].cel.expression", MAX_EXPRESSION_LENGTH))
            sel["cel"] = cel
        out.append(sel)
    return out


def _request_body(r: Reader, m: Mapping[str, Any], path: str) -> dict[str, Any]:
    """The fields of an ``exactly`` block, a subrequest, or a v1beta1 request."""
    out: dict[str, Any] = {}
    put_present(out, "deviceClassName", r.text(m.get("deviceClassName"), f"{path}.deviceClassName"))
    if m.get("selectors") is not None:
        out["selectors"] = _selectors(r, m["selectors"], f"{path}.selectors")
    put_present(out, "allocationMode", r.text(m.get("allocationMode"), f"{path}.allocationMode", MAX_STRING_LENGTH))
    count = r.integer(m.get("count"), f"{path}.count")
    if count is not None and count < 1:
        r.fail(f"{path}.count", "must be greater than zero")
    put_present(out, "count", count)
    put_present(out, "adminAccess", r.flag(m.get("adminAccess"), f"{path}.adminAccess"))
    if m.get("tolerations") is not None:
        tols = []
        for i, t in enumerate(r.seq(m["tolerations"], f"{path}.tolerations", MAX_TOLERATIONS)):
            tp = f"{path}.tolerations[{i}]"
            tm = r.obj(t, tp)
            tol: dict[str, Any] = {}
            for k in ("key", "operator", "value", "effect"):
                put_present(tol, k, r.text(tm.get(k), f"{tp}.{k}", MAX_STRING_LENGTH))
            put_present(tol, "tolerationSeconds", r.integer(tm.get("tolerationSeconds"), f"{tp}.tolerationSeconds"))
            tols.append(tol)
        out["tolerations"] = tols
    if m.get("derivedAttributes") is not None:  # 1.37+, alpha: refused while DRADerivedAttributes is off
        derived = []
        for i, a in enumerate(r.seq(m["derivedAttributes"], f"{path}.derivedAttributes", MAX_DERIVED_ATTRIBUTES)):
            ap = f"{path}.derivedAttributes[{i}]"
            am = r.obj(a, ap)
            attr: dict[str, Any] = {}
            put_present(attr, "name", r.text(am.get("name"), f"{ap}.name"))
            put_present(attr, "expression", r.text(am.get("expression"), f"{ap}.expression", MAX_EXPRESSION_LENGTH))
            derived.append(attr)
        out["derivedAttributes"] = derived
    if m.get("capacity") is not None:
        cm = r.obj(m["capacity"], f"{path}.capacity")
        reqs = r.obj(cm.get("requests"), f"{path}.capacity.requests", MAX_ATTRIBUTES_AND_CAPACITIES)
        out["capacity"] = {
            "requests": {k: r.quantity(q, f"{path}.capacity.requests.{k}") for k, q in reqs.items() if q is not None}
        }
    return out


def claim_spec(r: Reader, v: Any, path: str) -> dict[str, Any]:
    """A ``ResourceClaimSpec`` (of a claim, or ``spec.spec`` of a template)."""
    sm = r.obj(v, path)
    dm = r.obj(sm.get("devices"), f"{path}.devices")
    requests = []
    # Names must be unique, as the API server has them (it refuses a claim that repeats one): the
    # allocator knows a request by its name ("request", or "request/subrequest" for an alternative).
    bases: set[str] = set()
    request_names: set[str] = set()
    for i, q in enumerate(r.seq(dm.get("requests"), f"{path}.devices.requests", MAX_REQUESTS)):
        qp = f"{path}.devices.requests[{i}]"
        qm = r.obj(q, qp)
        req = _request_body(r, qm, qp)
        put_present(req, "name", r.text(qm.get("name"), f"{qp}.name"))
        base = req.get("name") or ""
        if base in bases:
            r.fail(f"{qp}.name", f'duplicate value "{show(base)}"')
        bases.add(base)
        if qm.get("exactly") is not None:
            req["exactly"] = _request_body(r, r.obj(qm["exactly"], f"{qp}.exactly"), f"{qp}.exactly")
        if qm.get("firstAvailable") is not None:
            subs = []
            for j, s in enumerate(r.seq(qm["firstAvailable"], f"{qp}.firstAvailable", MAX_SUBREQUESTS)):
                sp = f"{qp}.firstAvailable[{j}]"
                smap = r.obj(s, sp)
                sub = _request_body(r, smap, sp)
                put_present(sub, "name", r.text(smap.get("name"), f"{sp}.name"))
                full = f"{base}/{sub['name']}" if sub.get("name") else base
                if full in request_names:
                    r.fail(f"{sp}.name", f'duplicate value "{show(full)}"')
                request_names.add(full)
                subs.append(sub)
            req["firstAvailable"] = subs
        if not req.get("firstAvailable"):
            if base in request_names:
                r.fail(f"{qp}.name", f'duplicate value "{show(base)}"')
            request_names.add(base)
        requests.append(req)
    constraints = []
    for i, c in enumerate(r.seq(dm.get("constraints"), f"{path}.devices.constraints", MAX_CONSTRAINTS)):
        cp = f"{path}.devices.constraints[{i}]"
        cm = r.obj(c, cp)
        con: dict[str, Any] = {}
        if cm.get("requests") is not None:
            names = r.seq(cm["requests"], f"{cp}.requests", MAX_REQUESTS * MAX_SUBREQUESTS)
            con["requests"] = [r.text(n, f"{cp}.requests[{j}]") or "" for j, n in enumerate(names)]
        put_present(con, "matchAttribute", r.text(cm.get("matchAttribute"), f"{cp}.matchAttribute"))
        put_present(con, "distinctAttribute", r.text(cm.get("distinctAttribute"), f"{cp}.distinctAttribute"))
        constraints.append(con)
    return {"devices": {"requests": requests, "constraints": constraints}}


def _allocation(r: Reader, v: Any) -> dict[str, Any] | None:
    if v is None:
        return None
    am = r.obj(v, "status.allocation")
    dm = r.obj(am.get("devices"), "status.allocation.devices")
    results = []
    for i, x in enumerate(r.seq(dm.get("results"), "status.allocation.devices.results", MAX_RESULTS)):
        xp = f"status.allocation.devices.results[{i}]"
        xm = r.obj(x, xp)
        res: dict[str, Any] = {}
        for k in ("request", "driver", "pool", "device", "shareID"):
            put_present(res, k, r.text(xm.get(k), f"{xp}.{k}", 2 * MAX_NAME_LENGTH if k == "request" else MAX_NAME_LENGTH))
        put_present(res, "adminAccess", r.flag(xm.get("adminAccess"), f"{xp}.adminAccess"))
        if xm.get("consumedCapacity") is not None:
            cc = r.obj(xm["consumedCapacity"], f"{xp}.consumedCapacity", MAX_ATTRIBUTES_AND_CAPACITIES)
            res["consumedCapacity"] = {k: r.quantity(q, f"{xp}.consumedCapacity.{k}") for k, q in cc.items() if q is not None}
        results.append(res)
    out: dict[str, Any] = {"devices": {"results": results}}
    put_present(out, "nodeSelector", node_selector(r, am.get("nodeSelector"), "status.allocation.nodeSelector"))
    return out


def read_claim(obj: Any, index: int, *, kind: str = "ResourceClaim") -> dict[str, Any]:
    """A ResourceClaim's fields the simulator reads: metadata, spec and ``status.allocation``."""
    r, o = named_reader(kind, obj, index)
    out: dict[str, Any] = {"metadata": read_metadata(r, o.get("metadata")), "spec": claim_spec(r, o.get("spec"), "spec")}
    st = r.obj(o.get("status"), "status")
    alloc = _allocation(r, st.get("allocation"))
    if alloc is not None:
        out["status"] = {"allocation": alloc}
    return out


def read_allocated(obj: Any, index: int) -> dict[str, Any]:
    """An allocated claim as the cluster state needs it: metadata and ``status.allocation`` only."""
    r, o = named_reader("ResourceClaim", obj, index)
    out: dict[str, Any] = {"metadata": read_metadata(r, o.get("metadata"))}
    alloc = _allocation(r, r.obj(o.get("status"), "status").get("allocation"))
    if alloc is not None:
        out["status"] = {"allocation": alloc}
    return out
