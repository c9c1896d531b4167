"""Hostile requests and lost checkpoints against the plugin's state, in process, with dynamic MIG.

The MIG side is the simulator behind the NVML backend, its state in a file that outlives the
``DeviceState`` as a GPU outlives the plugin. Each test is one observation of the hardening
issue: claims in one call are isolated, lookups share one deadline, duplicate UIDs and bad
names are refused, and a checkpoint that cannot be trusted never destroys what a container
may be using.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from dra_driver.appkit.inventory import node_publication
from dra_driver.core.checkpoint import ClaimState
from dra_driver.core.mig import MigInstance, MigStrategy
from dra_driver.files.cdi_store import CdiStore
from dra_driver.files.checkpoint_store import Notice
from dra_driver.mig_backends.select import make_mig_backend
from dra_driver.sources.fake import FakeGpuSource
from kubelet_plugin.prepare.mig_ops import MigOps
from kubelet_plugin.prepare.requests import ClaimRef, Outcome
from kubelet_plugin.prepare.state import DeviceState
from testkit.claimdata import DRIVER, allocated_claim, new_uid
from tests.unit.kubelet_plugin.device_states import new_device_state

GPUS = FakeGpuSource("h100x8", "node-a").gpus()


class NotFound(LookupError):
    not_found = True


class Claims:
    """In-memory claim reader; ``hang`` makes every lookup block until released."""

    def __init__(self) -> None:
        self.objs: dict[tuple[str, str], dict[str, Any]] = {}
        self.hang = threading.Event()
        self.release = threading.Event()
        self.calls: list[tuple[str, str]] = []

    def add(self, obj: dict[str, Any]) -> ClaimRef:
        m = obj["metadata"]
        self.objs[(m["namespace"], m["name"])] = obj
        return ClaimRef(m["namespace"], m["uid"], m["name"])

    def get_claim(self, namespace: str, name: str) -> dict[str, Any]:
        self.calls.append((namespace, name))
        if self.hang.is_set():
            self.release.wait(30)
        try:
            return self.objs[(namespace, name)]
        except KeyError:
            raise NotFound(f"claim {namespace}/{name} not found") from None


class Node:
    """A node's plugin state over files in ``root``; ``start()`` is a plugin (re)start."""

    def __init__(self, root: Path, claims: Claims) -> None:
        self.root = root
        self.claims = claims
        self.notices: list[Notice] = []

    def start(self) -> DeviceState:
        backend = make_mig_backend(fake=True, gpus=GPUS, state_dir=self.root / "sim", boot_id="boot-1")
        publication = node_publication(GPUS, MigStrategy.DYNAMIC, backend)
        return new_device_state(
            self.root, self.claims, publication=publication, mig=MigOps(backend, GPUS), notify=self.notices.append
        )

    def instances(self) -> list[MigInstance]:
        backend = make_mig_backend(fake=True, gpus=GPUS, state_dir=self.root / "sim", boot_id="boot-1")
        return [i for g in GPUS for i in backend.instances(g)]

    def cdi_uids(self) -> set[str]:
        return CdiStore(self.root / "cdi", DRIVER).claim_uids()

    @property
    def checkpoint(self) -> Path:
        return self.root / "plugin" / "checkpoint.json"

    @property
    def previous(self) -> Path:
        return self.root / "plugin" / "checkpoint.prev.json"


def ok(out: dict[str, Outcome], ref: ClaimRef) -> None:
    assert "" == out[ref.uid].error, out[ref.uid].error
    assert out[ref.uid].devices


def mig_claim(claims: Claims, device: str, **kw: Any) -> ClaimRef:
    return claims.add(allocated_claim(name=f"c-{new_uid()[:8]}", devices=[device], **kw))


# -- observation 3: claims in one call are isolated -------------------------------------------


