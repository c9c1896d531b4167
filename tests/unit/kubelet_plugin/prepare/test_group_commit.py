"""Group commit: concurrent prepares and unprepares share checkpoint saves, and each still gets its own answer.

In process, real files in a temp dir (``tests.unit.test_state``'s helpers). Saves are counted by
wrapping the checkpoint store; the queue's behaviour is driven by holding the node lock from the
test so that calls pile up, as they do when many pods land on a node at once.
"""

from __future__ import annotations

import functools
import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dra_driver.core.checkpoint import Checkpoint, ClaimState
from dra_driver.files.lock import LockTimeout
from kubelet_plugin.prepare.group_commit import GroupCommit
from kubelet_plugin.prepare.state import DeviceState
from testkit.claimdata import DRIVER, allocated_claim
from tests.unit.kubelet_plugin.device_states import Claims
from tests.unit.kubelet_plugin.prepare.test_state import TIME_SLICED, cdi_files, make_state


def counting_saves(state: DeviceState, fail: Callable[[Checkpoint], bool] = lambda cp: False) -> list[Checkpoint]:
    saved: list[Checkpoint] = []
    store = state._store
    real = functools.partial(type(store).save, store)  # the class's, even if wrapped before

    def save(cp: Checkpoint) -> None:
        if fail(cp):
            raise OSError(28, "No space left on device")
        saved.append(cp)
        real(cp)

    store.save = save  # type: ignore[method-assign]
    return saved


def on_disk(tmp_path: Path) -> dict[str, Any]:
    if not (tmp_path / "plugin" / "checkpoint.json").exists():
        return {}
    claims: dict[str, Any] = json.loads((tmp_path / "plugin" / "checkpoint.json").read_text())["data"]["claims"]
    return claims


def concurrently(calls: list[Callable[[], Any]], state: DeviceState) -> list[Any]:
    """Start every call while the test holds the node lock, release it once all are queued or waiting."""
    results: list[Any] = [None] * len(calls)

    def run(i: int) -> None:
        results[i] = calls[i]()

    with state._locked():
        threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and len(state._prepares._queue) + len(state._unprepares._queue) < len(calls):
            time.sleep(0.01)
    for t in threads:
        t.join(10)
    return results


def test_a_plain_claim_is_prepared_with_one_save_and_unprepared_with_one(tmp_path: Path) -> None:
    """No started entry for a claim whose only side effect is its CDI spec: one save, made before the answer."""
    claims = Claims()
    ref = claims.add(allocated_claim(devices=["gpu-1"]))
    state = make_state(tmp_path, claims)
    saves = counting_saves(state)
    assert state.prepare([ref])[ref.uid].error == ""
    assert [cp.claims[ref.uid].state for cp in saves] == [ClaimState.PREPARE_COMPLETED]
    assert on_disk(tmp_path)[ref.uid]["state"] == "PrepareCompleted"
    assert state.unprepare([ref]) == {ref.uid: ""}
    assert len(saves) == 2 and ref.uid not in saves[-1].claims
    assert on_disk(tmp_path) == {} and cdi_files(tmp_path) == []


def test_a_claim_with_side_effects_still_saves_its_started_entry_first(tmp_path: Path) -> None:
    """Time slicing changes the GPU: the started entry is on disk before it, as before."""
    claims = Claims()
    ref = claims.add(allocated_claim(devices=["gpu-2"], config=TIME_SLICED))
    state = make_state(tmp_path, claims)
    saves = counting_saves(state)
    assert state.prepare([ref])[ref.uid].error == ""
    assert [cp.claims[ref.uid].state for cp in saves] == [ClaimState.PREPARE_STARTED, ClaimState.PREPARE_COMPLETED]
    assert saves[0].claims[ref.uid].time_slices


def test_calls_that_queue_behind_the_lock_are_prepared_together_under_one_save(tmp_path: Path) -> None:
    claims = Claims()
    refs = [claims.add(allocated_claim(name=f"c{i}", devices=[f"gpu-{i}"])) for i in range(8)]
    state = make_state(tmp_path, claims)
    saves = counting_saves(state)
    answers = concurrently([lambda r=r: state.prepare([r]) for r in refs], state)  # type: ignore[misc]
    for i, (ref, out) in enumerate(zip(refs, answers, strict=True)):
        assert out[ref.uid].error == ""
        assert [d.device_name for d in out[ref.uid].devices] == [f"gpu-{i}"]
    assert len(saves) == 1 and set(saves[0].claims) == {r.uid for r in refs}
    answers = concurrently([lambda r=r: state.unprepare([r]) for r in refs], state)  # type: ignore[misc]
    assert all(out == {r.uid: ""} for r, out in zip(refs, answers, strict=True))
    assert len(saves) == 2 and saves[1].claims == {}
    assert on_disk(tmp_path) == {} and cdi_files(tmp_path) == []


