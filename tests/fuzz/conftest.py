"""Prints how many inputs each fuzz target saw (the counts the closing note reports); the plugin fuzzers' state dir."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fuzz.harness import COUNTS, SCALE


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not COUNTS:
        return
    terminalreporter.section(f"fuzz inputs (DRA_GPU_FUZZ_SCALE={SCALE:g})")
    for name, n in sorted(COUNTS.items()):
        terminalreporter.write_line(f"{name:40s} {n:8d}")
    terminalreporter.write_line(f"{'total':40s} {sum(COUNTS.values()):8d}")


@pytest.fixture
def state_dir(tmp_path: Path) -> Iterator[Path]:
    """A fresh directory for plugin state, on tmpfs where the machine has one.

    The fuzzers check how input is handled, not durability (the crash tests do that), so the
    checkpoint's and CDI specs' fsyncs need not hit a disk for every one of thousands of inputs.
    """
    shm = Path("/dev/shm")
    if not (shm.is_dir() and os.access(shm, os.W_OK)):
        yield tmp_path
        return
    d = Path(tempfile.mkdtemp(prefix="dra-gpu-fuzz-", dir=shm))
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)
