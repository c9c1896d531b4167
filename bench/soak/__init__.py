"""Soak with faults: the kubelet plugin under concurrent kubelet traffic, kill -9, API pauses, torn checkpoints.

Run by ``make soak`` (``python -m bench.soak`` from the repository root; ``--help`` for the knobs).
Not part of ``make test``: it runs for minutes and is meant to be read, like ``make bench``.

What runs: a real etcd + kube-apiserver (``testkit.cluster.LocalCluster``) with Node ``node-a``, and
the real ``dra-gpu-kubelet-plugin`` daemon (``testkit.plugin_process.PluginProcess``) on fake H100s
with dynamic MIG, so every MIG slice is carved in the MIG simulator's state file
(``<plugin dir>/fake-gpus/mig-state.json``), which outlives the plugin like a real GPU's state.

* **Callers** (``--concurrency`` threads) act as kubelets: each runs "pods" of one or two claims.
  A claim gets devices from an allocation book that applies the scheduler's rule to the
  counters the node publishes (``dra-gpu inventory --mig dynamic``), so no two claims alive at
  the same time overlap — full GPUs and MIG placements mixed. The claim is created in the API
  server with its allocation written through the status subresource, then prepared over the
  DRA v1 socket with the kubelet's 45 s deadline, held for a while, and unprepared. Like the
  kubelet, a caller retries a failed prepare (a transport error or the claim's own error)
  with backoff and gives up after ``--prepare-retry`` seconds (recorded); it retries an
  unprepare until it succeeds. A claim's devices go back to the book only when its unprepare
  succeeded.
* **Chaos** (one thread) at random moments: SIGKILLs the plugin and restarts it, sometimes
  killing the new process again while it starts; between the kill and the restart it may
  corrupt the checkpoint (``checkpoint.json`` truncated, bytes flipped, deleted, or both
  ``checkpoint.json`` and ``checkpoint.prev.json`` corrupted); SIGSTOPs the kube-apiserver for
  one to five seconds, then SIGCONT; and runs the quiet check below.
* **Ledger**: a claim whose prepare returned success is *told prepared* until its unprepare is
  sent. Right after a successful prepare its answer is checked (devices and CDI ids as
  allocated), its CDI spec must exist, and the UUIDs the spec hands out must be the allocated
  GPU or a live MIG instance at exactly the allocated placement, never one another live claim
  was given.
* **Quiet check** (new calls held back, in-flight calls drained, no chaos in progress): every
  told-prepared claim still has its CDI spec with the UUIDs it was told, each MIG instance
  exists at its placement, a whole GPU is not in MIG mode, and the checkpoint holds the claim;
  nothing is left behind by claims that are done (no MIG instance at a placement no active
  claim holds, no CDI spec or checkpoint entry of an inactive claim).
* **End**, after every caller unprepared its claims: no claim whose unprepare never succeeded,
  0 claim CDI specs, 0 MIG instances, no GPU left in MIG mode, 0 checkpoint entries.

Prints the counts and every invariant violation (deduplicated, with details); exits 1 when
there is one. A hard deadline (``--duration`` + ``--drain`` + slack) stops everything; every
process started here is killed on exit, on exceptions and on SIGINT/SIGTERM. The work dir
(plugin logs, checkpoints, simulator state, API server logs) is kept when something failed.
``--seed`` fixes each thread's choices; thread interleaving and timing still differ per run.
"""
