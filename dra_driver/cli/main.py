"""``dra-gpu``: the user CLI. ``dra-gpu inventory`` prints the ResourceSlices a node would publish.

Uses the same schema and slice splitting as the publisher, so what it prints is what the API
server would hold (minus the owner reference, which needs the cluster's Node UID).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import yaml

from dra_driver.core.driver import DEFAULT_DRIVER_NAME, validate_driver_name
from dra_driver.core.schema import node_devices
from dra_driver.core.slices import slice_objects, split_pool
from dra_driver.sources.fake import PROFILES
from dra_driver.sources.select import make_source


def inventory_slices(*, fake_gpus: str | None, node_name: str, driver: str) -> list[dict[str, Any]]:
    """The ResourceSlice objects a node publishes."""
    gpus = make_source(fake_gpus=fake_gpus, node_name=node_name).gpus()
    return slice_objects(driver=driver, node_name=node_name, contents=split_pool(node_devices(gpus)))


def _inventory(args: argparse.Namespace) -> int:
    try:
        driver = validate_driver_name(args.driver_name)
        slices = inventory_slices(fake_gpus=None if args.nvml else args.fake_gpus, node_name=args.node_name, driver=driver)
    except ValueError as err:
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
    inv.add_argument("-o", "--output", choices=["yaml", "json"], default="yaml")
    inv.set_defaults(func=_inventory)
    return p


def main(argv: list[str] | None = None) -> int:
    """Console script entry."""
    args = build_parser().parse_args(argv)
    rc: int = args.func(args)
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
