"""The flags both daemons take (node, driver, fake GPUs, kubeconfig, log level), each an env var too.

Called by ``kubelet_plugin.settings`` and ``controller.main`` so the two never drift apart; the
metrics flags (``add_metrics_flags``: port, address, and who may scrape) by those two and ``webhook.main``.
"""

from __future__ import annotations

import argparse
import logging
import os
from pathlib import Path

from dra_driver.core.driver import DEFAULT_DRIVER_NAME, validate_driver_name
from dra_driver.core.mig import MigStrategy
from dra_driver.obs.ports import DEFAULT_METRICS_ADDRESS
from dra_driver.obs.scrape_auth import ScrapeAuthConfig
from dra_driver.sources.fake import PROFILES


def env(name: str, default: str | None = None) -> str | None:
    """The env var's value, or ``default`` when it is unset or empty."""
    value = os.environ.get(name)
    return value if value else default


def add_common_flags(p: argparse.ArgumentParser) -> None:
    """The node, driver, GPU source, MIG, sharing, kubeconfig and log flags both daemons take."""
    p.add_argument("--node-name", default=env("NODE_NAME"), help="this node's name [NODE_NAME] (required)")
    p.add_argument("--driver-name", default=env("DRIVER_NAME", DEFAULT_DRIVER_NAME), help="DRA driver name [DRIVER_NAME]")
    p.add_argument(
        "--fake-gpus",
        default=env("FAKE_GPUS"),
        help=f"fake GPU profile instead of NVML: {', '.join(sorted(PROFILES))} [FAKE_GPUS]",
    )
    p.add_argument(
        "--mig",
        default=env("MIG_STRATEGY", MigStrategy.NONE.value),
        choices=[m.value for m in MigStrategy],
        help="MIG: none (full GPUs), static (publish existing instances), dynamic (carve at prepare) [MIG_STRATEGY]",
    )
    p.add_argument(
        "--sharing",
        default=env("SHARING", "none"),
        choices=["none", "consumable"],
        help="consumable: full GPUs are shared by capacity (memory, computeShare) across claims [SHARING]",
    )
    p.add_argument(
        "--fake-gpu-state-dir",
        default=env("FAKE_GPU_STATE_DIR"),
        help="fake GPUs: where the MIG simulator keeps the GPUs' state (default <plugin dir>/fake-gpus) [FAKE_GPU_STATE_DIR]",
    )
    p.add_argument(
        "--fake-mig-latency",
        default=env("FAKE_MIG_LATENCY", "realistic"),
        choices=["zero", "realistic"],
        help="fake GPUs: MIG operation latency of the simulator [FAKE_MIG_LATENCY]",
    )
    p.add_argument("--kubeconfig", default=env("KUBECONFIG"), help="kubeconfig; in-cluster config when absent [KUBECONFIG]")
    p.add_argument("--log-level", default=env("LOG_LEVEL", "info"), help="debug, info, warning, error [LOG_LEVEL]")


def check_common_flags(p: argparse.ArgumentParser, a: argparse.Namespace) -> str:
    """Validate the common flags (``p.error`` exits 2 naming the flag); return the driver name."""
    if not a.node_name:
        p.error("--node-name (or NODE_NAME) is required")
    try:
        driver = validate_driver_name(a.driver_name)
    except ValueError as err:
        p.error(f"--driver-name: {err}")
    if a.fake_gpus and a.fake_gpus not in PROFILES:
        p.error(f"--fake-gpus: unknown profile {a.fake_gpus!r}; known: {', '.join(sorted(PROFILES))}")
    if a.sharing == "consumable" and a.mig == MigStrategy.DYNAMIC.value:
        p.error("--sharing consumable cannot be combined with --mig dynamic")
    if a.log_level.upper() not in logging.getLevelNamesMapping():
        p.error(f"--log-level: unknown level {a.log_level!r}")
    return driver


METRICS_PORTS = {"plugin": 9420, "controller": 9421, "webhook": 9422}
"""Each daemon's default metrics port: distinct, so daemons that share a host network never clash."""


def add_metrics_flags(p: argparse.ArgumentParser, daemon: str) -> None:
    """The /metrics server's flags, each with its env var.

    ``--metrics-port`` [METRICS_PORT] (default ``METRICS_PORTS[daemon]``), ``--metrics-address``
    [METRICS_ADDRESS] (default loopback, ``dra_driver.obs.ports``), and who may scrape
    (``dra_driver.obs.scrape_auth``): ``--metrics-token-file``, ``--metrics-tls-cert-file``,
    ``--metrics-tls-key-file``, ``--metrics-client-ca-file``.
    """
    p.add_argument(
        "--metrics-port",
        type=int,
        default=env("METRICS_PORT", str(METRICS_PORTS[daemon])),  # a string default goes through type=int too
        help=f"port of the Prometheus /metrics server, 0 = any free port, -1 = off "
        f"(default {METRICS_PORTS[daemon]}) [METRICS_PORT]",
    )
    p.add_argument(
        "--metrics-address",
        default=env("METRICS_ADDRESS", DEFAULT_METRICS_ADDRESS),
        help=f"address of the /metrics server (default {DEFAULT_METRICS_ADDRESS}, this host only; the chart passes the "
        "pod's IP); '::' is every address [METRICS_ADDRESS]",
    )
    p.add_argument(
        "--metrics-token-file",
        default=env("METRICS_TOKEN_FILE"),
        help="scrapes must send 'Authorization: Bearer <the token in this file>' (else 401); re-read when it changes "
        "[METRICS_TOKEN_FILE]",
    )
    p.add_argument(
        "--metrics-tls-cert-file",
        default=env("METRICS_TLS_CERT_FILE"),
        help="serve /metrics over HTTPS with this PEM certificate (chain); needs --metrics-tls-key-file [METRICS_TLS_CERT_FILE]",
    )
    p.add_argument(
        "--metrics-tls-key-file", default=env("METRICS_TLS_KEY_FILE"), help="the certificate's PEM key [METRICS_TLS_KEY_FILE]"
    )
    p.add_argument(
        "--metrics-client-ca-file",
        default=env("METRICS_CLIENT_CA_FILE"),
        help="with TLS: scrapers must present a client certificate this PEM CA bundle signed [METRICS_CLIENT_CA_FILE]",
    )


def check_metrics_flags(p: argparse.ArgumentParser, a: argparse.Namespace) -> ScrapeAuthConfig:
    """``p.error`` (exit 2) for a metrics port outside -1..65535 or auth flags that do not go together; the auth config."""
    if not -1 <= a.metrics_port <= 65535:
        p.error(f"--metrics-port: {a.metrics_port} is not a port number (0-65535, or -1 for off)")

    def path(value: str | None) -> Path | None:
        return Path(value) if value else None

    auth = ScrapeAuthConfig(
        token_file=path(a.metrics_token_file),
        tls_cert_file=path(a.metrics_tls_cert_file),
        tls_key_file=path(a.metrics_tls_key_file),
        client_ca_file=path(a.metrics_client_ca_file),
    )
    if problem := auth.problem():
        p.error(problem)
    return auth
