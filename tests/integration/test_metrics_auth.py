"""Who may read /metrics, on the real daemons: a token (401 without it), TLS with client certificates, the default address.

The kubelet plugin runs as a process against a real kube-apiserver with ``--metrics-token-file``
(and TLS with a client CA), scraped over real sockets with urllib and with ``dra-gpu top --url``;
the webhook is served in-process from its own flag parser, whose defaults listen on loopback only.
"""

from __future__ import annotations

import json
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from dra_driver.obs.ports import is_every_address
from testkit.cluster import LocalCluster
from testkit.plugin_process import ROOT, PluginProcess
from testkit.webhookcerts import make_certs
from webhook.main import parse as parse_webhook
from webhook.main import serve as serve_webhook

TOKEN = "scrape-token-0123456789abcdef"


def get(url: str, *, token: str | None = None, context: ssl.SSLContext | None = None) -> tuple[int, str, str]:
    """Status, WWW-Authenticate and body of one GET (an HTTP error status is an answer too)."""
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=10, context=context) as resp:
            return resp.status, resp.headers.get("WWW-Authenticate", ""), resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.headers.get("WWW-Authenticate", ""), err.read().decode(errors="replace")


def top(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dra_driver.cli.main", "top", *args], cwd=ROOT, capture_output=True, text=True, check=False
    )


def metrics_port(p: PluginProcess) -> int:
    return int(p.metrics_url().rsplit(":", 1)[1].split("/", 1)[0])


def test_without_the_token_a_scrape_gets_401_and_with_it_the_metrics(tmp_path: Path, apiserver: LocalCluster) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")  # a Secret's trailing newline is not part of the token
    p = PluginProcess(tmp_path, kubeconfig=apiserver.kubeconfig, extra_args=("--metrics-token-file", str(token_file)))
    p.start()
    try:
        url = p.metrics_url()
        status, challenge, body = get(url)
        assert (401, "Bearer") == (status, challenge.split()[0])
        assert "dra_gpu_" not in body
        assert 401 == get(url, token=TOKEN + "x")[0]
        assert 401 == get(url, token=TOKEN[:-1])[0]
        status, _, body = get(url, token=TOKEN)
        assert 200 == status and "dra_gpu_prepared_claims" in body

        refused = top("--url", url)
        assert 1 == refused.returncode and "401" in refused.stderr and "--token-file" in refused.stderr
        read = top("--url", url, "--token-file", str(token_file), "-o", "json")
        assert 0 == read.returncode, read.stderr
        assert [] == json.loads(read.stdout)["errors"]

        token_file.write_text("rotated-token\n")  # the Secret rotated: the next scrapes take the new token
        deadline = time.monotonic() + 10
        while get(url, token="rotated-token")[0] != 200 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert 200 == get(url, token="rotated-token")[0]
        assert 401 == get(url, token=TOKEN)[0]
    finally:
        p.stop()


def test_mutual_tls_only_a_client_with_a_certificate_reads(tmp_path: Path, apiserver: LocalCluster) -> None:
    """TLS with a client CA: a client without a certificate it signed is refused (test name short: socket paths)."""
    server = make_certs(tmp_path / "s")
    client = make_certs(tmp_path / "c", usage="clientAuth", cn="prometheus")
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    args = ("--metrics-tls-cert-file", str(server.cert), "--metrics-tls-key-file", str(server.key),
            "--metrics-client-ca-file", str(client.ca), "--metrics-token-file", str(token_file))  # fmt: skip
    p = PluginProcess(tmp_path, kubeconfig=apiserver.kubeconfig, extra_args=args)
    p.start()
    try:
        url = f"https://127.0.0.1:{metrics_port(p)}/metrics"
        with pytest.raises((urllib.error.URLError, ConnectionError)):
            get(url.replace("https:", "http:", 1))  # plain HTTP is not answered
        anonymous = ssl.create_default_context(cafile=str(server.ca))
        with pytest.raises((urllib.error.URLError, ssl.SSLError, ConnectionError)):
            get(url, token=TOKEN, context=anonymous)  # no client certificate: the handshake is refused
        mutual = ssl.create_default_context(cafile=str(server.ca))
        mutual.load_cert_chain(client.cert, client.key)
        assert 401 == get(url, context=mutual)[0]  # a certificate and still no token
        status, _, body = get(url, token=TOKEN, context=mutual)
        assert 200 == status and "dra_gpu_prepared_claims" in body

        tls_args = ("--cacert", str(server.ca), "--cert", str(client.cert), "--key", str(client.key))
        read = top("--url", url, "--token-file", str(token_file), *tls_args)
        assert 0 == read.returncode, read.stderr
        assert 1 == top("--url", url, "--token-file", str(token_file), "--cacert", str(server.ca)).returncode
    finally:
        p.stop()


def test_an_unusable_token_file_stops_the_plugin_before_the_kubelet_can_register_it(
    tmp_path: Path, apiserver: LocalCluster
) -> None:
    empty = tmp_path / "empty-token"
    empty.write_text("\n")
    p = PluginProcess(tmp_path, kubeconfig=apiserver.kubeconfig, extra_args=("--metrics-token-file", str(empty)))
    with pytest.raises(RuntimeError, match="exited with 2"):
        p.start()
    assert not p.reg_socket.exists()
    [event] = [e for e in p.logs() if e.get("event") == "metrics_auth_unusable"]
    assert str(empty) in event["error"]


def test_top_refuses_a_token_for_the_api_servers_pod_proxy_which_would_drop_it(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    out = top("--token-file", str(token_file))
    assert 2 == out.returncode
    assert "--url" in out.stderr and "pod proxy" in out.stderr


def test_the_webhooks_metrics_listen_on_loopback_by_default_and_want_the_token(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for var in ("METRICS_ADDRESS", "METRICS_PORT", "METRICS_TOKEN_FILE", "METRICS_TLS_CERT_FILE", "METRICS_TLS_KEY_FILE"):
        monkeypatch.delenv(var, raising=False)
    certs = make_certs(tmp_path)
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    settings = parse_webhook([
        "--bind-address", "127.0.0.1", "--port", "0", "--tls-cert-file", str(certs.cert),
        "--tls-private-key-file", str(certs.key), "--metrics-port", "0", "--metrics-token-file", str(token_file),
    ])  # fmt: skip
    stop = threading.Event()
    result: list[int] = []
    with capture_logs() as logs:
        thread = threading.Thread(target=lambda: result.append(serve_webhook(settings, stop)))
        thread.start()
        try:
            deadline = time.monotonic() + 10
            while not any(e["event"] == "metrics_listening" for e in logs) and time.monotonic() < deadline:
                time.sleep(0.02)
            [listening] = [e for e in logs if e["event"] == "metrics_listening"]
            assert "127.0.0.1" == listening["address"] and not is_every_address(listening["address"])
            url = f"http://127.0.0.1:{listening['port']}/metrics"
            assert 401 == get(url)[0]
            status, _, body = get(url, token=TOKEN)
            assert 200 == status and "dra_gpu_admission_requests_total" in body
        finally:
            stop.set()
            thread.join(10)
    assert [0] == result
