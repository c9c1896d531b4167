"""The chart's daemon env against the daemons' flag tables: every env var is a flag's, of its type, required ones set.

A new flag touches its table (``kubelet_plugin.settings``, ``controller.settings``,
``webhook.settings``), the chart's values and template, and a test here or beside the chart; a
chart env var no table knows, one whose literal value the flag would refuse, or a required flag
the chart forgets fails here. The Helm CLI is the one ``e2e/helm/build.sh`` builds (``make test``
builds it); a missing binary fails naming the script.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from controller.settings import FLAGS as CONTROLLER_FLAGS
from dra_driver.appkit.flag_table import FLOAT, FLOAT_TEXT, INT, INT_TEXT, Flag, FlagTable
from kubelet_plugin.settings import FLAGS as PLUGIN_FLAGS
from testkit.helm_cli import CHART, Helm, env_of
from webhook.settings import FLAGS as WEBHOOK_FLAGS

TABLES: dict[str, FlagTable[Any]] = {t.prog: t for t in (PLUGIN_FLAGS, CONTROLLER_FLAGS, WEBHOOK_FLAGS)}
"""Each daemon's table by its command (the container's ``command``)."""

RENDERS = {
    "defaults-nvml": ("webhook.enabled=true", "controller.enabled=true", "controller.nodeName=node-a"),
    "fake-all-on": (
        "gpus.fake.profile=h100x8", "mig.strategy=dynamic", "gpus.fake.migLatency=zero", "controller.enabled=true",
        "controller.nodeName=node-a", "webhook.enabled=true", "deviceStatus.enabled=true", "health.evict=true",
        "metrics.auth.tokenSecret.name=scrape-token", "metrics.tls.secretName=metrics-tls",
        "metrics.tls.clientCA.secretName=scrapers-ca", "metrics.tenantLabels=true",
    ),
    "consumable-metrics-off": (
        "gpus.fake.profile=a100-80x1", "sharing.consumable=true", "metrics.enabled=false", "health.enabled=false",
        "kubeletPlugin.healthcheckPort=-1", "controller.enabled=true", "controller.nodeName=node-a",
    ),
    "mig-static-nvml": ("mig.strategy=static", "webhook.enabled=true"),
    "node-pools": (
        "gpus.fake.profile=h100x8", "nodePools[0].name=mig-dynamic", "nodePools[0].mig.strategy=dynamic",
        "nodePools[0].nodeSelector.matchLabels.pool=mig", "nodePools[1].name=shared", "nodePools[1].sharing.consumable=true",
        "nodePools[1].nodeSelector.matchLabels.pool=shared", "mig.profiles={1g,3g,7g.80gb}",
    ),
}  # fmt: skip
"""Value sets that together turn on every env var the chart can set."""

NOT_FLAGS = {"LD_LIBRARY_PATH": "NVML mode: where the plugin's loader finds the driver's libnvidia-ml.so.1"}
"""Env vars the chart sets for the process, not for a flag: each says why."""

DOWNWARD = {"spec.nodeName": "node-a", "metadata.uid": "0f7c2d4e-1b2a-4c3d-9e8f-a1b2c3d4e5f6", "status.podIP": "10.244.0.9"}
"""What the downward API would give the fields the chart reads from the pod."""


@pytest.fixture(scope="module")
def chart_helm(tmp_path_factory: pytest.TempPathFactory) -> Helm:
    """The built Helm binary; fails (never skips) naming e2e/helm/build.sh when it is missing."""
    return Helm.built(tmp_path_factory.mktemp("helm-home"))


def _daemon_containers(docs: list[dict[str, Any]]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(object name, container) of every container a workload runs."""
    for d in docs:
        if d["kind"] in ("DaemonSet", "Deployment", "StatefulSet", "Job", "Pod"):
            spec = d["spec"]["template"]["spec"] if d["kind"] != "Pod" else d["spec"]
            for c in [*spec.get("initContainers", []), *spec["containers"]]:
                yield d["metadata"]["name"], c


def _daemon(container: dict[str, Any]) -> str:
    """The daemon a container runs: its command, or what its shell wrapper ``exec``s last (NVML mode)."""
    command = list(container.get("command") or ())
    if command[:2] == ["/bin/sh", "-ec"]:
        last = command[2].strip().splitlines()[-1].split()
        assert last[0] == "exec", f"{container['name']}: a shell wrapper that does not exec a daemon last"
        return str(last[1])
    assert len(command) == 1, f"{container['name']}: {command}"
    return str(command[0])


def _check_literal(row: Flag, value: str) -> None:
    if row.choices:
        assert value in row.choices, f"{row.env}={value!r}: {row.option} accepts {row.choices}"
    if row.kind in (INT, INT_TEXT):
        int(value)
    if row.kind in (FLOAT, FLOAT_TEXT):
        float(value)


@pytest.fixture(params=sorted(RENDERS), scope="module")
def rendered(request: pytest.FixtureRequest, chart_helm: Helm) -> list[dict[str, Any]]:
    return chart_helm.template(*RENDERS[request.param])


def test_every_container_runs_a_daemon_with_a_table(rendered: list[dict[str, Any]]) -> None:
    daemons = {_daemon(c) for _, c in _daemon_containers(rendered)}
    assert daemons, "the chart renders no workload"
    for daemon in daemons:
        assert daemon in TABLES, f"{daemon}: a container whose flags no table describes"


def test_every_env_var_is_a_flag_of_its_daemon_and_a_value_it_accepts(rendered: list[dict[str, Any]]) -> None:
    for name, c in _daemon_containers(rendered):
        table = TABLES[_daemon(c)]
        rows = {row.env: row for row in table.rows}
        for env, value in env_of(c).items():
            if env in NOT_FLAGS:
                continue
            assert env in rows, f"{name}: env {env} is no flag of {table.prog} (add a row to its table, or drop it)"
            if isinstance(value, str):
                _check_literal(rows[env], value)
            else:
                assert value["fieldRef"]["fieldPath"] in DOWNWARD, f"{name}: {env} from {value}"


def test_every_required_flag_is_set(rendered: list[dict[str, Any]]) -> None:
    for name, c in _daemon_containers(rendered):
        table = TABLES[_daemon(c)]
        env = env_of(c)
        missing = [row.env for row in table.rows if row.required and not env.get(row.env)]
        assert not missing, f"{name}: the chart leaves required {missing} of {table.prog} unset"


def test_the_rendered_env_parses(rendered: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch) -> None:
    """Each daemon's own parser and cross-flag checks accept the env the chart gives it (nothing else set)."""
    for name, c in _daemon_containers(rendered):
        table = TABLES[_daemon(c)]
        with monkeypatch.context() as env:
            for row in table.rows:
                env.delenv(row.env, raising=False)
            for var, value in env_of(c).items():
                if var in NOT_FLAGS:
                    continue
                env.setenv(var, value if isinstance(value, str) else DOWNWARD[value["fieldRef"]["fieldPath"]])
            settings = table.parse([])
        assert settings is not None, name


def test_the_renders_here_reach_every_env_var_the_templates_name(chart_helm: Helm) -> None:
    """So that the checks above see every env var: one the value sets here never render would go unchecked."""
    named = set()
    for template in (CHART / "templates").iterdir():
        named |= set(re.findall(r"^\s*- name: ([A-Z][A-Z0-9_]*)\s*$", template.read_text(), re.MULTILINE))
    rendered = set()
    for sets in RENDERS.values():
        for _, c in _daemon_containers(chart_helm.template(*sets)):
            rendered |= set(env_of(c))
    assert named - rendered == set(), "add a value set to RENDERS that renders these"
