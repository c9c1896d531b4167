"""Who may read /metrics (dra_driver.obs.scrape_auth): the bearer token check, the TLS context and their reloads."""

from __future__ import annotations

import shutil
import socket
import ssl
import threading
from email.message import Message
from pathlib import Path

import pytest

from dra_driver.obs.scrape_auth import (
    MAX_TOKEN_BYTES,
    RELOAD_CHECK_S,
    BearerToken,
    ScrapeAuthConfig,
    ScrapeAuthError,
    ScrapeGuard,
    ServerTls,
    read_token,
)
from testkit.webhookcerts import make_certs

TOKEN = "s3cr3t-Token_0.9~+/="


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def headers(*pairs: tuple[str, str]) -> Message:
    """Request headers as http.server gives them (an email Message: case-insensitive, repeatable)."""
    msg = Message()
    for name, value in pairs:
        msg[name] = value
    return msg


def token_file(tmp_path: Path, content: str = TOKEN + "\n") -> Path:
    path = tmp_path / "token"
    path.write_text(content)
    return path


# -- the token ----------------------------------------------------------------------------------


def test_only_the_files_token_as_a_bearer_credential_is_authorized(tmp_path: Path) -> None:
    check = BearerToken(token_file(tmp_path)).authorize
    assert check(headers(("Authorization", f"Bearer {TOKEN}")))
    assert check(headers(("authorization", f"bearer {TOKEN}")))  # header name and scheme are case-insensitive
    assert check(headers(("Authorization", f"  Bearer   {TOKEN} ")))
    assert not check(headers())
    assert not check(headers(("Authorization", "Bearer")))
    assert not check(headers(("Authorization", "Bearer ")))
    assert not check(headers(("Authorization", f"Basic {TOKEN}")))
    assert not check(headers(("Authorization", f"Bearer {TOKEN}x")))
    assert not check(headers(("Authorization", f"Bearer {TOKEN[:-1]}")))
    assert not check(headers(("Authorization", f"Bearer {TOKEN.upper()}")))
    assert not check(headers(("X-Token", TOKEN)))
    assert not check(headers(("Authorization", "Bearer \xff")))  # http.server decodes header bytes as latin-1
    assert not check(headers(("Authorization", f"Bearer {TOKEN}"), ("Authorization", "Bearer other")))  # two: refused


@pytest.mark.parametrize(
    ("content", "why"),
    [
        ("", "empty"),
        ("  \n", "empty"),
        ("two words", "not a bearer token"),
        ("tök", "not a bearer token"),
        ("x" * (MAX_TOKEN_BYTES + 1), "larger than"),
    ],
)
def test_a_token_file_that_holds_no_token_is_refused_naming_it(tmp_path: Path, content: str, why: str) -> None:
    path = token_file(tmp_path, content)
    with pytest.raises(ScrapeAuthError, match=why) as err:
        BearerToken(path)
    assert str(path) in str(err.value) and "--metrics-token-file" in str(err.value)


def test_a_missing_token_file_is_refused_naming_it(tmp_path: Path) -> None:
    with pytest.raises(ScrapeAuthError, match="cannot read"):
        read_token(tmp_path / "absent")
    with pytest.raises(ScrapeAuthError, match="cannot read") as err:
        BearerToken(tmp_path / "absent")  # its change stamp is taken first: that was a FileNotFoundError
    assert f"--metrics-token-file {tmp_path / 'absent'}:" in str(err.value)


def test_a_rotated_token_replaces_the_old_one_and_a_broken_rotation_keeps_it(tmp_path: Path) -> None:
    clock = Clock()
    path = token_file(tmp_path)
    check = BearerToken(path, clock=clock).authorize
    path.write_text("new-token-longer\n")
    assert check(headers(("Authorization", f"Bearer {TOKEN}")))  # not looked at again within RELOAD_CHECK_S
    clock.now += RELOAD_CHECK_S
    assert check(headers(("Authorization", "Bearer new-token-longer")))
    assert not check(headers(("Authorization", f"Bearer {TOKEN}")))
    path.write_text("")  # a broken Secret: the last good token stays, never none
    clock.now += RELOAD_CHECK_S
    assert check(headers(("Authorization", "Bearer new-token-longer")))
    assert not check(headers(("Authorization", "Bearer ")))
    path.unlink()
    clock.now += RELOAD_CHECK_S
    assert check(headers(("Authorization", "Bearer new-token-longer")))


# -- the flags' combinations ----------------------------------------------------------------------


def test_nothing_configured_is_no_guard_and_plain_http() -> None:
    config = ScrapeAuthConfig()
    assert (False, "http", None) == (config.enabled, config.scheme, config.problem())
    guard = ScrapeGuard.load(config)
    assert guard.authorize is None and guard.ssl_context is None


