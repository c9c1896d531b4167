"""Benchmark: how device order packs dynamic MIG, under a seeded churn of mixed MIG claims.

The scheduler gives a request the first device that fits, in the order the driver publishes them,
so that order is the driver's only packing policy. This bench publishes one node of 8 fake H100s
and one of 8 fake A100s (40 GB; MIG mode on, as Ampere needs) with dynamic MIG through the
product's own publication code (``dra_driver.core.mig_publish.publish_node``), lays the devices out
in each order under test, and runs the same seeded churn against each: claims for one MIG profile
each (a mix of sizes, no ``+me``) arrive and depart at random; every arrival is allocated by the
project's allocator simulator (``dra_driver.schedsim``, the one ``dra-gpu explain`` uses, proven
against kube-scheduler's Go allocator by ``tests/differential``), given the claims still allocated.

Counted per order, after a warm-up: arrivals, refusals, and **fragmented refusals**: a claim
refused although the node had at least as many free memory slices in total as its profile needs
(and, stricter, although one GPU alone had that many free). Same seeds for every order, in one run.

Orders (``--orders``):

* ``today``: the product's order (``placement_order``: GPUs by minor; within a GPU the smallest
  profile first; placements from the highest start down; the full GPU last).
* ``index``: GPUs by minor, profiles and placements in NVML's order (profile index, lowest start
  first): what a driver that publishes the placement table as NVML lists it gets.
* ``split``: as ``today`` for profiles that can sit above the lowest half of memory, but the
  profiles that only fit at memory slice 0 (``4g``, ``7g``) and the half-GPU ``3g`` take GPUs from
  the highest minor down, so large and small claims fill the node from opposite ends.

``python -m bench.mig_fragmentation [--events N] [--seeds S ...] [--json FILE]``. Not a test: it
asserts nothing; ``tests/unit/bench/test_mig_fragmentation.py`` runs a small churn as a process.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dra_driver.core.driver import DEFAULT_DRIVER_NAME
from dra_driver.core.mig import MigMode, MigStrategy
from dra_driver.core.mig_publish import GpuMigState, Publication, publish_node
from dra_driver.core.schema import DeviceSpec
from dra_driver.core.slices import slice_objects, split_pool
from dra_driver.mig_backends.select import make_mig_backend
from dra_driver.schedsim.allocator.explain import explain
from dra_driver.sources.select import make_source

DRIVER = DEFAULT_DRIVER_NAME
MIG_CLASS = f"mig.{DRIVER}"
NODES = {"node-h100": "h100x8", "node-a100": "a100x8"}
MIX = (("1g", 40), ("1g-2x", 10), ("2g", 20), ("3g", 15), ("4g", 7), ("7g", 8))
"""Profile families and their share of arrivals: 1g (smallest memory), 1g with twice the memory, 2g, 3g, 4g, 7g."""
LARGE = ("3g", "4g", "7g")
"""Families ``split`` places from the highest GPU down."""


@dataclass(frozen=True, slots=True)
class Node:
    """One node's publication: devices, counter sets, and per device its GPU, family and memory slices."""

    name: str
    pub: Publication
    memory_slices: int
    gpus: int
    families: dict[str, str]  # family -> profile name on this product

    def family_of(self, device: str) -> str | None:
        t = self.pub.targets[device]
        if t.profile is None:
            return None
        return next((f for f, p in self.families.items() if p == t.profile.name), None)


def build_node(name: str, fake: str) -> Node:
    """The node's dynamic-MIG publication, with MIG mode on (Ampere publishes placements only then)."""
    gpus = make_source(fake_gpus=fake, node_name=name).gpus()
    backend = make_mig_backend(fake=True, gpus=gpus)
    states = []
    for g in gpus:
        catalog = backend.catalog(g)
        if catalog is None:
            raise SystemExit(f"{fake}: GPU {g.minor} is not MIG capable")
        states.append(GpuMigState(gpu=g, catalog=catalog, mode=MigMode(current=True, pending=True)))
    pub = publish_node(states, MigStrategy.DYNAMIC)
    catalog = states[0].catalog
    assert catalog is not None
    plain = sorted((p for p in catalog.profiles if not p.media_extensions), key=lambda p: (p.slices, p.memory_mib))
    families: dict[str, str] = {}
    for p in plain:
        fam = f"{p.slices}g"
        if fam == "1g" and "1g" in families:
            fam = "1g-2x"
        families.setdefault(fam, p.name)
    return Node(name, pub, catalog.memory_slices, len(gpus), families)


def size_of(node: Node, device: str) -> int:
    """Memory slices the device takes (the full GPU: all of them)."""
    t = node.pub.targets[device]
    return t.placement.size if t.placement is not None else node.memory_slices


# -- orders: permutations of the node's devices --------------------------------------------------


