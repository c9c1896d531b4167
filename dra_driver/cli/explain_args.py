"""``dra-gpu explain``'s arguments, and the check that the ``explain`` extra is installed before it runs.

Called by ``dra_driver.cli.main`` (:func:`add_explain_parser`), which must import without the
extra: the daemons' image installs ``dra-gpu`` without it (msgspec, lark and cel-python are
``dra-gpu[explain]``, see pyproject.toml), and ``dra-gpu inventory`` and the other commands work
there. The command itself (``dra_driver.cli.explain``, and the scheduler simulator it runs) is
loaded only when ``explain`` runs; without the extra it exits 2 with one line saying what to install.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from typing import Any

__all__ = ["EXTRA_MODULES", "add_explain_parser", "missing_extra"]

# The modules of the explain extra's packages (msgspec, lark, cel-python).
EXTRA_MODULES = ("msgspec", "lark", "celpy")


def missing_extra() -> list[str]:
    """The explain extra's modules that cannot be imported here (none where ``dra-gpu[explain]`` is installed)."""
    return [name for name in EXTRA_MODULES if importlib.util.find_spec(name) is None]


def _explain_cmd(args: argparse.Namespace) -> int:
    """Run ``explain`` (``dra_driver.cli.explain.explain_cmd``) if the extra is installed; else one line, exit 2."""
    missing = missing_extra()
    if missing:
        print(
            f"dra-gpu explain: needs the explain extra (missing: {', '.join(missing)}): pip install 'dra-gpu[explain]'",
            file=sys.stderr,
        )
        return 2
    from dra_driver.cli.explain import explain_cmd  # the simulator: loaded only to explain

    return explain_cmd(args)


def add_explain_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``explain`` on the CLI's subparsers; dispatch is through ``args.func(args)``."""
    p: argparse.ArgumentParser = subparsers.add_parser(
        "explain",
        help="explain which devices a pod's claims could get and why (a simulation of the scheduler)",
        description="Live: dra-gpu explain pod/NAME [-n NS] [--kubeconfig FILE] (also resourceclaim/NAME, "
        "resourceclaimtemplate/NAME). Offline: dra-gpu explain -f MANIFESTS --slices SLICES [--classes ...] [--allocated ...].",
    )
    p.add_argument(
        "target", nargs="?", metavar="NAME", help="pod/NAME, resourceclaim/NAME or resourceclaimtemplate/NAME, read live"
    )
    p.add_argument("-n", "--namespace", default="default", help="namespace of NAME (default: default)")
    p.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config, or in-cluster)")
    p.add_argument("-f", "--filename", help="Pod, ResourceClaim or ResourceClaimTemplate YAML (multi-document)")
    p.add_argument(
        "--slices",
        help="ResourceSlices YAML, e.g. `dra-gpu inventory -o yaml` output; DeviceTaintRules in it (or in -f) are applied",
    )
    p.add_argument("--classes", help="DeviceClasses YAML (default: one class per driver, named like the driver)")
    p.add_argument("--allocated", help="ResourceClaims with status.allocation already in the cluster")
    p.add_argument("-o", "--output", choices=["text", "json"], default="text")
    p.add_argument(
        "--feature-gates",
        metavar="GATES",
        help="kube-scheduler's --feature-gates (Foo=true,Bar=false) where the cluster changed them "
        "(default: the release's defaults; offline: the newest release's)",
    )
    p.set_defaults(func=_explain_cmd)
    return p
