"""Fuzzing the health record, the fake GPUs' fault file and usage script, and scrapes ``dra-gpu top`` reads.

``health.json`` is read at every plugin start: whatever is in it, the store's load never raises and
fails closed (every GPU degraded) when it cannot be read. The fault file is read every poll by the
fake GPUs' source: it is refused with ``FaultFileError`` and the source never raises.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from dra_driver.core.health import (
    GpuCheck,
    HealthBook,
    HealthEvent,
    record_check,
    record_event,
)
from dra_driver.core.health_causes import KEY_HEALTH_RECORD
from dra_driver.core.health_record import HealthRecordError, from_json, to_json
from dra_driver.files.health_store import HealthStore
from dra_driver.obs.scrape import ScrapeError
from dra_driver.obs.scrape import parse as parse_scrape
from dra_driver.sources.fake_health import FAULTS_FILE, FakeHealthSource, FaultFileError, decode
from dra_driver.sources.fake_usage import ScriptError, decode_script
from tests.fuzz import harness

GPUS = ("GPU-a", "GPU-b")


def record_seed() -> dict[str, Any]:
    book = HealthBook()
    for e in (
        HealthEvent("GPU-a", "xid", 10.0, 79, "x"),
        HealthEvent("GPU-b", "xid", 11.0, 13),
        HealthEvent("GPU-a", "double-bit-ecc", 12.0),
        HealthEvent("GPU-b", "single-bit-ecc-storm", 13.0),
        HealthEvent("GPU-b", "fatal-poison", 14.0),
        HealthEvent("GPU-a", "gpu-recovery-action", 15.0, action="drain-p2p"),
        HealthEvent("GPU-b", "gpu-recovery-action", 16.0, action="unknown"),
    ):
        book = record_event(book, e)
    book = record_check(book, "GPU-a", GpuCheck(recovery_action="node-reboot"), 17.0)
    return to_json(book, "boot-1", {"fake": 7})


def fault_seed() -> dict[str, Any]:
    return {
        "version": 1,
        "nextSeq": 2,
        "events": [
            {"seq": 0, "uuid": "GPU-a", "kind": "xid", "at": 1.0, "xid": 79, "detail": ""},
            {"seq": 1, "uuid": "GPU-b", "kind": "gpu-reset", "at": 2.0, "xid": None, "detail": "d"},
            {
                "seq": 2,
                "uuid": "GPU-a",
                "kind": "gpu-recovery-action",
                "at": 3.0,
                "xid": None,
                "detail": "",
                "action": "gpu-reset",
            },
            {"seq": 3, "uuid": "GPU-b", "kind": "dram-retirement-failure", "at": 4.0, "xid": None, "detail": "", "action": ""},
            {"seq": 4, "uuid": "GPU-b", "kind": "pstate", "at": 5.0, "xid": None, "detail": ""},
        ],
        "checks": {
            "GPU-a": {"lost": True, "retirementPending": False, "remapPending": False, "remapFailed": False, "error": ""},
            "GPU-b": {"lost": False, "error": "", "recoveryAction": "bus-reset"},
        },
    }


def inputs(seed: dict[str, Any], n: int, name: str) -> Iterator[bytes]:
    rng = random.Random(harness.seed_for(name))
    for _ in range(n):
        yield harness.to_bytes(harness.mutate(seed, rng), rng)


def test_health_record_decoder_refuses_hostile_records_with_its_own_error_only() -> None:
    rep = harness.run(
        "health record decode",
        inputs(record_seed(), harness.budget(1500), "health-record"),
        lambda raw: from_json(json.loads(raw)),
        (HealthRecordError, ValueError, RecursionError),
    )
    harness.assert_clean(rep)
    assert rep.rejected > rep.inputs // 4
    assert rep.accepted > 0


def test_health_store_load_never_raises_and_fails_closed(tmp_path: Path) -> None:
    store = HealthStore(tmp_path, "boot-1")

    def load(raw: bytes) -> None:
        store.path.write_bytes(raw)
        loaded = store.load(GPUS, 100.0)
        assert isinstance(loaded.book, HealthBook)
        if loaded.problems:  # unreadable: every GPU degraded until repaired
            assert all(loaded.book.of(u)[0].key == KEY_HEALTH_RECORD for u in GPUS)

    rep = harness.run("health store load", inputs(record_seed(), harness.budget(800), "health-load"), load, ())
    harness.assert_clean(rep)


def test_fault_file_decoder_refuses_hostile_files_and_the_source_never_raises(tmp_path: Path) -> None:
    rep = harness.run("fault file decode", inputs(fault_seed(), harness.budget(1200), "fault-file"), decode, (FaultFileError,))
    harness.assert_clean(rep)
    assert rep.rejected > rep.inputs // 4
    source = FakeHealthSource(tmp_path, sleep=lambda s: None)

    def poll(raw: bytes) -> None:
        (tmp_path / FAULTS_FILE).write_bytes(raw)
        source.resume(0)
        source._stamp = None
        assert isinstance(source.events(0.0), list)
        assert set(source.check(GPUS)) == set(GPUS)

    rep = harness.run("fault file source", inputs(fault_seed(), harness.budget(400), "fault-source"), poll, ())
    harness.assert_clean(rep)


def test_every_event_and_check_the_fault_file_accepts_folds_into_the_book() -> None:
    """What the fake GPUs' source hands the monitor never makes ``record_event`` or ``record_check`` raise."""

    def fold(raw: bytes) -> None:
        fl = decode(raw)
        book = HealthBook()
        for _, event in fl.events:
            book = record_event(book, event)
        for uuid, check in fl.checks.items():
            book = record_check(book, uuid, check, 10.0)
        assert isinstance(book, HealthBook)

    rep = harness.run("fault file fold", inputs(fault_seed(), harness.budget(800), "fault-fold"), fold, (FaultFileError,))
    harness.assert_clean(rep)
    assert rep.accepted > 0 and rep.rejected > 0


