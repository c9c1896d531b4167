"""Whether the metrics port can be listened on, asked before the plugin's DRA sockets exist.

``dra_driver.obs.metrics`` loads prometheus_client, which the plugin only imports once its sockets
serve (start-up speed); a port clash found only then would have the kubelet register a plugin that
exits a moment later. So ``kubelet_plugin.main`` asks here first: a plain bind of the same address
and port (with ``SO_REUSEADDR``, as the metrics server binds), closed at once. Standard library only.
"""

from __future__ import annotations

import errno
import socket

METRICS_FLAGS = "--metrics-port / METRICS_PORT (and --metrics-address / METRICS_ADDRESS)"
IPV6_MISSING = (errno.EAFNOSUPPORT, errno.EADDRNOTAVAIL, socket.EAI_FAMILY)
"""What binding ``::`` fails with on a host without IPv6: every IPv4 address (``0.0.0.0``) is used instead."""


def bind_host(address: str) -> str:
    """The host to bind for ``--metrics-address``: ``[::]`` and ``::`` are every address."""
    return address[1:-1] if address.startswith("[") and address.endswith("]") else address


def _bind(host: str, port: int) -> None:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((host, port))


def metrics_port_problem(address: str, port: int) -> str | None:
    """None when ``address:port`` can be listened on now (or ``port`` is 0: any, or -1: off); else why not."""
    if port <= 0:
        return None
    if port > 65535:
        return f"metrics port {port} is not a port number (0-65535; -1 turns metrics off); set {METRICS_FLAGS}"
    host = bind_host(address)
    try:
        _bind(host, port)
    except OSError as err:
        if host == "::" and err.errno in IPV6_MISSING:
            return metrics_port_problem("0.0.0.0", port)  # noqa: S104 - every address, as asked
        return (
            f"cannot serve metrics on {address} port {port}: {err.strerror or err}; "
            f"choose another with {METRICS_FLAGS}, or -1 to turn metrics off"
        )
    return None
