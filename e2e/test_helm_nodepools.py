"""Per-node-pool MIG strategy in the Helm chart (``nodePools``): what renders, what is refused, what a real API
server and DaemonSet controller make of it.

Each pool is one kubelet plugin DaemonSet with the pool's MIG strategy and node affinity; the default DaemonSet
(top-level values) excludes every pool's nodes, and a pool excludes the earlier pools' nodes, so every node runs
exactly one plugin. The render tests evaluate the rendered node affinity against made-up nodes the way the
scheduler does; the install test lets kube-controller-manager's DaemonSet controller place the pods on registered
nodes (no kubelet: the pods never run, they only exist) and moves a node between pools. Helm is built by
``testkit/go/helm/build.sh`` and the control plane by ``testkit/go/build.sh``; a missing binary fails with the script to run.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from dra_driver.core.driver import DEFAULT_DRIVER_NAME
from dra_driver.core.mig import MigStrategy
from testkit.cluster import ApiError, LocalCluster
from testkit.helm_cli import CHART, NAMESPACE, PLUGIN, RELEASE, Helm, by_kind, env_of

POOL_LABEL = "dra-gpu.dev/node-pool"
GKE_POOL = "cloud.google.com/gke-nodepool"

# Two pools and a default: dynamic MIG on one GKE node pool, static MIG on nodes carrying a label, full GPUs
# elsewhere; every plugin pod only on GPU nodes (kubeletPlugin.nodeSelector) and on amd64 or one named node.
TWO_POOLS: dict[str, Any] = {
    "gpus": {"fake": {"profile": "h100x8"}},
    "kubeletPlugin": {
        "nodeSelector": {"nvidia.com/gpu.present": "true"},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]},
                        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["arm-special"]}]},
                    ]
                },
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 1, "preference": {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}}
                ],
            }
        },
    },
    "nodePools": [
        {
            "name": "mig-dynamic",
            "nodeSelector": {"matchLabels": {GKE_POOL: "h100-mig"}},
            "mig": {"strategy": "dynamic"},
            "resources": {"limits": {"memory": "1Gi"}},
            "tolerations": [{"key": "mig", "operator": "Exists", "effect": "NoSchedule"}],
        },
        {
            "name": "mig-static",
            "nodeSelector": {"matchExpressions": [{"key": "dra-gpu.dev/mig", "operator": "Exists"}]},
            "mig": {"strategy": "static"},
        },
    ],
}


def write_values(tmp_path: Path, values: Mapping[str, Any]) -> Path:
    path = tmp_path / f"values-{len(list(tmp_path.iterdir()))}.yaml"
    path.write_text(yaml.safe_dump(dict(values)))
    return path


def render(
    helm: Helm, tmp_path: Path, values: Mapping[str, Any], *sets: str, kube_version: str = "1.37.2", check: bool = True
) -> Any:
    """``helm template`` with ``values`` (a values file) and ``--set``s; the manifests, or the process without check."""
    args = ["template", RELEASE, str(CHART), "--namespace", NAMESPACE, "--kube-version", kube_version]
    args += ["-f", str(write_values(tmp_path, values))]
    for s in sets:
        args += ["--set", s]
    proc = helm.run(*args, check=check)
    if not check:
        return proc
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def plugin_daemonsets(docs: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    return by_kind(docs, "DaemonSet")


def container(ds: Mapping[str, Any]) -> dict[str, Any]:
    (c,) = ds["spec"]["template"]["spec"]["containers"]
    return dict(c)


# -- Node affinity as the scheduler and the DaemonSet controller evaluate it ------------------------------------


def requirement_matches(labels: Mapping[str, str], req: Mapping[str, Any]) -> bool:
    key, op, values = req["key"], req["operator"], req.get("values", [])
    if op == "In":
        return key in labels and labels[key] in values
    if op == "NotIn":
        return key not in labels or labels[key] not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    raise AssertionError(f"operator {op} not expected in the chart's affinity")


def term_matches(name: str, labels: Mapping[str, str], term: Mapping[str, Any]) -> bool:
    exprs, fields = term.get("matchExpressions", []), term.get("matchFields", [])
    if not exprs and not fields:
        return False  # an empty term matches no node
    return all(requirement_matches(labels, e) for e in exprs) and all(
        requirement_matches({"metadata.name": name}, f) for f in fields
    )


def runs_on(ds: Mapping[str, Any], name: str, labels: Mapping[str, str]) -> bool:
    """Whether the DaemonSet's pod template may run on the node (nodeSelector and required node affinity)."""
    pod = ds["spec"]["template"]["spec"]
    if not set(pod.get("nodeSelector", {}).items()) <= set(labels.items()):
        return False
    required = pod.get("affinity", {}).get("nodeAffinity", {}).get("requiredDuringSchedulingIgnoredDuringExecution")
    return required is None or any(term_matches(name, labels, t) for t in required["nodeSelectorTerms"])


