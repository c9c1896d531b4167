"""What a handler of the bounded HTTP server sees: its limits, a request's head and body, an answer.

The vocabulary of ``dra_driver.obs.http_server`` (the server) and ``dra_driver.obs.http_session``
(one connection's requests), imported by what serves through it: ``dra_driver.obs.metrics`` and
``webhook.server``. See ``http_server``'s docstring for what each limit bounds.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class Limits:
    """The bounds of one listener (see ``dra_driver.obs.http_server``)."""

    max_connections: int = 64
    request_timeout_s: float = 10.0
    handshake_timeout_s: float = 5.0
    idle_timeout_s: float = 30.0
    write_timeout_s: float = 10.0
    max_header_bytes: int = 16 * 1024
    max_body_bytes: int = 0
    large_body_bytes: int = 64 * 1024
    large_body_slots: int = 1
    workers: int = 2
    work_budget: int = 0
    """With a ``cost`` hook: the most cost of requests being worked on at once."""


class Headers(Mapping[str, str]):
    """A request's headers: names case-insensitive, repeated fields joined with ``, ``."""

    __slots__ = ("_fields",)

    def __init__(self, fields: Mapping[str, str]) -> None:
        self._fields = {k.lower(): v for k, v in fields.items()}

    @classmethod
    def from_h11(cls, raw: list[tuple[bytes, bytes]]) -> Headers:
        """From h11's (lower-case name, value) pairs."""
        fields: dict[str, str] = {}
        for name, value in raw:
            key, text = name.decode("latin-1"), value.decode("latin-1")
            fields[key] = f"{fields[key]}, {text}" if key in fields else text
        return cls(fields)

    def __getitem__(self, name: str) -> str:
        return self._fields[name.lower()]

    def __iter__(self) -> Iterator[str]:
        return iter(self._fields)

    def __len__(self) -> int:
        return len(self._fields)


@dataclass(frozen=True, slots=True)
class RequestHead:
    """What is known of a request before its body is read."""

    method: str
    target: str
    headers: Headers
    client: str

    @property
    def path(self) -> str:
        """The target without its query."""
        return self.target.split("?", 1)[0]

    @property
    def query(self) -> str:
        """The query string (after ``?``), or ""."""
        return self.target.partition("?")[2]


@dataclass(frozen=True, slots=True)
class Request:
    """A whole request: its head and its body."""

    head: RequestHead
    body: bytes = b""


@dataclass(frozen=True, slots=True)
class Response:
    """An answer; ``close`` ends the connection after it."""

    status: int
    body: bytes = b""
    content_type: str | None = "text/plain; charset=utf-8"
    headers: tuple[tuple[str, str], ...] = ()
    close: bool = False


def text(status: int, message: str, *, close: bool = False, headers: tuple[tuple[str, str], ...] = ()) -> Response:
    """A plain-text answer of one line."""
    return Response(status, (message + "\n").encode(), headers=headers, close=close)


class Handler(Protocol):
    """What a server serves."""

    def check(self, head: RequestHead) -> Response | None:
        """A refusal before the body is read (run on the event loop: quick, no I/O), or None to read it and ``handle``."""
        ...

    def handle(self, request: Request) -> Response:
        """The answer (run in the worker pool; an exception is a 500, logged)."""
        ...


Authorize = Callable[[Headers], bool]
TlsSource = ssl.SSLContext | Callable[[], ssl.SSLContext]
"""A context, or what returns the context for each new connection (a rotated certificate)."""
