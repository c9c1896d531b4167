"""A real, throw-away Kubernetes control plane on 127.0.0.1 for e2e tests.

`LocalCluster` runs etcd and kube-apiserver (optionally kube-scheduler and
kube-controller-manager) built from source by ``testkit/go/build.sh`` at the release in
``testkit/go/K8S_VERSION`` (or one of ``testkit/go/K8S_MATRIX``), with every DRA feature gate the binaries
know switched on, or (``stock=True``) as the release ships: default gates and API versions.
There is no kubelet: ``add_node`` registers Node objects (Ready, with allocatable
cpu/memory/pods) so the scheduler can place pods on them.

Callers: the pytest e2e suite (``e2e/test_*.py``) as a context manager, and
humans via ``python -m testkit.cluster up`` (prints a kubeconfig, runs until Ctrl-C).
Only the standard library and the ``openssl`` CLI are used.
"""

from __future__ import annotations

import argparse
import fcntl
import functools
import json
import os
import re
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any, Self

GO_DIR = Path(__file__).resolve().parent / "go"
K8S_VERSION = (GO_DIR / "K8S_VERSION").read_text().strip()

# Enabled on top of every gate whose name starts with "DRA", if the binary knows
# it; GenericWorkload is a prerequisite of DRAWorkloadResourceClaims.
EXTRA_GATES = ("ResourceHealthStatus", "ResourceHealthStatusMessage", "ServiceAccountTokenPodNodeInfo", "GenericWorkload")
# Off-by-default API versions to serve (unless stock), by release.  The apiserver rejects
# versions it does not know, so revisit this table when adding a release.
RUNTIME_CONFIG = (
    "resource.k8s.io/v1beta1",
    "resource.k8s.io/v1beta2",
    "resource.k8s.io/v1alpha3",  # DeviceTaintRule (alpha), ResourcePoolStatusRequest
)
WORKLOAD_API = {  # Workload / PodGroup (DRAWorkloadResourceClaims)
    35: "scheduling.k8s.io/v1alpha1",
    36: "scheduling.k8s.io/v1alpha2",
    37: "scheduling.k8s.io/v1beta1",
}
# No kubelet posts heartbeats, so the node lifecycle controller would taint
# every node unreachable after ~40 s; leave it out by default.
DEFAULT_CONTROLLERS = ("*", "-node-lifecycle-controller")
BINARIES = ("etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager")
# With a pod network: the Service range (its first address is the `kubernetes` Service that
# in-cluster clients dial) and the range the nodes' pod subnets (10.244.<n>.0/24) come from.
SERVICE_CIDR = "10.96.0.0/16"
KUBERNETES_SERVICE_IP = "10.96.0.1"
CLUSTER_CIDR = "10.244.0.0/16"
# One pod-network cluster per machine: kube-proxy's iptables chains and the nodes' bridges are
# machine-wide. A second one waits for this lock (POD_NETWORK_WAIT_S), then fails saying why.
POD_NETWORK_LOCK = Path("/run/lock/dra-gpu-pod-network.lock")
POD_NETWORK_WAIT_S = 900.0


class ClusterError(RuntimeError):
    """A component failed to start, died, or the cluster is misused."""


class ApiError(ClusterError):
    """The apiserver answered a request with an HTTP error."""

    def __init__(self, status: int, body: dict[str, Any]) -> None:
        super().__init__(f"HTTP {status}: {body.get('message', body)}")
        self.status = status
        self.body = body


def matrix_versions() -> list[str]:
    """The older releases the matrix e2e also runs on (``testkit/go/K8S_MATRIX``, newest first)."""
    lines = (GO_DIR / "K8S_MATRIX").read_text().split()
    return [v for v in lines if v and not v.startswith("#")]


def minor_of(version: str) -> int:
    """34 for "v1.34.4"."""
    return int(version.removeprefix("v").split(".")[1])


def cache_dir() -> Path:
    return Path(os.environ.get("DRA_GPU_CACHE") or Path.home() / ".cache" / "dra-gpu")


def bin_dir(version: str = K8S_VERSION) -> Path:
    return cache_dir() / f"k8s-{version}" / "bin"


MATRIX_BUILD_WAIT_S = 3600.0


