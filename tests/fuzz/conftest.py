"""Prints how many inputs each fuzz target saw (the counts the closing note reports)."""

from __future__ import annotations

import pytest

from tests.fuzz.harness import COUNTS, SCALE


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not COUNTS:
        return
    terminalreporter.section(f"fuzz inputs (DRA_GPU_FUZZ_SCALE={SCALE:g})")
    for name, n in sorted(COUNTS.items()):
        terminalreporter.write_line(f"{name:40s} {n:8d}")
    terminalreporter.write_line(f"{'total':40s} {sum(COUNTS.values()):8d}")
