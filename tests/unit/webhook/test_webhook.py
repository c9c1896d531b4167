"""The admission webhook: its decisions on AdmissionReviews, its HTTPS server, its flags."""

from __future__ import annotations

import http.client
import json
import shutil
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from dra_driver.core.config import API_VERSION
from testkit.admission import DRIVER, GOOD, MAGIC, body, claim_obj, request
from testkit.webhookcerts import Certs, make_certs
from webhook import server as server_mod
from webhook.admission import VALIDATE_PATH, BadReview, decide, parse_review, review
from webhook.main import WebhookSettings, main, parse, serve
from webhook.server import TlsFiles, WebhookServer

ZERO_THREADS = {
    "apiVersion": API_VERSION,
    "kind": "GpuConfig",
    "sharing": {"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 0}},
}


# -- decisions ------------------------------------------------------------------------------------


def test_good_claim_is_allowed_and_the_uid_echoed() -> None:
    """A valid config passes; the response is an admission.k8s.io/v1 AdmissionReview for the same uid."""
    verdict = review(body(request(claim_obj(GOOD))), DRIVER)
    resp = verdict.response()
    assert ("admission.k8s.io/v1", "AdmissionReview") == (resp["apiVersion"], resp["kind"])
    assert {"uid": "705ab4f5-6393-11e8-b7cc-42010a800002", "allowed": True} == resp["response"]


def test_bad_configs_are_denied_with_every_message() -> None:
    """Each bad config of ours is listed with its path; the status is 422 Invalid."""
    verdict = review(body(request(claim_obj(GOOD, MAGIC, ZERO_THREADS))), DRIVER)
    assert not verdict.allowed and 2 == verdict.invalid_configs
    status = verdict.response()["response"]["status"]
    assert (422, "Invalid", "Failure") == (status["code"], status["reason"], status["status"])
    assert status["message"] == (
        "2 configs failed to validate: "
        "object at spec.devices.config[1].opaque.parameters is invalid: sharing.strategy: unknown value 'Magic'; "
        "supported: TimeSlicing, MPS; "
        "object at spec.devices.config[2].opaque.parameters is invalid: sharing.mpsConfig.defaultActiveThreadPercentage: "
        "must be between 1 and 100, got 0"
    )


def test_one_bad_config_in_a_template_names_the_template_path() -> None:
    """Templates carry the claim spec one level deeper: spec.spec...; one failure reads in the singular."""
    tmpl = {"kind": "ResourceClaimTemplate", "spec": {"spec": claim_obj(MAGIC)["spec"]}}
    verdict = decide(request(tmpl, kind="ResourceClaimTemplate"), DRIVER)
    assert verdict.message.startswith("1 config failed to validate: object at spec.spec.devices.config[0].opaque.parameters")


def test_configs_of_other_drivers_are_not_judged() -> None:
    """The driver flag decides whose configs are checked."""
    assert decide(request(claim_obj(MAGIC)), "gpu.other.dev").allowed
    assert decide(request(claim_obj("garbage", driver="gpu.other.dev")), DRIVER).allowed


def test_unexpected_kinds_are_allowed_with_a_warning() -> None:
    """A misregistered webhook must not block unrelated writes: allowed, and the response says why."""
    verdict = decide(request({"kind": "Pod"}, kind="Pod", group=""), DRIVER)
    assert verdict.allowed
    (warning,) = verdict.response()["response"]["warnings"]
    assert "not core/Pod" in warning


def test_delete_is_allowed_without_an_object() -> None:
    """Nothing to validate when an object goes away."""
    assert decide(request(None, operation="DELETE"), DRIVER).allowed


def test_update_is_judged_only_when_the_spec_changes() -> None:
    """Metadata updates of an object stored before the webhook pass; a changed spec is validated."""
    bad = claim_obj(MAGIC)
    relabelled = {**bad, "metadata": {**bad["metadata"], "labels": {"x": "y"}}}
    assert decide(request(relabelled, operation="UPDATE", old=bad), DRIVER).allowed
    assert not decide(request(bad, operation="UPDATE", old=claim_obj(GOOD)), DRIVER).allowed


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"{not json", "not JSON"),
        (b"\xff\xfe", "not JSON"),
        (b"[]", "not a JSON object"),
        (
            json.dumps({"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview", "request": {}}).encode(),
            "admissionReviewVersions",
        ),
        (json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}).encode(), "no request"),
        (json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": ""}}).encode(), "no uid"),
        (body(request(None)), "has no object"),
    ],
    ids=["syntax", "not-utf8", "array", "v1beta1", "no-request", "no-uid", "create-without-object"],
)
def test_malformed_reviews_are_bad_requests(raw: bytes, message: str) -> None:
    """Anything the API server would never send is a protocol error, not a verdict."""
    with pytest.raises(BadReview, match=message):
        review(raw, DRIVER)


