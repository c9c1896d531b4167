"""Fixtures for the differential tests: one celdiff process (the scheduler's Go code) per session."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.differential.oracle import Celdiff


@pytest.fixture(scope="session")
def celdiff() -> Iterator[Celdiff]:
    """The Go oracle; fails (not skips) with how to build it when the binary is missing."""
    oracle = Celdiff()
    yield oracle
    oracle.close()
