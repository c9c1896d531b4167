"""The chart's monitoring objects as Helm renders them: the PrometheusRule and the Grafana dashboard ConfigMap.

Like ``tests/chart/test_helm_render.py`` (Helm built by ``testkit/go/helm/build.sh``): off by default, rendered
from the ``monitoring`` values, checked by the values schema, and the metric names they query
are the ones the plugin exports (``dra_driver.obs.usage_metrics``, ``dra_driver.obs.metrics``).
What the alert does with series is in ``tests/chart/test_prometheus_rules.py`` (promtool).
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from dra_driver.obs import usage_metrics
from testkit.helm_cli import CHART, NAMESPACE, Helm, by_kind

DASHBOARD = CHART / "dashboards" / "dra-gpu.json"
RULE = "dra-gpu-usage"
CONFIGMAP = "dra-gpu-dashboard"


def lint(helm: Helm, *sets: str, check: bool = True) -> str:
    args = ["lint", "--strict", str(CHART)]
    for s in sets:
        args += ["--set", s]
    proc = helm.run(*args, check=check)
    return proc.stdout + proc.stderr


def test_nothing_renders_by_default(helm: Helm) -> None:
    docs = helm.template()
    assert by_kind(docs, "PrometheusRule") == {}
    assert CONFIGMAP not in by_kind(docs, "ConfigMap")


def test_lint_strict_passes_with_both_on(helm: Helm) -> None:
    out = lint(
        helm,
        "monitoring.prometheusRule.enabled=true",
        "monitoring.grafanaDashboard.enabled=true",
        "monitoring.prometheusRule.labels.release=kube-prometheus-stack",
        "monitoring.grafanaDashboard.annotations.grafana_folder=GPUs",
    )
    assert "1 chart(s) linted, 0 chart(s) failed" in out


def test_prometheus_rule_alerts_per_claim_on_all_devices_idle(helm: Helm) -> None:
    docs = helm.template(
        "monitoring.prometheusRule.enabled=true", "monitoring.prometheusRule.labels.release=prom", "metrics.tenantLabels=true"
    )
    rule = by_kind(docs, "PrometheusRule")[RULE]
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["metadata"]["namespace"] == NAMESPACE
    assert rule["metadata"]["labels"]["release"] == "prom"
    [group] = rule["spec"]["groups"]
    [alert] = group["rules"]
    assert alert["alert"] == "DraGpuAllocatedIdle"
    assert alert["expr"] == f"min by (namespace, claim) ({usage_metrics.IDLE}) >= 1800"
    assert alert["labels"] == {"severity": "warning"}
    assert "{{ $labels.namespace }}/{{ $labels.claim }}" in alert["annotations"]["summary"]
    assert "for" not in alert  # the idle time is in the value: a `for` would only delay it


def test_without_tenant_labels_the_rule_alerts_per_claim_uid(helm: Helm) -> None:
    """The default: the series name no namespace or claim, so the alert takes each claim's UID."""
    alert = by_kind(helm.template("monitoring.prometheusRule.enabled=true"), "PrometheusRule")[RULE]["spec"]["groups"][0]
    [rule] = alert["rules"]
    assert rule["expr"] == f"min by (claim_uid) ({usage_metrics.IDLE}) >= 1800"
    assert "{{ $labels.claim_uid }}" in rule["annotations"]["summary"]
    assert "$labels.namespace" not in rule["annotations"]["summary"] + rule["annotations"]["description"]
    assert "dra-gpu top" in rule["annotations"]["description"]


def test_threshold_and_severity_follow_the_values(helm: Helm) -> None:
    docs = helm.template(
        "monitoring.prometheusRule.enabled=true", "monitoring.idleAlert.after=7200", "monitoring.idleAlert.severity=info"
    )
    alert = by_kind(docs, "PrometheusRule")[RULE]["spec"]["groups"][0]["rules"][0]
    assert alert["expr"].endswith(">= 7200")
    assert alert["labels"] == {"severity": "info"}
    assert "(threshold 7200s)" in alert["annotations"]["description"]


def test_dashboard_configmap_carries_the_file_and_the_sidecar_label(helm: Helm) -> None:
    docs = helm.template(
        "monitoring.grafanaDashboard.enabled=true",
        "monitoring.grafanaDashboard.namespace=monitoring",
        "monitoring.grafanaDashboard.annotations.grafana_folder=GPUs",
    )
    cm = by_kind(docs, "ConfigMap")[CONFIGMAP]
    assert cm["metadata"]["namespace"] == "monitoring"
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert cm["metadata"]["annotations"] == {"grafana_folder": "GPUs"}
    assert json.loads(cm["data"]["dra-gpu.json"]) == json.loads(DASHBOARD.read_text())


def test_dashboard_namespace_defaults_to_the_release(helm: Helm) -> None:
    cm = by_kind(helm.template("monitoring.grafanaDashboard.enabled=true"), "ConfigMap")[CONFIGMAP]
    assert cm["metadata"]["namespace"] == NAMESPACE
    assert "annotations" not in cm["metadata"]


def exprs(dashboard: dict[str, Any]) -> list[str]:
    return [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]


def test_dashboard_queries_only_metrics_the_driver_exports() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    exported = {
        usage_metrics.UTILIZATION,
        usage_metrics.MEMORY,
        usage_metrics.IDLE,
        usage_metrics.PROCESS_UTILIZATION,
        usage_metrics.PROCESS_MEMORY,
        "dra_gpu_prepared_devices",
    }
    used = {m for e in exprs(dashboard) for m in re.findall(r"\bdra_gpu_[a-z_]+", e)}
    assert used
    assert used <= exported, used - exported
    titles = [p["title"] for p in dashboard["panels"]]
    for wanted in ("Allocated GPU devices by namespace", "GPU utilization by namespace", "Idle GPU devices by namespace"):
        assert wanted in titles
    assert {v["name"] for v in dashboard["templating"]["list"]} >= {"datasource", "namespace", "node", "idle_after"}
    assert len({p["id"] for p in dashboard["panels"]}) == len(dashboard["panels"])


@pytest.mark.parametrize(
    ("bad", "mentions"),
    [
        ("monitoring.idleAlert.after=10", "after"),
        ("monitoring.idleAlert.severity=very bad", "severity"),
        ("monitoring.typo=1", "typo"),
        ("monitoring.grafanaDashboard.namespace=Not_A_Namespace", "namespace"),
        ("monitoring.prometheusRule.enabled=yes", "enabled"),
    ],
)
def test_schema_rejects_bad_monitoring_values(helm: Helm, bad: str, mentions: str) -> None:
    out = lint(helm, bad, check=False)
    assert "0 chart(s) failed" not in out
    assert mentions in out
