"""Per-GPU cordon as DeviceTaintRules: the rules' names, taints and selection, and which devices a cordon covers. Pure.

A cordon is one DeviceTaintRule per device (a rule selects one ``driver``/``pool``/``device``):
the GPU named, and each of its published MIG devices (their ``parentUUID`` attribute is the
GPU's ``uuid``, or their name is ``gpu-<minor>-mig-...``). The taint's key is ``<driver>/cordon``;
its value must be a label value (63 characters of ``[A-Za-z0-9._-]``), so the reason the admin
typed goes whole into an annotation and the value is the reason made label-safe. Called by
``dra_driver.cli.cordon`` (which reads and writes the rules through
``dra_driver.kube.taint_rules_api``) and ``dra_driver.cli.top``.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeGuard

from dra_driver.core.mig import parse_mig_device_name

MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "dra-gpu-cordon"
RULE_PREFIX = "dra-gpu-cordon-"
DEFAULT_REASON = "cordoned"
MAX_REASON_CHARS = 256
MAX_NAME = 253
_HASH_CHARS = 8
_LABEL_VALUE_MAX = 63
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?\Z")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\Z")
_NOT_LABEL_CHARS = re.compile(r"[^A-Za-z0-9._-]+")

EFFECT_NO_SCHEDULE = "NoSchedule"
EFFECT_NO_EXECUTE = "NoExecute"


class CordonError(ValueError):
    """Bad input to a cordon (node, device or reason): nothing was changed."""


def taint_key(driver: str) -> str:
    """The cordon taint's key: ``<driver>/cordon``."""
    return f"{driver}/cordon"


def reason_annotation(driver: str) -> str:
    """The annotation holding the reason as typed."""
    return f"{driver}/cordon-reason"


def gpu_annotation(driver: str) -> str:
    """The annotation naming the device the admin cordoned (the GPU, for the rule of one of its MIG devices)."""
    return f"{driver}/cordon-device"


def validate_node(node: str) -> str:
    """``node`` if it can be a Node's name (a DNS subdomain of at most 253 characters); CordonError otherwise."""
    if not node or len(node) > MAX_NAME or not _DNS_SUBDOMAIN.fullmatch(node):
        raise CordonError(f"node {node!r} is not a valid node name (a lower-case DNS subdomain of at most 253 characters)")
    return node


def validate_device(device: str) -> str:
    """``device`` if it can be a published device's name (a DNS label); CordonError otherwise."""
    if not device or len(device) > 63 or not _DNS_LABEL.fullmatch(device):
        raise CordonError(f"device {device!r} is not a valid device name (a DNS label such as gpu-3)")
    return device


def validate_reason(reason: str | None) -> str:
    """The reason, stripped; the default when none was given; CordonError when too long or not printable text."""
    if reason is None:
        return DEFAULT_REASON
    text = reason.strip()
    if not text:
        raise CordonError("--reason is empty: leave it out for the default, or say why the device is cordoned")
    if len(text) > MAX_REASON_CHARS:
        raise CordonError(f"--reason is {len(text)} characters long; at most {MAX_REASON_CHARS} are kept")
    if not text.isprintable():
        raise CordonError("--reason holds control characters (newlines, tabs, escapes): one printable line only")
    return text


def taint_value(reason: str) -> str:
    """The reason as a label value (the taint's value): runs of other characters become ``-``, at most 63."""
    value = _NOT_LABEL_CHARS.sub("-", reason)[:_LABEL_VALUE_MAX].strip("-._")
    return value or DEFAULT_REASON


def rule_name(driver: str, pool: str, device: str) -> str:
    """The rule's name: ``dra-gpu-cordon-<pool>-<device>-<hash>``, a DNS subdomain of at most 253 characters.

    The hash (of driver, pool and device) keeps names apart that the joined words would not (pool
    ``a-gpu`` device ``0`` and pool ``a`` device ``gpu-0``); a long pool name is cut to fit.
    """
    digest = hashlib.sha256(f"{driver}\x00{pool}\x00{device}".encode()).hexdigest()[:_HASH_CHARS]
    tail = f"-{device}-{digest}"
    room = MAX_NAME - len(RULE_PREFIX) - len(tail)
    head = re.sub(r"[^a-z0-9.-]", "-", pool.lower())[:room].rstrip("-.")
    return f"{RULE_PREFIX}{head}{tail}"


