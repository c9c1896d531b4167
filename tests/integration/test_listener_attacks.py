"""Attacks on the daemons' HTTP listeners, against the real processes over loopback.

Each test runs an attack from issue 27, scaled to a few hundred connections, and asserts what
must hold during it: the work that matters is answered (a prepare over the plugin's DRA socket,
an AdmissionReview over the webhook's HTTPS), the daemon's threads and descriptors stay within
its bounds, a slow client is cut by the request deadline, and the webhook's peak memory stays
under the chart's limit with concurrent worst-case bodies. Never a timing goal: the figures are
in ``bench/listener_attacks.py``.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from dra_driver.obs.http_server import ACCEPT_BACKLOG, LOOP_FDS
from testkit.admission import DRIVER, GOOD, body, claim_obj, request
from testkit.claims import create_allocated_claim
from testkit.cluster import LocalCluster
from testkit.plugin_process import ROOT, PluginProcess
from testkit.webhookcerts import Certs, make_certs
from webhook.admission import VALIDATE_PATH
from webhook.server import PARSE_BUDGET_BYTES, review_cost

CHART_VALUES = ROOT / "deploy" / "helm" / "dra-gpu" / "values.yaml"


# -- what a process holds ----------------------------------------------------------------------


@dataclass(frozen=True)
class Held:
    threads: int
    fds: int
    peak_rss_mib: float


def held(pid: int) -> Held:
    status = Path(f"/proc/{pid}/status").read_text()
    field = {line.split(":")[0]: line.split(":")[1].split() for line in status.splitlines() if ":" in line}
    return Held(int(field["Threads"][0]), len(os.listdir(f"/proc/{pid}/fd")), int(field["VmHWM"][0]) / 1024)


def chart_webhook_memory_limit_mib() -> float:
    """The webhook container's memory limit in the chart's values (``192Mi``)."""
    text = CHART_VALUES.read_text()
    webhook = text[text.index("\nwebhook:") :]
    limits = webhook[webhook.index("limits:") :]
    match = re.search(r"memory:\s*(\d+)Mi", limits)
    assert match, "no webhook memory limit in values.yaml"
    return float(match.group(1))


def deep_lists_costing(cost: int) -> bytes:
    """A body of nested empty lists whose ``review_cost`` is about ``cost``: the shape that takes the most memory per byte."""
    deep = b"[" * 900 + b"]" * 900 + b","
    units = cost // review_cost(deep)
    return b"[" + deep * units + b"[]]"


def flood(port: int, count: int) -> list[socket.socket]:
    """Up to ``count`` idle TCP connections (those the kernel completes; a full backlog drops the rest)."""
    out = []
    for _ in range(count):
        s = socket.socket()
        s.settimeout(0.5)
        try:
            s.connect(("127.0.0.1", port))
        except OSError:
            s.close()
            continue
        out.append(s)
    return out


def close_all(socks: list[socket.socket]) -> None:
    for s in socks:
        s.close()


# -- the kubelet plugin ------------------------------------------------------------------------


@pytest.fixture
def limited_plugin(tmp_path_factory: pytest.TempPathFactory, apiserver: LocalCluster) -> Iterator[PluginProcess]:
    """The plugin with at most 512 open files, hard and soft (a container's limit, scaled down)."""
    tmp_path = tmp_path_factory.mktemp("p")  # short: the sockets' paths must fit 107 characters
    wrapper = tmp_path / "python-nofile-512"
    wrapper.write_text(f'#!/bin/sh\nulimit -n 512\nexec "{sys.executable}" "$@"\n')
    wrapper.chmod(0o755)
    p = PluginProcess(tmp_path, kubeconfig=apiserver.kubeconfig, python=wrapper)
    p.start()
    yield p
    p.stop()


def test_idle_connections_to_the_plugin_metrics_port_never_make_a_prepare_fail(
    limited_plugin: PluginProcess, apiserver: LocalCluster
) -> None:
    """Issue 27 #1: 700 idle connections against 512 open files once took them all; a prepare meanwhile failed."""
    assert limited_plugin.proc is not None
    pid = limited_plugin.proc.pid
    (listening,) = [e for e in limited_plugin.logs() if e.get("event") == "metrics_listening"]
    port, cap = int(listening["port"]), int(listening["max_connections"])
    before = held(pid)
    idle = flood(port, 700)
    try:
        assert len(idle) > 4 * cap  # far more than the cap (a flood at the old limit stalls near 512)
        time.sleep(0.5)
        during = held(pid)
        claim = create_allocated_claim(apiserver, name=f"f-{uuid.uuid4().hex[:8]}", devices=["gpu-1"])
        answer = limited_plugin.prepare([claim])
        assert "" == answer.claims[claim[1]].error
        assert during.threads <= before.threads + 4  # the event loop and two workers at most, no thread per connection
        assert during.fds <= before.fds + cap + ACCEPT_BACKLOG + LOOP_FDS
    finally:
        close_all(idle)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        assert s.recv(100).startswith(b"HTTP/1.1 200")
    assert "" == limited_plugin.unprepare([claim]).claims[claim[1]].error


# -- the webhook -------------------------------------------------------------------------------


@dataclass
class Webhook:
    proc: subprocess.Popen[bytes]
    log: Path
    certs: Certs

    def events(self) -> list[dict[str, Any]]:
        out = []
        for line in self.log.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
        return out

    def port_of(self, event: str) -> int:
        return int(next(e["port"] for e in self.events() if e.get("event") == event))

    @property
    def port(self) -> int:
        return self.port_of("webhook_serving")

    @property
    def metrics_port(self) -> int:
        return self.port_of("metrics_listening")

    def tls(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.certs.ca))

    def review(self, raw: bytes | None = None, timeout: float = 10.0) -> tuple[int, bytes]:
        conn = http.client.HTTPSConnection("127.0.0.1", self.port, context=self.tls(), timeout=timeout)
        try:
            conn.request(
                "POST", VALIDATE_PATH, body=raw or body(request(claim_obj(GOOD))), headers={"Content-Type": "application/json"}
            )
            resp = conn.getresponse()
            return resp.status, resp.read()
        finally:
            conn.close()


