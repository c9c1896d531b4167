"""Which allocator features a generated allocation case exercises, and how many cases had each.

``features(case)`` is a pure function over a celdiff ``allocate`` case (``allocations.py``): the
names, from ``FEATURES``, of everything the case holds that the scheduler's allocator treats
specially (node selection of every kind, binding conditions, admin access, taints and
tolerations, counters, consumable capacity, ``firstAvailable`` near and over the 32-device limit,
``All``, constraints, broken pools; list-typed attributes in selectors and constraints, compatibility
groups, derived attributes, fractional capacity ranges with DRAFractionalCapacityRange on and off).
The differential test counts them in ``COUNTS`` (and the Go
outcomes in ``OUTCOMES``), asserts every feature reached ``MIN_CASES``, and ``conftest.py`` prints
the table at the end of the session, so a feature the generator stopped producing shows as 0.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping
from typing import Any

MIN_CASES = 10  # of ALLOCATION_EXAMPLES, for every feature and every outcome
MAX_RESULTS = 32

FEATURES = (
    "slice nodeName: this node",
    "slice nodeName: another node",
    "slice allNodes",
    "slice nodeSelector",
    "pool spread over several node selections",
    "perDeviceNodeSelection",
    "device nodeName",
    "device allNodes",
    "device nodeSelector",
    "node selector In",
    "node selector NotIn",
    "node selector Exists",
    "node selector DoesNotExist",
    "node selector Gt/Lt",
    "node selector matchFields metadata.name",
    "node selector of several terms",
    "node selector with an empty term",
    "pool of several device slices",
    "incomplete pool",
    "stale slice generation",
    "pool slices disagree on slice count",
    "duplicate device name",
    "counter missing from the pool",
    "bindingConditions",
    "bindsToNode",
    "pool mixing binding and plain devices",
    "taint NoSchedule",
    "taint NoExecute",
    "taint None",
    "toleration Equal",
    "toleration Exists",
    "toleration with effect",
    "toleration without effect",
    "sharedCounters",
    "consumesCounters",
    "counters oversubscribed",
    "allowMultipleAllocations",
    "requestPolicy default only",
    "requestPolicy validRange",
    "requestPolicy validValues",
    "capacity request",
    "allocated: dedicated",
    "allocated: shared with consumedCapacity",
    "allocated: adminAccess",
    "adminAccess request",
    "ExactCount > 1",
    "allocationMode All",
    "All subrequest",
    "firstAvailable",
    "subrequest of 16+ devices",
    "claim over the limit with one choice",
    "claim over the limit with every choice",
    "several claims",
    "matchAttribute",
    "distinctAttribute",
    "constraint naming requests",
    "constraint naming a subrequest",
    "selector that errors",
    "list-typed attribute",
    "selector reading a list-typed attribute",
    "matchAttribute over a list-typed attribute",
    "distinctAttribute over a list-typed attribute",
    "constraint attribute a scalar here, a list there",
    "compatibilityGroups",
    "derivedAttributes",
    "fractional validRange",
    "fractional validRange, gate on",
    "fractional validRange, gate off",
    "capacity request in milli units",
)
OUTCOME_NAMES = ("allocated", "unsatisfiable", "error: abort", "error: node")

COUNTS: Counter[str] = Counter()
OUTCOMES: Counter[str] = Counter()


def outcome(answer: Mapping[str, Any]) -> str:
    """The name of a celdiff answer's outcome (one of ``OUTCOME_NAMES``)."""
    if answer.get("outcome") == "error":
        return f"error: {answer.get('class')}"
    return str(answer.get("outcome"))


