"""What a node of an installed cluster holds for dra-gpu's claims, read from the node's directories.

The plugin's CDI specs, its checkpoint's claims, and the fake GPUs' state (the MIG simulator's
instances and modes, the sharing simulator's time slices and MPS daemons): what must all be gone
once every claim is unprepared. Used by ``e2e/test_installed.py`` and the demo (``demo/runner/demo.py``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from dra_driver.core.driver import DEFAULT_DRIVER_NAME
from dra_driver.core.mig import MigInstance, profile_slug
from dra_driver.mig_backends.select import SIM_STATE_FILE
from dra_driver.mig_backends.sim import load_instances, load_modes
from dra_driver.sharing_backends.sim import STATE_FILE, read_sharing_state
from dra_driver.sources.fake import FakeGpuSource
from testkit.runtime_node import ContainerdNode

DRIVER = DEFAULT_DRIVER_NAME
PLUGIN_DIR = f"/var/lib/kubelet/plugins/{DRIVER}"
CLAIM_PREFIX = f"k8s.{DRIVER}-claim_"  # the plugin's per-claim CDI spec files


def cdi_specs(node: ContainerdNode) -> list[str]:
    cdi = node.path("/var/run/cdi")
    return sorted(p.name for p in cdi.iterdir() if p.name.startswith(CLAIM_PREFIX)) if cdi.exists() else []


def checkpoint_claims(node: ContainerdNode) -> list[str]:
    path = node.path(f"{PLUGIN_DIR}/checkpoint.json")
    return list(json.loads(path.read_text())["data"]["claims"]) if path.exists() else []


def fake_state(node: ContainerdNode, name: str) -> Path:
    return node.path(f"{PLUGIN_DIR}/fake-gpus/{name}")


def minors(node: ContainerdNode, profile: str) -> dict[str, int]:
    """GPU UUID → minor of the node's fake GPUs (their UUIDs derive from the node name and profile)."""
    return {g.uuid: g.minor for g in FakeGpuSource(profile, node.name).gpus()}


def carved(node: ContainerdNode, profile: str) -> dict[str, MigInstance]:
    """The MIG simulator's instances on the node, by the device name they were carved for."""
    state = fake_state(node, SIM_STATE_FILE)
    if not state.exists():
        return {}
    minor = minors(node, profile)
    return {
        f"gpu-{minor[uuid]}-mig-{profile_slug(i.profile_name)}-{i.placement.start}": i
        for uuid, insts in load_instances(state).items()
        for i in insts
    }


def mig_modes_on(node: ContainerdNode) -> int:
    state = fake_state(node, SIM_STATE_FILE)
    return sum(1 for m in load_modes(state).values() if m.current or m.pending) if state.exists() else 0


def sharing_lines(node: ContainerdNode, profile: str) -> list[str]:
    """One line per time slice and MPS daemon the node's sharing simulator records now."""
    minor = minors(node, profile)
    state = read_sharing_state(fake_state(node, STATE_FILE))
    out = [f"time slice {interval} on gpu-{minor[uuid]}" for uuid, interval in sorted(state["timeSlices"].items())]
    for daemon_id, d in sorted(state["mps"].items()):
        limits = [f"{b >> 30}Gi pinned on gpu-{minor[u]}" for u, b in sorted(d["pinnedMemoryLimits"].items())]
        threads = [f"{d['activeThreadPercentage']}% of the SMs"] if d["activeThreadPercentage"] else []
        gpus = ", ".join(f"gpu-{minor[u]}" for u in d["gpuUUIDs"])
        out.append(f"MPS daemon {daemon_id} on {gpus} ({', '.join([*threads, *limits]) or 'no default limits'})")
    return out


def leftovers(nodes: Iterable[ContainerdNode], profile: str) -> dict[str, int]:
    """What prepared claims leave on the nodes, summed over them: all zero once everything is unprepared."""
    counts = {"claim CDI specs": 0, "checkpoint entries": 0, "MIG instances": 0, "GPUs in MIG mode": 0}
    counts |= {"time slices": 0, "MPS daemons": 0}
    for node in nodes:
        state = read_sharing_state(fake_state(node, STATE_FILE))
        counts["claim CDI specs"] += len(cdi_specs(node))
        counts["checkpoint entries"] += len(checkpoint_claims(node))
        counts["MIG instances"] += len(carved(node, profile))
        counts["GPUs in MIG mode"] += mig_modes_on(node)
        counts["time slices"] += len(state["timeSlices"])
        counts["MPS daemons"] += len(state["mps"])
    return counts
