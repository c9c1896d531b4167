"""Hypothesis strategies for the cluster side of an allocation case: node labels and ResourceSlices.

Used by ``allocations.py``. A pool is one to three device slices plus, with counters, a slice of
counter sets; each slice selects nodes by ``nodeName`` (this node or another), ``allNodes``, a
one-term ``nodeSelector`` (``matchExpressions`` In/NotIn/Exists/DoesNotExist/Gt/Lt over the node
labels the case generates, ``matchFields`` on ``metadata.name``) or ``perDeviceNodeSelection``
(each device names its node, all nodes, or a selector of up to two terms). Slices of one pool may
target different nodes; some keep a stale generation. A pool given one of ``FLAWS`` misses a
slice (incomplete), disagrees on its slice count, repeats a device name or consumes a counter or
counter set that does not exist (invalid).
Devices carry attributes (``numa`` sometimes list-typed, ``nics`` always: one attribute name a
scalar on some devices and a list on others), capacity (shareable ones with a request policy that
fits the capacity, as API validation demands; ``cores`` with a fractional ``validRange`` in milli
units), counter consumption (sometimes naming compatibility groups), taints of every effect,
binding conditions (with failure conditions, as validation demands) and ``bindsToNode``; some
pools mix devices with and without binding conditions. The bulk pool holds 34-40 plain devices for the claims that
push against the 32-device limit.

Details come from a ``random.Random`` seeded by a Hypothesis draw per object (a draw per field
would make the cases take most of the suite's time budget); sizes and counts are drawn directly,
so shrinking still removes slices, devices and claims.
"""

from __future__ import annotations

import json
import random
from typing import Any

from hypothesis import strategies as st

from testkit.oracle.devices import Draw

NODE = "node-a"
OTHER_NODE = "node-b"
HOSTNAME = "kubernetes.io/hostname"
RACK = "topology.example.com/rack"
FAMILY = "example.com/gpu-family"
SLOTS = "example.com/slots"
LABEL_VALUES = {HOSTNAME: (NODE, OTHER_NODE), RACK: ("r1", "r2"), FAMILY: ("hopper", "ampere"), SLOTS: ("4", "8", "16")}
BULK_DRIVER = "bulk.example.com"
MODELS = ("H100", "A100", "L4")
NICS = ("nic0", "nic1", "nic2")
TAINT_KEYS = ("example.com/broken", "example.com/maint")
CONDITIONS = ("example.com/attached", "example.com/ready")
FAILURE_CONDITIONS = ("example.com/failed", "example.com/timeout")
SEEDS = st.integers(0, 2**32 - 1)


def rng_of(draw: Draw[Any]) -> random.Random:
    """A random source for one object's details, seeded by Hypothesis."""
    return random.Random(draw(SEEDS))


def node_labels(rng: random.Random) -> dict[str, str]:
    """The labels of the node the case allocates for (each optional label present most of the time)."""
    labels = {HOSTNAME: NODE}
    for key in (RACK, FAMILY, SLOTS):
        if rng.random() < 0.75:
            labels[key] = rng.choice(LABEL_VALUES[key])
    return labels


def _expression(rng: random.Random, labels: dict[str, str]) -> dict[str, Any]:
    """A ``matchExpressions`` requirement; most select the node (``labels``), some do not."""
    want = rng.random() < 0.7  # whether it should select the node; the rest are left to chance
    op = rng.choice(("In", "In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"))
    if op in ("Gt", "Lt"):
        # An integer value, as the label selector parser demands; a label that is no integer never matches.
        key = SLOTS if rng.random() < 0.85 else RACK
        slots = int(labels.get(SLOTS, "8"))
        value = (slots - 2 if op == "Gt" else slots + 2) if want else rng.choice((4, 6, 8, 16))
        return {"key": key, "operator": op, "values": [str(value)]}
    key = rng.choice((RACK, RACK, FAMILY, SLOTS, HOSTNAME))
    if op in ("Exists", "DoesNotExist"):
        if want:
            key = rng.choice([k for k in LABEL_VALUES if (k in labels) == (op == "Exists")] or [key])
        return {"key": key, "operator": op}
    options = list(LABEL_VALUES[key])
    values = rng.sample(options, rng.randint(1, min(2, len(options))))
    have = labels.get(key)
    if want and have is not None:
        values = sorted({*values, have}) if op == "In" else [v for v in values if v != have] or [v for v in options if v != have]
    return {"key": key, "operator": op, "values": values}


