"""Benchmark: dra-gpu's kubelet plugin side by side with the Go reference driver, in one run.

Run by ``make bench`` (``python -m bench.peer`` from the repository root). Starts etcd +
kube-apiserver (``e2e.cluster.LocalCluster``), then for each of ``--runs`` runs starts both
drivers with fresh state dirs on one node ``node-a`` -- dra-gpu's plugin with 8 fake H100s
(``e2e.plugin_process.PluginProcess``) and the peer, kubernetes-sigs/dra-example-driver's kubelet
plugin with 8 fake GPUs (``e2e.peer_process``, built from ``../shared/peers/`` once and cached) --
and measures both with one gRPC client (the DRA v1 stubs in ``proto/dra/v1``):

* start: spawn until a NodePrepareResources with zero claims answers on the DRA socket, and
  spawn until all of the driver's ResourceSlices are in the API server (deleted before each start);
* idle RSS (VmRSS) one second after both started;
* prepare and unprepare latency: ``--claims`` allocated claims per driver, one claim per call
  over one kept-open channel (as the kubelet does), calls alternating between the two drivers;
* burst: ``--burst`` admin-access claims (so that many may hold 8 GPUs at once in both drivers)
  prepared concurrently from ``--threads`` threads, then unprepared likewise: claims/s, errors,
  and the peak RSS (VmHWM, reset through ``/proc/<pid>/clear_refs`` just before the burst).

Prints one table, metric | dra-gpu | Go peer | ratio (dra-gpu / peer), and the machine facts.
Latency percentiles pool every run's calls; the other figures are medians over runs. Without Go
or the peer's source (or with ``--no-peer``) it prints dra-gpu's figures alone and says why.
Every process it started is stopped on exit, on exceptions, on SIGINT/SIGTERM and at the
``--deadline``. Not a test: it asserts nothing about speed.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import grpc

from e2e.cluster import K8S_VERSION, ApiError, LocalCluster
from e2e.peer_process import PEER_DRIVER, PeerBinary, PeerProcess, PeerUnavailable, peer_binary
from e2e.plugin_process import PluginProcess
from proto.dra.v1 import api_pb2 as v1
from proto.dra.v1 import api_pb2_grpc as v1_grpc
from tests.claimdata import DRIVER as OUR_DRIVER
from tests.integration.claims import create_allocated_claim

NODE = "node-a"
ADMIN_NS = "bench-admin"  # labelled so that the API server accepts admin-access allocations
GPUS = 8
# Info logs (the peer logs at its default verbosity too) and no health port (the peer has none by default).
OUR_ARGS = ("--log-level", "info", "--healthcheck-port", "-1")
START_TIMEOUT_S = 90.0
CALL_TIMEOUT_S = 30.0

Ref = tuple[str, str, str]  # namespace, uid, name


class BenchTimeout(Exception):
    """The --deadline passed."""


# -- one client for both drivers ---------------------------------------------------------------


class DraClient:
    """The kubelet's side of one DRA socket: one kept-open channel, v1 calls, one claim per call."""

    def __init__(self, socket: Path) -> None:
        self.channel = grpc.insecure_channel(f"unix://{socket}")
        self.stub = v1_grpc.DRAPluginStub(self.channel)

    def prepare(self, ref: Ref) -> str:
        """Empty when the claim was prepared with at least one device, else the error."""
        try:
            resp = self.stub.NodePrepareResources(
                v1.NodePrepareResourcesRequest(claims=[v1.Claim(namespace=ref[0], uid=ref[1], name=ref[2])]),
                timeout=CALL_TIMEOUT_S,
            )
        except grpc.RpcError as err:
            return f"rpc {err.code().name}: {err.details()}"
        got = resp.claims.get(ref[1])
        if got is None:
            return "claim missing from the answer"
        return got.error or ("" if got.devices else "no devices")

    def unprepare(self, ref: Ref) -> str:
        try:
            resp = self.stub.NodeUnprepareResources(
                v1.NodeUnprepareResourcesRequest(claims=[v1.Claim(namespace=ref[0], uid=ref[1], name=ref[2])]),
                timeout=CALL_TIMEOUT_S,
            )
        except grpc.RpcError as err:
            return f"rpc {err.code().name}: {err.details()}"
        got = resp.claims.get(ref[1])
        return "claim missing from the answer" if got is None else got.error

    def close(self) -> None:
        self.channel.close()


