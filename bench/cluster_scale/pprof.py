"""The scheduler's CPU profile over a scenario's scheduling window, and its top entries.

Used by ``bench.cluster_scale.run``: ``SchedulerProfile.start`` as the first pod is created,
``stop`` once the last one is bound. Meanwhile a thread fetches the scheduler's
``/debug/pprof/profile`` in consecutive chunks (the endpoint profiles for a fixed time, the
window's length is not known in advance), with the bench's admin token, which the scheduler's
delegated authorization lets through. ``top`` merges the chunks with ``go tool pprof`` (the Go
toolchain on PATH or in /usr/local/go/bin) and returns its flat and cumulative tables, the
functions the scheduler spent the window in. The last chunk runs past the window by at most
``chunk_s`` seconds, while the scheduler is idle. Without a Go toolchain the profiles are still
kept (when the bench has a log directory) and the tables say why they are missing.
"""

from __future__ import annotations

import shutil
import ssl
import subprocess
import threading
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

GO_FALLBACK = Path("/usr/local/go/bin/go")


def go_binary() -> str | None:
    """The ``go`` command, if a toolchain is installed."""
    found = shutil.which("go")
    if found:
        return found
    return str(GO_FALLBACK) if GO_FALLBACK.exists() else None


@dataclass
class SchedulerProfile:
    """Consecutive CPU profiles of the scheduler at ``url`` into ``out_dir`` while started."""

    url: str
    token: str
    out_dir: Path
    chunk_s: int = 15
    files: list[Path] = field(default_factory=list)
    error: str | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self._thread = threading.Thread(target=self._loop, name="scheduler-pprof", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE  # the scheduler's self-signed serving certificate
        while not self._stop.is_set():
            req = urllib.request.Request(
                f"{self.url}/debug/pprof/profile?seconds={self.chunk_s}", headers={"Authorization": f"Bearer {self.token}"}
            )
            try:
                with urllib.request.urlopen(req, context=ctx, timeout=self.chunk_s + 30) as resp:
                    data = resp.read()
            except (OSError, urllib.error.URLError) as err:
                self.error = f"{type(err).__name__}: {str(err)[:200]}"
                return
            path = self.out_dir / f"scheduler-cpu-{len(self.files):03d}.pb.gz"
            path.write_bytes(data)
            self.files.append(path)

    def stop(self) -> None:
        """Stop after the chunk being recorded (waits for it)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self.chunk_s + 40)

    def top(self, entries: int = 25) -> list[str]:
        """``go tool pprof -top`` of every chunk together, cumulative then flat; a line saying why not."""
        if not self.files:
            return [f"no scheduler profile recorded ({self.error or 'the window was shorter than one chunk'})"]
        go = go_binary()
        if go is None:
            return [f"no Go toolchain to read the profiles ({len(self.files)} kept in {self.out_dir})"]
        out: list[str] = []
        for how in ("-cum", "-flat"):
            cmd = [go, "tool", "pprof", "-top", how, f"-nodecount={entries}", *map(str, self.files)]
            res = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
            if res.returncode != 0:
                return [f"go tool pprof failed: {res.stderr.strip()[:300]}"]
            lines = res.stdout.splitlines()
            first = next((i for i, x in enumerate(lines) if x.lstrip().startswith("flat")), 0)
            total = [x for x in lines[:first] if x.startswith("Duration:")]
            out += [f"pprof {how[1:]} ({total[0] if total else 'total unknown'}):", *lines[first:]]
        return out
