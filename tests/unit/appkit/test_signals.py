"""A stop signal always stops a daemon, whatever its main thread is doing when it arrives."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

# The signal arrives while the main thread is inside structlog's PrintLogger, holding its lock (as
# when SIGTERM lands while the plugin writes "sockets_listening"). A handler that logged itself
# would wait for that lock on the same thread forever.
CHILD = textwrap.dedent(
    """
    import os, signal, sys, threading
    import structlog
    from dra_driver.appkit.signals import stop_on_signals

    class SignalledMidWrite:
        def __init__(self):
            self.sent = False
        def write(self, s):
            if not self.sent:
                self.sent = True
                os.kill(os.getpid(), signal.SIGTERM)
                for _ in range(1000):  # bytecodes: the Python-level handler runs in here
                    pass
            sys.stdout.write(s)
        def flush(self):
            sys.stdout.flush()

    structlog.configure(
        processors=[structlog.processors.JSONRenderer()],
        logger_factory=structlog.PrintLoggerFactory(file=SignalledMidWrite()),
    )
    stop = threading.Event()
    stop_on_signals(stop)
    structlog.get_logger().info("sockets_listening")
    print("stopped" if stop.wait(10) else "not stopped", flush=True)
    """
)


def test_a_stop_signal_while_the_main_thread_writes_a_log_line_stops_the_daemon_and_is_logged() -> None:
    proc = subprocess.run([sys.executable, "-c", CHILD], cwd=ROOT, capture_output=True, text=True, timeout=30, check=False)
    lines = proc.stdout.splitlines()
    assert proc.returncode == 0, proc.stderr
    assert lines[-1] == "stopped", proc.stdout
    assert '"event": "signal_received"' in proc.stdout and '"signal": "SIGTERM"' in proc.stdout