@dataclass(frozen=True, slots=True)
class Cordon:
    """What a cordon asks for: which devices of one pool, why, and the taint's effect."""

    driver: str
    node: str
    pool: str
    device: str
    covered: tuple[str, ...]
    reason: str
    evict: bool

    @property
    def effect(self) -> str:
        """NoExecute with ``--evict`` (the controller-manager evicts the pods using them), else NoSchedule."""
        return EFFECT_NO_EXECUTE if self.evict else EFFECT_NO_SCHEDULE


def rule_for(c: Cordon, device: str) -> dict[str, Any]:
    """The DeviceTaintRule (without apiVersion: the caller's served version names it) cordoning ``device``."""
    return {
        "kind": "DeviceTaintRule",
        "metadata": {
            "name": rule_name(c.driver, c.pool, device),
            "labels": {MANAGED_BY_LABEL: MANAGED_BY},
            "annotations": {reason_annotation(c.driver): c.reason, gpu_annotation(c.driver): c.device},
        },
        "spec": {
            "deviceSelector": {"driver": c.driver, "pool": c.pool, "device": device},
            "taint": {"key": taint_key(c.driver), "value": taint_value(c.reason), "effect": c.effect},
        },
    }


def _obj(value: object) -> Mapping[str, Any]:
    """``value`` if it is a JSON object, else an empty one: a malformed field reads as absent."""
    return value if isinstance(value, Mapping) else {}


def _text(value: object, limit: int = MAX_REASON_CHARS) -> str:
    """A string field as one printable line of at most ``limit`` characters ("" for anything else): safe to print."""
    if not isinstance(value, str):
        return ""
    text = value[: limit + 1]
    text = text if text.isprintable() else "".join(c if c.isprintable() else "?" for c in text)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def is_object_name(name: object) -> TypeGuard[str]:
    """Whether ``name`` can name a cluster object (a DNS subdomain of at most 253 characters)."""
    return isinstance(name, str) and 0 < len(name) <= MAX_NAME and _DNS_SUBDOMAIN.fullmatch(name) is not None


def same_rule(want: Mapping[str, Any], have: Mapping[str, Any]) -> bool:
    """Whether the stored rule ``have`` already says what ``want`` says (selector, taint, reason)."""
    w_spec, h_spec = _obj(want.get("spec")), _obj(have.get("spec"))
    h_taint = dict(_obj(h_spec.get("taint")))
    h_taint.pop("timeAdded", None)
    w_notes = _obj(_obj(want.get("metadata")).get("annotations"))
    h_notes = _obj(_obj(have.get("metadata")).get("annotations"))
    return (
        w_spec.get("deviceSelector") == h_spec.get("deviceSelector")
        and w_spec.get("taint") == h_taint
        and all(h_notes.get(k) == v for k, v in w_notes.items())
    )


def _attr(device: Mapping[str, Any], name: str, driver: str) -> str | None:
    attrs = _obj(device.get("attributes"))
    got = _obj(attrs.get(name) or attrs.get(f"{driver}/{name}"))
    value = got.get("string")
    return value if isinstance(value, str) and value else None


@dataclass(frozen=True, slots=True)
class NodeDevices:
    """The devices ``driver`` publishes for one node: its pool's name and the devices (newest generation)."""

    pool: str
    devices: tuple[Mapping[str, Any], ...]


def _pool_of(s: object, driver: str) -> tuple[str, int, list[Any]] | None:
    """A slice's pool name, generation and device list; None when it is not ``driver``'s or cannot be read."""
    spec = _obj(s.get("spec")) if isinstance(s, Mapping) else {}
    pool = _obj(spec.get("pool"))
    name, gen, devices = pool.get("name"), pool.get("generation", 0), spec.get("devices") or []
    if spec.get("driver") != driver or not is_object_name(name) or not isinstance(devices, list):
        return None
    if gen is None:
        gen = 0
    if isinstance(gen, bool) or not isinstance(gen, int) or not 0 <= gen <= 2**63 - 1:
        return None
    return name, gen, devices


