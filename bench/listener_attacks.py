"""Benchmark: the attacks of issue 27 on the daemons' HTTP listeners, with the figures the issue reports.

Runs the real kubelet plugin (fake H100s, claims in a real kube-apiserver) and the real webhook,
each started as a container starts them (soft limit of open files 1,024, the hard one above it),
and for each attack prints what the daemon holds (threads, open descriptors, peak RSS) and how
long the work that matters takes meanwhile:

1. ``plugin-metrics-flood``: idle TCP connections to the plugin's /metrics; a prepare meanwhile.
2. ``webhook-metrics-flood``: idle connections to the webhook's /metrics; a review meanwhile.
3. ``webhook-slowloris``: TLS clients sending one header line every 5 s; a review meanwhile.
4. ``webhook-one-8MiB-body``, ``webhook-four-8MiB``, ``webhook-eight-worst``: one 8 MiB body of
   ``{},``, four at once, and eight at once of the worst shapes (8 MiB, 4 MiB of empty objects,
   4 MiB of deep lists, and deep lists just within the parse budget, which are parsed); peak RSS
   against the chart's 192 Mi, a review meanwhile.

``--code DIR`` runs the daemons from another source tree, for the figures before a change:
``git archive <rev> | tar -x -C DIR``. A review or prepare gets the API server's 10 s. Not a
test: it asserts nothing; ``python -m bench.listener_attacks`` from the repository root.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from testkit.admission import DRIVER, GOOD, body, claim_obj, request
from testkit.claims import create_allocated_claim
from testkit.cluster import LocalCluster
from testkit.plugin_process import ROOT, PluginProcess
from testkit.webhookcerts import Certs, make_certs
from webhook.admission import VALIDATE_PATH
from webhook.server import PARSE_BUDGET_BYTES, review_cost

ANSWER_TIMEOUT_S = 10.0
"""The API server's wait for the webhook (the chart's timeoutSeconds), and the bench's for a prepare."""


