"""The measurements: start times (DRA socket, first claim, ResourceSlices), RSS from /proc, sequential prepare/unprepare latency.

Also ``Figures`` (one driver's numbers over all runs) and the claims the calls use. Called by
``bench.peer.run.run_bench``; ``Figures`` and ``proc_status_kib`` are shared with ``bench.peer.burst``
and read by ``bench.peer.report``.
"""

from __future__ import annotations

import os
import threading
import time
import urllib.parse
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.peer.client import DraClient, Ref, socket_answers
from bench.peer.drivers import GPUS, NODE, START_TIMEOUT_S, Driver
from testkit.claimdata import DRIVER as OUR_DRIVER
from testkit.claims import create_allocated_claim
from testkit.cluster import LocalCluster

ADMIN_NS = "bench-admin"  # labelled so that the API server accepts admin-access allocations


def proc_status_kib(pid: int, key: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return float(line.split()[1])
    return float("nan")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used so far (``/proc/PID/stat``; clock-tick resolution)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def slices_path(driver: str) -> str:
    return "/apis/resource.k8s.io/v1/resourceslices?fieldSelector=" + urllib.parse.quote(f"spec.driver={driver}")


def slices_complete(cluster: LocalCluster, driver: str) -> bool:
    """Every pool of ``driver`` has all ``resourceSliceCount`` slices of its newest generation."""
    items = cluster.api("GET", slices_path(driver)).get("items", [])
    pools: dict[str, list[dict[str, Any]]] = {}
    for s in items:
        pools.setdefault(s["spec"]["pool"]["name"], []).append(s["spec"]["pool"])
    if not pools:
        return False
    for members in pools.values():
        newest = max(p["generation"] for p in members)
        current = [p for p in members if p["generation"] == newest]
        if len(current) != current[0]["resourceSliceCount"]:
            return False
    return True


def delete_slices(cluster: LocalCluster, driver: str, timeout: float = 30.0) -> None:
    cluster.api("DELETE", slices_path(driver))
    end = time.monotonic() + timeout
    while cluster.api("GET", slices_path(driver)).get("items"):
        if time.monotonic() > end:
            raise RuntimeError(f"{driver}'s ResourceSlices still there after {timeout:.0f}s")
        time.sleep(0.05)


@dataclass
class Start:
    socket_s: float
    claim_s: float
    slices_s: float


class _FirstClaim:
    """Once the socket answers: prepare ``ref`` until it succeeds (on a thread: a held call must not delay the slice polls)."""

    def __init__(self, socket: Path, ref: Ref, t0: float) -> None:
        self.client = DraClient(socket)
        self.ref = ref
        self.t0 = t0
        self.seconds: float | None = None
        self.last_error = ""
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="first-claim", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            err = self.client.prepare(self.ref)
            if not err:
                self.seconds = time.perf_counter() - self.t0
                return
            self.last_error = err
            time.sleep(0.005)

    def finish(self) -> None:
        self.stop.set()
        self.thread.join(START_TIMEOUT_S)
        if self.seconds is not None and (err := self.client.unprepare(self.ref)):
            raise RuntimeError(f"unprepare of the first claim failed: {err}")
        self.client.close()


def measure_start(cluster: LocalCluster, d: Driver, run_dir: Path, first: Ref) -> Start:
    """Spawn ``d``; poll its DRA socket (every 5 ms), then prepare ``first`` until it succeeds, and poll its slices (25 ms).

    The socket answers an empty NodePrepareResources (the liveness probe's call, which touches no
    state); the first claim prepared is when the kubelet's calls are answered.
    """
    delete_slices(cluster, d.driver)
    t0 = time.perf_counter()
    d.launch(run_dir)
    sock_s: float | None = None
    slices_s: float | None = None
    claim: _FirstClaim | None = None
    next_slices = t0
    try:
        while sock_s is None or slices_s is None or claim is None or claim.seconds is None:
            now = time.perf_counter()
            if now - t0 > START_TIMEOUT_S:
                raise RuntimeError(
                    f"{d.label} not ready after {START_TIMEOUT_S:.0f}s (socket {sock_s}, slices {slices_s}, "
                    f"first claim: {claim.last_error if claim else 'not tried'})"
                )
            d.check_alive()
            if sock_s is None and d.pid is not None and socket_answers(d.dra_socket):
                sock_s = time.perf_counter() - t0
                claim = _FirstClaim(d.dra_socket, first, t0)
            if slices_s is None and now >= next_slices:
                next_slices = now + 0.025
                if slices_complete(cluster, d.driver):
                    slices_s = time.perf_counter() - t0
            time.sleep(0.005)
    finally:
        if claim is not None:
            claim.finish()
    d.settle()
    assert claim.seconds is not None
    return Start(sock_s, claim.seconds, slices_s)


@dataclass
class Figures:
    """One driver's measurements over all runs."""

    prepare_ms: list[float] = field(default_factory=list)
    unprepare_ms: list[float] = field(default_factory=list)
    call_errors: int = 0
    first_error: str = ""
    socket_s: list[float] = field(default_factory=list)
    claim_s: list[float] = field(default_factory=list)
    """Start to the first claim prepared (the DRA socket answering a call with a claim)."""
    slices_s: list[float] = field(default_factory=list)
    idle_rss_mib: list[float] = field(default_factory=list)
    idle_anon_mib: list[float] = field(default_factory=list)
    idle_file_mib: list[float] = field(default_factory=list)
    peak_rss_mib: list[float] = field(default_factory=list)
    peak_is_lifetime: bool = False
    burst_prepare_cps: list[float] = field(default_factory=list)
    burst_unprepare_cps: list[float] = field(default_factory=list)
    burst_prepare_cpu_ms: list[float] = field(default_factory=list)
    """The driver process's CPU time per claim in the prepare burst."""
    burst_unprepare_cpu_ms: list[float] = field(default_factory=list)
    burst_prepare_server_cpu_ms: list[float] = field(default_factory=list)
    """The API server's and etcd's CPU time per claim in the prepare burst (claim reads, status writes)."""
    burst_prepare_client_cpu_ms: list[float] = field(default_factory=list)
    """The bench's own CPU time per claim in the prepare burst (the gRPC client, as the kubelet would be)."""
    burst_errors: int = 0

    def error(self, msg: str) -> None:
        self.call_errors += 1
        self.first_error = self.first_error or msg


def timed(call: Callable[[Ref], str], ref: Ref) -> tuple[float, str]:
    t0 = time.perf_counter()
    err = call(ref)
    return (time.perf_counter() - t0) * 1000, err


def latency(order: list[tuple[Driver, DraClient, list[Ref], Figures]], n: int) -> None:
    """Claim i: prepare on each driver, then unprepare on each; who goes first alternates with i."""
    for i in range(n):
        turn = order if i % 2 == 0 else order[::-1]
        for _, client, refs, fig in turn:
            ms, err = timed(client.prepare, refs[i])
            fig.prepare_ms.append(ms)
            if err:
                fig.error(f"prepare: {err}")
        for _, client, refs, fig in turn:
            ms, err = timed(client.unprepare, refs[i])
            fig.unprepare_ms.append(ms)
            if err:
                fig.error(f"unprepare: {err}")


def create_claims(cluster: LocalCluster, specs: list[dict[str, Any]]) -> list[Ref]:
    """Create allocated claims from ``create_allocated_claim`` keyword sets, 8 at a time."""
    with ThreadPoolExecutor(max_workers=8) as pool:
        return list(pool.map(lambda kw: create_allocated_claim(cluster, **kw), specs))


def claim_specs(d: Driver, prefix: str, n: int, admin: bool) -> list[dict[str, Any]]:
    tag = "ours" if d.driver == OUR_DRIVER else "peer"
    return [
        {
            "name": f"{prefix}-{tag}-{i}",
            "namespace": ADMIN_NS if admin else "default",
            "node": NODE,
            "driver": d.driver,
            "devices": [f"gpu-{i % GPUS}"],
            **({"result_fields": [{"adminAccess": True}]} if admin else {}),
        }
        for i in range(n)
    ]
