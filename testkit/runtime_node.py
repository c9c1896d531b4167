"""A Kubernetes node that runs real containers: the upstream kubelet on containerd and runc.

`ContainerdNode` is what the installed-path e2e (``e2e/test_installed.py``) and ``make demo``
run the chart's pods on. Unlike `testkit.node.KubeletNode` (kubelet + fake CRI, for fast tests of
the plugin as a host process), nothing here is faked below the kubelet: containerd (built from
its Go module by ``testkit/go/runtime/build.sh``) pulls nothing and runs the images it was given
through runc (Debian's package), reads CDI specs from ``/var/run/cdi`` and applies them to the
containers; pod networking is the CNI bridge plugin.

Several nodes share one machine. Each node is a private mount namespace (``unshare --mount``)
in which containerd and the kubelet both run, with the node's own directories bind-mounted at
the standard paths a real node has, so the chart's hostPaths mean what they mean on a real
node:

========================  ==========================================================
``/var/lib/kubelet``      the kubelet's root dir (plugins_registry, plugins, pods)
``/var/run/cdi``          CDI specs (the plugin writes them, containerd reads them)
``/var/lib/containerd``   containerd's images, snapshots and content
``/run/containerd``       containerd's sockets and task state
``/etc/cni/net.d``        this node's CNI network (a bridge of its own)
``/var/lib/cni``          CNI IP allocations
``/run/netns``            pod network namespaces
``/var/log/pods``,        container logs
``/var/log/containers``
========================  ==========================================================

Networking: the nodes share the machine's network namespace. Node ``index`` n gets the bridge
``drag<n>`` with pod subnet 10.244.<n>.0/24; the machine routes between them and to itself, so
pods reach each other, the API server (which then listens on the machine's address, see
``LocalCluster(pod_network=True)``) and the `kubernetes` Service through kube-proxy. No
masquerading: pods reach nothing outside this machine, which is all the tests need.

Needs root and Linux. Usage::

    with LocalCluster(with_scheduler=True, with_controller_manager=True, pod_network=True) as cluster:
        with ContainerdNode(cluster, "node-a", tmp / "node-a", index=1, images=[archive]) as node:
            ...  # helm install; pods land on node-a and run for real
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from testkit.cluster import (
    GO_DIR,
    ClusterError,
    LocalCluster,
    cache_dir,
    find_binaries,
    free_port,
    known_gates,
    tail_log,
    terminate,
)
from testkit.node import spawn_logged, wait_node_ready

RUNTIME_BUILD = GO_DIR / "runtime" / "build.sh"
RUNC = Path(shutil.which("runc", path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin") or "/usr/sbin/runc")
# containerd's pinned sandbox image, built by testkit/go/runtime/build.sh (there is no registry).
PAUSE_IMAGE = "localhost/pause:dra-gpu"
SOCKET = "/run/containerd/containerd.sock"
# In-namespace path -> this node's directory for it (under workdir/fs).
NODE_DIRS = {
    "/var/lib/kubelet": "kubelet",
    "/var/run/cdi": "cdi",
    "/var/lib/containerd": "containerd",
    "/run/containerd": "containerd-state",
    "/etc/cni/net.d": "cni-conf",
    "/var/lib/cni": "cni-data",
    "/run/netns": "netns",
    "/var/log/pods": "pod-logs",
    "/var/log/containers": "container-logs",
}
# What a reboot empties: /run is a tmpfs on a real node.
RUN_DIRS = ("/var/run/cdi", "/run/containerd", "/run/netns")
BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


def runtime_version() -> str:
    """The containerd release pinned in testkit/go/runtime/go.mod (the one place it is written)."""
    gomod = (GO_DIR / "runtime" / "go.mod").read_text()
    found = re.search(r"^\s*github\.com/containerd/containerd/v2 (v\S+)", gomod, re.MULTILINE)
    if not found:
        raise ClusterError("testkit/go/runtime/go.mod requires no github.com/containerd/containerd/v2")
    return found.group(1)


def runtime_dir() -> Path:
    """Where testkit/go/runtime/build.sh puts the runtime: bin/ and pause.oci.tar."""
    return cache_dir() / f"runtime-{runtime_version()}"


def find_runtime() -> Path:
    """The runtime's bin dir; ClusterError naming what to build or install when a piece is missing."""
    bin_dir = runtime_dir() / "bin"
    names = ("containerd", "containerd-shim-runc-v2", "ctr", "bridge", "host-local", "loopback")
    missing = [n for n in names if not os.access(bin_dir / n, os.X_OK)]
    if missing or not (runtime_dir() / "pause.oci.tar").is_file():
        raise ClusterError(
            f"container runtime missing in {runtime_dir()} ({', '.join(missing) or 'pause.oci.tar'}). "
            f"Build it with: {RUNTIME_BUILD}"
        )
    if not os.access(RUNC, os.X_OK):
        raise ClusterError("runc is missing: apt-get install -y runc")
    return bin_dir


