"""A real kubelet node for e2e tests: the upstream kubelet on a fake container runtime.

`KubeletNode` runs the kubelet built by ``testkit/go/build.sh`` (same release as the control
plane) against a `LocalCluster`, with ``fakecri`` (``testkit/go/cmd/fakecri``, the CRI fake
Kubernetes ships for its own tests) as its container runtime.  The kubelet is the real
thing: it registers its own Node, watches ``<root>/plugins_registry`` for plugins, and
its DRA manager calls NodePrepareResources/NodeUnprepareResources on them; pods "run"
in the fake runtime, which records every CreateContainer (with the CDI device ids the
kubelet passed) in a JSON-lines file that `KubeletNode.cdi_records` reads.

Isolation, so several nodes can share one machine:

- config, logs, pod logs and runtime records live under ``workdir``; the kubelet's root
  dir and the CRI socket live in a short private dir under /tmp, because unix socket
  paths are limited to 107 bytes and plugins put their sockets in the root dir
  (``workdir/root`` links to it; ``stop()`` moves its contents there); ports are free ones;
- the kubelet runs in its own mount namespace (``unshare --mount``) when possible: the
  mounts it makes (its root dir, pod volumes) vanish with it, and the two paths it
  hard-codes, ``/var/lib/kubelet/device-plugins`` and ``/var/log/containers``, are
  per-node bind mounts (only the empty mount points are created on the host);
- no cgroups are managed (``cgroupsPerQOS: false``, no enforced allocatable), swap and
  cgroup v1 are tolerated, image GC and eviction are effectively off.

The node-lifecycle controller is off in `LocalCluster` by default, so nobody lifts the
``node.kubernetes.io/not-ready`` taint the API server puts on new Nodes; `start()`
removes it once the Node is Ready.

Needs root (the kubelet mounts its root dir) and Linux.  Usage::

    with LocalCluster(with_scheduler=True) as cluster, KubeletNode(cluster, "node-a", tmp / "node-a") as node:
        ...  # start a plugin with --registrar-dir node.registrar_dir --plugin-dir node.plugins_dir / driver
        node.cdi_records()  # [{"pod_name": ..., "container": ..., "cdi_devices": [...], ...}]
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shlex
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from testkit.cluster import ApiError, ClusterError, LocalCluster, find_binaries, free_port, known_gates, tail_log, terminate

BINARIES = ("kubelet", "fakecri")
# Paths the kubelet uses whatever its flags say; bind-mounted per node in its namespace.
HARDCODED_DIRS = {"device-plugins": Path("/var/lib/kubelet/device-plugins"), "container-logs": Path("/var/log/containers")}
# Taints only the node-lifecycle controller would lift.
STARTUP_TAINTS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
# Kubelet logs of interest at --v=2: plugin (de)registration and every DRA gRPC call.
DEFAULT_VMODULE = "dra_plugin=4,dra_plugin_manager=3"


@functools.cache
def mount_namespace_works() -> bool:
    """True if this process may run a command in a private mount namespace with bind mounts."""
    unshare = shutil.which("unshare")
    if unshare is None or os.geteuid() != 0:
        return False
    probe = subprocess.run(
        [unshare, "--mount", "--propagation", "private", "--", "sh", "-c", "mount -t tmpfs probe /tmp"],
        capture_output=True,
        check=False,
    )
    return probe.returncode == 0


class KubeletNode:
    """One kubelet (+ fake CRI) registered as Node ``name`` in ``cluster``.

    Use as a context manager, or call ``start()``/``stop()``.  ``workdir`` is created if
    needed and kept after ``stop()`` (logs, records, and the root dir's final contents
    under ``workdir/root``); it should be empty or absent.  ``root_dir`` is a short
    temp dir (socket paths) that ``stop()`` empties.
    """

    def __init__(
        self,
        cluster: LocalCluster,
        name: str,
        workdir: Path,
        *,
        feature_gates: Mapping[str, bool] | None = None,
        ready_timeout: float = 60.0,
        verbosity: int = 2,
        vmodule: str = DEFAULT_VMODULE,
    ) -> None:
        self.binaries = find_binaries(BINARIES, cluster.version)
        self.cluster = cluster
        self.name = name
        self.workdir = workdir.resolve()
        self.ready_timeout = ready_timeout
        self.verbosity = verbosity
        self.vmodule = vmodule
        known = known_gates(self.binaries["kubelet"])
        self.feature_gates = {g: v for g, v in cluster.feature_gates.items() if g in known}
        self.feature_gates.update(feature_gates or {})
        self._scratch = Path(tempfile.mkdtemp(prefix=f"kubelet-{name}-"))
        self.root_dir = self._scratch / "root"
        self.cri_socket = self._scratch / "cri.sock"
        self.registrar_dir = self.root_dir / "plugins_registry"
        self.plugins_dir = self.root_dir / "plugins"
        self.pod_logs_dir = self.workdir / "pod-logs"
        self.config_path = self.workdir / "kubelet.yaml"
        self.log_path = self.workdir / "kubelet.log"
        self.fakecri_log_path = self.workdir / "fakecri.log"
        self.records_path = self.workdir / "cri-records.jsonl"
        self.port = 0
        self.healthz_port = 0
        self.namespaced = False  # whether the kubelet got its own mount namespace
        self._kubelet: subprocess.Popen[bytes] | None = None
        self._fakecri: subprocess.Popen[bytes] | None = None

    # -- lifecycle ---------------------------------------------------------

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    def start(self) -> None:
        """Start fakecri and the kubelet; return once the Node is Ready (and untainted)."""
        try:
            for d in (self.root_dir, self.pod_logs_dir, *(self.workdir / n for n in HARDCODED_DIRS)):
                d.mkdir(parents=True, exist_ok=True)
            (self.workdir / "cwd").mkdir(exist_ok=True)
            link = self.workdir / "root"
            if not link.exists():
                link.symlink_to(self.root_dir, target_is_directory=True)
            self._start_fakecri()
            self.port, self.healthz_port = free_port(), free_port()
            self.config_path.write_text(json.dumps(self._config(), indent=2) + "\n")
            self._start_kubelet()
            self._wait_ready()
        except BaseException:
            self.stop()
            raise

    @property
    def device_plugin_dir(self) -> Path:
        """Where the kubelet's device-plugin socket (``kubelet.sock``) and the device plugins' sockets are, seen from here."""
        return self.workdir / "device-plugins" if self.namespaced else HARDCODED_DIRS["device-plugins"]

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM the kubelet, then fakecri (SIGKILL after ``timeout`` s); keep ``workdir``."""
        for popen in (self._kubelet, self._fakecri):
            terminate(popen, timeout)
        self._kubelet = self._fakecri = None
        if not self.namespaced:
            self._clean_host()
        self._keep_root_dir()

    def _keep_root_dir(self) -> None:
        """Move the root dir's contents to ``workdir/root`` (for post-mortems); drop the temp dir."""
        if not self._scratch.exists():
            return
        link = self.workdir / "root"
        if link.is_symlink() and self.root_dir.is_dir():
            link.unlink()
            with contextlib.suppress(OSError):  # shutil.Error too: sockets cannot be copied across filesystems
                shutil.move(self.root_dir, link)
        shutil.rmtree(self._scratch, ignore_errors=True)

    def restart_kubelet(self, timeout: float = 20.0) -> None:
        """Stop the kubelet (SIGTERM) and start it again with the same root dir, ports and
        runtime, as after a kubelet upgrade; return once it has posted Ready again."""
        terminate(self._kubelet, timeout)
        if not self.namespaced:
            self._clean_host()
        try:
            self._start_kubelet()
            self._wait_ready(since=time.time())
        except BaseException:
            self.stop()
            raise

    @property
    def pid(self) -> int | None:
        """The kubelet's process id while it runs."""
        return None if self._kubelet is None else self._kubelet.pid

    def check_alive(self) -> None:
        """ClusterError with the log tail if the kubelet or fakecri has exited."""
        for what, popen, log in (("kubelet", self._kubelet, self.log_path), ("fakecri", self._fakecri, self.fakecri_log_path)):
            if popen is not None and popen.poll() is not None:
                raise ClusterError(f"{what} of node {self.name} exited with {popen.returncode}; log {log}:\n{tail_log(log, 40)}")

    # -- observations ------------------------------------------------------

    def cdi_records(self) -> list[dict[str, Any]]:
        """Every CreateContainer the fake runtime saw, oldest first.

        Keys: ``pod_name``, ``pod_namespace``, ``pod_uid``, ``container``, ``attempt``,
        ``container_id``, ``cdi_devices`` (the CDI ids the kubelet asked the runtime to
        inject), ``annotations``, ``envs``, ``mounts``, ``devices``, ``time``, ``error``.
        """
        try:
            lines = self.records_path.read_text().splitlines()
        except FileNotFoundError:
            return []
        out: list[dict[str, Any]] = []
        for line in lines:
            try:
                out.append(json.loads(line))
            except ValueError:  # a line being written right now
                continue
        return out

    def logtail_log(self, lines: int = 60) -> str:
        return tail_log(self.log_path, lines)

    def node(self) -> dict[str, Any]:
        """The Node object as the API server has it."""
        return self.cluster.api("GET", f"/api/v1/nodes/{self.name}")

    def diagnostics(self, lines: int = 40) -> str:
        """Kubelet and fakecri log tails, for failure messages."""
        return (
            f"--- kubelet log {self.log_path} (last {lines} lines):\n{self.logtail_log(lines)}\n"
            f"--- fakecri log {self.fakecri_log_path}:\n{tail_log(self.fakecri_log_path, 10)}"
        )

    # -- internals -----------------------------------------------------------

    def _config(self) -> dict[str, Any]:
        """KubeletConfiguration (JSON is YAML) for a runtime-less, cgroup-less test node."""
        endpoint = f"unix://{self.cri_socket}"
        return {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "address": "127.0.0.1",
            "port": self.port,
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            "healthzPort": self.healthz_port,
            "authentication": {"anonymous": {"enabled": True}, "webhook": {"enabled": False}},
            "authorization": {"mode": "AlwaysAllow"},
            "containerRuntimeEndpoint": endpoint,
            "imageServiceEndpoint": endpoint,
            "cgroupDriver": "cgroupfs",
            "cgroupsPerQOS": False,
            "enforceNodeAllocatable": [],
            "failSwapOn": False,
            "failCgroupV1": False,
            "localStorageCapacityIsolation": False,
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "evictionHard": {"memory.available": "0%", "nodefs.available": "0%", "imagefs.available": "0%"},
            "podLogsDir": str(self.pod_logs_dir),
            "volumePluginDir": str(self.workdir / "volume-plugins"),
            "featureGates": dict(sorted(self.feature_gates.items())),
        }

    def _start_fakecri(self) -> None:
        self._fakecri = self._spawn(
            [
                self.binaries["fakecri"],
                f"--listen={self.cri_socket}",
                f"--record={self.records_path}",
                f"--fs-root={self.workdir}",
            ],
            self.fakecri_log_path,
        )
        deadline = time.monotonic() + 10
        while not self.cri_socket.exists():
            self.check_alive()
            if time.monotonic() > deadline:
                raise ClusterError(f"fakecri did not listen on {self.cri_socket}:\n{tail_log(self.fakecri_log_path, 20)}")
            time.sleep(0.05)

    def _start_kubelet(self) -> None:
        kubelet = [
            str(self.binaries["kubelet"]),
            f"--config={self.config_path}",
            f"--kubeconfig={self.cluster.kubeconfig}",
            f"--root-dir={self.root_dir}",
            f"--cert-dir={self.root_dir / 'pki'}",
            f"--hostname-override={self.name}",
            f"--v={self.verbosity}",
            *([f"--vmodule={self.vmodule}"] if self.vmodule else []),
        ]
        self.namespaced = mount_namespace_works()
        argv: list[str | Path] = list(kubelet)
        if self.namespaced:
            binds = []
            for sub, target in HARDCODED_DIRS.items():
                target.mkdir(parents=True, exist_ok=True)  # a mount point must exist on the host
                binds.append(f"mount --bind {shlex.quote(str(self.workdir / sub))} {shlex.quote(str(target))}")
            script = " && ".join([*binds, 'exec "$@"'])
            unshare = [shutil.which("unshare") or "unshare", "--mount", "--propagation", "private", "--"]
            argv = [*unshare, "sh", "-c", script, "kubelet", *kubelet]
        self._kubelet = self._spawn(argv, self.log_path)

    def _spawn(self, argv: list[str | Path], log: Path) -> subprocess.Popen[bytes]:
        return spawn_logged(argv, log, cwd=self.workdir / "cwd")

    def _wait_ready(self, since: float = 0.0) -> None:
        wait_node_ready(
            self.cluster,
            self.name,
            healthz_port=self.healthz_port,
            since=since,
            timeout=self.ready_timeout,
            check_alive=self.check_alive,
            diagnostics=self.diagnostics,
        )

    def _clean_host(self) -> None:
        """Without a namespace of its own the kubelet's mounts outlive it; undo them, deepest
        first, and drop its container-log links in /var/log/containers."""
        logs = HARDCODED_DIRS["container-logs"]
        for link in logs.glob("*.log") if logs.is_dir() else []:
            with contextlib.suppress(OSError):
                if link.is_symlink() and str(link.readlink()).startswith(str(self.workdir) + "/"):
                    link.unlink()
        try:
            mounts = Path("/proc/self/mounts").read_text().splitlines()
        except OSError:
            return
        roots = (str(self.workdir), str(self._scratch))
        points = [m.split()[1].replace("\\040", " ") for m in mounts if len(m.split()) > 1]
        ours = [p for p in points if any(p == r or p.startswith(r + "/") for r in roots)]
        for point in sorted(ours, key=len, reverse=True):  # stacked mounts appear once each
            subprocess.run(["umount", "-l", point], capture_output=True, check=False)


