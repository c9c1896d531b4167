"""The one entry point of every dra-gpu daemon: parse flags, log as JSON, run until a stop signal.

Called by the ``main`` of ``controller``, ``kubelet_plugin`` and ``webhook``. A bad flag or
``--help`` returns argparse's exit code instead of raising; an exception that escapes the
daemon's ``run`` is logged with its traceback (``<name>_failed``) and exits 1; every exit logs
``<name>_stopped``.

At start each daemon raises its soft limit of open files to the hard limit (``raise_open_files_limit``):
containerd 2.x starts containers at 1,024, where about a thousand idle connections to the metrics port
once left a prepare failing with "Too many open files". Its HTTP listeners then take their connection
caps from what is left after a reserve for the work that matters (the rule:
``dra_driver.obs.http_server``).
"""

from __future__ import annotations

import resource
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
    raise_open_files_limit()
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


def raise_open_files_limit() -> int:
    """Raise the soft ``RLIMIT_NOFILE`` to the hard limit (logged as ``open_files_limit``); the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == hard:
        log.info("open_files_limit", soft=soft, hard=hard)
        return soft
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ValueError, OSError) as err:
        log.warning("open_files_limit_unchanged", soft=soft, hard=hard, error=str(err))
        return soft
    log.info("open_files_limit", soft=hard, hard=hard, raised_from=soft)
    return hard
