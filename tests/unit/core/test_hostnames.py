"""``dra_driver.core.hostnames.socket_host``: ASCII names go to the socket layer as bytes, others unchanged."""

from __future__ import annotations

import socket

from dra_driver.core.hostnames import socket_host


def test_ascii_names_and_addresses_become_bytes_and_others_stay_text() -> None:
    assert [socket_host(h) for h in ("127.0.0.1", "::1", "api.example.com", "")] == [
        b"127.0.0.1",
        b"::1",
        b"api.example.com",
        b"",
    ]
    assert socket_host("bücher.example") == "bücher.example"


def test_the_bytes_resolve_as_the_text_does() -> None:
    for host in ("127.0.0.1", "localhost"):
        assert socket.getaddrinfo(socket_host(host), 80, type=socket.SOCK_STREAM) == socket.getaddrinfo(
            host, 80, type=socket.SOCK_STREAM
        )
