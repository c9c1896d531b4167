"""Reading a plugin's /metrics back: the per-claim usage and GPU health rows ``dra-gpu top`` shows.

Parses Prometheus' text format with prometheus_client's parser (bounded: at most ``MAX_BYTES`` of
text, ``MAX_ROWS`` rows) into plain dataclasses. Called by ``dra_driver.cli.top``; the names are
those of ``dra_driver.obs.usage_metrics`` and ``dra_driver.obs.metrics``. A row has the claim's
namespace, name and pods only where the plugin exports tenant labels; its UID always (top names
the others through the API server). ``fetch`` reads one URL as Prometheus would: a bearer token
(``ScrapeCredentials.token_file``), TLS verified against a CA, a client certificate.
"""

from __future__ import annotations

import math
import ssl
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from dra_driver.obs.usage_metrics import IDLE, MEMORY, UTILIZATION

MAX_BYTES = 8 << 20
MAX_ROWS = 10_000
HEALTHY = "dra_gpu_gpu_healthy"
CONDITIONS = "dra_gpu_gpu_health_conditions"


class ScrapeError(ValueError):
    """The text is not Prometheus' text format, or too large; the message says which."""


@dataclass(slots=True)
class ClaimDevice:
    """One prepared device of one claim, as the plugin's last usage sample saw it."""

    node: str
    namespace: str
    claim: str
    device: str
    pods: str = ""
    utilization: float | None = None
    memory_bytes: float | None = None
    idle_s: float = 0.0
    claim_uid: str = ""


@dataclass(slots=True)
class NodeView:
    """What one plugin's scrape says: its claims' devices and its unhealthy GPUs (with causes)."""

    devices: list[ClaimDevice] = field(default_factory=list)
    unhealthy: dict[str, list[str]] = field(default_factory=dict)


_Key = tuple[str, str, str, str, str]


def _usage(rows: dict[_Key, ClaimDevice], name: str, labels: dict[str, str], value: float) -> None:
    key = (labels.get("node", ""), labels.get("namespace", ""), labels.get("claim", ""), labels.get("device", ""))
    full = (*key, labels.get("claim_uid", ""))
    row = rows.get(full)
    if row is None:
        if len(rows) >= MAX_ROWS:
            raise ScrapeError(f"more than {MAX_ROWS} devices in one scrape")
        row = rows[full] = ClaimDevice(*key, pods=labels.get("pod", ""), claim_uid=full[4])
    if math.isnan(value):
        return
    if name == UTILIZATION:
        row.utilization = value
    elif name == MEMORY:
        row.memory_bytes = value
    else:
        row.idle_s = value


def _samples(text: str) -> list[tuple[str, dict[str, str], float]]:
    try:
        return [(s.name, dict(s.labels), float(s.value)) for f in text_string_to_metric_families(text) for s in f.samples]
    except (ValueError, KeyError, IndexError, TypeError) as err:
        raise ScrapeError(f"not Prometheus' text format: {err}") from None


def parse(text: str) -> NodeView:
    """The rows of one scrape; raises ScrapeError for text that is not a scrape."""
    if len(text) > MAX_BYTES:
        raise ScrapeError(f"the scrape is larger than {MAX_BYTES} bytes")
    rows: dict[_Key, ClaimDevice] = {}
    view = NodeView()
    causes: dict[str, list[str]] = {}
    for name, lb, value in _samples(text):
        if name in (UTILIZATION, MEMORY, IDLE):
            _usage(rows, name, lb, value)
        elif name == HEALTHY and value == 0:
            view.unhealthy.setdefault(lb.get("gpu", "?"), [])
        elif name == CONDITIONS and value == 1:
            causes.setdefault(lb.get("gpu", "?"), []).append(
                f"{lb.get('cause', '?')}={lb.get('value', '')} ({lb.get('severity', '?')})"
            )
    for gpu in view.unhealthy:
        view.unhealthy[gpu] = sorted(causes.get(gpu, []))
    view.devices = sorted(rows.values(), key=lambda r: (r.namespace, r.claim, r.claim_uid, r.device))
    return view


@dataclass(frozen=True, slots=True)
class ScrapeCredentials:
    """How ``fetch`` presents itself, as Prometheus' scrape config would (all unset: plain, anonymous)."""

    token_file: Path | None = None
    """Sent as ``Authorization: Bearer <its content, whitespace stripped>`` (Prometheus' ``credentials_file``)."""
    ca_file: Path | None = None
    """HTTPS: the CA bundle the server's certificate is checked against (default: the system's)."""
    cert_file: Path | None = None
    key_file: Path | None = None
    """HTTPS: a client certificate and its key, for a server that wants one."""
    insecure: bool = False
    """HTTPS: do not check the server's certificate (Prometheus' ``insecure_skip_verify``)."""

    def token(self) -> str | None:
        """The token, or None; ScrapeError when the file cannot be read or is empty."""
        if self.token_file is None:
            return None
        try:
            token = self.token_file.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as err:
            raise ScrapeError(f"token file {self.token_file}: {err}") from None
        if not token or any(c.isspace() for c in token):
            raise ScrapeError(f"token file {self.token_file}: not one token")
        return token

    def ssl_context(self) -> ssl.SSLContext:
        """The client TLS context; ScrapeError when a file cannot be used."""
        try:
            ctx = ssl.create_default_context(cafile=self.ca_file)
            if self.cert_file is not None:
                ctx.load_cert_chain(self.cert_file, self.key_file)
        except (OSError, ssl.SSLError) as err:
            raise ScrapeError(f"TLS files: {err}") from None
        if self.insecure:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        return ctx


def fetch(url: str, timeout_s: float = 10.0, credentials: ScrapeCredentials | None = None) -> str:
    """GET one /metrics URL (``dra-gpu top --url``, e.g. on the node itself); raises ScrapeError on any failure."""
    import urllib.error
    import urllib.request

    if not url.startswith(("http://", "https://")):
        raise ScrapeError(f"{url!r} is not an http(s) URL")
    creds = credentials or ScrapeCredentials()
    headers = {}
    if (token := creds.token()) is not None:
        headers["Authorization"] = f"Bearer {token}"
    context = creds.ssl_context() if url.startswith("https://") else None
    request = urllib.request.Request(url, headers=headers)  # noqa: S310 - http(s) checked above
    try:
        with urllib.request.urlopen(request, timeout=timeout_s, context=context) as resp:  # noqa: S310 - http(s) checked above
            data: bytes = resp.read(MAX_BYTES + 1)
    except urllib.error.HTTPError as err:
        hint = " (the metrics server wants a token: --token-file)" if err.code == 401 else ""
        raise ScrapeError(f"{url}: HTTP {err.code} {err.reason}{hint}") from None
    except (urllib.error.URLError, OSError, ValueError) as err:
        raise ScrapeError(f"{url}: {err}") from None
    if len(data) > MAX_BYTES:
        raise ScrapeError(f"{url}: larger than {MAX_BYTES} bytes")
    return data.decode("utf-8", errors="replace")
