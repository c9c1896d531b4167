"""Planning ResourceSlice writes for a node's pool (``dra_driver.core.pool_sync``).

Aspects: first publication, steady state (no writes, also with server-added metadata and
server normalization), generation bumps on every kind of change (devices, count, deleted,
extra, lower-generation, wrong owner, foreign pool), leaving other drivers' slices alone,
keeping metadata others own, and reporting fields the server dropped.
"""

from __future__ import annotations

import copy
import itertools
from typing import Any

from dra_driver.core.pool_sync import PoolPlan, SentRecord, dropped_fields, owned_view, plan_pool
from dra_driver.core.schema import Attr, DeviceSpec
from dra_driver.core.slices import SliceContent, split_pool

DRIVER = "gpu.dra-gpu.dev"
NODE = "node-a"
UID = "11111111-2222-3333-4444-555555555555"

_rv = itertools.count(100)


def devs(n: int, *, memory: str = "80Gi", taint: bool = False) -> list[DeviceSpec]:
    extra: dict[str, Any] = {"taints": [{"key": "dra-gpu.dev/unhealthy", "effect": "NoSchedule"}]} if taint else {}
    return [
        DeviceSpec(f"gpu-{i}", {"type": Attr("string", "gpu"), "index": Attr("int", i)}, {"memory": memory}, dict(extra))
        for i in range(n)
    ]


def plan(existing: list[dict[str, Any]], desired: list[SliceContent], **kw: Any) -> PoolPlan:
    args: dict[str, Any] = {"driver": DRIVER, "node_name": NODE, "node_uid": UID}
    args.update(kw)
    return plan_pool(existing=existing, desired=desired, **args)


def store(obj: dict[str, Any]) -> dict[str, Any]:
    """What an API server returns for a written slice: server metadata and defaults added."""
    out = copy.deepcopy(obj)
    meta = out["metadata"]
    meta.setdefault("uid", f"uid-{meta['name']}")
    meta.setdefault("creationTimestamp", "2026-01-01T00:00:00Z")
    meta["resourceVersion"] = str(next(_rv))
    meta["managedFields"] = [{"manager": "dra-gpu", "operation": "Update"}]
    for dev in out["spec"].get("devices", []):
        for taint in dev.get("taints", []):
            taint.setdefault("timeAdded", "2026-01-01T00:00:00Z")
    return out


def apply(existing: list[dict[str, Any]], p: PoolPlan) -> list[dict[str, Any]]:
    """The cluster after the plan's writes (a fake API server)."""
    by_name = {o["metadata"]["name"]: o for o in existing}
    for name in p.delete:
        by_name.pop(name, None)
    for obj in (*p.create, *p.update):
        by_name[obj["metadata"]["name"]] = store(obj)
    return sorted(by_name.values(), key=lambda o: o["metadata"]["name"])


def published(desired: list[SliceContent]) -> list[dict[str, Any]]:
    """A pool as the publisher would have left it: first publication, stored."""
    return apply([], plan([], desired))


def gens(objs: list[dict[str, Any]] | tuple[dict[str, Any], ...]) -> set[int]:
    return {o["spec"]["pool"]["generation"] for o in objs}


def test_first_publication_creates_every_slice_at_generation_one() -> None:
    """An empty cluster gets all slices created, generation 1, exact slice count, Node owner."""
    p = plan([], split_pool(devs(200)))
    assert [f"{NODE}-{DRIVER}-000", f"{NODE}-{DRIVER}-001"] == [o["metadata"]["name"] for o in p.create]
    assert () == p.update
    assert () == p.delete
    assert 1 == p.generation
    assert {1} == gens(p.create)
    assert {2} == {o["spec"]["pool"]["resourceSliceCount"] for o in p.create}
    assert {UID} == {o["metadata"]["ownerReferences"][0]["uid"] for o in p.create}


def test_steady_state_plans_no_writes() -> None:
    """Once the stored pool matches, re-planning writes nothing, despite server-added metadata."""
    desired = split_pool(devs(200, taint=True))
    existing = published(desired)
    assert all("managedFields" in o["metadata"] for o in existing)
    assert all("timeAdded" in o["spec"]["devices"][0]["taints"][0] for o in existing)
    p = plan(existing, desired)
    assert p.empty
    assert 1 == p.generation
    assert () == p.reasons


def test_empty_pool_is_published_as_one_empty_slice_and_stays_put() -> None:
    """No devices still means one slice (the pool exists), and no rewrites afterwards."""
    desired = split_pool([])
    existing = published(desired)
    assert 1 == len(existing)
    assert plan(existing, desired).empty