def placement(docs: Sequence[Mapping[str, Any]], nodes: Mapping[str, Mapping[str, str]]) -> dict[str, list[str]]:
    """Node -> the plugin DaemonSets that would run a pod there."""
    daemonsets = plugin_daemonsets(docs)
    return {node: sorted(n for n, ds in daemonsets.items() if runs_on(ds, node, labels)) for node, labels in nodes.items()}


GPU = {"nvidia.com/gpu.present": "true", "kubernetes.io/arch": "amd64"}
NODES = {
    "plain": GPU,
    "dyn": {**GPU, GKE_POOL: "h100-mig"},
    "other-gke-pool": {**GPU, GKE_POOL: "l4"},
    "static": {**GPU, "dra-gpu.dev/mig": ""},
    "both": {**GPU, GKE_POOL: "h100-mig", "dra-gpu.dev/mig": "yes"},  # the first pool wins
    "cpu-only": {"kubernetes.io/arch": "amd64", GKE_POOL: "h100-mig"},  # not a GPU node: no plugin at all
    "arm": {"nvidia.com/gpu.present": "true", "kubernetes.io/arch": "arm64", GKE_POOL: "h100-mig"},  # no term
    "arm-special": {"nvidia.com/gpu.present": "true", "kubernetes.io/arch": "arm64", GKE_POOL: "h100-mig"},  # by name
}


# -- What renders -------------------------------------------------------------------------------------------------


def test_lint_strict_passes_with_node_pools(helm: Helm, tmp_path: Path) -> None:
    proc = helm.run("lint", "--strict", str(CHART), "-f", str(write_values(tmp_path, TWO_POOLS)))
    assert "1 chart(s) linted, 0 chart(s) failed" in proc.stdout


