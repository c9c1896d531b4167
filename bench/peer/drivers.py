"""The two drivers under test: dra-gpu's kubelet plugin and the Go peer, behind one ``Driver`` interface.

Built by ``bench.peer.run.run_bench``; started and timed by ``bench.peer.measure.measure_start``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import yaml

from testkit.claimdata import DRIVER as OUR_DRIVER
from testkit.peer_process import PEER_DRIVER, PeerProcess
from testkit.plugin_process import PluginProcess

NODE = "node-a"
ROOT = Path(__file__).resolve().parents[2]
PRODUCT_PACKAGES = ("dra_driver", "kubelet_plugin", "proto")


def compile_bytecode(python: Path | None) -> None:
    """Compile the plugin's own modules to bytecode first, as the image's ``pip install .`` does.

    The bench runs the plugin from the source tree (an editable install), and where
    ``PYTHONDONTWRITEBYTECODE`` is set (this machine, and the image) nothing would write it: every
    start would compile ~100 modules that an installed plugin loads ready-made.
    """
    subprocess.run(
        [str(python or sys.executable), "-m", "compileall", "-q", *PRODUCT_PACKAGES], cwd=ROOT, check=True, capture_output=True
    )


GPUS = 8
# Info logs (the peer logs at its default verbosity too) and no health port (the peer has none by default).
OUR_ARGS = ("--log-level", "info", "--healthcheck-port", "-1")
START_TIMEOUT_S = 90.0


class Driver:
    """One driver under test; ``launch`` spawns it in a fresh dir and returns at once."""

    label = ""
    driver = ""

    def launch(self, run_dir: Path) -> None:
        raise NotImplementedError

    @property
    def pid(self) -> int | None:
        raise NotImplementedError

    @property
    def dra_socket(self) -> Path:
        raise NotImplementedError

    def check_alive(self) -> None:
        raise NotImplementedError

    def settle(self) -> None:
        """Called once the socket answers and the slices are there."""

    def stop(self) -> None:
        raise NotImplementedError


def json_kubeconfig(kubeconfig: Path) -> Path:
    """The same kubeconfig written as JSON beside it (relative paths stay valid), for dra-gpu's plugin.

    In a pod the plugin reads no kubeconfig (its service account); here it must, and the plugin
    parses a JSON kubeconfig without loading the YAML parser (``dra_driver.kube.client``), so its
    resident memory is that of an installed plugin rather than of one reading a YAML file. The
    peer reads the YAML original.
    """
    out = kubeconfig.with_name(kubeconfig.name + ".json")
    out.write_text(json.dumps(yaml.safe_load(kubeconfig.read_text())))
    return out


class OurDriver(Driver):
    """dra-gpu's plugin through PluginProcess; its blocking start() runs in a thread while we poll."""

    label = "dra-gpu"
    driver = OUR_DRIVER

    def __init__(self, kubeconfig: Path, python: Path | None = None) -> None:
        self.kubeconfig = json_kubeconfig(kubeconfig)
        self.python = python
        self.plugin: PluginProcess | None = None
        self._thread: threading.Thread | None = None
        self._error: Exception | None = None

    def launch(self, run_dir: Path) -> None:
        self.plugin = PluginProcess(
            run_dir, kubeconfig=self.kubeconfig, node=NODE, publish=True, extra_args=OUR_ARGS, python=self.python
        )
        self._error = None
        self._thread = threading.Thread(target=self._start, args=(self.plugin,), name="start-dra-gpu", daemon=True)
        self._thread.start()

    def _start(self, plugin: PluginProcess) -> None:
        try:
            plugin.start(timeout=START_TIMEOUT_S)
        except (RuntimeError, OSError) as err:  # reported by check_alive/settle in the main thread
            self._error = err

    @property
    def pid(self) -> int | None:
        return None if self.plugin is None or self.plugin.proc is None else self.plugin.proc.pid

    @property
    def dra_socket(self) -> Path:
        assert self.plugin is not None
        return self.plugin.dra_socket

    def check_alive(self) -> None:
        if self._error is not None:
            raise RuntimeError(f"dra-gpu plugin failed to start: {self._error}")

    def settle(self) -> None:
        if self._thread is not None:
            self._thread.join(START_TIMEOUT_S)
        self.check_alive()

    def stop(self) -> None:
        if self.plugin is None:
            return
        if self._thread is not None and self._thread.is_alive() and self.plugin.proc is None:
            time.sleep(0.5)  # the thread is about to spawn it
        self.plugin.stop()
        if self._thread is not None:
            self._thread.join(5.0)


class GoPeer(Driver):
    label = "Go peer"
    driver = PEER_DRIVER

    def __init__(self, binary: Path, kubeconfig: Path) -> None:
        self.binary = binary
        self.kubeconfig = kubeconfig
        self.proc: PeerProcess | None = None

    def launch(self, run_dir: Path) -> None:
        self.proc = PeerProcess(self.binary, run_dir, kubeconfig=self.kubeconfig, node=NODE, num_devices=GPUS)
        self.proc.start()

    @property
    def pid(self) -> int | None:
        return None if self.proc is None or self.proc.proc is None else self.proc.proc.pid

    @property
    def dra_socket(self) -> Path:
        assert self.proc is not None
        return self.proc.dra_socket

    def check_alive(self) -> None:
        if self.proc is not None and self.proc.proc is not None and self.proc.proc.poll() is not None:
            raise RuntimeError(f"peer exited with {self.proc.proc.returncode}:\n{self.proc.tail()}")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stop()