def test_device_change_bumps_generation_on_all_slices() -> None:
    """Changing one device rewrites every slice of the pool with generation + 1."""
    existing = published(split_pool(devs(200)))
    p = plan(existing, split_pool(devs(200, memory="40Gi")))
    assert () == p.create
    assert () == p.delete
    assert 2 == len(p.update)
    assert 2 == p.generation
    assert {2} == gens(p.update)
    assert {"40Gi"} == {d["capacity"]["memory"]["value"] for o in p.update for d in o["spec"]["devices"]}
    stored_rvs = {o["metadata"]["name"]: o["metadata"]["resourceVersion"] for o in existing}
    assert stored_rvs == {o["metadata"]["name"]: o["metadata"]["resourceVersion"] for o in p.update}
    assert plan(apply(existing, p), split_pool(devs(200, memory="40Gi"))).empty


def test_change_confined_to_one_slice_still_rewrites_the_other() -> None:
    """A change in the second slice only also rewrites the first: the whole pool moves together."""
    existing = published(split_pool(devs(200)))
    p = plan(existing, split_pool(devs(199)))
    assert {f"{NODE}-{DRIVER}-000", f"{NODE}-{DRIVER}-001"} == {o["metadata"]["name"] for o in p.update}
    assert {2} == gens(p.update)


def test_deleted_slice_is_recreated_with_new_generation() -> None:
    """A slice wiped by the kubelet comes back; the surviving slice is rewritten with it."""
    desired = split_pool(devs(200))
    existing = published(desired)
    survivors = [o for o in existing if not o["metadata"]["name"].endswith("-000")]
    p = plan(survivors, desired)
    assert [f"{NODE}-{DRIVER}-000"] == [o["metadata"]["name"] for o in p.create]
    assert [f"{NODE}-{DRIVER}-001"] == [o["metadata"]["name"] for o in p.update]
    assert 2 == p.generation
    assert {2} == gens(p.create) | gens(p.update)
    assert "slice node-a-gpu.dra-gpu.dev-000 is missing" in p.reasons


def test_wiped_pool_continues_above_the_last_written_generation() -> None:
    """With every slice gone there is no generation to read: the last written one is the floor."""
    desired = split_pool(devs(8))
    assert 1 == plan([], desired).generation
    p = plan([], desired, last_generation=4)
    assert 5 == p.generation
    assert {5} == gens(p.create)


def test_last_generation_does_not_disturb_steady_state() -> None:
    """A matching pool is left alone even if its generation is below the remembered one."""
    desired = split_pool(devs(8))
    assert plan(published(desired), desired, last_generation=7).empty


def test_extra_slice_is_deleted() -> None:
    """Slices beyond the desired count, or with foreign names, are deleted; the rest get the new count."""
    existing = published(split_pool(devs(300)))
    stray = store(copy.deepcopy(existing[0]))
    stray["metadata"] = {"name": "old-naming-scheme-slice", "resourceVersion": "7"}
    p = plan([*existing, stray], split_pool(devs(100)))
    assert sorted([f"{NODE}-{DRIVER}-001", f"{NODE}-{DRIVER}-002", "old-naming-scheme-slice"]) == sorted(p.delete)
    assert [f"{NODE}-{DRIVER}-000"] == [o["metadata"]["name"] for o in p.update]
    assert 1 == p.update[0]["spec"]["pool"]["resourceSliceCount"]
    assert 2 == p.generation
    assert () == p.replaced


def test_lower_generation_slice_is_replaced() -> None:
    """A slice left at an older generation makes the pool move to max + 1 on all slices."""
    desired = split_pool(devs(200))
    existing = published(desired)
    for obj in existing:
        obj["spec"]["pool"]["generation"] = 5
    existing[1]["spec"]["pool"]["generation"] = 4
    p = plan(existing, desired)
    assert 6 == p.generation
    assert 2 == len(p.update)
    assert {6} == gens(p.update)


def test_slice_count_mismatch_is_fixed() -> None:
    """A stored resourceSliceCount that is wrong (e.g. an interrupted rewrite) is rewritten."""
    desired = split_pool(devs(8))
    existing = published(desired)
    existing[0]["spec"]["pool"]["resourceSliceCount"] = 2
    p = plan(existing, desired)
    assert 1 == len(p.update)
    assert 1 == p.update[0]["spec"]["pool"]["resourceSliceCount"]
    assert 2 == p.generation


def test_wrong_owner_is_fixed() -> None:
    """A slice owned by an older Node object (other UID) is rewritten with the current owner."""
    desired = split_pool(devs(8))
    existing = published(desired)
    p = plan(existing, desired, node_uid="another-uid")
    assert 1 == len(p.update)
    assert "another-uid" == p.update[0]["metadata"]["ownerReferences"][0]["uid"]


def test_slice_in_foreign_pool_is_deleted_then_recreated() -> None:
    """The pool name is immutable: a slice with our name in another pool is replaced, delete first."""
    desired = split_pool(devs(8))
    existing = published(desired)
    existing[0]["spec"]["pool"]["name"] = "legacy-pool"
    p = plan(existing, desired)
    name = f"{NODE}-{DRIVER}-000"
    assert (name,) == p.replaced
    assert [name] == [o["metadata"]["name"] for o in p.create]
    assert () == p.update


