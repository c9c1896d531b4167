"""The flag rows the daemons share, and their checks: node, driver, GPU source, MIG, sharing, logs, /metrics.

``COMMON_FLAGS`` (``check_common``) and ``NODE_GUARD_FLAGS`` (``check_node_guards``) are in the
tables of ``kubelet_plugin.settings`` and ``controller.settings``, so the two never drift apart;
``metrics_flags`` (port, address, and who may scrape; ``check_metrics``) in those two and
``webhook.settings``. ``DRIVER_NAME`` and ``LOG_LEVEL``
are the webhook's too. Rows and tables: ``dra_driver.appkit.flag_table``.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from typing import Any

from dra_driver.appkit.flag_table import FLOAT, INT, Fail, Flag, Values, optional, optional_path
from dra_driver.core.driver import DEFAULT_DRIVER_NAME, validate_driver_name
from dra_driver.core.mig import MigStrategy
from dra_driver.core.mig_profiles import parse_mig_profiles
from dra_driver.obs.ports import DEFAULT_METRICS_ADDRESS
from dra_driver.obs.scrape_auth import ScrapeAuthConfig
from dra_driver.sources.fake import PROFILES

NODE_NAME = Flag("node-name", "this node's name", required=True)
DRIVER_NAME = Flag("driver-name", "DRA driver name", DEFAULT_DRIVER_NAME)
LOG_LEVEL = Flag("log-level", "debug, info, warning, error", "info")

COMMON_FLAGS = (
    NODE_NAME,
    DRIVER_NAME,
    Flag("fake-gpus", f"fake GPU profile instead of NVML: {', '.join(sorted(PROFILES))}", value=optional),
    Flag(
        "mig",
        "MIG: none (full GPUs), static (publish existing instances), dynamic (carve at prepare)",
        MigStrategy.NONE.value,
        choices=tuple(m.value for m in MigStrategy),
        value=MigStrategy,
        env="MIG_STRATEGY",
    ),
    Flag(
        "mig-profiles",
        "dynamic MIG: the profiles to publish, comma-separated names (1g.10gb) or families (1g, 3g, 7g); empty: every profile",
        "",
        value=lambda v: v or "",
    ),
    Flag(
        "sharing",
        "consumable: full GPUs are shared by capacity (memory, computeShare) across claims",
        "none",
        choices=("none", "consumable"),
        value=lambda v: v == "consumable",
        field="consumable",
    ),
    Flag(
        "fake-gpu-state-dir",
        "fake GPUs: where the MIG simulator keeps the GPUs' state (default <plugin dir>/fake-gpus)",
        value=optional_path,
    ),
    Flag("fake-mig-latency", "fake GPUs: MIG operation latency of the simulator", "realistic", choices=("zero", "realistic")),
    Flag("kubeconfig", "kubeconfig; in-cluster config when absent", value=optional),
    LOG_LEVEL,
)
"""The node, driver, GPU source, MIG, sharing, kubeconfig and log flags of the plugin and the controller."""


def check_driver_name(fail: Fail, values: Values) -> None:
    """The driver name normalized in ``values``, or ``fail`` naming the flag."""
    try:
        values["driver_name"] = validate_driver_name(values["driver_name"])
    except ValueError as err:
        fail(f"--driver-name: {err}")


def check_log_level(fail: Fail, values: Values) -> None:
    """``fail`` for a log level logging does not know."""
    if values["log_level"].upper() not in logging.getLevelNamesMapping():
        fail(f"--log-level: unknown level {values['log_level']!r}")


NODE_GUARD_FLAGS = (
    Flag(
        "device-plugin-check-interval",
        "seconds between reads of this node's Node object for a device plugin's GPUs (nvidia.com/gpu or "
        "nvidia.com/mig-* allocatable above 0), while which no devices are published; 0 = guard off",
        "30",
        kind=FLOAT,
        field="device_plugin_check_interval_s",
    ),
    Flag(
        "local-cordon-check-interval",
        "seconds between reads of this node's Node object for the devices `dra-gpu cordon` withholds locally "
        "(annotation <driver>/cordoned-devices, where no DeviceTaintRule is served), which are not published; 0 = off",
        "10",
        kind=FLOAT,
        field="local_cordon_check_interval_s",
    ),
)
"""What stands between a node's device list and its slices, in the plugin's and the controller's tables: the
device-plugin guard (``dra_driver.appkit.device_plugin_guard``) and local cordons (``dra_driver.appkit.local_cordon``)."""


def check_node_guards(fail: Fail, values: Values) -> None:
    """Each guard's interval is a number of seconds >= 0 (0: off)."""
    for flag in NODE_GUARD_FLAGS:
        check = values[flag.field]
        if not (math.isfinite(check) and check >= 0):
            fail(f"{flag.option}: {check} is not a number of seconds >= 0")