def wait_for_matrix_build(timeout: float = MATRIX_BUILD_WAIT_S) -> None:
    """Wait while ``testkit/go/build-matrix.sh`` runs (it holds its lock); fail with its log if it failed."""
    lock, log = cache_dir() / "matrix-build.lock", cache_dir() / "matrix-build.log"
    if not lock.exists():
        return
    fd = os.open(lock, os.O_RDONLY)
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise ClusterError(f"the matrix build still runs after {timeout:.0f}s; see {log}") from None
                time.sleep(1.0)
    finally:
        os.close(fd)
    text = log.read_text(errors="replace") if log.exists() else ""
    if "FAILED" in text:
        raise ClusterError(f"the matrix build failed; {log} ends:\n{text[-3000:]}")


def find_binaries(names: Sequence[str] = BINARIES, version: str = K8S_VERSION) -> dict[str, Path]:
    """Paths of the built binaries; ClusterError naming testkit/go/build.sh if any is missing."""
    found = {n: bin_dir(version) / n for n in names}
    missing = [n for n, p in found.items() if not os.access(p, os.X_OK)]
    if missing:
        build = GO_DIR / ("build.sh" if version == K8S_VERSION else "build-matrix.sh")
        raise ClusterError(
            f"Kubernetes {version} binaries missing in {bin_dir(version)}: {', '.join(missing)}. "
            f"Build them with: {build} (takes a few minutes cold, then cached)"
        )
    return found


@functools.cache
def known_gates(binary: Path) -> frozenset[str]:
    """Feature gates a component accepts (from its --help; GA/deprecated ones are hidden)."""
    out = subprocess.run([binary, "--help"], capture_output=True, text=True, check=False)
    return frozenset(re.findall(r"^\s+(?:kube:)?(\w+)=true\|false \(", out.stdout + out.stderr, re.MULTILINE))


def default_gates(binary: Path) -> dict[str, bool]:
    known = known_gates(binary)
    return {g: True for g in sorted(known) if g.startswith("DRA") or g in EXTRA_GATES}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def host_ip() -> str:
    """This machine's address on its default route: what pods dial to reach the API server."""
    out = subprocess.run(["ip", "-4", "route", "get", "192.0.2.200"], capture_output=True, text=True, check=False).stdout
    found = re.search(r"\bsrc (\d+\.\d+\.\d+\.\d+)", out)
    if not found:
        raise ClusterError(f"cannot tell this machine's IPv4 address (ip route get printed {out!r}); a pod network needs one")
    return found.group(1)


def _api_error(err: urllib.error.HTTPError) -> ApiError:
    """The API server's error answer as an ApiError (its Status body, or the raw text)."""
    raw = err.read()
    try:
        detail: dict[str, Any] = json.loads(raw)
    except ValueError:
        detail = {"message": raw.decode(errors="replace")}
    return ApiError(err.code, detail)


def _openssl(*args: str | Path) -> None:
    """Run openssl; str arguments are split on spaces, Path arguments are kept whole."""
    argv = [w for a in args for w in ([str(a)] if isinstance(a, Path) else a.split())]
    subprocess.run(["openssl", *argv], check=True, capture_output=True)


_KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters:
- name: e2e
  cluster: {{server: {server}, certificate-authority: {ca}}}
users:
- name: admin
  user: {{token: {token}}}
contexts:
- name: e2e
  context: {{cluster: e2e, user: admin}}
current-context: e2e
"""


def _die_with_parent() -> list[str]:
    """Command prefix making a child get SIGKILL if this process dies without stop().

    (The kernel's parent-death signal follows the forking thread, so start the
    cluster from a thread that outlives it, e.g. the main thread.)
    """
    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", "KILL", "--"] if setpriv else []


def terminate(popen: subprocess.Popen[bytes] | None, timeout: float) -> None:
    """SIGTERM a process, SIGKILL it after ``timeout`` s; no-op when absent or already gone."""
    if popen is not None and popen.poll() is None:
        popen.terminate()
        try:
            popen.wait(timeout)
        except subprocess.TimeoutExpired:
            popen.kill()
            popen.wait()


def tail_log(path: Path, lines: int = 40) -> str:
    """The last ``lines`` lines of a component log, for error messages."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


@dataclass
class _Proc:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path


