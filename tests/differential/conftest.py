"""Fixtures for the differential tests: one celdiff process (the scheduler's Go code) per session.

Also prints, at the end of a session that ran the generated allocation cases, how many cases
exercised each allocator feature and how many ended in each outcome (``coverage.py``).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from testkit.oracle.oracle import Celdiff
from tests.differential import coverage


@pytest.fixture(scope="session")
def celdiff() -> Iterator[Celdiff]:
    """The Go oracle; fails (not skips) with how to build it when the binary is missing."""
    oracle = Celdiff()
    yield oracle
    oracle.close()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not coverage.OUTCOMES:
        return
    total = sum(coverage.OUTCOMES.values())
    terminalreporter.section(f"allocation differential: cases per feature (of {total}, at least {coverage.MIN_CASES} each)")
    for name in coverage.FEATURES:
        terminalreporter.write_line(f"{name:50s} {coverage.COUNTS[name]:6d}")
    for name in coverage.OUTCOME_NAMES:
        terminalreporter.write_line(f"{'outcome: ' + name:50s} {coverage.OUTCOMES[name]:6d}")
