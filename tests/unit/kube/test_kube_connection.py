"""Loading an API server connection without the ``kubernetes`` package, through a real TLS server.

``dra_driver.kube.client`` reads kubeconfigs and the service account itself; these tests serve
HTTPS from this process (a CA, a serving certificate, a client CA, made with openssl) and check
what arrives: the bearer token, the client certificate, CA verification, token rotation, the
proxy decision, the fallback to the ``kubernetes`` loader for exec credential plugins, and a clear
``KubeConfigError`` for every broken configuration.
"""

from __future__ import annotations

import base64
import contextlib
import json
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from dra_driver.kube import connection
from dra_driver.kube.client import KubeConfigError, _in_cluster, load_api_client
from dra_driver.kube.connection import TokenSource, _proxy_for
from dra_driver.kube.rest import KubeApiError, RestApi
from testkit.webhookcerts import Certs, make_certs

ROOT = Path(__file__).resolve().parents[3]


@dataclass
class Seen:
    requests: list[dict[str, Any]] = field(default_factory=list)
    ports: list[int] = field(default_factory=list)


@dataclass
class Server:
    url: str
    certs: Certs
    client: Certs
    seen: Seen


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    base = tmp_path_factory.mktemp("tls")
    certs = make_certs(base)
    client = make_certs(base, prefix="client-", usage="clientAuth", cn="node-a-user")
    seen = Seen()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive

        def do_GET(self) -> None:
            peer = self.connection.getpeercert()
            cn = dict(x[0] for x in peer["subject"])["commonName"] if peer else ""
            seen.requests.append({"path": self.path, "auth": self.headers.get("Authorization"), "cn": cn})
            seen.ports.append(self.client_address[1])
            if self.path.startswith("/slow"):
                time.sleep(1.0)
            if self.path.startswith("/close"):
                self.close_connection = True
            body = json.dumps({"kind": "Namespace", "metadata": {"name": "default"}, "path": self.path}).encode()
            with contextlib.suppress(OSError):  # the client of /slow gave up and closed
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(str(certs.cert), str(certs.key))
    ctx.load_verify_locations(cafile=str(client.ca))
    ctx.verify_mode = ssl.CERT_OPTIONAL
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.socket = ctx.wrap_socket(httpd.socket, server_side=True)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield Server(f"https://127.0.0.1:{httpd.server_address[1]}", certs, client, seen)
    finally:
        httpd.shutdown()
        httpd.server_close()


def _kubeconfig(path: Path, cluster: dict[str, Any], user: dict[str, Any]) -> Path:
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": cluster}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    path.write_text(json.dumps(doc))  # JSON is YAML
    return path


def _get(conn: Any, server: Server) -> dict[str, Any]:
    before = len(server.seen.requests)
    assert RestApi(conn).call("GET", "/api/v1/namespaces/default", query=[("a", "b c")])["metadata"]["name"] == "default"
    assert len(server.seen.requests) == before + 1
    return server.seen.requests[-1]


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def test_a_kubeconfig_token_and_relative_ca_path_reach_the_server(server: Server, tmp_path: Path) -> None:
    (tmp_path / "pki").mkdir()
    (tmp_path / "pki" / "ca.crt").write_bytes(server.certs.ca.read_bytes())
    cfg = _kubeconfig(tmp_path / "kubeconfig", {"server": server.url, "certificate-authority": "pki/ca.crt"}, {"token": "t0k"})
    seen = _get(load_api_client(str(cfg)), server)
    assert seen == {"path": "/api/v1/namespaces/default?a=b+c", "auth": "Bearer t0k", "cn": ""}


