"""Fixtures every test under tests/ gets: structlog's global configuration restored after each test.

A test that runs a command in-process (``dra_driver.cli.main.main``) configures structlog for the
command (its level, its stream); without this, every later test in the same pytest process would
log through that configuration: debug lines filtered out of ``structlog.testing.capture_logs``.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest
import structlog


@pytest.fixture(autouse=True)
def _structlog_restored() -> Iterator[None]:
    saved = structlog.get_config()
    finders = list(sys.meta_path)
    yield
    structlog.configure(**saved)
    sys.meta_path[:] = finders  # a command's "configure once structlog loads" hook, if it never fired
