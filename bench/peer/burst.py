"""The burst: admin-access claims prepared, then unprepared, concurrently from many threads; claims/s and peak RSS.

Called by ``bench.peer.run.run_bench`` once per driver per run.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench.peer.client import DraClient, Ref
from bench.peer.drivers import Driver
from bench.peer.measure import Figures, cpu_seconds, proc_status_kib


def reset_peak_rss(pid: int) -> bool:
    """Reset VmHWM to the current RSS (Linux clear_refs 5); False when not allowed."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def burst(d: Driver, client: DraClient, refs: list[Ref], threads: int, fig: Figures, servers: list[int]) -> None:
    """All ``refs`` prepared concurrently, then all unprepared concurrently; one claim per call.

    Besides claims/s, the CPU time each party used per claim: the driver, the API server and etcd
    (``servers``), and this process (the client): on a small machine they share the cores.
    """
    assert d.pid is not None
    if not reset_peak_rss(d.pid):
        fig.peak_is_lifetime = True
    pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix=f"burst-{d.label}")
    try:
        for call, out, cpu in (
            (client.prepare, fig.burst_prepare_cps, fig.burst_prepare_cpu_ms),
            (client.unprepare, fig.burst_unprepare_cps, fig.burst_unprepare_cpu_ms),
        ):
            t0, c0 = time.perf_counter(), cpu_seconds(d.pid)
            s0, m0 = sum(cpu_seconds(p) for p in servers), time.process_time()
            errors = [e for e in pool.map(call, refs) if e]
            out.append(len(refs) / (time.perf_counter() - t0))
            cpu.append((cpu_seconds(d.pid) - c0) * 1000 / len(refs))
            if call == client.prepare:
                fig.burst_prepare_server_cpu_ms.append((sum(cpu_seconds(p) for p in servers) - s0) * 1000 / len(refs))
                fig.burst_prepare_client_cpu_ms.append((time.process_time() - m0) * 1000 / len(refs))
            fig.burst_errors += len(errors)
            if errors:
                fig.first_error = fig.first_error or f"burst: {errors[0]}"
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    fig.peak_rss_mib.append(proc_status_kib(d.pid, "VmHWM") / 1024)
