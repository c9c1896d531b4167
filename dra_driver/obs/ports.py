"""Where the daemons' /metrics servers listen: the address rules, and whether the port can be listened on.

The one place for the metrics address rules: the flags' names (``METRICS_FLAGS``), the default
address (``DEFAULT_METRICS_ADDRESS``: loopback, never every address: the chart passes the pod's
own IP, see ``deploy/helm/dra-gpu``), what counts as every address (``is_every_address``), ``[::]``
written with brackets, and the IPv4 fallback when ``::`` cannot be bound. Used by
``dra_driver.appkit.flags`` (the default), ``dra_driver.obs.metrics`` (the server) and the
plugin's pre-start check below.

``dra_driver.obs.metrics`` loads prometheus_client, which the plugin only imports once its sockets
serve (start-up speed); a port clash found only then would have the kubelet register a plugin that
exits a moment later. So ``kubelet_plugin.main`` asks here first: a plain bind of the same address
and port (with ``SO_REUSEADDR``, as the metrics server binds), closed at once. Standard library only.
"""

from __future__ import annotations

import errno
import socket

METRICS_FLAGS = "--metrics-port / METRICS_PORT (and --metrics-address / METRICS_ADDRESS)"
DEFAULT_METRICS_ADDRESS = "127.0.0.1"
"""Loopback only, when neither ``--metrics-address`` nor ``METRICS_ADDRESS`` says otherwise.

A daemon run by hand is not reachable from other hosts or pods unless asked; the chart sets
``METRICS_ADDRESS`` to the pod's IP (``status.podIP``), where Prometheus and the API server's pod
proxy (``dra-gpu top``) reach it, and not to every address.
"""
EVERY_ADDRESS = frozenset({"", "::", "[::]", "0.0.0.0"})  # noqa: S104 - the names of every address, to recognise them
"""The addresses that mean every address of the host (or pod): ``::`` covers IPv4 too where the host has IPv6."""
IPV6_MISSING = (errno.EAFNOSUPPORT, errno.EADDRNOTAVAIL, socket.EAI_FAMILY)
"""What binding ``::`` fails with on a host without IPv6: every IPv4 address (``0.0.0.0``) is used instead."""


def is_every_address(address: str) -> bool:
    """Whether ``address`` listens on every address (``::``, ``[::]``, ``0.0.0.0`` or empty)."""
    return address.strip() in EVERY_ADDRESS


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