def spawn_logged(argv: Sequence[str | Path], log: Path, *, cwd: Path) -> subprocess.Popen[bytes]:
    """Start a node component with its output appended to ``log``, killed if this process dies.

    The kubelet may act on relative paths it got from the runtime (it once globbed "*" for an
    empty log path), so it works in ``cwd``, an empty directory of its own.
    """
    prefix = [p for p in [shutil.which("setpriv")] if p]
    prefix += ["--pdeathsig", "KILL", "--"] if prefix else []
    with log.open("ab") as out:
        return subprocess.Popen(
            [*prefix, *map(str, argv)],
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def kubelet_healthz(port: int) -> str:
    """The kubelet's /healthz answer ("ok" when healthy), or why there is none."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as resp:
            return str(resp.read().decode(errors="replace"))
    except (OSError, urllib.error.URLError) as err:
        return f"healthz: {err}"


def wait_node_ready(
    cluster: LocalCluster,
    name: str,
    *,
    healthz_port: int,
    since: float,
    timeout: float,
    check_alive: Callable[[], None],
    diagnostics: Callable[[], str],
) -> None:
    """Until Node ``name`` is Ready with a heartbeat not older than ``since`` (Unix seconds) and its
    kubelet's /healthz says ok; then lift the start-up taints only the (disabled) node-lifecycle
    controller would. ClusterError with ``diagnostics()`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    last = "Node not registered yet"
    while time.monotonic() < deadline:
        check_alive()
        try:
            node = cluster.api("GET", f"/api/v1/nodes/{name}")
        except ApiError as err:
            if err.status != 404:
                raise
        else:
            ready = [c for c in node.get("status", {}).get("conditions", []) if c.get("type") == "Ready"]
            last = f"Ready condition: {ready}" if ready else "no Ready condition yet"
            beat = ready[0].get("lastHeartbeatTime", "") if ready else ""
            fresh = bool(beat) and datetime.fromisoformat(beat).timestamp() >= int(since)
            if ready and ready[0].get("status") == "True" and fresh and kubelet_healthz(healthz_port) == "ok":
                taints = node.get("spec", {}).get("taints") or []
                keep = [t for t in taints if t.get("key") not in STARTUP_TAINTS]
                if len(keep) != len(taints):
                    patch = {"spec": {"taints": keep or None}}
                    cluster.api("PATCH", f"/api/v1/nodes/{name}", patch, "application/merge-patch+json")
                return
        time.sleep(0.25)
    raise ClusterError(f"node {name} not Ready after {timeout:.0f}s ({last}; {kubelet_healthz(healthz_port)})\n{diagnostics()}")