def test_parse_review_returns_the_request() -> None:
    """The request is handed on as sent."""
    req = request(claim_obj(GOOD))
    assert req == parse_review(body(req))


# -- the HTTPS server -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("tls"))


@pytest.fixture
def server(certs: Certs, tmp_path: Path) -> Iterator[WebhookServer]:
    # Private copies of the files, so a test may rotate them.
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    shutil.copy(certs.cert, cert)
    shutil.copy(certs.key, key)
    srv = WebhookServer(("127.0.0.1", 0), tls=TlsFiles(cert, key), driver=DRIVER)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()
    thread.join()


_OPEN: list[http.client.HTTPSConnection] = []


@pytest.fixture(autouse=True)
def _close_clients() -> Iterator[None]:
    yield
    while _OPEN:
        _OPEN.pop().close()


def client(srv: WebhookServer, ca: Path) -> http.client.HTTPSConnection:
    conn = http.client.HTTPSConnection("127.0.0.1", srv.port, context=ssl.create_default_context(cafile=str(ca)), timeout=10)
    _OPEN.append(conn)
    return conn


def get(conn: http.client.HTTPConnection, path: str) -> int:
    conn.request("GET", path)
    resp = conn.getresponse()
    resp.read()
    return resp.status


def post(
    conn: http.client.HTTPConnection, data: bytes, path: str = VALIDATE_PATH, content_type: str = "application/json"
) -> tuple[int, bytes]:
    conn.request("POST", path, body=data, headers={"Content-Type": content_type})
    resp = conn.getresponse()
    return resp.status, resp.read()


def test_reviews_are_answered_over_tls_on_one_kept_alive_connection(server: WebhookServer, certs: Certs) -> None:
    """The API server's URL carries ?timeout=; answers are JSON; the connection is reused."""
    conn = client(server, certs.ca)
    status, raw = post(conn, body(request(claim_obj(MAGIC))), path=VALIDATE_PATH + "?timeout=10s")
    assert 200 == status
    assert not json.loads(raw)["response"]["allowed"]
    status, raw = post(conn, body(request(claim_obj(GOOD))))
    assert (200, True) == (status, json.loads(raw)["response"]["allowed"])
    conn.request("GET", "/readyz")
    ready = conn.getresponse()
    assert (200, b"ok\n") == (ready.status, ready.read())


def raw_tls_exchange(srv: WebhookServer, ca: Path, payload: bytes) -> bytes:
    ctx = ssl.create_default_context(cafile=str(ca))
    with (
        socket.create_connection(("127.0.0.1", srv.port), timeout=10) as sock,
        ctx.wrap_socket(sock, server_hostname="127.0.0.1") as tls,
    ):
        tls.sendall(payload)
        chunks = []
        while chunk := tls.recv(65536):
            chunks.append(chunk)
        return b"".join(chunks)


