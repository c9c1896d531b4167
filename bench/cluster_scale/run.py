"""One scenario from start to finish: control plane, nodes, pools, pods, steady state, explain.

``run_scenario`` is called by ``bench.cluster_scale.cli.main`` once per (node count, layout), each
on a fresh cluster that it stops before returning (also on errors and the deadline, which
``bench.peer.guard.Guard`` turns into an exception in the main thread). It fills in the
``Scenario`` it is given as it goes, so what a cut-short scenario got is still printed.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from bench.cluster_scale.api import Api
from bench.cluster_scale.cluster import ScaleCluster, own_cpu_seconds
from bench.cluster_scale.explain_probe import probe_pod, time_explain
from bench.cluster_scale.fleet import Fleet, count_slices, publication, register_nodes
from bench.cluster_scale.pprof import SchedulerProfile
from bench.cluster_scale.report import Scenario
from bench.cluster_scale.workload import Bindings, create_pods, pod, setup
from bench.cluster_scale.writes import delta, write_counts
from dra_driver.core.driver import DEFAULT_DRIVER_NAME
from dra_driver.core.mig_publish import Publication


def say(msg: str) -> None:
    print(f"bench: {msg}", file=sys.stderr, flush=True)


def capacity(pub: Publication, layout: str) -> int:
    """Pods of this layout's kind one node holds: its full GPUs, or its 1g.10gb placements (7 per H100 fit together)."""
    d = DEFAULT_DRIVER_NAME

    def attr(dev: dict[str, Any], name: str) -> Any:
        a = (dev.get("attributes") or {}).get(name) or (dev.get("attributes") or {}).get(f"{d}/{name}") or {}
        return a.get("string")

    devices = [x.to_api() for x in pub.devices]
    if layout == "full":
        return sum(1 for x in devices if attr(x, "type") == "gpu")
    return sum(1 for x in devices if attr(x, "type") == "mig" and attr(x, "profile") == "1g.10gb")


def run_scenario(s: Scenario, args: argparse.Namespace, cluster: ScaleCluster) -> None:
    """Measure one scenario on ``cluster`` (started here, stopped by the caller)."""
    t_all = time.monotonic()
    cluster.start()
    api = Api(cluster.server, cluster.token, cluster.ca_file)
    say(f"{s.layout} x {s.nodes}: control plane up in {time.monotonic() - t_all:.1f}s")
    template, classes_source = setup(api, s.layout)
    s.notes.append(f"DeviceClasses: {classes_source}; claim template {template} (demo/)")
    nodes, s.register_s = register_nodes(cluster.add_node, s.nodes)
    say(f"{s.nodes} nodes registered in {s.register_s:.1f}s")

    fleet = Fleet(s.layout)
    bindings = Bindings(api)
    try:
        fleet.start(nodes, cluster.kubeconfig, args.publish_timeout)
        s.devices_per_node, s.slices_per_node = fleet.devices_per_node, fleet.slices_per_node
        s.build_s, s.publish_s = fleet.build_s, fleet.publish_s
        s.slices, s.devices = count_slices(lambda path: api.call("GET", path))
        say(f"pools published in {s.publish_s:.1f}s (computed in {s.build_s:.1f}s): {s.slices} slices, {s.devices} devices")
        expected = s.nodes * s.slices_per_node
        if s.slices != expected:
            s.notes.append(f"{s.slices} slices in the API server, {expected} expected")

        s.capacity = capacity(publication(nodes[0], s.layout), s.layout) * s.nodes
        s.pods = min(args.pods, s.capacity)
        if s.pods < args.pods:
            s.notes.append(f"{args.pods} pods asked, the cluster holds {s.capacity} of this kind: {s.pods} created")
        names = [f"pod-{i:05d}" for i in range(s.pods)]
        bindings.start()
        profile = SchedulerProfile(cluster.scheduler_url, cluster.token, profile_dir(args.log_dir, s, cluster.workdir))
        if args.pprof:
            profile.start()
        cpu0, own0 = cluster.cpu_seconds(), own_cpu_seconds()
        t0 = time.monotonic()
        created = create_pods(api, names, lambda n: pod(n, template), args.create_threads)
        first = min(created.values())
        s.create_s = time.monotonic() - first
        s.unbound_at_created = s.pods - len(bindings.snapshot().keys() & created.keys())
        say(f"{s.pods} pods created in {s.create_s:.1f}s; waiting for the scheduler")
        all_bound = bindings.wait(set(names), t0 + args.bind_timeout)
        cpu1, own1 = cluster.cpu_seconds(), own_cpu_seconds()
        profile.stop()
        bound = {n: t for n, t in bindings.snapshot().items() if n in created}
        s.bound = len(bound)
        if bound:
            s.sched_s = max(bound.values()) - first
            s.latencies = [t - created[n] for n, t in bound.items()]
        s.cpu_sched = {k: cpu1.get(k, 0.0) - v for k, v in cpu0.items()} | {"bench (python)": own1 - own0}
        if not all_bound:
            s.notes.append(f"only {s.bound} of {s.pods} pods bound within --bind-timeout {args.bind_timeout}s")
        if bindings.error:
            s.notes.append(f"binding watch: {bindings.error}")
        say(f"{s.bound}/{s.pods} bound in {s.sched_s or 0:.1f}s")

        s.steady_s = args.steady
        before, own0, w0 = write_counts(api.text("/metrics")), own_cpu_seconds(), time.monotonic()
        time.sleep(args.steady / 2)
        s.steady_cpu_pct = 100 * (own_cpu_seconds() - own0) / (time.monotonic() - w0)
        s.resync_writes = fleet.resync_all()
        time.sleep(args.steady / 2)
        s.writes = delta(before, write_counts(api.text("/metrics")))
        s.publisher_errors = len(fleet.errors())
        say(f"steady state: writes {s.writes}")

        if args.explain_runs > 0:
            probe_pod(api, template)
            s.explain = time_explain(cluster.kubeconfig, args.explain_runs, args.explain_timeout)
            say(f"explain: {s.explain.seconds}")
        if args.pprof:
            s.pprof = profile.top(args.pprof)
    finally:
        bindings.close()
        fleet.close()
        api.close()


def log_dir_for(root: Path | None, s: Scenario) -> Path | None:
    return None if root is None else root / f"{s.layout}-{s.nodes}"


def profile_dir(root: Path | None, s: Scenario, workdir: Path) -> Path:
    """Where the scheduler's profiles go: the scenario's log directory, else the cluster's (removed with it)."""
    return (log_dir_for(root, s) or workdir) / "pprof"
