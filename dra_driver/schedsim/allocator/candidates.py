"""Every device of a node's pools with its verdict for one request, in the allocator's order.

Called by ``explain.py`` (each request's candidate list). Uses a :class:`NodeAllocator` for the
node (its selector cache, views and counters) but does not search: each device gets the first
reason the allocator would reject it for, or ``match``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dra_driver.schedsim.allocator.checks import CapacityError, untolerated_taint
from dra_driver.schedsim.allocator.model import Candidate, Request
from dra_driver.schedsim.allocator.node_selection import node_matches
from dra_driver.schedsim.allocator.pools import Pool, slice_spec
from dra_driver.schedsim.allocator.shapes import NOT_STORED, SelectorOutcome
from dra_driver.schedsim.allocator.simulate import NodeAllocator
from dra_driver.schedsim.allocator.taint_rules import untolerated_text


def explain_request(allocator: NodeAllocator, ci: int, req: Request) -> list[Candidate]:
    """Every device of the node's pools with its first reason, in the allocator's order.

    Unlike the search this evaluates every device, so it can show an error the scheduler would
    only reach later; the outcome (allocation or abort) comes from :meth:`NodeAllocator.run`.
    """
    out: list[Candidate] = []
    node = allocator.node
    # A selector outcome's verdict and detail, worded once per outcome (outcomes are shared by device shape).
    worded: dict[int, tuple[SelectorOutcome, str, str]] = {}
    by_view = allocator.outcomes_by_view(ci, req)
    in_use, admin = allocator.state.devices, req.admin_access
    # (a field no device has where selectors do not see allowMultipleAllocations: None, as the allocator keys it)
    multi_key = "allowMultipleAllocations" if allocator.rules.selectors_see_multiple_allocations else _NO_FIELD
    for pool in allocator.pools:
        if (pool.incomplete and not allocator.rules.pools_as_gathered) or pool.invalid:
            out.append(
                Candidate(
                    node, f"{pool.name}/*", "unavailable", pool.incomplete or f"pool {pool.pool_id} is invalid: {pool.invalid}"
                )
            )
            continue
        driver, pname = pool.driver, pool.name
        for s in pool.slices:
            spec = slice_spec(s)
            per_device = bool(spec.get("perDeviceNodeSelection"))
            for d in spec.get("devices") or []:
                # The usual device, its selectors' outcome known (the view key as NodeAllocator.selector_outcome makes it):
                # rejected by a selector, worded once per outcome.
                dname = str(d.get("name", ""))
                if admin or not in_use or (driver, pname, dname) not in in_use:
                    vkey = (driver, id(d.get("attributes")), id(d.get("capacity")), d.get(multi_key))
                    sel = by_view.get(vkey, NOT_STORED)
                    if sel is None:  # every selector accepts it (not in use, or admin access): the checks after them
                        out.append(_after_selectors(allocator, req, pool, per_device=per_device, d=d, name=f"{pname}/{dname}"))
                        continue
                    if sel is not NOT_STORED:
                        hit = worded.get(id(sel))
                        if hit is None:
                            hit = worded[id(sel)] = (sel, *_word(req, sel))  # (the outcome kept alive: its id stays its own)
                        out.append(Candidate(node, f"{pname}/{dname}", hit[1], hit[2]))
                        continue
                out.append(_explain_device(allocator, ci, req, pool, per_device=per_device, d=d, worded=worded))
    return out


_NO_FIELD: Any = object()  # a dict key no device has (an API device's keys are strings)


def _word(req: Request, sel: SelectorOutcome) -> tuple[str, str]:
    """(verdict, detail) of a device its selectors reject."""
    where = f"class {req.class_name}" if sel.group == 0 else "request " + req.name
    if sel.stage == "false":
        return "no-match", f"{where} selector #{sel.index} is false: {sel.expression}"
    kind = "CEL compile error" if sel.error_kind == "compile" else "CEL runtime error"
    return "error", f"{where} selector #{sel.index}: {kind}: {sel.message}"


def _explain_device(
    a: NodeAllocator,
    ci: int,
    req: Request,
    pool: Pool,
    *,
    per_device: bool,
    d: Mapping[str, Any],
    worded: dict[int, tuple[SelectorOutcome, str, str]],
) -> Candidate:
    did = a.dev_id(pool, d)
    name = f"{pool.name}/{did[2]}"
    if did in a.state.devices and not req.admin_access:
        return Candidate(a.node, name, "unavailable", f"already allocated to claim {a.state.devices[did]}")
    sel = a.selector_outcome(ci, req, did, d)  # the class's selectors, then the request's; once per device shape
    if sel is not None:
        hit = worded.get(id(sel))
        if hit is None:
            hit = worded[id(sel)] = (sel, *_word(req, sel))  # (the outcome kept alive: its id stays its own)
        return Candidate(a.node, name, hit[1], hit[2])
    return _after_selectors(a, req, pool, per_device=per_device, d=d, name=name)


def _after_selectors(
    a: NodeAllocator, req: Request, pool: Pool, *, per_device: bool, d: Mapping[str, Any], name: str
) -> Candidate:
    """The verdict of a device every selector accepts (not allocated, or asked for with admin access).

    :func:`_explain_device`'s rest; ``name``: the device as candidates name it (``<pool>/<device>``).
    """
    if per_device and not node_matches(a.node, a.labels, d.get("nodeName"), bool(d.get("allNodes")), d.get("nodeSelector")):
        return Candidate(a.node, name, "unavailable", "device is not available on this node")
    try:
        ok, why = a.capacity_ok(req, pool, d)
    except CapacityError as err:
        return Candidate(a.node, name, "error", f"request {req.name}: {err}")
    if not ok:
        return Candidate(a.node, name, "unavailable", why)
    if d.get("consumesCounters") and (
        not a.rules.partitionable_devices
        or (not d.get("allowMultipleAllocations") and not a.counters_fit(pool, d, reserve=False))
    ):
        why = "shared counters exhausted (partitions already in use)"
        if not a.rules.partitionable_devices:
            why = "consumes counters, but DRAPartitionableDevices is off"
        return Candidate(a.node, name, "unavailable", why)
    taint = untolerated_taint(d, req) if a.rules.device_taints else None
    if taint is not None:
        return Candidate(
            a.node,
            name,
            "unavailable",
            untolerated_text(taint),
        )
    return Candidate(a.node, name, "match", "")