def _term(rng: random.Random, labels: dict[str, str], *, empty_ok: bool) -> dict[str, Any]:
    if empty_ok and rng.random() < 0.08:
        return {}  # valid, and selects no node
    term: dict[str, Any] = {}
    n_fields = 1 if rng.random() < 0.25 else 0
    n_exprs = rng.choice((1, 1, 2)) if n_fields == 0 or rng.random() < 0.5 else 0
    if n_exprs:
        term["matchExpressions"] = [_expression(rng, labels) for _ in range(n_exprs)]
    if n_fields:
        op, name = rng.choice((("In", NODE), ("In", NODE), ("In", OTHER_NODE), ("NotIn", OTHER_NODE), ("NotIn", NODE)))
        term["matchFields"] = [{"key": "metadata.name", "operator": op, "values": [name]}]
    return term


def node_selector(rng: random.Random, labels: dict[str, str], *, terms: int) -> dict[str, Any]:
    """A node selector of ``terms`` terms (a slice's has exactly one, as validation demands)."""
    return {"nodeSelectorTerms": [_term(rng, labels, empty_ok=terms > 1 or rng.random() < 0.5) for _ in range(terms)]}


def _targeting(rng: random.Random, labels: dict[str, str], *, per_device_ok: bool) -> dict[str, Any]:
    """A slice's node selection: exactly one of the four fields."""
    kind = rng.choice(
        ("node",) * 7 + ("other",) * 2 + ("all",) * 3 + ("selector",) * 4 + (("device",) * 4 if per_device_ok else ())
    )
    if kind == "node":
        return {"nodeName": NODE}
    if kind == "other":
        return {"nodeName": OTHER_NODE}
    if kind == "all":
        return {"allNodes": True}
    if kind == "selector":
        return {"nodeSelector": node_selector(rng, labels, terms=1)}
    return {"perDeviceNodeSelection": True}


def _device_targeting(rng: random.Random, labels: dict[str, str]) -> dict[str, Any]:
    kind = rng.choice(("node", "node", "other", "all", "selector", "selector"))
    if kind == "node":
        return {"nodeName": NODE}
    if kind == "other":
        return {"nodeName": OTHER_NODE}
    if kind == "all":
        return {"allNodes": True}
    return {"nodeSelector": node_selector(rng, labels, terms=rng.choice((1, 1, 2)))}


def _policy(rng: random.Random, value_gi: int) -> dict[str, Any] | None:
    """A request policy API validation accepts for a capacity of ``value_gi`` Gi, or None."""
    kind = rng.choice(("none", "default", "range", "range", "values", "values"))
    if kind == "none":
        return None
    if kind == "default":
        return {"default": rng.choice(("8Gi", "10Gi"))}
    if kind == "range":
        lo = rng.choice((1, 4, 8))
        step = rng.choice((None, 2, 4, 8))
        if step is not None and lo + step > value_gi:
            step = None
        valid_range: dict[str, Any] = {"min": f"{lo}Gi"}
        default = lo + (step or 0) * rng.randint(0, 1)
        if step is not None:
            valid_range["step"] = f"{step}Gi"
        if rng.random() < 0.5:
            span = (value_gi - default) // (step or 1)
            valid_range["max"] = f"{default + (step or 1) * rng.randint(0, span)}Gi"
        return {"default": f"{default}Gi", "validRange": valid_range}
    values = sorted(rng.sample([v for v in (4, 8, 16, 32, 40, 80) if v <= value_gi], rng.randint(1, 3)))
    return {"default": f"{rng.choice(values)}Gi", "validValues": [f"{v}Gi" for v in values]}


# Fractional ranges of ``cores`` (KEP-5491): bounds exact in milli units, the default on a step.
FRACTIONAL_RANGES = (
    {"default": "1", "validRange": {"min": "100m", "step": "100m"}},
    {"default": "1", "validRange": {"min": "250m", "step": "250m", "max": "4"}},
    {"default": "500m", "validRange": {"min": "500m", "step": "500m"}},
    {"default": "1500m", "validRange": {"min": "1500m"}},
)


def _capacity(rng: random.Random, shared: bool) -> dict[str, Any]:
    value_gi = rng.choice((16, 40, 80))
    cap: dict[str, Any] = {"memory": {"value": f"{value_gi}Gi"}}
    if rng.random() < (0.5 if shared else 0.2):
        cap["cores"] = {"value": rng.choice(("4", "8"))}
    if shared:
        policy = _policy(rng, value_gi)
        if policy is not None:
            cap["memory"]["requestPolicy"] = policy
        if "cores" in cap and rng.random() < 0.6:
            cap["cores"]["requestPolicy"] = json.loads(json.dumps(rng.choice(FRACTIONAL_RANGES)))
    return cap