def test_a_yaml_kubeconfig_reaches_the_server_as_its_json_twin_does(server: Server, tmp_path: Path) -> None:
    (tmp_path / "ca.crt").write_bytes(server.certs.ca.read_bytes())
    cfg = tmp_path / "kubeconfig"
    cfg.write_text(
        "apiVersion: v1\nkind: Config\n"
        f"clusters:\n- name: c\n  cluster:\n    server: {server.url}\n    certificate-authority: ca.crt\n"
        "users:\n- name: u\n  user:\n    token: y4ml\n"
        "contexts:\n- name: x\n  context: {cluster: c, user: u}\ncurrent-context: x\n"
    )
    assert _get(load_api_client(str(cfg)), server)["auth"] == "Bearer y4ml"


def test_a_json_kubeconfig_and_a_tls_call_load_neither_the_yaml_parser_nor_the_idna_codec(server: Server, tmp_path: Path) -> None:
    """A fresh interpreter: the YAML parser (about 0.9 MiB resident) loads only for a kubeconfig that is
    not JSON, and an ASCII server name is dialled and verified without the IDNA codec (``unicodedata``)."""
    cfg = _kubeconfig(
        tmp_path / "kubeconfig", {"server": server.url, "certificate-authority": str(server.certs.ca)}, {"token": "t"}
    )
    code = (
        "import sys; from dra_driver.kube.client import load_api_client; from dra_driver.kube.rest import RestApi; "
        f"conn = load_api_client({str(cfg)!r}); "
        "assert RestApi(conn).call('GET', '/api/v1/namespaces/default')['metadata']['name'] == 'default'; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'yaml' or m in ('encodings.idna', 'unicodedata')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]"
    assert server.seen.requests[-1]["auth"] == "Bearer t"


def test_a_client_certificate_from_data_is_presented_and_no_token_is_sent(server: Server, tmp_path: Path) -> None:
    cfg = _kubeconfig(
        tmp_path / "kubeconfig",
        {"server": server.url, "certificate-authority-data": _b64(server.certs.ca)},
        {"client-certificate-data": _b64(server.client.cert), "client-key-data": _b64(server.client.key)},
    )
    seen = _get(load_api_client(str(cfg)), server)
    assert seen["cn"] == "node-a-user"
    assert seen["auth"] is None
    assert not list(Path("/tmp").glob("dra-gpu-cert-*"))  # the PEMs' temp dir is gone


def test_a_client_certificate_from_files_is_presented(server: Server, tmp_path: Path) -> None:
    cfg = _kubeconfig(
        tmp_path / "kubeconfig",
        {"server": server.url, "certificate-authority": str(server.certs.ca)},
        {"client-certificate": str(server.client.cert), "client-key": str(server.client.key), "tokenFile": str(tmp_path / "t")},
    )
    (tmp_path / "t").write_text("from-file\n")
    seen = _get(load_api_client(str(cfg)), server)
    assert (seen["cn"], seen["auth"]) == ("node-a-user", "Bearer from-file")


def test_a_server_the_ca_did_not_sign_is_refused(server: Server, tmp_path: Path) -> None:
    cfg = _kubeconfig(tmp_path / "kubeconfig", {"server": server.url, "certificate-authority": str(server.client.ca)}, {})
    with pytest.raises(KubeApiError, match="CERTIFICATE_VERIFY_FAILED"):
        RestApi(load_api_client(str(cfg))).call("GET", "/version")


def test_insecure_skip_tls_verify_is_honoured(server: Server, tmp_path: Path) -> None:
    cfg = _kubeconfig(tmp_path / "kubeconfig", {"server": server.url, "insecure-skip-tls-verify": True}, {"token": "x"})
    assert _get(load_api_client(str(cfg)), server)["auth"] == "Bearer x"


def test_the_service_account_is_read_in_a_pod_and_its_rotated_token_is_reread(
    server: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "ca.crt").write_bytes(server.certs.ca.read_bytes())
    (tmp_path / "token").write_text("first")
    port = server.url.rsplit(":", 1)[1]
    conn = _in_cluster(tmp_path, {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": port})
    assert _get(conn, server)["auth"] == "Bearer first"
    (tmp_path / "token").write_text("second")
    assert _get(conn, server)["auth"] == "Bearer first"  # not re-read on every request
    monkeypatch.setattr(connection, "TOKEN_REREAD_S", 0.0)
    assert _get(conn, server)["auth"] == "Bearer second"
    (tmp_path / "token").unlink()
    assert _get(conn, server)["auth"] == "Bearer second"  # a vanished file keeps the last token


def test_an_exec_credential_plugin_goes_through_the_kubernetes_loader(server: Server, tmp_path: Path) -> None:
    cred = {"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential", "status": {"token": "from-exec"}}
    plugin = tmp_path / "plugin.py"
    plugin.write_text(f"print({json.dumps(json.dumps(cred))})\n")
    exec_user = {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": sys.executable, "args": [str(plugin)]}}
    exec_user["exec"]["interactiveMode"] = "Never"
    cfg = _kubeconfig(tmp_path / "kubeconfig", {"server": server.url, "certificate-authority": str(server.certs.ca)}, exec_user)
    assert _get(load_api_client(str(cfg)), server)["auth"] == "Bearer from-exec"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("", "is not a mapping"),
        ("[1, 2", "is not YAML"),
        ('{"clusters": []}', "has no current-context"),
        ('{"current-context": "x", "contexts": []}', "no context named 'x'"),
        ('{"current-context": "x", "contexts": [{"name": "x", "context": {"cluster": "c"}}]}', "no cluster named 'c'"),
        (
            '{"current-context": "x", "contexts": [{"name": "x", "context": {"cluster": "c"}}],'
            ' "clusters": [{"name": "c", "cluster": {}}]}',
            "cluster 'c' has no server",
        ),
        (
            '{"current-context": "x", "contexts": [{"name": "x", "context": {"cluster": "c"}}],'
            ' "clusters": [{"name": "c", "cluster": {"server": "https://h", "certificate-authority-data": "%%%"}}]}',
            "certificate-authority-data is not base64",
        ),
        (
            '{"current-context": "x", "contexts": [{"name": "x", "context": {"cluster": "c"}}],'
            ' "clusters": [{"name": "c", "cluster": {"server": "ftp://h"}}]}',
            "is not an http\\(s\\) URL",
        ),
        (
            '{"current-context": "x", "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],'
            ' "clusters": [{"name": "c", "cluster": {"server": "https://h"}}],'
            ' "users": [{"name": "u", "user": {"tokenFile": "nope"}}]}',
            "No such file",
        ),
    ],
)
def test_a_broken_kubeconfig_is_a_clear_error_naming_the_file(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text(content)
    with pytest.raises(KubeConfigError, match=message) as err:
        load_api_client(str(path))
    assert str(path) in str(err.value)


def test_a_missing_kubeconfig_and_no_pod_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(KubeConfigError, match="No such file"):
        load_api_client(str(tmp_path / "absent"))
    with pytest.raises(KubeConfigError, match="KUBERNETES_SERVICE_HOST"):
        _in_cluster(tmp_path, {})
    with pytest.raises(KubeConfigError, match="service account credentials"):
        _in_cluster(tmp_path, {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"})


def test_a_token_file_over_the_bound_is_refused(tmp_path: Path) -> None:
    big = tmp_path / "token"
    big.write_bytes(b"x" * (connection.MAX_TOKEN_BYTES + 1))
    with pytest.raises(ValueError, match="not a token"):
        TokenSource(path=big)


def test_the_proxy_is_decided_once_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("https_proxy", "http://proxy.example:3128")
    monkeypatch.setenv("no_proxy", "10.0.0.1,.svc")
    assert _proxy_for("https://api.example:6443") == "http://proxy.example:3128"
    assert _proxy_for("https://10.0.0.1:443") is None
    assert _proxy_for("https://kubernetes.default.svc") is None
    monkeypatch.delenv("https_proxy")
    assert _proxy_for("https://api.example:6443") is None


def _token_kubeconfig(server: Server, tmp_path: Path) -> Path:
    return _kubeconfig(
        tmp_path / "kubeconfig", {"server": server.url, "certificate-authority": str(server.certs.ca)}, {"token": "k"}
    )


def test_connections_are_kept_alive_and_one_the_server_closed_is_replaced(server: Server, tmp_path: Path) -> None:
    rest = RestApi(load_api_client(str(_token_kubeconfig(server, tmp_path))))
    before = len(server.seen.ports)
    for _ in range(3):
        rest.call("GET", "/a")
    assert len(set(server.seen.ports[before:])) == 1  # one TCP connection for all three
    rest.call("GET", "/close")  # the server closes it after answering
    rest.call("GET", "/b")
    assert server.seen.ports[-1] != server.seen.ports[-2]
    assert [r["path"] for r in server.seen.requests[-2:]] == ["/close", "/b"]


def test_a_read_timeout_names_the_server_and_the_wait(server: Server, tmp_path: Path) -> None:
    rest = RestApi(load_api_client(str(_token_kubeconfig(server, tmp_path))), total_timeout_s=0.3)
    with pytest.raises(KubeApiError, match=rf"no answer from the API server at {server.url} within 0.3s"):
        rest.call("GET", "/slow")


def test_an_unreachable_server_is_a_clear_transport_error(tmp_path: Path) -> None:
    cfg = _kubeconfig(tmp_path / "kubeconfig", {"server": "https://127.0.0.1:1"}, {"token": "k"})
    with pytest.raises(
        KubeApiError, match=r"could not connect to the API server at https://127\.0\.0\.1:1: .*Connection refused"
    ) as err:
        RestApi(load_api_client(str(cfg))).call("GET", "/version")
    assert err.value.status == 0


def test_a_post_after_the_server_closed_the_idle_connection_is_sent_once_on_a_fresh_one() -> None:
    """The API server closes connections idle too long without a word: a POST must not be sent on one
    (it would fail after leaving, and a POST is never sent twice)."""
    posts: list[tuple[int, bytes]] = []

    class Idle(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        timeout = 0.2  # this server drops a connection idle this long

        def do_POST(self) -> None:
            posts.append((self.client_address[1], self.rfile.read(int(self.headers["Content-Length"]))))
            out = b'{"ok":true}'
            self.send_response(201)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Idle)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        rest = RestApi(connection.ApiConnection(f"http://127.0.0.1:{httpd.server_address[1]}", honour_proxy_env=False))
        assert rest.call("POST", "/x", body={"n": 1}) == {"ok": True}
        time.sleep(0.6)  # the pooled connection is closed by the server now
        assert rest.call("POST", "/x", body={"n": 2}) == {"ok": True}
        assert [b for _, b in posts] == [b'{"n":1}', b'{"n":2}']
        assert posts[0][0] != posts[1][0]
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_a_proxy_other_than_http_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="proxy 'socks5://p:1080' is not supported"):
        connection.ApiConnection("https://10.0.0.1:6443", proxy="socks5://p:1080")


def test_an_https_proxy_from_the_environment_tunnels_to_the_server(
    server: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """HTTPS_PROXY names an HTTP proxy: the request goes through its CONNECT tunnel, TLS end to end."""
    tunnels: list[str] = []
    listener = socket.create_server(("127.0.0.1", 0))

    def pipe(a: socket.socket, b: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := a.recv(65536):
                b.sendall(data)
        with contextlib.suppress(OSError):
            b.shutdown(socket.SHUT_WR)

    def proxy() -> None:
        client, _ = listener.accept()
        head = b""
        while b"\r\n\r\n" not in head:
            head += client.recv(4096)
        target = head.split(b" ")[1].decode()
        tunnels.append(target)
        host, port = target.rsplit(":", 1)
        upstream = socket.create_connection((host, int(port)))
        client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
        other = threading.Thread(target=pipe, args=(client, upstream), daemon=True)
        other.start()
        pipe(upstream, client)
        other.join(5)
        client.close()
        upstream.close()

    proxying = threading.Thread(target=proxy, daemon=True)
    proxying.start()
    monkeypatch.setenv("https_proxy", f"http://127.0.0.1:{listener.getsockname()[1]}")
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.delenv("NO_PROXY", raising=False)
    conn = load_api_client(str(_token_kubeconfig(server, tmp_path)))
    assert conn.proxy is not None
    assert _get(conn, server)["auth"] == "Bearer k"
    assert tunnels == [server.url.removeprefix("https://")]
    conn.close()  # ends the tunnel
    proxying.join(5)
    listener.close()


def test_an_answer_over_the_body_bound_is_a_clear_error_naming_the_server(
    server: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(connection, "MAX_BODY_BYTES", 20)  # the server's namespace answer is ~80 bytes
    rest = RestApi(load_api_client(str(_token_kubeconfig(server, tmp_path))))
    with pytest.raises(KubeApiError, match=rf"answer from the API server {server.url} is larger than 20 bytes") as err:
        rest.call("GET", "/big")
    assert err.value.status == 0
    monkeypatch.setattr(connection, "MAX_BODY_BYTES", 1 << 20)
    assert rest.call("GET", "/after")["path"] == "/after"  # the cut connection was not reused


def test_a_watch_line_over_the_event_bound_ends_the_watch_with_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from dra_driver.kube import slices_api

    monkeypatch.setattr(slices_api, "MAX_WATCH_EVENT_BYTES", 100)

    class Raw:
        def stream(self, amt: int) -> Iterator[bytes]:
            yield b'{"type":"ADDED","object":{"metadata":{"name":"a"}}}\n'
            while True:  # one endless line: never an event
                yield b"x" * 64

    events = slices_api.KubeSliceApi._events(Raw())
    assert next(events)[0] == "ADDED"
    with pytest.raises(KubeApiError, match="a watch event longer than 100 bytes"):
        next(events)


@contextlib.contextmanager
def _plain_http_server() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """A plain-HTTP server answering every GET with a Namespace: its URL and what it saw."""
    seen: list[dict[str, Any]] = []

    class Plain(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append({"path": self.path, "auth": self.headers.get("Authorization")})
            body = json.dumps({"kind": "Namespace", "metadata": {"name": "default"}}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Plain)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", seen
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.mark.parametrize("user", [{"token": "t0k"}, {"username": "admin", "password": "pw"}], ids=["native", "kubernetes-loader"])
def test_a_plain_http_server_is_refused_naming_the_kubeconfig_and_server(tmp_path: Path, user: dict[str, str]) -> None:
    with _plain_http_server() as (url, seen):
        cfg = _kubeconfig(tmp_path / "kubeconfig", {"server": url}, user)
        with pytest.raises(KubeConfigError, match="plain http") as err:
            load_api_client(str(cfg))
        assert str(cfg) in str(err.value) and url in str(err.value) and "insecure-skip-tls-verify" in str(err.value)
        assert seen == []  # refused before any request: no token sent in clear


@pytest.mark.parametrize("user", [{"token": "t0k"}, {"username": "admin", "password": "pw"}], ids=["native", "kubernetes-loader"])
def test_a_plain_http_server_with_insecure_skip_tls_verify_is_spoken_to_in_plain_http(
    tmp_path: Path, user: dict[str, str]
) -> None:
    # It was dialled with TLS whatever its scheme: an SSL error against a plain-HTTP server.
    with _plain_http_server() as (url, seen):
        cfg = _kubeconfig(tmp_path / "kubeconfig", {"server": url, "insecure-skip-tls-verify": True}, user)
        conn = load_api_client(str(cfg))
        assert RestApi(conn).call("GET", "/api/v1/namespaces/default")["metadata"]["name"] == "default"
        assert seen[-1]["path"] == "/api/v1/namespaces/default"
        assert seen[-1]["auth"] in ("Bearer t0k", "Basic " + base64.b64encode(b"admin:pw").decode())
