"""structlog configuration: JSON lines on stderr, one event per line, context bound per call.

Called once by each app's entry: the daemons (plugin, controller, webhook, through
``dra_driver.appkit.daemon``) call ``configure_logging``; the CLI (``dra_driver.cli.main``) calls
``configure_cli_logging``, which does the same as soon as anything the command runs loads
structlog, so a command's stdout holds only its output (``| jq``, ``| kubectl apply -f -``) and
commands that never log (``explain``) do not pay for loading structlog. Library code only does
``structlog.get_logger(__name__)`` and binds ``claim_uid``, ``namespace``, ``device`` as data.
Tests use ``structlog.testing.capture_logs`` to assert on events.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable, Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import TextIO, cast

DEFAULT_CLI_LEVEL = "info"


def configure_logging(level: str = "info", *, json: bool = True) -> None:
    """Route structlog to stderr as JSON (or console text for humans) at ``level``."""
    import logging

    import structlog

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
        # PrintLogger only writes and flushes; the proxy is all of a TextIO it uses.
        logger_factory=structlog.PrintLoggerFactory(file=cast("TextIO", _CurrentStderr())),
        cache_logger_on_first_use=False,
    )


def configure_cli_logging(level: str = DEFAULT_CLI_LEVEL) -> None:
    """``configure_logging(level)`` now if structlog is loaded, else right after the first import of it.

    structlog's own default prints to stdout, which would mix log lines into a command's output;
    configuring it eagerly would load it (about 0.1 s) for commands that never log.
    """
    if "structlog" in sys.modules:
        configure_logging(level)
        return
    if not any(isinstance(f, _AfterImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterImport("structlog", lambda: configure_logging(level)))


class _CurrentStderr:
    """``sys.stderr`` as it is when a line is written, not when logging was configured.

    A command run in-process (a test's captured stderr, a caller's redirect) may replace and close
    ``sys.stderr`` after it configured logging; later lines then go to whatever stderr is now
    instead of failing on a closed file.
    """

    def write(self, text: str) -> int:
        """Write to the current ``sys.stderr``."""
        return sys.stderr.write(text)

    def flush(self) -> None:
        """Flush the current ``sys.stderr``."""
        sys.stderr.flush()


class _AfterImport:
    """Runs ``then`` once module ``name`` has been imported (executed) for the first time; then steps aside.

    A meta path finder by its ``find_spec`` alone: ``importlib.abc`` would load ``importlib.resources``
    and ``tempfile`` (about 0.5 MiB of every daemon's resident memory) for a base class that adds nothing here.
    """

    def __init__(self, name: str, then: Callable[[], None]) -> None:
        self._name = name
        self._then = then

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None) -> ModuleSpec | None:
        """The module's own spec (found by the other finders), its loader wrapped to call ``then`` after it runs."""
        if fullname != self._name:
            return None
        sys.meta_path.remove(self)  # once: the other finders find the module, later imports never see this one
        spec = importlib.util.find_spec(fullname)
        loader = spec.loader if spec is not None else None
        if spec is None or loader is None or not hasattr(loader, "exec_module"):
            return spec
        run_module = loader.exec_module
        then = self._then

        def exec_module(module: ModuleType) -> None:
            run_module(module)
            then()

        loader.exec_module = exec_module  # type: ignore[method-assign]  # this one import's loader instance, wrapped so structlog is configured the moment it has loaded
        return spec
