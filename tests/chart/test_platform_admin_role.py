"""The chart's platform-admin ClusterRole (templates/clusterrole-platform-admin.yaml), as Helm renders it.

Off by default; on, exactly what ``dra-gpu cordon`` / ``uncordon`` call (dra_driver/kube/taint_rules_api.py):
read slices, read and write DeviceTaintRules, read and patch Nodes (local withholding where
DeviceTaintRules are not served), nothing else, and no binding.
"""

from __future__ import annotations

import pytest

from testkit.helm_cli import CHART, Helm, by_kind
from tests.chart.test_helm_render import rule, rule_set

ROLE = "dra-gpu-platform-admin"
ADMIN_RULES = [
    rule(["resource.k8s.io"], ["resourceslices"], ["get", "list", "watch"]),
    rule(["resource.k8s.io"], ["devicetaintrules"], ["get", "list", "watch", "create", "update", "delete"]),
    rule([""], ["nodes"], ["get", "patch"]),  # local withholding: the Node's cordon annotation (dra_driver/cli/cordon_local.py)
]


def test_the_platform_admin_role_is_off_by_default_and_with_rbac_off(helm: Helm) -> None:
    assert ROLE not in by_kind(helm.template(), "ClusterRole")
    assert ROLE not in by_kind(helm.template("rbac.create=false", "rbac.platformAdmin.create=true"), "ClusterRole")


def test_on_it_grants_slices_read_taint_rules_write_node_patch_and_nothing_else(helm: Helm) -> None:
    docs = helm.template("rbac.platformAdmin.create=true")
    role = by_kind(docs, "ClusterRole")[ROLE]
    assert rule_set(role["rules"]) == rule_set(ADMIN_RULES)
    assert role["metadata"]["labels"]["app.kubernetes.io/component"] == "platform-admin"
    bound = [b for b in by_kind(docs, "ClusterRoleBinding").values() if b["roleRef"]["name"] == ROLE]
    assert not bound, "the chart binds the platform-admin role to nobody: the admins bind it"


@pytest.mark.parametrize("bad", ["rbac.platformAdmin.create=maybe", "rbac.platformAdmin.bind=true"])
def test_the_schema_refuses_bad_platform_admin_values(helm: Helm, bad: str) -> None:
    done = helm.run("template", "dra-gpu", str(CHART), "--set", bad, check=False)
    assert done.returncode != 0 and "platformAdmin" in done.stderr, done.stderr
