"""structlog configuration: JSON lines on stderr, one event per line, context bound per call.

Called once by each app's ``main`` (plugin, controller, CLI). Library code only does
``structlog.get_logger(__name__)`` and binds ``claim_uid``, ``namespace``, ``device`` as data.
Tests use ``structlog.testing.capture_logs`` to assert on events.
"""

from __future__ import annotations

import logging
import sys

import structlog


def configure_logging(level: str = "info", *, json: bool = True) -> None:
    """Route structlog to stderr as JSON (or console text for humans) at ``level``."""
    numeric = logging.getLevelNamesMapping().get(level.upper())
    if numeric is None:
        raise ValueError(f"unknown log level {level!r}")
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer() if json else structlog.dev.ConsoleRenderer(colors=False)
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )
