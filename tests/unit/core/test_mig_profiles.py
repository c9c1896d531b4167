"""Which MIG profiles dynamic MIG publishes: ``--mig-profiles`` read strictly, selected by name or family."""

from __future__ import annotations

import pytest

from dra_driver.appkit.inventory import gpu_states
from dra_driver.core.mig import MigStrategy
from dra_driver.core.mig_profiles import parse_mig_profiles, profile_selected, unmatched
from dra_driver.core.mig_publish import publish_node
from dra_driver.mig_backends.select import make_mig_backend
from dra_driver.sources.fake import FakeGpuSource


def _states(profile: str) -> list:  # type: ignore[type-arg]
    gpus = FakeGpuSource(profile, "node-a").gpus()
    return gpu_states(gpus, make_mig_backend(fake=True, gpus=gpus))


def test_entries_are_names_or_families_in_order_without_repeats() -> None:
    assert parse_mig_profiles("1g, 3g.40gb ,7g,1g,1g.10gb+me") == ("1g", "3g.40gb", "7g", "1g.10gb+me")
    assert parse_mig_profiles("") == () and parse_mig_profiles(None) == () and parse_mig_profiles("  ") == ()


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("1g,,3g", "an empty entry"),
        ("1g;rm -rf", "neither a MIG profile name"),
        ("0g", "neither a MIG profile name"),
        ("1g.10GB", "neither a MIG profile name"),
        ("MIG 1g.10gb", "neither a MIG profile name"),
        ("1g," * 600, "characters long"),
        (",".join(f"{i}g" for i in range(1, 34)), "33 entries"),
    ],
)
def test_a_bad_list_is_refused_naming_what_is_wrong(text: str, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        parse_mig_profiles(text)


def test_families_select_every_profile_of_their_compute_slices() -> None:
    catalog = _states("h100x8")[0].catalog
    assert catalog is not None
    chosen = sorted(p.name for p in catalog.profiles if profile_selected(p, ("1g", "7g.80gb")))
    assert chosen == ["1g.10gb", "1g.10gb+me", "1g.20gb", "7g.80gb"]
    assert all(profile_selected(p, ()) for p in catalog.profiles)
    assert unmatched(("1g", "2g.99gb", "5g"), catalog.profiles) == ["2g.99gb", "5g"]


def test_dynamic_mig_publishes_only_the_chosen_profiles_and_every_full_gpu() -> None:
    states = _states("h100x8")
    every = publish_node(states, MigStrategy.DYNAMIC)
    some = publish_node(states, MigStrategy.DYNAMIC, mig_profiles=("1g", "3g", "7g"))
    kept = {t.profile.name for t in some.targets.values() if t.profile is not None}
    assert kept == {"1g.10gb", "1g.10gb+me", "1g.20gb", "3g.40gb", "7g.80gb"}
    assert len(every.devices) == 208 and len(some.devices) == 176  # 2g.20gb (3) and 4g.40gb (1) gone on 8 GPUs
    assert sum(t.profile is None for t in some.targets.values()) == 8  # the full GPUs stay
    assert some.counter_sets == every.counter_sets  # the counters describe the GPU, not what is published
    assert not some.notes
    # the order of what stays is the full order's
    order = [d.name for d in every.devices if d.name in some.targets]
    assert [d.name for d in some.devices] == order


def test_a_gpu_without_any_chosen_profile_publishes_its_full_gpu_and_says_so() -> None:
    pub = publish_node(_states("h100x8"), MigStrategy.DYNAMIC, mig_profiles=("7g.40gb",))  # an A100's profile
    assert len(pub.devices) == 8 and all(t.profile is None for t in pub.targets.values())
    assert sum("gpu-" in n and "no MIG profile of NVIDIA H100" in n and "only the full GPU" in n for n in pub.notes) == 8
    assert "--mig-profiles 7g.40gb: no MIG-capable GPU of this node has such a profile" in pub.notes