def device(
    rng: random.Random, driver: str, name: str, index: int, *, counter_sets: list[str], binding: bool, lists: float = 1.0
) -> dict[str, Any]:
    """One device of a slice (``counter_sets``: those of its pool, ``binding``: with binding conditions).

    ``lists``: how often list-typed attributes come, relative to a 1.37 case (before 1.37 any
    selector fails on such a device, so older releases get fewer, to keep their other cases).
    """
    attrs: dict[str, Any] = {"model": {"string": rng.choice(MODELS)}, "index": {"int": index}}
    if rng.random() < 0.75:
        # Sometimes list-typed (1.37 converts it for CEL; constraints compare it as a non-scalar).
        listed = rng.random() < 0.2 * lists
        attrs["numa"] = {"ints": sorted(rng.sample((0, 1), rng.randint(1, 2)))} if listed else {"int": rng.randint(0, 1)}
    if rng.random() < 0.15 * lists and "ints" not in attrs.get("numa", {}):  # (one list: before 1.37 the only failing one)
        attrs["nics"] = {"strings": rng.sample(NICS, rng.randint(1, 2))}
    if rng.random() < 0.75:
        attrs["migCapable"] = {"bool": rng.random() < 0.5}
    if rng.random() < 0.75:
        attrs["driverVersion"] = {"version": rng.choice(("550.1.0", "570.0.0", "580.95.5"))}
    if rng.random() < 0.4:
        attrs[f"{driver}/pcieRoot"] = {"string": rng.choice(("pci0", "pci1"))}
    if rng.random() < 0.2:
        attrs["resource.kubernetes.io/pcieRoot"] = {"string": rng.choice(("pci0", "pci1"))}
    shared = rng.random() < 0.2
    dev: dict[str, Any] = {"name": name, "attributes": attrs, "capacity": _capacity(rng, shared)}
    if shared:
        dev["allowMultipleAllocations"] = True
    if counter_sets and rng.random() < 0.7:
        sets = rng.sample(counter_sets, 2 if len(counter_sets) > 1 and rng.random() < 0.25 else 1)
        dev["consumesCounters"] = [
            {"counterSet": cs, "counters": {"memory": {"value": rng.choice(("10Gi", "20Gi", "40Gi"))}}} for cs in sets
        ]
        if rng.random() < 0.02:  # alpha (1.37): with the gate off the scheduler ignores the whole slice
            dev["consumesCounters"][0]["compatibilityGroups"] = rng.sample(("a", "b"), rng.randint(1, 2))
    if rng.random() < 0.15:
        dev["taints"] = [
            {
                "key": rng.choice(TAINT_KEYS),
                "value": rng.choice(("", "true")),
                "effect": rng.choice(("NoSchedule", "NoExecute", "None")),
            }
            for _ in range(rng.choice((1, 1, 2)))
        ]
    if binding:
        dev["bindingConditions"] = rng.sample(CONDITIONS, rng.randint(1, 2))
        dev["bindingFailureConditions"] = rng.sample(FAILURE_CONDITIONS, rng.randint(1, 2))
    if (binding and rng.random() < 0.4) or rng.random() < 0.05:
        dev["bindsToNode"] = True
    return dev


def _slice(name: str, driver: str, pool: dict[str, Any], targeting: dict[str, Any], **body: Any) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"driver": driver, "pool": dict(pool), **targeting, **body}}


def _spoil(rng: random.Random, flaw: str, slices: list[dict[str, Any]], count: int) -> None:
    """Give a pool's slices one flaw (``FLAWS``)."""
    devices = [d for s in slices for d in s["spec"].get("devices") or []]
    if flaw == "count":
        # Slices that disagree on the pool's slice count: the scheduler reads the first it gathers.
        rng.choice(slices)["spec"]["pool"]["resourceSliceCount"] = count + rng.choice((-1, 1)) if count > 1 else count + 1
    elif flaw == "duplicate" and len(devices) > 1:
        devices[-1]["name"] = rng.choice(devices[:-1])["name"]
    elif flaw == "bogus counter":
        consuming = [d for d in devices if d.get("consumesCounters")] or devices[:1]
        consumption = consuming[0].setdefault("consumesCounters", [{"counterSet": "cs-0", "counters": {}}])[0]
        consumption["counters"]["bogus"] = {"value": "1"}
    elif flaw == "missing set":
        counter_slice = next(s for s in slices if "sharedCounters" in s["spec"])
        del counter_slice["spec"]["sharedCounters"][0]
        if not counter_slice["spec"]["sharedCounters"]:
            del counter_slice["spec"]["sharedCounters"]
        if not any(cc["counterSet"] == "cs-0" for d in devices for cc in d.get("consumesCounters") or []):
            devices[0]["consumesCounters"] = [{"counterSet": "cs-0", "counters": {"memory": {"value": "10Gi"}}}]


