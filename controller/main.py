"""Entry point of ``dra-gpu-controller``: publishes one node's ResourceSlices, standalone.

Useful without a kubelet plugin (demos, control-plane-only tests, fake GPUs): discovers the
node's GPUs (``make_source``), maps them with ``node_devices`` and runs the
``SlicePublisher`` until SIGTERM or SIGINT, then exits 0. Each flag defaults to an env var.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import threading
from dataclasses import dataclass
from types import FrameType

import structlog

from dra_driver.core.driver import DEFAULT_DRIVER_NAME, validate_driver_name
from dra_driver.core.schema import node_devices
from dra_driver.obs.logs import configure_logging
from dra_driver.sources.select import make_source

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class ControllerSettings:
    """Everything the standalone controller needs."""

    node_name: str
    driver_name: str
    fake_gpus: str | None
    kubeconfig: str | None
    log_level: str


def _env(name: str, default: str | None = None) -> str | None:
    value = os.environ.get(name)
    return value if value else default


def parse(argv: list[str] | None = None) -> ControllerSettings:
    """Parse flags (env vars as defaults); exit 2 with a message naming a bad value."""
    p = argparse.ArgumentParser(prog="dra-gpu-controller", description="publish one node's dra-gpu ResourceSlices")
    p.add_argument("--node-name", default=_env("NODE_NAME"), help="the node whose slices to publish [NODE_NAME] (required)")
    p.add_argument("--driver-name", default=_env("DRIVER_NAME", DEFAULT_DRIVER_NAME), help="DRA driver name [DRIVER_NAME]")
    p.add_argument("--fake-gpus", default=_env("FAKE_GPUS"), help="fake GPU profile instead of NVML, e.g. h100x8 [FAKE_GPUS]")
    p.add_argument("--kubeconfig", default=_env("KUBECONFIG"), help="kubeconfig; in-cluster config when absent [KUBECONFIG]")
    p.add_argument("--log-level", default=_env("LOG_LEVEL", "info"), help="debug, info, warning, error [LOG_LEVEL]")
    a = p.parse_args(argv)
    if not a.node_name:
        p.error("--node-name (or NODE_NAME) is required")
    try:
        driver = validate_driver_name(a.driver_name)
    except ValueError as err:
        p.error(f"--driver-name: {err}")
    if a.log_level.upper() not in logging.getLevelNamesMapping():
        p.error(f"--log-level: unknown level {a.log_level!r}")
    return ControllerSettings(
        node_name=a.node_name,
        driver_name=driver,
        fake_gpus=a.fake_gpus or None,
        kubeconfig=a.kubeconfig or None,
        log_level=a.log_level,
    )


def run(settings: ControllerSettings, stop: threading.Event) -> int:
    """Publish the node's devices until ``stop`` is set; return the exit code."""
    # Imported here so that --help and flag errors never load the kubernetes client.
    from controller.publisher import SlicePublisher
    from dra_driver.kube.client import load_api_client
    from dra_driver.kube.slices_api import KubeSliceApi

    source = make_source(fake_gpus=settings.fake_gpus, node_name=settings.node_name)
    gpus = source.gpus()
    devices = node_devices(gpus)
    log.info("gpus_found", source=source.describe(), count=len(gpus))

    publisher = SlicePublisher(KubeSliceApi(load_api_client(settings.kubeconfig)), settings.driver_name, settings.node_name)
    publisher.set_devices(devices)
    publisher.run(stop)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Console script entry: parse, configure logs, run until SIGTERM/SIGINT."""
    try:
        settings = parse(argv)
    except SystemExit as exc:  # argparse: --help (0) or a bad flag (2)
        return exc.code if isinstance(exc.code, int) else 2
    configure_logging(settings.log_level)
    structlog.contextvars.bind_contextvars(node=settings.node_name, driver=settings.driver_name)
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        del frame
        log.info("signal_received", signal=signal.Signals(signum).name)
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)
    try:
        return run(settings, stop)
    except Exception:
        log.exception("controller_failed")
        return 1
    finally:
        log.info("controller_stopped")


if __name__ == "__main__":
    raise SystemExit(main())