class LocalCluster:
    """etcd + kube-apiserver (+ scheduler, controller-manager) on random local ports.

    Use as a context manager, or call ``start()``/``stop()``. All state lives in a
    fresh temp dir that ``stop()`` removes; pass ``log_dir`` (outside it) to keep logs.
    """

    def __init__(
        self,
        *,
        with_scheduler: bool = False,
        with_controller_manager: bool = False,
        feature_gates: Mapping[str, bool] | None = None,
        controllers: Sequence[str] = DEFAULT_CONTROLLERS,
        log_dir: Path | None = None,
        ready_timeout: float = 60.0,
        version: str = K8S_VERSION,
        pod_network: bool = False,
        stock: bool = False,
    ) -> None:
        """``stock``: the release's default feature gates and API versions (plus ``feature_gates``),
        as a managed cluster runs it; otherwise every DRA gate the binaries know is on."""
        names = ["kube-apiserver"]
        names += ["kube-scheduler"] if with_scheduler else []
        names += ["kube-controller-manager"] if with_controller_manager else []
        names += ["kube-proxy"] if pod_network else []
        self.binaries = find_binaries(["etcd"]) | find_binaries(names, version)  # etcd of the default release
        self.version = version
        self.with_scheduler = with_scheduler
        self.with_controller_manager = with_controller_manager
        self.controllers = list(controllers)
        self.ready_timeout = ready_timeout
        self.workdir = Path(tempfile.mkdtemp(prefix="dra-gpu-k8s-"))
        self.log_dir = log_dir or self.workdir / "logs"
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.stock = stock
        self.feature_gates = {} if stock else default_gates(self.binaries["kube-apiserver"])
        self.feature_gates.update(feature_gates or {})
        self.token = secrets.token_hex(16)
        self.port = free_port()
        self.server = f"https://127.0.0.1:{self.port}"
        self.kubeconfig = self.workdir / "kubeconfig"
        self.ca_file = self.workdir / "ca.crt"
        self.etcd_url = ""
        # pod_network: pods reach the API server through the `kubernetes` Service, which
        # kube-proxy (iptables mode, one for the machine: every node shares its network
        # namespace) maps to this machine's address; so the API server listens there too.
        self.pod_network = pod_network
        self.host_ip = host_ip() if pod_network else "127.0.0.1"
        self._network_lock: int | None = None
        self.kubelet_client_cert = self.workdir / "kubelet-client.crt"
        self.kubelet_client_key = self.workdir / "kubelet-client.key"
        self.ready_seconds = 0.0  # kube-apiserver start to /readyz OK
        self._procs: list[_Proc] = []
        self._ssl = ssl.create_default_context()

    # -- lifecycle ---------------------------------------------------------

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    def start(self) -> None:
        try:
            if self.pod_network:
                self._lock_pod_network()
                # kube-proxy chains of a run killed before its stop(): with the lock held, nobody's
                subprocess.run([str(self.binaries["kube-proxy"]), "--cleanup"], capture_output=True, check=False)
            self._write_credentials()
            self._start_etcd()
            self._start_apiserver()
            if self.with_scheduler:
                self._start_component("kube-scheduler")
            if self.with_controller_manager:
                self._start_component("kube-controller-manager")
        except BaseException:
            self.stop()
            raise

    def stop(self, timeout: float = 10.0) -> None:
        """Stop components newest first (SIGTERM, SIGKILL after ``timeout`` s); remove temp dir."""
        while self._procs:
            terminate(self._procs.pop().popen, timeout)
        if self._network_lock is not None:
            # kube-proxy's iptables chains outlive it (ours: we hold the lock), then release it
            subprocess.run([str(self.binaries["kube-proxy"]), "--cleanup"], capture_output=True, check=False)
            os.close(self._network_lock)
            self._network_lock = None
        shutil.rmtree(self.workdir, ignore_errors=True)

    @property
    def pids(self) -> dict[str, int]:
        """Process ids of the running components, by binary name."""
        return {p.name: p.popen.pid for p in self._procs}

    def check_alive(self) -> None:
        """ClusterError with the log tail if any component has exited."""
        for proc in self._procs:
            if proc.popen.poll() is not None:
                raise ClusterError(f"{proc.name} exited with {proc.popen.returncode}; log {proc.log}:\n{tail_log(proc.log)}")

    # -- API helpers --------------------------------------------------------

    def api(
        self, method: str, path: str, body: Mapping[str, Any] | None = None, content_type: str = "application/json"
    ) -> dict[str, Any]:
        """One REST call as the cluster admin; raises ApiError on HTTP errors."""
        req = urllib.request.Request(
            self.server + path,
            method=method,
            data=None if body is None else json.dumps(body).encode(),
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": content_type, "Accept": "application/json"},
        )
        try:
            with urllib.request.urlopen(req, context=self._ssl, timeout=30) as resp:
                data: dict[str, Any] = json.loads(resp.read() or b"{}")
                return data
        except urllib.error.HTTPError as err:
            raise _api_error(err) from None

    def api_text(self, method: str, path: str, headers: Mapping[str, str] | None = None) -> str:
        """One REST call as the cluster admin whose answer is text (pod logs); ApiError on HTTP errors."""
        req = urllib.request.Request(
            self.server + path, method=method, headers={"Authorization": f"Bearer {self.token}", **(headers or {})}
        )
        try:
            with urllib.request.urlopen(req, context=self._ssl, timeout=30) as resp:
                return str(resp.read().decode(errors="replace"))
        except urllib.error.HTTPError as err:
            raise _api_error(err) from None

    def add_node(
        self, name: str, labels: Mapping[str, str] | None = None, cpu: str = "32", memory: str = "256Gi", pods: str = "110"
    ) -> dict[str, Any]:
        """Register a Ready Node (no kubelet behind it) that the scheduler can use."""
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        resources = {"cpu": cpu, "memory": memory, "pods": pods}
        status = {
            "capacity": resources,
            "allocatable": resources,
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": "fake node (no kubelet)",
                    "lastHeartbeatTime": now,
                    "lastTransitionTime": now,
                }
            ],
        }
        meta = {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}}
        node = {"apiVersion": "v1", "kind": "Node", "metadata": meta}
        self.api("POST", "/api/v1/nodes", node)
        # Admission adds a not-ready taint that only the (disabled) node lifecycle
        # controller would lift; drop it, then set the status subresource.
        merge = "application/merge-patch+json"
        self.api("PATCH", f"/api/v1/nodes/{name}", {"spec": {"taints": None}}, merge)
        return self.api("PATCH", f"/api/v1/nodes/{name}/status", {"status": status}, merge)

    # -- internals -----------------------------------------------------------

    def _write_credentials(self) -> None:
        """Per-run CA, apiserver serving cert, service-account keys, token and kubeconfig."""
        w, ec = self.workdir, "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"
        ca_key, key, csr, ext = w / "ca.key", w / "apiserver.key", w / "apiserver.csr", w / "san.ext"
        _openssl(f"req -x509 {ec} -days 2 -subj /CN=dra-gpu-e2e-ca -keyout", ca_key, "-out", self.ca_file)
        _openssl(f"req {ec} -subj /CN=kube-apiserver -keyout", key, "-out", csr)
        sans = "IP:127.0.0.1,DNS:localhost"
        if self.pod_network:
            sans += f",IP:{self.host_ip},IP:{KUBERNETES_SERVICE_IP},DNS:kubernetes.default.svc,DNS:kubernetes.default"
        ext.write_text(f"subjectAltName={sans}\nextendedKeyUsage=serverAuth\n")
        x509 = "x509 -req -days 2 -CAcreateserial -in"
        _openssl(x509, csr, "-CA", self.ca_file, "-CAkey", ca_key, "-extfile", ext, "-out", w / "apiserver.crt")
        if self.pod_network:
            # Kubelets then listen on the machine's address, and authenticate callers by this CA:
            # the API server's client certificate (logs, exec) is the one they accept.
            ext.write_text("extendedKeyUsage=clientAuth\n")
            subject = "/O=system:masters/CN=kube-apiserver-kubelet-client"
            _openssl(f"req {ec} -subj {subject} -keyout", self.kubelet_client_key, "-out", w / "kubelet-client.csr")
            ca = ("-CA", self.ca_file, "-CAkey", ca_key, "-extfile", ext)
            _openssl(x509, w / "kubelet-client.csr", *ca, "-out", self.kubelet_client_cert)
        _openssl("ecparam -name prime256v1 -genkey -noout -out", w / "sa.key")
        _openssl("ec -pubout -in", w / "sa.key", "-out", w / "sa.pub")
        (w / "tokens.csv").write_text(f'{self.token},admin,admin,"system:masters"\n')
        self.kubeconfig.write_text(_KUBECONFIG.format(server=self.server, ca=json.dumps(str(self.ca_file)), token=self.token))
        self._ssl = ssl.create_default_context(cafile=str(self.ca_file))

    def _spawn(self, name: str, args: Sequence[str | Path]) -> _Proc:
        log = self.log_dir / f"{name}.log"
        with log.open("ab") as out:
            popen = subprocess.Popen(
                [*_die_with_parent(), str(self.binaries[name]), *map(str, args)],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        proc = _Proc(name, popen, log)
        self._procs.append(proc)
        return proc

    def _wait(self, proc: _Proc, url: str, ctx: ssl.SSLContext | None, headers: Mapping[str, str] | None = None) -> None:
        deadline = time.monotonic() + self.ready_timeout
        last = ""
        while time.monotonic() < deadline:
            self.check_alive()
            try:
                req = urllib.request.Request(url, headers=dict(headers or {}))
                with urllib.request.urlopen(req, context=ctx, timeout=5) as resp:
                    if resp.status == 200:
                        return
            except (OSError, urllib.error.URLError) as err:
                last = str(err)
            time.sleep(0.2)
        raise ClusterError(
            f"{proc.name} not healthy at {url} after {self.ready_timeout:.0f}s ({last}); log {proc.log}:\n{tail_log(proc.log)}"
        )

    def _start_etcd(self) -> None:
        client, peer = f"http://127.0.0.1:{free_port()}", f"http://127.0.0.1:{free_port()}"
        self.etcd_url = client
        proc = self._spawn(
            "etcd",
            [
                "--name=e2e",
                f"--data-dir={self.workdir / 'etcd'}",
                f"--listen-client-urls={client}",
                f"--advertise-client-urls={client}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=e2e={peer}",
                "--unsafe-no-fsync=true",
                "--log-level=warn",
            ],
        )
        self._wait(proc, f"{client}/health", None)

    def _gates_flag(self) -> list[str]:
        if not self.feature_gates:
            return []
        return ["--feature-gates=" + ",".join(f"{k}={str(v).lower()}" for k, v in sorted(self.feature_gates.items()))]

    def _start_apiserver(self) -> None:
        w = self.workdir
        versions = [*RUNTIME_CONFIG, *([WORKLOAD_API[m]] if (m := minor_of(self.version)) in WORKLOAD_API else [])]
        runtime = [] if self.stock else ["--runtime-config=" + ",".join(f"{gv}=true" for gv in versions)]
        started = time.monotonic()
        proc = self._spawn(
            "kube-apiserver",
            [
                f"--etcd-servers={self.etcd_url}",
                f"--bind-address={'0.0.0.0' if self.pod_network else '127.0.0.1'}",
                f"--advertise-address={self.host_ip}",
                f"--secure-port={self.port}",
                f"--tls-cert-file={w / 'apiserver.crt'}",
                f"--tls-private-key-file={w / 'apiserver.key'}",
                f"--cert-dir={w / 'apiserver-certs'}",
                f"--token-auth-file={w / 'tokens.csv'}",
                "--anonymous-auth=false",
                "--authorization-mode=Node,RBAC",
                "--enable-admission-plugins=NodeRestriction",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={w / 'sa.pub'}",
                f"--service-account-signing-key-file={w / 'sa.key'}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--allow-privileged=true",
                f"--client-ca-file={self.ca_file}",  # also publishes the authn configmap
                # 127.0.0.1 is not a valid endpoint; with a pod network the `kubernetes`
                # Service's endpoint is this machine's address.
                f"--endpoint-reconciler-type={'lease' if self.pod_network else 'none'}",
                # Node names do not resolve here; reach kubelets (logs, exec) at their address.
                "--kubelet-preferred-address-types=InternalIP,Hostname",
                *self._kubelet_client_flags(),
                *self._gates_flag(),
                *runtime,
                "--profiling=false",
                "--v=1",
            ],
        )
        self._wait(proc, f"{self.server}/readyz", self._ssl, {"Authorization": f"Bearer {self.token}"})
        self.ready_seconds = time.monotonic() - started

    def _component_args(self, name: str, port: int) -> list[str | Path]:
        cfg = self.kubeconfig
        args: list[str | Path] = [
            f"--kubeconfig={cfg}",
            f"--authentication-kubeconfig={cfg}",
            f"--authorization-kubeconfig={cfg}",
            "--bind-address=127.0.0.1",
            f"--secure-port={port}",
            f"--cert-dir={self.workdir / name}",
            "--leader-elect=false",
            *self._gates_flag(),
            "--v=1",
        ]
        if name == "kube-controller-manager":
            args += [
                f"--controllers={','.join(self.controllers)}",
                f"--service-account-private-key-file={self.workdir / 'sa.key'}",
                f"--root-ca-file={self.ca_file}",
                "--use-service-account-credentials=false",
            ]
        return args

    def _start_component(self, name: str) -> None:
        port = free_port()
        proc = self._spawn(name, self._component_args(name, port))
        insecure = ssl.create_default_context()
        insecure.check_hostname = False
        insecure.verify_mode = ssl.CERT_NONE  # self-signed serving cert in --cert-dir
        self._wait(proc, f"https://127.0.0.1:{port}/healthz", insecure)

    def _lock_pod_network(self) -> None:
        POD_NETWORK_LOCK.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(POD_NETWORK_LOCK, os.O_RDWR | os.O_CREAT, 0o644)
        deadline = time.monotonic() + POD_NETWORK_WAIT_S
        said = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if not said:
                    holder = os.pread(fd, 64, 0).decode(errors="replace").strip()
                    print(
                        f"waiting for another local cluster with a pod network (pid {holder or '?'}) to finish: "
                        f"one per machine ({POD_NETWORK_LOCK})",
                        file=sys.stderr,
                        flush=True,
                    )
                    said = True
                if time.monotonic() > deadline:
                    holder = os.pread(fd, 64, 0).decode(errors="replace").strip()
                    os.close(fd)
                    raise ClusterError(
                        f"another local cluster with a pod network runs on this machine (pid {holder or '?'}, "
                        f"lock {POD_NETWORK_LOCK}); only one can: its kube-proxy and bridges are machine-wide"
                    ) from None
                time.sleep(1)
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        self._network_lock = fd

    def _kubelet_client_flags(self) -> list[str]:
        if not self.pod_network:
            return []
        return [f"--kubelet-client-certificate={self.kubelet_client_cert}", f"--kubelet-client-key={self.kubelet_client_key}"]

    def ensure_kube_proxy(self, node: str) -> None:
        """Start kube-proxy (iptables mode), once for the whole machine, as the proxy of Node
        ``node``, which must be registered: kube-proxy waits for its Node before it programs
        anything. Returns once it serves /healthz. Only with ``pod_network``."""
        if not self.pod_network:
            raise ClusterError("kube-proxy needs LocalCluster(pod_network=True)")
        if any(p.name == "kube-proxy" for p in self._procs):
            return
        health, metrics = free_port(), free_port()
        proc = self._spawn(
            "kube-proxy",
            [
                f"--kubeconfig={self.kubeconfig}",
                "--proxy-mode=iptables",
                f"--cluster-cidr={CLUSTER_CIDR}",
                f"--hostname-override={node}",
                "--nodeport-addresses=primary",
                f"--healthz-bind-address=127.0.0.1:{health}",
                f"--metrics-bind-address=127.0.0.1:{metrics}",
                # Leave the machine's conntrack settings alone (table size and TCP timeouts).
                "--conntrack-max-per-core=0",
                "--conntrack-tcp-timeout-established=0",
                "--conntrack-tcp-timeout-close-wait=0",
                "--v=1",
            ],
        )
        self._wait(proc, f"http://127.0.0.1:{health}/healthz", None)


def _main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testkit.cluster", description="Run a local Kubernetes control plane.")
    parser.add_argument("command", choices=["up"])
    parser.add_argument("--no-scheduler", action="store_true")
    parser.add_argument("--no-controller-manager", action="store_true")
    parser.add_argument("--node", action="append", default=[], help="register a fake Node")
    parser.add_argument("--log-dir", type=Path, help="keep component logs here")
    args = parser.parse_args(argv)

    def on_term(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    try:
        with LocalCluster(
            with_scheduler=not args.no_scheduler, with_controller_manager=not args.no_controller_manager, log_dir=args.log_dir
        ) as cluster:
            for node in args.node:
                cluster.add_node(node)
            print(
                f"Kubernetes {cluster.version} ready in {cluster.ready_seconds:.1f}s "
                f"at {cluster.server}\nlogs: {cluster.log_dir}\n"
                f"export KUBECONFIG={cluster.kubeconfig}\n(Ctrl-C to stop)",
                flush=True,
            )
            while True:
                cluster.check_alive()
                time.sleep(1)
    except KeyboardInterrupt:
        print("stopped", file=sys.stderr)
        return 0
    except ClusterError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(_main())
