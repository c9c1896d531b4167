"""The text report of ``dra-gpu explain``: per request the answer, then the devices, summarized on a large cluster.

Called by ``dra_driver.cli.explain`` (:func:`render_text`, re-exported there). A request with at
most :data:`MAX_DEVICE_LINES` candidate devices gets one line per device, as the allocator walks
them. A larger one (a fleet: 500 nodes of 208 MIG placements are 104,000 devices) gets one line
per device only on the node the allocation landed on (else the first node), and for the other
nodes one line per group of nodes with the same outcome: how many devices, and how many of them
got each verdict for each reason. ``-o json`` keeps every device.
"""

from __future__ import annotations

from collections.abc import Sequence

from dra_driver.schedsim.allocator import Candidate, Explanation, RequestExplanation

MAX_DEVICE_LINES = 200  # candidates of one request listed device by device, whatever the node
_NAMED_NODES = 3  # a group of more nodes names the first two and the last


def render_text(results: list[tuple[str, Explanation]]) -> str:
    """The human-readable report."""
    lines: list[str] = []
    for label, ex in results:
        lines.append(f"{label}:")
        for r in ex.requests:
            head = f"  claim {r.claim}, request {r.request}: "
            if r.reason is None:
                lines.append(head + f"allocated on node {r.node}: {', '.join(r.devices)}")
            else:
                lines.append(head + f"NOT allocatable: {r.reason}")
            lines.extend(candidate_lines(r))
    return "\n".join(lines) + "\n"


def _device_line(c: Candidate, *, node: bool = True) -> str:
    where = f"{c.node}: " if c.node and node else ""
    detail = f"  {c.detail}" if c.detail else ""
    return f"    {where}{c.device:<24} {c.verdict}{detail}"


def candidate_lines(r: RequestExplanation) -> list[str]:
    """The request's devices: each on its own line, or summarized per group of nodes (see the module docstring)."""
    if len(r.candidates) <= MAX_DEVICE_LINES:
        return [_device_line(c) for c in r.candidates]
    by_node: dict[str | None, list[Candidate]] = {}
    for c in r.candidates:
        by_node.setdefault(c.node, []).append(c)
    shown = r.node if r.node in by_node else next(iter(by_node))
    out = [f"    {shown or '(no node)'}: {outcome_text(outcome(by_node[shown]))}"]
    out.extend("  " + _device_line(c, node=False) for c in by_node[shown])
    groups: dict[Outcome, list[str | None]] = {}
    for node, cands in by_node.items():
        if node != shown:
            groups.setdefault(outcome(cands), []).append(node)
    out.extend(f"    {node_list(nodes)}: {outcome_text(o, each=len(nodes) > 1)}" for o, nodes in groups.items())
    return out


# (devices, ((verdict, reason), count) in first-seen order): what one node's devices got.
Outcome = tuple[int, tuple[tuple[tuple[str, str], int], ...]]


def outcome(cands: Sequence[Candidate]) -> Outcome:
    """How many devices got each verdict for each reason, in the order first seen."""
    counts: dict[tuple[str, str], int] = {}
    for c in cands:
        key = (c.verdict, c.detail)
        counts[key] = counts.get(key, 0) + 1
    return len(cands), tuple(counts.items())


def outcome_text(o: Outcome, *, each: bool = False) -> str:
    """``208 devices: 56 match, 144 no-match (reason), 8 no-match (reason)`` (``each``: per node of a group)."""
    total, counts = o
    parts = [f"{n} {verdict}" + (f" ({detail})" if detail else "") for (verdict, detail), n in counts]
    return f"{total} device{'s' if total != 1 else ''}{' each' if each else ''}: " + ", ".join(parts)


def node_list(nodes: Sequence[str | None]) -> str:
    """``node-a``, ``node-a, node-b``, or ``node-a, node-b, ... node-z (26 nodes)`` for a long list."""
    names = [n or "(no node)" for n in nodes]
    if len(names) <= _NAMED_NODES:
        return ", ".join(names)
    return f"{names[0]}, {names[1]}, ... {names[-1]} ({len(names)} nodes)"
