"""DeviceTaintRules applied to the devices of ResourceSlices, as kube-scheduler's slice tracker applies them.

Called by ``explain.py`` (:func:`explain`'s ``taint_rules``) after the slices were read. The
scheduler (``k8s.io/dynamic-resource-allocation/resourceslice/tracker``, ``applyPatches``) sees
each device with its own taints followed by the taint of every DeviceTaintRule whose selector
matches it: a rule without a selector matches nothing; an unset ``driver``, ``pool`` or
``device`` matches any, a set one must equal the slice's driver, the slice's pool name, the
device's name. It does so only where the rules are on (:attr:`Rules.device_taint_rules`: the
``DRADeviceTaintRules`` gate from 1.35, GA in 1.37; in 1.34 the ``DRADeviceTaints`` gate, whose
v1alpha3 rules could also select by DeviceClass and CEL, which dra-gpu does not simulate: such a
rule is refused with :class:`InvalidObject`). The taints so added carry the rule's name (and, for
a rule of ``dra-gpu cordon``, the reason the admin gave) so that a device's verdict names why it
is unavailable; the allocator reads only their key, value and effect.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dra_driver.core.cordon import MANAGED_BY, MANAGED_BY_LABEL, reason_annotation
from dra_driver.schedsim.allocator.validate import MAX_STRING_LENGTH, InvalidObject, named_reader, put_present, show

RULE_KEY = "rule"  # in an added taint: the DeviceTaintRule's name (not an API field: the allocator ignores it)
NOTE_KEY = "note"  # in an added taint: "cordoned by dra-gpu: <reason>" for a rule of ``dra-gpu cordon``
MAX_TAINT_RULES = 100_000


@dataclass(frozen=True, slots=True)
class TaintRule:
    """One DeviceTaintRule as the tracker reads it: its selector (None: matches nothing) and taint."""

    name: str
    selector: Mapping[str, str] | None
    taint: Mapping[str, str]

    def matches(self, driver: str, pool: str, device: str) -> bool:
        """Whether the rule selects ``driver``/``pool``/``device`` (an unset selector field matches any)."""
        if self.selector is None:
            return False
        want = {"driver": driver, "pool": pool, "device": device}
        return all(self.selector.get(k) in (None, v) for k, v in want.items())


def read_taint_rule(obj: Any, index: int, *, class_selectors: bool = False) -> TaintRule:
    """One DeviceTaintRule, checked; InvalidObject names what is wrong.

    ``class_selectors``: the release's rules may select by ``deviceClassName`` or CEL ``selectors``
    (1.34's v1alpha3); dra-gpu does not simulate those, so such a rule is refused. From 1.35 the
    fields do not exist (the API server drops them), so they are ignored.
    """
    r, o = named_reader("DeviceTaintRule", obj, index)
    meta = r.obj(o.get("metadata"), "metadata")
    name = r.text(meta.get("name"), "metadata.name") or f"#{index + 1}"
    spec = r.obj(o.get("spec"), "spec")
    selector: dict[str, str] | None = None
    if spec.get("deviceSelector") is not None:
        sm = r.obj(spec["deviceSelector"], "spec.deviceSelector")
        selector = {}
        for k in ("driver", "pool", "device"):
            put_present(selector, k, r.text(sm.get(k), f"spec.deviceSelector.{k}"))
        if class_selectors and (sm.get("deviceClassName") is not None or sm.get("selectors") is not None):
            r.fail(
                "spec.deviceSelector",
                "selects by deviceClassName or CEL selectors (Kubernetes 1.34's v1alpha3): dra-gpu simulates "
                "DeviceTaintRules that select by driver, pool and device only",
            )
    tm = r.obj(spec.get("taint"), "spec.taint")
    taint: dict[str, str] = {}
    for k in ("key", "value", "effect"):
        put_present(taint, k, r.text(tm.get(k), f"spec.taint.{k}", MAX_STRING_LENGTH))
    put_present(taint, RULE_KEY, name)
    labels = meta.get("labels")
    notes = meta.get("annotations")
    if isinstance(labels, Mapping) and labels.get(MANAGED_BY_LABEL) == MANAGED_BY and selector and selector.get("driver"):
        reason = notes.get(reason_annotation(selector["driver"])) if isinstance(notes, Mapping) else None
        taint[NOTE_KEY] = "cordoned by dra-gpu" + (f": {show(reason, 256)}" if isinstance(reason, str) and reason else "")
    return TaintRule(name, selector, taint)


def read_taint_rules(objs: Sequence[Any], *, class_selectors: bool = False) -> list[TaintRule]:
    """Every rule, checked, in name order (the order the tracker's taints are added in is not defined)."""
    if len(objs) > MAX_TAINT_RULES:
        raise InvalidObject(f"input: more than {MAX_TAINT_RULES} DeviceTaintRules")
    rules = [read_taint_rule(o, i, class_selectors=class_selectors) for i, o in enumerate(objs)]
    return sorted(rules, key=lambda t: t.name)


def apply_taint_rules(slices: Iterable[dict[str, Any]], rules: Sequence[TaintRule]) -> list[dict[str, Any]]:
    """The slices (as ``objects.read_slice`` reads them) with each device's matching rules' taints appended.

    A slice no rule touches is returned as it is; a touched one is a new slice whose touched
    devices are new dicts (their parts stay shared, so the allocator's caches still see one shape).
    """
    live = [t for t in rules if t.selector is not None]
    out: list[dict[str, Any]] = []
    for s in slices:
        spec = s.get("spec") or {}
        driver, pool = str(spec.get("driver") or ""), str((spec.get("pool") or {}).get("name") or "")
        mine = [t for t in live if t.selector is not None and t.selector.get("driver") in (None, driver)]
        mine = [t for t in mine if t.selector is not None and t.selector.get("pool") in (None, pool)]
        if not mine or not spec.get("devices"):
            out.append(s)
            continue
        devices = []
        for d in spec["devices"]:
            added = [dict(t.taint) for t in mine if t.matches(driver, pool, str(d.get("name") or ""))]
            devices.append({**d, "taints": [*(d.get("taints") or []), *added]} if added else d)
        out.append({**s, "spec": {**spec, "devices": devices}})
    return out


def untolerated_text(taint: Mapping[str, Any]) -> str:
    """``taint key=value:effect is not tolerated``, and where a rule added it, which rule and (a cordon's) why."""
    text = f"taint {taint.get('key')}={taint.get('value', '')}:{taint.get('effect')} is not tolerated"
    if taint.get(RULE_KEY):
        note = f": {taint[NOTE_KEY]}" if taint.get(NOTE_KEY) else ""
        text += f" (from DeviceTaintRule {show(str(taint[RULE_KEY]))}{note})"
    return text