def order_today(node: Node) -> list[DeviceSpec]:
    return list(node.pub.devices)


def order_index(node: Node) -> list[DeviceSpec]:
    def key(d: DeviceSpec) -> tuple[int, int, int, int]:
        t = node.pub.targets[d.name]
        if t.profile is None or t.placement is None:
            return (t.gpu.minor, 1, 0, 0)
        return (t.gpu.minor, 0, t.profile.index, t.placement.start)

    return sorted(node.pub.devices, key=key)


def order_split(node: Node) -> list[DeviceSpec]:
    today = {d.name: i for i, d in enumerate(node.pub.devices)}

    def key(d: DeviceSpec) -> tuple[int, int, int]:
        fam = node.family_of(d.name)
        t = node.pub.targets[d.name]
        if fam in LARGE or t.profile is None:  # large ones and the full GPU: highest minor first
            return (1, -t.gpu.minor, today[d.name])
        return (0, t.gpu.minor, today[d.name])

    return sorted(node.pub.devices, key=key)


def order_halves(node: Node) -> list[DeviceSpec]:
    """GPUs by minor, smallest profile first; within a profile the placements in the upper half of memory first.

    The lower half is where the profiles that only fit at slice 0 (4g, 7g) go; the upper half is the
    half-GPU 3g's other home. Small instances fill the upper half first (lowest start first), so a GPU
    keeps its lower half free for a 4g as long as it can.
    """
    half = node.memory_slices // 2

    def key(d: DeviceSpec) -> tuple[int, int, tuple[int, int, bool], int, int]:
        t = node.pub.targets[d.name]
        if t.profile is None or t.placement is None:
            return (t.gpu.minor, 1, (0, 0, False), 0, 0)
        p = t.profile
        return (
            t.gpu.minor,
            0,
            (p.slices, p.memory_mib, p.media_extensions),
            0 if t.placement.start >= half else 1,
            t.placement.start,
        )

    return sorted(node.pub.devices, key=key)


ORDERS: dict[str, Callable[[Node], list[DeviceSpec]]] = {
    "today": order_today,
    "index": order_index,
    "split": order_split,
    "halves": order_halves,
}


def slices_in(node: Node, devices: Sequence[DeviceSpec]) -> list[dict[str, Any]]:
    """The node's ResourceSlices with its devices in this order (split as the plugin splits them)."""
    return slice_objects(driver=DRIVER, node_name=node.name, contents=split_pool(list(devices), list(node.pub.counter_sets)))


def mig_class() -> dict[str, Any]:
    expr = f"device.driver == '{DRIVER}' && device.attributes['{DRIVER}'].type == 'mig'"
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": MIG_CLASS},
        "spec": {"selectors": [{"cel": {"expression": expr}}]},
    }


def claim(uid: int, profile: str) -> dict[str, Any]:
    sel = f'device.attributes["{DRIVER}"].profile == "{profile}"'
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": f"c{uid}", "namespace": "bench", "uid": f"uid-{uid}"},
        "spec": {
            "devices": {
                "requests": [
                    {"name": "mig", "exactly": {"deviceClassName": MIG_CLASS, "selectors": [{"cel": {"expression": sel}}]}}
                ]
            }
        },
    }


def allocated(c: dict[str, Any], node: str, device: str) -> dict[str, Any]:
    result = {"request": "mig", "driver": DRIVER, "pool": node, "device": device}
    return {**c, "status": {"allocation": {"devices": {"results": [result]}}}}


@dataclass(slots=True)
class Counts:
    """What one order's churn saw, after the warm-up."""

    arrivals: int = 0
    refused: int = 0
    fragmented: int = 0
    """Refused with at least the profile's memory slices free on the node in total."""
    fragmented_one_gpu: int = 0
    """Refused with that many free on one GPU alone."""
    by_family: dict[str, list[int]] = field(default_factory=dict)  # family -> [arrivals, refused]
    seconds: float = 0.0


def arrivals(node: Node, *, seed: int, events: int, load: float) -> list[tuple[str, int]]:
    """The seeded arrivals, one per step: (family, lifetime in steps). The same for every order.

    Lifetimes are exponential with the mean that makes the offered load (mean memory slices asked
    per step x mean lifetime) ``load`` times the node's memory slices.
    """
    rng = random.Random(seed)
    families = [f for f, _ in MIX if f in node.families]
    weights = [w for f, w in MIX if f in node.families]
    sizes = {f: _profile_size(node, node.families[f]) for f in families}
    mean_size = sum(sizes[f] * w for f, w in zip(families, weights, strict=True)) / sum(weights)
    mean_life = load * node.memory_slices * node.gpus / mean_size
    return [(rng.choices(families, weights)[0], max(1, round(rng.expovariate(1 / mean_life)))) for _ in range(events)]


