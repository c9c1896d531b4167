"""Benchmark: dra-gpu's pools at cluster scale, scheduled by the real kube-scheduler (issue 14).

Run as ``python -m bench.cluster_scale [--nodes 100,500] [--pods 1000] [--layouts full,mig-rec,mig]
[--deadline S]`` from the repository root. For each node count and layout, on a fresh control
plane (``testkit.cluster.LocalCluster``: etcd, kube-apiserver, kube-scheduler, and
kube-controller-manager for the resourceclaim controller; every DRA feature gate on; no
kubelets, nodes are Node objects as in scheduler_perf):

1. registers the nodes, each with 8 fake H100s, and publishes every node's pool with the
   product's own code (``node_publication`` and one ``SlicePublisher`` per node, as threads of
   this process): ``full`` is MIG strategy none (8 GPUs per node), ``mig`` dynamic MIG (208
   devices per node: 8 GPUs and 200 MIG placements, with shared counters), ``mig-rec`` dynamic
   MIG with the recommended profiles (``--mig-profiles 1g.10gb,3g.40gb,7g.80gb``: 88 devices per
   node), ``mig-families`` with ``--mig-profiles 1g,3g,7g`` (176 devices per node);
2. installs the chart's DeviceClasses and the demo's claim template, creates ``--pods`` pods
   (at most what the cluster holds) from 16 threads, each with one claim from the template
   (one GPU for ``full``, one 1g.10gb MIG device for the MIG layouts), and times each pod from
   its creation to its binding, while recording the scheduler's CPU profile (``--pprof``);
3. keeps the publishers running for a steady-state window, forces one resync of every
   publisher halfway, and counts the API server's write requests by resource over the window
   (``apiserver_request_total`` from /metrics);
4. times ``dra-gpu explain`` (the CLI, a fresh process) for one more pod, left Pending, against
   the whole cluster.

How to read the table (one row per layout x node count):

* ``dev/node``, ``slices``: devices each node publishes, ResourceSlices in the API server.
* ``publish s``: from starting every node's publisher to the last one synced, all pools written
  (the publications, computed before, are timed on the detail line).
* ``sched ms``: the scheduler's CPU milliseconds per bound pod while scheduling; ``x full``: that
  against the ``full`` layout's at the same node count, in the same run (the figure that carries
  over from a shared machine). The detail lines end with the scheduler's top functions.
* ``pods``: bound / created; ``pods/s``: bound pods over first creation -> last binding, the
  scheduling throughput including the resourceclaim controller's work, as scheduler_perf
  measures its DRA cases; ``floor*``: scheduler_perf's DRA thresholds at 500 nodes with 10
  devices per node (40-70 pods/s); they ran with the scheduler alone on several cores, here
  etcd, the API server, the controller manager, the scheduler and 100s of publishers share
  2 cores, so compare the trend, not only the number. ``p50 s``/``p99 s``: one pod's creation
  -> binding.
* ``writes**``: writes to resourceslices / all writes during the steady window (goal: 0 from
  the publishers; the detail line lists every resource written, e.g. the API server's lease).
* ``explain s``: median wall time of ``dra-gpu explain pod/NAME`` (goal <= 2 s).

The detail lines under the table give per-scenario setup times, pod creation rate (it must be
well above pods/s, else creation was the bottleneck), creation -> bind percentiles, CPU seconds
each component used while scheduling, the publishers' idle CPU, and explain's answer. A
scenario cut short (``--bind-timeout``, ``--deadline``, Ctrl-C) shows what it got and says why.
Every process the bench started is stopped on exit. Not a test: it asserts nothing about speed.
"""
