"""The Helm chart (deploy/helm/dra-gpu) as Helm renders it: Helm's linter, the values schema, the manifests.

The Helm CLI is built from source by ``testkit/go/helm/build.sh`` (version pinned in
``testkit/go/helm/go.mod``); ``make test`` runs it. This module builds nothing: a missing binary fails
with the script to run. What the API server does with the chart is in ``e2e/test_helm_install.py``.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pytest
import yaml

from dra_driver.appkit.flag_table import FlagTable
from dra_driver.appkit.flags import COMMON_FLAGS
from dra_driver.core.driver import DEFAULT_DRIVER_NAME
from dra_driver.core.mig import MigStrategy
from dra_driver.sources.fake import PROFILES
from testkit.helm_cli import CHART, NAMESPACE, PLUGIN, RELEASE, Helm, by_kind, env_of

# -- Helm's linter and the values schema ------------------------------------------------------


@pytest.mark.parametrize(
    "sets",
    [
        (),
        ("gpus.fake.profile=h100x8",),
        ("gpus.fake.profile=l4x4", "controller.enabled=true", "controller.nodeName=node-a", "deviceStatus.enabled=true"),
        ("admissionPolicy.enabled=false", "deviceClasses.mig.enabled=false", "kubeletPlugin.healthcheckPort=-1"),
        ("gpus.fake.profile=h100x8", "mig.strategy=dynamic", "gpus.fake.migLatency=zero", "kubeletPlugin.gcInterval=0"),
        ("mig.strategy=static", "controller.enabled=true", "controller.nodeName=node-a"),
        ("gpus.fake.profile=a100-80x1", "sharing.consumable=true", "controller.enabled=true", "controller.nodeName=node-a"),
        ("sharing.consumable=true", "mig.strategy=static"),
        ("mig.strategy=dynamic", "extendedResources.enabled=true", "extendedResources.gpu=example.com/gpu"),
        ("metrics.serviceMonitor.enabled=true", "webhook.enabled=true", "controller.enabled=true", "controller.nodeName=node-a"),
        ("metrics.enabled=false", "kubeletPlugin.healthcheckPort=-1"),
        (
            "metrics.auth.tokenSecret.name=scrape-token",
            "metrics.tls.secretName=metrics-tls",
            "metrics.tls.clientCA.secretName=scrapers-ca",
            "metrics.tenantLabels=true",
            "metrics.networkPolicy.enabled=true",
            "metrics.networkPolicy.from[0].namespaceSelector.matchLabels.team=monitoring",
            "webhook.enabled=true",
            "controller.enabled=true",
            "controller.nodeName=node-a",
        ),
    ],
    ids=[
        "defaults",
        "fake-h100x8",
        "controller-and-status",
        "minimal",
        "mig-dynamic-fake",
        "mig-static-nvml",
        "consumable-fake",
        "consumable-nvml-mig-static",
        "extended-resources",
        "metrics-service-monitor",
        "metrics-off",
        "metrics-private-all-on",
    ],
)
def test_lint_strict_passes(helm: Helm, sets: tuple[str, ...]) -> None:
    """``helm lint --strict`` (warnings are errors) accepts the chart with these values."""
    args = ["lint", "--strict", str(CHART)]
    for s in sets:
        args += ["--set", s]
    out = helm.run(*args).stdout
    assert "1 chart(s) linted, 0 chart(s) failed" in out


@pytest.mark.parametrize(
    ("bad", "mentions"),
    [
        ("gpus.fake.profile=foo", "profile"),
        ("driverName=GPU_Driver", "driverName"),
        ("kubeletPlugin.healthcheckPort=70000", "healthcheckPort"),
        ("sharing.consumable=yes", "consumable"),
        # Both are fine alone; together the daemons would refuse to start.
        ("sharing.consumable=true,mig.strategy=dynamic", "at '/mig/strategy': value must be one of 'none', 'static'"),
        # The class config of the former placeholder class is gone; the old key is an error, not ignored.
        ("deviceClasses.shared.timeSlicingInterval=Long", "timeSlicingInterval"),
        ("kubeletPlugin.registrarDir=relative/dir", "registrarDir"),
        ("kubeletPlugin.typo=1", "typo"),
        ("controller.enabled=true", "nodeName"),
        ("mig.strategy=auto", "/mig/strategy"),
        ("mig.strategy=Dynamic", "/mig/strategy"),
        ("gpus.fake.migLatency=slow", "migLatency"),
        ("kubeletPlugin.gcInterval=-5", "gcInterval"),
        ("kubeletPlugin.gcInterval=often", "gcInterval"),
        # Tri-state: auto, true or false, nothing else.
        ("extendedResources.enabled=yes", "at '/extendedResources/enabled': value must be one of 'auto', true, false"),
        ("extendedResources.gpu=gpu", "/extendedResources/gpu"),  # an extended resource needs a domain
        ("extendedResources.gpu=nvidia.com/GPU count", "/extendedResources/gpu"),
        ("extendedResources.mig.profiles={1g.10gb,huge}", "/extendedResources/mig/profiles"),
        ("extendedResources.mig.profiles={1g.10gb,1g.10gb}", "/extendedResources/mig/profiles"),
        ("clusterFeatureGates=DRAExtendedResource", "/clusterFeatureGates"),  # a list, of gate names
        ("clusterFeatureGates={dra-extended-resource}", "/clusterFeatureGates"),
    ],
)
def test_schema_rejects_bad_values(helm: Helm, bad: str, mentions: str) -> None:
    """values.schema.json stops a bad value before anything renders; the error names the value."""
    for command in (["lint", "--strict"], ["template", RELEASE]):
        proc = helm.run(*command, str(CHART), "--set", bad, check=False)
        assert proc.returncode != 0, f"helm {command[0]} accepted {bad}"
        assert mentions in proc.stdout + proc.stderr, proc.stdout + proc.stderr


def test_schema_profiles_are_the_codes_profiles() -> None:
    """The schema's fake profiles are exactly the ones the daemons know (plus "" for NVML)."""
    schema = json.loads((CHART / "values.schema.json").read_text())
    enum = schema["properties"]["gpus"]["properties"]["fake"]["properties"]["profile"]["enum"]
    assert sorted(enum) == sorted(["", *PROFILES])


def test_schema_mig_choices_are_the_daemons_flag_choices() -> None:
    """mig.strategy and gpus.fake.migLatency allow exactly what --mig and --fake-mig-latency accept."""
    parser = FlagTable("common", "common", "", object, COMMON_FLAGS).parser()
    choices = {a.dest: sorted(a.choices or ()) for a in parser._actions}
    schema = json.loads((CHART / "values.schema.json").read_text())["properties"]
    assert sorted(schema["mig"]["properties"]["strategy"]["enum"]) == choices["mig"] == sorted(m.value for m in MigStrategy)
    latency = schema["gpus"]["properties"]["fake"]["properties"]["migLatency"]["enum"]
    assert sorted(latency) == choices["fake_mig_latency"]
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["mig"]["strategy"] == MigStrategy.NONE.value  # off unless asked for
    assert values["gpus"]["fake"]["migLatency"] == parser.get_default("fake_mig_latency")


def test_values_default_driver_name_is_the_codes() -> None:
    """The chart's default driverName is the daemons' default (dra_driver.core.driver)."""
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["driverName"] == DEFAULT_DRIVER_NAME


# -- What renders ------------------------------------------------------------------------------


