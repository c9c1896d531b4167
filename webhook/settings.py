"""The webhook's settings: one frozen dataclass, and the table of flags (each also an env var) that fills it.

Parsed by ``webhook.main``; ``--driver-name``, ``--log-level`` and the /metrics rows are the ones
every daemon shares (``dra_driver.appkit.flags``). The chart sets the env vars (``tests/chart``
checks them against ``FLAGS``); ``docs/reference/flags.md`` lists them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dra_driver.appkit.flag_table import FLOAT_TEXT, INT_TEXT, Fail, Flag, FlagTable, Values, optional_path, rows
from dra_driver.appkit.flags import (
    DRIVER_NAME,
    LOG_LEVEL,
    METRICS_DERIVED,
    check_driver_name,
    check_log_level,
    check_metrics,
    metrics_flags,
)
from dra_driver.obs.ports import DEFAULT_METRICS_ADDRESS
from dra_driver.obs.scrape_auth import NO_SCRAPE_AUTH, ScrapeAuthConfig
from webhook.admission import VALIDATE_PATH
from webhook.server import REVIEW_LIMITS

DEFAULT_PORT = 8443


@dataclass(frozen=True, slots=True)
class WebhookSettings:
    """Everything the webhook needs to start."""

    bind_address: str
    port: int
    cert_file: Path
    key_file: Path
    driver_name: str
    log_level: str
    metrics_port: int = -1
    """Prometheus /metrics port (plain HTTP), 0 = any, -1 = off (the flag's default: 9422)."""
    metrics_address: str = DEFAULT_METRICS_ADDRESS
    metrics_auth: ScrapeAuthConfig = NO_SCRAPE_AUTH
    """Who may scrape /metrics (``dra_driver.obs.scrape_auth``)."""
    max_connections: int = REVIEW_LIMITS.max_connections
    """HTTPS connections held at most (a new one beyond takes an idle or slow one's place)."""
    request_timeout_s: float = REVIEW_LIMITS.request_timeout_s
    """Seconds a client has to send a whole request, headers and body."""


_EVERY_ADDRESS = "0.0.0.0"  # noqa: S104 - a server in a pod listens on the pod's addresses

_CERT = Flag("tls-cert-file", "PEM certificate (chain) to serve", field="cert_file", value=optional_path, required=True)
_KEY = Flag("tls-private-key-file", "PEM private key", field="key_file", value=optional_path, required=True)

WEBHOOK_FLAGS = (
    Flag("bind-address", "address to listen on; '::' for IPv6", _EVERY_ADDRESS),
    Flag("port", f"HTTPS port (default {DEFAULT_PORT})", str(DEFAULT_PORT), kind=INT_TEXT),
    _CERT,
    _KEY,
    dataclasses.replace(DRIVER_NAME, help="DRA driver name whose configs to validate"),
    LOG_LEVEL,
    Flag(
        "max-connections",
        f"HTTPS connections held at most; beyond, a new one takes an idle or slow one's place "
        f"(default {REVIEW_LIMITS.max_connections})",
        str(REVIEW_LIMITS.max_connections),
        kind=INT_TEXT,
    ),
    Flag(
        "request-timeout",
        f"seconds a client has to send a whole request, headers and body (default {REVIEW_LIMITS.request_timeout_s:g})",
        f"{REVIEW_LIMITS.request_timeout_s:g}",
        kind=FLOAT_TEXT,
        field="request_timeout_s",
    ),
)
"""The webhook's own flags (and the shared driver and log ones), before the /metrics ones."""


def _number(fail: Fail, flag: str, value: str, kind: type[float], *, low: float, high: float) -> float:
    """``value`` as ``kind`` within ``low..high``; ``fail`` (exit 2) naming ``flag`` otherwise."""
    try:
        number = kind(value)
    except ValueError:
        fail(f"{flag}: not a number: {value!r}")
    if not low <= number <= high:
        fail(f"{flag}: {value} is outside {low:g}..{high:g}")
    return number


def _check(fail: Fail, values: Values, parsed: Mapping[str, Any]) -> None:
    check_metrics(fail, values, parsed)
    if not values["cert_file"] or not values["key_file"]:
        fail(f"{_CERT.option} and {_KEY.option} (or {_CERT.env} and {_KEY.env}) are required")
    try:
        port = int(values["port"])
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        fail(f"--port: not a port number: {values['port']!r}")
    check_driver_name(fail, values)
    check_log_level(fail, values)
    max_connections = _number(fail, "--max-connections", values["max_connections"], int, low=1, high=100_000)
    request_timeout = _number(fail, "--request-timeout", values["request_timeout_s"], float, low=0.1, high=300.0)
    values.update(port=port, max_connections=int(max_connections), request_timeout_s=float(request_timeout))


FLAGS: FlagTable[WebhookSettings] = FlagTable(
    daemon="webhook",
    prog="dra-gpu-webhook",
    description=f"validating admission webhook for dra-gpu opaque configs ({VALIDATE_PATH})",
    settings=WebhookSettings,
    rows=rows(WEBHOOK_FLAGS, metrics_flags("webhook")),
    check=_check,
    derived=METRICS_DERIVED,
)
"""The webhook's flags, in ``--help``'s order."""


def parse(argv: list[str] | None = None) -> WebhookSettings:
    """Parse flags (env vars as defaults); exit 2 with a message naming a bad value."""
    return FLAGS.parse(argv)