class ContainerdNode:
    """containerd + kubelet in a mount namespace of their own, registered as Node ``name``.

    ``index`` (1..250) picks the node's pod subnet and bridge; give each node of a cluster its
    own. ``images`` are OCI archives imported into containerd's ``k8s.io`` namespace before
    the kubelet starts (the pause image always is). ``workdir`` keeps configs, logs and the
    node's directories (``workdir/fs``) after ``stop()``. ``extra_cdi_dirs``: machine paths containerd
    reads CDI specs from besides ``/var/run/cdi`` (a reboot leaves them, as it leaves a node's
    ``/etc/cdi``, the other directory of containerd's default list).
    """

    def __init__(
        self,
        cluster: LocalCluster,
        name: str,
        workdir: Path,
        *,
        index: int,
        images: Sequence[Path] = (),
        feature_gates: Mapping[str, bool] | None = None,
        ready_timeout: float = 90.0,
        verbosity: int = 2,
        extra_cdi_dirs: Sequence[Path] = (),
    ) -> None:
        if not cluster.pod_network:
            raise ClusterError("ContainerdNode needs LocalCluster(pod_network=True)")
        if not 1 <= index <= 250:
            raise ClusterError(f"node index {index} is not in 1..250")
        self.runtime_bin = find_runtime()
        self.binaries = find_binaries(("kubelet",), cluster.version)
        self.cluster = cluster
        self.name = name
        self.index = index
        self.images = [Path(p) for p in images]
        self.workdir = workdir.resolve()
        self.fs = self.workdir / "fs"
        self.ready_timeout = ready_timeout
        self.verbosity = verbosity
        self.cdi_dirs = ["/var/run/cdi", *map(str, extra_cdi_dirs)]
        known = known_gates(self.binaries["kubelet"])
        self.feature_gates = {g: v for g, v in cluster.feature_gates.items() if g in known}
        self.feature_gates.update(feature_gates or {})
        self.bridge = f"drag{index}"
        self.pod_cidr = f"10.244.{index}.0/24"
        # The node's boot id: bind-mounted over the kernel's in the node's namespace, so the
        # kubelet and the plugin (the chart mounts the host's file) see this node's own, which
        # reboot() changes.
        self.boot_id_file = self.workdir / "boot_id"
        self.containerd_config = self.workdir / "containerd.toml"
        self.kubelet_config = self.workdir / "kubelet.yaml"
        self.containerd_log = self.workdir / "containerd.log"
        self.kubelet_log = self.workdir / "kubelet.log"
        self.port = 0
        self.healthz_port = 0
        self._containerd: subprocess.Popen[bytes] | None = None
        self._kubelet: subprocess.Popen[bytes] | None = None

    # -- lifecycle ---------------------------------------------------------

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    def start(self) -> None:
        """Start containerd (importing the images) and the kubelet; return once the Node is Ready."""
        try:
            self.start_runtime()
            for archive in [runtime_dir() / "pause.oci.tar", *self.images]:
                self.import_image(archive)
            self.start_kubelet()
            self.cluster.ensure_kube_proxy(self.name)
        except BaseException:
            self.stop()
            raise

    def stop(self, timeout: float = 20.0) -> None:
        """Stop the kubelet, every container of this node, containerd; drop the node's bridge."""
        try:
            terminate(self._kubelet, timeout)
            self._kubelet = None
            self.stop_runtime(timeout)
        finally:
            subprocess.run(["ip", "link", "delete", self.bridge], capture_output=True, check=False)

    def start_runtime(self) -> None:
        """Create the node's mount namespace with containerd in it; return once it answers."""
        for sub in NODE_DIRS.values():
            (self.fs / sub).mkdir(parents=True, exist_ok=True)
        (self.workdir / "cwd").mkdir(exist_ok=True)
        if not self.boot_id_file.exists():
            self.boot_id_file.write_text(f"{uuid.uuid4()}\n")
        self.containerd_config.write_text(self._containerd_toml())
        (self.fs / "cni-conf" / "10-dra-gpu.conflist").write_text(json.dumps(self._cni_conf(), indent=1) + "\n")
        binds = []
        for target, sub in NODE_DIRS.items():
            Path(target).mkdir(parents=True, exist_ok=True)  # a mount point must exist on the host
            binds.append(f"mount --bind {shlex.quote(str(self.fs / sub))} {shlex.quote(target)}")
        # Shared inside the namespace (private towards the machine): the kubelet's mounts under
        # /var/lib/kubelet reach the containers that containerd starts, as on a real node.
        binds.append(f"mount --bind {shlex.quote(str(self.boot_id_file))} {BOOT_ID}")
        script = " && ".join(["mount --make-rshared /", *binds, f"export PATH={self.runtime_bin}:$PATH", 'exec "$@"'])
        unshare = [shutil.which("unshare") or "unshare", "--mount", "--propagation", "private", "--"]
        argv: list[str | Path] = [*unshare, "sh", "-c", script, "containerd"]
        argv += [self.runtime_bin / "containerd", f"--config={self.containerd_config}"]
        self._containerd = self._spawn(argv, self.containerd_log)
        sock = self.fs / "containerd-state" / "containerd.sock"
        deadline = time.monotonic() + 30
        while not (sock.exists() and self.ctr("version", check=False).returncode == 0):
            self.check_alive()
            if time.monotonic() > deadline:
                raise ClusterError(f"containerd of node {self.name} did not answer:\n{tail_log(self.containerd_log, 20)}")
            time.sleep(0.1)

    def stop_runtime(self, timeout: float = 20.0) -> None:
        """Kill every container of this node, then containerd (as a power cut would, but tidy:
        no process of the node's namespace outlives it)."""
        if self._containerd is None:
            return
        namespace = self._mount_ns()
        try:
            if self._containerd.poll() is None:
                tasks = self.ctr("tasks", "list", "--quiet", check=False, timeout=30).stdout.split()
                for task in tasks:
                    self.ctr("tasks", "kill", "--signal", "SIGKILL", task, check=False, timeout=30)
                for task in tasks:
                    self.ctr("tasks", "delete", "--force", task, check=False, timeout=30)
        except subprocess.TimeoutExpired:
            pass  # a hung containerd: the kill below still takes every process of the node down
        finally:
            terminate(self._containerd, timeout)
            self._containerd = None
            if namespace:  # shims of tasks containerd did not get to delete, and their containers
                kill_trees(_pids_in_mount_ns(namespace))

    def start_kubelet(self) -> None:
        """Start the kubelet inside the node's namespace; return once the Node is Ready and untainted."""
        if self._containerd is None:
            raise ClusterError("start_runtime() first")
        self.port, self.healthz_port = free_port(), free_port()
        self.kubelet_config.write_text(json.dumps(self._kubelet_conf(), indent=2) + "\n")
        since = time.time()
        argv: list[str | Path] = [
            shutil.which("nsenter") or "nsenter",
            f"--mount=/proc/{self._containerd.pid}/ns/mnt",
            f"--wd={self.workdir / 'cwd'}",
            "--",
            self.binaries["kubelet"],
            f"--config={self.kubelet_config}",
            f"--kubeconfig={self.cluster.kubeconfig}",
            f"--hostname-override={self.name}",
            f"--node-ip={self.cluster.host_ip}",
            f"--v={self.verbosity}",
            "--vmodule=dra_plugin=4,dra_plugin_manager=3",
        ]
        self._kubelet = self._spawn(argv, self.kubelet_log)
        self._wait_ready(since)

    def stop_kubelet(self, timeout: float = 20.0) -> None:
        terminate(self._kubelet, timeout)
        self._kubelet = None

    def reboot(self) -> str:
        """Power-cycle the node (`power_off`), then start containerd and the kubelet again as a boot
        does. Returns the new boot id once the Node is Ready again."""
        boot_id = self.power_off()
        self.start_runtime()
        self.start_kubelet()
        return boot_id

    def power_off(self) -> str:
        """The first half of `reboot`: every container dies with containerd and the kubelet, what
        lives in /run (CDI specs, containerd's state, network namespaces) is gone, the boot id is
        new (images and /var/lib survive). Returns the boot id the next boot has; start_runtime()
        and start_kubelet() boot the node (``bench.reboot_containerd`` starts a plugin between them)."""
        self.stop_kubelet()
        self.stop_runtime()
        for target in RUN_DIRS:
            shutil.rmtree(self.path(target), ignore_errors=True)
        boot_id = str(uuid.uuid4())
        self.boot_id_file.write_text(boot_id + "\n")
        return boot_id

    def check_alive(self) -> None:
        """ClusterError with the log tail if containerd or the kubelet has exited."""
        procs = (("containerd", self._containerd, self.containerd_log), ("kubelet", self._kubelet, self.kubelet_log))
        for what, popen, log in procs:
            if popen is not None and popen.poll() is not None:
                raise ClusterError(f"{what} of node {self.name} exited with {popen.returncode}; log {log}:\n{tail_log(log, 40)}")

    # -- the runtime ---------------------------------------------------------

    def ctr(self, *args: str, check: bool = True, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
        """Run ``ctr -n k8s.io <args>`` against this node's containerd (inside its namespace)."""
        if self._containerd is None:
            raise ClusterError(f"containerd of node {self.name} is not running")
        argv = [
            shutil.which("nsenter") or "nsenter",
            f"--mount=/proc/{self._containerd.pid}/ns/mnt",
            "--",
            str(self.runtime_bin / "ctr"),
            f"--address={SOCKET}",
            "--namespace=k8s.io",
            *args,
        ]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
        if check and done.returncode != 0:
            raise ClusterError(f"ctr {' '.join(args)} on node {self.name} failed: {done.stderr.strip()[-800:]}")
        return done

    def import_image(self, archive: Path) -> None:
        """Import an OCI archive into containerd's ``k8s.io`` namespace (unpacked, ready to run)."""
        self.ctr("images", "import", "--no-unpack=false", str(Path(archive).resolve()))

    def tag_image(self, source: str, target: str) -> None:
        """Give an image a second name, as a registry push of a new tag would."""
        self.ctr("images", "tag", "--force", source, target)

    # -- observations ------------------------------------------------------

    def node(self) -> dict[str, Any]:
        return self.cluster.api("GET", f"/api/v1/nodes/{self.name}")

    def path(self, in_node: str) -> Path:
        """Where a node path (e.g. ``/var/run/cdi``) lives on the machine."""
        for target, sub in sorted(NODE_DIRS.items(), key=lambda kv: -len(kv[0])):
            if in_node == target or in_node.startswith(target + "/"):
                return self.fs / sub / in_node[len(target) :].lstrip("/")
        raise ValueError(f"{in_node} is not one of the node's own directories")

    def diagnostics(self, lines: int = 40) -> str:
        return (
            f"--- kubelet log {self.kubelet_log} (last {lines} lines):\n{tail_log(self.kubelet_log, lines)}\n"
            f"--- containerd log {self.containerd_log}:\n{tail_log(self.containerd_log, 15)}"
        )

    # -- internals -----------------------------------------------------------

    def _containerd_toml(self) -> str:
        cri = "plugins.'io.containerd.cri.v1"
        return f"""\
version = 4
root = "/var/lib/containerd"
state = "/run/containerd"
[grpc]
  address = "{SOCKET}"
[{cri}.runtime']
  # This machine denies CAP_SYS_RESOURCE, so no container may get a lower OOM score than
  # containerd's own (the kubelet asks -998 for pod sandboxes).
  restrict_oom_score_adj = true
  cdi_spec_dirs = {json.dumps(self.cdi_dirs)}
  [{cri}.runtime'.containerd]
    default_runtime_name = "runc"
    [{cri}.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [{cri}.runtime'.containerd.runtimes.runc.options]
        BinaryName = "{RUNC}"
        SystemdCgroup = false
  [{cri}.runtime'.cni]
    bin_dirs = ["{self.runtime_bin}"]
    conf_dir = "/etc/cni/net.d"
[{cri}.images']
  snapshotter = "overlayfs"
  [{cri}.images'.pinned_images]
    sandbox = "{PAUSE_IMAGE}"
"""

    def _cni_conf(self) -> dict[str, Any]:
        return {
            "cniVersion": "1.0.0",
            "name": f"dra-gpu-{self.name}",
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": self.bridge,
                    "isGateway": True,
                    "ipMasq": False,
                    "hairpinMode": True,
                    "ipam": {"type": "host-local", "ranges": [[{"subnet": self.pod_cidr}]], "routes": [{"dst": "0.0.0.0/0"}]},
                }
            ],
        }

    def _kubelet_conf(self) -> dict[str, Any]:
        """KubeletConfiguration (JSON is YAML): a real runtime, no cgroup management of its own."""
        return {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "address": self.cluster.host_ip,  # the API server reaches it there for logs and exec
            "port": self.port,
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            "healthzPort": self.healthz_port,
            # It listens on the machine's address: only clients with a certificate of the cluster's
            # CA (the API server's, for logs and exec) get in.
            "authentication": {
                "anonymous": {"enabled": False},
                "webhook": {"enabled": False},
                "x509": {"clientCAFile": str(self.cluster.ca_file)},
            },
            "authorization": {"mode": "AlwaysAllow"},
            "containerRuntimeEndpoint": f"unix://{SOCKET}",
            "cgroupDriver": "cgroupfs",
            "cgroupsPerQOS": False,
            "enforceNodeAllocatable": [],
            "failSwapOn": False,
            "failCgroupV1": False,
            "localStorageCapacityIsolation": False,
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "evictionHard": {"memory.available": "0%", "nodefs.available": "0%", "imagefs.available": "0%"},
            "serializeImagePulls": False,
            "featureGates": dict(sorted(self.feature_gates.items())),
        }

    def _spawn(self, argv: list[str | Path], log: Path) -> subprocess.Popen[bytes]:
        return spawn_logged(argv, log, cwd=self.workdir / "cwd")

    def _mount_ns(self) -> str:
        if self._containerd is None:
            return ""
        try:
            return str(Path(f"/proc/{self._containerd.pid}/ns/mnt").readlink())
        except OSError:
            return ""

    def _wait_ready(self, since: float) -> None:
        wait_node_ready(
            self.cluster,
            self.name,
            healthz_port=self.healthz_port,
            since=since,
            timeout=self.ready_timeout,
            check_alive=self.check_alive,
            diagnostics=self.diagnostics,
        )