def test_bad_requests_get_http_errors_and_the_server_keeps_serving(server: WebhookServer, certs: Certs) -> None:
    """400, 415, 404, 411, 413, a plain-HTTP client and a stalled body: none of them stops the server."""
    with capture_logs() as logs:
        assert 400 == post(client(server, certs.ca), b"{oops")[0]
        assert 400 == post(client(server, certs.ca), body(request(None)))[0]
        assert 415 == post(client(server, certs.ca), body(request(claim_obj(GOOD))), content_type="text/plain")[0]
        reused = client(server, certs.ca)
        assert 404 == post(reused, b"{}", path="/mutate")[0]  # its body unread: the server closes, and says so
        assert 200 == post(reused, body(request(claim_obj(GOOD))))[0]
        assert 404 == get(client(server, certs.ca), "/metrics")
        no_length = f"POST {VALIDATE_PATH} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\r\n".encode()
        assert raw_tls_exchange(server, certs.ca, no_length).startswith(b"HTTP/1.1 411")
        huge = f"POST {VALIDATE_PATH} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {1 << 30}\r\n\r\n"
        assert raw_tls_exchange(server, certs.ca, huge.encode()).startswith(b"HTTP/1.1 413")
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as plain:  # no TLS at all
            plain.sendall(b"GET /readyz HTTP/1.1\r\n\r\n")
            plain.recv(100)
    assert any(e["event"] == "bad_admission_review" for e in logs)
    assert 200 == post(client(server, certs.ca), body(request(claim_obj(GOOD))))[0]


