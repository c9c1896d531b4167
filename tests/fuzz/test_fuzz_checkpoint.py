"""Fuzzing checkpoint files: the decoder and the store refuse hostile bytes with their own errors, fast.

Mutations are made both to the bytes (torn, flipped) and to the data with the checksum
recomputed, so hostile values reach the entry decoder and not only the checksum check. The
store's load must never raise for corruption (the plugin would crash-loop), only for a
checkpoint from a newer version.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from dra_driver.core.checkpoint import (
    Checkpoint,
    CheckpointError,
    CheckpointTooNew,
    ClaimEntry,
    ClaimState,
    MigRecord,
    PreparedDevice,
    decode,
    encode,
)
from dra_driver.core.config import TimeSliceInterval
from dra_driver.core.sharing import TimeSlice
from dra_driver.files.checkpoint_store import CheckpointStore
from tests.fuzz import harness

UID = "0a1b2c3d-0000-4000-8000-000000000001"


def seed_doc() -> dict[str, Any]:
    mig = MigRecord("GPU-1", 19, "1g.10gb", 6, 1, 1, 0, "MIG-1")
    dev = PreparedDevice(("gpu",), "node-a", "gpu-0-mig-1g10gb-6", ("k8s.gpu.dra-gpu.dev/claim=x",), None, False, mig)
    started = ClaimEntry(ClaimState.PREPARE_STARTED, "ns", "s", mig_intents=(mig,), recovered=True)
    done = ClaimEntry(
        ClaimState.PREPARE_COMPLETED,
        "ns",
        "c",
        (dev,),
        {"cdiVersion": "0.5.0"},
        time_slices=(TimeSlice("GPU-1", TimeSliceInterval.LONG),),
    )
    cp = Checkpoint("boot-1", {UID: done, UID.replace("1", "2"): started})
    doc: dict[str, Any] = json.loads(encode(cp))
    return doc


def with_checksum(doc: Any) -> Any:
    if isinstance(doc, dict) and "data" in doc:
        try:
            canon = json.dumps(doc["data"], sort_keys=True, separators=(",", ":")).encode()
            doc["checksum"] = "sha256:" + hashlib.sha256(canon).hexdigest()
        except (ValueError, RecursionError, TypeError):
            pass
    return doc


def inputs(n: int, name: str) -> Iterator[bytes]:
    rng = random.Random(harness.seed_for(name))
    seed = seed_doc()
    for _ in range(n):
        doc = harness.mutate(seed, rng)
        if rng.random() < 0.8:
            doc = with_checksum(doc)
        yield harness.to_bytes(doc, rng)


def test_decoder_refuses_hostile_checkpoints_with_checkpoint_errors_only() -> None:
    rep = harness.run(
        "checkpoint decode",
        inputs(harness.budget(3000), "checkpoint-decode"),
        decode,
        (CheckpointError,),
    )
    harness.assert_clean(rep)
    assert rep.rejected > rep.inputs // 4  # the mutations do reach the checks
    assert rep.accepted > 0  # and some survive: unknown fields are tolerated by the upgrade rule


def test_store_load_never_raises_for_a_hostile_file(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path, "boot-1")
    store.ensure_dir()

    def load(raw: bytes) -> None:
        for p in tmp_path.iterdir():
            if p.is_file():
                p.unlink()
        store.path.write_bytes(raw)
        result = store.load()
        assert isinstance(result.checkpoint, Checkpoint)
        assert result.trusted or result.notices

    rep = harness.run("checkpoint store load", inputs(harness.budget(1500), "checkpoint-load"), load, (CheckpointTooNew,))
    harness.assert_clean(rep)


def test_a_newer_version_is_refused_not_reset(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path, "boot-1")
    doc = seed_doc()
    doc["apiVersion"] = "checkpoint.dra-gpu.dev/v2"
    raw = json.dumps(doc).encode()
    store.path.write_bytes(raw)
    try:
        store.load()
    except CheckpointTooNew as err:
        assert "roll forward" in str(err)
    else:
        raise AssertionError("a newer checkpoint must be refused")
    assert raw == store.path.read_bytes()
    assert [store.path.name] == [p.name for p in tmp_path.iterdir()]
