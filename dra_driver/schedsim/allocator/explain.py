"""Explains one pod's (or claim's) allocation across the nodes of a set of ResourceSlices.

Called by ``dra-gpu explain``. Runs the simulated allocator per node (nodes by name) and reports,
per claim request, every candidate device's verdict, the node and devices of the first node where
the whole pod fits (the real scheduler also scores nodes; this picks the first feasible one by
name), or the reason none does. When only a claim's constraints (``matchAttribute``,
``distinctAttribute``) stand in the way, the reason says so: the claim is simulated once more
without them, and if it then fits, the constraints are named. ``Explanation.to_json()`` is the
stable contract of ``-o json``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dra_driver.core.quantity import QuantityError
from dra_driver.schedsim.allocator.candidates import explain_request
from dra_driver.schedsim.allocator.claim_objects import read_allocated, read_claim, read_class
from dra_driver.schedsim.allocator.fastread import DeviceMemo
from dra_driver.schedsim.allocator.model import AllocatedState, Candidate, NodeOutcome, claim_key, claim_requests
from dra_driver.schedsim.allocator.objects import read_node_labels, read_slice
from dra_driver.schedsim.allocator.pools import SliceIndex, gather_pools
from dra_driver.schedsim.allocator.shapes import ShapeCache
from dra_driver.schedsim.allocator.simulate import SEARCH_BUDGET_S, NodeAllocator
from dra_driver.schedsim.allocator.taint_rules import apply_taint_rules, read_taint_rules
from dra_driver.schedsim.allocator.validate import (
    MAX_ALLOCATED_CLAIMS,
    MAX_CLASSES,
    MAX_DEVICES,
    MAX_POD_CLAIMS,
    MAX_SLICES,
    InvalidObject,
    Reader,
)
from dra_driver.schedsim.rules import NEWEST, Rules


@dataclass(slots=True)
class RequestExplanation:
    """One claim request: chosen node and devices, or why not, and every candidate."""

    claim: str
    request: str
    node: str | None
    devices: list[str]
    reason: str | None
    candidates: list[Candidate] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """The stable JSON form."""
        return {
            "claim": self.claim,
            "request": self.request,
            "node": self.node,
            "devices": self.devices,
            "reason": self.reason,
            "candidates": [c.to_json() for c in self.candidates],
        }


@dataclass(slots=True)
class Explanation:
    """The whole answer: one entry per claim request, plus each node's outcome."""

    requests: list[RequestExplanation]
    nodes: list[NodeOutcome]

    def to_json(self) -> dict[str, Any]:
        """``{"requests": [...]}`` (the contract) plus ``nodes`` (informational)."""
        return {
            "requests": [r.to_json() for r in self.requests],
            "nodes": [
                {"node": n.node, "allocated": n.results is not None, "error": n.error, "reason": n.reason} for n in self.nodes
            ],
        }


def nodes_of(slices: Sequence[Mapping[str, Any]], node_labels: Mapping[str, Any] | None = None) -> list[str | None]:
    """Node names to simulate (sorted); ``[None]`` when nothing names one.

    The nodes the slices name (``nodeName`` of a slice or, with per-device node selection, of a
    device), and, when some slice selects nodes by label or takes all nodes, every node whose
    labels are known (``node_labels``: live mode reads them from the cluster).
    """
    names: set[str] = set()
    by_label = False
    for s in slices:
        sp = s.get("spec") or {}
        if sp.get("nodeName"):
            names.add(str(sp["nodeName"]))
        elif not sp.get("sharedCounters"):
            by_label = True
        for d in sp.get("devices") or []:
            if d.get("nodeName"):
                names.add(str(d["nodeName"]))
    if by_label:
        names.update(node_labels or {})
    out: list[str | None] = [*sorted(names)]
    return out if out else [None]