def test_daemonset_fake_mode(helm: Helm) -> None:
    """Fake GPUs: the flags as env vars, per-pod sockets, surge update, gRPC liveness, no privilege."""
    docs = helm.template("gpus.fake.profile=h100x8")
    ds = by_kind(docs, "DaemonSet")[PLUGIN]
    assert ds["spec"]["updateStrategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
    pod = ds["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == PLUGIN
    assert pod["priorityClassName"] == "system-node-critical"
    (c,) = pod["containers"]
    assert c["command"] == ["dra-gpu-kubelet-plugin"]
    assert env_of(c) == {
        "NODE_NAME": {"fieldRef": {"fieldPath": "spec.nodeName"}},
        "POD_UID": {"fieldRef": {"fieldPath": "metadata.uid"}},
        "DRIVER_NAME": DEFAULT_DRIVER_NAME,
        "LOG_LEVEL": "info",
        "MIG_STRATEGY": "none",
        "SHARING": "none",
        "FAKE_GPUS": "h100x8",
        "FAKE_MIG_LATENCY": "realistic",
        "CDI_ROOT": "/var/run/cdi",
        "REGISTRAR_DIR": "/var/lib/kubelet/plugins_registry",
        "PLUGIN_DIR": f"/var/lib/kubelet/plugins/{DEFAULT_DRIVER_NAME}",
        "HEALTHCHECK_PORT": "51515",
        "PUBLISH_SLICES": "true",
        "GC_INTERVAL": "600",
        "RETRY_WAITING_PODS": "true",
        "DEVICE_PLUGIN_CHECK_INTERVAL": "30",
        "LOCAL_CORDON_CHECK_INTERVAL": "10",
        "METRICS_PORT": "9420",
        "USAGE_INTERVAL": "10",
        "HEALTH": "auto",
        "HEALTH_EVICT": "false",
        "HEALTH_CHECK_INTERVAL": "10",
        "HEALTH_HOLD": "600",
        "HEALTH_STREAM": "true",
        "DEVICE_STATUS": "true",
        "BOOT_ID_FILE": "/host/boot_id",
        "METRICS_ADDRESS": {"fieldRef": {"fieldPath": "status.podIP"}},  # the pod's IP, not every address
        "METRICS_TENANT_LABELS": "false",
    }
    assert c["livenessProbe"]["grpc"] == {"port": 51515, "service": "liveness"}
    # Ready once registered with the kubelet: a surge update keeps a registered plugin on the node.
    assert c["readinessProbe"]["grpc"] == {"port": 51515, "service": "readiness"}
    sc = c["securityContext"]
    assert sc["privileged"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    # Host paths are mounted at the same paths inside; no driver root without NVML. The node's
    # boot id file is the one exception: procfs paths cannot be mount targets in a container.
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    host = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"]}
    expected = {
        "plugins-registry": "/var/lib/kubelet/plugins_registry",
        "plugins": "/var/lib/kubelet/plugins",
        "cdi": "/var/run/cdi",
    }
    assert mounts == {**expected, "boot-id": "/host/boot_id"}
    assert host == {**expected, "boot-id": "/proc/sys/kernel/random/boot_id"}
    assert {"readOnly": True, "mountPath": "/host/boot_id", "name": "boot-id"} in c["volumeMounts"]


def test_daemonset_nvml_mode(helm: Helm) -> None:
    """Real GPUs (the default): privileged, the driver root mounted read-only, no FAKE_GPUS."""
    docs = helm.template("gpus.nvml.driverRoot=/run/nvidia/driver", "driverName=gpu.example.org")
    pod = by_kind(docs, "DaemonSet")[PLUGIN]["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    assert c["securityContext"] == {"privileged": True}
    env = env_of(c)
    assert "FAKE_GPUS" not in env
    assert "FAKE_MIG_LATENCY" not in env  # the simulator's knob means nothing on real GPUs
    assert env["MIG_STRATEGY"] == "none"
    assert env["PLUGIN_DIR"] == "/var/lib/kubelet/plugins/gpu.example.org"
    assert env["LD_LIBRARY_PATH"] == "/run/dra-gpu/nvml"
    assert c["command"][:2] == ["/bin/sh", "-ec"]
    assert c["command"][2].rstrip().endswith("exec dra-gpu-kubelet-plugin")
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["driver-root"]["hostPath"]["path"] == "/run/nvidia/driver"
    mount = next(m for m in c["volumeMounts"] if m["name"] == "driver-root")
    assert mount["readOnly"] is True
    assert mount["mountPropagation"] == "HostToContainer"


def rule_set(rules: Sequence[Mapping[str, Any]]) -> set[tuple[tuple[str, ...], ...]]:
    """ClusterRole rules as a set of (apiGroups, resources, resourceNames, verbs, nonResourceURLs), order-free."""
    keys = ("apiGroups", "resources", "resourceNames", "verbs", "nonResourceURLs")
    out = {tuple(tuple(sorted(rule.get(k) or ())) for k in keys) for rule in rules}
    assert len(out) == len(rules), rules  # no rule twice
    assert all(set(rule) <= set(keys) for rule in rules), rules
    return out


def rule(groups: Sequence[str], resources: Sequence[str], verbs: Sequence[str], names: Sequence[str] = ()) -> dict[str, Any]:
    """One ClusterRole rule (for ``rule_set``)."""
    r: dict[str, Any] = {"apiGroups": list(groups), "resources": list(resources), "verbs": list(verbs)}
    if names:
        r["resourceNames"] = list(names)
    return r


# What the kubelet plugin calls (dra_driver/kube): claims_api GETs one claim and its Node and
# POSTs an Event; slices_api lists and watches with a field selector, creates, replaces (PUT) and
# deletes slices and GETs the Node. Nothing GETs a single slice, lists claims or patches events.
PLUGIN_RULES = [
    rule(["resource.k8s.io"], ["resourceclaims"], ["get"]),
    rule(["resource.k8s.io"], ["resourceslices"], ["list", "watch", "create", "update", "delete"]),
    rule([""], ["nodes"], ["get"]),
    rule([""], ["events"], ["create"]),
]
# kubelet_plugin.waiting_pods lists the node's Pending pods and merge-patches one annotation (kubeletPlugin.retryWaitingPods).
RETRY_RULES = [rule([""], ["pods"], ["list", "patch"])]


def test_rbac_least_privilege(helm: Helm) -> None:
    """The plugin's ClusterRole is exactly what it calls; claim status by server-side apply (patch only), for its
    driver on its own node only, and none with device status off; pods list and patch only with retryWaitingPods;
    the webhook has no role and no token."""
    # claim_status_api server-side applies status.devices: PATCH only, never PUT; from 1.36 the API
    # server also checks associated-node:<verb> on resourceclaims/driver named by the driver.
    status_rules = [
        rule(["resource.k8s.io"], ["resourceclaims/status"], ["patch"]),
        rule(["resource.k8s.io"], ["resourceclaims/driver"], ["associated-node:patch"], names=[DEFAULT_DRIVER_NAME]),
    ]
    default = by_kind(helm.template(), "ClusterRole")[PLUGIN]["rules"]
    assert rule_set(default) == rule_set(PLUGIN_RULES + RETRY_RULES + status_rules)
    off = helm.template("deviceStatus.enabled=false")
    assert rule_set(by_kind(off, "ClusterRole")[PLUGIN]["rules"]) == rule_set(PLUGIN_RULES + RETRY_RULES)
    (container,) = by_kind(off, "DaemonSet")[PLUGIN]["spec"]["template"]["spec"]["containers"]
    assert env_of(container)["DEVICE_STATUS"] == "false"
    no_retry = helm.template("kubeletPlugin.retryWaitingPods=false")
    assert rule_set(by_kind(no_retry, "ClusterRole")[PLUGIN]["rules"]) == rule_set(PLUGIN_RULES + status_rules)
    (container,) = by_kind(no_retry, "DaemonSet")[PLUGIN]["spec"]["template"]["spec"]["containers"]
    assert env_of(container)["RETRY_WAITING_PODS"] == "false"

    # Everything on: the only roles are the plugin's and the controller's; the webhook reads nothing
    # from the API server, so it has no role and its pod mounts no token.
    docs = helm.template("webhook.enabled=true", "controller.enabled=true", "controller.nodeName=node-x")
    assert set(by_kind(docs, "ClusterRole")) == {PLUGIN, "dra-gpu-controller"}
    assert set(by_kind(docs, "ClusterRoleBinding")) == {PLUGIN, "dra-gpu-controller"}
    assert not by_kind(docs, "Role") and not by_kind(docs, "RoleBinding")
    assert by_kind(docs, "ServiceAccount")["dra-gpu-webhook"]["automountServiceAccountToken"] is False
    webhook_pod = by_kind(docs, "Deployment")["dra-gpu-webhook"]["spec"]["template"]["spec"]
    assert webhook_pod["automountServiceAccountToken"] is False


def test_node_guard_intervals_reach_the_plugin_and_the_standalone_controller(helm: Helm) -> None:
    """kubeletPlugin.devicePluginCheckInterval (0 turns the coexistence guard off) and localCordonCheckInterval are the
    env of both daemons that publish a node's GPUs: the controller runs the same node guards as the plugin."""
    docs = helm.template(
        "gpus.fake.profile=h100x8", "kubeletPlugin.devicePluginCheckInterval=0",
        "kubeletPlugin.localCordonCheckInterval=3", "controller.enabled=true", "controller.nodeName=node-x",
    )  # fmt: skip
    (plugin,) = by_kind(docs, "DaemonSet")[PLUGIN]["spec"]["template"]["spec"]["containers"]
    (ctl,) = by_kind(docs, "Deployment")["dra-gpu-controller"]["spec"]["template"]["spec"]["containers"]
    for env in (env_of(plugin), env_of(ctl)):
        assert (env["DEVICE_PLUGIN_CHECK_INTERVAL"], env["LOCAL_CORDON_CHECK_INTERVAL"]) == ("0", "3")


def test_mig_values_reach_both_daemons(helm: Helm) -> None:
    """mig.strategy goes to the plugin and the controller, migLatency with fake GPUs only, gcInterval to the plugin."""
    docs = helm.template(
        "gpus.fake.profile=h100x8", "mig.strategy=dynamic", "gpus.fake.migLatency=zero", "kubeletPlugin.gcInterval=45",
        "controller.enabled=true", "controller.nodeName=node-x",
    )  # fmt: skip
    (plugin,) = by_kind(docs, "DaemonSet")[PLUGIN]["spec"]["template"]["spec"]["containers"]
    (ctl,) = by_kind(docs, "Deployment")["dra-gpu-controller"]["spec"]["template"]["spec"]["containers"]
    p_env, c_env = env_of(plugin), env_of(ctl)
    assert (p_env["MIG_STRATEGY"], p_env["FAKE_MIG_LATENCY"], p_env["GC_INTERVAL"]) == ("dynamic", "zero", "45")
    assert (c_env["MIG_STRATEGY"], c_env["FAKE_MIG_LATENCY"]) == ("dynamic", "zero")
    assert "GC_INTERVAL" not in c_env  # the controller prepares nothing, so it has nothing to collect

    nvml = helm.template("mig.strategy=static", "controller.enabled=true", "controller.nodeName=node-x")
    for container in (
        by_kind(nvml, "DaemonSet")[PLUGIN]["spec"]["template"]["spec"]["containers"][0],
        by_kind(nvml, "Deployment")["dra-gpu-controller"]["spec"]["template"]["spec"]["containers"][0],
    ):
        env = env_of(container)
        assert env["MIG_STRATEGY"] == "static"
        assert "FAKE_MIG_LATENCY" not in env


def test_mig_device_class_selects_mig_devices(helm: Helm) -> None:
    """The mig.<driver> class is a real class for type "mig" devices; it can be switched off."""
    classes = by_kind(helm.template("driverName=gpu.example.org"), "DeviceClass")
    expr = classes["mig.gpu.example.org"]["spec"]["selectors"][0]["cel"]["expression"]
    assert expr == "device.driver == 'gpu.example.org' && device.attributes['gpu.example.org'].type == 'mig'"
    assert "mig.gpu.example.org" not in by_kind(helm.template("deviceClasses.mig.enabled=false"), "DeviceClass")


def test_consumable_sharing_reaches_both_daemons_and_renders_the_shared_class(
    helm: Helm, monkeypatch: pytest.MonkeyPatch
) -> None:
    """sharing.consumable sets SHARING=consumable on the plugin and the controller (their flag parsers read it so)
    and renders shared.<driver>, which selects this driver's devices that allow multiple allocations (and nothing
    else: no class config)."""
    from controller.main import parse as parse_controller
    from kubelet_plugin.settings import parse as parse_plugin

    docs = helm.template(
        "gpus.fake.profile=a100-80x1", "sharing.consumable=true", "driverName=gpu.example.org",
        "controller.enabled=true", "controller.nodeName=node-x",
    )  # fmt: skip
    (plugin,) = by_kind(docs, "DaemonSet")[PLUGIN]["spec"]["template"]["spec"]["containers"]
    (ctl,) = by_kind(docs, "Deployment")["dra-gpu-controller"]["spec"]["template"]["spec"]["containers"]
    assert env_of(plugin)["SHARING"] == env_of(ctl)["SHARING"] == "consumable"
    monkeypatch.setenv("SHARING", "consumable")
    monkeypatch.setenv("NODE_NAME", "node-x")
    assert parse_plugin([]).consumable is True
    assert parse_controller([]).consumable is True
    shared = by_kind(docs, "DeviceClass")["shared.gpu.example.org"]
    assert shared["spec"] == {
        "selectors": [{"cel": {"expression": "device.driver == 'gpu.example.org' && device.allowMultipleAllocations == true"}}]
    }

    # Off (the default): GPUs are allocated whole, no daemon is told otherwise, and no class selects shares.
    off = helm.template("controller.enabled=true", "controller.nodeName=node-x")
    assert "shared.gpu.dra-gpu.dev" not in by_kind(off, "DeviceClass")
    (plugin,) = by_kind(off, "DaemonSet")[PLUGIN]["spec"]["template"]["spec"]["containers"]
    (ctl,) = by_kind(off, "Deployment")["dra-gpu-controller"]["spec"]["template"]["spec"]["containers"]
    assert env_of(plugin)["SHARING"] == env_of(ctl)["SHARING"] == "none"
    # The class can be left out while the GPUs are still published for sharing.
    without_class = helm.template("sharing.consumable=true", "deviceClasses.shared.enabled=false")
    assert "shared.gpu.dra-gpu.dev" not in by_kind(without_class, "DeviceClass")


def test_controller_renders_only_when_enabled(helm: Helm) -> None:
    """The standalone controller is off by default; on, it gets its own account and node-pinned policy."""
    assert "Deployment" not in {d["kind"] for d in helm.template()}
    docs = helm.template("controller.enabled=true", "controller.nodeName=node-x", "gpus.fake.profile=a100x8")
    (c,) = by_kind(docs, "Deployment")["dra-gpu-controller"]["spec"]["template"]["spec"]["containers"]
    assert c["command"] == ["dra-gpu-controller"]
    assert env_of(c)["NODE_NAME"] == "node-x"
    policy = by_kind(docs, "ValidatingAdmissionPolicy")["dra-gpu-controller-resourceslices"]
    assert {"name": "allowedNode", "expression": "'node-x'"} in policy["spec"]["variables"]


def test_rendered_env_is_what_the_daemons_parse(helm: Helm, monkeypatch: pytest.MonkeyPatch) -> None:
    """The env the chart sets is accepted by the daemons' own flag parsers and means what the values say."""
    from controller.main import parse as parse_controller
    from kubelet_plugin.settings import parse as parse_plugin

    docs = helm.template(
        "gpus.fake.profile=b200x8", "driverName=gpu.example.org", "logLevel=debug", "kubeletPlugin.healthcheckPort=6000",
        "controller.enabled=true", "controller.nodeName=node-ctl", "mig.strategy=dynamic", "gpus.fake.migLatency=zero",
        "kubeletPlugin.gcInterval=30",
    )  # fmt: skip
    (plugin,) = by_kind(docs, "DaemonSet")[PLUGIN]["spec"]["template"]["spec"]["containers"]
    downward = {"NODE_NAME": "node-a", "POD_UID": "0f7c2d4e-1b2a-4c3d-9e8f-a1b2c3d4e5f6", "METRICS_ADDRESS": "10.244.0.9"}
    for name, value in env_of(plugin).items():
        monkeypatch.setenv(name, downward[name] if isinstance(value, dict) else value)
    s = parse_plugin([])
    assert (s.node_name, s.pod_uid, s.driver_name, s.fake_gpus) == ("node-a", downward["POD_UID"], "gpu.example.org", "b200x8")
    assert (s.healthcheck_port, s.log_level, s.publish_slices, s.device_status) == (6000, "debug", True, True)
    assert str(s.plugin_dir) == "/var/lib/kubelet/plugins/gpu.example.org"
    assert (str(s.registrar_dir), str(s.cdi_root)) == ("/var/lib/kubelet/plugins_registry", "/var/run/cdi")
    assert (s.mig, s.fake_mig_latency, s.gc_interval_s, s.consumable) == (MigStrategy.DYNAMIC, "zero", 30.0, False)
    # The simulated GPUs' state lives in the plugin dir, a host path: it survives a plugin restart.
    assert str(s.fake_gpu_state_dir) == "/var/lib/kubelet/plugins/gpu.example.org/fake-gpus"
    assert (s.metrics_address, s.metrics_tenant_labels) == ("10.244.0.9", False)

    (ctl,) = by_kind(docs, "Deployment")["dra-gpu-controller"]["spec"]["template"]["spec"]["containers"]
    for name in env_of(plugin):
        monkeypatch.delenv(name)
    for name, value in env_of(ctl).items():
        monkeypatch.setenv(name, downward[name] if isinstance(value, dict) else value)
    cs = parse_controller([])
    assert (cs.node_name, cs.driver_name, cs.fake_gpus, cs.log_level) == ("node-ctl", "gpu.example.org", "b200x8", "debug")
    assert cs.mig is MigStrategy.DYNAMIC
    assert cs.consumable is False


def test_without_a_health_port_there_are_no_probes(helm: Helm) -> None:
    """healthcheckPort -1 turns the health server off, and with it both probes (the metrics port stays)."""
    docs = helm.template("gpus.fake.profile=h100x8", "kubeletPlugin.healthcheckPort=-1")
    (c,) = by_kind(docs, "DaemonSet")[PLUGIN]["spec"]["template"]["spec"]["containers"]
    assert "livenessProbe" not in c and "readinessProbe" not in c
    assert [{"name": "metrics", "containerPort": 9420, "protocol": "TCP"}] == c["ports"]
    assert "-1" == env_of(c)["HEALTHCHECK_PORT"]
    off = helm.template("kubeletPlugin.healthcheckPort=-1", "metrics.enabled=false")
    (c,) = by_kind(off, "DaemonSet")[PLUGIN]["spec"]["template"]["spec"]["containers"]
    assert "ports" not in c


# -- Prometheus metrics -----------------------------------------------------------------------

ALL_DAEMONS = ("webhook.enabled=true", "controller.enabled=true", "controller.nodeName=node-x")
METRICS_SERVICES = {"dra-gpu-kubelet-plugin-metrics": 9420, "dra-gpu-controller-metrics": 9421, "dra-gpu-webhook-metrics": 9422}


def containers(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The plugin's, the controller's and the webhook's container, by component."""
    pods = {
        "kubelet-plugin": by_kind(docs, "DaemonSet").get(PLUGIN),
        "controller": by_kind(docs, "Deployment").get("dra-gpu-controller"),
        "webhook": by_kind(docs, "Deployment").get("dra-gpu-webhook"),
    }
    return {name: obj["spec"]["template"]["spec"]["containers"][0] for name, obj in pods.items() if obj is not None}


def test_every_daemon_serves_metrics_on_its_own_named_port_by_default(helm: Helm) -> None:
    """metrics.enabled (the default): METRICS_PORT, a containerPort named metrics, a headless Service selecting the pods."""
    docs = helm.template(*ALL_DAEMONS)
    ports = {"kubelet-plugin": 9420, "controller": 9421, "webhook": 9422}
    for component, c in containers(docs).items():
        assert str(ports[component]) == env_of(c)["METRICS_PORT"]
        assert {"name": "metrics", "containerPort": ports[component], "protocol": "TCP"} in c["ports"]
    services = {n: s for n, s in by_kind(docs, "Service").items() if n.endswith("-metrics")}
    assert METRICS_SERVICES == {n: s["spec"]["ports"][0]["port"] for n, s in services.items()}
    for name, svc in services.items():
        component = name.removeprefix("dra-gpu-").removesuffix("-metrics")
        assert "None" == svc["spec"]["clusterIP"]  # every pod is a target, not one behind a VIP
        assert component == svc["spec"]["selector"]["app.kubernetes.io/component"]
        assert "metrics" == svc["spec"]["ports"][0]["targetPort"]
        assert "true" == svc["metadata"]["labels"]["dra-gpu.dev/metrics"]
    assert "dra-gpu.dev/metrics" not in by_kind(docs, "Service")["dra-gpu-webhook"]["metadata"]["labels"]
    # Only the daemons that run get a Service.
    assert {"dra-gpu-kubelet-plugin-metrics"} == {n for n in by_kind(helm.template(), "Service") if n.endswith("-metrics")}


def test_the_service_monitor_is_off_by_default_and_scrapes_every_metrics_service_when_on(helm: Helm) -> None:
    assert {} == by_kind(helm.template(*ALL_DAEMONS), "ServiceMonitor")
    docs = helm.template(*ALL_DAEMONS, "metrics.serviceMonitor.enabled=true", "metrics.serviceMonitor.labels.release=prom")
    monitor = by_kind(docs, "ServiceMonitor")["dra-gpu"]
    assert "monitoring.coreos.com/v1" == monitor["apiVersion"]
    assert (NAMESPACE, "prom") == (monitor["metadata"]["namespace"], monitor["metadata"]["labels"]["release"])
    selector = monitor["spec"]["selector"]["matchLabels"]
    selected = {n for n, s in by_kind(docs, "Service").items() if selector.items() <= s["metadata"]["labels"].items()}
    assert set(METRICS_SERVICES) == selected  # not the webhook's HTTPS Service
    (endpoint,) = monitor["spec"]["endpoints"]
    assert ("metrics", "/metrics", "http", "30s") == tuple(endpoint[k] for k in ("port", "path", "scheme", "interval"))
    node_label = {"action": "replace", "sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "node"}
    assert node_label in endpoint["relabelings"]  # one series per node's plugin
    assert endpoint["honorLabels"] is True  # the usage series' own namespace and pod labels are kept
    assert [NAMESPACE] == monitor["spec"]["namespaceSelector"]["matchNames"]


def test_the_metrics_ports_reach_the_daemons_and_off_turns_every_server_off(helm: Helm, monkeypatch: pytest.MonkeyPatch) -> None:
    """The ports the chart sets are what the daemons' flag parsers read; metrics.enabled=false passes -1 (off)."""
    from controller.main import parse as parse_controller
    from kubelet_plugin.settings import parse as parse_plugin
    from webhook.main import parse as parse_webhook

    sets = ("metrics.port.kubeletPlugin=19420", "metrics.port.controller=19421", "metrics.port.webhook=19422")
    parsers = {
        "kubelet-plugin": lambda: parse_plugin([]).metrics_port,
        "controller": lambda: parse_controller([]).metrics_port,
        "webhook": lambda: parse_webhook(["--tls-cert-file", "c", "--tls-private-key-file", "k"]).metrics_port,
    }
    monkeypatch.setenv("NODE_NAME", "node-x")
    monkeypatch.delenv("METRICS_ADDRESS", raising=False)
    for component, c in containers(helm.template(*ALL_DAEMONS, *sets)).items():
        monkeypatch.setenv("METRICS_PORT", env_of(c)["METRICS_PORT"])
        assert {"kubelet-plugin": 19420, "controller": 19421, "webhook": 19422}[component] == parsers[component]()
    off = helm.template(*ALL_DAEMONS, "metrics.enabled=false")
    for component, c in containers(off).items():
        assert "-1" == env_of(c)["METRICS_PORT"]
        assert "metrics" not in {p["name"] for p in c.get("ports", [])}
        monkeypatch.setenv("METRICS_PORT", "-1")
        assert -1 == parsers[component]()
    assert not [n for n in by_kind(off, "Service") if n.endswith("-metrics")]


@pytest.mark.parametrize(
    ("sets", "mentions"),
    [
        (
            ("metrics.enabled=false", "metrics.serviceMonitor.enabled=true"),
            "metrics.serviceMonitor.enabled needs metrics.enabled",
        ),
        (("webhook.enabled=true", "webhook.port=9422"), "webhook.port and metrics.port.webhook are both 9422"),
        (("kubeletPlugin.healthcheckPort=9420",), "healthcheckPort and metrics.port.kubeletPlugin are both 9420"),
        (("metrics.port.kubeletPlugin=0",), "/metrics/port/kubeletPlugin"),
        (("metrics.serviceMonitor.interval=often",), "/metrics/serviceMonitor/interval"),
        (("metrics.typo=1",), "typo"),
    ],
    ids=["monitor-without-metrics", "webhook-port-clash", "health-port-clash", "port-zero", "interval", "unknown-key"],
)
def test_bad_metrics_values_fail_the_render_naming_them(helm: Helm, sets: tuple[str, ...], mentions: str) -> None:
    args = ["template", RELEASE, str(CHART)]
    for s in sets:
        args += ["--set", s]
    proc = helm.run(*args, check=False)
    assert proc.returncode != 0
    assert mentions in proc.stdout + proc.stderr, proc.stdout + proc.stderr


# -- Metrics private by default: where they listen, who may read them, tenant labels ------------

SCRAPERS = "metrics.networkPolicy.from[0].namespaceSelector.matchLabels.kubernetes\\.io/metadata\\.name=monitoring"
SCRAPER_PODS = "metrics.networkPolicy.from[0].podSelector.matchLabels.app\\.kubernetes\\.io/name=prometheus"


def pod_spec(docs: list[dict[str, Any]], component: str) -> dict[str, Any]:
    name = {"kubelet-plugin": PLUGIN, "controller": "dra-gpu-controller", "webhook": "dra-gpu-webhook"}[component]
    kind = "DaemonSet" if component == "kubelet-plugin" else "Deployment"
    spec: dict[str, Any] = by_kind(docs, kind)[name]["spec"]["template"]["spec"]
    return spec


def metrics_settings(component: str, env: Mapping[str, Any], monkeypatch: pytest.MonkeyPatch) -> Any:
    """The daemon's settings parsed from the env the chart gives it (a downward-API field: a pod IP)."""
    from controller.main import parse as parse_controller
    from kubelet_plugin.settings import parse as parse_plugin
    from webhook.main import parse as parse_webhook

    for var in ("METRICS_ADDRESS", "METRICS_TOKEN_FILE", "METRICS_TLS_CERT_FILE", "METRICS_TLS_KEY_FILE",
                "METRICS_CLIENT_CA_FILE", "METRICS_TENANT_LABELS"):  # fmt: skip
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NODE_NAME", "node-x")
    for name, value in env.items():
        if name.startswith("METRICS_"):
            monkeypatch.setenv(name, "10.244.1.7" if isinstance(value, dict) else str(value))
    parse: Callable[[], Any] = {
        "kubelet-plugin": lambda: parse_plugin([]),
        "controller": lambda: parse_controller([]),
        "webhook": lambda: parse_webhook(["--tls-cert-file", "c", "--tls-private-key-file", "k"]),
    }[component]
    return parse()


def test_by_default_metrics_listen_on_the_pod_ip_need_nothing_and_name_no_tenant(
    helm: Helm, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dra_driver.obs.ports import is_every_address

    docs = helm.template(*ALL_DAEMONS)
    for component, c in containers(docs).items():
        env = env_of(c)
        assert {"fieldRef": {"fieldPath": "status.podIP"}} == env["METRICS_ADDRESS"], component
        assert not {"METRICS_TOKEN_FILE", "METRICS_TLS_CERT_FILE", "METRICS_CLIENT_CA_FILE"} & env.keys()
        assert not [m for m in c.get("volumeMounts", []) if m["name"].startswith("metrics-")]
        settings = metrics_settings(component, env, monkeypatch)
        assert "10.244.1.7" == settings.metrics_address and not is_every_address(settings.metrics_address)
        assert not settings.metrics_auth.enabled
    plugin_env = env_of(containers(docs)["kubelet-plugin"])
    assert "false" == plugin_env["METRICS_TENANT_LABELS"]
    assert metrics_settings("kubelet-plugin", plugin_env, monkeypatch).metrics_tenant_labels is False
    assert {} == by_kind(docs, "NetworkPolicy")
    off = containers(helm.template(*ALL_DAEMONS, "metrics.enabled=false"))
    assert all("METRICS_ADDRESS" not in env_of(c) for c in off.values())


def test_an_address_and_tenant_labels_from_the_values_reach_the_daemons(helm: Helm, monkeypatch: pytest.MonkeyPatch) -> None:
    docs = helm.template(*ALL_DAEMONS, "metrics.address=::", "metrics.tenantLabels=true")
    for component, c in containers(docs).items():
        assert "::" == env_of(c)["METRICS_ADDRESS"]
        assert "::" == metrics_settings(component, env_of(c), monkeypatch).metrics_address
    plugin = containers(docs)["kubelet-plugin"]
    assert metrics_settings("kubelet-plugin", env_of(plugin), monkeypatch).metrics_tenant_labels is True


def test_a_token_secret_is_mounted_into_every_daemon_and_sent_by_the_service_monitor(
    helm: Helm, monkeypatch: pytest.MonkeyPatch
) -> None:
    docs = helm.template(
        *ALL_DAEMONS,
        "metrics.auth.tokenSecret.name=scrape-token",
        "metrics.auth.tokenSecret.key=bearer",
        "metrics.serviceMonitor.enabled=true",
    )
    for component, c in containers(docs).items():
        settings = metrics_settings(component, env_of(c), monkeypatch)
        token = settings.metrics_auth.token_file
        (mount,) = [m for m in c["volumeMounts"] if m["name"] == "metrics-token"]
        assert mount["readOnly"] is True and str(token.parent) == mount["mountPath"]
        (volume,) = [v for v in pod_spec(docs, component)["volumes"] if v["name"] == "metrics-token"]
        assert {"secretName": "scrape-token", "items": [{"key": "bearer", "path": token.name}]} == volume["secret"]
        assert settings.metrics_auth.scheme == "http"
    (endpoint,) = by_kind(docs, "ServiceMonitor")["dra-gpu"]["spec"]["endpoints"]
    assert {"type": "Bearer", "credentials": {"name": "scrape-token", "key": "bearer"}} == endpoint["authorization"]
    assert "http" == endpoint["scheme"] and "tlsConfig" not in endpoint


def test_tls_with_a_client_ca_is_mounted_and_scraped_over_https(helm: Helm, monkeypatch: pytest.MonkeyPatch) -> None:
    tls_config = (
        "metrics.serviceMonitor.tlsConfig.ca.secret.name=metrics-ca",
        "metrics.serviceMonitor.tlsConfig.ca.secret.key=ca.crt",
        "metrics.serviceMonitor.tlsConfig.serverName=dra-gpu-metrics",
    )
    docs = helm.template(
        *ALL_DAEMONS,
        "metrics.tls.secretName=metrics-tls",
        "metrics.tls.clientCA.secretName=scrapers-ca",
        "metrics.serviceMonitor.enabled=true",
        *tls_config,
    )
    for component, c in containers(docs).items():
        auth = metrics_settings(component, env_of(c), monkeypatch).metrics_auth
        assert ("https", None) == (auth.scheme, auth.problem())
        mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
        assert str(auth.tls_cert_file.parent) == str(auth.tls_key_file.parent) == mounts["metrics-tls"]
        assert str(auth.client_ca_file.parent) == mounts["metrics-client-ca"]
        volumes = {v["name"]: v["secret"] for v in pod_spec(docs, component)["volumes"] if v["name"].startswith("metrics-")}
        assert "metrics-tls" == volumes["metrics-tls"]["secretName"]
        assert [{"key": "ca.crt", "path": auth.client_ca_file.name}] == volumes["metrics-client-ca"]["items"]
    (endpoint,) = by_kind(docs, "ServiceMonitor")["dra-gpu"]["spec"]["endpoints"]
    assert "https" == endpoint["scheme"]
    assert {"ca": {"secret": {"name": "metrics-ca", "key": "ca.crt"}}, "serverName": "dra-gpu-metrics"} == endpoint["tlsConfig"]


def test_the_network_policies_admit_only_the_scraper_to_metrics_and_anyone_to_the_webhook(helm: Helm) -> None:
    docs = helm.template(*ALL_DAEMONS, "metrics.networkPolicy.enabled=true", SCRAPERS, SCRAPER_PODS)
    policies = by_kind(docs, "NetworkPolicy")
    assert {"dra-gpu-kubelet-plugin", "dra-gpu-controller", "dra-gpu-webhook"} == set(policies)
    scraper = {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
        "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}},
    }
    metrics_rule = {"from": [scraper], "ports": [{"protocol": "TCP", "port": "metrics"}]}
    for name, policy in policies.items():
        spec = policy["spec"]
        component = name.removeprefix("dra-gpu-")
        assert ["Ingress"] == spec["policyTypes"]
        assert component == spec["podSelector"]["matchLabels"]["app.kubernetes.io/component"]
        webhook_rule = [{"ports": [{"protocol": "TCP", "port": "https"}]}] if component == "webhook" else []
        assert [metrics_rule, *webhook_rule] == spec["ingress"]
        # the ports the rules name are the containers' own
        names = {p["name"] for p in containers(docs)[component]["ports"]}
        assert {p["port"] for rule in spec["ingress"] for p in rule["ports"]} <= names
    # every plugin pod (node pools included) carries the labels the policy selects
    plugin = by_kind(docs, "DaemonSet")[PLUGIN]["spec"]["template"]["metadata"]["labels"]
    assert policies["dra-gpu-kubelet-plugin"]["spec"]["podSelector"]["matchLabels"].items() <= plugin.items()

    off = by_kind(helm.template(*ALL_DAEMONS, "metrics.networkPolicy.enabled=true", "metrics.enabled=false"), "NetworkPolicy")
    assert [] == off["dra-gpu-kubelet-plugin"]["spec"]["ingress"]  # nothing but the node itself
    assert [{"ports": [{"protocol": "TCP", "port": "https"}]}] == off["dra-gpu-webhook"]["spec"]["ingress"]


@pytest.mark.parametrize(
    ("sets", "mentions"),
    [
        (("metrics.networkPolicy.enabled=true",), "metrics.networkPolicy.enabled needs metrics.networkPolicy.from"),
        (("metrics.tls.clientCA.secretName=ca",), "metrics.tls.clientCA.secretName needs metrics.tls.secretName"),
        (
            ("metrics.tls.secretName=t", "metrics.serviceMonitor.enabled=true"),
            "metrics.tls.secretName with metrics.serviceMonitor.enabled needs metrics.serviceMonitor.tlsConfig",
        ),
        (("metrics.address=every",), "/metrics/address"),
        (("metrics.auth.tokenSecret.name=Not_A_Name",), "/metrics/auth/tokenSecret/name"),
        (("metrics.networkPolicy.from[0].anywhere=true",), "anywhere"),
        (("metrics.tenantLabels=yes",), "/metrics/tenantLabels"),
    ],
    ids=[
        "policy-without-scraper",
        "client-ca-without-tls",
        "monitor-without-tls-config",
        "address",
        "secret-name",
        "peer-key",
        "tenant-labels",
    ],
)
def test_bad_private_metrics_values_fail_the_render_naming_them(helm: Helm, sets: tuple[str, ...], mentions: str) -> None:
    args = ["template", RELEASE, str(CHART)]
    for s in sets:
        args += ["--set", s]
    proc = helm.run(*args, check=False)
    assert proc.returncode != 0
    assert mentions in proc.stdout + proc.stderr, proc.stdout + proc.stderr


# -- Extended resources: pods written for the NVIDIA device plugin ----------------------------

DEVICE_PLUGIN_GPU = "nvidia.com/gpu"
# A DNS subdomain (DeviceClass names) and a qualified resource name with a domain (extended resources), as
# Kubernetes validates them.
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
RESOURCE_NAME = re.compile(DNS_SUBDOMAIN.pattern[:-1] + r"/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


def render(helm: Helm, kube_version: str, *sets: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """``helm template`` as if the API server were ``kube_version`` (what ``.Capabilities.KubeVersion`` says)."""
    args = ["template", RELEASE, str(CHART), "--namespace", NAMESPACE, "--kube-version", kube_version]
    for s in sets:
        args += ["--set", s]
    return helm.run(*args, check=check)


def classes_at(helm: Helm, kube_version: str, *sets: str) -> dict[str, dict[str, Any]]:
    """The DeviceClasses the chart renders for that server version, by name."""
    return by_kind([d for d in yaml.safe_load_all(render(helm, kube_version, *sets).stdout) if d], "DeviceClass")


def mapped(classes: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    """extendedResourceName -> class name, for the classes that have one."""
    return {c["spec"]["extendedResourceName"]: name for name, c in classes.items() if "extendedResourceName" in c["spec"]}


def device_plugin_mig_resource(profile: str) -> str:
    """The device plugin's mixed-strategy resource name of a MIG profile (its internal/rm/rm.go:
    ``strings.ReplaceAll("mig-"+profile, "+", ".")`` under the nvidia.com/ domain)."""
    return "nvidia.com/" + ("mig-" + profile).replace("+", ".")


@pytest.mark.parametrize(
    ("kube_version", "on"),
    [("1.34.4", False), ("1.35.4", False), ("1.36.0", True), ("1.36.3-gke.1200", True), ("1.37.2", True)],
)
def test_auto_maps_nvidia_gpu_to_the_gpu_class_from_kubernetes_1_36(helm: Helm, kube_version: str, on: bool) -> None:
    """The default (enabled: auto) puts extendedResourceName on where the API server keeps it by default
    (DRAExtendedResource beta in 1.36, GA in 1.37) and leaves it out on 1.34/1.35, where it is alpha and off."""
    classes = classes_at(helm, kube_version, "mig.strategy=static")
    if on:
        assert classes[DEFAULT_DRIVER_NAME]["spec"]["extendedResourceName"] == DEVICE_PLUGIN_GPU
        assert mapped(classes)[DEVICE_PLUGIN_GPU] == DEFAULT_DRIVER_NAME
        assert "nvidia.com/mig-1g.10gb" in mapped(classes)
    else:
        assert mapped(classes) == {}
        # Without the mapping the per-profile classes have no purpose and are not rendered.
        assert set(classes) == {DEFAULT_DRIVER_NAME, f"mig.{DEFAULT_DRIVER_NAME}"}


@pytest.mark.parametrize("kube_version", ["1.34.4", "1.35.4"])
def test_explicit_true_below_1_36_fails_naming_the_feature_gate(helm: Helm, kube_version: str) -> None:
    """enabled: true on a server that would silently drop the field stops the install with what to do; with the
    admin's word that the alpha gate is on (clusterFeatureGates) it renders."""
    proc = render(helm, kube_version, "extendedResources.enabled=true", check=False)
    assert proc.returncode != 0, proc.stdout
    assert f"extendedResources.enabled=true needs Kubernetes 1.36 or newer, this server is v{kube_version}" in proc.stderr
    assert "DRAExtendedResource feature gate" in proc.stderr
    assert "silently drops the field" in proc.stderr
    assert "add DRAExtendedResource to clusterFeatureGates" in proc.stderr

    classes = classes_at(helm, kube_version, "extendedResources.enabled=true", "clusterFeatureGates={DRAExtendedResource}")
    assert mapped(classes) == {DEVICE_PLUGIN_GPU: DEFAULT_DRIVER_NAME}
    # The gate listed alone changes nothing: auto stays off below 1.36.
    assert mapped(classes_at(helm, kube_version, "clusterFeatureGates={DRAExtendedResource}")) == {}


def test_explicit_false_turns_the_mapping_off_on_any_server(helm: Helm) -> None:
    for kube_version in ("1.36.3", "1.37.2"):
        classes = classes_at(helm, kube_version, "extendedResources.enabled=false", "mig.strategy=static")
        assert mapped(classes) == {}
        assert set(classes) == {DEFAULT_DRIVER_NAME, f"mig.{DEFAULT_DRIVER_NAME}"}
    # true on a server that has the field is just on.
    assert DEVICE_PLUGIN_GPU in mapped(classes_at(helm, "1.36.3", "extendedResources.enabled=true"))


def test_gpu_resource_is_configurable_and_empty_means_none(helm: Helm) -> None:
    classes = classes_at(helm, "1.37.2", "extendedResources.gpu=example.com/gpu", "driverName=gpu.example.org")
    assert mapped(classes) == {"example.com/gpu": "gpu.example.org"}
    classes = classes_at(helm, "1.37.2", "extendedResources.gpu=", "mig.strategy=dynamic")
    assert "extendedResourceName" not in classes[DEFAULT_DRIVER_NAME]["spec"]
    assert DEVICE_PLUGIN_GPU not in mapped(classes) and "nvidia.com/mig-1g.10gb" in mapped(classes)


@pytest.mark.parametrize("strategy", ["static", "dynamic"])
def test_mig_profile_classes_are_named_as_the_device_plugins_mixed_strategy(helm: Helm, strategy: str) -> None:
    """One class per profile, mig-<profile>.<driver>, selecting type "mig" and that profile, mapped to
    nvidia.com/mig-<profile> with "+" made "." (1g.10gb+me -> nvidia.com/mig-1g.10gb.me), as the device plugin
    names them; every name is one Kubernetes accepts."""
    driver = "gpu.example.org"
    classes = classes_at(helm, "1.37.2", f"mig.strategy={strategy}", f"driverName={driver}")
    profiles = yaml.safe_load((CHART / "values.yaml").read_text())["extendedResources"]["mig"]["profiles"]
    by_resource = mapped(classes)
    assert set(by_resource) == {DEVICE_PLUGIN_GPU} | {device_plugin_mig_resource(p) for p in profiles}
    assert by_resource["nvidia.com/mig-1g.10gb"] == f"mig-1g.10gb.{driver}"
    assert by_resource["nvidia.com/mig-1g.10gb.me"] == f"mig-1g.10gb.me.{driver}"
    for profile in profiles:
        name = by_resource[device_plugin_mig_resource(profile)]
        assert DNS_SUBDOMAIN.match(name) and len(name) <= 253, name
        assert RESOURCE_NAME.match(device_plugin_mig_resource(profile)), profile
        (selector,) = classes[name]["spec"]["selectors"]
        assert selector["cel"]["expression"] == (
            f"device.driver == '{driver}' && device.attributes['{driver}'].type == 'mig' && "
            f"device.attributes['{driver}'].profile == '{profile}'"
        )
    # No MIG device is published with mig.strategy none, so no per-profile class either.
    assert set(mapped(classes_at(helm, "1.37.2", "mig.strategy=none"))) == {DEVICE_PLUGIN_GPU}
    assert set(mapped(classes_at(helm, "1.37.2", "mig.strategy=dynamic", "extendedResources.mig.prefix="))) == {DEVICE_PLUGIN_GPU}
    only = classes_at(helm, "1.37.2", "mig.strategy=dynamic", "extendedResources.mig.profiles={3g.40gb}")
    expected = {DEVICE_PLUGIN_GPU: DEFAULT_DRIVER_NAME, "nvidia.com/mig-3g.40gb": f"mig-3g.40gb.{DEFAULT_DRIVER_NAME}"}
    assert mapped(only) == expected


def test_default_mig_profiles_are_every_profile_the_simulator_knows() -> None:
    """The default profile list is exactly the profiles of the MIG tables (A100 40/80GB, H100, H200, B200)."""
    from dra_driver.mig_backends.sim.catalog import products

    profiles = yaml.safe_load((CHART / "values.yaml").read_text())["extendedResources"]["mig"]["profiles"]
    known = {p.name for product in products().values() for p in product.gi_profiles}
    assert len(profiles) == len(set(profiles))
    assert set(profiles) == known
    assert {"1g.10gb", "1g.10gb+me", "7g.80gb", "1g.5gb", "7g.141gb", "7g.180gb"} <= set(profiles)


# -- What each release lacks: refused at install, never a silent no-op ------------------------


@pytest.mark.parametrize(
    ("kube_version", "sets", "mentions"),
    [
        ("1.34.4", ("mig.strategy=dynamic",), "mig.strategy=dynamic needs Kubernetes 1.35 or newer"),
        # The gate does not help on 1.34: counter sets need their own slices.
        ("1.34.4", ("mig.strategy=dynamic", "clusterFeatureGates={DRAPartitionableDevices}"), "needs Kubernetes 1.35"),
        ("1.35.4", ("mig.strategy=dynamic",), "needs the DRAPartitionableDevices feature gate"),
        ("1.34.4", ("sharing.consumable=true",), "needs the DRAConsumableCapacity feature gate"),
        ("1.35.4", ("sharing.consumable=true",), "needs the DRAConsumableCapacity feature gate"),
    ],
)
def test_a_feature_the_release_lacks_fails_the_install_naming_the_gate(
    helm: Helm, kube_version: str, sets: tuple[str, ...], mentions: str
) -> None:
    out = render(helm, kube_version, *sets, check=False)
    assert out.returncode != 0, f"rendered for {kube_version} with {sets}"
    assert mentions in out.stderr, out.stderr


@pytest.mark.parametrize(
    ("kube_version", "sets"),
    [
        ("1.35.4", ("mig.strategy=dynamic", "clusterFeatureGates={DRAPartitionableDevices}")),
        ("1.34.4", ("sharing.consumable=true", "clusterFeatureGates={DRAConsumableCapacity}")),
        ("1.36.3", ("mig.strategy=dynamic",)),
        ("1.36.3", ("sharing.consumable=true",)),
        ("1.37.2", ("mig.strategy=dynamic",)),
        ("1.34.4", ("mig.strategy=static",)),
    ],
)
def test_a_feature_the_release_serves_or_whose_gate_is_declared_renders(
    helm: Helm, kube_version: str, sets: tuple[str, ...]
) -> None:
    out = render(helm, kube_version, *sets, check=False)
    assert out.returncode == 0, out.stderr
    assert "kind: DaemonSet" in out.stdout


# -- The guard on ResourceClaim status writes (validatingadmissionpolicy.yaml) ----------------------

CLAIM_STATUS_POLICY = "dra-gpu-resourceclaim-status"


def admission_objects(docs: Sequence[Mapping[str, Any]]) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    """The rendered ValidatingAdmissionPolicies and their bindings, by name."""
    return by_kind(docs, "ValidatingAdmissionPolicy"), by_kind(docs, "ValidatingAdmissionPolicyBinding")


@pytest.mark.parametrize("kube_version", ["1.34.4", "1.35.4", "1.36.3", "1.37.2"])
def test_claim_status_policy_is_rendered_on_every_release(helm: Helm, kube_version: str) -> None:
    """The same policy on every release (from 1.36 the API server checks the same first; the policy still guards a
    cluster whose admin turned that gate off): status UPDATEs of the plugin's account only, denying, failing closed,
    three checks in the order allocation/reservedFor, node, driver."""
    docs = [d for d in yaml.safe_load_all(render(helm, kube_version).stdout) if d]
    policies, bindings = admission_objects(docs)
    spec = policies[CLAIM_STATUS_POLICY]["spec"]
    assert spec["failurePolicy"] == "Fail"
    assert spec["matchConstraints"]["resourceRules"] == [
        {"apiGroups": ["resource.k8s.io"], "apiVersions": ["*"], "operations": ["UPDATE"], "resources": ["resourceclaims/status"]}
    ]
    (match,) = spec["matchConditions"]
    assert match["expression"] == f"request.userInfo.username == 'system:serviceaccount:{NAMESPACE}:{PLUGIN}'"
    assert [v["message"] for v in spec["validations"]] == [
        "the dra-gpu kubelet plugin may not change status.allocation or status.reservedFor of a ResourceClaim",
        "the dra-gpu kubelet plugin may only change status.devices of ResourceClaims allocated to its own node",
        f"the dra-gpu kubelet plugin may only change status.devices entries of driver {DEFAULT_DRIVER_NAME}",
    ]
    assert {v["reason"] for v in spec["validations"]} == {"Forbidden"}
    assert bindings[CLAIM_STATUS_POLICY]["spec"] == {"policyName": CLAIM_STATUS_POLICY, "validationActions": ["Deny"]}
    # One expression for the token's node, shared with the ResourceSlice policy.
    variables = {v["name"]: v["expression"] for v in spec["variables"]}
    slice_vars = {v["name"]: v["expression"] for v in policies["dra-gpu-resourceslices"]["spec"]["variables"]}
    assert variables["tokenNode"] == slice_vars["allowedNode"]
    assert "size(request.userInfo.extra['authentication.kubernetes.io/node-name']) == 1" in variables["tokenNode"]


def test_claim_status_policy_names_the_charts_driver_and_account(helm: Helm) -> None:
    """Another driver name and release: the policy pins that driver and that release's account."""
    args = ["template", "other", str(CHART), "--namespace", "gpus", "--set", "driverName=gpu.other.example"]
    policies, bindings = admission_objects([d for d in yaml.safe_load_all(helm.run(*args).stdout) if d])
    spec = policies["other-dra-gpu-resourceclaim-status"]["spec"]
    variables = {v["name"]: v["expression"] for v in spec["variables"]}
    assert variables["otherDrivers"] == "variables.changedDrivers.filter(d, d != 'gpu.other.example')"
    assert spec["matchConditions"][0]["expression"].endswith("== 'system:serviceaccount:gpus:other-dra-gpu-kubelet-plugin'")
    assert "driver gpu.other.example" in spec["validations"][2]["message"]
    assert bindings["other-dra-gpu-resourceclaim-status"]["spec"]["policyName"] == "other-dra-gpu-resourceclaim-status"


@pytest.mark.parametrize("off", ["deviceStatus.enabled=false", "admissionPolicy.enabled=false", "kubeletPlugin.enabled=false"])
def test_claim_status_policy_is_absent_when_nothing_writes_claim_status_or_policies_are_off(helm: Helm, off: str) -> None:
    """No status write granted (device status off, or no plugin), or the admin's choice of no policies: no claim status policy."""
    policies, bindings = admission_objects(helm.template(off))
    assert CLAIM_STATUS_POLICY not in policies and CLAIM_STATUS_POLICY not in bindings
    if off == "deviceStatus.enabled=false":
        assert "dra-gpu-resourceslices" in policies  # the slice policy stays


# -- The guard on the plugin's pod annotation (kubeletPlugin.retryWaitingPods) ----------------------

POD_RETRY_POLICY = "dra-gpu-pod-prepare-retry"


def test_pod_retry_policy_pins_the_plugin_to_its_nodes_pods_and_one_annotation(helm: Helm) -> None:
    """Pod UPDATEs of the plugin's account only, denying, failing closed: its own node's pods, the one annotation."""
    policies, bindings = admission_objects(helm.template())
    spec = policies[POD_RETRY_POLICY]["spec"]
    assert spec["failurePolicy"] == "Fail"
    assert spec["matchConstraints"]["resourceRules"] == [
        {"apiGroups": [""], "apiVersions": ["*"], "operations": ["UPDATE"], "resources": ["pods"]}
    ]
    (match,) = spec["matchConditions"]
    assert match["expression"] == f"request.userInfo.username == 'system:serviceaccount:{NAMESPACE}:{PLUGIN}'"
    assert [v["message"] for v in spec["validations"]] == [
        "the dra-gpu kubelet plugin may only annotate pods bound to its own node",
        f"the dra-gpu kubelet plugin may only change the annotation {DEFAULT_DRIVER_NAME}/prepare-retry of a pod",
    ]
    variables = {v["name"]: v["expression"] for v in spec["variables"]}
    slice_vars = {v["name"]: v["expression"] for v in policies["dra-gpu-resourceslices"]["spec"]["variables"]}
    assert variables["tokenNode"] == slice_vars["allowedNode"]
    assert variables["key"] == f"'{DEFAULT_DRIVER_NAME}/prepare-retry'"
    assert bindings[POD_RETRY_POLICY]["spec"] == {"policyName": POD_RETRY_POLICY, "validationActions": ["Deny"]}


@pytest.mark.parametrize(
    "off", ["kubeletPlugin.retryWaitingPods=false", "admissionPolicy.enabled=false", "kubeletPlugin.enabled=false"]
)
def test_pod_retry_policy_is_absent_without_the_grant_or_policies(helm: Helm, off: str) -> None:
    """No pods grant (retryWaitingPods off, no plugin), or no policies at all: no pod policy."""
    policies, bindings = admission_objects(helm.template(off))
    assert POD_RETRY_POLICY not in policies and POD_RETRY_POLICY not in bindings
