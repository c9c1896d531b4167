"""Planning the writes that bring a node's ResourceSlice pool to the desired content.

Pure: no I/O. Called by the ResourceSlice publisher (``dra_driver.appkit.publisher``) with the slices
it listed and the contents from ``split_pool``; the publisher performs the planned writes.

The rules follow the upstream resourceslice controller: the pool generation is the highest
generation among the existing slices (or the last one written, if higher); when anything differs (device content, slice count,
obsolete or lower-generation slices, owner or node fields) the generation goes up by one and
every slice of the pool is written with it and with the exact ``resourceSliceCount``;
obsolete slices are deleted. When everything matches, nothing is written.

Comparison looks only at the fields the publisher owns (driver, nodeName, pool, devices,
sharedCounters, the Node owner reference), ignores metadata the server adds, and skips
empty values the server omits. For normalization it cannot predict (quantity rewriting,
defaulted or dropped fields) the publisher passes what it last sent per stored
resourceVersion (``SentRecord``): a slice still at that version is compared by what was sent,
so a server that rewrites a slice cannot cause endless rewrites.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dra_driver.core.slices import SliceContent, slice_objects

# Node-selection fields other than nodeName: a node-local pool must not carry them.
_OTHER_NODE_SELECTION = ("nodeSelector", "allNodes", "perDeviceNodeSelection")
_OWNER_KEYS = ("apiVersion", "kind", "name", "uid", "controller")


@dataclass(frozen=True, slots=True)
class SentRecord:
    """What the publisher last sent for one slice, and the resourceVersion the server stored."""

    resource_version: str
    sent: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class PoolPlan:
    """The writes for one pool, in order: ``replaced`` deletes, creates and updates, other deletes."""

    generation: int
    """The pool generation after the writes (unchanged when nothing is written)."""
    create: tuple[dict[str, Any], ...] = ()
    update: tuple[dict[str, Any], ...] = ()
    """Full objects to replace, each with the stored ``metadata.resourceVersion``."""
    delete: tuple[str, ...] = ()
    """Names of obsolete slices."""
    reasons: tuple[str, ...] = ()
    """Why the pool is rewritten (for logs), e.g. ``slice x-0 differs``."""

    @property
    def empty(self) -> bool:
        """True when nothing needs to be written."""
        return not (self.create or self.update or self.delete)

    @property
    def replaced(self) -> tuple[str, ...]:
        """Names both deleted and created (an immutable field differs): delete these first."""
        created = {_name(c) for c in self.create}
        return tuple(n for n in self.delete if n in created)


def _name(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


def _generation(obj: Mapping[str, Any]) -> int:
    value = ((obj.get("spec") or {}).get("pool") or {}).get("generation")
    return value if isinstance(value, int) else 0


def _is_empty(value: Any) -> bool:
    return value is None or (isinstance(value, Mapping | list | tuple) and len(value) == 0)


def _prune(value: Any) -> Any:
    """Drop None and empty lists/dicts recursively (the server omits them)."""
    if isinstance(value, Mapping):
        out = {k: _prune(v) for k, v in value.items()}
        return {k: v for k, v in out.items() if not _is_empty(v)}
    if isinstance(value, list | tuple):
        return [_prune(v) for v in value]
    return value


def _device_view(device: Any) -> Any:
    """Return ``device`` without ``taints[].timeAdded``, which the server fills in."""
    if not isinstance(device, Mapping) or not isinstance(device.get("taints"), list):
        return device
    taints = [{k: v for k, v in t.items() if k != "timeAdded"} if isinstance(t, Mapping) else t for t in device["taints"]]
    return {**device, "taints": taints}


def owned_view(obj: Mapping[str, Any]) -> dict[str, Any]:
    """Return the fields of a slice the publisher owns, normalized for comparison."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    owners = [
        {k: ref.get(k) for k in _OWNER_KEYS if ref.get(k) is not None}
        for ref in meta.get("ownerReferences") or []
        if isinstance(ref, Mapping)
    ]
    pool = spec.get("pool") or {}
    view: dict[str, Any] = {
        "ownerReferences": owners,
        "driver": spec.get("driver"),
        "nodeName": spec.get("nodeName"),
        "pool": {k: pool.get(k) for k in ("name", "generation", "resourceSliceCount")},
        "devices": [_device_view(d) for d in spec.get("devices") or []],
        "sharedCounters": spec.get("sharedCounters"),
    }
    for key in _OTHER_NODE_SELECTION:
        view[key] = spec.get(key)
    pruned: dict[str, Any] = _prune(view)
    return pruned


