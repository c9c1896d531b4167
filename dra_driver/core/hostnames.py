"""Host names in the form the socket layer takes without Python's IDNA codec. Pure.

A ``str`` host handed to ``socket.getaddrinfo``, or as a TLS server name, goes through the
``idna`` codec, which loads ``unicodedata`` (about 0.4 MiB of a daemon's resident memory), even
for an IP address; the same ASCII name as bytes does not, and resolves and verifies the same.
Called by the metrics listener (``dra_driver.obs.http_server``) and the API connection
(``dra_driver.kube.connection``). A name that is not ASCII keeps the codec.
"""

from __future__ import annotations


def socket_host(host: str) -> str | bytes:
    """``host`` as ASCII bytes when it is ASCII (no IDNA codec needed), else unchanged."""
    return host.encode("ascii") if host.isascii() else host
