"""What one scenario measured (``Scenario``), the printed table, and the machine facts.

``Scenario`` is filled in step by step by ``bench.cluster_scale.run.run_scenario`` (so a scenario
cut short by the deadline still shows what it got); ``report`` is called by
``bench.cluster_scale.cli.main`` with every scenario, ``machine_facts`` before the first one.
"""

from __future__ import annotations

import os
import platform
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bench.cluster_scale.explain_probe import ExplainTiming
from bench.cluster_scale.writes import resource_total
from testkit.cluster import K8S_VERSION

# test/integration/scheduler_perf/dra/performance-config.yaml, SchedulingWithResourceClaimTemplate
# and SteadyStateClusterResourceClaimTemplate at 500 nodes, 10 devices per node: 40-70 pods/s
# thresholds (see the reference notes, A1). No DRA threshold exists at 100 nodes.
FLOOR_NODES = 500
FLOOR = "40-70"


@dataclass
class Scenario:
    """One layout at one node count; figures stay None (printed "-") where the run did not get there."""

    layout: str
    nodes: int
    devices_per_node: int = 0
    slices_per_node: int = 0
    slices: int | None = None  # in the API server, after publishing
    devices: int | None = None
    register_s: float | None = None
    build_s: float | None = None
    publish_s: float | None = None
    capacity: int = 0  # pods of this kind the cluster can hold
    pods: int = 0  # measured pods created
    create_s: float | None = None  # first POST to last POST answered
    bound: int = 0
    unbound_at_created: int | None = None  # created but not yet bound when the last creation returned
    sched_s: float | None = None  # first POST to last bind
    latencies: list[float] = field(default_factory=list)  # creation -> bind, per bound pod
    cpu_sched: dict[str, float] = field(default_factory=dict)  # CPU seconds per component while scheduling
    steady_s: float | None = None
    writes: dict[str, int] | None = None  # API writes in the steady window, by "resource VERB"
    resync_writes: int | None = None  # writes made by one forced reconcile pass of every publisher
    steady_cpu_pct: float | None = None  # this process (the publishers) while idle, % of one core
    explain: ExplainTiming | None = None
    publisher_errors: int = 0
    pprof: list[str] = field(default_factory=list)  # the scheduler's top functions over the scheduling window
    notes: list[str] = field(default_factory=list)

    @property
    def pods_per_s(self) -> float | None:
        if not self.bound or not self.sched_s:
            return None
        return self.bound / self.sched_s

    @property
    def sched_ms_per_pod(self) -> float | None:
        """The scheduler's CPU milliseconds per bound pod over the scheduling window."""
        cpu = self.cpu_sched.get("kube-scheduler")
        return None if cpu is None or not self.bound else 1000 * cpu / self.bound