def test_a_crash_in_the_handler_is_a_500_not_a_dead_server(
    server: WebhookServer, certs: Certs, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An unexpected exception is logged with its traceback and answered 500."""

    def boom(raw: bytes, driver: str) -> Any:
        raise RuntimeError("bug")

    monkeypatch.setattr(server_mod, "review", boom)
    with capture_logs() as logs:
        assert 500 == post(client(server, certs.ca), body(request(claim_obj(GOOD))))[0]
    assert any(e["event"] == "admission_review_crashed" for e in logs)
    monkeypatch.undo()
    assert 200 == post(client(server, certs.ca), body(request(claim_obj(GOOD))))[0]


def test_a_rotated_certificate_is_served_to_new_connections(
    server: WebhookServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Secret rotation (new files) takes effect without a restart; a half-written pair keeps the old one."""
    monkeypatch.setattr(server_mod, "RELOAD_CHECK_S", 0.0)
    old_ca = make_certs(tmp_path / "old").ca  # unrelated CA: must not verify
    new = make_certs(tmp_path / "new")
    server.tls.cert_file.write_bytes(new.cert.read_bytes())
    server.tls.key_file.write_bytes(new.key.read_bytes())
    assert 200 == get(client(server, new.ca), "/readyz")
    with pytest.raises(ssl.SSLCertVerificationError):
        client(server, old_ca).request("GET", "/readyz")
    with capture_logs() as logs:
        server.tls.key_file.write_text("half a key")
        assert 200 == get(client(server, new.ca), "/readyz")
    assert any(e["event"] == "tls_certificate_reload_failed" for e in logs)


# -- flags and lifecycle --------------------------------------------------------------------------


def test_flags_default_to_env_vars(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every flag has an env var; the chart sets those."""
    monkeypatch.setenv("TLS_CERT_FILE", "/tls/tls.crt")
    monkeypatch.setenv("TLS_PRIVATE_KEY_FILE", "/tls/tls.key")
    monkeypatch.setenv("PORT", "9443")
    monkeypatch.setenv("DRIVER_NAME", "gpu.example.org")
    s = parse([])
    assert (Path("/tls/tls.crt"), Path("/tls/tls.key"), 9443, "gpu.example.org", "0.0.0.0") == (
        s.cert_file,
        s.key_file,
        s.port,
        s.driver_name,
        s.bind_address,
    )


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["--tls-cert-file", "c", "--tls-private-key-file", "k", "--port", "http"],
        ["--tls-cert-file", "c", "--tls-private-key-file", "k", "--port", "70000"],
        ["--tls-cert-file", "c", "--tls-private-key-file", "k", "--driver-name", "GPU"],
        ["--tls-cert-file", "c", "--tls-private-key-file", "k", "--log-level", "loud"],
    ],
    ids=["no-tls", "port-text", "port-range", "driver", "log-level"],
)
def test_bad_flags_exit_2(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """A bad or missing flag is a usage error."""
    for var in ("TLS_CERT_FILE", "TLS_PRIVATE_KEY_FILE", "PORT"):
        monkeypatch.delenv(var, raising=False)
    assert 2 == main(argv)


def test_unusable_certificate_exits_1(tmp_path: Path) -> None:
    """A missing or garbage certificate fails at start, not at the first request."""
    (tmp_path / "bad.crt").write_text("not a certificate")
    settings = WebhookSettings("127.0.0.1", 0, tmp_path / "bad.crt", tmp_path / "bad.crt", DRIVER, "info")
    with capture_logs() as logs:
        assert 1 == serve(settings, threading.Event())
    assert ["tls_certificate_unusable"] == [e["event"] for e in logs]


def test_serve_runs_until_stopped(certs: Certs) -> None:
    """serve() answers until the stop event, then returns 0."""
    stop = threading.Event()
    settings = WebhookSettings("127.0.0.1", 0, certs.cert, certs.key, DRIVER, "info")
    result: list[int] = []
    with capture_logs() as logs:
        thread = threading.Thread(target=lambda: result.append(serve(settings, stop)))
        thread.start()
        deadline = time.monotonic() + 10
        while not any(e["event"] == "webhook_serving" for e in logs) and time.monotonic() < deadline:
            time.sleep(0.02)
        port = next(e["port"] for e in logs if e["event"] == "webhook_serving")
        conn = http.client.HTTPSConnection(
            "127.0.0.1", port, context=ssl.create_default_context(cafile=str(certs.ca)), timeout=10
        )
        try:
            assert 200 == get(conn, "/livez")
        finally:
            conn.close()
        stop.set()
        thread.join(10)
    assert [0] == result


# -- hostile bodies: bounded work, 400 not 500, health keeps answering --------------------------

HUGE_PINNED = {
    "apiVersion": API_VERSION,
    "kind": "GpuConfig",
    "sharing": {"strategy": "MPS", "mpsConfig": {"defaultPinnedDeviceMemoryLimit": "1e2147483647"}},
}


@pytest.mark.parametrize(
    "limit", ["1e2147483647", "1e10000000", "1e-2147483648", "9" * 4400], ids=["exp-2^31", "exp-1e7", "exp-neg", "4400-digits"]
)
def test_absurd_quantities_are_denied_quickly_with_the_field_named(limit: str) -> None:
    params = {**HUGE_PINNED, "sharing": {"strategy": "MPS", "mpsConfig": {"defaultPinnedDeviceMemoryLimit": limit}}}
    t0 = time.process_time()
    verdict = review(body(request(claim_obj(params))), DRIVER)
    assert time.process_time() - t0 < 1.0
    assert not verdict.allowed
    assert "sharing.mpsConfig.defaultPinnedDeviceMemoryLimit" in verdict.message


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b'{"a":' * 100_000 + b"1" + b"}" * 100_000, "nested too deeply"),
        (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
        (b'{"apiVersion": ' + b"9" * 4400 + b"}", "body is not JSON"),
    ],
    ids=["deep-objects", "deep-lists", "4400-digit-integer"],
)
def test_hostile_json_is_a_bad_request_not_a_crash(raw: bytes, message: str) -> None:
    with pytest.raises(BadReview, match=message):
        review(raw, DRIVER)


def test_health_answers_while_a_hostile_review_is_in_flight(server: WebhookServer, certs: Certs) -> None:
    """One claim's config must not freeze the webhook (with failurePolicy Fail, that stops claim creation)."""
    deep = b'{"a":' * 200_000 + b"1" + b"}" * 200_000
    results: dict[str, int] = {}

    def hostile() -> None:
        conn = client(server, certs.ca)
        results["huge"] = post(conn, body(request(claim_obj(HUGE_PINNED))))[0]
        results["deep"] = post(client(server, certs.ca), deep)[0]

    t = threading.Thread(target=hostile)
    t.start()
    for _ in range(5):
        assert 200 == get(client(server, certs.ca), "/livez")
    t.join(20)
    assert {"huge": 200, "deep": 400} == results  # the first is a denial (AdmissionReview), the second a 400
    status, raw = post(client(server, certs.ca), body(request(claim_obj(GOOD))))
    assert (200, True) == (status, json.loads(raw)["response"]["allowed"])