def usage_seed() -> dict[str, Any]:
    step = {"since": 1000.0, "steps": [[0, 0.8, 10 << 30], [600, None, 0]], "processes": [[42, 0.5, 1 << 30]]}
    return {"claims": {"uid-1": step}, "devices": {"gpu-3": {"since": 5.0, "steps": [[0, 0.0, None]]}}}


def test_usage_script_decoder_refuses_hostile_scripts_with_its_own_error_only() -> None:
    rep = harness.run(
        "usage script decode", inputs(usage_seed(), harness.budget(1200), "usage-script"), decode_script, (ScriptError,)
    )
    harness.assert_clean(rep)
    assert rep.rejected > rep.inputs // 4
    assert rep.accepted > 0


def scrape_seed() -> str:
    return (
        "# TYPE dra_gpu_claim_idle_seconds gauge\n"
        'dra_gpu_claim_idle_seconds{namespace="a",claim="c",node="n",device="gpu-0",pod="p"} 12.0\n'
        "# TYPE dra_gpu_claim_gpu_utilization_ratio gauge\n"
        'dra_gpu_claim_gpu_utilization_ratio{namespace="a",claim="c",node="n",device="gpu-0",pod="p"} 0.5\n'
        "# TYPE dra_gpu_gpu_healthy gauge\n"
        'dra_gpu_gpu_healthy{gpu="gpu-1",uuid="GPU-x"} 0\n'
        "# TYPE dra_gpu_gpu_health_conditions gauge\n"
        'dra_gpu_gpu_health_conditions{gpu="gpu-1",cause="xid",value="79",severity="fatal"} 1\n'
    )


def scrapes(n: int) -> Iterator[str]:
    """Scrape text torn, spliced and flipped line by line (what ``dra-gpu top`` reads from a pod)."""
    rng = random.Random(harness.seed_for("scrape-text"))
    lines = scrape_seed().splitlines()
    pieces = ["{", "}", '"', "=", ",", " ", "\\", "NaN", "+Inf", "-1e400", "1e400", "x" * 3000, "\x00", "#", "# TYPE x", "é"]
    for _ in range(n):
        out = list(lines)
        for _ in range(rng.randint(1, 4)):
            i = rng.randrange(len(out))
            j = rng.randrange(len(out[i]) + 1)
            out[i] = out[i][:j] + rng.choice(pieces) + out[i][j + rng.randint(0, 3) :]
        if rng.random() < 0.2:
            out = out * rng.randint(2, 50)
        yield "\n".join(out) + "\n"


def test_scrape_parser_refuses_hostile_text_with_its_own_error_only() -> None:
    rep = harness.run("scrape text parse", scrapes(harness.budget(1200)), parse_scrape, (ScrapeError,))
    harness.assert_clean(rep)
    assert rep.rejected > 0 and rep.accepted > 0