def pct(values: Sequence[float], p: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def _f(v: float | None, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


COLUMNS = (
    ("layout", 12),
    ("nodes", 5),
    ("dev/node", 8),
    ("slices", 6),
    ("publish s", 9),
    ("pods", 9),
    ("pods/s", 7),
    ("sched ms", 8),
    ("x full", 6),
    ("floor*", 6),
    ("p50 s", 6),
    ("p99 s", 6),
    ("writes**", 9),
    ("explain s", 9),
)


def _ratio(s: Scenario, scenarios: Sequence[Scenario]) -> str:
    """The scheduler's CPU per pod against the ``full`` layout's at the same node count."""
    base = next((x.sched_ms_per_pod for x in scenarios if x.layout == "full" and x.nodes == s.nodes), None)
    mine = s.sched_ms_per_pod
    return "-" if not base or mine is None else f"{mine / base:.1f}"


def _row(s: Scenario, scenarios: Sequence[Scenario]) -> list[str]:
    pods = f"{s.bound}/{s.pods}" if s.pods else "-"
    writes = "-" if s.writes is None else f"{resource_total(s.writes, 'resourceslices')}/{sum(s.writes.values())}"
    ex = "-"
    if s.explain is not None and s.explain.seconds:
        ex = f"{statistics.median(s.explain.seconds):.2f}" + ("!" if s.explain.error else "")
    return [
        s.layout,
        str(s.nodes),
        str(s.devices_per_node or "-"),
        "-" if s.slices is None else str(s.slices),
        _f(s.publish_s, ".1f"),
        pods,
        _f(s.pods_per_s, ".1f"),
        _f(s.sched_ms_per_pod, ".0f"),
        _ratio(s, scenarios),
        FLOOR if s.nodes == FLOOR_NODES else "-",
        _f(pct(s.latencies, 50), ".2f"),
        _f(pct(s.latencies, 99), ".2f"),
        writes,
        ex,
    ]


def table(scenarios: Sequence[Scenario]) -> str:
    head = " ".join(f"{name:>{w}}" for name, w in COLUMNS)
    lines = [head, "-" * len(head)]
    for s in scenarios:
        lines.append(" ".join(f"{cell:>{w}}" for cell, (_, w) in zip(_row(s, scenarios), COLUMNS, strict=True)))
    return "\n".join(lines)


def _details(s: Scenario) -> list[str]:
    out = [f"{s.layout} x {s.nodes} nodes:"]
    setup = [
        f"nodes registered in {_f(s.register_s, '.1f')}s",
        f"publications computed in {_f(s.build_s, '.1f')}s",
        f"{_f(s.publish_s, '.1f')}s until all {s.nodes} publishers synced",
    ]
    if s.devices is not None:
        setup.append(f"{s.slices} slices / {s.devices} devices in the API server")
    out.append("  setup: " + ", ".join(setup))
    if s.pods:
        rate = s.pods / s.create_s if s.create_s else None
        capped = f" (capacity {s.capacity})" if s.capacity <= s.pods else ""
        out.append(
            f"  scheduling: {s.pods} pods{capped} created in {_f(s.create_s, '.1f')}s ({_f(rate, '.0f')} pods/s), "
            f"{_f(s.unbound_at_created, '.0f')} of them not yet bound then; "
            f"{s.bound} bound in {_f(s.sched_s, '.1f')}s; creation->bind p50 {_f(pct(s.latencies, 50), '.2f')}s "
            f"p90 {_f(pct(s.latencies, 90), '.2f')}s p99 {_f(pct(s.latencies, 99), '.2f')}s "
            f"max {_f(pct(s.latencies, 100), '.2f')}s"
        )
    if s.cpu_sched:
        total = sum(s.cpu_sched.values())
        parts = ", ".join(f"{k} {v:.1f}" for k, v in sorted(s.cpu_sched.items(), key=lambda kv: -kv[1]))
        busy = f" = {total / s.sched_s:.2f} of 2 cores" if s.sched_s else ""
        out.append(f"  CPU seconds while scheduling: {parts} (total {total:.0f}{busy})")
    if s.writes is not None:
        listed = ", ".join(f"{k} {v}" for k, v in s.writes.items()) or "none"
        out.append(
            f"  steady state {_f(s.steady_s, '.0f')}s: API writes {listed}; a forced resync of every publisher wrote "
            f"{_f(s.resync_writes, '.0f')}; publishers' process {_f(s.steady_cpu_pct, '.1f')}% of a core while idle"
        )
    if s.explain is not None:
        e = s.explain
        runs = " ".join(f"{x:.2f}" for x in e.seconds)
        answer = f"exit {e.exit_codes[-1] if e.exit_codes else '?'}, {e.lines} lines: {e.verdict}"
        out.append(f"  explain: runs {runs} s; {answer}" + (f"; ERROR {e.error}" if e.error else ""))
    if s.publisher_errors:
        out.append(f"  publishers with an error: {s.publisher_errors}")
    out += [f"  note: {n}" for n in s.notes]
    if s.pprof:
        out += ["  kube-scheduler CPU profile over the scheduling window:", *(f"    {x}" for x in s.pprof)]
    return out


def report(scenarios: Sequence[Scenario], facts: list[str], settings: list[str]) -> str:
    lines = [
        "dra-gpu at cluster scale: fake nodes with 8 fake H100s each, dra-gpu's SlicePublisher per node, the real kube-scheduler",
        "",
        table(scenarios),
        "",
        "pods: bound/created; pods/s: bound pods / (first pod created -> last pod bound); p50/p99: one pod's creation -> bind.",
        "sched ms: kube-scheduler CPU milliseconds per bound pod while scheduling; x full: that against the full layout's "
        "at the same node count (same run).",
        f"* floor: scheduler_perf's DRA thresholds at {FLOOR_NODES} nodes with 10 devices per node (claim templates, "
        "kube-scheduler with its own cores); none at 100 nodes.",
        "** writes: API writes to resourceslices / all writes in the steady-state window (goal 0 from the publishers).",
        "explain s: median wall time of `dra-gpu explain pod/...` (a fresh process) for a Pending pod against the whole cluster"
        " (! = error).",
        "",
    ]
    for s in scenarios:
        lines += _details(s)
    lines += ["", *settings, *facts]
    return "\n".join(lines)


def machine_facts() -> list[str]:
    cores = os.cpu_count()
    usable = len(os.sched_getaffinity(0))
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    mem = "?"
    try:
        first = Path("/proc/meminfo").read_text().splitlines()[0]
        mem = f"{int(first.split()[1]) / 2**20:.0f} GiB"
    except (OSError, ValueError, IndexError):
        pass
    return [
        f"machine: {cores} cores ({usable} usable), {mem} memory, load average {load} at start, "
        f"{platform.machine()} {platform.release()}",
        f"python {platform.python_version()}; Kubernetes {K8S_VERSION} (etcd, kube-apiserver, kube-scheduler, "
        "kube-controller-manager), feature gates as the settings line says",
    ]
