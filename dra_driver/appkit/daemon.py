"""The one entry point of every dra-gpu daemon: parse flags, log as JSON, run until a stop signal.

Called by the ``main`` of ``controller``, ``kubelet_plugin`` and ``webhook``. A bad flag or
``--help`` returns argparse's exit code instead of raising; an exception that escapes the
daemon's ``run`` is logged with its traceback (``<name>_failed``) and exits 1; every exit logs
``<name>_stopped``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Protocol, TypeVar

import structlog

from dra_driver.appkit.signals import stop_on_signals
from dra_driver.obs.logs import configure_logging

log = structlog.get_logger(__name__)


class DaemonSettings(Protocol):
    """What every daemon's parsed settings carry."""

    @property
    def log_level(self) -> str:
        """debug, info, warning or error."""
        ...


S = TypeVar("S", bound=DaemonSettings)


def run_daemon(
    name: str,
    argv: list[str] | None,
    parse: Callable[[list[str] | None], S],
    run: Callable[[S, threading.Event], int],
    context: Callable[[S], Mapping[str, str]] = lambda _settings: {},
) -> int:
    """Parse ``argv``, configure logs, bind ``context(settings)`` to every log line and ``run``.

    ``run`` gets the settings and an event set by SIGTERM or SIGINT; its return is the exit code.
    """
    try:
        settings = parse(argv)
    except SystemExit as exc:  # argparse: --help (0) or a bad flag (2)
        return exc.code if isinstance(exc.code, int) else 2
    configure_logging(settings.log_level)
    structlog.contextvars.bind_contextvars(**context(settings))
    stop = threading.Event()
    stop_on_signals(stop)
    try:
        return run(settings, stop)
    except Exception:
        log.exception(f"{name}_failed")
        return 1
    finally:
        log.info(f"{name}_stopped")
