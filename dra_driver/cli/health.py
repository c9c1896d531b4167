"""``dra-gpu health``: what the plugin on this node knows about its GPUs' health, and marking one repaired.

Run on the node or in the plugin's pod (``kubectl exec``), next to the plugin's data directory:

    dra-gpu health show                  # the conditions in health.json, per GPU
    dra-gpu health repair gpu-3          # clear what was raised on gpu-3 until now (or: all)

``repair`` leaves a request the running plugin's health monitor applies within a second or two:
it clears the GPU's conditions raised until then (not what a check still sees: a lost GPU stays
tainted until it answers again), republishes the devices without those taints and tells the kubelet.
Called by ``dra_driver.cli.main``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from dra_driver.core.driver import DEFAULT_DRIVER_NAME

# The health record's modules are loaded by the subcommands that read it (the CLI's other commands start faster without them).


def _plugin_dir(args: argparse.Namespace) -> Path:
    return Path(args.plugin_dir or f"/var/lib/kubelet/plugins/{args.driver_name}")


def _show(args: argparse.Namespace) -> int:
    from dra_driver.core.health import HealthBook, health_message, is_unhealthy
    from dra_driver.core.health_record import HealthRecordError, from_json, to_json
    from dra_driver.files.health_store import HEALTH_FILE

    path = _plugin_dir(args) / HEALTH_FILE
    try:
        book, boot_id, _ = from_json(json.loads(path.read_bytes()))
    except FileNotFoundError:
        none = f"{path}: no health record (no condition was ever raised, or health monitoring is off)"
        if args.output == "json":  # stdout stays JSON: an empty record (no boot), the note on stderr
            print(none, file=sys.stderr)
            print(json.dumps(to_json(HealthBook(), ""), indent=2))
        else:
            print(none)
        return 0
    except (OSError, ValueError, HealthRecordError) as err:
        print(f"error: {path}: {err}", file=sys.stderr)
        return 1
    if args.output == "json":
        print(json.dumps(json.loads(path.read_bytes()), indent=2))
        return 0
    if not book.conditions:
        print("every GPU is healthy")
    for uuid, conds in sorted(book.conditions.items()):
        state = "UNHEALTHY" if is_unhealthy(conds) else "healthy"
        print(f"{uuid}: {state}: {health_message(conds)}")
    print(f"(boot {boot_id})")
    return 0


def _repair(args: argparse.Namespace) -> int:
    from dra_driver.files.health_store import request_repair

    try:
        path = request_repair(_plugin_dir(args), args.gpu)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except OSError as err:
        print(f"error: cannot leave the repair request in {_plugin_dir(args)}: {err}", file=sys.stderr)
        return 1
    print(f"repair of {args.gpu} requested ({path}); the plugin applies it within seconds")
    return 0


def add_health_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``dra-gpu health show|repair``."""
    h = sub.add_parser("health", help="GPU health on this node: show conditions, mark a GPU repaired")
    hs = h.add_subparsers(dest="health_command", required=True)
    for name, what in (("show", "print the conditions of this node's GPUs"), ("repair", "mark a GPU repaired")):
        c = hs.add_parser(name, help=what)
        c.add_argument("--plugin-dir", help="the plugin's data dir (default /var/lib/kubelet/plugins/<driver>)")
        c.add_argument("--driver-name", default=DEFAULT_DRIVER_NAME)
        if name == "show":
            c.add_argument("-o", "--output", choices=["text", "json"], default="text")
            c.set_defaults(func=_show)
        else:
            c.add_argument("gpu", help="gpu-<minor>, or all")
            c.set_defaults(func=_repair)
