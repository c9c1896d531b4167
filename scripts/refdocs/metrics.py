"""docs/reference/metrics.md: every metric of the kubelet plugin, the controller and the webhook.

Called by ``scripts/gen_reference.py metrics``. Each daemon's registry is built in-process the way
its ``main`` builds it (``dra_driver.obs.metrics.new_registry`` and the metric sets the daemon
registers: ``BUILDERS``), with no server started; every collector registered on it is read for
name, type, labels and help. So that the table cannot miss a set a daemon adds, the daemon's
package is scanned: a metric set (``*Metrics``, ``*Collector``, ``register_*``) it imports from
``dra_driver.obs`` that ``BUILDERS`` does not build for it is a ``ReferenceError``.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, GCCollector, PlatformCollector, ProcessCollector
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from dra_driver.core.health import HealthBook
from dra_driver.core.usage import UsageSnapshot
from dra_driver.obs import metrics as m
from dra_driver.obs.usage_metrics import register_usage_collector
from refdocs.markdown import REPO, ReferenceError, cell, code, header, table

_SUFFIX_LABELS = frozenset({"le", "quantile"})
_OBS_MODULES = ("dra_driver.obs.metrics", "dra_driver.obs.usage_metrics")


class RecordingRegistry(CollectorRegistry):
    """A registry that remembers its collectors in the order they were registered."""

    def __init__(self) -> None:
        super().__init__()
        self.collectors: list[Collector] = []

    def register(self, collector: Collector) -> None:
        """Register as usual, and remember."""
        super().register(collector)
        self.collectors.append(collector)


Builder = Callable[[CollectorRegistry, bool], object]
"""Puts one metric set on a registry; the flag: the plugin's ``--metrics-tenant-labels``."""

BUILDERS: dict[str, dict[str, Builder]] = {
    "kubelet_plugin": {
        "PluginMetrics": lambda r, _t: m.PluginMetrics(r),
        "PreparedClaimsCollector": lambda r, _t: r.register(m.PreparedClaimsCollector(dict, ())),
        "PublisherMetrics": lambda r, _t: m.PublisherMetrics(r),
        "HealthCollector": lambda r, _t: r.register(m.HealthCollector(HealthBook, {})),
        "register_usage_collector": lambda r, t: register_usage_collector(r, UsageSnapshot, "node", tenant_labels=t),
    },
    "controller": {"PublisherMetrics": lambda r, _t: m.PublisherMetrics(r)},
    "webhook": {"WebhookMetrics": lambda r, _t: m.WebhookMetrics(r)},
}
"""Daemon package -> the metric sets its ``main`` puts on its registry, by the name it imports."""

DAEMON_TITLES = {"kubelet_plugin": "Kubelet plugin", "controller": "Controller", "webhook": "Webhook"}


@dataclass(frozen=True, slots=True)
class MetricRow:
    """One metric as exposed: name, type, label names, help."""

    name: str
    type: str
    labels: tuple[str, ...]
    help: str


def _wrapper_row(metric: MetricWrapperBase) -> MetricRow:
    kind = str(getattr(metric, "_type", "unknown"))
    name = str(getattr(metric, "_name", ""))
    labels = tuple(getattr(metric, "_labelnames", ()))
    return MetricRow(f"{name}_total" if kind == "counter" else name, kind, labels, str(getattr(metric, "_documentation", "")))


def _family_row(family: Metric) -> MetricRow:
    labels: list[str] = list(getattr(family, "_labelnames", ()))
    for sample in family.samples:
        labels += [k for k in sample.labels if k not in labels and k not in _SUFFIX_LABELS]
    name = f"{family.name}_total" if family.type == "counter" else family.name
    return MetricRow(name, family.type, tuple(labels), family.documentation)


def rows_of(registry: RecordingRegistry) -> list[MetricRow]:
    """Every metric of the registry's collectors, in registration order."""
    out: list[MetricRow] = []
    for collector in registry.collectors:
        if isinstance(collector, MetricWrapperBase):
            out.append(_wrapper_row(collector))
            continue
        describe = getattr(collector, "describe", None)
        families: Iterator[Metric] = describe() if callable(describe) else iter(collector.collect())
        out += [_family_row(f) for f in families]
    return out


def _standard() -> list[MetricRow]:
    """What ``new_registry`` registers before any daemon's set: the process, platform and GC collectors."""
    registry = RecordingRegistry()
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    return rows_of(registry)


def daemon_rows(daemon: str, tenant_labels: bool) -> list[MetricRow]:
    """The daemon's own metrics (the standard ones left out), as its registry holds them."""
    registry = RecordingRegistry()
    for build in BUILDERS[daemon].values():
        build(registry, tenant_labels)
    return rows_of(registry)


def imported_sets(daemon: str) -> set[str]:
    """The metric sets the daemon's package imports from ``dra_driver.obs`` (by name)."""
    found: set[str] = set()
    for path in sorted((REPO / daemon).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.module in _OBS_MODULES:
                found.update(
                    a.name for a in node.names if a.name.endswith(("Metrics", "Collector")) or a.name.startswith("register_")
                )
    return found


def _check_builders() -> None:
    for daemon, builders in BUILDERS.items():
        missing = sorted(imported_sets(daemon) - set(builders))
        if missing:
            raise ReferenceError(
                f"{daemon} imports metric sets {', '.join(missing)} that scripts/refdocs/metrics.py BUILDERS does not build"
            )


def _labels(row: MetricRow, tenant: MetricRow | None) -> str:
    text = ", ".join(code(label) for label in row.labels) or "—"
    if tenant is not None and tenant.labels != row.labels:
        text += " (with `--metrics-tenant-labels`: " + ", ".join(code(label) for label in tenant.labels) + ")"
    return text


def _table(rows: Sequence[MetricRow], tenant_rows: Sequence[MetricRow] = ()) -> str:
    tenant = {r.name: r for r in tenant_rows}
    body = [(code(r.name), r.type, _labels(r, tenant.get(r.name)), cell(r.help)) for r in rows]
    return table(("Metric", "Type", "Labels", "Help"), body)


def render() -> str:
    """The page."""
    _check_builders()
    intro = (
        "Every metric the daemons serve on `/metrics` (`--metrics-port`, the chart's `metrics.port.*`), "
        "read from the Prometheus registries the daemons build. Names are a contract: the chart's "
        "alerts and dashboard use them. Counters and histograms of known label values exist at zero "
        "from the start. A histogram `name` is exposed as `name_bucket`, `name_sum` and `name_count`."
    )
    parts = [header("Metrics", "metrics", intro)]
    for daemon, title in DAEMON_TITLES.items():
        rows = daemon_rows(daemon, tenant_labels=False)
        tenant = daemon_rows(daemon, tenant_labels=True)
        parts.append(f"\n## {title}\n\n{_table(rows, tenant)}")
    parts.append(
        "\n## Every daemon: process and Python\n\n"
        "The standard collectors of the Prometheus client, on each daemon's registry (Linux).\n\n" + _table(_standard())
    )
    return "".join(parts)
