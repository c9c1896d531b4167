"""Sharing on real GPUs: time slices through ``nvidia-smi``, MPS through ``nvidia-cuda-mps-control``.

Implements ``dra_driver.core.sharing.SharingBackend`` for NVML nodes. NVML has no call for the
compute time slice, so ``nvidia-smi compute-policy --set-timeslice`` sets it. An MPS control
daemon is a process this plugin starts (``nvidia-cuda-mps-control -d``, which daemonizes) with
its own pipe and log directories, then configures by writing commands to the control program,
as NVIDIA documents. The tools come from ``--nvidia-bin-dir`` (the driver root's bin). Called by
the kubelet plugin's sharing operations; tested with stand-in executables that record their calls.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import structlog

from dra_driver.core.config import TimeSliceInterval
from dra_driver.core.sharing import MpsDaemon, mps_dirs

log = structlog.get_logger(__name__)

# nvidia-smi compute-policy --set-timeslice levels.
_TIMESLICE_LEVEL = {
    TimeSliceInterval.DEFAULT: 0,
    TimeSliceInterval.SHORT: 1,
    TimeSliceInterval.MEDIUM: 2,
    TimeSliceInterval.LONG: 3,
}
_TIMEOUT_S = 30.0


class NvidiaSharing:
    """A ``SharingBackend`` driving the NVIDIA tools found under ``bin_dir``."""

    def __init__(self, *, bin_dir: Path, mps_root: Path, timeout_s: float = _TIMEOUT_S) -> None:
        self._smi = bin_dir / "nvidia-smi"
        self._mps = bin_dir / "nvidia-cuda-mps-control"
        self._mps_root = mps_root
        self._timeout = timeout_s

    def _run(self, argv: list[str], *, env: dict[str, str] | None = None, stdin: str | None = None) -> str:
        try:
            if stdin is None:  # never let a tool read the plugin's own stdin
                out = subprocess.run(
                    argv,
                    stdin=subprocess.DEVNULL,
                    env={**os.environ, **(env or {})},
                    capture_output=True,
                    text=True,
                    timeout=self._timeout,
                    check=False,
                )
            else:
                out = subprocess.run(
                    argv,
                    input=stdin,
                    env={**os.environ, **(env or {})},
                    capture_output=True,
                    text=True,
                    timeout=self._timeout,
                    check=False,
                )
        except (subprocess.TimeoutExpired, FileNotFoundError, PermissionError) as err:
            raise OSError(f"{argv[0]}: {err}") from err
        if out.returncode != 0:
            raise OSError(f"{' '.join(argv)} exited {out.returncode}: {(out.stderr or out.stdout).strip()[:500]}")
        return out.stdout

    def _daemonize(self, argv: list[str], *, env: dict[str, str], log_dir: Path) -> None:
        """Run a command that forks a daemon, its output going to a file in ``log_dir``.

        Not to pipes: waiting for the parent must never wait for the daemon that inherited them.
        """
        out_path = log_dir / "start.log"
        try:
            with out_path.open("ab") as out:
                rc = subprocess.run(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    env={**os.environ, **env},
                    timeout=self._timeout,
                    check=False,
                ).returncode
        except (subprocess.TimeoutExpired, FileNotFoundError, PermissionError) as err:
            raise OSError(f"{argv[0]}: {err}") from err
        if rc != 0:
            tail = out_path.read_text(errors="replace").strip()[-500:]
            raise OSError(f"{' '.join(argv)} exited {rc}: {tail}")

    def set_time_slice(self, gpu_uuid: str, interval: TimeSliceInterval) -> None:
        """``nvidia-smi compute-policy -i <uuid> --set-timeslice=<0..3>``."""
        self._run([str(self._smi), "compute-policy", "-i", gpu_uuid, f"--set-timeslice={_TIMESLICE_LEVEL[interval]}"])
        log.info("time_slice_set", gpu=gpu_uuid, interval=interval.value)

    def _daemon_env(self, daemon_id: str) -> dict[str, str]:
        dirs = mps_dirs(str(self._mps_root), daemon_id)
        return {"CUDA_MPS_PIPE_DIRECTORY": dirs.pipe, "CUDA_MPS_LOG_DIRECTORY": dirs.log}

    def mps_running(self, daemon_id: str) -> bool:
        """True when the control daemon answers ``get_server_list`` on its pipe directory."""
        if not Path(mps_dirs(str(self._mps_root), daemon_id).pipe).is_dir():
            return False
        try:
            self._run([str(self._mps)], env=self._daemon_env(daemon_id), stdin="get_server_list\n")
        except OSError:
            return False
        return True

    def start_mps(self, daemon: MpsDaemon) -> None:
        """Exclusive-process compute mode, start the daemon, then set its default limits."""
        if self.mps_running(daemon.daemon_id):
            return
        dirs = mps_dirs(str(self._mps_root), daemon.daemon_id)
        for d in (dirs.pipe, dirs.log, dirs.shm):
            Path(d).mkdir(parents=True, exist_ok=True, mode=0o755)
        for uuid in daemon.exclusive_gpus:
            self._run([str(self._smi), "-i", uuid, "-c", "EXCLUSIVE_PROCESS"])
        env = {**self._daemon_env(daemon.daemon_id), "CUDA_VISIBLE_DEVICES": ",".join(daemon.gpu_uuids)}
        self._daemonize([str(self._mps), "-d"], env=env, log_dir=Path(dirs.log))
        commands = []
        if daemon.active_thread_percentage:
            commands.append(f"set_default_active_thread_percentage {daemon.active_thread_percentage}")
        commands += [f"set_default_device_pinned_mem_limit {u} {max(1, b >> 20)}M" for u, b in daemon.pinned_memory_limits]
        for cmd in commands:
            self._run([str(self._mps)], env=env, stdin=cmd + "\n")
        log.info("mps_started", daemon=daemon.daemon_id, gpus=list(daemon.gpu_uuids), commands=commands)

    def stop_mps(self, daemon: MpsDaemon) -> None:
        """``quit`` the daemon, restore the ``DEFAULT`` compute mode, remove its directories."""
        if self.mps_running(daemon.daemon_id):
            self._run([str(self._mps)], env=self._daemon_env(daemon.daemon_id), stdin="quit\n")
            log.info("mps_stopped", daemon=daemon.daemon_id)
        for uuid in daemon.exclusive_gpus:
            self._run([str(self._smi), "-i", uuid, "-c", "DEFAULT"])
        shutil.rmtree(self._mps_root / daemon.daemon_id, ignore_errors=True)