def proc_figures(pid: int) -> dict[str, float]:
    status = Path(f"/proc/{pid}/status").read_text()
    fields = {line.split(":")[0]: line.split(":")[1].split() for line in status.splitlines() if ":" in line}
    try:
        fds = sum(1 for _ in Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        fds = -1
    return {
        "threads": int(fields["Threads"][0]),
        "fds": fds,
        "rss_mib": int(fields["VmRSS"][0]) / 1024,
        "peak_rss_mib": int(fields["VmHWM"][0]) / 1024,
    }


def cpu_percent(pid: int, seconds: float = 1.0) -> float:
    def ticks() -> int:
        parts = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return int(parts[11]) + int(parts[12])

    t0 = ticks()
    time.sleep(seconds)
    return (ticks() - t0) / os.sysconf("SC_CLK_TCK") / seconds * 100


def timed(action: Callable[[], str]) -> str:
    """``<seconds> s <outcome>`` of one call, or what it failed with."""
    t0 = time.perf_counter()
    try:
        outcome = action()
    except Exception as err:  # noqa: BLE001 - the failure is the figure
        return f"failed after {time.perf_counter() - t0:.2f} s: {type(err).__name__}: {str(err)[:80]}"
    return f"{time.perf_counter() - t0:.3f} s {outcome}"


def idle_flood(port: int, count: int) -> list[socket.socket]:
    out = []
    for _ in range(count):
        s = socket.socket()
        s.settimeout(1.0)
        try:
            s.connect(("127.0.0.1", port))
        except OSError:
            s.close()
            continue
        out.append(s)
    return out


def line(attack: str, code: str, figures: dict[str, float], extra: str) -> None:
    print(
        f"{attack:22s} {code:7s} threads {figures['threads']:5.0f}  fds {figures['fds']:5.0f}  "
        f"rss {figures['rss_mib']:6.1f} MiB  peak {figures['peak_rss_mib']:6.1f} MiB  {extra}",
        flush=True,
    )


def nofile_wrapper(directory: Path, code: Path | None) -> Path:
    """A python that starts with soft RLIMIT_NOFILE 1,024 (a container's), running ``code`` if given."""
    wrapper = directory / "python-1024"
    path = f'export PYTHONPATH="{code}"\ncd "{code}"\n' if code else ""
    wrapper.write_text(f'#!/bin/sh\nulimit -Sn 1024\n{path}exec "{sys.executable}" "$@"\n')
    wrapper.chmod(0o755)
    return wrapper


# -- the plugin ----------------------------------------------------------------------------------


def plugin_attack(work: Path, code: Path | None, label: str, connections: int) -> None:
    with LocalCluster(log_dir=work / "k8s") as cluster:
        cluster.add_node("node-a")
        plugin = PluginProcess(
            work / "p",
            kubeconfig=cluster.kubeconfig,
            python=nofile_wrapper(work, code),
            extra_args=("--metrics-port", "0", "--metrics-address", "127.0.0.1") if code else (),
        )
        plugin.start(timeout=60)
        try:
            assert plugin.proc is not None
            pid = plugin.proc.pid
            port = int(plugin.metrics_url().split(":")[2].split("/")[0])
            line("plugin-metrics-flood", label, proc_figures(pid), "(before the flood)")
            idle = idle_flood(port, connections)
            time.sleep(1.0)
            figures = proc_figures(pid)
            cpu = cpu_percent(pid)
            ref = create_allocated_claim(cluster, name=f"b-{uuid.uuid4().hex[:8]}", devices=["gpu-1"])

            def prepare() -> str:
                error = plugin.prepare([ref]).claims[ref[1]].error
                return "prepared" if not error else f"error: {error[:90]}"

            result = timed(prepare)
            line("plugin-metrics-flood", label, figures, f"{len(idle)} conns, cpu {cpu:.0f}%, prepare: {result}")
            for s in idle:
                s.close()
        finally:
            plugin.stop()


# -- the webhook ---------------------------------------------------------------------------------


class Webhook:
    def __init__(self, work: Path, code: Path | None) -> None:
        self.certs: Certs = make_certs(work / "tls")
        self.log = work / "webhook.log"
        argv = [
            str(nofile_wrapper(work, code)), "-m", "webhook.main", "--bind-address", "127.0.0.1", "--port", "0",
            "--tls-cert-file", str(self.certs.cert), "--tls-private-key-file", str(self.certs.key),
            "--driver-name", DRIVER, "--metrics-port", "0", "--metrics-address", "127.0.0.1",
        ]  # fmt: skip
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                argv, cwd=code or ROOT, env={**os.environ, "PYTHONUNBUFFERED": "1"}, stdout=out, stderr=subprocess.STDOUT
            )
        deadline = time.monotonic() + 30
        while not self._port("webhook_serving"):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(self.log.read_text()[-2000:])
            time.sleep(0.05)
        self.port = self._port("webhook_serving")
        self.metrics_port = self._port("metrics_listening")

    def _port(self, event: str) -> int:
        for raw in self.log.read_text().splitlines():
            try:
                e = json.loads(raw)
            except ValueError:
                continue
            if e.get("event") == event:
                return int(e["port"])
        return 0

    def tls(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.certs.ca))

    def review(self, raw: bytes | None = None, timeout: float = ANSWER_TIMEOUT_S) -> str:
        conn = http.client.HTTPSConnection("127.0.0.1", self.port, context=self.tls(), timeout=timeout)
        try:
            conn.request(
                "POST", VALIDATE_PATH, body=raw or body(request(claim_obj(GOOD))), headers={"Content-Type": "application/json"}
            )
            resp = conn.getresponse()
            resp.read()
            return str(resp.status)
        finally:
            conn.close()

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@contextmanager
def webhook(work: Path, code: Path | None) -> Iterator[Webhook]:
    hook = Webhook(work, code)
    try:
        yield hook
    finally:
        hook.stop()


def webhook_metrics_flood(work: Path, code: Path | None, label: str, connections: int) -> None:
    with webhook(work / "wm", code) as hook:
        idle = idle_flood(hook.metrics_port, connections)
        time.sleep(1.0)
        figures = proc_figures(hook.proc.pid)
        result = timed(lambda: "answered " + hook.review())
        line("webhook-metrics-flood", label, figures, f"{len(idle)} conns, review: {result}")
        for s in idle:
            s.close()


