"""The burst: admin-access claims prepared, then unprepared, concurrently from many threads; claims/s and peak RSS.

Called by ``bench.peer.run.run_bench`` once per driver per run.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench.peer.client import DraClient, Ref
from bench.peer.drivers import Driver
from bench.peer.measure import Figures, proc_status_kib


def reset_peak_rss(pid: int) -> bool:
    """Reset VmHWM to the current RSS (Linux clear_refs 5); False when not allowed."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
        return True
    except OSError:
        return False


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