def test_an_unexpected_failure_in_one_claim_rolls_back_that_claim_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    claims = Claims()
    node = Node(tmp_path, claims)
    state = node.start()
    good = mig_claim(claims, "gpu-0-mig-1g10gb-6")
    bad = mig_claim(claims, "gpu-1-mig-1g10gb-6")
    real = state._steps._apply_sharing

    def explode(plan: Any) -> None:
        if any(d.device_name.startswith("gpu-1") for d in plan.devices):
            raise RuntimeError("a bug only this claim hits")
        real(plan)

    monkeypatch.setattr(state._steps, "_apply_sharing", explode)
    out = state.prepare([bad, good])
    ok(out, good)
    assert "internal error preparing claim" in out[bad.uid].error
    assert "a bug only this claim hits" in out[bad.uid].error
    entries = state.prepared_claims()
    assert {good.uid} == set(entries)  # the bad claim was rolled back, not left PrepareStarted
    assert ClaimState.PREPARE_COMPLETED is entries[good.uid].state
    assert {good.uid} == node.cdi_uids()
    assert [GPUS[0].uuid] == [i.parent_uuid for i in node.instances()]  # the bad claim's carve was undone


# -- observation 4: a hung API server still gives per-claim answers --------------------------


def test_a_hung_api_server_gives_each_claim_its_own_error_before_the_kubelet_deadline(tmp_path: Path) -> None:
    claims = Claims()
    state = Node(tmp_path, claims).start()
    state.lookup_budget_s = 1.0
    refs = [mig_claim(claims, f"gpu-{i}-mig-1g10gb-6") for i in range(5)]
    claims.hang.set()
    t0 = time.monotonic()
    try:
        out = state.prepare(refs)
    finally:
        claims.release.set()
    elapsed = time.monotonic() - t0
    assert elapsed < 10, f"one shared deadline, not one per claim: took {elapsed:.1f}s"
    for ref in refs:
        assert f"reading claim {ref.namespace}/{ref.name}: no answer from the API server within 1s" == out[ref.uid].error
    assert {} == dict(state.prepared_claims())


def test_lookups_run_concurrently(tmp_path: Path) -> None:
    claims = Claims()
    state = Node(tmp_path, claims).start()
    started = threading.Barrier(4, timeout=5)

    def slow(namespace: str, name: str) -> dict[str, Any]:
        started.wait()  # only returns when four lookups are in flight at once
        raise NotFound(f"claim {namespace}/{name} not found")

    claims.get_claim = slow  # type: ignore[method-assign]
    refs = [ClaimRef("default", new_uid(), f"missing-{i}") for i in range(4)]
    out = state.prepare(refs)
    assert all("not found" in out[r.uid].error for r in refs), out


# -- observation 6: a duplicated UID ---------------------------------------------------------


def test_a_uid_twice_in_one_request_is_refused_and_records_no_bogus_name(tmp_path: Path) -> None:
    claims = Claims()
    state = Node(tmp_path, claims).start()
    real = mig_claim(claims, "gpu-0-mig-1g10gb-6")
    out = state.prepare([ClaimRef(real.namespace, real.uid, "bogus"), real])
    assert "appears 2 times in one request" in out[real.uid].error
    assert {} == dict(state.prepared_claims())
    ok(state.prepare([real]), real)
    assert real.name == state.prepared_claims()[real.uid].name


def test_a_request_naming_another_claim_for_a_uid_is_refused(tmp_path: Path) -> None:
    """The checkpoint records the name the GC looks up: it must be the claim's own."""
    claims = Claims()
    state = Node(tmp_path, claims).start()
    real = mig_claim(claims, "gpu-0-mig-1g10gb-6")
    claims.objs[("default", "alias")] = claims.objs[("default", real.name)]  # a reader answering for the wrong name
    out = state.prepare([ClaimRef("default", real.uid, "alias")])
    assert f"claim {real.uid} is default/{real.name}, not default/alias as the request says" == out[real.uid].error
    assert {} == dict(state.prepared_claims())