def test_each_pool_is_a_daemonset_with_its_own_mig_strategy(helm: Helm, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One DaemonSet per pool, named after it, labelled and selected by its pool label, with the pool's
    MIG_STRATEGY (which the plugin's flag parser reads as such), resources and tolerations; the rest inherited."""
    from kubelet_plugin.settings import parse as parse_plugin

    docs = render(helm, tmp_path, TWO_POOLS)
    daemonsets = plugin_daemonsets(docs)
    dyn, static = f"{PLUGIN}-mig-dynamic", f"{PLUGIN}-mig-static"
    assert set(daemonsets) == {PLUGIN, dyn, static}
    expected = {PLUGIN: ("none", None), dyn: ("dynamic", "mig-dynamic"), static: ("static", "mig-static")}
    for name, (strategy, pool) in expected.items():
        ds = daemonsets[name]
        assert len(name) <= 63
        env = env_of(container(ds))
        assert (env["MIG_STRATEGY"], env["SHARING"], env["FAKE_GPUS"]) == (strategy, "none", "h100x8")
        template_labels = ds["spec"]["template"]["metadata"]["labels"]
        selector = ds["spec"]["selector"]["matchLabels"]
        assert selector.items() <= template_labels.items()
        # Every plugin pod keeps the component label: the metrics Service, `dra-gpu top` and testkit/installed.py find
        # them all by it.
        assert template_labels["app.kubernetes.io/component"] == "kubelet-plugin"
        assert template_labels.get(POOL_LABEL) == pool == selector.get(POOL_LABEL)
        assert ds["metadata"]["labels"].get(POOL_LABEL) == pool
        pod = ds["spec"]["template"]["spec"]
        assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}  # kubeletPlugin.nodeSelector applies to all
        assert pod["serviceAccountName"] == PLUGIN  # one account, one admission policy for every plugin pod
        preferred = pod["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
        assert (
            preferred == TWO_POOLS["kubeletPlugin"]["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
        )

        for key in list(env):
            monkeypatch.delenv(key, raising=False)
        downward = {"NODE_NAME": "node-a", "POD_UID": "0f7c2d4e-1b2a-4c3d-9e8f-a1b2c3d4e5f6", "METRICS_ADDRESS": "10.244.0.9"}
        for key, value in env.items():
            monkeypatch.setenv(key, downward[key] if isinstance(value, dict) else value)
        assert parse_plugin([]).mig is MigStrategy(strategy)
        assert env["METRICS_ADDRESS"] == {"fieldRef": {"fieldPath": "status.podIP"}}  # every pool: the pod's IP

    # resources and tolerations: the pool's replace the top-level ones; unset, they are inherited.
    assert container(daemonsets[dyn])["resources"] == {"limits": {"memory": "1Gi"}}
    assert daemonsets[dyn]["spec"]["template"]["spec"]["tolerations"] == [
        {"key": "mig", "operator": "Exists", "effect": "NoSchedule"}
    ]
    for name in (PLUGIN, static):
        assert container(daemonsets[name])["resources"] == {
            "requests": {"cpu": "50m", "memory": "128Mi"},
            "limits": {"memory": "512Mi"},
        }
        assert daemonsets[name]["spec"]["template"]["spec"]["tolerations"] == TWO_POOLS["kubeletPlugin"]["tolerations"]


def test_no_daemonset_selects_another_pools_pods(helm: Helm, tmp_path: Path) -> None:
    """A pool DaemonSet's selector matches only its own pods. The default's is the selector it always had (a
    DaemonSet's selector cannot change on upgrade); it also matches pool pods, which it never adopts since they are
    owned by their pool's DaemonSet (checked against a real DaemonSet controller in the install test)."""
    daemonsets = plugin_daemonsets(render(helm, tmp_path, TWO_POOLS))
    before = by_kind(helm.template("gpus.fake.profile=h100x8"), "DaemonSet")[PLUGIN]
    assert daemonsets[PLUGIN]["spec"]["selector"] == before["spec"]["selector"]
    assert daemonsets[PLUGIN]["spec"]["template"]["metadata"]["labels"] == before["spec"]["template"]["metadata"]["labels"]
    for name, ds in daemonsets.items():
        selector = ds["spec"]["selector"]["matchLabels"]
        for other_name, other in daemonsets.items():
            labels = other["spec"]["template"]["metadata"]["labels"]
            if other_name != name and name != PLUGIN:
                assert not selector.items() <= labels.items(), f"{name} selects the pods of {other_name}"


def test_every_node_runs_exactly_one_plugin(helm: Helm, tmp_path: Path) -> None:
    """The default DaemonSet excludes every pool exactly, a later pool excludes the earlier ones, and the top-level
    nodeSelector and affinity (each of its terms) still bound them all."""
    where = placement(render(helm, tmp_path, TWO_POOLS), NODES)
    assert where == {
        "plain": [PLUGIN],
        "dyn": [f"{PLUGIN}-mig-dynamic"],
        "other-gke-pool": [PLUGIN],
        "static": [f"{PLUGIN}-mig-static"],
        "both": [f"{PLUGIN}-mig-dynamic"],
        "cpu-only": [],
        "arm": [],
        "arm-special": [f"{PLUGIN}-mig-dynamic"],
    }


@pytest.mark.parametrize(
    "selectors",
    [
        # Every operator, matchLabels and matchExpressions, several values; a pool of everything NOT labelled.
        [
            {"matchLabels": {"pool": "a"}},
            {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["b", "c"]}]},
            {"matchExpressions": [{"key": "mig", "operator": "Exists"}]},
            {"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["prod"]}]},
        ],
        [
            {"matchExpressions": [{"key": "pool", "operator": "DoesNotExist"}]},
            {"matchLabels": {"pool": ""}},
        ],
    ],
    ids=["four-pools", "unlabelled-pool"],
)
def test_pools_partition_the_nodes(helm: Helm, tmp_path: Path, selectors: list[dict[str, Any]]) -> None:
    """Over every combination of the labels involved, each node is in exactly one DaemonSet: the first pool whose
    requirement it meets, else the default."""
    values = {"nodePools": [{"name": f"p{i}", "nodeSelector": s} for i, s in enumerate(selectors)]}
    docs = render(helm, tmp_path, values)
    choices: dict[str, list[str | None]] = {
        "pool": [None, "", "a", "b", "c", "d"],
        "mig": [None, "x"],
        "tier": [None, "prod", "dev"],
    }
    nodes: dict[str, dict[str, str]] = {}
    for pool in choices["pool"]:
        for mig in choices["mig"]:
            for tier in choices["tier"]:
                labels = {k: v for k, v in (("pool", pool), ("mig", mig), ("tier", tier)) if v is not None}
                nodes[json.dumps(labels, sort_keys=True)] = labels
    where = placement(docs, nodes)
    for node, labels in nodes.items():
        first = next(
            (f"{PLUGIN}-p{i}" for i, s in enumerate(selectors) if all(requirement_matches(labels, r) for r in requirements(s))),
            PLUGIN,
        )
        assert where[node] == [first], node


def requirements(selector: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [{"key": k, "operator": "In", "values": [v]} for k, v in selector.get("matchLabels", {}).items()] + list(
        selector.get("matchExpressions", [])
    )


def test_a_pool_name_that_reads_as_a_number_stays_a_string_label(helm: Helm, tmp_path: Path) -> None:
    ds = plugin_daemonsets(render(helm, tmp_path, {"nodePools": [pool("123"), pool("true")]}))[f"{PLUGIN}-123"]
    assert ds["spec"]["selector"]["matchLabels"][POOL_LABEL] == "123"
    assert ds["spec"]["template"]["metadata"]["labels"][POOL_LABEL] == "123"
    assert ds["metadata"]["labels"][POOL_LABEL] == "123"


def test_without_pools_the_default_daemonset_has_no_affinity(helm: Helm, tmp_path: Path) -> None:
    ds = plugin_daemonsets(render(helm, tmp_path, {"nodePools": []}))[PLUGIN]
    assert "affinity" not in ds["spec"]["template"]["spec"]
    assert POOL_LABEL not in ds["spec"]["template"]["metadata"]["labels"]


def test_the_controller_keeps_the_top_level_strategy(helm: Helm, tmp_path: Path) -> None:
    """The standalone controller publishes one named node with the top-level values, whatever the pools say."""
    values = {**TWO_POOLS, "mig": {"strategy": "static"}, "controller": {"enabled": True, "nodeName": "node-ctl"}}
    docs = render(helm, tmp_path, values)
    (ctl,) = by_kind(docs, "Deployment")["dra-gpu-controller"]["spec"]["template"]["spec"]["containers"]
    assert env_of(ctl)["MIG_STRATEGY"] == "static"
    assert env_of(container(plugin_daemonsets(docs)[PLUGIN]))["MIG_STRATEGY"] == "static"


def test_the_metrics_service_selects_every_plugin_pod(helm: Helm, tmp_path: Path) -> None:
    docs = render(helm, tmp_path, TWO_POOLS)
    selector = by_kind(docs, "Service")[f"{PLUGIN}-metrics"]["spec"]["selector"]
    for ds in plugin_daemonsets(docs).values():
        assert selector.items() <= ds["spec"]["template"]["metadata"]["labels"].items()


def test_schema_pool_strategies_are_the_top_level_ones() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())["properties"]
    pool = schema["nodePools"]["items"]["properties"]
    assert pool["mig"]["properties"]["strategy"]["enum"] == schema["mig"]["properties"]["strategy"]["enum"]
    assert yaml.safe_load((CHART / "values.yaml").read_text())["nodePools"] == []


# -- MIG DeviceClasses and Kubernetes version checks consider every pool ------------------------------------------


def pool(name: str, strategy: str | None = None, consumable: bool | None = None, label: str = "") -> dict[str, Any]:
    p: dict[str, Any] = {"name": name, "nodeSelector": {"matchLabels": {GKE_POOL: label or name}}}
    if strategy is not None:
        p["mig"] = {"strategy": strategy}
    if consumable is not None:
        p["sharing"] = {"consumable": consumable}
    return p


@pytest.mark.parametrize("strategy", ["static", "dynamic"])
def test_a_mig_pool_renders_the_mig_profile_classes(helm: Helm, tmp_path: Path, strategy: str) -> None:
    """The device-plugin names of MIG profiles (one class per profile) are rendered when any pool publishes MIG
    devices, even with the top-level mig.strategy none; with no MIG anywhere they are not."""
    docs = render(helm, tmp_path, {"nodePools": [pool("gpu", "none"), pool("mig", strategy)]})
    classes = by_kind(docs, "DeviceClass")
    assert f"mig-1g.10gb.{DEFAULT_DRIVER_NAME}" in classes
    assert classes[f"mig-1g.10gb.{DEFAULT_DRIVER_NAME}"]["spec"]["extendedResourceName"] == "nvidia.com/mig-1g.10gb"
    none = by_kind(render(helm, tmp_path, {"nodePools": [pool("gpu", "none")]}), "DeviceClass")
    assert set(none) == {DEFAULT_DRIVER_NAME, f"mig.{DEFAULT_DRIVER_NAME}"}


def test_a_consumable_pool_renders_the_shared_class(helm: Helm, tmp_path: Path) -> None:
    docs = render(helm, tmp_path, {"nodePools": [pool("inference", consumable=True), pool("mig", "dynamic")]})
    assert f"shared.{DEFAULT_DRIVER_NAME}" in by_kind(docs, "DeviceClass")
    daemonsets = plugin_daemonsets(docs)
    assert env_of(container(daemonsets[f"{PLUGIN}-inference"]))["SHARING"] == "consumable"
    assert env_of(container(daemonsets[f"{PLUGIN}-mig"]))["SHARING"] == "none"
    assert env_of(container(daemonsets[PLUGIN]))["SHARING"] == "none"
    # Top-level sharing with a dynamic MIG pool that opts out of it.
    docs = render(helm, tmp_path, {"sharing": {"consumable": True}, "nodePools": [pool("mig", "dynamic", consumable=False)]})
    daemonsets = plugin_daemonsets(docs)
    assert env_of(container(daemonsets[PLUGIN]))["SHARING"] == "consumable"
    assert (
        env_of(container(daemonsets[f"{PLUGIN}-mig"]))["SHARING"],
        env_of(container(daemonsets[f"{PLUGIN}-mig"]))["MIG_STRATEGY"],
    ) == (
        "none",
        "dynamic",
    )


@pytest.mark.parametrize(
    ("kube_version", "pools", "sets", "mentions"),
    [
        ("1.34.4", [pool("mig", "dynamic")], (), "mig.strategy=dynamic in node pool mig needs Kubernetes 1.35 or newer"),
        (
            "1.35.4",
            [pool("a", "static"), pool("b", "dynamic")],
            ("mig.strategy=dynamic",),
            "mig.strategy=dynamic and mig.strategy=dynamic in node pool b needs the DRAPartitionableDevices feature gate",
        ),
        (
            "1.35.4",
            [pool("shared", consumable=True)],
            (),
            "sharing.consumable=true in node pool shared needs the DRAConsumableCapacity",
        ),
    ],
    ids=["dynamic-pool-1.34", "dynamic-pool-1.35", "consumable-pool-1.35"],
)
def test_version_checks_consider_every_pool(
    helm: Helm, tmp_path: Path, kube_version: str, pools: list[dict[str, Any]], sets: tuple[str, ...], mentions: str
) -> None:
    proc = render(helm, tmp_path, {"nodePools": pools}, *sets, kube_version=kube_version, check=False)
    assert proc.returncode != 0, proc.stdout
    assert mentions in proc.stderr, proc.stderr


def test_version_checks_pass_where_the_release_serves_every_pool(helm: Helm, tmp_path: Path) -> None:
    values = {"nodePools": [pool("mig", "dynamic"), pool("static", "static")]}
    assert plugin_daemonsets(render(helm, tmp_path, values, kube_version="1.36.3"))
    gated = render(helm, tmp_path, values, "clusterFeatureGates={DRAPartitionableDevices}", kube_version="1.35.4")
    assert f"{PLUGIN}-mig" in plugin_daemonsets(gated)
    assert plugin_daemonsets(render(helm, tmp_path, {"nodePools": [pool("static", "static")]}, kube_version="1.34.4"))


def test_notes_list_every_daemonset(helm: Helm, tmp_path: Path) -> None:
    proc = helm.run(
        "install", RELEASE, str(CHART), "--dry-run=client", "--namespace", NAMESPACE, "-f", str(write_values(tmp_path, TWO_POOLS))
    )
    notes = proc.stdout[proc.stdout.index("NOTES:") :]
    assert f"{PLUGIN}-mig-dynamic  (node pool mig-dynamic: nodes with {GKE_POOL} In [h100-mig]; mig.strategy=dynamic)" in notes
    assert f"{PLUGIN}-mig-static  (node pool mig-static: nodes with dra-gpu.dev/mig Exists; mig.strategy=static)" in notes
    assert f"{PLUGIN}  (every other node; mig.strategy=none)" in notes
    for name in (PLUGIN, f"{PLUGIN}-mig-dynamic", f"{PLUGIN}-mig-static"):
        assert f"rollout status daemonset/{name}\n" in notes + "\n"
    assert "on the nodes whose DaemonSet has mig.strategy static or dynamic" in notes


# -- Refused, with a message that says why ------------------------------------------------------------------------


def expr(key: str, operator: str, *values: str) -> dict[str, Any]:
    e: dict[str, Any] = {"key": key, "operator": operator}
    if values:
        e["values"] = list(values)
    return e


@pytest.mark.parametrize(
    ("values", "mentions"),
    [
        # Schema: the name is a DNS label of at most 40 characters; the selector has a fixed shape.
        ({"nodePools": [{**pool("x"), "name": "Big_Pool"}]}, "at '/nodePools/0/name'"),
        ({"nodePools": [{**pool("x"), "name": "p" * 41}]}, "at '/nodePools/0/name'"),
        ({"nodePools": [{"name": "x"}]}, "missing property 'nodeSelector'"),
        ({"nodePools": [{"name": "x", "nodeSelector": {GKE_POOL: "a"}}]}, "at '/nodePools/0/nodeSelector'"),
        ({"nodePools": [{**pool("x"), "mig": {"strategy": "auto"}}]}, "at '/nodePools/0/mig/strategy'"),
        ({"nodePools": [{**pool("x"), "typo": 1}]}, "typo"),
        (
            {"nodePools": [{"name": "x", "nodeSelector": {"matchExpressions": [expr("gpu-count", "Gt", "4")]}}]},
            "at '/nodePools/0/nodeSelector/matchExpressions/0/operator': "
            "value must be one of 'In', 'NotIn', 'Exists', 'DoesNotExist'",
        ),
        # Templates: what the schema cannot say.
        (
            {"nodePools": [pool("a", label="one"), pool("b"), pool("a", label="two")]},
            'nodePools[2] (a): the name "a" is taken by nodePools[0]',
        ),
        (
            {"nodePools": [{"name": "x", "nodeSelector": {"matchLabels": {GKE_POOL: "a", "zone": "b"}}}]},
            "nodePools[0] (x): nodeSelector must hold exactly one label requirement (one matchLabels entry or one "
            "matchExpressions entry), not 2",
        ),
        (
            {
                "nodePools": [
                    {"name": "x", "nodeSelector": {"matchLabels": {GKE_POOL: "a"}, "matchExpressions": [expr("z", "Exists")]}}
                ]
            },
            "exactly one label requirement",
        ),
        (
            {"nodePools": [{"name": "x", "nodeSelector": {}}]},
            "exactly one label requirement (one matchLabels entry or one matchExpressions entry), not 0",
        ),
        (
            {"nodePools": [{"name": "x", "nodeSelector": {"matchExpressions": [expr("k", "In")]}}]},
            "nodePools[0] (x): nodeSelector.matchExpressions[0] (key k): operator In needs at least one value",
        ),
        (
            {"nodePools": [{"name": "x", "nodeSelector": {"matchExpressions": [expr("k", "DoesNotExist", "v")]}}]},
            "operator DoesNotExist takes no values",
        ),
        (
            {
                "nodePools": [
                    pool("a", label="h100"),
                    {"name": "b", "nodeSelector": {"matchExpressions": [expr(GKE_POOL, "In", "l4", "h100")]}},
                ]
            },
            f"nodePools[1] (b): nodes labelled {GKE_POOL}=h100 are also selected by nodePools[0] (a); pools must not overlap",
        ),
        (
            {"nodePools": [{"name": n, "nodeSelector": {"matchExpressions": [expr("mig", "Exists")]}} for n in ("a", "b")]},
            "nodePools[1] (b): selects the same nodes (mig Exists) as nodePools[0] (a)",
        ),
        (
            {"sharing": {"consumable": True}, "nodePools": [pool("mig", "dynamic")]},
            "nodePools[0] (mig): mig.strategy dynamic cannot be combined with sharing.consumable (the top-level value, "
            "which the pool inherits)",
        ),
        (
            {"nodePools": [pool("mig", "dynamic", consumable=True)]},
            "cannot be combined with sharing.consumable (set in the pool)",
        ),
        (
            {"fullnameOverride": "f" * 40, "nodePools": [pool("abcdefgh")]},
            f"the pool's DaemonSet name {'f' * 40}-kubelet-plugin-abcdefgh is 64 characters, more than 63",
        ),
        ({"kubeletPlugin": {"enabled": False}, "nodePools": [pool("a")]}, "nodePools needs kubeletPlugin.enabled"),
    ],
    ids=[
        "name-not-dns-label",
        "name-too-long",
        "no-selector",
        "selector-as-a-plain-map",
        "bad-strategy",
        "unknown-key",
        "gt-operator",
        "duplicate-name",
        "two-labels",
        "labels-and-expressions",
        "empty-selector",
        "in-without-values",
        "doesnotexist-with-values",
        "overlapping-values",
        "same-requirement",
        "dynamic-with-inherited-consumable",
        "dynamic-with-pool-consumable",
        "daemonset-name-too-long",
        "plugin-off",
    ],
)
def test_bad_node_pools_fail_the_render_naming_them(helm: Helm, tmp_path: Path, values: dict[str, Any], mentions: str) -> None:
    proc = render(helm, tmp_path, values, check=False)
    assert proc.returncode != 0, f"rendered {values}"
    assert mentions in proc.stdout + proc.stderr, proc.stdout + proc.stderr


# -- Installed: a real API server and DaemonSet controller --------------------------------------------------------


@pytest.fixture(scope="module")
def daemonset_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """etcd, kube-apiserver, kube-scheduler and kube-controller-manager running the DaemonSet controller and the
    garbage collector (which deletes a removed DaemonSet's pods). No kubelet: the DaemonSet controller creates each
    node's pod and the scheduler binds it (the controller finds a node's pods by spec.nodeName when the node's labels
    change), but it never runs, and a deleted pod stays Terminating until ``plugin_pods`` finishes the deletion as
    the kubelet would."""
    with LocalCluster(
        with_scheduler=True,
        with_controller_manager=True,
        controllers=("daemonset", "garbagecollector"),
        log_dir=tmp_path_factory.mktemp("nodepool-logs"),
    ) as c:
        yield c


def plugin_pods(c: LocalCluster) -> dict[str, list[tuple[str, str]]]:
    """Node -> [(owning DaemonSet, MIG_STRATEGY)] of the chart's plugin pods bound to a node. Pods being deleted
    are removed for good (the kubelet's part) and not counted; pods not bound yet are not counted."""
    pods = c.api("GET", f"/api/v1/namespaces/{NAMESPACE}/pods?labelSelector=app.kubernetes.io/component%3Dkubelet-plugin")
    out: dict[str, list[tuple[str, str]]] = {}
    for pod in pods["items"]:
        name = pod["metadata"]["name"]
        if pod["metadata"].get("deletionTimestamp"):
            with contextlib.suppress(ApiError):  # already gone
                c.api("DELETE", f"/api/v1/namespaces/{NAMESPACE}/pods/{name}", {"gracePeriodSeconds": 0})
            continue
        node = pod["spec"].get("nodeName")
        if not node:
            continue
        # The DaemonSet controller pins each pod to its node with a metadata.name term; the scheduler bound it there.
        (term,) = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        assert term["matchFields"] == [{"key": "metadata.name", "operator": "In", "values": [node]}], (name, term)
        (owner,) = [o for o in pod["metadata"]["ownerReferences"] if o.get("controller")]
        (ctr,) = pod["spec"]["containers"]
        out.setdefault(node, []).append((owner["name"], str(env_of(ctr)["MIG_STRATEGY"])))
    return {node: sorted(v) for node, v in out.items()}


def wait_for_pods(c: LocalCluster, expected: Mapping[str, list[tuple[str, str]]], timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while (got := plugin_pods(c)) != expected:
        if time.monotonic() > deadline:
            pytest.fail(f"plugin pods per node after {timeout_s:.0f}s: {got}, expected {expected}")
        time.sleep(0.3)


def test_install_then_upgrade_to_pools_places_one_plugin_per_node(
    helm: Helm, daemonset_cluster: LocalCluster, tmp_path: Path
) -> None:
    """Installed without pools, every GPU node gets the default plugin. ``helm upgrade`` to two pools is accepted
    (the default DaemonSet's selector is unchanged; the API server validates every DaemonSet's affinity), and the
    DaemonSet controller replaces the pool nodes' default plugin with their pool's: one plugin per node, of the
    right MIG strategy. Relabelling a node moves it between DaemonSets."""
    c, kubeconfig = daemonset_cluster, str(daemonset_cluster.kubeconfig)
    gpu = {"nvidia.com/gpu.present": "true", "kubernetes.io/arch": "amd64"}
    nodes = {
        "n-plain": gpu,
        "n-dyn": {**gpu, GKE_POOL: "h100-mig"},
        "n-static": {**gpu, "dra-gpu.dev/mig": "1"},
        "n-both": {**gpu, GKE_POOL: "h100-mig", "dra-gpu.dev/mig": "1"},
        "n-cpu": {"kubernetes.io/arch": "amd64"},
    }
    for name, labels in nodes.items():
        c.add_node(name, labels)
    base = {k: v for k, v in TWO_POOLS.items() if k != "nodePools"}
    common = ["--kubeconfig", kubeconfig, "--namespace", NAMESPACE, "--wait=hookOnly"]
    helm.run("install", RELEASE, str(CHART), *common, "--create-namespace", "-f", str(write_values(tmp_path, base)))
    try:
        default = (PLUGIN, "none")
        wait_for_pods(c, {"n-plain": [default], "n-dyn": [default], "n-static": [default], "n-both": [default]})

        helm.run("upgrade", RELEASE, str(CHART), *common, "-f", str(write_values(tmp_path, TWO_POOLS)))
        dyn, static = (f"{PLUGIN}-mig-dynamic", "dynamic"), (f"{PLUGIN}-mig-static", "static")
        wait_for_pods(c, {"n-plain": [default], "n-dyn": [dyn], "n-static": [static], "n-both": [dyn]})
        for name, scheduled in ((PLUGIN, 1), (dyn[0], 2), (static[0], 1)):
            status = c.api("GET", f"/apis/apps/v1/namespaces/{NAMESPACE}/daemonsets/{name}")["status"]
            assert status["desiredNumberScheduled"] == scheduled, (name, status)

        # The plain node joins the dynamic MIG pool, the static node leaves its pool.
        merge = "application/merge-patch+json"
        c.api("PATCH", "/api/v1/nodes/n-plain", {"metadata": {"labels": {GKE_POOL: "h100-mig"}}}, merge)
        c.api("PATCH", "/api/v1/nodes/n-static", {"metadata": {"labels": {"dra-gpu.dev/mig": None}}}, merge)
        wait_for_pods(c, {"n-plain": [dyn], "n-dyn": [dyn], "n-static": [default], "n-both": [dyn]})

        # Back to no pools: the default DaemonSet covers every GPU node again, the pool DaemonSets are gone.
        helm.run("upgrade", RELEASE, str(CHART), *common, "-f", str(write_values(tmp_path, base)))
        wait_for_pods(c, {"n-plain": [default], "n-dyn": [default], "n-static": [default], "n-both": [default]})
        names = {d["metadata"]["name"] for d in c.api("GET", f"/apis/apps/v1/namespaces/{NAMESPACE}/daemonsets")["items"]}
        assert names == {PLUGIN}
    finally:
        helm.run("uninstall", RELEASE, "--kubeconfig", kubeconfig, "--namespace", NAMESPACE, check=False)
