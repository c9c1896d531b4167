"""The real ``dra-gpu-kubelet-plugin`` process for ``make gpu-check``: its flags, its log, its sockets.

Started by ``testkit.gpu_check.flow`` from this checkout (``python -m kubelet_plugin.main`` with the
repository on ``PYTHONPATH``, so nothing needs installing) against the stand-in API server, with
every directory under the run's own folder, and flags that keep it read-only on a GPU: ``--mig
none`` (no MIG backend at all), no sharing, and ``--nvidia-bin-dir`` pointing at an empty
folder, so not even a bug could run ``nvidia-smi`` or ``nvidia-cuda-mps-control``. Its log lines
(JSON, stderr) go to ``plugin.log``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubelet_plugin.sockets import SocketPaths

REPO = Path(__file__).resolve().parents[2]


class PluginFailed(RuntimeError):
    """The plugin exited, or did not start in time; the message carries its log's tail."""


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip() or str(uuid.uuid4())
    except OSError:
        return str(uuid.uuid4())


@dataclass
class PluginRun:
    """One plugin process with its log and CDI specs under ``base``, its sockets and state under ``state``.

    ``state`` is a short path (a unix socket's path has at most 107 bytes; ``base`` may be long).
    """

    base: Path
    state: Path
    kubeconfig: Path
    node: str
    driver: str
    fake_gpus: str | None
    python: str = sys.executable
    usage_interval_s: float = 0.5
    extra_args: tuple[str, ...] = ()
    proc: subprocess.Popen[bytes] | None = field(default=None, init=False)
    started_s: float | None = field(default=None, init=False)

    @property
    def plugin_dir(self) -> Path:
        """The plugin's state dir (checkpoint, DRA socket, fake GPU state)."""
        return self.state / "plugins" / self.driver

    @property
    def cdi_root(self) -> Path:
        """Where it writes the claims' CDI specs."""
        return self.base / "cdi"

    @property
    def log(self) -> Path:
        """Its stdout and stderr."""
        return self.base / "plugin.log"

    @property
    def sockets(self) -> SocketPaths:
        """Its registration and DRA sockets, named as the plugin names them."""
        return SocketPaths.for_plugin(
            driver=self.driver, registrar_dir=self.state / "plugins_registry", plugin_dir=self.plugin_dir, pod_uid=None
        )

    def argv(self) -> list[str]:
        """The plugin's command line."""
        no_bin = self.base / "no-nvidia-bin"
        return [
            self.python,
            "-m",
            "kubelet_plugin.main",
            "--node-name",
            self.node,
            "--driver-name",
            self.driver,
            *(("--fake-gpus", self.fake_gpus) if self.fake_gpus else ()),
            # On a GPU it runs on the host: the driver's user space for the claim's spec is under / (read only).
            *(() if self.fake_gpus else ("--driver-root", "/")),
            "--mig",
            "none",
            "--sharing",
            "none",
            "--nvidia-bin-dir",
            str(no_bin),
            "--registrar-dir",
            str(self.state / "plugins_registry"),
            "--plugin-dir",
            str(self.plugin_dir),
            "--cdi-root",
            str(self.cdi_root),
            "--kubeconfig",
            str(self.kubeconfig),
            "--healthcheck-port",
            "-1",
            "--publish-slices",
            "true",
            "--boot-id-file",
            str(self.base / "boot_id"),
            "--metrics-port",
            "0",
            "--metrics-address",
            "127.0.0.1",
            "--usage-interval",
            str(self.usage_interval_s),
            "--gc-interval",
            "0",
            "--log-level",
            "debug",
            *self.extra_args,
        ]

    def start(self, timeout_s: float = 60.0) -> float:
        """Start it and wait for ``plugin_started``; the seconds that took. Raises PluginFailed."""
        self.base.mkdir(parents=True, exist_ok=True)
        (self.base / "no-nvidia-bin").mkdir(exist_ok=True)
        (self.base / "boot_id").write_text(_boot_id() + "\n")
        env = {
            **os.environ,
            "PYTHONUNBUFFERED": "1",
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
        }
        t0 = time.monotonic()
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(self.argv(), cwd=self.base, env=env, stdout=out, stderr=subprocess.STDOUT)
        while time.monotonic() - t0 < timeout_s:
            if self.proc.poll() is not None:
                raise PluginFailed(f"the plugin exited with {self.proc.returncode}:\n{self.tail()}")
            if self.event("plugin_started") is not None:
                self.started_s = time.monotonic() - t0
                return self.started_s
            time.sleep(0.05)
        raise PluginFailed(f"the plugin did not start within {timeout_s:g}s:\n{self.tail()}")

    def tail(self, chars: int = 4000) -> str:
        """The end of its log."""
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else ""

    def logs(self) -> list[dict[str, Any]]:
        """Its JSON log lines."""
        out: list[dict[str, Any]] = []
        if not self.log.exists():
            return out
        for line in self.log.read_text(errors="replace").splitlines():
            try:
                doc = json.loads(line)
            except ValueError:
                continue
            if isinstance(doc, dict):
                out.append(doc)
        return out

    def event(self, name: str) -> dict[str, Any] | None:
        """Its latest log line of event ``name``."""
        found = [e for e in self.logs() if e.get("event") == name]
        return found[-1] if found else None

    def metrics_url(self) -> str:
        """Its /metrics URL (from ``metrics_listening``)."""
        line = self.event("metrics_listening")
        if line is None:
            raise PluginFailed(f"the plugin logged no metrics_listening:\n{self.tail()}")
        return f"http://127.0.0.1:{line['port']}/metrics"

    def stop(self, timeout_s: float = 30.0) -> int | None:
        """SIGTERM and wait: its exit code (None when it had to be killed)."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                return None
        return self.proc.returncode
