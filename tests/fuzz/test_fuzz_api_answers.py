"""Fuzzing what the API server answers: hostile HTTP and hostile JSON reach the plugin's readers as their own errors.

The plugin trusts the API server no more than its other inputs: a proxy, a broken or hostile
server, or a version skew can answer anything. A local HTTP server answers each request with
bytes made for it — a claim, a slice list page or a watch stream, mutated by the shared harness,
inside HTTP framing that is itself mutated (bad status lines, a missing, short, huge or garbage
``Content-Length``, broken chunking, too many or too long headers, odd status codes). Each
reader must raise nothing but its own error type (``ClaimLookupError`` for a claim lookup,
``KubeApiError`` for the slice publisher's list and watch), within the harness's CPU budget per
input: what reaches the servicer or the publisher loop is then a clear error naming the server,
never an ``AttributeError`` from a list where an object was due.
"""

from __future__ import annotations

import json
import random
import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from dra_driver.core.device_status import entries_of
from dra_driver.kube.claim_status_api import KubeClaimStatusApi
from dra_driver.kube.claims_api import ClaimLookupError, KubeClaimApi
from dra_driver.kube.connection import ApiConnection
from dra_driver.kube.explain_api import KubeExplainApi
from dra_driver.kube.rest import KubeApiError
from dra_driver.kube.slices_api import KubeSliceApi
from dra_driver.schedsim.shared_json import SharedDecoder
from testkit.claimdata import allocated_claim
from tests.fuzz import harness

STATUS_LINES = (
    b"HTTP/1.1 200 OK",
    b"HTTP/1.1 201 Created",
    b"HTTP/1.1 204 No Content",
    b"HTTP/1.1 301 Moved Permanently",
    b"HTTP/1.1 404 Not Found",
    b"HTTP/1.1 409 Conflict",
    b"HTTP/1.1 410 Gone",
    b"HTTP/1.1 429 Too Many Requests",
    b"HTTP/1.1 500 Internal Server Error",
    b"HTTP/1.1 999 Whatever",
    b"HTTP/1.1 0 Zero",
    b"HTTP/1.1 abc OK",
    b"HTTP/9.9 200 OK",
    b"HTTP/1.0 200 OK",
    b"ICY 200 OK",
    b"",
    b"HTTP/1.1 200 " + b"x" * 70_000,
)


class HostileServer:
    """A local HTTP server that answers every request with ``answer``, then closes the connection."""

    def __init__(self) -> None:
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.port = self._sock.getsockname()[1]
        self.answer = b""
        self._stop = False
        self._thread = threading.Thread(target=self._serve, name="hostile-api-server", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(2.0)
                try:
                    request = b""
                    while b"\r\n\r\n" not in request and len(request) < 1 << 16:
                        piece = conn.recv(65536)
                        if not piece:
                            break
                        request += piece
                    conn.sendall(self.answer)
                    conn.shutdown(socket.SHUT_WR)
                except OSError:
                    continue

    def close(self) -> None:
        self._stop = True
        self._sock.close()


@pytest.fixture(scope="module")
def server() -> Iterator[HostileServer]:
    s = HostileServer()
    yield s
    s.close()


def frame(body: bytes, rng: random.Random) -> bytes:
    """``body`` in an HTTP answer whose framing is sometimes broken."""
    status = rng.choice(STATUS_LINES) if rng.random() < 0.4 else b"HTTP/1.1 200 OK"
    headers = [b"Content-Type: application/json"]
    r = rng.random()
    if r < 0.45:
        headers.append(b"Content-Length: %d" % len(body))
    elif r < 0.55:
        size = rng.choice([b"abc", b"-1", b"99999999999999999999999", b"%d" % (len(body) + 100), b"", b"1, 2"])
        headers.append(b"Content-Length: " + size)
    elif r < 0.70:
        headers.append(b"Transfer-Encoding: chunked")
        if rng.random() < 0.7:
            body = b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body) if body else b"0\r\n\r\n"
        else:
            body = rng.choice([b"zz\r\n", b"ffffffffffffffffff\r\nabc", b"5\r\nab", b"-1\r\n\r\n"]) + body
    elif r < 0.75:
        headers += [b"X-Many-%d: y" % i for i in range(150)]
    elif r < 0.80:
        headers.append(b"X-Long: " + b"y" * 70_000)
    # else: no length at all, the body ends when the server closes
    if rng.random() < 0.05:
        headers.append(b"Connection: keep-alive")
    return status + b"\r\n" + b"\r\n".join(headers) + b"\r\n\r\n" + body


def answers(seed: Callable[[], Any], n: int, name: str, *, lines: bool = False) -> Iterator[bytes]:
    """``n`` hostile answers around mutated copies of ``seed()`` (newline-separated events when ``lines``)."""
    rng = random.Random(harness.seed_for(name))
    for _ in range(n):
        if lines:
            events = [harness.to_bytes(harness.mutate(seed(), rng), rng) for _ in range(rng.randint(1, 4))]
            body = b"\n".join(events) + rng.choice([b"\n", b"", b"\n\n"])
        else:
            body = harness.to_bytes(harness.mutate(seed(), rng), rng)
        yield frame(body, rng)