def test_gc_keeps_a_claim_whose_resourceclaim_exists(tmp_path: Path) -> None:
    claims = Claims()
    state = Node(tmp_path, claims).start()
    real = mig_claim(claims, "gpu-0-mig-1g10gb-6")
    state.prepare([ClaimRef(real.namespace, real.uid, "bogus"), real])
    ok(state.prepare([real]), real)
    assert [] == state.collect_garbage()
    assert [] == state.collect_garbage()
    assert {real.uid} == set(state.prepared_claims())
    assert {real.uid} == Node(tmp_path, claims).cdi_uids()


# -- observation 8: UIDs and names are checked before use -----------------------------------


@pytest.mark.parametrize(
    ("namespace", "name", "uid_suffix", "message"),
    [
        ("default", "c", "\n", "is not a valid Kubernetes UID"),
        ("default", "", "", "claim name '' is not a valid object name"),
        ("", "c", "", "claim namespace '' is not a valid namespace name"),
        ("default", "a/b", "", "is not a valid object name"),
        ("default", "x" * 300, "", "is not a valid object name"),
    ],
    ids=["uid-trailing-newline", "empty-name", "empty-namespace", "slash-in-name", "long-name"],
)
def test_bad_uids_and_names_never_reach_the_api_server(
    tmp_path: Path, namespace: str, name: str, uid_suffix: str, message: str
) -> None:
    claims = Claims()
    state = Node(tmp_path, claims).start()
    ref = ClaimRef(namespace, new_uid() + uid_suffix, name)
    out = state.prepare([ref])
    assert message in out[ref.uid].error
    assert [] == claims.calls


# -- observation 5: a checkpoint that cannot be trusted never destroys what runs -------------


def prepared_pair(tmp_path: Path) -> tuple[Node, ClaimRef, ClaimRef]:
    """Two MIG claims prepared one after the other (the second is the newest checkpoint write)."""
    claims = Claims()
    node = Node(tmp_path, claims)
    state = node.start()
    first = mig_claim(claims, "gpu-0-mig-1g10gb-6")
    second = mig_claim(claims, "gpu-1-mig-1g10gb-5")
    ok(state.prepare([first]), first)
    ok(state.prepare([second]), second)
    assert 2 == len(node.instances())
    return node, first, second


def assert_still_prepared(node: Node, refs: list[ClaimRef]) -> None:
    """What the kubelet was told is prepared is still there, and a repeat gives the same devices."""
    uuids = {i.uuid for i in node.instances()}
    state = node.start()
    for ref in refs:
        assert ref.uid in node.cdi_uids()
        spec = json.loads(CdiStore(node.root / "cdi", DRIVER).path(ref.uid).read_text())
        env = dict(e.split("=", 1) for d in spec["devices"] for e in d["containerEdits"]["env"])
        mig_uuid = next(v for k, v in env.items() if k.endswith("_UUID") and not k.endswith("PARENT_UUID"))
        assert mig_uuid in uuids, f"claim {ref.name}'s MIG device {mig_uuid} was destroyed"
        out = state.prepare([ref])
        ok(out, ref)
    assert uuids == {i.uuid for i in node.instances()}, "a repeated prepare must adopt, not re-carve"
    assert all(state.prepared_claims()[r.uid].state is ClaimState.PREPARE_COMPLETED for r in refs)


def test_a_truncated_newest_checkpoint_keeps_the_newest_claims_instance(tmp_path: Path) -> None:
    node, first, second = prepared_pair(tmp_path)
    node.checkpoint.write_bytes(node.checkpoint.read_bytes()[:100])
    assert_still_prepared(node, [first, second])
    assert "CheckpointRecovered" in [n.reason for n in node.notices]
    rebuilt = next(n for n in node.notices if n.reason == "CheckpointRebuilt")
    assert "without destroying anything: 2 claim(s) kept from the previous generation" in rebuilt.message


