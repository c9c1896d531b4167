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
from dra_driver.schedsim.allocator.pools import Pool, node_matches, slice_spec
from dra_driver.schedsim.allocator.simulate import NodeAllocator


def explain_request(allocator: NodeAllocator, ci: int, req: Request) -> list[Candidate]:
    """Every device of the node's pools with its first reason, in the allocator's order.

    Unlike the search this evaluates every device, so it can show an error the scheduler would
    only reach later; the outcome (allocation or abort) comes from :meth:`NodeAllocator.run`.
    """
    out: list[Candidate] = []
    node = allocator.node
    for pool in allocator.pools:
        if pool.incomplete or pool.invalid:
            out.append(
                Candidate(
                    node, f"{pool.name}/*", "unavailable", pool.incomplete or f"pool {pool.pool_id} is invalid: {pool.invalid}"
                )
            )
            continue
        for s in pool.slices:
            for d in slice_spec(s).get("devices") or []:
                out.append(_explain_device(allocator, ci, req, pool, s, d))
    return out


def _explain_device(  # noqa: PLR0911, PLR0917 - mirrors the Go allocator's function branch for branch, so the differential test can be read against it
    a: NodeAllocator,
    ci: int,
    req: Request,
    pool: Pool,
    s: Mapping[str, Any],
    d: Mapping[str, Any],
) -> Candidate:
    did = a.dev_id(pool, d)
    name = f"{pool.name}/{did[2]}"
    if did in a.state.devices and not req.admin_access:
        return Candidate(a.node, name, "unavailable", f"already allocated to claim {a.state.devices[did]}")
    sel = a.selector_outcome(ci, req, did, d)  # the class's selectors, then the request's; once per device shape
    if sel is not None:
        where = f"class {req.class_name}" if sel.group == 0 else "request " + req.name
        if sel.stage == "false":
            return Candidate(a.node, name, "no-match", f"{where} selector #{sel.index} is false: {sel.expression}")
        kind = "CEL compile error" if sel.error_kind == "compile" else "CEL runtime error"
        return Candidate(a.node, name, "error", f"{where} selector #{sel.index}: {kind}: {sel.message}")
    if slice_spec(s).get("perDeviceNodeSelection") and not node_matches(
        a.node, a.labels, d.get("nodeName"), bool(d.get("allNodes")), d.get("nodeSelector")
    ):
        return Candidate(a.node, name, "unavailable", "device is not available on this node")
    try:
        ok, why = a.capacity_ok(req, pool, d)
    except CapacityError as err:
        return Candidate(a.node, name, "error", f"request {req.name}: {err}")
    if not ok:
        return Candidate(a.node, name, "unavailable", why)
    if d.get("consumesCounters") and not d.get("allowMultipleAllocations") and not a.counters_fit(pool, d, reserve=False):
        return Candidate(a.node, name, "unavailable", "shared counters exhausted (partitions already in use)")
    taint = untolerated_taint(d, req)
    if taint is not None:
        return Candidate(
            a.node,
            name,
            "unavailable",
            f"taint {taint.get('key')}={taint.get('value', '')}:{taint.get('effect')} is not tolerated",
        )
    return Candidate(a.node, name, "match", "")