def node_devices(slices: Iterable[Mapping[str, Any]], driver: str) -> NodeDevices | None:
    """The pool and devices of a node's ResourceSlices of ``driver`` (one pool per node); None when there are none.

    A slice whose pool cannot be read is skipped, and so is a device without a valid name.
    """
    pools = [p for p in (_pool_of(s, driver) for s in slices) if p is not None]
    newest: dict[str, int] = {}
    for name, gen, _ in pools:
        newest[name] = max(newest.get(name, gen), gen)
    if not newest:
        return None
    pool_name = sorted(newest)[0]
    devices = [
        d
        for name, gen, listed in pools
        if name == pool_name and gen == newest[pool_name]
        for d in listed
        if isinstance(d, Mapping) and isinstance(d.get("name"), str) and len(d["name"]) <= 63 and _DNS_LABEL.fullmatch(d["name"])
    ]
    return NodeDevices(pool_name, tuple(devices))


def covered_devices(found: NodeDevices, device: str, driver: str) -> tuple[str, ...]:
    """The devices a cordon of ``device`` covers: it, and for a full GPU each MIG device on it; CordonError when not published."""
    by_name = {str(d["name"]): d for d in found.devices}
    if device not in by_name:
        names = ", ".join(sorted(by_name)[:12]) + (", ..." if len(by_name) > 12 else "")
        raise CordonError(f"device {device!r} is not published in pool {found.pool!r} (its devices: {names or 'none'})")
    uuid = _attr(by_name[device], "uuid", driver)
    minor = device.removeprefix("gpu-") if re.fullmatch(r"gpu-(0|[1-9][0-9]*)", device) else None
    children = []
    for name, d in by_name.items():
        if name == device:
            continue
        parsed = parse_mig_device_name(name)
        on_it = (uuid is not None and _attr(d, "parentUUID", driver) == uuid) or (
            minor is not None and parsed is not None and str(parsed.minor) == minor
        )
        if on_it:
            children.append(name)
    return (device, *sorted(children))


@dataclass(frozen=True, slots=True)
class CordonedDevice:
    """One device a dra-gpu cordon rule selects, for ``top`` and ``uncordon``."""

    rule: str
    driver: str
    pool: str
    device: str
    cordoned_as: str
    effect: str
    reason: str


def cordoned_devices(rules: Iterable[Mapping[str, Any]], driver: str | None = None) -> list[CordonedDevice]:
    """The devices dra-gpu's cordon rules (of ``driver``; None: any) select, sorted by pool and device; others' rules ignored."""
    out = []
    for r in rules:
        meta, spec = _obj(_obj(r).get("metadata")), _obj(_obj(r).get("spec"))
        sel, taint = _obj(spec.get("deviceSelector")), _obj(spec.get("taint"))
        rule_driver = sel.get("driver")
        if _obj(meta.get("labels")).get(MANAGED_BY_LABEL) != MANAGED_BY or not isinstance(rule_driver, str):
            continue
        if driver not in (None, rule_driver) or taint.get("key") != taint_key(rule_driver):
            continue
        if not is_object_name(meta.get("name")):
            continue  # a rule that cannot be named cannot be deleted either (an empty name is the whole collection)
        notes = _obj(meta.get("annotations"))
        device = _text(sel.get("device"), MAX_NAME)
        out.append(
            CordonedDevice(
                rule=meta["name"],
                driver=_text(rule_driver, MAX_NAME),
                pool=_text(sel.get("pool"), MAX_NAME),
                device=device,
                cordoned_as=_text(notes.get(gpu_annotation(rule_driver)), MAX_NAME) or device,
                effect=_text(taint.get("effect"), 32),
                reason=_text(notes.get(reason_annotation(rule_driver))) or _text(taint.get("value")),
            )
        )
    return sorted(out, key=lambda c: (c.pool, c.device))


def others_selecting(rules: Iterable[Mapping[str, Any]], driver: str, pool: str, device: str) -> list[str]:
    """Names of the rules not made by ``dra-gpu cordon`` that select ``device`` (an unset selector field matches any)."""
    names = []
    for r in rules:
        meta, spec = _obj(_obj(r).get("metadata")), _obj(_obj(r).get("spec"))
        if _obj(meta.get("labels")).get(MANAGED_BY_LABEL) == MANAGED_BY:
            continue
        sel = _obj(spec.get("deviceSelector"))
        wanted = {"driver": driver, "pool": pool, "device": device}
        if all(not sel.get(k) or sel.get(k) == v for k, v in wanted.items()):
            names.append(_text(meta.get("name"), MAX_NAME) or "(unnamed)")
    return sorted(names)