@pytest.mark.parametrize(
    ("config", "mentions"),
    [
        (ScrapeAuthConfig(tls_cert_file=Path("c")), "go together"),
        (ScrapeAuthConfig(tls_key_file=Path("k")), "go together"),
        (ScrapeAuthConfig(client_ca_file=Path("ca"), token_file=Path("t")), "--metrics-client-ca-file needs"),
    ],
)
def test_flags_that_do_not_go_together_are_refused(config: ScrapeAuthConfig, mentions: str) -> None:
    assert config.problem() is not None and mentions in config.problem()  # type: ignore[operator]
    with pytest.raises(ScrapeAuthError, match=mentions):
        ScrapeGuard.load(config)


# -- TLS ------------------------------------------------------------------------------------------


def handshake(server: ssl.SSLContext, client: ssl.SSLContext) -> bytes:
    """One TLS connection to a socket served with ``server`` on 127.0.0.1 (no SNI: an IP); what the server sent."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        errors: list[BaseException] = []

        def serve() -> None:
            conn, _ = listener.accept()
            try:
                with server.wrap_socket(conn, server_side=True) as tls:
                    tls.sendall(b"ok")
            except (ssl.SSLError, OSError) as err:
                errors.append(err)

        thread = threading.Thread(target=serve)
        thread.start()
        try:
            with (
                socket.create_connection(listener.getsockname(), timeout=10) as raw,
                client.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
            ):
                return tls.recv(2)
        finally:
            thread.join(10)


def client_context(ca: Path, cert: Path | None = None, key: Path | None = None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(ca))
    if cert is not None:
        ctx.load_cert_chain(cert, key)
    return ctx


def test_tls_serves_the_certificate_and_a_rotated_one_on_the_next_handshake(tmp_path: Path) -> None:
    first = make_certs(tmp_path / "first")
    second = make_certs(tmp_path / "second")
    live = tmp_path / "live"
    shutil.copytree(tmp_path / "first", live)
    clock = Clock()
    tls = ServerTls(live / "tls.crt", live / "tls.key", clock=clock)
    assert tls.context.minimum_version >= ssl.TLSVersion.TLSv1_2
    assert b"ok" == handshake(tls.context, client_context(first.ca))
    shutil.copy(second.cert, live / "tls.crt")
    shutil.copy(second.key, live / "tls.key")
    clock.now += RELOAD_CHECK_S
    with pytest.raises(ssl.SSLCertVerificationError):
        handshake(tls.context, client_context(first.ca))
    assert b"ok" == handshake(tls.context, client_context(second.ca))
    (live / "tls.key").write_text("not a key")  # a broken rotation keeps the last good pair
    clock.now += RELOAD_CHECK_S
    assert b"ok" == handshake(tls.context, client_context(second.ca))


def test_with_a_client_ca_a_client_without_a_certificate_it_signed_is_refused(tmp_path: Path) -> None:
    server = make_certs(tmp_path / "server")
    clients = make_certs(tmp_path / "clients", usage="clientAuth", cn="prometheus")
    stranger = make_certs(tmp_path / "stranger", usage="clientAuth", cn="stranger")
    guard = ScrapeGuard.load(ScrapeAuthConfig(None, server.cert, server.key, clients.ca))
    assert guard.ssl_context is not None and guard.authorize is None
    assert b"ok" == handshake(guard.ssl_context, client_context(server.ca, clients.cert, clients.key))
    for refused in (client_context(server.ca), client_context(server.ca, stranger.cert, stranger.key)):
        with pytest.raises((ssl.SSLError, ConnectionError)):
            # TLS 1.3: the refusal arrives with the first read after the handshake
            assert b"ok" != handshake(guard.ssl_context, refused)


@pytest.mark.parametrize("broken", ["cert", "key", "ca"])
def test_unusable_tls_files_are_refused_at_start_naming_the_flag(tmp_path: Path, broken: str) -> None:
    certs = make_certs(tmp_path)
    bad = tmp_path / "bad.pem"
    bad.write_text("-----BEGIN CERTIFICATE-----\nnope\n-----END CERTIFICATE-----\n")
    files = {"cert": certs.cert, "key": certs.key, "ca": certs.ca} | {broken: bad}
    flag = {"cert": "--metrics-tls-cert-file", "key": "--metrics-tls-key-file", "ca": "--metrics-client-ca-file"}[broken]
    with pytest.raises(ScrapeAuthError, match=flag):
        ScrapeGuard.load(ScrapeAuthConfig(None, files["cert"], files["key"], files["ca"]))
    with pytest.raises(ScrapeAuthError, match="absent"):
        ScrapeGuard.load(ScrapeAuthConfig(None, tmp_path / "absent", certs.key))
