"""Socket paths and owner-only unix-socket servers for the registration and DRA services.

Called by ``kubelet_plugin.main``. Paths follow the kubelet's conventions; with a pod UID
(rolling updates) both sockets get per-pod names so two plugin pods can be registered at once.
Stale sockets are removed before binding and on shutdown.
"""

from __future__ import annotations

import hashlib
import os
import socket
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path

import grpc

MAX_UNIX_PATH = 107  # sun_path is 108 bytes including the NUL


def _fit(directory: Path, name: str, suffix: str) -> Path:
    path = directory / f"{name}{suffix}"
    if len(str(path)) <= MAX_UNIX_PATH:
        return path
    digest = hashlib.sha256(name.encode()).hexdigest()[:16]
    return directory / f"{digest}{suffix}"


@dataclass(frozen=True, slots=True)
class SocketPaths:
    """Where the two sockets live."""

    registration: Path
    dra: Path

    @classmethod
    def for_plugin(cls, *, driver: str, registrar_dir: Path, plugin_dir: Path, pod_uid: str | None) -> SocketPaths:
        """``<registrar>/<driver>[-<podUID>]-reg.sock`` and ``<plugin dir>/dra[-<podUID>].sock``."""
        reg_name = f"{driver}-{pod_uid}" if pod_uid else driver
        dra_name = f"dra-{pod_uid}" if pod_uid else "dra"
        return cls(registration=_fit(registrar_dir, reg_name, "-reg.sock"), dra=_fit(plugin_dir, dra_name, ".sock"))


def unix_server(path: Path, max_workers: int = 8) -> grpc.Server:
    """A gRPC server bound to a fresh owner-only unix socket at ``path`` (not yet started)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix=path.stem))
    old = os.umask(0o077)
    try:
        server.add_insecure_port(f"unix://{path}")
    finally:
        os.umask(old)
    return server


def secure_socket(path: Path) -> None:
    """Make a bound socket owner-only (after start, when it surely exists)."""
    if path.exists():
        path.chmod(0o600)


def live_registrations(registrar_dir: Path, driver: str, own: Path) -> list[Path]:
    """Other plugins' registration sockets of ``driver`` that accept a connection now (a rolling update's old pod).

    Dead ones (left by a killed plugin or a reboot) refuse and are not listed; a name hashed to fit
    (``_fit``) does not start with the driver's name and is not seen.
    """
    live: list[Path] = []
    for path in sorted(registrar_dir.glob(f"{driver}-*-reg.sock")) if registrar_dir.is_dir() else []:
        if path == own:
            continue
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            probe.settimeout(0.2)
            try:
                probe.connect(str(path))
            except OSError:
                continue
        live.append(path)
    return live
