"""The checkpoint: format round trip, corruption handling, generations and the boot id."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dra_driver.core.checkpoint import Checkpoint, CheckpointError, ClaimEntry, ClaimState, PreparedDevice, decode, encode
from dra_driver.files.checkpoint_store import CheckpointStore

UID = "0a1b2c3d-0000-4000-8000-000000000001"


def sample(boot: str = "boot-1") -> Checkpoint:
    dev = PreparedDevice(("gpu",), "node-a", "gpu-0", ("k8s.gpu.dra-gpu.dev/claim=x-gpu-0",), None)
    return Checkpoint(boot, {UID: ClaimEntry(ClaimState.PREPARE_COMPLETED, "ns", "c", (dev,), {"cdiVersion": "0.5.0"})})


def test_round_trip_keeps_everything() -> None:
    """encode → decode is the identity."""
    assert sample() == decode(encode(sample()))


def test_unknown_fields_from_a_newer_binary_are_tolerated() -> None:
    """Additive fields keep the version and still verify (the checksum covers data as stored)."""
    doc = json.loads(encode(sample()))
    doc["data"]["claims"][UID]["futureField"] = {"x": 1}
    import hashlib

    doc["checksum"] = (
        "sha256:" + hashlib.sha256(json.dumps(doc["data"], sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    )
    assert sample().claims[UID] == decode(json.dumps(doc).encode()).claims[UID]


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda b: b[: len(b) // 2], "not valid JSON"),
        (lambda b: b.replace(b'"ns"', b'"nz"'), "checksum mismatch"),
        (lambda b: b.replace(b"checkpoint.dra-gpu.dev/v1", b"checkpoint.dra-gpu.dev/v9"), "roll forward"),
        (lambda b: b"[]", "not an object"),
    ],
    ids=["truncated", "edited", "too-new", "wrong-shape"],
)
def test_corruption_is_detected(mutate: object, message: str) -> None:
    """Torn, edited and too-new files are refused with a reason."""
    with pytest.raises(CheckpointError, match=message):
        decode(mutate(encode(sample())))  # type: ignore[operator]


def test_store_keeps_previous_generation_and_recovers_from_it(tmp_path: Path) -> None:
    """A corrupt checkpoint is moved aside and the previous generation is used, loudly."""
    store = CheckpointStore(tmp_path, "boot-1")
    first = sample()
    store.save(first)
    store.save(first.without_claim(UID))
    (tmp_path / "checkpoint.json").write_bytes(b"{garbage")
    result = store.load()
    assert first == result.checkpoint
    assert ["CheckpointRecovered"] == [n.reason for n in result.notices]
    assert 1 == len(list(tmp_path.glob("checkpoint.corrupt-*.json")))
    assert b"{garbage" == next(tmp_path.glob("checkpoint.corrupt-*.json")).read_bytes()


def test_store_with_no_good_generation_starts_empty_but_says_so(tmp_path: Path) -> None:
    """Never silently reset: the corrupt file is kept and a notice says state was lost."""
    store = CheckpointStore(tmp_path, "boot-1")
    (tmp_path / "checkpoint.json").write_bytes(b"\x00\x01")
    result = store.load()
    assert {} == dict(result.checkpoint.claims)
    assert ["CheckpointLost"] == [n.reason for n in result.notices]
    assert 1 == len(list(tmp_path.glob("checkpoint.corrupt-*.json")))


def test_boot_id_change_drops_claims_and_reports_them(tmp_path: Path) -> None:
    """After a reboot, prepared state is void (CDI files were on tmpfs)."""
    CheckpointStore(tmp_path, "boot-1").save(sample())
    result = CheckpointStore(tmp_path, "boot-2").load()
    assert {} == dict(result.checkpoint.claims)
    assert "boot-2" == result.checkpoint.node_boot_id
    assert [UID] == result.dropped_claims


def test_missing_checkpoint_reads_as_empty(tmp_path: Path) -> None:
    """A fresh node has no checkpoint and that is not an error."""
    result = CheckpointStore(tmp_path / "new", "b").load()
    assert ({}, []) == (dict(result.checkpoint.claims), result.notices)


def test_files_are_owner_only(tmp_path: Path) -> None:
    """The checkpoint is readable by its owner alone."""
    CheckpointStore(tmp_path, "b").save(sample("b"))
    assert 0o600 == (tmp_path / "checkpoint.json").stat().st_mode & 0o777


ENTRY = ClaimEntry(ClaimState.PREPARE_COMPLETED, "ns", "c")


def test_a_load_sees_every_change_another_writer_or_an_edit_made(tmp_path: Path) -> None:
    """A store remembers what it wrote; a save by another process (a rolling update) or an edit is read afresh."""
    mine, other = CheckpointStore(tmp_path, "boot-1"), CheckpointStore(tmp_path, "boot-1")
    mine.save(Checkpoint("boot-1", {"a": ENTRY}))
    assert {"a"} == set(mine.load().checkpoint.claims)
    other.save(Checkpoint("boot-1", {"b": ENTRY}))
    assert {"b"} == set(mine.load().checkpoint.claims)
    raw = bytearray(mine.path.read_bytes())
    raw[raw.index(b'"b"') + 1] = ord("c")  # same size, in place: the checksum no longer matches
    mine.path.write_bytes(bytes(raw))
    result = mine.load()
    assert not result.trusted and {"a"} == set(result.checkpoint.claims)  # the previous generation
    assert ["CheckpointRecovered"] == [n.reason for n in result.notices]


def test_the_checkpoint_is_compact_json_with_data_as_checksummed() -> None:
    raw = encode(Checkpoint("boot-1", {"a": ENTRY}))
    assert raw.count(b"\n") == 1 and b": " not in raw
    assert decode(raw) == Checkpoint("boot-1", {"a": ENTRY})
    assert json.loads(raw)["data"]["nodeBootID"] == "boot-1"


def test_encoding_claim_by_claim_matches_the_canonical_form_and_never_reads_a_stale_cache() -> None:
    """``encode`` joins cached per-claim bytes; the result is what ``_canonical`` makes of the whole data."""
    from dataclasses import replace

    from dra_driver.core.checkpoint import _canonical

    def full(cp: Checkpoint) -> bytes:
        return _canonical({"nodeBootID": cp.node_boot_id, "claims": {u: e.to_json() for u, e in cp.claims.items()}})

    started = ClaimEntry(ClaimState.PREPARE_STARTED, "ns", "a")
    cp = Checkpoint(node_boot_id="b\u00e9").with_claims({"u2": started, "u1": started, "u\u00fc": started})
    for step in range(3):
        raw = encode(cp)
        assert decode(raw) == cp
        assert json.loads(raw)["data"] == json.loads(full(cp))
        assert raw.split(b',"data":', 1)[1] == full(cp) + b"}\n"
        # a changed entry, through every way a copy is made, is encoded afresh
        done = ClaimEntry(ClaimState.PREPARE_COMPLETED, "ns", f"n{step}")
        cp = [cp.with_claim("u1", done), replace(cp, claims={**cp.claims, "u2": done}), cp.without_claim("u2")][step]
    assert set(decode(encode(cp)).claims) == {"u1", "u\u00fc"}
