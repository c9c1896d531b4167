"""``dra-gpu cordon NODE DEVICE`` and ``dra-gpu uncordon NODE DEVICE``: take one GPU out of service, and back.

A cordon is the API's own DeviceTaintRule, one per device: the device named and, for a full GPU,
each MIG device published on it (``dra_driver.core.cordon``). The taint ``<driver>/cordon`` is
NoSchedule (the scheduler allocates the device to no new claim; running pods stay) or, with
``--evict``, NoExecute (the kube-controller-manager also evicts the pods whose claims hold it).
Cordoning twice converges on the same rules (a new reason or effect replaces the old);
uncordon deletes the rules of the device (and, for a GPU, those of its MIG devices).

Where the server serves no DeviceTaintRule API (1.34; 1.35/1.36 with the gate off), or with
``--local``, the cordon is local withholding instead (``dra_driver.cli.cordon_local``): the Node's
annotation names the device, the node's plugin stops publishing it (and its MIG devices); a note
says so. ``--evict`` cannot be done that way and is refused. Uncordon removes both kinds.

Exit status: 0 done (also: nothing to uncordon); 1 the API server failed or refused; 2 bad input
(unknown node or device, a bad reason, a malformed cordon annotation) or ``--evict`` without a
DeviceTaintRule API, nothing changed.
Called by ``dra_driver.cli.main``; ``dra_driver.cli.top`` uses :func:`cordon_lines`.
"""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from dra_driver.cli.kubeconfig import default_kubeconfig
from dra_driver.core.cordon import (
    Cordon,
    CordonedDevice,
    CordonError,
    cordoned_devices,
    covered_devices,
    node_devices,
    others_selecting,
    rule_for,
    same_rule,
    validate_device,
    validate_node,
    validate_reason,
)
from dra_driver.core.driver import DEFAULT_DRIVER_NAME, validate_driver_name
from dra_driver.core.local_cordon import annotation_key

if TYPE_CHECKING:
    from dra_driver.kube.taint_rules_api import KubeTaintRuleApi


class _Refused(Exception):
    """The command cannot go on: the message, and the exit status."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def unserved_message(server: str) -> str:
    """Why a server without a DeviceTaintRule API cannot cordon, and what would."""
    return (
        f"the API server ({server}) serves no DeviceTaintRule API (resource.k8s.io v1, v1beta2 or v1alpha3): "
        "cordon needs the DRADeviceTaintRules feature gate, GA and on in Kubernetes 1.37; in 1.36 it is beta but "
        "off by default (enable it on the kube-apiserver, kube-scheduler and kube-controller-manager, and serve "
        "resource.k8s.io/v1beta2); in 1.33-1.35 it is alpha (resource.k8s.io/v1alpha3). Nothing was changed"
    )


def _api_and_version(args: argparse.Namespace) -> tuple[KubeTaintRuleApi, str | None]:
    """The API and its served DeviceTaintRule version (None: none served, or ``--local`` asks for withholding)."""
    from dra_driver.kube.taint_rules_api import KubeApiError, connect

    try:
        api = connect(args.kubeconfig or default_kubeconfig())
        version = None if getattr(args, "local", False) else api.served_version()
    except KubeApiError as err:
        raise _Refused(f"cannot reach the API server: {err}", 1) from None
    return api, version


def _plan(api: KubeTaintRuleApi, args: argparse.Namespace, driver: str, withheld: Mapping[str, str] | None = None) -> Cordon:
    """The cordon asked for; ``withheld``: the node's local cordons (a device withheld is not published, yet known)."""
    node, device, reason = validate_node(args.node), validate_device(args.device), validate_reason(args.reason)
    found = node_devices(api.node_slices(driver, node), driver)
    if withheld is not None and device in withheld and (found is None or device not in {d.get("name") for d in found.devices}):
        return Cordon(driver=driver, node=node, pool=node, device=device, covered=(device,), reason=reason, evict=False)
    if found is None:
        exists = api.node_exists(node)
        if exists is False:
            raise CordonError(f"node {node!r} not found")
        unknown = " (or there is no such node)" if exists is None else ""
        raise CordonError(f"node {node!r} publishes no devices of driver {driver}{unknown}: is the plugin running there?")
    covered = covered_devices(found, device, driver)
    return Cordon(driver=driver, node=node, pool=found.pool, device=device, covered=covered, reason=reason, evict=args.evict)


