"""Which nodes a slice or device is for: ``nodeName``, ``allNodes`` or a node selector, as the scheduler matches them.

Called by pool gathering (``pools.py``: a slice's node, per-device node selection), the allocator
(``simulate.py``: per-device node selection, :func:`unmergeable_terms` after the search) and
candidate explanations (``candidates.py``). Mirrors the scheduler's ``NodeMatches`` (a node
selector's terms matched against the node's name and labels, ``Gt``/``Lt`` as int64) and the one
way ``createNodeSelector`` fails. Pure.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from dra_driver.schedsim.allocator.model import slice_spec

__all__ = ["node_matches", "unmergeable_terms"]

_GO_INT = re.compile(r"[+-]?[0-9]+")


def _go_int(text: str | None) -> int | None:
    """``strconv.ParseInt(text, 10, 64)``, None where it fails."""
    if text is None or not _GO_INT.fullmatch(text):
        return None
    n = int(text)
    return n if -(2**63) <= n < 2**63 else None


def _compares(op: str, label: str | None, values: list[str]) -> bool:
    """``Gt``/``Lt``: the label and the one value as int64; a label (or value) that is no integer never matches."""
    have = _go_int(label)
    want = _go_int(values[0]) if len(values) == 1 else None
    if have is None or want is None:
        return False
    return have > want if op == "Gt" else have < want


def _expression_matches(op: Any, label: str | None, values: list[str]) -> bool:
    """One ``matchExpressions`` requirement against the node's label (None: the node lacks it)."""
    if op in ("Gt", "Lt"):
        return _compares(op, label, values)
    present = label is not None
    return {
        "In": present and label in values,
        "NotIn": not present or label not in values,
        "Exists": present,
        "DoesNotExist": not present,
    }.get(op, False)


def _node_selector_matches(selector: Mapping[str, Any] | None, node: str, labels: Mapping[str, str]) -> bool:
    if not selector:
        return False
    for term in selector.get("nodeSelectorTerms") or []:
        ok = True
        for e in term.get("matchExpressions") or []:
            ok = ok and _expression_matches(e.get("operator"), labels.get(e.get("key", "")), e.get("values") or [])
        for e in term.get("matchFields") or []:
            if e.get("key") == "metadata.name":
                inside = node in (e.get("values") or [])
                ok = ok and (inside if e.get("operator") == "In" else not inside)
        if ok and (term.get("matchExpressions") or term.get("matchFields")):
            return True
    return False


def node_matches(node: str | None, labels: Mapping[str, str], node_name: str | None, all_nodes: bool, selector: Any) -> bool:
    """``NodeMatches``: nodeName, allNodes or a node selector."""
    if node_name:
        return node is not None and node == node_name
    if all_nodes:
        return True
    if selector is not None:
        return node is not None and _node_selector_matches(selector, node, labels)
    return False


def unmergeable_terms(picked: Sequence[tuple[Mapping[str, Any], Mapping[str, Any]]]) -> int | None:
    """The term count of the node selector that makes a claim's allocation fail in ``createNodeSelector``, or None.

    ``picked``: the claim's (slice, device) in result order. The first device local to one node
    (a ``nodeName``) or ``bindsToNode`` pins the claim to the node and ends the merge; before
    that, node selectors are merged, which fails for one of several terms (only a device's own
    selector, with per-device node selection, may have them). The scheduler returns that error
    for the node after having found the allocation.
    """
    for s, d in picked:
        sp = slice_spec(s)
        source = d if sp.get("perDeviceNodeSelection") else sp
        if source.get("nodeName") is not None or d.get("bindsToNode"):
            return None
        terms = (source.get("nodeSelector") or {}).get("nodeSelectorTerms") or []
        if len(terms) > 1:
            return len(terms)
    return None
