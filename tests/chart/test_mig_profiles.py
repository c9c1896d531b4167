"""``mig.profiles`` reaches the daemons that publish dynamic MIG, and only them; the schema refuses a bad entry."""

from __future__ import annotations

import pytest

from testkit.helm_cli import Helm, HelmError, by_kind, env_of

POOLS = (
    "gpus.fake.profile=h100x8", "nodePools[0].name=mig-dynamic", "nodePools[0].mig.strategy=dynamic",
    "nodePools[0].nodeSelector.matchLabels.pool=mig", "nodePools[1].name=static", "nodePools[1].mig.strategy=static",
    "nodePools[1].nodeSelector.matchLabels.pool=static", "mig.profiles={1g,3g,7g.80gb}",
)  # fmt: skip


def _profiles(daemonset: dict) -> object:  # type: ignore[type-arg]
    container = daemonset["spec"]["template"]["spec"]["containers"][0]
    return env_of(container).get("MIG_PROFILES")


def test_only_a_dynamic_mig_daemonset_gets_the_profiles(helm: Helm) -> None:
    sets = by_kind(helm.template(*POOLS), "DaemonSet")
    assert _profiles(sets["dra-gpu-kubelet-plugin-mig-dynamic"]) == "1g,3g,7g.80gb"
    assert _profiles(sets["dra-gpu-kubelet-plugin-static"]) is None
    assert _profiles(sets["dra-gpu-kubelet-plugin"]) is None  # mig.strategy none


def test_no_profiles_set_means_every_profile(helm: Helm) -> None:
    sets = by_kind(helm.template("gpus.fake.profile=h100x8", "mig.strategy=dynamic"), "DaemonSet")
    assert _profiles(sets["dra-gpu-kubelet-plugin"]) is None


@pytest.mark.parametrize("entry", ["2x", "1g;rm", "MIG 1g.10gb"])
def test_the_schema_refuses_an_entry_that_is_no_profile_or_family(helm: Helm, entry: str) -> None:
    with pytest.raises(HelmError, match="mig/profiles/0"):
        helm.template("mig.strategy=dynamic", f"mig.profiles={{{entry}}}")
