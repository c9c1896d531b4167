"""Builds and runs the Go reference DRA driver's kubelet plugin as a peer to measure against.

The peer is kubernetes-sigs/dra-example-driver, kept as a source tarball in ``../shared/peers/``
(``DRA_GPU_PEER_TARBALL`` overrides the path). ``peer_binary`` builds its kubelet plugin once with
the Go toolchain and caches the binary under ``<cache>/peers/<tarball name>/`` (the tarball's
name carries its commit), so later runs start at once. ``PeerProcess`` runs that binary with fake
GPUs against a ``LocalCluster``, in dirs of its own, the way ``testkit.plugin_process.PluginProcess``
runs dra-gpu's plugin.

Used only by ``bench/peer/`` (``make bench``). No code of the peer is copied here: it is
built from its own source and talked to over its sockets.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from testkit.cluster import _die_with_parent, cache_dir, terminate

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_TARBALL = ROOT.parent / "shared" / "peers" / "dra-example-driver-31914ce.tar.gz"
PEER_DRIVER = "gpu.example.com"
PEER_CMD = "./cmd/dra-example-kubeletplugin"
BINARY_NAME = "dra-example-kubeletplugin"


class PeerUnavailable(RuntimeError):
    """The peer cannot be built or found; the message says why (for the bench's report)."""


@dataclass(frozen=True, slots=True)
class PeerBinary:
    path: Path
    commit: str
    build_seconds: float | None  # None: taken from the cache


def tarball_path() -> Path:
    return Path(os.environ.get("DRA_GPU_PEER_TARBALL") or DEFAULT_TARBALL)


def _commit_of(tarball: Path) -> str:
    """The commit in the tarball's name (``...-<hex>.tar.gz``), else a digest of its bytes."""
    m = re.search(r"-([0-9a-f]{7,40})\.t(?:ar\.)?gz$", tarball.name)
    if m:
        return m.group(1)
    import hashlib

    return hashlib.sha256(tarball.read_bytes()).hexdigest()[:12]


def _go() -> str | None:
    found = shutil.which("go")
    if found:
        return found
    fallback = Path("/usr/local/go/bin/go")
    return str(fallback) if os.access(fallback, os.X_OK) else None


def peer_binary(*, build_timeout: float = 900.0, log: Path | None = None) -> PeerBinary:
    """The peer's kubelet plugin binary, built from the tarball on first use; PeerUnavailable if impossible."""
    tarball = tarball_path()
    if not tarball.is_file():
        raise PeerUnavailable(f"peer source {tarball} not found (set DRA_GPU_PEER_TARBALL)")
    commit = _commit_of(tarball)
    out_dir = cache_dir() / "peers" / tarball.name.removesuffix(".tar.gz").removesuffix(".tgz")
    binary = out_dir / BINARY_NAME
    if os.access(binary, os.X_OK):
        return PeerBinary(binary, commit, None)
    go = _go()
    if go is None:
        raise PeerUnavailable("no Go toolchain (go not on PATH nor in /usr/local/go/bin) to build the peer")
    out_dir.mkdir(parents=True, exist_ok=True)
    build_log = log or out_dir / "build.log"
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="dra-gpu-peer-src-") as tmp:
        with tarfile.open(tarball) as tar:
            tar.extractall(tmp, filter="data")
        src = next((p.parent for p in sorted(Path(tmp).rglob("go.mod"), key=lambda p: len(p.parts))), None)
        if src is None:
            raise PeerUnavailable(f"{tarball} holds no go.mod")
        partial = out_dir / f".{BINARY_NAME}.partial"
        env = {**os.environ, "GOSUMDB": "off", "GOFLAGS": "-mod=mod"}
        env["PATH"] = f"{Path(go).parent}:{env.get('PATH', '')}"
        try:
            with build_log.open("wb") as out:
                proc = subprocess.run(
                    [go, "build", "-o", str(partial), PEER_CMD],
                    cwd=src,
                    env=env,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    timeout=build_timeout,
                    check=False,
                )
        except subprocess.TimeoutExpired:
            raise PeerUnavailable(f"peer build took over {build_timeout:.0f}s; log {build_log}") from None
        if proc.returncode != 0:
            tail = build_log.read_text(errors="replace").splitlines()[-5:]
            raise PeerUnavailable(f"peer build failed ({proc.returncode}); log {build_log}: " + " | ".join(tail))
        partial.replace(binary)
    return PeerBinary(binary, commit, time.monotonic() - started)


class PeerProcess:
    """One peer kubelet plugin with its own registrar, plugins and CDI dirs under ``base``."""

    def __init__(self, binary: Path, base: Path, *, kubeconfig: Path, node: str, num_devices: int = 8, qps: int = 1000) -> None:
        self.binary = binary
        self.base = base
        self.registrar = base / "plugins_registry"
        self.plugins = base / "plugins"
        self.cdi = base / "cdi"
        self.log = base / "peer.log"
        self.kubeconfig = kubeconfig
        self.node = node
        self.num_devices = num_devices
        self.qps = qps
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def dra_socket(self) -> Path:
        return self.plugins / PEER_DRIVER / "dra.sock"

    @property
    def reg_socket(self) -> Path:
        return self.registrar / f"{PEER_DRIVER}-reg.sock"

    def argv(self) -> list[str]:
        return [
            str(self.binary),
            "--node-name",
            self.node,
            "--cdi-root",
            str(self.cdi),
            "--num-devices",
            str(self.num_devices),
            "--kubelet-registrar-directory-path",
            str(self.registrar),
            "--kubelet-plugins-directory-path",
            str(self.plugins),
            "--kubeconfig",
            str(self.kubeconfig),
            "--kube-api-qps",
            str(self.qps),
            "--kube-api-burst",
            str(self.qps),
        ]

    def start(self) -> subprocess.Popen[bytes]:
        """Spawn it (the registrar dir must exist first) and return at once; it dies with this process."""
        self.registrar.mkdir(parents=True, exist_ok=True)
        self.plugins.mkdir(parents=True, exist_ok=True)
        env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "NODE_NAME")}
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [*_die_with_parent(), *self.argv()],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,  # a terminal's Ctrl-C reaches the bench, which stops it
            )
        return self.proc

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM, SIGKILL after ``timeout`` s; no-op when not running."""
        terminate(self.proc, timeout)

    def tail(self, chars: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else "(no log)"
