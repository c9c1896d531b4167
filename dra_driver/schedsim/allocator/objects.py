"""Reads each API object the simulator takes (ResourceSlice, DeviceClass, ResourceClaim, node labels) into a clean copy.

Called by :func:`dra_driver.schedsim.allocator.explain` (all inputs, through ``read_inputs``) and
by ``dra-gpu explain`` (claim specs of claim templates). Each reader copies only the fields the
simulator reads, field by field through a :class:`~dra_driver.schedsim.allocator.validate.Reader`
(which checks each one's type and the API's item limits and raises ``InvalidObject``), and drops
what Go would ignore: unknown fields and nulls.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dra_driver.schedsim.allocator.fastread import DeviceMemo, read_device
from dra_driver.schedsim.allocator.validate import (
    MAX_ATTRIBUTE_VALUE_LENGTH,
    MAX_ATTRIBUTE_VALUES,
    MAX_ATTRIBUTES_AND_CAPACITIES,
    MAX_BINDING_CONDITIONS,
    MAX_COMPATIBILITY_GROUPS,
    MAX_CONSTRAINTS,
    MAX_CONSUMPTIONS_PER_DEVICE,
    MAX_COUNTER_SETS,
    MAX_COUNTERS_PER_SET,
    MAX_DERIVED_ATTRIBUTES,
    MAX_DEVICES_PER_SLICE,
    MAX_EXPRESSION_LENGTH,
    MAX_NAME_LENGTH,
    MAX_NODE_SELECTOR_TERMS,
    MAX_NODE_SELECTOR_VALUES,
    MAX_NODES,
    MAX_REQUESTS,
    MAX_RESULTS,
    MAX_SELECTORS,
    MAX_STRING_LENGTH,
    MAX_SUBREQUESTS,
    MAX_TAINTS,
    MAX_TOLERATIONS,
    MAX_VALID_VALUES,
    Reader,
    plain_quantity,
    show,
)


def _put(out: dict[str, Any], key: str, value: Any) -> None:
    if value is not None:
        out[key] = value


def _label(kind: str, obj: Any, index: int) -> tuple[Reader, Mapping[str, Any]]:
    """A reader named after the object (``Kind ns/name``, or ``Kind #index`` when it has no usable name)."""
    r = Reader(f"{kind} #{index + 1}")
    o = r.top(obj)
    meta = o.get("metadata")
    if isinstance(meta, Mapping):
        name, ns = meta.get("name"), meta.get("namespace")
        if isinstance(name, str) and name and len(name) <= MAX_NAME_LENGTH:
            prefix = f"{show(ns)}/" if isinstance(ns, str) and ns and len(ns) <= MAX_NAME_LENGTH else ""
            r.label = f"{kind} {prefix}{show(name)}"
    return r, o


def _metadata(r: Reader, v: Any) -> dict[str, Any]:
    m = r.obj(v, "metadata")
    out: dict[str, Any] = {}
    for k in ("name", "namespace", "uid"):
        _put(out, k, r.text(m.get(k), f"metadata.{k}"))
    return out


def node_selector(r: Reader, v: Any, path: str) -> dict[str, Any] | None:
    """A ``NodeSelector``."""
    if v is None:
        return None
    m = r.obj(v, path)
    terms = []
    for i, t in enumerate(r.seq(m.get("nodeSelectorTerms"), f"{path}.nodeSelectorTerms", MAX_NODE_SELECTOR_TERMS)):
        tp = f"{path}.nodeSelectorTerms[{i}]"
        tm = r.obj(t, tp)
        term: dict[str, Any] = {}
        for field in ("matchExpressions", "matchFields"):
            reqs = []
            for j, e in enumerate(r.seq(tm.get(field), f"{tp}.{field}", MAX_NODE_SELECTOR_TERMS)):
                ep = f"{tp}.{field}[{j}]"
                em = r.obj(e, ep)
                req: dict[str, Any] = {}
                _put(req, "key", r.text(em.get("key"), f"{ep}.key"))
                _put(req, "operator", r.text(em.get("operator"), f"{ep}.operator", MAX_STRING_LENGTH))
                vals = r.seq(em.get("values"), f"{ep}.values", MAX_NODE_SELECTOR_VALUES)
                req["values"] = [r.text(x, f"{ep}.values[{k}]", MAX_STRING_LENGTH) for k, x in enumerate(vals)]
                reqs.append(req)
            if field in tm:
                term[field] = reqs
        terms.append(term)
    return {"nodeSelectorTerms": terms}


def _counters(r: Reader, v: Any, path: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, c in r.obj(v, path, MAX_COUNTERS_PER_SET).items():
        if type(c) is dict and len(c) == 1 and plain_quantity(c.get("value")):  # the usual {"value": "1"}
            out[name] = {"value": c["value"]}
            continue
        cm = r.obj(c, f"{path}.{name}")
        counter: dict[str, Any] = {}
        _put(counter, "value", r.quantity(cm.get("value"), f"{path}.{name}.value"))
        out[name] = counter
    return out


_ATTRIBUTE_SCALARS = ("int", "bool", "string", "version")
_ATTRIBUTE_LISTS = ("ints", "bools", "strings", "versions")


def _attribute_value(r: Reader, kind: str, v: Any, path: str) -> Any:
    if kind == "int":
        return r.integer(v, path)
    if kind == "bool":
        return r.flag(v, path)
    return r.text(v, path, MAX_ATTRIBUTE_VALUE_LENGTH)


def _attributes(r: Reader, v: Any, path: str) -> tuple[dict[str, Any], int]:
    out: dict[str, Any] = {}
    values = 0
    for name, a in r.obj(v, path, MAX_ATTRIBUTES_AND_CAPACITIES).items():
        if type(a) is dict and len(a) == 1:  # the usual form, one scalar: copied as the loop below would
            ((kind, x),) = a.items()
            tx = type(x)
            if (
                (kind in {"string", "version"} and tx is str and len(x) <= MAX_ATTRIBUTE_VALUE_LENGTH)
                or (kind == "int" and tx is int and -(2**63) <= x < 2**63)
                or (kind == "bool" and tx is bool)
            ):
                out[name] = {kind: x}
                values += 1
                continue
        ap = f"{path}.{name}"
        am = r.obj(a, ap)
        attr: dict[str, Any] = {}
        for kind in _ATTRIBUTE_SCALARS:
            if am.get(kind) is not None:
                attr[kind] = _attribute_value(r, kind, am[kind], f"{ap}.{kind}")
                values += 1
        for kind in _ATTRIBUTE_LISTS:
            if am.get(kind) is not None:
                items = r.seq(am[kind], f"{ap}.{kind}", MAX_ATTRIBUTE_VALUES)
                attr[kind] = [_attribute_value(r, kind[:-1], x, f"{ap}.{kind}[{i}]") for i, x in enumerate(items)]
                values += len(items)
        out[name] = attr
    return out, values


def _capacities(r: Reader, v: Any, path: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, c in r.obj(v, path, MAX_ATTRIBUTES_AND_CAPACITIES).items():
        if type(c) is dict and len(c) == 1 and plain_quantity(c.get("value")):  # the usual {"value": "80Gi"}
            out[name] = {"value": c["value"]}
            continue
        cp = f"{path}.{name}"
        cm = r.obj(c, cp)
        cap: dict[str, Any] = {}
        _put(cap, "value", r.quantity(cm.get("value"), f"{cp}.value"))
        if cm.get("requestPolicy") is not None:
            pp = f"{cp}.requestPolicy"
            pm = r.obj(cm["requestPolicy"], pp)
            policy: dict[str, Any] = {}
            _put(policy, "default", r.quantity(pm.get("default"), f"{pp}.default"))
            if pm.get("validRange") is not None:
                rm = r.obj(pm["validRange"], f"{pp}.validRange")
                vr: dict[str, Any] = {}
                for k in ("min", "max", "step"):
                    _put(vr, k, r.quantity(rm.get(k), f"{pp}.validRange.{k}"))
                policy["validRange"] = vr
            if pm.get("validValues") is not None:
                vals = r.seq(pm["validValues"], f"{pp}.validValues", MAX_VALID_VALUES)
                policy["validValues"] = [r.quantity(x, f"{pp}.validValues[{i}]") or "" for i, x in enumerate(vals)]
            cap["requestPolicy"] = policy
        out[name] = cap
    return out


def _device(r: Reader, v: Any, path: str) -> dict[str, Any]:
    m = r.obj(v, path)
    out: dict[str, Any] = {}
    _put(out, "name", r.text(m.get("name"), f"{path}.name"))
    attrs, values = _attributes(r, m.get("attributes"), f"{path}.attributes")
    caps = _capacities(r, m.get("capacity"), f"{path}.capacity")
    if len(attrs) + len(caps) > MAX_ATTRIBUTES_AND_CAPACITIES:
        r.fail(path, f"{len(attrs) + len(caps)} attributes and capacities, at most {MAX_ATTRIBUTES_AND_CAPACITIES} allowed")
    if values > MAX_ATTRIBUTE_VALUES:
        r.fail(f"{path}.attributes", f"{values} attribute values, at most {MAX_ATTRIBUTE_VALUES} allowed")
    if "attributes" in m:
        out["attributes"] = attrs
    if "capacity" in m:
        out["capacity"] = caps
    _put(out, "allowMultipleAllocations", r.flag(m.get("allowMultipleAllocations"), f"{path}.allowMultipleAllocations"))
    if m.get("consumesCounters") is not None:
        ccs = []
        for i, cc in enumerate(r.seq(m["consumesCounters"], f"{path}.consumesCounters", MAX_CONSUMPTIONS_PER_DEVICE)):
            ccp = f"{path}.consumesCounters[{i}]"
            ccm = r.obj(cc, ccp)
            consumption: dict[str, Any] = {"counters": _counters(r, ccm.get("counters"), f"{ccp}.counters")}
            _put(consumption, "counterSet", r.text(ccm.get("counterSet"), f"{ccp}.counterSet"))
            if ccm.get("compatibilityGroups") is not None:  # 1.37+, alpha: the allocator asks only whether there are any
                groups = r.seq(ccm["compatibilityGroups"], f"{ccp}.compatibilityGroups", MAX_COMPATIBILITY_GROUPS)
                consumption["compatibilityGroups"] = [
                    r.text(g, f"{ccp}.compatibilityGroups[{j}]", MAX_NAME_LENGTH) or "" for j, g in enumerate(groups)
                ]
            ccs.append(consumption)
        out["consumesCounters"] = ccs
    if m.get("taints") is not None:
        taints = []
        for i, t in enumerate(r.seq(m["taints"], f"{path}.taints", MAX_TAINTS)):
            tp = f"{path}.taints[{i}]"
            tm = r.obj(t, tp)
            taint: dict[str, Any] = {}
            for k in ("key", "value", "effect"):
                _put(taint, k, r.text(tm.get(k), f"{tp}.{k}", MAX_STRING_LENGTH))
            taints.append(taint)
        out["taints"] = taints
    _put(out, "nodeName", r.text(m.get("nodeName"), f"{path}.nodeName"))
    _put(out, "allNodes", r.flag(m.get("allNodes"), f"{path}.allNodes"))
    _put(out, "nodeSelector", node_selector(r, m.get("nodeSelector"), f"{path}.nodeSelector"))
    for key in ("bindingConditions", "bindingFailureConditions"):  # present (even empty) is what the allocator asks
        if m.get(key) is not None:
            out[key] = [
                r.text(c, f"{path}.{key}[{i}]", MAX_STRING_LENGTH) or ""
                for i, c in enumerate(r.seq(m[key], f"{path}.{key}", MAX_BINDING_CONDITIONS))
            ]
    _put(out, "bindsToNode", r.flag(m.get("bindsToNode"), f"{path}.bindsToNode"))
    return out


def _slow_device(r: Reader, v: Any, path: str, memo: DeviceMemo) -> dict[str, Any]:
    """:func:`_device`, noting in ``memo`` a device that declares compatibility groups."""
    out = _device(r, v, path)
    if not memo.groups and any(cc.get("compatibilityGroups") for cc in out.get("consumesCounters") or ()):
        memo.groups = True
    return out


def read_slice(obj: Any, index: int, memo: DeviceMemo | None = None) -> dict[str, Any]:
    """A ResourceSlice's fields the simulator reads (``index``: its place in the input, for messages).

    ``memo``: the parts of devices read before in the same explanation (see ``fastread.py``);
    devices of the usual shape are read through it, the others (and those it declines) field by field.
    """
    r, o = _label("ResourceSlice", obj, index)
    sp = r.obj(o.get("spec"), "spec")
    spec: dict[str, Any] = {}
    _put(spec, "driver", r.text(sp.get("driver"), "spec.driver"))
    pm = r.obj(sp.get("pool"), "spec.pool")
    pool: dict[str, Any] = {}
    _put(pool, "name", r.text(pm.get("name"), "spec.pool.name"))
    _put(pool, "generation", r.integer(pm.get("generation"), "spec.pool.generation"))
    _put(pool, "resourceSliceCount", r.integer(pm.get("resourceSliceCount"), "spec.pool.resourceSliceCount"))
    spec["pool"] = pool
    _put(spec, "nodeName", r.text(sp.get("nodeName"), "spec.nodeName"))
    _put(spec, "allNodes", r.flag(sp.get("allNodes"), "spec.allNodes"))
    _put(spec, "nodeSelector", node_selector(r, sp.get("nodeSelector"), "spec.nodeSelector"))
    _put(spec, "perDeviceNodeSelection", r.flag(sp.get("perDeviceNodeSelection"), "spec.perDeviceNodeSelection"))
    if memo is None:
        memo = DeviceMemo()
    if sp.get("sharedCounters") is not None:
        sets = []
        read_counters = memo.counters
        for i, cs in enumerate(r.seq(sp["sharedCounters"], "spec.sharedCounters", MAX_COUNTER_SETS)):
            csp = f"spec.sharedCounters[{i}]"
            csm = r.obj(cs, csp)
            counters_in = csm.get("counters")
            # The same input map read before (the decoder shares equal ones): its checked copy, read once.
            hit = read_counters.get(id(counters_in))
            if hit is None or hit[0] is not counters_in:
                hit = read_counters[id(counters_in)] = (counters_in, _counters(r, counters_in, f"{csp}.counters"))
            counter_set: dict[str, Any] = {"counters": hit[1]}
            _put(counter_set, "name", r.text(csm.get("name"), f"{csp}.name"))
            sets.append(counter_set)
        spec["sharedCounters"] = sets
    if sp.get("devices") is not None:
        devices = r.seq(sp["devices"], "spec.devices", MAX_DEVICES_PER_SLICE)
        spec["devices"] = [read_device(d, memo) or _slow_device(r, d, f"spec.devices[{i}]", memo) for i, d in enumerate(devices)]
    return {"metadata": _metadata(r, o.get("metadata")), "spec": spec}


def read_class(obj: Any, name: str) -> dict[str, Any]:
    """A DeviceClass's fields the simulator reads (``name``: the name it is known by)."""
    r, o = _label("DeviceClass", obj, 0)
    if r.label.startswith("DeviceClass #"):
        r.label = f"DeviceClass {show(name)}"
    sp = r.obj(o.get("spec"), "spec")
    selectors = _selectors(r, sp.get("selectors"), "spec.selectors")
    return {"metadata": _metadata(r, o.get("metadata")), "spec": {"selectors": selectors}}


def _selectors(r: Reader, v: Any, path: str) -> list[dict[str, Any]]:
    out = []
    for i, s in enumerate(r.seq(v, path, MAX_SELECTORS)):
        sm = r.obj(s, f"{path}[{i}]")
        sel: dict[str, Any] = {}
        if sm.get("cel") is not None:
            cm = r.obj(sm["cel"], f"{path}[{i}].cel")
            cel: dict[str, Any] = {}
            _put(cel, "expression", r.text(cm.get("expression"), f"{path}[{i}].cel.expression", MAX_EXPRESSION_LENGTH))
            sel["cel"] = cel
        out.append(sel)
    return out


def _request_body(r: Reader, m: Mapping[str, Any], path: str) -> dict[str, Any]:
    """The fields of an ``exactly`` block, a subrequest, or a v1beta1 request."""
    out: dict[str, Any] = {}
    _put(out, "deviceClassName", r.text(m.get("deviceClassName"), f"{path}.deviceClassName"))
    if m.get("selectors") is not None:
        out["selectors"] = _selectors(r, m["selectors"], f"{path}.selectors")
    _put(out, "allocationMode", r.text(m.get("allocationMode"), f"{path}.allocationMode", MAX_STRING_LENGTH))
    count = r.integer(m.get("count"), f"{path}.count")
    if count is not None and count < 1:
        r.fail(f"{path}.count", "must be greater than zero")
    _put(out, "count", count)
    _put(out, "adminAccess", r.flag(m.get("adminAccess"), f"{path}.adminAccess"))
    if m.get("tolerations") is not None:
        tols = []
        for i, t in enumerate(r.seq(m["tolerations"], f"{path}.tolerations", MAX_TOLERATIONS)):
            tp = f"{path}.tolerations[{i}]"
            tm = r.obj(t, tp)
            tol: dict[str, Any] = {}
            for k in ("key", "operator", "value", "effect"):
                _put(tol, k, r.text(tm.get(k), f"{tp}.{k}", MAX_STRING_LENGTH))
            _put(tol, "tolerationSeconds", r.integer(tm.get("tolerationSeconds"), f"{tp}.tolerationSeconds"))
            tols.append(tol)
        out["tolerations"] = tols
    if m.get("derivedAttributes") is not None:  # 1.37+, alpha: refused while DRADerivedAttributes is off
        derived = []
        for i, a in enumerate(r.seq(m["derivedAttributes"], f"{path}.derivedAttributes", MAX_DERIVED_ATTRIBUTES)):
            ap = f"{path}.derivedAttributes[{i}]"
            am = r.obj(a, ap)
            attr: dict[str, Any] = {}
            _put(attr, "name", r.text(am.get("name"), f"{ap}.name"))
            _put(attr, "expression", r.text(am.get("expression"), f"{ap}.expression", MAX_EXPRESSION_LENGTH))
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
        _put(req, "name", r.text(qm.get("name"), f"{qp}.name"))
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
                _put(sub, "name", r.text(smap.get("name"), f"{sp}.name"))
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
        _put(con, "matchAttribute", r.text(cm.get("matchAttribute"), f"{cp}.matchAttribute"))
        _put(con, "distinctAttribute", r.text(cm.get("distinctAttribute"), f"{cp}.distinctAttribute"))
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
            _put(res, k, r.text(xm.get(k), f"{xp}.{k}", 2 * MAX_NAME_LENGTH if k == "request" else MAX_NAME_LENGTH))
        _put(res, "adminAccess", r.flag(xm.get("adminAccess"), f"{xp}.adminAccess"))
        if xm.get("consumedCapacity") is not None:
            cc = r.obj(xm["consumedCapacity"], f"{xp}.consumedCapacity", MAX_ATTRIBUTES_AND_CAPACITIES)
            res["consumedCapacity"] = {k: r.quantity(q, f"{xp}.consumedCapacity.{k}") for k, q in cc.items() if q is not None}
        results.append(res)
    out: dict[str, Any] = {"devices": {"results": results}}
    _put(out, "nodeSelector", node_selector(r, am.get("nodeSelector"), "status.allocation.nodeSelector"))
    return out


def read_claim(obj: Any, index: int, *, kind: str = "ResourceClaim") -> dict[str, Any]:
    """A ResourceClaim's fields the simulator reads: metadata, spec and ``status.allocation``."""
    r, o = _label(kind, obj, index)
    out: dict[str, Any] = {"metadata": _metadata(r, o.get("metadata")), "spec": claim_spec(r, o.get("spec"), "spec")}
    st = r.obj(o.get("status"), "status")
    alloc = _allocation(r, st.get("allocation"))
    if alloc is not None:
        out["status"] = {"allocation": alloc}
    return out


def read_allocated(obj: Any, index: int) -> dict[str, Any]:
    """An allocated claim as the cluster state needs it: metadata and ``status.allocation`` only."""
    r, o = _label("ResourceClaim", obj, index)
    out: dict[str, Any] = {"metadata": _metadata(r, o.get("metadata"))}
    alloc = _allocation(r, r.obj(o.get("status"), "status").get("allocation"))
    if alloc is not None:
        out["status"] = {"allocation": alloc}
    return out


def read_node_labels(labels: Any) -> dict[str, dict[str, str]]:
    """Node name -> labels, checked."""
    r = Reader("node labels")
    out: dict[str, dict[str, str]] = {}
    for node, lm in r.obj(labels, "", MAX_NODES).items():
        r.label = f"Node {show(node)}"
        got = r.obj(lm, "metadata.labels", 10_000)
        out[node] = {k: r.text(v, f"metadata.labels.{k}", MAX_STRING_LENGTH) or "" for k, v in got.items()}
    return out
