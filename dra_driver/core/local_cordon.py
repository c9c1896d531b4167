"""Per-GPU cordon by local withholding: the Node annotation naming the cordoned devices, and what it withholds. Pure.

Where the API server serves no DeviceTaintRule (Kubernetes 1.34; 1.35 and 1.36 with the
``DRADeviceTaintRules`` gate off), ``dra-gpu cordon`` records the cordon on the Node instead: the
annotation ``<driver>/cordoned-devices`` holds a JSON object, device name -> reason
(``{"gpu-3": "fan failing"}``). The node's kubelet plugin reads it and leaves those devices out
of its ResourceSlice (a full GPU with each of its MIG devices: same ``parentUUID`` as the GPU's
``uuid``, or named ``gpu-<minor>-mig-...``), so the scheduler allocates them to no new claim;
claims already allocated keep them (withholding cannot evict). Uncordon removes the entry (the
annotation with the last one).

Fail closed: an annotation that is not such an object withholds every device of the node until
it is fixed (the admin meant to take some out; which is unknown), and says so.
Called by ``dra_driver.cli.cordon`` (writes), ``dra_driver.appkit.local_cordon`` (withholds),
``dra_driver.cli.explain_live`` and ``dra_driver.cli.top`` (show).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from dra_driver.core.mig import parse_mig_device_name

MAX_ENTRIES = 1024
_GPU = re.compile(r"gpu-(0|[1-9][0-9]*)")


class MalformedCordons(ValueError):
    """The annotation is there but is not a JSON object of device name -> reason."""


def annotation_key(driver: str) -> str:
    """The Node annotation holding the locally cordoned devices."""
    return f"{driver}/cordoned-devices"


def parse(value: str | None) -> dict[str, str]:
    """Device name -> reason from the annotation's value ({} when absent); MalformedCordons otherwise."""
    if value is None or not value.strip():
        return {}
    try:
        doc = json.loads(value)
    except (ValueError, RecursionError) as err:
        raise MalformedCordons(f"not JSON: {err}") from None
    if not isinstance(doc, dict):
        raise MalformedCordons(f"a JSON {type(doc).__name__}, not an object of device name -> reason")
    if len(doc) > MAX_ENTRIES:
        raise MalformedCordons(f"{len(doc)} entries, more than {MAX_ENTRIES}")
    bad = [k for k, v in doc.items() if not k or not isinstance(v, str)]
    if bad:
        raise MalformedCordons(f"entry {bad[0]!r}: each entry is a device name with a reason (a string)")
    return {str(k): str(v) for k, v in doc.items()}


def render(entries: Mapping[str, str]) -> str | None:
    """The annotation's value for ``entries`` (sorted, compact); None: remove the annotation."""
    return json.dumps(dict(sorted(entries.items())), separators=(",", ":")) if entries else None


def node_cordons(node: Mapping[str, Any], driver: str) -> dict[str, str]:
    """The cordons recorded on ``node`` (a Node as JSON); MalformedCordons for an annotation that is not one.

    A Node, metadata or annotations of the wrong shape, or a value that is not a string, is malformed
    too: what cannot be read withholds (fail closed), it never counts as "nothing cordoned".
    """
    if not isinstance(node, Mapping):
        raise MalformedCordons(f"the Node is a {type(node).__name__}, not an object")
    meta = node.get("metadata")
    meta = {} if meta is None else meta
    if not isinstance(meta, Mapping):
        raise MalformedCordons(f"the Node's metadata is a {type(meta).__name__}, not an object")
    notes = meta.get("annotations")
    notes = {} if notes is None else notes
    if not isinstance(notes, Mapping):
        raise MalformedCordons(f"the Node's annotations are a {type(notes).__name__}, not an object")
    key = annotation_key(driver)
    if key not in notes:
        return {}
    value = notes[key]
    if not isinstance(value, str):
        raise MalformedCordons(f"a {type(value).__name__}, not a string")
    return parse(value)


@dataclass(frozen=True, slots=True)
class Withholding:
    """What the node withholds: every device (a malformed annotation), or the devices cordoned, with why."""

    everything: bool = False
    cordoned: Mapping[str, str] = field(default_factory=dict)
    problem: str = ""

    @classmethod
    def from_node(cls, node: Mapping[str, Any], driver: str) -> Withholding:
        """The withholding ``node``'s annotation asks for (everything, naming the problem, when malformed)."""
        try:
            return cls(cordoned=node_cordons(node, driver))
        except MalformedCordons as err:
            return cls(everything=True, problem=f"annotation {annotation_key(driver)} is malformed ({err})")


def _attr(attrs: Mapping[str, Any], name: str) -> Any:
    got = attrs.get(name)
    return getattr(got, "value", got)


def withheld(devices: Iterable[tuple[str, Mapping[str, Any]]], cordoned: Iterable[str]) -> set[str]:
    """The names among ``devices`` ((name, attributes) pairs) that ``cordoned`` withholds.

    A device named is withheld; for a full GPU (``gpu-<minor>``) also each MIG device on it (the
    GPU's ``uuid`` as its ``parentUUID``, or a MIG name on the same minor). Attributes are looked up
    by their short name (``uuid``, ``parentUUID``); values may be plain or carry ``.value``.
    """
    devs = list(devices)
    named = set(cordoned)
    uuids = {_attr(attrs, "uuid") for name, attrs in devs if name in named and _attr(attrs, "uuid")}
    minors = {name.removeprefix("gpu-") for name in named if _GPU.fullmatch(name)}
    out = set()
    for name, attrs in devs:
        parsed = parse_mig_device_name(name)
        if (
            name in named
            or (parsed is not None and str(parsed.minor) in minors)
            or (_attr(attrs, "parentUUID") is not None and _attr(attrs, "parentUUID") in uuids)
        ):
            out.add(name)
    return out