def _apply(api: KubeTaintRuleApi, version: str, c: Cordon) -> dict[str, list[str]]:
    """Create or replace each covered device's rule: rule names by what was done."""
    from dra_driver.kube.taint_rules_api import KubeApiError

    done: dict[str, list[str]] = {"created": [], "updated": [], "unchanged": []}
    for device in c.covered:
        want = rule_for(c, device)
        name = want["metadata"]["name"]
        for attempt in range(3):
            have = api.get_rule(version, name)
            try:
                if have is None:
                    api.create_rule(version, want)
                    done["created"].append(name)
                elif same_rule(want, have):
                    done["unchanged"].append(name)
                else:
                    meta = {**want["metadata"], "resourceVersion": _resource_version(have, name)}
                    api.replace_rule(version, {**want, "metadata": meta})
                    done["updated"].append(name)
                break
            except KubeApiError as err:  # someone else wrote it between the read and the write: read again
                if not err.conflict or attempt == 2:
                    raise
    return done


def _resource_version(rule: dict[str, Any], name: str) -> str:
    """The stored rule's ``metadata.resourceVersion`` (a replace's guard); KubeApiError when the answer has none."""
    from dra_driver.kube.taint_rules_api import KubeApiError

    meta = rule.get("metadata")
    version = meta.get("resourceVersion") if isinstance(meta, dict) else None
    if not isinstance(version, str) or not version or len(version) > 128:
        what = f"devicetaintrule/{name} as the server answered has no metadata.resourceVersion"
        raise KubeApiError(200, "InvalidResponse", what)
    return version


def _guarded(cmd: str, work: Callable[[argparse.Namespace], tuple[list[str], list[str]]], args: argparse.Namespace) -> int:
    """Run ``work`` (its stdout and stderr lines), turning each failure into its message and exit status."""
    from dra_driver.kube.taint_rules_api import KubeApiError

    try:
        out, notes = work(args)
    except (ValueError, CordonError) as err:
        print(f"dra-gpu {cmd}: {err}; nothing was changed", file=sys.stderr)
        return 2
    except _Refused as err:
        print(f"dra-gpu {cmd}: {err}", file=sys.stderr)
        return err.code
    except KubeApiError as err:
        print(f"dra-gpu {cmd}: the API server refused: {err} (what was written before stays: run it again)", file=sys.stderr)
        return 1
    for line in out:
        print(line)
    for line in notes:
        print(line, file=sys.stderr)
    return 0


def _cordon(args: argparse.Namespace) -> tuple[list[str], list[str]]:
    driver = validate_driver_name(args.driver_name)
    validate_node(args.node), validate_device(args.device), validate_reason(args.reason)  # before any API call
    api, version = _api_and_version(args)
    if version is None:
        return _cordon_locally(api, args, driver)
    c = _plan(api, args, driver)
    done = _apply(api, version, c)
    what = "NoExecute: no new claims, and the pods using it are evicted" if c.evict else "NoSchedule: no new claims"
    extra = f" and {len(c.covered) - 1} MIG device(s) on it" if len(c.covered) > 1 else ""
    out = [f"cordoned {c.node} {c.device}{extra} ({what}; reason: {c.reason})"]
    out += [f"  {kind} devicetaintrule/{name} ({version})" for kind in ("created", "updated", "unchanged") for name in done[kind]]
    return out, []


def _cordon_locally(api: KubeTaintRuleApi, args: argparse.Namespace, driver: str) -> tuple[list[str], list[str]]:
    """The cordon by local withholding (``dra_driver.cli.cordon_local``): ``--local``, or no DeviceTaintRule served."""
    from dra_driver.cli import cordon_local

    server = api.server_version_text()
    if args.evict:
        raise _Refused(cordon_local.evict_refusal(server, args.local), 2)
    node = validate_node(args.node)
    c = _plan(api, args, driver, cordon_local.recorded(api.nodes, node, driver))
    _, changed = cordon_local.update(api.nodes, c.node, driver, c.device, c.reason)
    extra = f" and {len(c.covered) - 1} MIG device(s) on it" if len(c.covered) > 1 else ""
    out = [
        f"cordoned {c.node} {c.device}{extra} by local withholding (no new claims: the node's plugin stops publishing "
        f"it; the pods using it keep it; reason: {c.reason})",
        f"  {'annotated' if changed else 'unchanged'} node/{c.node} {annotation_key(driver)}",
    ]
    return out, ([] if args.local else [cordon_local.fallback_note(server)])


