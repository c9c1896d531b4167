"""``dra-gpu explain``: why a pod, claim or claim template would (not) get devices.

Registered by ``dra_driver.cli.main`` through ``dra_driver.cli.explain_args`` (which loads this
module only when ``explain`` runs, after checking that the ``explain`` extra is installed). Live:
``NAME`` (``pod/x``, ``resourceclaim/x``, ``resourceclaimtemplate/x``) is read from the API server
(``--kubeconfig``, ``-n``) with every ResourceSlice, DeviceClass, Node and allocated claim
(``explain_live.py``). Offline: the manifests (``-f``; a pod's claim templates come from the same
file), ResourceSlices (``--slices``, e.g. ``dra-gpu inventory -o yaml`` output, several nodes
concatenated, with any DeviceTaintRules: ``kubectl get resourceslices,devicetaintrules -o yaml``),
DeviceClasses (``--classes``; without it each driver in the slices gets a class of
its own name that selects its devices) and already-allocated claims (``--allocated``), read by
``explain_inputs.py``. Either way the scheduler simulator (``dra_driver.schedsim``) does the rest.

:func:`explain_objects` is the whole offline path on parsed documents. Every object is checked
on the way in (``dra_driver.schedsim.allocator.validate``): a malformed file or object, or one past
the API's limits, is an :class:`InputError` naming the object and field, never a crash. So is a
claim, template or class of the files whose selectors the API server would refuse (too long, not
compiling, too complex: ``dra_driver.schedsim.allocator.admission``), before anything is
evaluated; objects read live were validated when stored. The text report (summarized per group
of nodes on a large cluster) is ``explain_text.py``'s.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
from collections.abc import Sequence
from typing import Any

from dra_driver.cli.explain_args import add_explain_parser
from dra_driver.cli.explain_inputs import (
    InputError,
    default_classes,
    ident,
    load_objects,
    of_kind,
    split_concatenated,
    workloads,
)
from dra_driver.cli.explain_live import default_kubeconfig, parse_target, run_live
from dra_driver.cli.explain_text import render_text
from dra_driver.schedsim.allocator import Explanation, InvalidObject, explain
from dra_driver.schedsim.allocator.admission import all_refusals
from dra_driver.schedsim.gates import GateError, parse_feature_gates
from dra_driver.schedsim.rules import NEWEST, Rules, rules_for

__all__ = [
    "InputError",
    "add_explain_parser",
    "default_classes",
    "default_kubeconfig",
    "explain_cmd",
    "explain_objects",
    "load_objects",
    "parse_target",
    "render_text",
    "run_explain",
    "run_live",
    "split_concatenated",
    "workloads",
]


def explain_objects(
    manifests: Sequence[Any],
    slices: Sequence[Any],
    classes: Sequence[Any] | None = None,
    allocated: Sequence[Any] = (),
    rules: Rules = NEWEST,
) -> list[tuple[str, Explanation]]:
    """Explain each workload of the parsed documents (what :func:`load_objects` returns for each file).

    ``manifests``: pods, claims and templates; ``slices``: the ResourceSlices (and DeviceTaintRules,
    there or among the manifests, applied where ``rules`` say the scheduler applies them); ``classes``: the
    DeviceClasses (None: one per driver, see :func:`default_classes`); ``allocated``: claims already
    allocated. Documents of other kinds are ignored. Raises :class:`InputError` for anything
    malformed or past the bounds of ``dra_driver.schedsim.allocator.validate``, naming it, and for
    a claim, template or class whose selectors the API server would refuse (too long, not
    compiling, too complex: ``dra_driver.schedsim.allocator.admission``), before anything is evaluated.
    """
    try:
        slice_objs = of_kind(slices, "ResourceSlice")
        if classes is None:
            class_map = default_classes(slice_objs)
        else:
            class_map = {}
            for i, c in enumerate(of_kind(classes, "DeviceClass")):
                class_map[ident(c, "DeviceClass", i)[2]] = c
        refused = all_refusals([*of_kind(manifests, "ResourceClaim"), *of_kind(manifests, "ResourceClaimTemplate")], rules)
        refused += all_refusals(of_kind(classes or [], "DeviceClass"), rules)
        if refused:
            raise InputError("\n".join(str(r) for r in refused))
        alloc_objs = of_kind(allocated, "ResourceClaim")
        taint_rules = [*of_kind(slices, "DeviceTaintRule"), *of_kind(manifests, "DeviceTaintRule")]
        return [
            (label, explain(claims, slice_objs, class_map, alloc_objs, rules=rules, taint_rules=taint_rules))
            for label, claims in workloads(manifests, alloc_objs)
        ]
    except InvalidObject as err:
        raise InputError(str(err)) from None


def run_explain(
    *, manifests: str, slices: str, classes: str | None = None, allocated: str | None = None, rules: Rules = NEWEST
) -> list[tuple[str, Explanation]]:
    """Load the files and explain each workload in them (as ``rules``' scheduler: default, the newest release's defaults)."""
    return explain_objects(
        load_objects(manifests),
        load_objects(slices),
        load_objects(classes) if classes else None,
        load_objects(allocated) if allocated else [],
        rules,
    )


def explain_cmd(args: argparse.Namespace) -> int:
    """Run ``explain`` as the CLI does; the exit code (0: everything allocatable, 1: not, 2: bad input).

    The cyclic garbage collector is off while the inputs are read and simulated and the report is
    written (then back as it was): a large cluster's slices are millions of (acyclic) JSON objects,
    and every collection walks all of them again, which more than doubles the time of decoding them;
    the report's lines, one per device, would be walked likewise. Reference counting still frees them.
    """
    live = args.target is not None
    usage = ""
    if live and (args.filename or args.slices or args.classes or args.allocated):
        usage = "give either NAME (read from the cluster) or -f with --slices (files), not both"
    elif not live and (not args.filename or not args.slices):
        usage = "give NAME to read from the cluster, or -f and --slices for files"
    if usage:
        print(f"dra-gpu explain: {usage}", file=sys.stderr)
        return 2
    enabled = gc.isenabled()
    gc.disable()  # see explain_cmd's docstring
    try:
        return _explain_and_print(args, live)
    finally:
        if enabled:
            gc.enable()


def _explain_and_print(args: argparse.Namespace, live: bool) -> int:
    """Explain and print the results; the exit code (see :func:`explain_cmd`)."""
    try:
        gates = parse_feature_gates(args.feature_gates) if args.feature_gates else None
        if live:
            results = run_live(
                target=args.target,
                namespace=args.namespace,
                kubeconfig=args.kubeconfig or default_kubeconfig(),
                gates=gates,
                note=lambda text: print(text, file=sys.stderr),
            )
        else:
            rules = rules_for(None, gates)
            results = run_explain(
                manifests=args.filename, slices=args.slices, classes=args.classes, allocated=args.allocated, rules=rules
            )
    except GateError as err:
        print(f"dra-gpu explain: --feature-gates: {err}", file=sys.stderr)
        return 2
    except InputError as err:
        print(f"dra-gpu explain: {err}", file=sys.stderr)
        return 2
    if args.output == "json":
        entries = [r.to_json() for _, ex in results for r in ex.requests]
        print(json.dumps({"requests": entries}, indent=2))
    else:
        if not live and not args.classes:
            print("note: no --classes given; each driver's devices form a class named like the driver", file=sys.stderr)
        print(render_text(results), end="")
    allocated_all = all(r.reason is None for _, ex in results for r in ex.requests)
    return 0 if allocated_all else 1