def _profile_size(node: Node, profile: str) -> int:
    for t in node.pub.targets.values():
        if t.profile is not None and t.placement is not None and t.profile.name == profile:
            return t.placement.size
    raise ValueError(f"{node.name} publishes no {profile}")


def churn(node: Node, devices: Sequence[DeviceSpec], plan: Sequence[tuple[str, int]], *, warmup: int) -> Counts:
    """Run the arrivals in ``plan`` against the node laid out in ``devices`` order; departures at each claim's end."""
    slices = slices_in(node, devices)
    classes = {MIG_CLASS: mig_class()}
    live: dict[int, tuple[dict[str, Any], str, int]] = {}  # uid -> (allocated claim, device, departs at step)
    counts = Counts()
    t0 = time.perf_counter()
    for step, (fam, life) in enumerate(plan):
        for uid in [u for u, (_, _, end) in live.items() if end <= step]:
            del live[uid]
        profile = node.families[fam]
        c = claim(step, profile)
        got = explain([c], slices, classes, [a for a, _, _ in live.values()])
        entry = got.requests[0]
        if entry.devices:
            device = entry.devices[0].split("/", 1)[1]
            live[step] = (allocated(c, node.name, device), device, step + life)
        if step < warmup:
            continue
        counts.arrivals += 1
        acc = counts.by_family.setdefault(fam, [0, 0])
        acc[0] += 1
        if entry.devices:
            continue
        need = _profile_size(node, profile)
        per_gpu = [node.memory_slices] * node.gpus
        for _, d, _ in live.values():
            per_gpu[node.pub.targets[d].gpu.minor] -= size_of(node, d)
        counts.refused += 1
        acc[1] += 1
        if sum(per_gpu) >= need:
            counts.fragmented += 1
        if max(per_gpu) >= need:
            counts.fragmented_one_gpu += 1
    counts.seconds = time.perf_counter() - t0
    return counts


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m bench.mig_fragmentation", description=__doc__.split("\n\n")[0] if __doc__ else None
    )
    ap.add_argument("--events", type=int, default=1200, help="arrivals and departures per churn (default 1200)")
    ap.add_argument("--warmup", type=int, default=200, help="events before counting starts (default 200)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3], help="churn seeds (default 1 2 3)")
    ap.add_argument("--load", type=float, default=1.0, help="offered load as a share of the node's memory slices (default 1.0)")
    ap.add_argument("--orders", nargs="+", default=list(ORDERS), choices=list(ORDERS))
    ap.add_argument("--out", dest="json_out", default=None, help="also write the counts as JSON here")
    args = ap.parse_args(argv)
    rows: list[dict[str, Any]] = []
    for node_name, fake in NODES.items():
        node = build_node(node_name, fake)
        print(f"{node_name} ({fake}): {len(node.pub.devices)} devices, families {node.families}", file=sys.stderr)
        for order in args.orders:
            devices = ORDERS[order](node)
            total = Counts()
            for seed in args.seeds:
                plan = arrivals(node, seed=seed, events=args.events, load=args.load)
                c = churn(node, devices, plan, warmup=args.warmup)
                total.arrivals += c.arrivals
                total.refused += c.refused
                total.fragmented += c.fragmented
                total.fragmented_one_gpu += c.fragmented_one_gpu
                total.seconds += c.seconds
                for fam, (a, r) in c.by_family.items():
                    acc = total.by_family.setdefault(fam, [0, 0])
                    acc[0] += a
                    acc[1] += r
            rows.append({"node": node_name, "product": fake, "order": order, **dataclasses.asdict(total)})
    print(table(rows, args))
    if args.json_out:
        body = {"date": time.strftime("%Y-%m-%d"), "seeds": args.seeds, "events": args.events, "load": args.load, "rows": rows}
        Path(args.json_out).write_text(json.dumps(body, indent=1) + "\n")
    return 0


def table(rows: list[dict[str, Any]], args: argparse.Namespace) -> str:
    head = (
        f"{len(args.seeds)} seeds x {args.events} arrivals (first {args.warmup} not counted), "
        f"offered load {args.load:.0%} of the memory slices"
    )
    out = [
        head,
        "| node | order | arrivals | refused | fragmented (node) | fragmented (one GPU) | refused 4g+7g | seconds |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        big = sum(r["by_family"].get(f, [0, 0])[1] for f in ("4g", "7g"))
        big_n = sum(r["by_family"].get(f, [0, 0])[0] for f in ("4g", "7g"))
        out.append(
            f"| {r['node']} | {r['order']} | {r['arrivals']} | {r['refused']} | {r['fragmented']} | {r['fragmented_one_gpu']} "
            f"| {big}/{big_n} | {r['seconds']:.1f} |"
        )
    return "\n".join(out)


if __name__ == "__main__":
    raise SystemExit(main())