def test_two_claims_of_one_batch_for_one_device_get_it_once(tmp_path: Path) -> None:
    """The second claim's plan sees the first one's completed entry, saved or not."""
    claims = Claims()
    a = claims.add(allocated_claim(name="a", devices=["gpu-3"]))
    b = claims.add(allocated_claim(name="b", devices=["gpu-3"]))
    state = make_state(tmp_path, claims)
    out_a, out_b = concurrently([lambda: state.prepare([a]), lambda: state.prepare([b])], state)
    errors = sorted([out_a[a.uid].error, out_b[b.uid].error])
    assert errors[0] == "" and "device gpu-3 is already prepared for claim" in errors[1]
    assert len(on_disk(tmp_path)) == 1 and len(cdi_files(tmp_path)) == 1


def test_a_failed_batch_save_fails_exactly_the_unsaved_claims_and_removes_their_specs(tmp_path: Path) -> None:
    claims = Claims()
    first = claims.add(allocated_claim(name="first", devices=["gpu-0"]))
    state = make_state(tmp_path, claims)
    assert state.prepare([first])[first.uid].error == ""
    refs = [claims.add(allocated_claim(name=f"c{i}", devices=[f"gpu-{i}"])) for i in (1, 2)]
    counting_saves(state, fail=lambda cp: len(cp.claims) > 1)
    out = state.prepare(refs)
    for ref in refs:
        assert "saving the checkpoint: [Errno 28] No space left on device" in out[ref.uid].error
    assert set(on_disk(tmp_path)) == {first.uid}
    assert cdi_files(tmp_path) == [f"k8s.{DRIVER}-claim_{first.uid}.json"]
    # the disk has room again: the kubelet's retry prepares them
    counting_saves(state)
    assert all(not o.error for o in state.prepare(refs).values())


def test_a_crash_in_one_claim_keeps_the_unsaved_claims_before_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An unexpected exception reloads what is saved; claims done earlier in the batch are not lost with it."""
    claims = Claims()
    good = claims.add(allocated_claim(name="good", devices=["gpu-4"]))
    bad = claims.add(allocated_claim(name="bad", devices=["gpu-5"]))
    state = make_state(tmp_path, claims)
    real = state._steps._plan

    def plan(claim: Any, devices: Any, cp: Any, **kw: Any) -> Any:
        if claim.uid == bad.uid and any(e.state is ClaimState.PREPARE_STARTED for e in cp.claims.values()):
            raise RuntimeError("boom")
        return real(claim, devices, cp, **kw)

    monkeypatch.setattr(state._steps, "_plan", plan)
    out = state.prepare([good, bad])
    assert out[good.uid].error == ""
    assert "internal error preparing claim" in out[bad.uid].error and "boom" in out[bad.uid].error
    assert set(on_disk(tmp_path)) == {good.uid}
    assert cdi_files(tmp_path) == [f"k8s.{DRIVER}-claim_{good.uid}.json"]


def test_a_call_that_times_out_in_the_queue_is_taken_out_and_answered(tmp_path: Path) -> None:
    claims = Claims()
    ref = claims.add(allocated_claim(devices=["gpu-6"]))
    state = make_state(tmp_path, claims)
    state._lock_timeout = 0.2
    with state._locked():
        out = state.prepare([ref])
    assert "preparing: timed out" in out[ref.uid].error
    assert list(state._prepares._queue) == []
    assert ref.uid not in on_disk(tmp_path) and cdi_files(tmp_path) == []


def test_a_queued_call_taken_by_a_holder_waits_for_its_answer_past_its_own_lock_timeout() -> None:
    """Two calls queue; the one that gets the lock does both in one batch, longer than the other's lock wait."""
    held = threading.Lock()

    class Lock:
        def __enter__(self) -> None:
            if not held.acquire(timeout=0.2):
                raise LockTimeout("timed out")

        def __exit__(self, *a: object) -> None:
            held.release()

    group: GroupCommit[dict[str, str]] = GroupCommit(Lock)
    batches: list[int] = []

    def slow_batch(works: list[dict[str, str]]) -> None:
        batches.append(len(works))
        time.sleep(0.6)  # past the other call's lock timeout
        for w in works:
            w["answer"] = "done"

    works: list[dict[str, str]] = [{}, {}]
    errors: list[BaseException] = []

    def call(w: dict[str, str]) -> None:
        try:
            group.run(w, slow_batch)
        except BaseException as err:
            errors.append(err)

    threads = [threading.Thread(target=call, args=(w,)) for w in works]
    with held:
        for t in threads:
            t.start()
        while len(group._queue) < 2:
            time.sleep(0.005)
    for t in threads:
        t.join(5)
    assert errors == [] and batches == [2]
    assert works == [{"answer": "done"}, {"answer": "done"}]