def start_webhook(tmp_path: Path, *args: str) -> Webhook:
    certs = make_certs(tmp_path)
    log = tmp_path / "webhook.log"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    argv = [
        sys.executable, "-m", "webhook.main", "--bind-address", "127.0.0.1", "--port", "0",
        "--tls-cert-file", str(certs.cert), "--tls-private-key-file", str(certs.key), "--driver-name", DRIVER,
        "--metrics-port", "0", "--metrics-address", "127.0.0.1", *args,
    ]  # fmt: skip
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    hook = Webhook(proc, log, certs)
    deadline = time.monotonic() + 20
    while not any(e.get("event") == "webhook_serving" for e in hook.events()):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"webhook did not start:\n{log.read_text()[-2000:]}")
        time.sleep(0.05)
    return hook


def stop_webhook(hook: Webhook) -> None:
    hook.proc.send_signal(signal.SIGTERM)
    try:
        hook.proc.wait(20)
    except subprocess.TimeoutExpired:
        hook.proc.kill()
        hook.proc.wait()


@pytest.fixture
def webhook(tmp_path: Path) -> Iterator[Webhook]:
    hook = start_webhook(tmp_path, "--max-connections", "32", "--request-timeout", "1.5")
    yield hook
    stop_webhook(hook)


def test_a_metrics_flood_never_times_out_a_review(webhook: Webhook) -> None:
    """Issue 27 #2: idle connections to the webhook's /metrics once left reviews waiting past the API server's 10 s."""
    before = held(webhook.proc.pid)
    idle = flood(webhook.metrics_port, 400)
    try:
        assert len(idle) > 300
        status, answer = webhook.review()
        assert 200 == status and json.loads(answer)["response"]["allowed"]
        assert held(webhook.proc.pid).threads <= before.threads + 4
    finally:
        close_all(idle)


def slow_tls_client(hook: Webhook) -> ssl.SSLSocket | None:
    raw = socket.create_connection(("127.0.0.1", hook.port), timeout=5)
    try:
        tls = hook.tls().wrap_socket(raw, server_hostname="127.0.0.1")
    except OSError:
        raw.close()
        return None
    tls.sendall(f"POST {VALIDATE_PATH} HTTP/1.1\r\nHost: x\r\n".encode())
    return tls


