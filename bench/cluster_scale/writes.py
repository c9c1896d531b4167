"""Write requests the API server has served, from its ``apiserver_request_total`` counter on /metrics.

Used by ``bench.cluster_scale.run`` around the steady-state window: ``write_counts`` before and
after, ``delta`` between them. Writes are the verbs POST, PUT, PATCH, DELETE, DELETECOLLECTION
and APPLY, counted per resource (``resource/subresource``), whatever the answer's code.
"""

from __future__ import annotations

import re
from collections import Counter

WRITE_VERBS = frozenset({"POST", "PUT", "PATCH", "DELETE", "DELETECOLLECTION", "APPLY", "CREATE", "UPDATE"})
_SAMPLE = re.compile(r"^apiserver_request_total\{(?P<labels>[^}]*)\}\s+(?P<value>\S+)")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def write_counts(metrics: str) -> Counter[str]:
    """``resource[/subresource] VERB`` -> requests so far, for write verbs."""
    out: Counter[str] = Counter()
    for line in metrics.splitlines():
        m = _SAMPLE.match(line)
        if not m:
            continue
        labels = dict(_LABEL.findall(m.group("labels")))
        verb = labels.get("verb", "")
        if verb not in WRITE_VERBS:
            continue
        resource = labels.get("resource", "?") + (f"/{labels['subresource']}" if labels.get("subresource") else "")
        out[f"{resource} {verb}"] += int(float(m.group("value")))
    return out


def delta(before: Counter[str], after: Counter[str]) -> dict[str, int]:
    """What was added between two readings (only keys that grew)."""
    return {k: v - before.get(k, 0) for k, v in sorted(after.items()) if v > before.get(k, 0)}


def resource_total(d: dict[str, int], resource: str) -> int:
    """The writes to one resource (any verb) in a delta."""
    return sum(v for k, v in d.items() if k.split(" ", 1)[0].split("/", 1)[0] == resource)