@pytest.mark.parametrize("how", ["both-corrupt", "both-deleted", "newest-deleted", "newest-is-a-directory"])
def test_a_lost_checkpoint_destroys_nothing_and_unprepare_still_cleans_up(tmp_path: Path, how: str) -> None:
    node, first, second = prepared_pair(tmp_path)
    if how == "both-corrupt":
        node.checkpoint.write_bytes(b"\x00garbage")
        node.previous.write_bytes(b"{")
    elif how == "both-deleted":
        node.checkpoint.unlink()
        node.previous.unlink()
    elif how == "newest-deleted":
        node.checkpoint.unlink()
    else:
        node.checkpoint.unlink()
        node.checkpoint.mkdir()
    assert_still_prepared(node, [first, second])
    reasons = [n.reason for n in node.notices]
    assert "CheckpointRebuilt" in reasons
    if how == "newest-deleted":
        assert "CheckpointMissing" in reasons  # no longer recovered silently
    state = node.start()
    out = state.unprepare([first, second])
    assert {first.uid: "", second.uid: ""} == out
    assert [] == node.instances()
    assert set() == node.cdi_uids()
    assert {} == dict(state.prepared_claims())


def test_adopted_claims_are_unprepared_by_uid_even_before_a_repeat_prepare(tmp_path: Path) -> None:
    node, first, second = prepared_pair(tmp_path)
    node.checkpoint.unlink()
    node.previous.unlink()
    state = node.start()
    assert 2 == len(node.instances())
    assert {"": ""} == {e.name: "" for e in state.prepared_claims().values()}  # names unknown until the kubelet says
    assert [] == state.collect_garbage()  # unnamed: the GC cannot look them up, so it keeps them
    assert {first.uid: ""} == state.unprepare([first])
    assert [GPUS[1].uuid] == [i.parent_uuid for i in node.instances()]
    assert {second.uid} == node.cdi_uids()


def test_a_checkpoint_from_a_newer_version_refuses_calls_and_changes_nothing(tmp_path: Path) -> None:
    node, first, second = prepared_pair(tmp_path)
    raw = node.checkpoint.read_bytes().replace(b"checkpoint.dra-gpu.dev/v1", b"checkpoint.dra-gpu.dev/v2")
    node.checkpoint.write_bytes(raw)
    before = (node.instances(), node.cdi_uids())
    state = node.start()  # no exception: no crash loop
    assert state.refusal is not None and "roll forward" in state.refusal
    out = state.prepare([first])
    assert "roll forward" in out[first.uid].error
    assert "roll forward" in state.unprepare([second])[second.uid]
    assert [] == state.collect_garbage()
    assert before == (node.instances(), node.cdi_uids())
    assert raw == node.checkpoint.read_bytes()  # not moved aside, not rewritten
    assert "CheckpointTooNew" in [n.reason for n in node.notices]


def test_unowned_instances_are_kept_and_reported_when_the_checkpoint_is_lost(tmp_path: Path) -> None:
    """A claim whose PrepareStarted was the lost write: its instance is kept, not swept."""
    node, _first, second = prepared_pair(tmp_path)
    CdiStore(node.root / "cdi", DRIVER).remove(second.uid)  # as if the kill came before its CDI spec
    node.checkpoint.unlink()
    node.previous.unlink()
    node.start()
    assert 2 == len(node.instances())
    rebuilt = next(n for n in node.notices if n.reason == "CheckpointRebuilt")
    assert "1 MIG instance(s) no claim is known to own kept in place" in rebuilt.message
    assert f"{GPUS[1].uuid}/gi" in rebuilt.message


def test_a_trusted_checkpoint_still_sweeps_leftovers(tmp_path: Path) -> None:
    """The fail-closed path is for lost state only: a good checkpoint keeps today's clean-up."""
    node, first, _second = prepared_pair(tmp_path)
    state = node.start()
    assert {first.uid: ""} == state.unprepare([first])
    backend = make_mig_backend(fake=True, gpus=GPUS, state_dir=tmp_path / "sim", boot_id="boot-1")
    backend.set_mode(GPUS[2], True)
    backend.create_gpu_instance(GPUS[2], 19, 6)  # made behind the plugin's back: no claim owns it
    node.start()
    assert [GPUS[1].uuid] == [i.parent_uuid for i in node.instances()]