def test_slowloris_clients_are_cut_at_the_request_deadline_and_reviews_still_get_in(webhook: Webhook) -> None:
    """Issue 27 #3: a thousand TLS clients sending a header line every 5 s once filled the webhook."""
    slow = [c for c in (slow_tls_client(webhook) for _ in range(150)) if c is not None]
    cut: list[ssl.SSLSocket] = []
    answered: list[int] = []

    def review_meanwhile() -> None:
        answered.append(webhook.review()[0])

    try:
        reviewer = threading.Thread(target=review_meanwhile)
        reviewer.start()
        for _ in range(25):  # one header line each every 0.2 s: 5 s to finish, three times the 1.5 s deadline
            for c in slow:
                if c in cut:
                    continue
                try:
                    c.sendall(b"X-Slow: 1\r\n")
                except OSError:
                    cut.append(c)
            time.sleep(0.2)
        reviewer.join(30)
        assert [200] == answered
        first = slow[-1]  # the newest: never evicted for room, so only its deadline can end it
        first.settimeout(5)
        try:
            data = first.recv(1000)
        except OSError:
            data = b""
        assert first in cut or data == b"" or data.startswith(b"HTTP/1.1 408")
        assert held(webhook.proc.pid).threads <= 8
    finally:
        for c in slow:
            c.close()
    status, _ = webhook.review()
    assert 200 == status


def test_concurrent_worst_case_bodies_keep_the_webhook_under_the_chart_memory_limit(tmp_path: Path) -> None:
    """Issue 27 #4: one 8 MiB body of '{},' once took RSS from 31 to 240 MiB (limit 192 Mi), four at once 490-690."""
    hook = start_webhook(tmp_path)
    try:
        deep = b"[" * 900 + b"]" * 900 + b","
        bodies = [
            b"[" + b"{}," * ((8 << 20) // 3 - 1) + b"{}]",  # 8 MiB: over the body limit
            b"[" + b"{}," * ((4 << 20) // 3 - 1) + b"{}]",  # 4 MiB of empty objects: over the parse budget
            b"[" + deep * ((4 << 20) // len(deep) - 1) + b"[]]",  # 4 MiB of deep lists: over it too
            deep_lists_costing(PARSE_BUDGET_BYTES * 95 // 100),  # parsed, the most a hostile body can take
        ]
        results: dict[int, int] = {}

        def send(index: int, raw: bytes) -> None:
            try:
                results[index] = hook.review(raw, timeout=60)[0]
            except (OSError, http.client.HTTPException):
                results[index] = -1  # refused and closed while the client was still sending

        senders = [threading.Thread(target=send, args=(i, raw)) for i, raw in enumerate(bodies * 2)]
        for t in senders:
            t.start()
        status, answer = hook.review()  # a real review meanwhile
        for t in senders:
            t.join(120)
        assert 200 == status and json.loads(answer)["response"]["allowed"]
        over_the_limit, over_the_budget, parsed = {0, 4}, {1, 2, 5, 6}, {3, 7}
        assert all(results[i] in (413, -1) for i in over_the_limit), results
        assert all(results[i] == 413 for i in over_the_budget), results
        assert all(results[i] == 400 for i in parsed), results  # not an AdmissionReview: a 400 after parsing
        assert held(hook.proc.pid).peak_rss_mib < chart_webhook_memory_limit_mib()
    finally:
        stop_webhook(hook)


def test_an_oversize_body_is_refused_from_its_length_without_being_read(webhook: Webhook) -> None:
    raw = socket.create_connection(("127.0.0.1", webhook.port), timeout=10)
    with webhook.tls().wrap_socket(raw, server_hostname="127.0.0.1") as s:
        s.sendall(
            f"POST {VALIDATE_PATH} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {64 << 20}\r\n\r\n".encode()
            + b"{}," * 20_000
        )
        answer = s.recv(1000)
    assert answer.startswith(b"HTTP/1.1 413")
    assert held(webhook.proc.pid).peak_rss_mib < 100
