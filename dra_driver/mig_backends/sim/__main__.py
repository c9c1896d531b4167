"""``python -m dra_driver.mig_backends.sim``: the mig-parted stand-in for tests and the demo.

Changes the MIG state of a node's fake GPUs in a simulator state file, the way an administrator
would with nvidia-smi or mig-parted before (or while) the driver runs:

    python -m dra_driver.mig_backends.sim --state S --fake-gpus h100x8 --node-name node-a mode --gpu 0 on
    python -m dra_driver.mig_backends.sim --state S --fake-gpus h100x8 --node-name node-a carve --gpu 0 --profile 1g.10gb
    python -m dra_driver.mig_backends.sim --state S --fake-gpus h100x8 --node-name node-a list

Called by e2e scenarios and by people trying static MIG on fake GPUs. The GPUs come from the fake
inventory (``dra_driver.sources.fake``) by profile, as with ``--fake-gpus``: the one import across
adapter packages, which ``.importlinter`` allows by name.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

from dra_driver.core.gpu import GpuInfo
from dra_driver.core.mig import Placement
from dra_driver.mig_backends.sim.rules import NvmlCode, SimError, latency_from_name
from dra_driver.mig_backends.sim.simulator import MigSimulator
from dra_driver.sources.fake import FakeGpuSource


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m dra_driver.mig_backends.sim", description=__doc__.splitlines()[0])
    p.add_argument("--state", type=Path, required=True, help="simulator state file (shared with the driver)")
    p.add_argument("--fake-gpus", required=True, help="fake GPU profile (h100x8, a100x8, ...)")
    p.add_argument("--node-name", required=True, help="node name (fake GPU UUIDs derive from it)")
    p.add_argument("--boot-id", default="", help="boot id; one other than the stored one drops instances (default: do not check)")
    p.add_argument("--proc-root", type=Path, default=None, help="write MIG capability files under this procfs root")
    p.add_argument("--latency", default="zero", choices=["zero", "realistic"])
    sub = p.add_subparsers(dest="command", required=True)
    mode = sub.add_parser("mode", help="set MIG mode")
    mode.add_argument("--gpu", type=int, required=True, help="GPU minor")
    mode.add_argument("state_value", choices=["on", "off"])
    mode.add_argument("--initial", action="store_true", help="set it as configured before this boot (no reset needed)")
    carve = sub.add_parser("carve", help="create a GPU instance and its full-size compute instance")
    carve.add_argument("--gpu", type=int, required=True, help="GPU minor")
    carve.add_argument("--profile", required=True, help="profile name, e.g. 1g.10gb")
    carve.add_argument("--start", type=int, default=None, help="placement start (default: the highest free one)")
    sub.add_parser("list", help="print every GPU's MIG mode and instances as JSON")
    return p


def _gpu(sim: MigSimulator, minor: int) -> GpuInfo:
    for g in sim.gpus:
        if g.minor == minor:
            return g
    raise SystemExit(f"no GPU with minor {minor}")


def _carve(sim: MigSimulator, gpu: GpuInfo, profile_name: str, start: int | None) -> dict[str, object]:
    product = sim.product(gpu.uuid)
    if product is None:
        raise SystemExit(f"GPU {gpu.minor} ({gpu.product_name}) is not MIG capable")
    profile = product.gi_by_name(profile_name)
    if profile is None:
        known = ", ".join(p.name for p in product.gi_profiles)
        raise SystemExit(f"{gpu.product_name} has no profile {profile_name!r}; known: {known}")
    gi_id = sim.create_gpu_instance(gpu.uuid, profile.profile_id, start) if start is not None else None
    while gi_id is None:
        # The highest free start; another process may take it first, then the next one is tried.
        taken = [Placement(g.start, g.size) for g in sim.snapshot(gpu.uuid).gis]
        free = [p for p in profile.placements if not any(p.overlaps(t) for t in taken)]
        if not free:
            raise SimError(NvmlCode.INSUFFICIENT_RESOURCES, f"no free placement for {profile_name} on GPU {gpu.minor}")
        start = max(p.start for p in free)
        try:
            gi_id = sim.create_gpu_instance(gpu.uuid, profile.profile_id, start)
        except SimError as err:
            wanted = next(p for p in free if p.start == start)
            now_taken = [Placement(g.start, g.size) for g in sim.snapshot(gpu.uuid).gis]
            if err.code != NvmlCode.INSUFFICIENT_RESOURCES or not any(wanted.overlaps(t) for t in now_taken):
                raise
    full = next(c for c in product.ci_profiles_for(profile) if c.slices == profile.slices and c.creatable)
    ci = sim.create_compute_instance(gpu.uuid, gi_id, full.profile_id)
    return {"gpu": gpu.minor, "profile": profile.name, "start": start, "giId": gi_id, "ciId": ci.ci_id, "uuid": ci.uuid}


def _listing(sim: MigSimulator) -> list[dict[str, object]]:
    out: list[dict[str, object]] = []
    for g in sim.gpus:
        if sim.product(g.uuid) is None:
            continue
        mode = sim.mode(g.uuid)
        instances = []
        for m in sim.instances(g.uuid):
            d = asdict(m)
            d["placement"] = {"start": m.placement.start, "size": m.placement.size}
            instances.append(d)
        out.append({"gpu": g.minor, "uuid": g.uuid, "mode": asdict(mode), "instances": instances})
    return out


def main(argv: list[str] | None = None) -> int:
    """Run one command; 0 on success, 1 when the simulator refuses it (NVML's reason on stderr)."""
    args = _parser().parse_args(argv)
    gpus = FakeGpuSource(args.fake_gpus, args.node_name).gpus()
    boot_id = args.boot_id
    sim = MigSimulator(
        gpus, state_file=args.state, boot_id=boot_id, latency=latency_from_name(args.latency), proc_root=args.proc_root
    )
    try:
        if args.command == "mode":
            gpu = _gpu(sim, args.gpu)
            enabled = args.state_value == "on"
            if args.initial:
                sim.set_initial_mode(gpu.uuid, enabled)
                status = NvmlCode.SUCCESS
            else:
                status = sim.set_mig_mode(gpu.uuid, enabled)
            mode = sim.mode(gpu.uuid)
            print(json.dumps({"gpu": gpu.minor, "activationStatus": status.name, "mode": asdict(mode)}))
        elif args.command == "carve":
            print(json.dumps(_carve(sim, _gpu(sim, args.gpu), args.profile, args.start)))
        else:
            print(json.dumps(_listing(sim), indent=1))
    except SimError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
