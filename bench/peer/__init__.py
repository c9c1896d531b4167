"""Benchmark: dra-gpu's kubelet plugin side by side with the Go reference driver, in one run.

Run by ``make bench`` (``python -m bench.peer`` from the repository root). Starts etcd +
kube-apiserver (``testkit.cluster.LocalCluster``), then for each of ``--runs`` runs starts both
drivers with fresh state dirs on one node ``node-a`` -- dra-gpu's plugin with 8 fake H100s
(``testkit.plugin_process.PluginProcess``) and the peer, kubernetes-sigs/dra-example-driver's kubelet
plugin with 8 fake GPUs (``testkit.peer_process``, built from ``../shared/peers/`` once and cached) --
and measures both with one gRPC client (the DRA v1 stubs in ``proto/dra/v1``):

* start: spawn until a NodePrepareResources with zero claims answers on the DRA socket, and
  spawn until all of the driver's ResourceSlices are in the API server (deleted before each start);
* idle RSS (VmRSS) one second after both started;
* prepare and unprepare latency: ``--claims`` allocated claims per driver, one claim per call
  over one kept-open channel (as the kubelet does), calls alternating between the two drivers;
* burst: ``--burst`` admin-access claims (so that many may hold 8 GPUs at once in both drivers)
  prepared concurrently from ``--threads`` threads, then unprepared likewise: claims/s, errors,
  and the peak RSS (VmHWM, reset through ``/proc/<pid>/clear_refs`` just before the burst).

dra-gpu's plugin is given the cluster's kubeconfig rewritten as JSON (``bench.peer.drivers.json_kubeconfig``):
in a pod it reads none, and a JSON one does not load the YAML parser into the memory measured.

Prints one table, metric | dra-gpu | Go peer | ratio (dra-gpu / peer), the goals (issue 32's plugin
floor among them: idle RSS within 1.1x the peer's, DRA socket in 0.25 s) and the machine facts.
Latency percentiles pool every run's calls; the other figures are medians over runs. Without Go
or the peer's source (or with ``--no-peer``) it prints dra-gpu's figures alone and says why.
Every process it started is stopped on exit, on exceptions, on SIGINT/SIGTERM and at the
``--deadline``. Not a test: it asserts nothing about speed.
"""
