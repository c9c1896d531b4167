"""``dra-gpu``: the user CLI. ``dra-gpu inventory`` prints the ResourceSlices a node would publish.

Uses the same schema and slice splitting as the publisher, so what it prints is what the API
server would hold (minus the owner reference, which needs the cluster's Node UID). Every command's
stdout holds only its output; log lines (JSON) go to stderr (``dra_driver.obs.logs.configure_cli_logging``).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import yaml

from dra_driver.cli.cordon import add_cordon_parsers
from dra_driver.cli.explain_args import add_explain_parser
from dra_driver.cli.health import add_health_parser
from dra_driver.cli.top import add_top_parser
from dra_driver.core.driver import DEFAULT_DRIVER_NAME, validate_driver_name
from dra_driver.core.mig import MigError, MigStrategy
from dra_driver.core.mig_profiles import parse_mig_profiles
from dra_driver.obs.logs import configure_cli_logging
from dra_driver.sources.fake import PROFILES


def inventory_slices(
    *,
    fake_gpus: str | None,
    node_name: str,
    driver: str,
    mig: MigStrategy = MigStrategy.NONE,
    fake_mig_layout: tuple[str, ...] = (),
    consumable: bool = False,
    mig_profiles: tuple[str, ...] = (),
) -> list[dict[str, Any]]:
    """The ResourceSlice objects a node publishes.

    With fake GPUs and ``--mig static``, ``fake_mig_layout`` names the profiles carved on every
    GPU beforehand (in memory: nothing persists), as mig-parted would on a real node.
    """
    # Loaded here: the inventory's modules are of no use to the other commands (explain starts faster without them).
    from dra_driver.appkit.inventory import carve_layout, node_publication
    from dra_driver.core.slices import slice_objects, split_pool
    from dra_driver.mig_backends.select import make_mig_backend
    from dra_driver.sources.select import make_source

    gpus = make_source(fake_gpus=fake_gpus, node_name=node_name).gpus()
    backend = None
    if mig is not MigStrategy.NONE:
        backend = make_mig_backend(fake=fake_gpus is not None, gpus=gpus)
        if fake_mig_layout:
            carve_layout(gpus, backend, fake_mig_layout)
    pub = node_publication(gpus, mig, backend, consumable=consumable, mig_profiles=mig_profiles)
    for note in pub.notes:
        print(f"dra-gpu inventory: {note}", file=sys.stderr)
    contents = split_pool(list(pub.devices), list(pub.counter_sets))
    return slice_objects(driver=driver, node_name=node_name, contents=contents)


def _inventory(args: argparse.Namespace) -> int:
    layout = tuple(p.strip() for p in (args.fake_mig_layout or "").split(",") if p.strip())
    if layout and (args.nvml or args.mig != MigStrategy.STATIC.value):
        print("dra-gpu inventory: --fake-mig-layout needs --fake-gpus and --mig static", file=sys.stderr)
        return 2
    if args.mig_profiles and args.mig != MigStrategy.DYNAMIC.value:
        print("dra-gpu inventory: --mig-profiles applies to --mig dynamic only", file=sys.stderr)
        return 2
    try:
        driver = validate_driver_name(args.driver_name)
        profiles = parse_mig_profiles(args.mig_profiles)
        slices = inventory_slices(
            fake_gpus=None if args.nvml else args.fake_gpus,
            node_name=args.node_name,
            driver=driver,
            mig=MigStrategy(args.mig),
            fake_mig_layout=layout,
            consumable=args.sharing == "consumable",
            mig_profiles=profiles,
        )
    except (ValueError, MigError) as err:
        print(f"dra-gpu inventory: {err}", file=sys.stderr)
        return 2
    if args.output == "json":
        print(json.dumps({"apiVersion": "v1", "kind": "List", "items": slices}, indent=2))
    else:
        print(yaml.safe_dump_all(slices, sort_keys=False, default_flow_style=False), end="")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The CLI's argument parser."""
    p = argparse.ArgumentParser(prog="dra-gpu", description="dra-gpu: a Kubernetes DRA driver for GPUs")
    sub = p.add_subparsers(dest="command", required=True)
    inv = sub.add_parser("inventory", help="print the ResourceSlices this node would publish, without a cluster")
    src = inv.add_mutually_exclusive_group(required=True)
    src.add_argument("--fake-gpus", metavar="PROFILE", help=f"fake GPUs: {', '.join(sorted(PROFILES))}")
    src.add_argument("--nvml", action="store_true", help="read this machine's GPUs through NVML (read-only)")
    inv.add_argument("--node-name", required=True, help="the node (pool) name")
    inv.add_argument("--driver-name", default=DEFAULT_DRIVER_NAME, help=f"DRA driver name (default {DEFAULT_DRIVER_NAME})")
    inv.add_argument(
        "--mig",
        choices=[m.value for m in MigStrategy],
        default=MigStrategy.NONE.value,
        help="none: full GPUs; static: existing MIG instances; dynamic: every placement with shared counters",
    )
    inv.add_argument(
        "--sharing",
        choices=["none", "consumable"],
        default="none",
        help="consumable: GPUs shared across claims by capacity (memory in GiB, computeShare in percent)",
    )
    inv.add_argument(
        "--mig-profiles",
        metavar="PROFILES",
        help="with --mig dynamic: publish only these profiles or families, e.g. 1g,3g,7g or 1g.10gb,7g.80gb",
    )
    inv.add_argument(
        "--fake-mig-layout",
        metavar="PROFILES",
        help="with --fake-gpus and --mig static: profiles carved on every GPU first, e.g. 3g.40gb,2g.20gb,1g.10gb",
    )
    inv.add_argument("-o", "--output", choices=["yaml", "json"], default="yaml")
    inv.set_defaults(func=_inventory)
    add_explain_parser(sub)
    add_health_parser(sub)
    add_top_parser(sub)
    add_cordon_parsers(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    """Console script entry."""
    configure_cli_logging()  # before anything the command loads can log: stdout is for the output only
    args = build_parser().parse_args(argv)
    rc: int = args.func(args)
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
