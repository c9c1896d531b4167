"""The chart's DraGpuAllocatedIdle alert, evaluated by Prometheus' own rule engine (``promtool test rules``).

The PrometheusRule is rendered by Helm exactly as installed (``templates/prometheusrule.yaml``),
its rule groups written to a rules file, and promtool replays recorded series of
``dra_gpu_claim_idle_seconds`` (what the plugin's usage collector exports: 0 while busy, growing
while idle) against it: a claim idle for 40 minutes fires, a claim with one busy device does not,
a claim that became busy again resolves, and the threshold and severity come from the values. The
claim is named as the plugin's series name it: by namespace and name with ``metrics.tenantLabels``,
by UID otherwise (the default).

promtool is built from Prometheus' Go module by ``testkit/go/promtool/build.sh`` (version pinned in
``testkit/go/promtool/go.mod``; ``make k8s`` builds it). A missing binary fails the test, naming the
script, never skips it.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from testkit.cluster import GO_DIR, cache_dir
from testkit.helm_cli import CHART, NAMESPACE, RELEASE, Helm

PROMTOOL_BUILD = GO_DIR / "promtool" / "build.sh"
RULE_TEMPLATE = "templates/prometheusrule.yaml"
TENANT = "metrics.tenantLabels=true"


def promtool_version() -> str:
    """The Prometheus module version pinned in testkit/go/promtool/go.mod."""
    found = re.search(r"^\s*github\.com/prometheus/prometheus (v\S+)", (GO_DIR / "promtool" / "go.mod").read_text(), re.MULTILINE)
    assert found, "testkit/go/promtool/go.mod requires no github.com/prometheus/prometheus module"
    return found.group(1)


@pytest.fixture(scope="module")
def promtool() -> Path:
    """The pinned, built promtool; fails (never skips) naming testkit/go/promtool/build.sh when it is missing."""
    version = promtool_version()
    binary = cache_dir() / f"promtool-{version}" / "promtool"
    if not os.access(binary, os.X_OK):
        pytest.fail(f"promtool {version} is not built ({binary} missing). Build it with: {PROMTOOL_BUILD}")
    return binary


def render_rules(helm: Helm, tmp_path: Path, *sets: str) -> tuple[Path, dict[str, Any]]:
    """The chart's PrometheusRule with ``sets``; its groups written as a Prometheus rules file."""
    args = ["template", RELEASE, str(CHART), "--namespace", NAMESPACE, "--show-only", RULE_TEMPLATE]
    args += ["--set", "monitoring.prometheusRule.enabled=true"]
    for s in sets:
        args += ["--set", s]
    docs = [d for d in yaml.safe_load_all(helm.run(*args).stdout) if d]
    assert [d["kind"] for d in docs] == ["PrometheusRule"]
    rule = docs[0]
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}, sort_keys=False))
    return path, rule


def uid(claim: str) -> str:
    return f"uid-of-{claim}"


def series(claim: str, device: str, values: str, namespace: str = "team-a", *, tenant: bool = True) -> dict[str, str]:
    """What the plugin exports for one device: with tenant labels the claim's namespace, name and pods; its UID always."""
    labels = f'claim_uid="{uid(claim)}",node="node-a",device="{device}"'
    if tenant:
        labels = f'namespace="{namespace}",claim="{claim}",{labels},pod="{claim}-pod"'
    return {"series": f"dra_gpu_claim_idle_seconds{{{labels}}}", "values": values}


def alert(claim: str, idle: str, threshold: int, severity: str = "warning", namespace: str = "team-a") -> dict[str, Any]:
    """The alert promtool must see: labels and both annotations, as the rule templates them."""
    return {
        "exp_labels": {"namespace": namespace, "claim": claim, "severity": severity},
        "exp_annotations": {
            "summary": f"GPU claim {namespace}/{claim} is allocated but idle",
            "description": (
                f"Every device of ResourceClaim {namespace}/{claim} has been idle (GPU utilization below the plugin's "
                f"idle threshold, 5% by default) for {idle} (threshold {threshold}s). The GPUs stay allocated to it: "
                "delete the claim or its pods to free them."
            ),
        },
    }


def alert_by_uid(claim: str, idle: str, threshold: int) -> dict[str, Any]:
    """The alert without tenant labels: the claim by UID only."""
    return {
        "exp_labels": {"claim_uid": uid(claim), "severity": "warning"},
        "exp_annotations": {
            "summary": f"GPU claim with UID {uid(claim)} is allocated but idle",
            "description": (
                f"Every device of the ResourceClaim with UID {uid(claim)} has been idle (GPU utilization below the "
                f"plugin's idle threshold, 5% by default) for {idle} (threshold {threshold}s). The GPUs stay allocated "
                "to it: delete the claim or its pods to free them. `dra-gpu top` names the claim (the plugin's metrics "
                "name claims by UID unless metrics.tenantLabels is true)."
            ),
        },
    }