def _matches(existing: Mapping[str, Any], wanted: Mapping[str, Any], sent: Mapping[str, SentRecord]) -> bool:
    """Tell whether ``existing`` holds what ``wanted`` asks for (directly, or as last sent)."""
    if owned_view(existing) == owned_view(wanted):
        return True
    record = sent.get(_name(existing))
    stored_rv = (existing.get("metadata") or {}).get("resourceVersion")
    return record is not None and record.resource_version == stored_rv and owned_view(record.sent) == owned_view(wanted)


def _for_update(wanted: dict[str, Any], existing: Mapping[str, Any]) -> dict[str, Any]:
    """``wanted`` carrying the existing metadata others own (labels, annotations, finalizers)."""
    metadata = {k: v for k, v in (existing.get("metadata") or {}).items() if k != "managedFields"}
    metadata.update(wanted["metadata"])
    metadata["ownerReferences"] = wanted["metadata"].get("ownerReferences") or []
    metadata["resourceVersion"] = (existing.get("metadata") or {}).get("resourceVersion")
    return {**wanted, "metadata": metadata}


def plan_pool(
    *,
    existing: Sequence[Mapping[str, Any]],
    desired: Sequence[SliceContent],
    driver: str,
    node_name: str,
    node_uid: str | None,
    sent: Mapping[str, SentRecord] | None = None,
    last_generation: int = 0,
) -> PoolPlan:
    """Plan the writes that make the pool of ``driver`` on ``node_name`` equal ``desired``.

    ``existing`` are the slices listed with ``spec.driver=<driver>,spec.nodeName=<node>``;
    slices of other drivers or nodes in it are ignored. ``sent`` maps slice names to what the
    publisher last wrote (see the module docstring). ``last_generation`` is the generation the
    publisher last wrote: new writes go above it too, so a pool wiped entirely (no slices left
    to read a generation from) still moves forward. Returns an empty plan at steady state.
    """
    sent = sent or {}
    ours = [
        s
        for s in existing
        if (s.get("spec") or {}).get("driver") == driver and (s.get("spec") or {}).get("nodeName") == node_name
    ]
    current = max((_generation(s) for s in ours), default=0)
    # A slice whose (immutable) pool name is not ours cannot be updated: it is replaced.
    by_name = {_name(s): s for s in ours if ((s.get("spec") or {}).get("pool") or {}).get("name") == node_name}
    foreign_pool = sorted(_name(s) for s in ours if _name(s) not in by_name)
    contents = list(desired)

    wanted = slice_objects(driver=driver, node_name=node_name, contents=contents, generation=max(current, 1), node_uid=node_uid)
    wanted_names = {_name(w) for w in wanted}
    reasons: list[str] = []
    for w in wanted:
        have = by_name.get(_name(w))
        if have is None:
            reasons.append(f"slice {_name(w)} is missing")
        elif not _matches(have, w, sent):
            reasons.append(f"slice {_name(w)} differs")
    reasons.extend(f"slice {name} is obsolete" for name in sorted(set(by_name) - wanted_names))
    reasons.extend(f"slice {name} belongs to another pool" for name in foreign_pool)
    if not reasons:
        return PoolPlan(generation=current)

    generation = max(current, last_generation) + 1
    wanted = slice_objects(driver=driver, node_name=node_name, contents=contents, generation=generation, node_uid=node_uid)
    create = tuple(w for w in wanted if _name(w) not in by_name)
    update = tuple(_for_update(w, by_name[_name(w)]) for w in wanted if _name(w) in by_name)
    delete = tuple(sorted((set(by_name) - wanted_names) | set(foreign_pool)))
    return PoolPlan(generation=generation, create=create, update=update, delete=delete, reasons=tuple(reasons))


def dropped_fields(sent_spec: Any, stored_spec: Any, path: str = "spec") -> list[str]:
    """JSON paths present in what was sent but absent from what the server stored.

    A disabled feature gate makes the apiserver drop the fields of that feature without an
    error, e.g. ``spec.devices[3].consumesCounters``. Empty values are not reported (the server
    omits them legitimately), nor are changed values (normalization is not dropping).
    """
    out: list[str] = []
    if isinstance(sent_spec, Mapping):
        if not isinstance(stored_spec, Mapping):
            return out
        for key, value in sent_spec.items():
            child = f"{path}.{key}"
            if _is_empty(value):
                continue
            if key not in stored_spec:
                out.append(child)
            else:
                out.extend(dropped_fields(value, stored_spec[key], child))
    elif isinstance(sent_spec, list | tuple):
        if not isinstance(stored_spec, list | tuple):
            return out
        for index, value in enumerate(sent_spec):
            child = f"{path}[{index}]"
            if index >= len(stored_spec):
                out.append(child)
            else:
                out.extend(dropped_fields(value, stored_spec[index], child))
    return out