def socket_answers(socket: Path) -> bool:
    """A NodePrepareResources with zero claims succeeds (a fresh channel: no reconnect backoff)."""
    if not socket.exists():
        return False
    try:
        with grpc.insecure_channel(f"unix://{socket}") as ch:
            v1_grpc.DRAPluginStub(ch).NodePrepareResources(v1.NodePrepareResourcesRequest(), timeout=1.0)
        return True
    except grpc.RpcError:
        return False


# -- the two drivers ---------------------------------------------------------------------------


class Driver:
    """One driver under test; ``launch`` spawns it in a fresh dir and returns at once."""

    label = ""
    driver = ""

    def launch(self, run_dir: Path) -> None:
        raise NotImplementedError

    @property
    def pid(self) -> int | None:
        raise NotImplementedError

    @property
    def dra_socket(self) -> Path:
        raise NotImplementedError

    def check_alive(self) -> None:
        raise NotImplementedError

    def settle(self) -> None:
        """Called once the socket answers and the slices are there."""

    def stop(self) -> None:
        raise NotImplementedError


class OurDriver(Driver):
    """dra-gpu's plugin through PluginProcess; its blocking start() runs in a thread while we poll."""

    label = "dra-gpu"
    driver = OUR_DRIVER

    def __init__(self, kubeconfig: Path) -> None:
        self.kubeconfig = kubeconfig
        self.plugin: PluginProcess | None = None
        self._thread: threading.Thread | None = None
        self._error: Exception | None = None

    def launch(self, run_dir: Path) -> None:
        self.plugin = PluginProcess(run_dir, kubeconfig=self.kubeconfig, node=NODE, publish=True, extra_args=OUR_ARGS)
        self._error = None
        self._thread = threading.Thread(target=self._start, args=(self.plugin,), name="start-dra-gpu", daemon=True)
        self._thread.start()

    def _start(self, plugin: PluginProcess) -> None:
        try:
            plugin.start(timeout=START_TIMEOUT_S)
        except (RuntimeError, OSError) as err:  # reported by check_alive/settle in the main thread
            self._error = err

    @property
    def pid(self) -> int | None:
        return None if self.plugin is None or self.plugin.proc is None else self.plugin.proc.pid

    @property
    def dra_socket(self) -> Path:
        assert self.plugin is not None
        return self.plugin.dra_socket

    def check_alive(self) -> None:
        if self._error is not None:
            raise RuntimeError(f"dra-gpu plugin failed to start: {self._error}")

    def settle(self) -> None:
        if self._thread is not None:
            self._thread.join(START_TIMEOUT_S)
        self.check_alive()

    def stop(self) -> None:
        if self.plugin is None:
            return
        if self._thread is not None and self._thread.is_alive() and self.plugin.proc is None:
            time.sleep(0.5)  # the thread is about to spawn it
        self.plugin.stop()
        if self._thread is not None:
            self._thread.join(5.0)


class GoPeer(Driver):
    label = "Go peer"
    driver = PEER_DRIVER

    def __init__(self, binary: Path, kubeconfig: Path) -> None:
        self.binary = binary
        self.kubeconfig = kubeconfig
        self.proc: PeerProcess | None = None

    def launch(self, run_dir: Path) -> None:
        self.proc = PeerProcess(self.binary, run_dir, kubeconfig=self.kubeconfig, node=NODE, num_devices=GPUS)
        self.proc.start()

    @property
    def pid(self) -> int | None:
        return None if self.proc is None or self.proc.proc is None else self.proc.proc.pid

    @property
    def dra_socket(self) -> Path:
        assert self.proc is not None
        return self.proc.dra_socket

    def check_alive(self) -> None:
        if self.proc is not None and self.proc.proc is not None and self.proc.proc.poll() is not None:
            raise RuntimeError(f"peer exited with {self.proc.proc.returncode}:\n{self.proc.tail()}")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stop()


# -- measurements ------------------------------------------------------------------------------