def sweep_leftovers() -> list[str]:
    """Remove what an earlier run killed with SIGKILL left behind: our containerd shims with
    their containers (processes of this project's shim binary and their descendants) and the
    nodes' bridges. Call only while holding the pod-network lock (``LocalCluster(pod_network=True)``
    started): then no other run of ours is using them. Returns what it removed, for a log line."""
    removed = []
    shim = str(runtime_dir() / "bin" / "containerd-shim-runc-v2")
    ours = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if str((entry / "exe").readlink()).removesuffix(" (deleted)") == shim:
                    ours.append(int(entry.name))
    if ours:
        kill_trees(ours)
        removed.append(f"{len(ours)} containerd shim(s) and their containers")
    links = subprocess.run(["ip", "-o", "link", "show", "type", "bridge"], capture_output=True, text=True, check=False)
    for name in re.findall(r"^\d+: (drag\d+)[:@]", links.stdout, re.MULTILINE):
        subprocess.run(["ip", "link", "delete", name], capture_output=True, check=False)
        removed.append(f"bridge {name}")
    return removed


def kill_trees(pids: Sequence[int]) -> None:
    """SIGKILL ``pids`` and every descendant of theirs."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                stat = (entry / "stat").read_text()
                ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
                children.setdefault(ppid, []).append(int(entry.name))
    todo, seen = list(pids), set()
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        todo.extend(children.get(pid, []))
    for pid in seen:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def _pids_in_mount_ns(namespace: str) -> list[int]:
    """Processes whose mount namespace is ``namespace`` (``mnt:[inode]``)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if str((entry / "ns" / "mnt").readlink()) == namespace:
                    pids.append(int(entry.name))
    return pids