def test_slices_of_other_drivers_and_nodes_are_left_alone() -> None:
    """Only this driver's slices on this node are planned for, even if the list holds others."""
    desired = split_pool(devs(8))
    ours = published(desired)
    other_driver = copy.deepcopy(ours[0])
    other_driver["metadata"]["name"] = "x"
    other_driver["spec"]["driver"] = "gpu.nvidia.com"
    other_node = copy.deepcopy(ours[0])
    other_node["metadata"]["name"] = "y"
    other_node["spec"]["nodeName"] = "node-b"
    other_node["spec"]["pool"]["generation"] = 99
    p = plan([*ours, other_driver, other_node], desired)
    assert p.empty
    assert 1 == p.generation


def test_update_keeps_metadata_owned_by_others() -> None:
    """Labels and annotations others set survive an update; managedFields are not sent back."""
    existing = published(split_pool(devs(8)))
    existing[0]["metadata"]["labels"] = {"team": "ml"}
    p = plan(existing, split_pool(devs(7)))
    meta = p.update[0]["metadata"]
    assert {"team": "ml"} == meta["labels"]
    assert "managedFields" not in meta
    assert existing[0]["metadata"]["resourceVersion"] == meta["resourceVersion"]


def test_server_normalization_is_not_rewritten_when_the_version_is_ours() -> None:
    """A stored slice the server rewrote (e.g. a quantity) counts as in sync if we wrote that version."""
    desired = split_pool(devs(1, memory="1024Mi"))
    created = plan([], desired).create[0]
    stored = store(created)
    stored["spec"]["devices"][0]["capacity"]["memory"]["value"] = "1Gi"  # server canonical form
    name, rv = stored["metadata"]["name"], stored["metadata"]["resourceVersion"]

    assert not plan([stored], desired).empty  # without memory of what was sent: one rewrite
    assert plan([stored], desired, sent={name: SentRecord(rv, created)}).empty
    assert not plan([stored], desired, sent={name: SentRecord("older", created)}).empty


def test_dropped_fields_do_not_cause_endless_rewrites() -> None:
    """Fields a server drops (feature gate off) are written once, then left as stored."""
    desired = split_pool(devs(2, taint=True))
    p = plan([], desired)
    stored = store(p.create[0])
    for dev in stored["spec"]["devices"]:
        del dev["taints"]
    sent = {stored["metadata"]["name"]: SentRecord(stored["metadata"]["resourceVersion"], p.create[0])}
    assert plan([stored], desired, sent=sent).empty


def test_owned_view_ignores_server_metadata_and_empty_values() -> None:
    """Comparison sees only owned fields; empty lists and maps equal missing ones."""
    obj = plan([], split_pool(devs(1))).create[0]
    stored = store(obj)
    stored["spec"]["devices"][0]["consumesCounters"] = []
    stored["spec"]["devices"][0]["bindingConditions"] = None
    assert owned_view(obj) == owned_view(stored)
    stored["spec"]["devices"][0]["attributes"]["extra"] = {"string": "x"}
    assert owned_view(obj) != owned_view(stored)


def test_dropped_fields_reports_paths() -> None:
    """Every field sent but not stored is named by its JSON path, at the level it vanished."""
    sent = {
        "driver": DRIVER,
        "devices": [
            {"name": "gpu-0", "capacity": {"memory": {"value": "80Gi"}}},
            {"name": "gpu-1", "consumesCounters": [{"counterSet": "cs", "counters": {"m": {"value": "1"}}}]},
            {"name": "gpu-2", "taints": [{"key": "k", "effect": "NoSchedule"}], "bindsToNode": True},
        ],
        "sharedCounters": [{"name": "cs", "counters": {"m": {"value": "1"}}}],
    }
    stored = {
        "driver": DRIVER,
        "devices": [
            {"name": "gpu-0", "capacity": {"memory": {"value": "80Gi"}}},
            {"name": "gpu-1"},
            {"name": "gpu-2", "taints": [{"key": "k", "effect": "NoSchedule", "timeAdded": "t"}]},
        ],
    }
    assert [
        "spec.devices[1].consumesCounters",
        "spec.devices[2].bindsToNode",
        "spec.sharedCounters",
    ] == dropped_fields(sent, stored)


def test_dropped_fields_ignores_empty_and_normalized_values() -> None:
    """Empty values the server omits and values it rewrites are not reported as dropped."""
    sent: dict[str, Any] = {"devices": [], "pool": {"name": "n"}, "x": {"value": "1024Mi"}, "y": None}
    stored = {"pool": {"name": "n"}, "x": {"value": "1Gi"}}
    assert [] == dropped_fields(sent, stored)


def test_dropped_fields_reports_truncated_lists() -> None:
    """A list stored shorter than sent names each missing element."""
    assert ["spec.devices[1]", "spec.devices[2]"] == dropped_fields({"devices": [1, 2, 3]}, {"devices": [1]})