FLAWS = ("incomplete", "count", "duplicate", "bogus counter", "missing set")


def pool_slices(
    draw: Draw[Any], driver: str, pool: str, prefix: str, labels: dict[str, str], flaw: str | None, lists: float = 1.0
) -> list[dict[str, Any]]:
    """The slices of one pool; ``flaw`` (one of ``FLAWS``) makes it incomplete or invalid.

    Flaws are drawn per case, not per pool, so that most cases have none: a request for ``All``
    devices fails on any incomplete or invalid pool of the node.
    """
    rng = rng_of(draw)
    n_slices = draw(st.sampled_from((1, 1, 2, 2, 3)))
    sizes = [draw(st.sampled_from((1, 2, 2, 3, 3, 4))) for _ in range(n_slices)]
    generation = rng.randint(1, 2)
    counter_sets = [f"cs-{i}" for i in range(rng.choice((0, 0, 1, 1, 2)))]
    if flaw in ("bogus counter", "missing set") and not counter_sets:
        counter_sets = ["cs-0"]
    binding = rng.choice(("none",) * 6 + ("all", "mixed", "mixed"))
    total = n_slices + (1 if counter_sets else 0)
    count = total + (1 if flaw == "incomplete" else 0)  # a slice is missing
    pool_ref = {"name": pool, "generation": generation, "resourceSliceCount": count}
    targeting = _targeting(rng, labels, per_device_ok=True)
    slices: list[dict[str, Any]] = []
    index = 0
    for si, size in enumerate(sizes):
        mine = targeting if rng.random() < 0.75 else _targeting(rng, labels, per_device_ok=True)
        devs = []
        for _ in range(size):
            with_binding = binding == "all" or (binding == "mixed" and rng.random() < 0.5)
            d = device(rng, driver, f"dev-{index}", index, counter_sets=counter_sets, binding=with_binding, lists=lists)
            if mine.get("perDeviceNodeSelection"):
                d.update(_device_targeting(rng, labels))
            devs.append(d)
            index += 1
        slices.append(_slice(f"{prefix}-{si}", driver, pool_ref, mine, devices=devs))
    if counter_sets:
        counters = [{"name": cs, "counters": {"memory": {"value": rng.choice(("40Gi", "80Gi"))}}} for cs in counter_sets]
        slices.append(
            _slice(f"{prefix}-counters", driver, pool_ref, _targeting(rng, labels, per_device_ok=False), sharedCounters=counters)
        )
    if flaw is not None:
        _spoil(rng, flaw, slices, count)
    if rng.random() < 0.15:
        # A stale slice of an older generation: ignored.
        old = rng.choice(slices)
        spec = {**old["spec"], "pool": {**old["spec"]["pool"], "generation": generation - 1}}
        slices.append({"metadata": {"name": f"{prefix}-old"}, "spec": spec})
    rng.shuffle(slices)  # the scheduler sorts slices by name; the input order must not matter
    return slices


def bulk_slices(draw: Draw[Any]) -> list[dict[str, Any]]:
    """The bulk pool: 34-40 plain, interchangeable devices (``index`` tells them apart).

    Only the bulk claim (last in the pod) can use them, so it never fails for want of a device and
    the search never backtracks through its large requests (which would be exponential).
    """
    rng = rng_of(draw)
    n = draw(st.integers(34, 40))
    split = rng.choice((n, n // 2))
    targeting = rng.choice(({"nodeName": NODE}, {"allNodes": True}, {"perDeviceNodeSelection": True}))
    out = []
    for si, (lo, hi) in enumerate(((0, split), (split, n))):
        if lo == hi:
            continue
        devs = []
        for i in range(lo, hi):
            d: dict[str, Any] = {
                "name": f"b-{i:02d}",
                "attributes": {"model": {"string": "H100"}, "index": {"int": i}, "numa": {"int": i % 2}},
            }
            if targeting.get("perDeviceNodeSelection"):
                d["allNodes" if i % 2 else "nodeName"] = True if i % 2 else NODE
            devs.append(d)
        pool = {"name": "bulk", "generation": 1, "resourceSliceCount": 2 if split < n else 1}
        out.append(_slice(f"bulk-{si}", BULK_DRIVER, pool, targeting, devices=devs))
    return out
