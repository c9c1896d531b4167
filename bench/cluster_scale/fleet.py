"""The fake nodes and their pools: Node objects, and one real ``SlicePublisher`` per node, as threads.

Used by ``bench.cluster_scale.run``. Each node is a Ready Node object (no kubelet, as in
scheduler_perf) whose pool is what dra-gpu's controller would publish for 8 fake H100s: the
publication comes from ``dra_driver.appkit.inventory.node_publication`` (``mig``: dynamic MIG
over the MIG simulator, 8 GPUs and 200 placements with shared counters; ``mig-rec``: dynamic MIG
with the recommended ``--mig-profiles 1g.10gb,3g.40gb,7g.80gb``, 8 GPUs and 80 placements;
``mig-families``: ``--mig-profiles 1g,3g,7g``, 8 GPUs and 168 placements; ``full``: MIG strategy
none, 8 GPUs), and a ``SlicePublisher`` writes it through ``KubeSliceApi`` with a client of its
own from ``load_api_client(kubeconfig)``, as each node's controller or plugin would. Every
publisher runs its loop (and its watch) in threads of this process until ``stop``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dra_driver.appkit.inventory import node_publication
from dra_driver.appkit.publisher import SlicePublisher
from dra_driver.core.driver import DEFAULT_DRIVER_NAME
from dra_driver.core.mig import MigStrategy
from dra_driver.core.mig_publish import Publication
from dra_driver.core.slices import split_pool
from dra_driver.kube.client import load_api_client
from dra_driver.kube.slices_api import KubeSliceApi
from dra_driver.mig_backends.select import make_mig_backend
from dra_driver.sources.fake import FakeGpuSource

FAKE_PROFILE = "h100x8"  # the demo's nodes
RECOMMENDED_PROFILES = ("1g.10gb", "3g.40gb", "7g.80gb")
"""The recommended dynamic-MIG selection (docs/guides): the smallest, half and whole GPU, every placement."""
LAYOUTS: dict[str, tuple[MigStrategy, tuple[str, ...]]] = {
    "full": (MigStrategy.NONE, ()),
    "mig": (MigStrategy.DYNAMIC, ()),  # every profile
    "mig-rec": (MigStrategy.DYNAMIC, RECOMMENDED_PROFILES),
    "mig-families": (MigStrategy.DYNAMIC, ("1g", "3g", "7g")),  # the families: 1g.20gb and 1g.10gb+me too
}
RESOURCE_SLICES_PATH = "/apis/resource.k8s.io/v1/resourceslices"


def node_name(i: int) -> str:
    return f"node-{i:04d}"


def publication(node: str, layout: str) -> Publication:
    """What dra-gpu publishes for ``node`` (8 fake H100s) under ``layout``: the controller's own path."""
    gpus = FakeGpuSource(FAKE_PROFILE, node).gpus()
    strategy, profiles = LAYOUTS[layout]
    backend = make_mig_backend(fake=True, gpus=gpus) if strategy is not MigStrategy.NONE else None
    return node_publication(gpus, strategy, backend, mig_profiles=profiles)


@dataclass
class Fleet:
    """The nodes' publishers, their threads, and what starting them measured."""

    layout: str
    publishers: list[SlicePublisher] = field(default_factory=list)
    threads: list[threading.Thread] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    devices_per_node: int = 0
    slices_per_node: int = 0
    build_s: float = 0.0  # computing every node's publication (inventory, MIG simulator, slice split)
    publish_s: float = 0.0  # publishers started -> every one synced (all pools written)

    def start(self, nodes: list[str], kubeconfig: Path, deadline_s: float) -> None:
        """Compute each node's publication, start one publisher per node, wait until all synced."""
        t0 = time.monotonic()
        pubs = [publication(n, self.layout) for n in nodes]
        self.build_s = time.monotonic() - t0
        self.devices_per_node = len(pubs[0].devices)
        self.slices_per_node = len(split_pool(list(pubs[0].devices), list(pubs[0].counter_sets)))
        for node, pub in zip(nodes, pubs, strict=True):
            publisher = SlicePublisher(KubeSliceApi(load_api_client(str(kubeconfig))), DEFAULT_DRIVER_NAME, node)
            publisher.set_devices(list(pub.devices), list(pub.counter_sets))
            self.publishers.append(publisher)
        t0 = time.monotonic()
        for p, node in zip(self.publishers, nodes, strict=True):
            t = threading.Thread(target=p.run, args=(self.stop,), name=f"publish-{node}", daemon=True)
            t.start()
            self.threads.append(t)
        end = t0 + deadline_s
        for p in self.publishers:
            if not p.synced.wait(max(0.0, end - time.monotonic())):
                raise TimeoutError(f"pools not all published after {deadline_s:.0f}s: {self.errors()[:3]}")
        self.publish_s = time.monotonic() - t0

    def errors(self) -> list[str]:
        """Each publisher's last error, where it has one."""
        return [e for p in self.publishers if (e := p.last_error)]

    def resync_all(self) -> int:
        """One reconcile pass of every publisher (what the periodic resync runs); the writes they made."""
        with ThreadPoolExecutor(8) as pool:
            results = list(pool.map(lambda p: p.reconcile_once(), self.publishers))
        return sum(r.writes for r in results if r is not None)

    def close(self) -> None:
        """Stop every publisher and wait (briefly) for its threads."""
        self.stop.set()
        end = time.monotonic() + 10.0
        for t in self.threads:
            t.join(max(0.0, end - time.monotonic()))


def register_nodes(add_node: Callable[[str], Any], count: int, threads: int = 8) -> tuple[list[str], float]:
    """Create ``count`` Ready Nodes concurrently; their names and the seconds it took."""
    names = [node_name(i) for i in range(count)]
    t0 = time.monotonic()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(add_node, names))
    return names, time.monotonic() - t0


def count_slices(list_page: Callable[[str], dict[str, Any]]) -> tuple[int, int]:
    """(slices, devices) of the driver in the API server, read page by page."""
    slices = devices = 0
    cont = ""
    while True:
        page = list_page(f"{RESOURCE_SLICES_PATH}?limit=500" + (f"&continue={cont}" if cont else ""))
        for s in page.get("items") or []:
            if (s.get("spec") or {}).get("driver") == DEFAULT_DRIVER_NAME:
                slices += 1
                devices += len((s.get("spec") or {}).get("devices") or [])
        cont = str((page.get("metadata") or {}).get("continue") or "")
        if not cont:
            return slices, devices
