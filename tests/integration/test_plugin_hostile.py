"""The real plugin daemon under hostile conditions, over its real sockets.

A hung API server (accepts connections, never answers) must still give every claim of a call
its own error before the kubelet's 45 s deadline while the registration socket keeps
answering; thousands of missing claims in one call are looked up concurrently; a UID twice in
one request never records a bogus name.
"""

from __future__ import annotations

import re
import shutil
import socket
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from kubelet_plugin.prepare.requests import LOOKUP_BUDGET_S
from testkit.claims import create_allocated_claim
from testkit.cluster import LocalCluster
from testkit.plugin_process import PluginProcess


class HungServer:
    """A TCP server that accepts every connection and never sends a byte."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(128)
        self.port = self.sock.getsockname()[1]
        self.conns: list[socket.socket] = []
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        self.sock.settimeout(0.2)
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
                self.conns.append(conn)
            except TimeoutError:
                continue
            except OSError:
                return

    def close(self) -> None:
        self._stop.set()
        self.thread.join(2)
        for c in self.conns:
            c.close()
        self.sock.close()


@pytest.fixture
def hung_plugin(tmp_path: Path) -> Iterator[PluginProcess]:
    server = HungServer()
    kubeconfig = tmp_path / "hung.kubeconfig"
    kubeconfig.write_text(
        f"""apiVersion: v1
kind: Config
clusters:
- name: hung
  cluster: {{server: "https://127.0.0.1:{server.port}", insecure-skip-tls-verify: true}}
users:
- name: u
  user: {{token: "t"}}
contexts:
- name: c
  context: {{cluster: hung, user: u}}
current-context: c
"""
    )
    base = Path(tempfile.mkdtemp(prefix="hung-", dir="/tmp"))  # unix socket paths must stay short
    p = PluginProcess(base, kubeconfig=kubeconfig, extra_args=("--gc-interval", "0"))
    p.start()
    yield p
    p.stop()
    server.close()
    shutil.rmtree(base, ignore_errors=True)


def test_a_hung_api_server_gives_every_claim_its_own_error_in_time(hung_plugin: PluginProcess) -> None:
    refs = [("default", str(uuid.uuid4()), f"claim-{i}") for i in range(5)]
    got: dict[str, object] = {}

    def call() -> None:
        t0 = time.monotonic()
        got["resp"] = hung_plugin.prepare(refs)  # the kubelet's 45 s deadline
        got["elapsed"] = time.monotonic() - t0

    caller = threading.Thread(target=call)
    caller.start()
    time.sleep(1.0)
    info = hung_plugin.get_info()  # registration keeps answering while the lookups hang
    assert "DRAPlugin" == info.type
    caller.join(50)
    assert "resp" in got, "the call hit the kubelet's deadline instead of answering per claim"
    resp = got["resp"]
    for ns, uid, name in refs:
        err = resp.claims[uid].error  # type: ignore[attr-defined]
        # the lookup budget, or the connection's own timeout if that comes first: the read's (10 s) on a
        # pooled connection, the TLS handshake's (3 tries of 5 s) on a new one
        assert re.fullmatch(
            rf"reading claim {ns}/{name}: (no answer from the API server"
            rf"( within {LOOKUP_BUDGET_S:.0f}s| at https://127\.0\.0\.1:\d+ within 10s)"
            r"|could not connect to the API server at https://127\.0\.0\.1:\d+ within 3 tries of 5s)",
            err,
        ), err
    assert got["elapsed"] < 45  # type: ignore[operator]


def test_thousands_of_missing_claims_are_answered_each(plugin: PluginProcess) -> None:
    refs = [("default", str(uuid.uuid4()), f"missing-{i}") for i in range(2000)]
    resp = plugin.prepare(refs)
    assert {uid for _, uid, _ in refs} == set(resp.claims)
    assert all("not found" in resp.claims[uid].error for _, uid, _ in refs)


def test_a_duplicated_uid_records_no_bogus_name_and_gc_keeps_the_claim(tmp_path: Path, apiserver: LocalCluster) -> None:
    p = PluginProcess(tmp_path, kubeconfig=apiserver.kubeconfig, extra_args=("--gc-interval", "0.2"))
    p.start()
    try:
        ns, uid, name = create_allocated_claim(apiserver, name=f"dup-{uuid.uuid4().hex[:6]}", devices=["gpu-5"])
        resp = p.prepare([(ns, uid, "bogus"), (ns, uid, name)])
        assert "appears 2 times in one request" in resp.claims[uid].error
        assert "" == p.prepare([(ns, uid, name)]).claims[uid].error
        time.sleep(1.5)  # several GC passes
        assert any(f.endswith(f"{uid}.json") for f in p.cdi_files())
        assert not [e for e in p.logs() if e.get("event") == "claim_gone_unprepared"]
    finally:
        p.stop()