def webhook_slowloris(work: Path, code: Path | None, label: str, clients: int) -> None:
    with webhook(work / "ws", code) as hook:
        slow: list[ssl.SSLSocket] = []
        stop = threading.Event()

        def open_clients() -> None:
            for _ in range(clients):
                if stop.is_set():
                    return
                try:
                    raw = socket.create_connection(("127.0.0.1", hook.port), timeout=5)
                    tls = hook.tls().wrap_socket(raw, server_hostname="127.0.0.1")
                    tls.sendall(f"POST {VALIDATE_PATH} HTTP/1.1\r\nHost: x\r\n".encode())
                    slow.append(tls)
                except OSError:
                    continue

        def trickle() -> None:
            while not stop.wait(5.0):
                for c in list(slow):
                    try:
                        c.sendall(b"X-Slow: 1\r\n")
                    except OSError:
                        slow.remove(c)

        opener = threading.Thread(target=open_clients, daemon=True)
        trickler = threading.Thread(target=trickle, daemon=True)
        opener.start()
        trickler.start()
        opener.join(120)
        time.sleep(1.0)
        figures = proc_figures(hook.proc.pid)
        result = timed(lambda: "answered " + hook.review())
        line("webhook-slowloris", label, figures, f"{len(slow)} slow TLS clients holding on, review: {result}")
        stop.set()
        for c in slow:
            c.close()


def concurrent_bodies(hook: Webhook, bodies: list[bytes]) -> tuple[str, str]:
    """Send ``bodies`` at once and a real review meanwhile: what each got, and the review's time."""
    outcomes: dict[int, str] = {}

    def send(index: int, raw: bytes) -> None:
        outcomes[index] = timed(lambda: hook.review(raw, timeout=60))

    senders = [threading.Thread(target=send, args=(i, raw)) for i, raw in enumerate(bodies)]
    for t in senders:
        t.start()
    time.sleep(0.2)
    result = timed(lambda: "answered " + hook.review())
    for t in senders:
        t.join(120)
    got = [outcomes.get(i, "none") for i in range(len(bodies))]
    return ", ".join(o.split(" s ")[-1] if o[0].isdigit() else o.split(":")[0] for o in got), result


def webhook_bodies(work: Path, code: Path | None, label: str) -> None:
    empty_objects_8 = b"[" + b"{}," * ((8 << 20) // 3 - 1) + b"{}]"
    empty_objects_4 = b"[" + b"{}," * ((4 << 20) // 3 - 1) + b"{}]"
    deep = b"[" * 900 + b"]" * 900 + b","
    deep_lists_4 = b"[" + deep * ((4 << 20) // len(deep) - 1) + b"[]]"
    budget_edge = b"[" + deep * (PARSE_BUDGET_BYTES * 95 // 100 // review_cost(deep)) + b"[]]"
    with webhook(work / "wb1", code) as hook:
        base = proc_figures(hook.proc.pid)
        result = timed(lambda: "answered " + hook.review(empty_objects_8, timeout=60))
        line(
            "webhook-one-8MiB-body", label, proc_figures(hook.proc.pid), f"baseline peak {base['peak_rss_mib']:.1f} MiB; {result}"
        )
    with webhook(work / "wb4", code) as hook:
        codes, result = concurrent_bodies(hook, [empty_objects_8] * 4)
        line("webhook-four-8MiB", label, proc_figures(hook.proc.pid), f"bodies got [{codes}]; review meanwhile: {result}")
    with webhook(work / "wb8", code) as hook:
        mix = [empty_objects_8, empty_objects_4, deep_lists_4, budget_edge] * 2
        codes, result = concurrent_bodies(hook, mix)
        line("webhook-eight-worst", label, proc_figures(hook.proc.pid), f"bodies got [{codes}]; review meanwhile: {result}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--code", type=Path, help="run the daemons from this source tree (figures before a change)")
    p.add_argument("--label", default="", help="what to call this run in the output (default: before with --code, else after)")
    p.add_argument("--connections", type=int, default=1500, help="idle connections of the metrics floods")
    p.add_argument("--slowloris", type=int, default=1000, help="slow TLS clients")
    p.add_argument("--only", choices=["plugin", "webhook"], help="one daemon's attacks")
    a = p.parse_args()
    label = a.label or ("before" if a.code else "after")
    code = a.code.resolve() if a.code else None
    with tempfile.TemporaryDirectory(prefix="attacks-") as tmp:
        work = Path(tmp)
        if a.only in (None, "plugin"):
            plugin_attack(work, code, label, a.connections)
        if a.only in (None, "webhook"):
            webhook_metrics_flood(work, code, label, a.connections)
            webhook_slowloris(work, code, label, a.slowloris)
            webhook_bodies(work, code, label)


if __name__ == "__main__":
    main()
