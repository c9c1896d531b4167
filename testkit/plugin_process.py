"""Runs the real ``dra-gpu-kubelet-plugin`` process and talks to it as the kubelet does.

Used by the integration and e2e tests, the demo and the benchmark: the client is generated
from ``proto/``, the sockets are the daemon's own, and claims live in the real API server.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc

from dra_driver.files.atomic import MOVED_ASIDE
from proto.dra.v1 import api_pb2 as v1
from proto.dra.v1 import api_pb2_grpc as v1_grpc
from proto.dra.v1beta1 import api_pb2 as v1beta1
from proto.dra.v1beta1 import api_pb2_grpc as v1beta1_grpc
from proto.health.v1 import api_pb2 as h1
from proto.health.v1 import api_pb2_grpc as h1_grpc
from proto.health.v1alpha1 import api_pb2 as h1a1
from proto.health.v1alpha1 import api_pb2_grpc as h1a1_grpc
from proto.pluginregistration import api_pb2 as reg
from proto.pluginregistration import api_pb2_grpc as reg_grpc
from testkit.claimdata import DRIVER

if TYPE_CHECKING:
    from testkit.node import KubeletNode

ROOT = Path(__file__).resolve().parents[1]


class PluginProcess:
    """One plugin daemon with its own registrar, plugin and CDI dirs under ``base``."""

    def __init__(
        self,
        base: Path,
        *,
        kubeconfig: Path,
        node: str = "node-a",
        profile: str = "h100x8",
        publish: bool = False,
        registrar_dir: Path | None = None,
        plugins_dir: Path | None = None,
        cdi_root: Path | None = None,
        extra_args: tuple[str, ...] = (),
        python: Path | None = None,
    ) -> None:
        """``registrar_dir``/``plugins_dir`` default to dirs under ``base``; a KubeletNode passes its own.

        ``python`` runs the daemon with another interpreter (``make bench``: a venv holding only the
        product's dependencies, as the image does); by default this process's.
        """
        self.base = base
        base.mkdir(parents=True, exist_ok=True)
        self.registrar = registrar_dir or base / "plugins_registry"
        self.plugin_dir = (plugins_dir or base / "plugins") / DRIVER
        self.cdi = cdi_root or base / "cdi"
        self.boot_id = base / "boot_id"
        self.log = base / "plugin.log"
        self.kubeconfig = kubeconfig
        self.node = node
        self.profile = profile
        self.publish = publish
        self.extra_args = extra_args
        self.python = str(python) if python is not None else sys.executable
        self.proc: subprocess.Popen[bytes] | None = None
        if not self.boot_id.exists():
            self.boot_id.write_text("boot-1\n")

    @classmethod
    def on_node(cls, node: KubeletNode, base: Path, *, kubeconfig: Path, extra_args: tuple[str, ...] = ()) -> PluginProcess:
        """Our daemon for ``node``'s kubelet (its registry and plugins dirs), publishing 8 fake H100s."""
        return cls(
            base,
            kubeconfig=kubeconfig,
            node=node.name,
            profile="h100x8",
            publish=True,
            registrar_dir=node.registrar_dir,
            plugins_dir=node.plugins_dir,
            extra_args=extra_args,
        )

    @property
    def reg_socket(self) -> Path:
        return self.registrar / f"{DRIVER}-reg.sock"

    @property
    def dra_socket(self) -> Path:
        return self.plugin_dir / "dra.sock"

    def start(self, *, crash_at: str | None = None, timeout: float = 20.0, code: Path | None = None) -> None:
        """Start the daemon and wait until it says it started.

        ``code`` runs the plugin from another source tree (an earlier release, extracted by the
        checkpoint compatibility test) with this checkout's venv: it is the working directory and
        the only ``PYTHONPATH`` entry, so its packages shadow this checkout's editable install.
        """
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        env.pop("DRA_GPU_CRASH_AT", None)
        if code is not None:
            env["PYTHONPATH"] = str(code)
        if crash_at:
            env["DRA_GPU_CRASH_AT"] = crash_at
        args = [
            self.python,
            "-m",
            "kubelet_plugin.main",
            "--node-name",
            self.node,
            "--driver-name",
            DRIVER,
            "--fake-gpus",
            self.profile,
            "--registrar-dir",
            str(self.registrar),
            "--plugin-dir",
            str(self.plugin_dir),
            "--cdi-root",
            str(self.cdi),
            "--kubeconfig",
            str(self.kubeconfig),
            "--healthcheck-port",
            "0",
            "--healthcheck-address",
            "127.0.0.1",
            # Any free port on loopback: plugins of several nodes share this host (``metrics_url`` finds it).
            # Not for another source tree (``code``): an earlier release may not know the flags.
            *(() if code is not None else ("--metrics-port", "0", "--metrics-address", "127.0.0.1")),
            "--publish-slices",
            "true" if self.publish else "false",
            "--boot-id-file",
            str(self.boot_id),
            "--log-level",
            "debug",
            *self.extra_args,
        ]
        started_before = self._started_count()
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(args, cwd=code or ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"plugin exited with {self.proc.returncode}:\n{self.log.read_text()[-3000:]}")
            if self._started_count() > started_before:  # sockets of a killed run may linger; wait for this one
                return
            time.sleep(0.05)
        raise RuntimeError(f"plugin sockets did not appear in {timeout}s:\n{self.log.read_text()[-3000:]}")

    def metrics_url(self) -> str:
        """The /metrics URL of the running daemon, from its latest ``metrics_listening`` log line."""
        ports = [e["port"] for e in self.logs() if e.get("event") == "metrics_listening"]
        if not ports:
            raise RuntimeError(f"the plugin logged no metrics_listening:\n{self.log.read_text()[-3000:]}")
        return f"http://127.0.0.1:{ports[-1]}/metrics"

    def _started_count(self) -> int:
        return sum(1 for e in self.logs() if e.get("event") == "plugin_started") if self.log.exists() else 0

    def stop(self) -> int | None:
        """SIGTERM and wait; returns the exit code (None if it had to be killed)."""
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return None

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait()

    def wait_exit(self, timeout: float = 20.0) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout)

    def logs(self) -> list[dict[str, Any]]:
        out = []
        for line in self.log.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
        return out

    # -- the kubelet's side -------------------------------------------------------------------

    def get_info(self) -> Any:
        with grpc.insecure_channel(f"unix://{self.reg_socket}") as ch:
            return reg_grpc.RegistrationStub(ch).GetInfo(reg.InfoRequest(), timeout=10)

    def notify(self, registered: bool, error: str = "") -> None:
        with grpc.insecure_channel(f"unix://{self.reg_socket}") as ch:
            reg_grpc.RegistrationStub(ch).NotifyRegistrationStatus(
                reg.RegistrationStatus(plugin_registered=registered, error=error), timeout=10
            )

    def prepare(self, claims: list[tuple[str, str, str]], version: str = "v1") -> Any:
        pb, stub = (v1, v1_grpc.DRAPluginStub) if version == "v1" else (v1beta1, v1beta1_grpc.DRAPluginStub)
        req = pb.NodePrepareResourcesRequest(claims=[pb.Claim(namespace=ns, uid=uid, name=n) for ns, uid, n in claims])
        with grpc.insecure_channel(f"unix://{self.dra_socket}") as ch:
            return stub(ch).NodePrepareResources(req, timeout=45)

    def unprepare(self, claims: list[tuple[str, str, str]], version: str = "v1") -> Any:
        pb, stub = (v1, v1_grpc.DRAPluginStub) if version == "v1" else (v1beta1, v1beta1_grpc.DRAPluginStub)
        req = pb.NodeUnprepareResourcesRequest(claims=[pb.Claim(namespace=ns, uid=uid, name=n) for ns, uid, n in claims])
        with grpc.insecure_channel(f"unix://{self.dra_socket}") as ch:
            return stub(ch).NodeUnprepareResources(req, timeout=45)

    def fault(self, *args: str) -> dict[str, Any]:
        """Run the fake GPUs' fault CLI (``python -m dra_driver.sources.fake_health``) on this plugin's GPUs."""
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "dra_driver.sources.fake_health",
                "--state-dir",
                str(self.plugin_dir / "fake-gpus"),
                "--fake-gpus",
                self.profile,
                "--node-name",
                self.node,
                *args,
            ],
            check=True,
            capture_output=True,
            text=True,
            cwd=ROOT,
        )
        result: dict[str, Any] = json.loads(out.stdout)
        return result

    def health_updates(self, version: str = "v1alpha1", *, until: Any = None, timeout: float = 20.0) -> list[Any]:
        """Messages of the kubelet's health stream, read until ``until(message)`` is true (or the first one)."""
        pb, pb_grpc = (h1a1, h1a1_grpc) if version == "v1alpha1" else (h1, h1_grpc)
        got: list[Any] = []
        with grpc.insecure_channel(f"unix://{self.dra_socket}") as ch:
            stream = pb_grpc.DRAResourceHealthStub(ch).NodeWatchResources(pb.NodeWatchResourcesRequest(), timeout=timeout)
            for msg in stream:
                got.append(msg)
                if until is None or until(msg):
                    stream.cancel()
                    return got
        raise AssertionError(f"health stream ended without the awaited message; got {len(got)}")

    @property
    def sim_state(self) -> Path:
        """The MIG simulator's state file of this plugin's fake GPUs (default state dir)."""
        return self.plugin_dir / "fake-gpus" / "mig-state.json"

    def cdi_files(self) -> list[str]:
        """The CDI directory's files, once specs the plugin removed are unlinked (its background thread
        does that within ``SYNC_DELAY_S``; one still there after 5 s is listed, so a leak fails the test)."""
        deadline = time.monotonic() + 5.0
        while True:
            names = sorted(p.name for p in self.cdi.iterdir()) if self.cdi.exists() else []
            if time.monotonic() > deadline or not any(n.startswith(MOVED_ASIDE) for n in names):
                return names
            time.sleep(0.02)
