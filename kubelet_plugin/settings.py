"""The kubelet plugin's settings: one frozen dataclass from flags, each flag also an env var.

Parsed once by ``kubelet_plugin.main``; mirrored by the Helm chart's values. Defaults follow
the kubelet's conventions (socket directories) and the CDI runtimes' (``/var/run/cdi``).
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from pathlib import Path

from dra_driver.appkit.flags import (
    add_common_flags,
    add_metrics_flags,
    check_common_flags,
    check_metrics_flags,
    env,
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


def parse(argv: list[str] | None = None) -> Settings:
    """Parse flags (env vars as defaults); exit with a message naming a bad value."""
    p = argparse.ArgumentParser(prog="dra-gpu-kubelet-plugin", description="dra-gpu kubelet plugin (DRA driver for GPUs)")
    add_common_flags(p)
    p.add_argument(
        "--registrar-dir",
        default=env("REGISTRAR_DIR", "/var/lib/kubelet/plugins_registry"),
        help="kubelet plugin registration dir [REGISTRAR_DIR]",
    )
    p.add_argument(
        "--plugin-dir",
        default=env("PLUGIN_DIR"),
        help="DRA socket and state dir, default /var/lib/kubelet/plugins/<driver> [PLUGIN_DIR]",
    )
    p.add_argument("--cdi-root", default=env("CDI_ROOT", "/var/run/cdi"), help="where CDI specs are written [CDI_ROOT]")
    p.add_argument(
        "--pod-uid", default=env("POD_UID"), help="this pod's UID, for per-pod socket names during rolling updates [POD_UID]"
    )
    p.add_argument(
        "--healthcheck-port",
        type=int,
        default=int(env("HEALTHCHECK_PORT", "51515") or 51515),
        help="gRPC health port, 0 = any, -1 = off [HEALTHCHECK_PORT]",
    )
    p.add_argument(
        "--healthcheck-address",
        default=env("HEALTHCHECK_ADDRESS", "[::]"),
        help="gRPC health bind address [HEALTHCHECK_ADDRESS]",
    )
    p.add_argument(
        "--publish-slices",
        default=env("PUBLISH_SLICES", "true"),
        choices=["true", "false"],
        help="publish this node's ResourceSlices [PUBLISH_SLICES]",
    )
    p.add_argument(
        "--boot-id-file",
        default=env("BOOT_ID_FILE", "/proc/sys/kernel/random/boot_id"),
        help="where the node boot id is read [BOOT_ID_FILE]",
    )
    p.add_argument(
        "--gc-interval",
        type=float,
        default=float(env("GC_INTERVAL", "600") or 600),
        help="seconds between passes that unprepare claims whose ResourceClaim is gone, 0 = off [GC_INTERVAL]",
    )
    p.add_argument(
        "--nvidia-bin-dir",
        default=env("NVIDIA_BIN_DIR", "/driver-root/usr/bin"),
        help="where nvidia-smi and nvidia-cuda-mps-control are (real GPUs) [NVIDIA_BIN_DIR]",
    )
    p.add_argument(
        "--driver-root",
        default=env("DRIVER_ROOT"),
        help="where the plugin sees the NVIDIA driver's root, whose user space (libcuda.so.1, nvidia-smi...) each claim's "
        "containers get when the toolkit's CDI spec does not list the device; default /driver-root with real GPUs, "
        "none with fake GPUs (given, fake GPUs need it too) [DRIVER_ROOT]",
    )
    p.add_argument(
        "--driver-root-host-path",
        default=env("DRIVER_ROOT_HOST_PATH"),
        help="the driver root's path on the host, which the CDI specs' mounts name (the chart's gpus.nvml.driverRoot); "
        "default: --driver-root [DRIVER_ROOT_HOST_PATH]",
    )
    p.add_argument(
        "--device-status",
        default=env("DEVICE_STATUS", "true"),
        choices=["true", "false"],
        help="report prepared devices in their ResourceClaim's status.devices (needs the chart's "
        "deviceStatus RBAC) [DEVICE_STATUS]",
    )
    _add_health_flags(p)
    add_metrics_flags(p, "plugin")
    p.add_argument(
        "--metrics-tenant-labels",
        default=env("METRICS_TENANT_LABELS", "false"),
        choices=["true", "false"],
        help="label the per-claim usage series with the claim's namespace, name and pods (default false: the claim's "
        "UID only) [METRICS_TENANT_LABELS]",
    )
    a = p.parse_args(argv)
    driver = check_common_flags(p, a)
    metrics_auth = check_metrics_flags(p, a)
    if a.usage_interval < 0:
        p.error(f"--usage-interval: {a.usage_interval} is negative")
    if not all(math.isfinite(v) and v > 0 for v in (a.health_check_interval, a.health_hold)):
        p.error("--health-check-interval and --health-hold must be positive numbers")
    if not math.isfinite(a.usage_interval):
        p.error(f"--usage-interval: {a.usage_interval} is not a number")
    if a.gc_interval < 0:
        p.error(f"--gc-interval: {a.gc_interval} is negative")
    plugin_dir = Path(a.plugin_dir or f"/var/lib/kubelet/plugins/{driver}").absolute()
    driver_root = a.driver_root or (None if a.fake_gpus else "/driver-root")
    host_root = a.driver_root_host_path or driver_root
    for flag, value in (("--driver-root", driver_root), ("--driver-root-host-path", host_root)):
        if value is not None and not value.startswith("/"):
            p.error(f"{flag}: {value!r} is not an absolute path")
    if a.pod_uid is not None and not all(c.isalnum() or c == "-" for c in a.pod_uid):
        p.error(f"--pod-uid: {a.pod_uid!r} is not a UID")
    return Settings(
        node_name=a.node_name,
        driver_name=driver,
        fake_gpus=a.fake_gpus or None,
        registrar_dir=Path(a.registrar_dir).absolute(),
        plugin_dir=plugin_dir,
        cdi_root=Path(a.cdi_root).absolute(),
        kubeconfig=a.kubeconfig or None,
        pod_uid=a.pod_uid or None,
        healthcheck_port=a.healthcheck_port,
        healthcheck_address=a.healthcheck_address,
        publish_slices=a.publish_slices == "true",
        log_level=a.log_level,
        boot_id_file=Path(a.boot_id_file),
        mig=MigStrategy(a.mig),
        consumable=a.sharing == "consumable",
        fake_gpu_state_dir=Path(a.fake_gpu_state_dir).absolute() if a.fake_gpu_state_dir else plugin_dir / "fake-gpus",
        fake_mig_latency=a.fake_mig_latency,
        gc_interval_s=a.gc_interval,
        nvidia_bin_dir=Path(a.nvidia_bin_dir),
        driver_root=Path(driver_root) if driver_root else None,
        driver_root_host_path=host_root or "/",
        device_status=a.device_status == "true",
        metrics_port=a.metrics_port,
        metrics_address=a.metrics_address,
        metrics_auth=metrics_auth,
        metrics_tenant_labels=a.metrics_tenant_labels == "true",
        health=a.health,
        health_evict=a.health_evict == "true",
        health_check_interval_s=a.health_check_interval,
        health_hold_s=a.health_hold,
        health_stream=a.health_stream == "true",
        usage_interval_s=a.usage_interval,
    )


def _add_health_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--usage-interval",
        type=float,
        default=float(env("USAGE_INTERVAL", "10") or 10),
        help="seconds between per-claim GPU utilization samples for /metrics, 0 = off [USAGE_INTERVAL]",
    )
    p.add_argument(
        "--health",
        default=env("HEALTH", "auto"),
        choices=["auto", "off"],
        help="GPU health monitoring: auto (NVML events and checks; the fault file with fake GPUs), off [HEALTH]",
    )
    p.add_argument(
        "--health-evict",
        default=env("HEALTH_EVICT", "false"),
        choices=["true", "false"],
        help="taint GPUs with a fatal cause NoExecute, so pods using them are evicted (else NoSchedule) [HEALTH_EVICT]",
    )
    p.add_argument(
        "--health-check-interval",
        type=float,
        default=float(env("HEALTH_CHECK_INTERVAL", "10") or 10),
        help="seconds between health checks (lost GPU, memory repair pending) [HEALTH_CHECK_INTERVAL]",
    )
    p.add_argument(
        "--health-hold",
        type=float,
        default=float(env("HEALTH_HOLD", "600") or 600),
        help="seconds an application or informational cause (effect None taint) stays without recurring [HEALTH_HOLD]",
    )
    p.add_argument(
        "--health-stream",
        default=env("HEALTH_STREAM", "true"),
        choices=["true", "false"],
        help="serve the kubelet's DRAResourceHealth stream (pod status shows device health) [HEALTH_STREAM]",
    )