def proc_status_kib(pid: int, key: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return float(line.split()[1])
    return float("nan")


def reset_peak_rss(pid: int) -> bool:
    """Reset VmHWM to the current RSS (Linux clear_refs 5); False when not allowed."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
        return True
    except OSError:
        return False


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
    slices_s: float


def measure_start(cluster: LocalCluster, d: Driver, run_dir: Path) -> Start:
    """Spawn ``d`` and poll its DRA socket (every 5 ms) and its slices (every 25 ms)."""
    delete_slices(cluster, d.driver)
    t0 = time.perf_counter()
    d.launch(run_dir)
    sock_s: float | None = None
    slices_s: float | None = None
    next_slices = t0
    while sock_s is None or slices_s is None:
        now = time.perf_counter()
        if now - t0 > START_TIMEOUT_S:
            raise RuntimeError(f"{d.label} not ready after {START_TIMEOUT_S:.0f}s (socket {sock_s}, slices {slices_s})")
        d.check_alive()
        if sock_s is None and d.pid is not None and socket_answers(d.dra_socket):
            sock_s = time.perf_counter() - t0
        if slices_s is None and now >= next_slices:
            next_slices = now + 0.025
            if slices_complete(cluster, d.driver):
                slices_s = time.perf_counter() - t0
        time.sleep(0.005)
    d.settle()
    return Start(sock_s, slices_s)


@dataclass
class Figures:
    """One driver's measurements over all runs."""

    prepare_ms: list[float] = field(default_factory=list)
    unprepare_ms: list[float] = field(default_factory=list)
    call_errors: int = 0
    first_error: str = ""
    socket_s: list[float] = field(default_factory=list)
    slices_s: list[float] = field(default_factory=list)
    idle_rss_mib: list[float] = field(default_factory=list)
    peak_rss_mib: list[float] = field(default_factory=list)
    peak_is_lifetime: bool = False
    burst_prepare_cps: list[float] = field(default_factory=list)
    burst_unprepare_cps: list[float] = field(default_factory=list)
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


def burst(d: Driver, client: DraClient, refs: list[Ref], threads: int, fig: Figures) -> None:
    """All ``refs`` prepared concurrently, then all unprepared concurrently; one claim per call."""
    assert d.pid is not None
    if not reset_peak_rss(d.pid):
        fig.peak_is_lifetime = True
    pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix=f"burst-{d.label}")
    try:
        for call, out in ((client.prepare, fig.burst_prepare_cps), (client.unprepare, fig.burst_unprepare_cps)):
            t0 = time.perf_counter()
            errors = [e for e in pool.map(call, refs) if e]
            out.append(len(refs) / (time.perf_counter() - t0))
            fig.burst_errors += len(errors)
            if errors:
                fig.first_error = fig.first_error or f"burst: {errors[0]}"
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    fig.peak_rss_mib.append(proc_status_kib(d.pid, "VmHWM") / 1024)


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


# -- process safety ----------------------------------------------------------------------------


def _raise_timeout(signum: int, frame: FrameType | None) -> None:
    raise BenchTimeout


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


class Guard:
    """Makes the --deadline (SIGALRM) and SIGTERM exceptions, so the finally-blocks stop every process.

    ``cleaning()`` starts the cleanup: Ctrl-C is ignored from then on, and if stopping takes
    over ``cleanup_s`` every pid ``live`` names gets SIGKILL and the bench exits.
    """

    def __init__(self, deadline_s: int, cleanup_s: int, live: Callable[[], list[int]]) -> None:
        self.deadline_s = deadline_s
        self.cleanup_s = cleanup_s
        self.live = live
        self._old: list[tuple[int, Any]] = []

    def __enter__(self) -> Guard:
        for sig, handler in ((signal.SIGALRM, _raise_timeout), (signal.SIGTERM, _raise_interrupt), (signal.SIGINT, None)):
            self._old.append((sig, signal.getsignal(sig)))
            if handler is not None:
                signal.signal(sig, handler)
        signal.alarm(self.deadline_s)
        return self

    def cleaning(self) -> None:
        signal.alarm(0)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGALRM, self._hard_exit)
        signal.alarm(self.cleanup_s)

    def _hard_exit(self, signum: int, frame: FrameType | None) -> None:
        pids = self.live()
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        print(f"bench: cleanup took over {self.cleanup_s}s; sent SIGKILL to {pids}", file=sys.stderr)
        os._exit(3)

    def __exit__(self, *exc: object) -> None:
        signal.alarm(0)
        for sig, handler in reversed(self._old):
            signal.signal(sig, handler)


# -- reporting ---------------------------------------------------------------------------------


