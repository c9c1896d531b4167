"""The chart's GPU health values reach the plugin as the env vars its flags read, and bad ones are refused."""

from __future__ import annotations

import pytest

from kubelet_plugin.settings import parse
from testkit.helm_cli import CHART, PLUGIN, Helm, by_kind, env_of


def plugin_env(helm: Helm, *sets: str) -> dict[str, str]:
    ds = by_kind(helm.template("gpus.fake.profile=h100x8", *sets), "DaemonSet")[PLUGIN]
    (container,) = ds["spec"]["template"]["spec"]["containers"]
    return {k: str(v) for k, v in env_of(container).items()}


def test_health_is_on_by_default_without_eviction(helm: Helm) -> None:
    env = plugin_env(helm)
    assert ("auto", "false", "true") == (env["HEALTH"], env["HEALTH_EVICT"], env["HEALTH_STREAM"])


def test_health_values_become_settings_the_plugin_parses(helm: Helm, monkeypatch: pytest.MonkeyPatch) -> None:
    env = plugin_env(helm, "health.evict=true", "health.checkInterval=2", "health.hold=30", "health.stream=false")
    for k in ("HEALTH", "HEALTH_EVICT", "HEALTH_CHECK_INTERVAL", "HEALTH_HOLD", "HEALTH_STREAM"):
        monkeypatch.setenv(k, env[k])
    s = parse(["--node-name", "n"])
    got = (s.health, s.health_evict, s.health_check_interval_s, s.health_hold_s, s.health_stream)
    assert ("auto", True, 2.0, 30.0, False) == got
    assert "off" == plugin_env(helm, "health.enabled=false")["HEALTH"]


@pytest.mark.parametrize(("bad", "mentions"), [("health.checkInterval=0", "checkInterval"), ("health.evict=yes", "evict")])
def test_bad_health_values_are_refused_naming_the_value(helm: Helm, bad: str, mentions: str) -> None:
    out = helm.run("template", "x", str(CHART), "--set", bad, check=False)
    assert out.returncode != 0
    assert mentions in out.stderr