def _selectors(case: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    for s in case["slices"]:
        sp = s["spec"]
        if sp.get("nodeSelector") is not None:
            yield sp["nodeSelector"]
        for d in sp.get("devices") or []:
            if d.get("nodeSelector") is not None:
                yield d["nodeSelector"]


def _node_selection(case: Mapping[str, Any], out: set[str]) -> None:
    node = case["node"]
    for s in case["slices"]:
        sp = s["spec"]
        if sp.get("nodeName"):
            out.add("slice nodeName: this node" if sp["nodeName"] == node else "slice nodeName: another node")
        if sp.get("allNodes"):
            out.add("slice allNodes")
        if sp.get("nodeSelector") is not None:
            out.add("slice nodeSelector")
        if sp.get("perDeviceNodeSelection"):
            out.add("perDeviceNodeSelection")
            for d in sp.get("devices") or []:
                out |= {f"device {k}" for k in ("nodeName", "allNodes", "nodeSelector") if d.get(k) is not None}
    for sel in _selectors(case):
        terms = sel.get("nodeSelectorTerms") or []
        if len(terms) > 1:
            out.add("node selector of several terms")
        for t in terms:
            if not t.get("matchExpressions") and not t.get("matchFields"):
                out.add("node selector with an empty term")
            for e in t.get("matchExpressions") or []:
                op = e.get("operator")
                out.add("node selector Gt/Lt" if op in ("Gt", "Lt") else f"node selector {op}")
            if t.get("matchFields"):
                out.add("node selector matchFields metadata.name")


def _pools(case: Mapping[str, Any], out: set[str]) -> None:
    pools: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for s in case["slices"]:
        sp = s["spec"]
        pools.setdefault((sp["driver"], sp["pool"]["name"]), []).append(sp)
    for specs in pools.values():
        gen = max(sp["pool"]["generation"] for sp in specs)
        current = [sp for sp in specs if sp["pool"]["generation"] == gen]
        if len(current) < len(specs):
            out.add("stale slice generation")
        counts = {sp["pool"]["resourceSliceCount"] for sp in current}
        if len(counts) > 1:
            out.add("pool slices disagree on slice count")
        elif len(current) != counts.pop():
            out.add("incomplete pool")
        targets = {
            repr([sp.get(k) for k in ("nodeName", "allNodes", "nodeSelector", "perDeviceNodeSelection")]) for sp in current
        }
        if len(targets) > 1:
            out.add("pool spread over several node selections")
        device_specs = [sp for sp in current if sp.get("devices")]
        if len(device_specs) > 1:
            out.add("pool of several device slices")
        names = [d["name"] for sp in device_specs for d in sp["devices"]]
        if len(set(names)) < len(names):
            out.add("duplicate device name")
        _counters(current, out)
        devices = [d for sp in device_specs for d in sp["devices"]]
        binding = [d.get("bindingConditions") is not None for d in devices]
        if any(binding) and not all(binding):
            out.add("pool mixing binding and plain devices")


def _counters(specs: list[Mapping[str, Any]], out: set[str]) -> None:
    sets = {cs["name"]: cs["counters"] for sp in specs for cs in sp.get("sharedCounters") or []}
    if sets:
        out.add("sharedCounters")
    used: Counter[tuple[str, str]] = Counter()
    for sp in specs:
        for d in sp.get("devices") or []:
            for cc in d.get("consumesCounters") or []:
                out.add("consumesCounters")
                for name, c in cc["counters"].items():
                    if name not in sets.get(cc["counterSet"], {}):
                        out.add("counter missing from the pool")
                    used[(cc["counterSet"], name)] += _gi(c["value"])
    if any(n > _gi(sets[cs][name]["value"]) for (cs, name), n in used.items() if name in sets.get(cs, {})):
        out.add("counters oversubscribed")


def _gi(value: str) -> int:
    return int(value.removesuffix("Gi")) if value.endswith("Gi") else 0


def _list_typed(a: Mapping[str, Any]) -> bool:
    return any(k in a for k in ("ints", "bools", "strings", "versions"))


def _devices(case: Mapping[str, Any], out: set[str]) -> None:
    fractional = False
    for s in case["slices"]:
        for d in s["spec"].get("devices") or []:
            if any(_list_typed(a) for a in (d.get("attributes") or {}).values()):
                out.add("list-typed attribute")
            if any(cc.get("compatibilityGroups") for cc in d.get("consumesCounters") or []):
                out.add("compatibilityGroups")
            for cap in (d.get("capacity") or {}).values():
                rng = (cap.get("requestPolicy") or {}).get("validRange") or {}
                fractional = fractional or any(str(v).endswith("m") for v in rng.values())
            if d.get("bindingConditions") is not None:
                out.add("bindingConditions")
            if d.get("bindsToNode"):
                out.add("bindsToNode")
            out |= {f"taint {t['effect']}" for t in d.get("taints") or []}
            if d.get("allowMultipleAllocations"):
                out.add("allowMultipleAllocations")
            for cap in (d.get("capacity") or {}).values():
                policy = cap.get("requestPolicy") or {}
                if "validRange" in policy:
                    out.add("requestPolicy validRange")
                elif "validValues" in policy:
                    out.add("requestPolicy validValues")
                elif "default" in policy:
                    out.add("requestPolicy default only")
    if fractional:
        out.add("fractional validRange")
        on = "DRAFractionalCapacityRange=true" in case.get("featureGates", "")
        out.add(f"fractional validRange, gate {'on' if on else 'off'}")
    for c in case["allocated"]:
        for r in c["status"]["allocation"]["devices"]["results"]:
            if r.get("adminAccess"):
                out.add("allocated: adminAccess")
            elif r.get("consumedCapacity") is not None:
                out.add("allocated: shared with consumedCapacity")
            elif not r.get("shareID"):
                out.add("allocated: dedicated")


def _request(body: Mapping[str, Any], out: set[str], *, sub: bool) -> None:
    if body.get("allocationMode") == "All":
        out.add("All subrequest" if sub else "allocationMode All")
    elif body.get("count", 1) > 1:
        out.add("ExactCount > 1")
    if sub and body.get("count", 1) >= 16:
        out.add("subrequest of 16+ devices")
    if body.get("adminAccess"):
        out.add("adminAccess request")
    if (body.get("capacity") or {}).get("requests"):
        out.add("capacity request")
        if any(str(v).endswith(("m", "u")) for v in body["capacity"]["requests"].values()):
            out.add("capacity request in milli units")
    if body.get("derivedAttributes"):
        out.add("derivedAttributes")
    for t in body.get("tolerations") or []:
        out.add(f"toleration {t['operator']}")
        out.add("toleration with effect" if t.get("effect") else "toleration without effect")
    for sel in body.get("selectors") or []:
        expr = sel["cel"]["expression"]
        if "coolingType" in expr or "model > 1" in expr or expr == "device.nope":
            out.add("selector that errors")
        if "nics" in expr or "orValue([])" in expr:
            out.add("selector reading a list-typed attribute")


def _claims(case: Mapping[str, Any], out: set[str]) -> None:
    if len(case["claims"]) > 1:
        out.add("several claims")
    if any(c["metadata"]["name"] == "broken" for c in case["classes"]):
        out.add("selector that errors")
    for claim in case["claims"]:
        lows, highs = 0, 0
        for r in claim["spec"]["devices"]["requests"]:
            subs = r.get("firstAvailable")
            if subs:
                out.add("firstAvailable")
                for sub in subs:
                    _request(sub, out, sub=True)
                counts = [s.get("count", 1) for s in subs if s.get("allocationMode") != "All"] or [0]
                lows, highs = lows + min(counts), highs + max(counts)
            else:
                _request(r["exactly"], out, sub=False)
                n = r["exactly"].get("count", 1) if r["exactly"].get("allocationMode") != "All" else 0
                lows, highs = lows + n, highs + n
        if lows > MAX_RESULTS:
            out.add("claim over the limit with every choice")
        elif highs > MAX_RESULTS:
            out.add("claim over the limit with one choice")
        for c in claim["spec"]["devices"].get("constraints") or []:
            kind = "matchAttribute" if "matchAttribute" in c else "distinctAttribute"
            out.add(kind)
            _list_constraint(case, kind, c[kind], out)
            if c.get("requests"):
                out.add("constraint naming requests")
                if any("/" in n for n in c["requests"]):
                    out.add("constraint naming a subrequest")


def _list_constraint(case: Mapping[str, Any], kind: str, name: str, out: set[str]) -> None:
    """A constraint's attribute: list-typed on some device of the case, a scalar on another."""
    ident = name.split("/", 1)[1] if "/" in name else name
    kinds = set()
    for s in case["slices"]:
        for d in s["spec"].get("devices") or []:
            a = (d.get("attributes") or {}).get(ident) or (d.get("attributes") or {}).get(name)
            if a is not None:
                kinds.add(_list_typed(a))
    if True in kinds:
        out.add(f"{kind} over a list-typed attribute")
        if False in kinds:
            out.add("constraint attribute a scalar here, a list there")


def features(case: Mapping[str, Any]) -> set[str]:
    """The names (from ``FEATURES``) of the allocator features ``case`` exercises."""
    out: set[str] = set()
    _node_selection(case, out)
    _pools(case, out)
    _devices(case, out)
    _claims(case, out)
    return out
