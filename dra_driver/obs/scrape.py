"""Reading a plugin's /metrics back: the per-claim usage and GPU health rows ``dra-gpu top`` shows.

Parses Prometheus' text format with prometheus_client's parser (bounded: at most ``MAX_BYTES`` of
text, ``MAX_ROWS`` rows) into plain dataclasses. Called by ``dra_driver.cli.top``; the names are
those of ``dra_driver.obs.usage_metrics`` and ``dra_driver.obs.metrics``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

from dra_driver.obs.usage_metrics import IDLE, MEMORY, UTILIZATION

MAX_BYTES = 8 << 20
MAX_ROWS = 10_000
HEALTHY = "dra_gpu_gpu_healthy"
CONDITIONS = "dra_gpu_gpu_health_conditions"


class ScrapeError(ValueError):
    """The text is not Prometheus' text format, or too large; the message says which."""


@dataclass(slots=True)
class ClaimDevice:
    """One prepared device of one claim, as the plugin's last usage sample saw it."""

    node: str
    namespace: str
    claim: str
    device: str
    pods: str = ""
    utilization: float | None = None
    memory_bytes: float | None = None
    idle_s: float = 0.0


@dataclass(slots=True)
class NodeView:
    """What one plugin's scrape says: its claims' devices and its unhealthy GPUs (with causes)."""

    devices: list[ClaimDevice] = field(default_factory=list)
    unhealthy: dict[str, list[str]] = field(default_factory=dict)


def _usage(rows: dict[tuple[str, str, str, str], ClaimDevice], name: str, labels: dict[str, str], value: float) -> None:
    if len(rows) >= MAX_ROWS:
        raise ScrapeError(f"more than {MAX_ROWS} devices in one scrape")
    key = (labels.get("node", ""), labels.get("namespace", ""), labels.get("claim", ""), labels.get("device", ""))
    row = rows.setdefault(key, ClaimDevice(*key, pods=labels.get("pod", "")))
    if math.isnan(value):
        return
    if name == UTILIZATION:
        row.utilization = value
    elif name == MEMORY:
        row.memory_bytes = value
    else:
        row.idle_s = value


def _samples(text: str) -> list[tuple[str, dict[str, str], float]]:
    try:
        return [(s.name, dict(s.labels), float(s.value)) for f in text_string_to_metric_families(text) for s in f.samples]
    except (ValueError, KeyError, IndexError, TypeError) as err:
        raise ScrapeError(f"not Prometheus' text format: {err}") from None


def parse(text: str) -> NodeView:
    """The rows of one scrape; raises ScrapeError for text that is not a scrape."""
    if len(text) > MAX_BYTES:
        raise ScrapeError(f"the scrape is larger than {MAX_BYTES} bytes")
    rows: dict[tuple[str, str, str, str], ClaimDevice] = {}
    view = NodeView()
    causes: dict[str, list[str]] = {}
    for name, lb, value in _samples(text):
        if name in (UTILIZATION, MEMORY, IDLE):
            _usage(rows, name, lb, value)
        elif name == HEALTHY and value == 0:
            view.unhealthy.setdefault(lb.get("gpu", "?"), [])
        elif name == CONDITIONS and value == 1:
            causes.setdefault(lb.get("gpu", "?"), []).append(
                f"{lb.get('cause', '?')}={lb.get('value', '')} ({lb.get('severity', '?')})"
            )
    for gpu in view.unhealthy:
        view.unhealthy[gpu] = sorted(causes.get(gpu, []))
    view.devices = sorted(rows.values(), key=lambda r: (r.namespace, r.claim, r.device))
    return view


def fetch(url: str, timeout_s: float = 10.0) -> str:
    """GET one /metrics URL (``dra-gpu top --url``, e.g. on the node itself); raises ScrapeError on any failure."""
    import urllib.error
    import urllib.request

    if not url.startswith(("http://", "https://")):
        raise ScrapeError(f"{url!r} is not an http(s) URL")
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:  # noqa: S310 - http(s) checked above
            data: bytes = resp.read(MAX_BYTES + 1)
    except (urllib.error.URLError, OSError, ValueError) as err:
        raise ScrapeError(f"{url}: {err}") from None
    if len(data) > MAX_BYTES:
        raise ScrapeError(f"{url}: larger than {MAX_BYTES} bytes")
    return data.decode("utf-8", errors="replace")