def at(eval_time: str, *alerts: dict[str, Any]) -> dict[str, Any]:
    """An alert_rule_test: exactly ``alerts`` firing at ``eval_time``."""
    return {"eval_time": eval_time, "alertname": "DraGpuAllocatedIdle", "exp_alerts": list(alerts)}


def run_tests(promtool: Path, rules: Path, tests: list[dict[str, Any]]) -> subprocess.CompletedProcess[str]:
    spec = rules.parent / "tests.yaml"
    spec.write_text(yaml.safe_dump({"rule_files": [rules.name], "evaluation_interval": "1m", "tests": tests}, sort_keys=False))
    return subprocess.run(
        [str(promtool), "test", "rules", spec.name], cwd=rules.parent, capture_output=True, text=True, timeout=120, check=False
    )


@pytest.mark.parametrize("sets", [(), (TENANT,)], ids=["by-uid", "tenant-labels"])
def test_the_rendered_rules_pass_promtools_check(helm: Helm, promtool: Path, tmp_path: Path, sets: tuple[str, ...]) -> None:
    rules, rule = render_rules(helm, tmp_path, *sets)
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    proc = subprocess.run([str(promtool), "check", "rules", str(rules)], capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS: 1 rules found" in proc.stdout


def test_idle_claims_fire_busy_ones_do_not_and_a_claim_busy_again_resolves(helm: Helm, promtool: Path, tmp_path: Path) -> None:
    rules, _ = render_rules(helm, tmp_path, TENANT)
    test = {
        "interval": "1m",
        "input_series": [
            # idle since prepare on both devices: 60 s more each minute
            series("idle", "gpu-0", "0+60x60"),
            series("idle", "gpu-1", "0+60x60"),
            # one device idle, the other busy all along (0): the claim is in use
            series("half", "gpu-2", "0+60x60"),
            series("half", "gpu-3", "0x60"),
            # idle 35 minutes, then busy again
            series("woke", "gpu-4", "0+60x35 0x25"),
        ],
        "alert_rule_test": [
            at("29m"),
            at("30m", alert("idle", "30m 0s", 1800), alert("woke", "30m 0s", 1800)),
            at("35m", alert("idle", "35m 0s", 1800), alert("woke", "35m 0s", 1800)),
            at("40m", alert("idle", "40m 0s", 1800)),
        ],
    }
    proc = run_tests(promtool, rules, [test])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout


def test_by_default_claims_are_alerted_by_uid_and_no_tenant_name_is_needed(helm: Helm, promtool: Path, tmp_path: Path) -> None:
    """Tenant labels off (the chart's default): the series carry the claim's UID only, and the alert is still per claim."""
    rules, _ = render_rules(helm, tmp_path)
    test = {
        "interval": "1m",
        "input_series": [
            series("idle", "gpu-0", "0+60x60", tenant=False),
            series("idle", "gpu-1", "0+60x60", tenant=False),
            series("half", "gpu-2", "0+60x60", tenant=False),
            series("half", "gpu-3", "0x60", tenant=False),
            series("woke", "gpu-4", "0+60x35 0x25", tenant=False),
        ],
        "alert_rule_test": [
            at("29m"),
            at("30m", alert_by_uid("idle", "30m 0s", 1800), alert_by_uid("woke", "30m 0s", 1800)),
            at("40m", alert_by_uid("idle", "40m 0s", 1800)),
        ],
    }
    proc = run_tests(promtool, rules, [test])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout


def test_the_threshold_and_severity_come_from_the_values(helm: Helm, promtool: Path, tmp_path: Path) -> None:
    rules, rule = render_rules(
        helm, tmp_path, TENANT, "monitoring.idleAlert.after=3600", "monitoring.idleAlert.severity=critical"
    )
    assert rule["spec"]["groups"][0]["rules"][0]["labels"] == {"severity": "critical"}
    test = {
        "interval": "1m",
        "input_series": [series("idle", "gpu-0", "0+60x70")],
        "alert_rule_test": [
            at("40m"),
            at("59m"),
            at("61m", alert("idle", "1h 1m 0s", 3600, "critical")),
        ],
    }
    proc = run_tests(promtool, rules, [test])
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_a_wrong_expectation_fails_promtool(helm: Helm, promtool: Path, tmp_path: Path) -> None:
    """The harness can fail: expecting the busy claim to fire is reported as a failure."""
    rules, _ = render_rules(helm, tmp_path, TENANT)
    test = {
        "interval": "1m",
        "input_series": [series("half", "gpu-2", "0+60x60"), series("half", "gpu-3", "0x60")],
        "alert_rule_test": [at("40m", alert("half", "40m 0s", 1800))],
    }
    proc = run_tests(promtool, rules, [test])
    assert proc.returncode != 0
    assert "FAILED" in proc.stdout + proc.stderr
