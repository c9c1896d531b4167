"""The control plane of one scenario: ``LocalCluster`` with the scheduler and the resourceclaim controller.

Used by ``bench.cluster_scale.run``. The components are the cached Kubernetes binaries with every
DRA feature gate they know on (``LocalCluster``'s default mode: DRAPartitionableDevices, which
dynamic MIG's counters need, among them), or with ``stock`` the release's default gates (alpha
ones off, as a managed cluster runs). Two things differ from the e2e tests' clusters:

* the scheduler and the controller manager talk to the API server at ``qps``/``burst`` (5000 by
  default, what scheduler_perf gives its in-process scheduler and resourceclaim controller);
  at the components' own defaults (scheduler 50, controller manager 20) the controller manager,
  which writes two objects per pod (the claim, then the pod's claim status), caps the whole
  pipeline at about 10 pods/s;
* the controller manager runs the resourceclaim controller only (claims from templates), as
  scheduler_perf does; the pods' service account is created by the bench, not by a controller.

``cpu_seconds`` reads each component's CPU time from /proc, for where the two cores went. The
scheduler serves its CPU profile (``/debug/pprof``, ``--profiling`` is on by default) to the
bench's admin token on ``scheduler_url``; ``bench.cluster_scale.pprof`` records it.
"""

from __future__ import annotations

import os
from pathlib import Path

from testkit.cluster import LocalCluster

CONTROLLERS = ("resourceclaim-controller",)
SCHEDULER_PERF_QPS = 5000


class ScaleCluster(LocalCluster):
    """etcd, kube-apiserver, kube-scheduler and kube-controller-manager (resourceclaim controller only)."""

    def __init__(self, *, qps: int, log_dir: Path | None = None, stock: bool = False) -> None:
        super().__init__(with_scheduler=True, with_controller_manager=True, controllers=CONTROLLERS, log_dir=log_dir, stock=stock)
        self.qps = qps
        self.scheduler_url = ""  # https://127.0.0.1:PORT once the scheduler is started

    def _component_args(self, name: str, port: int) -> list[str | Path]:
        args = super()._component_args(name, port)
        if name == "kube-scheduler":
            self.scheduler_url = f"https://127.0.0.1:{port}"
        if self.qps > 0:
            args += [f"--kube-api-qps={self.qps}", f"--kube-api-burst={self.qps}"]
        return args

    def cpu_seconds(self) -> dict[str, float]:
        """CPU time (user + system) each running component has used so far, by binary name."""
        out: dict[str, float] = {}
        tick = os.sysconf("SC_CLK_TCK")
        for name, pid in self.pids.items():
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            out[name] = (int(fields[11]) + int(fields[12])) / tick  # utime, stime (fields 14 and 15)
        return out


def own_cpu_seconds() -> float:
    """CPU time of this process (the publishers' threads, pod creation, the binding watch)."""
    t = os.times()
    return t.user + t.system
