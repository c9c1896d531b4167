"""Checkpoint writes are fsynced shortly after, off the caller's thread, coalesced, and at once on flush."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from dra_driver.core.checkpoint import Checkpoint, ClaimEntry, ClaimState
from dra_driver.files import background_sync
from dra_driver.files.atomic import MOVED_ASIDE
from dra_driver.files.background_sync import BackgroundSync
from dra_driver.files.checkpoint_store import CheckpointStore


@pytest.fixture
def fsyncs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every fsync, by what was synced (a file's name, or "dir <name>")."""
    seen: list[str] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        path = Path(os.readlink(f"/proc/self/fd/{fd}"))
        seen.append(f"dir {path.name}" if path.is_dir() else path.name)
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    return seen


def wait_idle(sync: BackgroundSync, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while sync._thread is not None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert sync._thread is None, "the sync thread should end once nothing is pending"


def test_a_marked_file_and_its_directory_are_fsynced_soon_and_the_thread_ends(tmp_path: Path, fsyncs: list[str]) -> None:
    f = tmp_path / "a.json"
    f.write_text("{}")
    sync = BackgroundSync(delay_s=0.05)
    sync.mark(f)
    assert fsyncs == []  # not on the caller's thread
    wait_idle(sync)
    assert fsyncs == ["a.json", f"dir {tmp_path.name}"]


def test_writes_within_one_delay_share_one_fsync(tmp_path: Path, fsyncs: list[str]) -> None:
    f = tmp_path / "a.json"
    sync = BackgroundSync(delay_s=0.3)
    for i in range(20):
        f.write_text(str(i))
        sync.mark(f)
    wait_idle(sync)
    assert fsyncs.count("a.json") == 1


def test_flush_syncs_at_once_and_a_removed_file_is_skipped(tmp_path: Path, fsyncs: list[str]) -> None:
    kept, gone = tmp_path / "kept", tmp_path / "gone"
    kept.write_text("1")
    gone.write_text("2")
    sync = BackgroundSync(delay_s=60)
    sync.mark(kept)
    sync.mark(gone)
    gone.unlink()
    sync.flush()
    assert fsyncs == ["kept", f"dir {tmp_path.name}"]


def test_a_checkpoint_save_returns_before_its_fsync_and_close_makes_it_durable(tmp_path: Path, fsyncs: list[str]) -> None:
    store = CheckpointStore(tmp_path, "boot-1")
    assert store.sync._delay == background_sync.SYNC_DELAY_S
    store.sync = BackgroundSync(delay_s=60.0)  # so that only flush can sync
    store.save(Checkpoint("boot-1").with_claim("u1", ClaimEntry(ClaimState.PREPARE_COMPLETED, "ns", "c")))
    assert fsyncs == []
    store.close()
    assert fsyncs == ["checkpoint.json", f"dir {tmp_path.name}"]
    assert set(store.load().checkpoint.claims) == {"u1"}
    # after close (shutdown), a call still finishing is durable before its save returns
    store.save(Checkpoint("boot-1"))
    assert fsyncs[2:] == ["checkpoint.json", f"dir {tmp_path.name}"]


def test_flush_waits_for_the_batch_the_thread_is_syncing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    f = tmp_path / "a.json"
    f.write_text("{}")
    started, done = threading.Event(), threading.Event()
    real = os.fsync

    def slow_fsync(fd: int) -> None:
        if not started.is_set():
            started.set()
            time.sleep(0.3)
        real(fd)
        done.set()

    monkeypatch.setattr(os, "fsync", slow_fsync)
    sync = BackgroundSync(delay_s=0.01)
    sync.mark(f)
    assert started.wait(5)  # the thread has taken the batch and is inside its fsync
    sync.flush()  # nothing pending any more, but the batch in progress must finish first
    assert done.is_set()


def test_a_failing_batch_does_not_stop_later_fsyncs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    f = tmp_path / "a.json"
    f.write_text("{}")
    sync = BackgroundSync(delay_s=0.01)
    calls: list[int] = []
    real_sync = sync._sync

    def flaky(paths: list[Path]) -> None:
        calls.append(len(paths))
        if len(calls) == 1:
            raise RuntimeError("boom")
        real_sync(paths)

    monkeypatch.setattr(sync, "_sync", flaky)
    sync.mark(f)
    wait_idle(sync)
    synced_before = sync.synced
    sync.mark(f)
    wait_idle(sync)
    assert calls == [1, 1]
    assert sync.synced == synced_before + 1


def test_a_save_frees_no_file_on_the_callers_thread_and_keeps_the_previous_generation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The old previous generation is moved aside at once and unlinked by the thread (freeing blocks is slow)."""
    store = CheckpointStore(tmp_path, "boot-1")
    store.sync = BackgroundSync(delay_s=60.0)  # so that only flush does the background work
    first = Checkpoint("boot-1").with_claim("u1", ClaimEntry(ClaimState.PREPARE_COMPLETED, "ns", "c1"))
    second = first.with_claim("u2", ClaimEntry(ClaimState.PREPARE_COMPLETED, "ns", "c2"))
    store.save(Checkpoint("boot-1"))
    store.save(first)
    freed: list[str] = []
    real_unlink, real_replace = os.unlink, os.replace

    def unlink(path: str | os.PathLike[str], *a: object, **k: object) -> None:
        freed.append(Path(path).name)
        real_unlink(path)

    def replace(src: str | os.PathLike[str], dst: str | os.PathLike[str], *a: object, **k: object) -> None:
        if Path(dst).exists() and Path(dst).stat().st_nlink == 1:
            freed.append(Path(dst).name)  # replacing a file's last name frees it
        real_replace(src, dst)

    monkeypatch.setattr(os, "unlink", unlink)
    monkeypatch.setattr(os, "replace", replace)
    store.save(second)
    assert freed == []
    assert set(store.load().checkpoint.claims) == {"u1", "u2"}
    store.path.unlink()  # the previous generation is the one saved before
    assert set(store.load().checkpoint.claims) == {"u1"}
    freed.clear()
    aside = [p.name for p in tmp_path.iterdir() if p.name.startswith(MOVED_ASIDE)]
    assert len(aside) == 1, sorted(p.name for p in tmp_path.iterdir())
    store.close()
    assert freed == aside
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint.prev.json"]
    assert store.sync.discarded == 1


def test_a_removed_cdi_spec_is_gone_from_its_name_at_once_and_unlinked_soon(tmp_path: Path) -> None:
    from dra_driver.files.cdi_store import CdiStore

    sync = BackgroundSync(delay_s=0.01)
    cdi = CdiStore(tmp_path, "gpu.example.com", later=sync)
    cdi.ensure_root()
    cdi.write("uid-1", {"cdiVersion": "0.6.0"})
    assert cdi.remove("uid-1") is True
    assert cdi.read("uid-1") is None and cdi.claim_uids() == set()
    assert not any(p.suffix == ".json" for p in tmp_path.iterdir())  # no CDI reader sees it any more
    wait_idle(sync)
    assert list(tmp_path.iterdir()) == [] and sync.discarded == 1
    assert cdi.remove("uid-1") is False  # gone: nothing to remove


def test_a_file_moved_aside_by_a_killed_process_is_removed_at_the_next_start(tmp_path: Path) -> None:
    from dra_driver.files.atomic import move_aside

    store = CheckpointStore(tmp_path, "boot-1")
    store.save(Checkpoint("boot-1"))
    store.save(Checkpoint("boot-1"))
    aside = move_aside(store.prev)  # as if killed before the thread unlinked it
    assert aside is not None and aside.exists()
    CheckpointStore(tmp_path, "boot-1").ensure_dir()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint.json"]


@pytest.mark.parametrize("fails", ["link", "rename"])
def test_a_save_that_cannot_keep_the_previous_generation_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fails: str
) -> None:
    """No space for a link (or a failing rename): the save fails, and both generations stay as they were."""
    store = CheckpointStore(tmp_path, "boot-1")
    first = Checkpoint("boot-1").with_claim("u1", ClaimEntry(ClaimState.PREPARE_COMPLETED, "ns", "c1"))
    store.save(Checkpoint("boot-1"))
    store.save(first)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}

    def no_space(*_: object, **__: object) -> None:
        raise OSError(28, "No space left on device")

    if fails == "link":
        monkeypatch.setattr(os, "link", no_space)
    else:
        real_rename = Path.rename

        def rename(self: Path, target: str | os.PathLike[str]) -> Path:
            if Path(target).name == "checkpoint.prev.json" and self.name.startswith(".dra-gpu-tmp-checkpoint"):
                no_space()
            return real_rename(self, target)

        monkeypatch.setattr(Path, "rename", rename)
    with pytest.raises(OSError, match="No space"):
        store.save(first.with_claim("u2", ClaimEntry(ClaimState.PREPARE_COMPLETED, "ns", "c2")))
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before