def test_a_claim_unprepared_before_the_newest_checkpoint_was_lost_does_not_come_back(tmp_path: Path) -> None:
    """Found by ``make soak``: the previous generation still holds a claim the kubelet unprepared.

    Its GI id is reused by the next carve; the stale record used to shield that new instance
    from its own claim's unprepare, leaving it behind.
    """
    claims = Claims()
    node = Node(tmp_path, claims)
    state = node.start()
    gone = mig_claim(claims, "gpu-0-mig-1g10gb-6")
    ok(state.prepare([gone]), gone)
    [old] = node.instances()
    assert {gone.uid: ""} == state.unprepare([gone])
    node.checkpoint.unlink()  # the previous generation is the one where `gone` was prepared
    state = node.start()
    assert gone.uid not in state.prepared_claims()
    rebuilt = next(n for n in node.notices if n.reason == "CheckpointRebuilt")
    assert f"0 claim(s) kept from the previous generation, 1 found unprepared since and forgotten ({gone.uid})" in rebuilt.message
    later = mig_claim(claims, "gpu-0-mig-1g10gb-5")
    ok(state.prepare([later]), later)
    [new] = node.instances()
    assert (new.gi_id, new.parent_uuid) == (old.gi_id, old.parent_uuid) and new.uuid != old.uuid  # the GI id is reused
    assert {later.uid: ""} == state.unprepare([later])
    assert [] == node.instances()
    assert {} == dict(state.prepared_claims())


def test_a_claim_whose_spec_is_still_there_is_kept_after_a_lost_checkpoint(tmp_path: Path) -> None:
    """Only a claim with nothing left is forgotten: a CDI spec on disk means a container may use it."""
    node, first, second = prepared_pair(tmp_path)
    state = node.start()
    assert {first.uid: ""} == state.unprepare([first])
    node.checkpoint.unlink()
    state = node.start()
    assert {second.uid} == set(state.prepared_claims())  # `first` unprepared: forgotten; `second` kept
    assert_still_prepared(node, [second])


def test_a_stale_record_never_names_the_instance_that_reused_its_gi_id(tmp_path: Path) -> None:
    """MIG UUIDs are new on every creation: a destroyed instance's record finds, keeps and destroys nothing new."""
    backend = make_mig_backend(fake=True, gpus=GPUS, state_dir=tmp_path / "sim", boot_id="boot-1")
    publication = node_publication(GPUS, MigStrategy.DYNAMIC, backend)
    ops = MigOps(backend, GPUS)
    target = publication.targets["gpu-0-mig-1g10gb-6"]
    stale = ops.carve(target).mig
    assert stale is not None and ops.find(stale) is not None
    assert ops.destroy(stale)
    fresh = ops.carve(target).mig
    assert fresh is not None and (fresh.gi_id, fresh.start) == (stale.gi_id, stale.start)
    assert ops.find(stale) is None
    assert not ops.destroy(stale)
    assert [] == ops.sweep([fresh]) and [] != ops.sweep([stale])  # owned by the live record only


def test_a_claim_recovered_from_a_started_entry_keeps_its_instance_over_later_restarts(tmp_path: Path) -> None:
    """Found in review: the newest generation (PrepareCompleted) is lost, the previous one says PrepareStarted.

    The claim was answered, so a container may use its instance. The rebuild gives the recovered
    entry the live instance's ids, so the next start, which trusts the checkpoint again and sweeps
    instances no claim owns, keeps it.
    """
    claims = Claims()
    node = Node(tmp_path, claims)
    state = node.start()
    ref = mig_claim(claims, "gpu-0-mig-1g10gb-6")
    ok(state.prepare([ref]), ref)
    [inst] = node.instances()
    node.checkpoint.unlink()  # the previous generation holds the claim's PrepareStarted
    node.start()
    entry = node.start().prepared_claims()[ref.uid]  # a second, trusted start sweeps
    assert entry.recovered and [r.mig_uuid for r in entry.mig_records()] == [inst.uuid]
    assert [inst] == node.instances()
    assert_still_prepared(node, [ref])
    assert {ref.uid: ""} == node.start().unprepare([ref])
    assert [] == node.instances()