def explain(
    claims: Sequence[Mapping[str, Any]],
    slices: Sequence[Mapping[str, Any]],
    classes: Mapping[str, Mapping[str, Any]],
    allocated: Sequence[Mapping[str, Any]],
    node_labels: Mapping[str, Mapping[str, str]] | None = None,
    *,
    rules: Rules = NEWEST,
    taint_rules: Sequence[Mapping[str, Any]] = (),
) -> Explanation:
    """Simulate scheduling ``claims`` (one pod's, in pod order) against the cluster state given.

    ``rules``: the Kubernetes release whose scheduler to follow (the cluster's; default: the newest known).

    ``node_labels`` (by node name) serve slices that select nodes by label; without them a node
    has only its ``kubernetes.io/hostname`` label. Raises :class:`InvalidObject` for an object
    of the wrong shape or an input beyond the bounds in ``validate.py``.

    ``taint_rules``: the DeviceTaintRules; where ``rules`` say the scheduler applies them, their
    taints are added to the devices they select (``taint_rules.py``), naming the rule.
    """
    memo = DeviceMemo()  # devices of one shape share their checked parts; views take their conversion errors from it
    claims, slices, classes, allocated, node_labels = read_inputs(claims, slices, classes, allocated, node_labels, memo=memo)
    if rules.device_taint_rules and taint_rules:
        slices = apply_taint_rules(slices, read_taint_rules(taint_rules, class_selectors=rules.minor == 34))
    pending = [c for c in claims if not (c.get("status") or {}).get("allocation")]
    done = [c for c in claims if (c.get("status") or {}).get("allocation")]
    try:
        outcomes, cands = _simulate(pending, slices, classes, allocated, node_labels, rules=rules, memo=memo)
    except QuantityError as err:  # the inputs' quantities are bounded, so their sums should never fail
        raise InvalidObject(f"input: quantity arithmetic failed: {err}") from None
    chosen = next((o for o in outcomes if o.results is not None), None)
    entries: list[RequestExplanation] = []
    for c in done:
        results = (((c.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results") or []
        by_req: dict[str, list[str]] = {}
        for r in results:
            by_req.setdefault(str(r.get("request", "")), []).append(f"{r.get('pool')}/{r.get('device')}")
        for req_name, devs in by_req.items():
            entries.append(RequestExplanation(claim_key(c), req_name, _alloc_node(c), devs, None, []))
    errors = [o for o in outcomes if o.error]
    blamed = (
        {} if chosen is not None or errors else _blame_constraints(pending, slices, classes, allocated, node_labels, rules=rules)
    )
    for ci, c in enumerate(pending):
        key = claim_key(c)
        for alts in claim_requests(c):
            if chosen is not None and chosen.results is not None:
                picked = [
                    r
                    for r in chosen.results
                    if r.claim == key and (r.request == alts[0].base or r.request.startswith(alts[0].base + "/"))
                ]
                name = picked[0].request if picked else alts[0].name
                devices = [f"{r.pool}/{r.device}" for r in picked]
                entries.append(RequestExplanation(key, name, chosen.node, devices, None, cands.get((ci, name), [])))
                continue
            reason = _reason(outcomes, errors, cands, ci, alts) + blamed.get(ci, "")
            for req in alts:
                entries.append(RequestExplanation(key, req.name, None, [], reason, cands.get((ci, req.name), [])))
    return Explanation(entries, outcomes)


def _simulate(
    pending: list[dict[str, Any]],
    slices: list[dict[str, Any]],
    classes: dict[str, dict[str, Any]],
    allocated: list[dict[str, Any]],
    node_labels: dict[str, dict[str, str]] | None,
    *,
    rules: Rules,
    memo: DeviceMemo | None = None,
) -> tuple[list[NodeOutcome], dict[tuple[int, str], list[Candidate]]]:
    """Each node's outcome, and every candidate device per (claim index, request name).

    ``memo``: the one the slices were read through (its conversion errors serve the device views).
    """
    state = AllocatedState.from_claims(allocated)
    outcomes: list[NodeOutcome] = []
    cands: dict[tuple[int, str], list[Candidate]] = {}
    deadline = time.monotonic() + SEARCH_BUDGET_S
    index = SliceIndex(slices, rules, groups=memo is None or memo.groups)
    shapes = (  # computed once per device shape
        ShapeCache(conversion_errors=memo.errors, derived=memo.derived) if memo is not None else ShapeCache()
    )
    for node in nodes_of(slices, node_labels):
        labels = dict((node_labels or {}).get(node or "") or ({"kubernetes.io/hostname": node} if node else {}))
        pools = gather_pools(slices, node, labels, rules, index)
        allocator = NodeAllocator(
            pending, classes, pools, state, node, labels=labels, deadline=deadline, rules=rules, shapes=shapes
        )
        outcomes.append(allocator.run())
        probe = NodeAllocator(pending, classes, pools, state, node, labels=labels, rules=rules, shapes=shapes)
        for ci, c in enumerate(pending):
            for alts in claim_requests(c):
                for req in alts:
                    cands.setdefault((ci, req.name), []).extend(explain_request(probe, ci, req))
    return outcomes, cands


def _blame_constraints(
    pending: list[dict[str, Any]],
    slices: list[dict[str, Any]],
    classes: dict[str, dict[str, Any]],
    allocated: list[dict[str, Any]],
    node_labels: dict[str, dict[str, str]] | None,
    *,
    rules: Rules,
) -> dict[int, str]:
    """Claim index -> a sentence naming its constraints, for each claim whose constraints alone keep the pod off every node.

    The pod is simulated again with that claim's constraints dropped (the others kept); if some
    node then allocates everything, nothing but those constraints was in the way.
    """
    state = AllocatedState.from_claims(allocated)
    nodes = nodes_of(slices, node_labels)
    out: dict[int, str] = {}
    deadline = time.monotonic() + SEARCH_BUDGET_S
    index = SliceIndex(slices, rules)
    for ci, c in enumerate(pending):
        devices = (c.get("spec") or {}).get("devices") or {}
        constraints = devices.get("constraints") or []
        if not constraints:
            continue
        loose = [*pending[:ci], {**c, "spec": {**c["spec"], "devices": {**devices, "constraints": []}}}, *pending[ci + 1 :]]
        for node in nodes:
            labels = dict((node_labels or {}).get(node or "") or ({"kubernetes.io/hostname": node} if node else {}))
            pools = gather_pools(slices, node, labels, rules, index)
            allocator = NodeAllocator(loose, classes, pools, state, node, labels=labels, deadline=deadline, rules=rules)
            if allocator.run().results is not None:
                why = f"no free devices satisfy {_describe(constraints)}"
                out[ci] = f"; it would fit on {f'node {node}' if node else 'a node'} without the claim's constraints: {why}"
                break
    return out


def _describe(constraints: Sequence[Mapping[str, Any]]) -> str:
    """``matchAttribute resource.kubernetes.io/numaNode of requests gpu, nic`` (and so on, joined by "together with")."""
    parts = []
    for con in constraints:
        kind = "matchAttribute" if con.get("matchAttribute") else "distinctAttribute"
        scope = ", ".join(str(r) for r in con.get("requests") or []) or "every request"
        parts.append(f"{kind} {con.get(kind)} of {'requests ' if con.get('requests') else ''}{scope}")
    return " together with ".join(parts)


def read_inputs(
    claims: Any, slices: Any, classes: Any, allocated: Any, node_labels: Any, *, memo: DeviceMemo | None = None
) -> tuple[
    list[dict[str, Any]],
    list[dict[str, Any]],
    dict[str, dict[str, Any]],
    list[dict[str, Any]],
    dict[str, dict[str, str]] | None,
]:
    """Every input read into checked copies (see ``validate.py``); raises :class:`InvalidObject`.

    ``memo``: where the devices' parts are remembered (see ``fastread.py``; default: a fresh one).
    """
    r = Reader("input")
    claim_list = r.seq(claims, "the pod's claims", MAX_POD_CLAIMS)
    slice_list = r.seq(slices, "ResourceSlices", MAX_SLICES)
    alloc_list = r.seq(allocated, "allocated ResourceClaims", MAX_ALLOCATED_CLAIMS)
    class_map = r.obj(classes, "DeviceClasses", MAX_CLASSES)
    read_slices: list[dict[str, Any]] = []
    devices = 0
    if memo is None:
        memo = DeviceMemo()  # devices of one shape share their checked parts
    for i, s in enumerate(slice_list):
        read_slices.append(read_slice(s, i, memo))
        devices += len(read_slices[-1]["spec"].get("devices") or ())
        if devices > MAX_DEVICES:
            raise InvalidObject(f"input: more than {MAX_DEVICES} devices in all ResourceSlices")
    return (
        [read_claim(c, i) for i, c in enumerate(claim_list)],
        read_slices,
        {name: read_class(c, name) for name, c in class_map.items()},
        [read_allocated(c, i) for i, c in enumerate(alloc_list)],
        None if node_labels is None else read_node_labels(node_labels),
    )


def _alloc_node(claim: Mapping[str, Any]) -> str | None:
    sel = ((claim.get("status") or {}).get("allocation") or {}).get("nodeSelector") or {}
    for term in sel.get("nodeSelectorTerms") or []:
        for f in term.get("matchFields") or []:
            if f.get("key") == "metadata.name" and f.get("values"):
                return str(f["values"][0])
    return None


def _reason(
    outcomes: list[NodeOutcome],
    errors: list[NodeOutcome],
    cands: Mapping[tuple[int, str], list[Candidate]],
    ci: int,
    alts: list[Any],
) -> str:
    if errors:
        return f"scheduling aborted (the pod is retried with backoff): {errors[0].error}"
    if not outcomes:
        return "no nodes"
    parts = []
    for req in alts:
        matches = [c for c in cands.get((ci, req.name), []) if c.verdict == "match"]
        need = "all matching devices" if req.mode == "All" else f"{req.count} device{'s' if req.count != 1 else ''}"
        per_node: dict[str | None, int] = {}
        for m in matches:
            per_node[m.node] = per_node.get(m.node, 0) + 1
        best = max(per_node.values(), default=0)
        parts.append(f"request {req.name} needs {need}; at most {best} usable on one node")
    return f"0/{len(outcomes)} nodes can allocate all claims: " + "; ".join(parts)