def slice_doc(i: int = 0) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"node-a-gpu.dra-gpu.dev-{i}", "resourceVersion": "17", "uid": "u-1"},
        "spec": {
            "driver": "gpu.dra-gpu.dev",
            "nodeName": "node-a",
            "pool": {"name": "node-a", "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": "gpu-0", "attributes": {"index": {"int": 0}}, "capacity": {"memory": {"value": "80Gi"}}}],
        },
    }


def list_page() -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSliceList",
        "metadata": {"resourceVersion": "42", "continue": ""},
        "items": [slice_doc(0), slice_doc(1)],
    }


def watch_event() -> dict[str, Any]:
    return random.choice(
        [
            {"type": "ADDED", "object": slice_doc()},
            {"type": "BOOKMARK", "object": {"kind": "ResourceSlice", "metadata": {"resourceVersion": "43"}}},
            {"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"}},
        ]
    )


def connection(server: HostileServer) -> ApiConnection:
    return ApiConnection(f"http://127.0.0.1:{server.port}", honour_proxy_env=False)


def fuzz_answers(
    server: HostileServer,
    name: str,
    seed: Callable[[], Any],
    read: Callable[[], object],
    allowed: tuple[type[BaseException], ...],
    *,
    base: int = 600,
    lines: bool = False,
) -> None:
    """``read`` once per hostile answer around ``seed()``: only ``allowed`` errors, some answers accepted."""

    def target(answer: bytes) -> None:
        server.answer = answer
        read()

    rep = harness.run(name, answers(seed, harness.budget(base), name, lines=lines), target, allowed)
    harness.assert_clean(rep)
    assert rep.rejected > 0 and rep.accepted > 0, name


def test_a_claim_lookup_turns_any_answer_into_a_claim_lookup_error(server: HostileServer) -> None:
    claims = KubeClaimApi(connection(server), timeout_s=2.0)
    seed = allocated_claim()
    fuzz_answers(server, "api answer: claim GET", lambda: seed, lambda: claims.get_claim("ns", "claim-a"), (ClaimLookupError,))


def test_the_slice_list_turns_any_answer_into_a_kube_api_error(server: HostileServer) -> None:
    slices = KubeSliceApi(connection(server), request_timeout_s=2.0)

    def list_slices() -> None:
        items, rv = slices.list("gpu.dra-gpu.dev", "node-a")
        assert isinstance(rv, str) and all(isinstance(i, dict) for i in items)

    fuzz_answers(server, "api answer: slice list", list_page, list_slices, (KubeApiError,))


def test_explains_cluster_wide_lists_turn_any_answer_into_a_kube_api_error(server: HostileServer) -> None:
    """``dra-gpu explain`` reads whole collections, fetching the next page ahead: bounded whatever the pages say."""
    api = KubeExplainApi(connection(server), request_timeout_s=2.0)

    def list_all() -> None:
        assert all(isinstance(i, dict) for i in api.resource_slices(SharedDecoder().decode))

    fuzz_answers(server, "api answer: explain list", list_page, list_all, (KubeApiError,))


def test_a_slice_watch_turns_any_stream_into_events_or_a_kube_api_error(server: HostileServer) -> None:
    slices = KubeSliceApi(connection(server), request_timeout_s=2.0)

    def watch() -> None:
        for kind, obj in slices.watch("gpu.dra-gpu.dev", "node-a", "42", timeout_s=2.0):
            assert isinstance(kind, str) and isinstance(obj, dict)

    fuzz_answers(server, "api answer: slice watch", watch_event, watch, (KubeApiError,), lines=True)


def node_doc() -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-a", "uid": "0a1b2c3d-0000-4000-8000-000000000009"}}


def version_doc() -> dict[str, Any]:
    return {"major": "1", "minor": "37+", "gitVersion": "v1.37.2"}


def test_node_version_event_and_status_answers_become_kube_api_errors(server: HostileServer) -> None:
    """The other answers the plugin reads: the Node (owner of its slices, subject of its Events),
    ``/version``, and the claim a device status write returns (read back for its entries)."""
    conn = connection(server)
    slices = KubeSliceApi(conn, request_timeout_s=2.0)
    status = KubeClaimStatusApi(conn, field_manager="gpu.dra-gpu.dev", timeout_s=2.0)

    def event() -> None:
        KubeClaimApi(conn, timeout_s=2.0).node_event(
            node_name="node-a", reason="Test", message="m", warning=False, component="dra-gpu"
        )

    def apply() -> None:
        stored = status.apply_status("ns", "claim-a", {"status": {"devices": []}})
        assert isinstance(entries_of(stored, "gpu.dra-gpu.dev"), list)

    seed_claim = allocated_claim()
    fuzz_answers(server, "api answer: node", node_doc, lambda: slices.node_uid("node-a"), (KubeApiError,), base=300)
    fuzz_answers(server, "api answer: version", version_doc, slices.server_minor_version, (KubeApiError,), base=300)
    fuzz_answers(server, "api answer: node event", node_doc, event, (KubeApiError,), base=300)
    fuzz_answers(server, "api answer: status apply", lambda: seed_claim, apply, (KubeApiError,), base=300)


def test_the_framing_mutations_reach_the_reader_as_sent(server: HostileServer) -> None:
    """The harness itself: a well-framed answer is read as sent (so rejections are the reader's, not the server's)."""
    claims = KubeClaimApi(connection(server), timeout_s=2.0)
    body = json.dumps(allocated_claim(name="exact")).encode()
    server.answer = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    assert claims.get_claim("ns", "exact")["metadata"]["name"] == "exact"
