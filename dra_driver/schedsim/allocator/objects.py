"""Reads the ResourceSlices and node labels the simulator takes into clean copies.

Called by :func:`dra_driver.schedsim.allocator.explain` (through ``read_inputs``); DeviceClasses
and ResourceClaims are read by ``claim_objects.py``, the same way. Each reader copies only the fields the
simulator reads, field by field through a :class:`~dra_driver.schedsim.allocator.validate.Reader`
(which checks each one's type and the API's item limits and raises ``InvalidObject``), and drops
what Go would ignore: unknown fields and nulls.
"""

from __future__ import annotations

from typing import Any

from dra_driver.schedsim.allocator.fastread import DeviceMemo, read_device
from dra_driver.schedsim.allocator.validate import (
    MAX_ATTRIBUTE_VALUE_LENGTH,
    MAX_ATTRIBUTE_VALUES,
    MAX_ATTRIBUTES_AND_CAPACITIES,
    MAX_BINDING_CONDITIONS,
    MAX_COMPATIBILITY_GROUPS,
    MAX_CONSUMPTIONS_PER_DEVICE,
    MAX_COUNTER_SETS,
    MAX_COUNTERS_PER_SET,
    MAX_DEVICES_PER_SLICE,
    MAX_NAME_LENGTH,
    MAX_NODE_SELECTOR_TERMS,
    MAX_NODE_SELECTOR_VALUES,
    MAX_NODES,
    MAX_STRING_LENGTH,
    MAX_TAINTS,
    MAX_VALID_VALUES,
    Reader,
    named_reader,
    plain_quantity,
    put_present,
    read_metadata,
    show,
)


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
                put_present(req, "key", r.text(em.get("key"), f"{ep}.key"))
                put_present(req, "operator", r.text(em.get("operator"), f"{ep}.operator", MAX_STRING_LENGTH))
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
        put_present(counter, "value", r.quantity(cm.get("value"), f"{path}.{name}.value"))
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
        put_present(cap, "value", r.quantity(cm.get("value"), f"{cp}.value"))
        if cm.get("requestPolicy") is not None:
            pp = f"{cp}.requestPolicy"
            pm = r.obj(cm["requestPolicy"], pp)
            policy: dict[str, Any] = {}
            put_present(policy, "default", r.quantity(pm.get("default"), f"{pp}.default"))
            if pm.get("validRange") is not None:
                rm = r.obj(pm["validRange"], f"{pp}.validRange")
                vr: dict[str, Any] = {}
                for k in ("min", "max", "step"):
                    put_present(vr, k, r.quantity(rm.get(k), f"{pp}.validRange.{k}"))
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
    put_present(out, "name", r.text(m.get("name"), f"{path}.name"))
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
    put_present(out, "allowMultipleAllocations", r.flag(m.get("allowMultipleAllocations"), f"{path}.allowMultipleAllocations"))
    if m.get("consumesCounters") is not None:
        ccs = []
        for i, cc in enumerate(r.seq(m["consumesCounters"], f"{path}.consumesCounters", MAX_CONSUMPTIONS_PER_DEVICE)):
            ccp = f"{path}.consumesCounters[{i}]"
            ccm = r.obj(cc, ccp)
            consumption: dict[str, Any] = {"counters": _counters(r, ccm.get("counters"), f"{ccp}.counters")}
            put_present(consumption, "counterSet", r.text(ccm.get("counterSet"), f"{ccp}.counterSet"))
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
                put_present(taint, k, r.text(tm.get(k), f"{tp}.{k}", MAX_STRING_LENGTH))
            taints.append(taint)
        out["taints"] = taints
    put_present(out, "nodeName", r.text(m.get("nodeName"), f"{path}.nodeName"))
    put_present(out, "allNodes", r.flag(m.get("allNodes"), f"{path}.allNodes"))
    put_present(out, "nodeSelector", node_selector(r, m.get("nodeSelector"), f"{path}.nodeSelector"))
    for key in ("bindingConditions", "bindingFailureConditions"):  # present (even empty) is what the allocator asks
        if m.get(key) is not None:
            out[key] = [
                r.text(c, f"{path}.{key}[{i}]", MAX_STRING_LENGTH) or ""
                for i, c in enumerate(r.seq(m[key], f"{path}.{key}", MAX_BINDING_CONDITIONS))
            ]
    put_present(out, "bindsToNode", r.flag(m.get("bindsToNode"), f"{path}.bindsToNode"))
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
    r, o = named_reader("ResourceSlice", obj, index)
    sp = r.obj(o.get("spec"), "spec")
    spec: dict[str, Any] = {}
    put_present(spec, "driver", r.text(sp.get("driver"), "spec.driver"))
    pm = r.obj(sp.get("pool"), "spec.pool")
    pool: dict[str, Any] = {}
    put_present(pool, "name", r.text(pm.get("name"), "spec.pool.name"))
    put_present(pool, "generation", r.integer(pm.get("generation"), "spec.pool.generation"))
    put_present(pool, "resourceSliceCount", r.integer(pm.get("resourceSliceCount"), "spec.pool.resourceSliceCount"))
    spec["pool"] = pool
    put_present(spec, "nodeName", r.text(sp.get("nodeName"), "spec.nodeName"))
    put_present(spec, "allNodes", r.flag(sp.get("allNodes"), "spec.allNodes"))
    put_present(spec, "nodeSelector", node_selector(r, sp.get("nodeSelector"), "spec.nodeSelector"))
    put_present(spec, "perDeviceNodeSelection", r.flag(sp.get("perDeviceNodeSelection"), "spec.perDeviceNodeSelection"))
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
            put_present(counter_set, "name", r.text(csm.get("name"), f"{csp}.name"))
            sets.append(counter_set)
        spec["sharedCounters"] = sets
    if sp.get("devices") is not None:
        devices = r.seq(sp["devices"], "spec.devices", MAX_DEVICES_PER_SLICE)
        spec["devices"] = [read_device(d, memo) or _slow_device(r, d, f"spec.devices[{i}]", memo) for i, d in enumerate(devices)]
    return {"metadata": read_metadata(r, o.get("metadata")), "spec": spec}


def read_node_labels(labels: Any) -> dict[str, dict[str, str]]:
    """Node name -> labels, checked."""
    r = Reader("node labels")
    out: dict[str, dict[str, str]] = {}
    for node, lm in r.obj(labels, "", MAX_NODES).items():
        r.label = f"Node {show(node)}"
        got = r.obj(lm, "metadata.labels", 10_000)
        out[node] = {k: r.text(v, f"metadata.labels.{k}", MAX_STRING_LENGTH) or "" for k, v in got.items()}
    return out