def pct(values: Sequence[float], p: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def med(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def fs_of(path: Path) -> str:
    """Filesystem type of the mount holding ``path`` (from /proc/mounts)."""
    best, kind = "", "?"
    try:
        target = str(path.resolve())
        for line in Path("/proc/mounts").read_text().splitlines():
            parts = line.split()
            mnt, fstype = parts[1], parts[2]
            if (target == mnt or target.startswith(mnt.rstrip("/") + "/")) and len(mnt) >= len(best):
                best, kind = mnt, fstype
    except OSError:
        pass
    return kind


def table(rows: list[tuple[str, float, float | None, str]]) -> str:
    """metric | dra-gpu | Go peer | ratio; ``fmt`` is the number format of both figures."""
    out = [f"{'metric':<44} {'dra-gpu':>10} {'Go peer':>10} {'ratio':>8}", "-" * 75]
    for metric, ours, peer, fmt in rows:
        peer_s = "—" if peer is None else format(peer, fmt)
        ratio = "" if peer is None or peer == 0 or ours != ours or peer != peer else f"{ours / peer:.2f}x"
        out.append(f"{metric:<44} {format(ours, fmt):>10} {peer_s:>10} {ratio:>8}")
    return "\n".join(out)


def report(figs: dict[str, Figures], args: argparse.Namespace, facts: list[str], peer_note: str) -> str:
    o = figs["dra-gpu"]
    p = figs.get("Go peer")

    def row(metric: str, get: Callable[[Figures], float], fmt: str) -> tuple[str, float, float | None, str]:
        return metric, get(o), None if p is None else get(p), fmt

    peak = "peak RSS during burst (VmHWM), MiB"
    if o.peak_is_lifetime or (p is not None and p.peak_is_lifetime):
        peak = "peak RSS since start (VmHWM), MiB"
    rows = [
        row("prepare p50, ms", lambda f: pct(f.prepare_ms, 50), ".2f"),
        row("prepare p99, ms", lambda f: pct(f.prepare_ms, 99), ".2f"),
        row("unprepare p50, ms", lambda f: pct(f.unprepare_ms, 50), ".2f"),
        row("unprepare p99, ms", lambda f: pct(f.unprepare_ms, 99), ".2f"),
        row("sequential call errors", lambda f: f.call_errors, ".0f"),
        row("start -> DRA socket answers, s", lambda f: med(f.socket_s), ".3f"),
        row("start -> all ResourceSlices in API server, s", lambda f: med(f.slices_s), ".3f"),
        row("idle RSS after start (VmRSS), MiB", lambda f: med(f.idle_rss_mib), ".1f"),
        row(peak, lambda f: med(f.peak_rss_mib), ".1f"),
        row(f"burst prepare ({args.burst} claims), claims/s", lambda f: med(f.burst_prepare_cps), ".1f"),
        row(f"burst unprepare ({args.burst} claims), claims/s", lambda f: med(f.burst_unprepare_cps), ".1f"),
        row("burst errors", lambda f: f.burst_errors, ".0f"),
    ]
    lines = [
        f"dra-gpu kubelet plugin vs Go peer: {args.claims} claims x {args.runs} runs "
        f"(latency: one claim per call, alternating drivers; burst: {args.burst} claims from {args.threads} threads)",
        "",
        table(rows),
        "",
        "ratio = dra-gpu / peer (for claims/s, < 1 means dra-gpu is slower). Latency percentiles pool all runs;",
        "start, RSS and burst figures are medians over runs.",
    ]
    for label, f in figs.items():
        lines.append(
            f"{label} per run: socket {' '.join(f'{x:.3f}' for x in f.socket_s)} s; "
            f"slices {' '.join(f'{x:.3f}' for x in f.slices_s)} s"
        )
        if f.first_error:
            lines.append(f"{label} first error: {f.first_error}")
    lines += ["", "peer: " + peer_note, *facts]
    return "\n".join(lines)


def machine_facts(state_root: Path, binary: PeerBinary | None) -> list[str]:
    cores = os.cpu_count()
    usable = len(os.sched_getaffinity(0))
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    kind = fs_of(state_root)
    medium = "tmpfs (memory)" if kind in ("tmpfs", "ramfs") else f"{kind} (disk)"
    facts = [
        f"machine: {cores} cores ({usable} usable), load average {load} at start, {platform.machine()} {platform.release()}",
        f"state dirs: {state_root} on {medium}",
        f"python {platform.python_version()}, grpcio {grpc.__version__}, Kubernetes {K8S_VERSION} API server (local etcd)",
    ]
    if binary is not None:
        try:
            gover = subprocess.run(["go", "version", str(binary.path)], capture_output=True, text=True, timeout=10, check=False)
            built = gover.stdout.strip().rsplit(": ", 1)[-1] or "go ?"
        except (OSError, subprocess.TimeoutExpired):
            built = "go ?"
        facts.append(f"peer binary: {binary.path} ({built})")
    return facts


# -- main --------------------------------------------------------------------------------------


def run_bench(args: argparse.Namespace, binary: PeerBinary | None, peer_note: str, state_root: Path) -> str:
    facts = machine_facts(state_root, binary)
    drivers: list[Driver] = []
    cluster = LocalCluster()
    clients: list[DraClient] = []

    def live() -> list[int]:
        pids = [d.pid for d in drivers if d.pid is not None]
        return [*pids, *cluster.pids.values()]

    with Guard(args.deadline, 60, live) as guard:
        try:
            cluster.start()
            cluster.add_node(NODE)
            cluster.api(
                "POST",
                "/api/v1/namespaces",
                {
                    "apiVersion": "v1",
                    "kind": "Namespace",
                    "metadata": {"name": ADMIN_NS, "labels": {"resource.kubernetes.io/admin-access": "true"}},
                },
            )
            drivers.append(OurDriver(cluster.kubeconfig))
            if binary is not None:
                drivers.append(GoPeer(binary.path, cluster.kubeconfig))
            figs = {d.label: Figures() for d in drivers}
            t0 = time.monotonic()
            seq = {d.label: create_claims(cluster, claim_specs(d, "seq", args.claims + 1, admin=False)) for d in drivers}
            bursts = {d.label: create_claims(cluster, claim_specs(d, "burst", args.burst, admin=True)) for d in drivers}
            print(
                f"bench: {sum(map(len, [*seq.values(), *bursts.values()]))} claims created in {time.monotonic() - t0:.1f}s",
                file=sys.stderr,
            )
            for run in range(args.runs):
                order = drivers if run % 2 == 0 else drivers[::-1]
                for d in order:
                    s = measure_start(cluster, d, state_root / f"run{run}" / d.label.replace(" ", "-"))
                    figs[d.label].socket_s.append(s.socket_s)
                    figs[d.label].slices_s.append(s.slices_s)
                time.sleep(1.0)
                for d in drivers:
                    assert d.pid is not None
                    figs[d.label].idle_rss_mib.append(proc_status_kib(d.pid, "VmRSS") / 1024)
                clients = [DraClient(d.dra_socket) for d in drivers]
                for d, c in zip(drivers, clients, strict=True):  # warm the channel and the API clients
                    warm = seq[d.label][-1]
                    for err in (c.prepare(warm), c.unprepare(warm)):
                        if err:
                            figs[d.label].error(f"warm-up: {err}")
                latency([(d, c, seq[d.label], figs[d.label]) for d, c in _ordered(drivers, clients, run)], args.claims)
                for d, c in _ordered(drivers, clients, run):
                    burst(d, c, bursts[d.label], args.threads, figs[d.label])
                print(
                    f"bench: run {run + 1}/{args.runs} done "
                    + "; ".join(
                        f"{d.label} socket {figs[d.label].socket_s[-1]:.3f}s slices {figs[d.label].slices_s[-1]:.3f}s"
                        for d in drivers
                    ),
                    file=sys.stderr,
                )
                for c in clients:
                    c.close()
                clients = []
                for d in drivers:
                    d.stop()
        finally:
            guard.cleaning()
            for c in clients:
                c.close()
            for d in drivers:
                d.stop()
            cluster.stop()
    return report(figs, args, facts, peer_note)


def _ordered(drivers: list[Driver], clients: list[DraClient], run: int) -> list[tuple[Driver, DraClient]]:
    pairs = list(zip(drivers, clients, strict=True))
    return pairs if run % 2 == 0 else pairs[::-1]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.peer", description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--claims", type=int, default=200, help="claims per driver for the latency figures")
    parser.add_argument("--runs", type=int, default=3, help="fresh starts of both drivers")
    parser.add_argument("--burst", type=int, default=200, help="claims prepared concurrently per driver")
    parser.add_argument("--threads", type=int, default=32, help="client threads of the burst")
    parser.add_argument("--no-peer", action="store_true", help="measure dra-gpu alone")
    parser.add_argument("--deadline", type=int, default=1800, help="seconds; then everything is stopped")
    args = parser.parse_args(argv)

    binary: PeerBinary | None = None
    if args.no_peer:
        peer_note = "not run (--no-peer)"
    else:
        print("bench: building or finding the peer...", file=sys.stderr)
        try:
            binary = peer_binary()
            how = "cached" if binary.build_seconds is None else f"built in {binary.build_seconds:.1f}s"
            peer_note = f"kubernetes-sigs/dra-example-driver {binary.commit} kubelet plugin ({how}), 8 fake GPUs, QPS/burst 1000"
        except PeerUnavailable as err:
            peer_note = f"column empty: {err}"
            print(f"bench: {peer_note}", file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="dra-gpu-bench-peer-") as tmp:
        try:
            print(run_bench(args, binary, peer_note, Path(tmp)))
        except BenchTimeout:
            print(f"bench: deadline of {args.deadline}s passed; every process was stopped", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            print("bench: interrupted; every process was stopped", file=sys.stderr)
            return 130
        except ApiError as err:
            print(f"bench: API server error: {err}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