def check_common(fail: Fail, values: Values) -> None:
    """Validate the common flags (``fail`` exits 2 naming the flag); the driver name normalized in ``values``."""
    if not values["node_name"]:
        fail(f"{NODE_NAME.option} (or {NODE_NAME.env}) is required")
    check_driver_name(fail, values)
    if values["fake_gpus"] and values["fake_gpus"] not in PROFILES:
        fail(f"--fake-gpus: unknown profile {values['fake_gpus']!r}; known: {', '.join(sorted(PROFILES))}")
    if values["consumable"] and values["mig"] is MigStrategy.DYNAMIC:
        fail("--sharing consumable cannot be combined with --mig dynamic")
    try:
        values["mig_profiles"] = parse_mig_profiles(values["mig_profiles"])
    except ValueError as err:
        fail(f"--mig-profiles: {err}")
    if values["mig_profiles"] and values["mig"] is not MigStrategy.DYNAMIC:
        fail(f"--mig-profiles applies to --mig dynamic only (this is --mig {values['mig'].value})")
    check_log_level(fail, values)


METRICS_PORTS = {"plugin": 9420, "controller": 9421, "webhook": 9422}
"""Each daemon's default metrics port: distinct, so daemons that share a host network never clash."""


def metrics_flags(daemon: str) -> tuple[Flag, ...]:
    """The /metrics server's rows: port (default ``METRICS_PORTS[daemon]``), address, and who may scrape.

    The four auth files (``dra_driver.obs.scrape_auth``) fill no field of their own: ``check_metrics``
    folds them into ``metrics_auth``.
    """
    port = METRICS_PORTS[daemon]
    return (
        Flag(
            "metrics-port",
            f"port of the Prometheus /metrics server, 0 = any free port, -1 = off (default {port})",
            str(port),
            kind=INT,
        ),
        Flag(
            "metrics-address",
            f"address of the /metrics server (default {DEFAULT_METRICS_ADDRESS}, this host only; the chart passes the "
            "pod's IP); '::' is every address",
            DEFAULT_METRICS_ADDRESS,
        ),
        Flag(
            "metrics-token-file",
            "scrapes must send 'Authorization: Bearer <the token in this file>' (else 401); re-read when it changes",
            field="-",
        ),
        Flag(
            "metrics-tls-cert-file",
            "serve /metrics over HTTPS with this PEM certificate (chain); needs --metrics-tls-key-file",
            field="-",
        ),
        Flag("metrics-tls-key-file", "the certificate's PEM key", field="-"),
        Flag(
            "metrics-client-ca-file",
            "with TLS: scrapers must present a client certificate this PEM CA bundle signed",
            field="-",
        ),
    )


METRICS_DERIVED = ("metrics_auth",)
"""The settings field ``check_metrics`` fills from the auth files' rows."""


def check_metrics(fail: Fail, values: Values, parsed: Mapping[str, Any]) -> None:
    """``fail`` for a metrics port outside -1..65535 or auth flags that do not go together; ``metrics_auth`` set."""
    if not -1 <= values["metrics_port"] <= 65535:
        fail(f"--metrics-port: {values['metrics_port']} is not a port number (0-65535, or -1 for off)")
    auth = ScrapeAuthConfig(
        token_file=optional_path(parsed["metrics_token_file"]),
        tls_cert_file=optional_path(parsed["metrics_tls_cert_file"]),
        tls_key_file=optional_path(parsed["metrics_tls_key_file"]),
        client_ca_file=optional_path(parsed["metrics_client_ca_file"]),
    )
    if problem := auth.problem():
        fail(problem)
    values["metrics_auth"] = auth