def _uncordon(args: argparse.Namespace) -> tuple[list[str], list[str]]:
    driver = validate_driver_name(args.driver_name)
    node, device = validate_node(args.node), validate_device(args.device)
    api, version = _api_and_version(args)
    out, notes, deleted = [], [], []
    if version is not None:
        found = node_devices(api.node_slices(driver, node), driver)
        pool = found.pool if found is not None else node
        rules = api.rules(version)
        mine = [r for r in cordoned_devices(rules, driver) if r.pool == pool and device in (r.device, r.cordoned_as)]
        deleted = [f"devicetaintrule/{r.rule}" for r in mine if api.delete_rule(version, r.rule)]
        notes = [
            f"note: devicetaintrule/{other} (not made by dra-gpu cordon) still selects {device}"
            for other in others_selecting(rules, driver, pool, device)
        ]
    if _uncordon_locally(api, node, driver, device, required=version is None):
        deleted.append(f"the entry of node/{node} {annotation_key(driver)} (the plugin publishes it again at its next check)")
    if not deleted:
        out = [f"{node} {device} is not cordoned (no dra-gpu DeviceTaintRule or local withholding): nothing to do"]
    else:
        out = [f"uncordoned {node} {device}", *(f"  deleted {what}" for what in deleted)]
    return out, notes


def _uncordon_locally(api: KubeTaintRuleApi, node: str, driver: str, device: str, *, required: bool) -> bool:
    """Drop ``device``'s local cordon; whether there was one. Where rules are served a Node that cannot be read is no error."""
    from dra_driver.cli import cordon_local
    from dra_driver.kube.taint_rules_api import KubeApiError

    try:
        return cordon_local.update(api.nodes, node, driver, device, None)[1]
    except (KubeApiError, CordonError) as err:
        if required or (isinstance(err, CordonError) and "malformed" in str(err)):
            raise
        return False


def cordon_lines(api: KubeTaintRuleApi, nodes: Iterable[str] = ()) -> list[CordonedDevice]:
    """The devices dra-gpu cordons hold (any driver): by DeviceTaintRule where served, and by local withholding on ``nodes``.

    A Node that cannot be read (the caller may not, or it is gone) shows no local cordon.
    """
    from dra_driver.cli.cordon_local import local_cordons
    from dra_driver.kube.taint_rules_api import KubeApiError

    version = api.served_version()
    out = [] if version is None else cordoned_devices(api.rules(version))
    read = []
    for node in sorted(set(nodes)):
        try:
            read.append(api.nodes.get_node(node))
        except KubeApiError:
            continue
    return out + local_cordons(read)


def add_cordon_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``dra-gpu cordon`` and ``dra-gpu uncordon``."""
    for name, what in (
        ("cordon", "take one GPU (and its MIG devices) out of service with a DeviceTaintRule, without draining the node"),
        ("uncordon", "put a cordoned GPU back in service (deletes its DeviceTaintRules)"),
    ):
        p = sub.add_parser(name, help=what, description=what)
        p.add_argument("node", metavar="NODE", help="the node's name")
        p.add_argument("device", metavar="DEVICE", help="the device as published: gpu-3, or one MIG device gpu-3-mig-1g10gb-0")
        if name == "cordon":
            p.add_argument(
                "--evict",
                action="store_true",
                help="taint NoExecute: the kube-controller-manager also evicts the pods using the device "
                "(needs the DeviceTaintRule API; refused with local withholding)",
            )
            p.add_argument(
                "--local",
                action="store_true",
                help="cordon by local withholding even where DeviceTaintRules are served: the Node's annotation, "
                "the plugin stops publishing the device (chosen by itself, with a note, where no DeviceTaintRule is served)",
            )
            p.add_argument("--reason", help="why (one line, at most 256 characters; default: cordoned)")
        p.add_argument("--driver-name", default=DEFAULT_DRIVER_NAME, help=f"DRA driver name (default {DEFAULT_DRIVER_NAME})")
        p.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config, or in-cluster)")
        work = _cordon if name == "cordon" else _uncordon
        p.set_defaults(func=functools.partial(_guarded, name, work))
