"""The kubelet plugin's settings: one frozen dataclass, and the table of flags (each also an env var) that fills it.

Parsed once by ``kubelet_plugin.main`` (``parse``); the Helm chart sets the env vars
(``tests/chart`` checks them against ``FLAGS``), and ``docs/reference/flags.md`` lists them
(``scripts/gen_reference.py flags``). Defaults follow the kubelet's conventions (socket
directories) and the CDI runtimes' (``/var/run/cdi``). Rows: ``dra_driver.appkit.flag_table``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dra_driver.appkit.flag_table import BOOL, FLOAT, INT, Fail, Flag, FlagTable, Values, absolute_path, as_path, optional, rows
from dra_driver.appkit.flags import (
    COMMON_FLAGS,
    METRICS_DERIVED,
    NODE_GUARD_FLAGS,
    check_common,
    check_metrics,
    check_node_guards,
    metrics_flags,
)
from dra_driver.core.mig import MigStrategy
from dra_driver.obs.ports import DEFAULT_METRICS_ADDRESS
from dra_driver.obs.scrape_auth import NO_SCRAPE_AUTH, ScrapeAuthConfig


@dataclass(frozen=True, slots=True)
class Settings:
    """Everything the plugin needs to start."""

    node_name: str
    driver_name: str
    fake_gpus: str | None
    registrar_dir: Path
    plugin_dir: Path
    cdi_root: Path
    kubeconfig: str | None
    pod_uid: str | None
    healthcheck_port: int
    healthcheck_address: str
    publish_slices: bool
    log_level: str
    boot_id_file: Path
    mig: MigStrategy = MigStrategy.NONE
    mig_profiles: tuple[str, ...] = ()
    """Dynamic MIG publishes only these profiles or families (``dra_driver.core.mig_profiles``); empty: all."""
    consumable: bool = False
    fake_gpu_state_dir: Path | None = None
    fake_mig_latency: str = "realistic"
    gc_interval_s: float = 600.0
    nvidia_bin_dir: Path = Path("/driver-root/usr/bin")
    driver_root: Path | None = None
    """Where the plugin sees the driver's root (the chart mounts gpus.nvml.driverRoot at /driver-root); None: no
    driver needed (fake GPUs unless --driver-root is given). Its user space is found there at start-up."""
    driver_root_host_path: str = "/"
    """The driver root's path on the host: the CDI specs' mounts name host paths."""
    device_status: bool = True
    metrics_port: int = -1
    """Prometheus /metrics port (``dra_driver.obs.metrics``), 0 = any, -1 = off (the flag's default: 9420)."""
    metrics_address: str = DEFAULT_METRICS_ADDRESS
    metrics_auth: ScrapeAuthConfig = NO_SCRAPE_AUTH
    """Who may scrape /metrics (``dra_driver.obs.scrape_auth``): nothing configured, anyone who reaches it."""
    metrics_tenant_labels: bool = False
    """The per-claim usage series name the claim's namespace, name and pods (else its UID only)."""
    health: str = "auto"
    """GPU health monitoring: ``auto`` (NVML, or the fault file with fake GPUs) or ``off``."""
    health_evict: bool = False
    """Fatal causes taint ``NoExecute`` (the controller-manager evicts the pods) instead of ``NoSchedule``."""
    health_check_interval_s: float = 10.0
    health_hold_s: float = 600.0
    health_stream: bool = True
    usage_interval_s: float = 10.0
    """Seconds between per-claim utilization samples (0: off; nothing is sampled while metrics are off)."""
    retry_waiting_pods: bool = True
    """After each registration, annotate the node's waiting pods (Pending, or Running with a container not running)
    with a claim of this driver, so the kubelet retries their prepare at once instead of at its next resync, 60-90 s
    later (``kubelet_plugin.waiting_pods``)."""
    device_plugin_check_interval_s: float = 30.0
    """Seconds between reads of the Node for a device plugin's GPUs (0: guard off,
    ``dra_driver.appkit.device_plugin_guard``)."""
    local_cordon_check_interval_s: float = 10.0
    """Seconds between reads of the Node for devices ``dra-gpu cordon`` withholds locally (0: off,
    ``dra_driver.appkit.local_cordon``)."""


PLUGIN_FLAGS = (
    Flag("registrar-dir", "kubelet plugin registration dir", "/var/lib/kubelet/plugins_registry", value=absolute_path),
    Flag("plugin-dir", "DRA socket and state dir, default /var/lib/kubelet/plugins/<driver>"),
    Flag("cdi-root", "where CDI specs are written", "/var/run/cdi", value=absolute_path),
    Flag("pod-uid", "this pod's UID, for per-pod socket names during rolling updates", value=optional),
    Flag("healthcheck-port", "gRPC health port, 0 = any, -1 = off", "51515", kind=INT),
    Flag("healthcheck-address", "gRPC health bind address", "[::]"),
    Flag("publish-slices", "publish this node's ResourceSlices", "true", kind=BOOL),
    Flag("boot-id-file", "where the node boot id is read", "/proc/sys/kernel/random/boot_id", value=as_path),
    Flag(
        "gc-interval",
        "seconds between passes that unprepare claims whose ResourceClaim is gone, 0 = off",
        "600",
        kind=FLOAT,
        field="gc_interval_s",
    ),
    Flag(
        "nvidia-bin-dir",
        "where nvidia-smi and nvidia-cuda-mps-control are (real GPUs)",
        "/driver-root/usr/bin",
        value=as_path,
    ),
    Flag(
        "driver-root",
        "where the plugin sees the NVIDIA driver's root, whose user space (libcuda.so.1, nvidia-smi...) each claim's "
        "containers get when the toolkit's CDI spec does not list the device; default /driver-root with real GPUs, "
        "none with fake GPUs (given, fake GPUs need it too)",
    ),
    Flag(
        "driver-root-host-path",
        "the driver root's path on the host, which the CDI specs' mounts name (the chart's gpus.nvml.driverRoot); "
        "default: --driver-root",
    ),
    Flag(
        "device-status",
        "report prepared devices in their ResourceClaim's status.devices (needs the chart's deviceStatus RBAC)",
        "true",
        kind=BOOL,
    ),
    Flag(
        "retry-waiting-pods",
        "after registering, annotate this node's waiting pods (Pending, or Running with a container not running) "
        "that have a claim of this driver, so the kubelet retries their prepare at once instead of 60-90 s later "
        "(needs the chart's kubeletPlugin.retryWaitingPods RBAC)",
        "true",
        kind=BOOL,
    ),
)
"""The plugin's own node flags: directories, sockets, the health port, publishing, GC, the driver root
(the device-plugin guard and local cordon are ``dra_driver.appkit.flags.NODE_GUARD_FLAGS``, the controller's too)."""

HEALTH_FLAGS = (
    Flag(
        "usage-interval",
        "seconds between per-claim GPU utilization samples for /metrics, 0 = off",
        "10",
        kind=FLOAT,
        field="usage_interval_s",
    ),
    Flag(
        "health",
        "GPU health monitoring: auto (NVML events and checks; the fault file with fake GPUs), off",
        "auto",
        choices=("auto", "off"),
    ),
    Flag(
        "health-evict",
        "taint GPUs with a fatal cause NoExecute, so pods using them are evicted (else NoSchedule)",
        "false",
        kind=BOOL,
    ),
    Flag(
        "health-check-interval",
        "seconds between health checks (lost GPU, memory repair pending)",
        "10",
        kind=FLOAT,
        field="health_check_interval_s",
    ),
    Flag(
        "health-hold",
        "seconds an application or informational cause (effect None taint) stays without recurring",
        "600",
        kind=FLOAT,
        field="health_hold_s",
    ),
    Flag("health-stream", "serve the kubelet's DRAResourceHealth stream (pod status shows device health)", "true", kind=BOOL),
)
"""GPU health monitoring and usage sampling."""

TENANT_LABELS = Flag(
    "metrics-tenant-labels",
    "label the per-claim usage series with the claim's namespace, name and pods (default false: the claim's UID only)",
    "false",
    kind=BOOL,
)


def _check(fail: Fail, values: Values, parsed: Mapping[str, Any]) -> None:
    """The common and metrics checks, then the plugin's; the paths that default from others filled in."""
    check_common(fail, values)
    check_metrics(fail, values, parsed)
    usage = values["usage_interval_s"]
    if usage < 0:
        fail(f"--usage-interval: {usage} is negative")
    if not all(math.isfinite(v) and v > 0 for v in (values["health_check_interval_s"], values["health_hold_s"])):
        fail("--health-check-interval and --health-hold must be positive numbers")
    if not math.isfinite(usage):
        fail(f"--usage-interval: {usage} is not a number")
    if values["gc_interval_s"] < 0:
        fail(f"--gc-interval: {values['gc_interval_s']} is negative")
    check_node_guards(fail, values)
    plugin_dir = Path(values["plugin_dir"] or f"/var/lib/kubelet/plugins/{values['driver_name']}").absolute()
    driver_root = values["driver_root"] or (None if values["fake_gpus"] else "/driver-root")
    host_root = values["driver_root_host_path"] or driver_root
    for flag, value in (("--driver-root", driver_root), ("--driver-root-host-path", host_root)):
        if value is not None and not value.startswith("/"):
            fail(f"{flag}: {value!r} is not an absolute path")
    pod_uid = values["pod_uid"]
    if pod_uid is not None and not all(c.isalnum() or c == "-" for c in pod_uid):
        fail(f"--pod-uid: {pod_uid!r} is not a UID")
    state_dir = values["fake_gpu_state_dir"]
    values.update(
        plugin_dir=plugin_dir,
        fake_gpu_state_dir=state_dir.absolute() if state_dir else plugin_dir / "fake-gpus",
        driver_root=Path(driver_root) if driver_root else None,
        driver_root_host_path=host_root or "/",
    )


FLAGS: FlagTable[Settings] = FlagTable(
    daemon="kubelet plugin",
    prog="dra-gpu-kubelet-plugin",
    description="dra-gpu kubelet plugin (DRA driver for GPUs)",
    settings=Settings,
    rows=rows(COMMON_FLAGS, PLUGIN_FLAGS, NODE_GUARD_FLAGS, HEALTH_FLAGS, metrics_flags("plugin"), (TENANT_LABELS,)),
    check=_check,
    derived=METRICS_DERIVED,
)
"""The plugin's flags, in ``--help``'s order."""


def parse(argv: list[str] | None = None) -> Settings:
    """Parse flags (env vars as defaults); exit with a message naming a bad value."""
    return FLAGS.parse(argv)
