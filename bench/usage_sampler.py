"""Benchmark: the plugin's usage sampler and its metrics collector on a full node of MIG devices.

8 fake H100s, each carved into seven 1g.10gb MIG devices, 56 claims of one device each (the
most devices an H100 node holds), half of them scripted busy through the fake usage script.
Times (this thread's CPU) one sampler pass over them (``kubelet_plugin.monitoring.usage.UsageSampler``),
with the script unchanged since the previous pass (the steady state) and just rewritten, and one
scrape of the usage collector (``dra_driver.obs.usage_metrics``, 56 rows). Not a test: it
asserts nothing about speed. Run with ``python -m bench.usage_sampler`` from the repository root.
"""

from __future__ import annotations

import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest

from dra_driver.appkit.inventory import node_publication
from dra_driver.core.checkpoint import ClaimEntry, ClaimState, MigRecord, PreparedDevice
from dra_driver.core.mig import MigStrategy
from dra_driver.core.mig_publish import DeviceTarget
from dra_driver.mig_backends.select import make_mig_backend
from dra_driver.obs.usage_metrics import register_usage_collector
from dra_driver.sources.fake import FakeGpuSource
from dra_driver.sources.fake_usage import FakeUsageSource
from dra_driver.sources.fake_usage import main as fake_usage
from kubelet_plugin.monitoring.pod_notes import PodNotes
from kubelet_plugin.monitoring.usage import UsageSampler

PASSES = 200


def claims_and_targets() -> tuple[dict[str, ClaimEntry], dict[str, DeviceTarget]]:
    gpus = FakeGpuSource("h100x8", "node-a").gpus()
    targets = dict(node_publication(gpus, MigStrategy.DYNAMIC, make_mig_backend(fake=True, gpus=gpus)).targets)
    claims: dict[str, ClaimEntry] = {}
    for g in gpus:
        for start in range(7):
            name = f"gpu-{g.minor}-mig-1g10gb-{start}"
            profile = targets[name].profile
            assert profile is not None
            rec = MigRecord(
                g.uuid, profile.profile_id, "1g.10gb", start, 1, gi_id=start + 1, ci_id=0, mig_uuid=f"MIG-{uuid.uuid4()}"
            )
            dev = PreparedDevice(("mig",), "node-a", name, (f"k8s.gpu.dra-gpu.dev/claim=x-{name}",), mig=rec)
            claims[str(uuid.uuid4())] = ClaimEntry(ClaimState.PREPARE_COMPLETED, f"team-{start % 4}", f"claim-{name}", (dev,))
    return claims, targets


def cpu_ms(fn: Callable[[], object], n: int) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.thread_time()
        fn()
        out.append((time.thread_time() - t0) * 1000)
    return out


def main() -> None:
    claims, targets = claims_and_targets()
    with tempfile.TemporaryDirectory() as tmp:
        state_dir = Path(tmp)
        for uid in list(claims)[::2]:
            fake_usage(["--state-dir", str(state_dir), "set", "--claim", uid, "--utilization", "0.7", "--memory", "5Gi"])
        pods = PodNotes()
        for uid, entry in claims.items():
            pods.note({"metadata": {"uid": uid}, "status": {"reservedFor": [{"resource": "pods", "name": f"{entry.name}-pod"}]}})
        sampler = UsageSampler(
            source=FakeUsageSource(state_dir),
            claims=lambda: claims,
            targets=targets,
            prepared_at=lambda _u: time.time() - 60,
            pods=pods,
        )
        first = cpu_ms(sampler.sample_once, 1)[0]
        rows = len(sampler.snapshot().rows)
        steady = cpu_ms(sampler.sample_once, PASSES)
        script = state_dir / "usage-script.json"

        def rewritten() -> None:
            script.touch()  # a new mtime: the script is decoded again
            sampler.sample_once()

        changed = cpu_ms(rewritten, 50)
        registry = CollectorRegistry()
        register_usage_collector(registry, sampler.snapshot, "node-a")
        body = generate_latest(registry)
        scrape = cpu_ms(lambda: generate_latest(registry), PASSES)
    print(f"rows per pass: {rows} (8 H100s x 7 MIG 1g.10gb devices, 56 claims)")
    print(f"sampler pass, first (new claims):            {first:.2f} ms CPU")
    print(
        f"sampler pass, steady (script unchanged):     median {statistics.median(steady):.2f} ms, "
        f"p90 {sorted(steady)[int(0.9 * len(steady))]:.2f} ms CPU"
    )
    print(f"sampler pass, script rewritten each pass:    median {statistics.median(changed):.2f} ms CPU")
    print(f"scrape of the usage collector ({len(body)} bytes): median {statistics.median(scrape):.2f} ms CPU")
    print(f"at a 10 s interval the sampler costs {statistics.median(steady) / 10_000 * 100:.3f} % of one core")


if __name__ == "__main__":
    main()
