"""The fast path of the ResourceSlice device reader: the usual device shape, with its parts read once.

Called by ``objects.read_slice`` for each device before the field-by-field reader (``objects._device``).
A large cluster publishes the same parts over and over: every MIG placement of one profile on one
GPU has the same attributes, every device of one profile the same capacity, a device of one name
the same counter consumption on every node. :func:`read_device` accepts only the usual shape (a
name, attributes of one scalar each, plain quantities, counters, ``allowMultipleAllocations``)
and returns a copy equal to what ``_device`` returns for it; for anything else (another field, a
value of an unusual form, any value ``_device`` would refuse) it returns None and the caller reads
the device the slow way, which also words any error. A part equal to one read before (the
previous device's, or the one of a device of the same name) is not checked again: its earlier
copy is returned, so devices of one shape share their parts (the allocator's caches, keyed by
those parts' identity, then compute once per shape); parts read anew that equal earlier ones in
content are given the earlier copy too (:meth:`DeviceMemo.intern`). A part that is the very object
read before (the slices decoder, ``dra_driver.schedsim.shared_json``, gives equal texts one object) is
known at once, without comparing it. New attributes that differ from the last ones of a device of
the same name (another node's) only in a few strings, a GPU's UUID, are read from those: only the
values that differ are read (:func:`_attributes_like`), and each attribute value the decoder shares
is read once (:attr:`DeviceMemo.entries`). Each new copy's conversion error for CEL (a version or
quantity that does not parse) is found while reading it (:attr:`DeviceMemo.errors`), so the
allocator's device views need not look again.
"""

from __future__ import annotations

from itertools import compress, count
from operator import is_not
from typing import Any

from dra_driver.schedsim.allocator.validate import (
    MAX_ATTRIBUTE_VALUE_LENGTH,
    MAX_ATTRIBUTES_AND_CAPACITIES,
    MAX_CONSUMPTIONS_PER_DEVICE,
    MAX_COUNTERS_PER_SET,
    MAX_NAME_LENGTH,
    plain_quantity,
)
from dra_driver.schedsim.cel.projection import capacity_error, version_error

# Fields the fast path reads; a device with any other field (taints, node selection, binding
# conditions, or anything unknown) takes the field-by-field reader.
_FIELDS = frozenset({"name", "attributes", "capacity", "consumesCounters", "allowMultipleAllocations"})
_CONSUMPTION_FIELDS = frozenset({"counterSet", "counters"})
_INT64 = 2**63
_ENTRIES_LIMIT = 1 << 16


class DeviceMemo:
    """The parts read so far in one explanation: the last device's attributes, and by device name its other parts.

    Each entry holds the input part and its checked copy; an input equal to it gets that copy if
    it also agrees on what ``==`` does not look at but the reader does: the order of the keys, and
    the types of numbers (``==`` equates ``1``, ``1.0`` and ``True``).
    """

    __slots__ = (
        "attributes",
        "attributes_by_name",
        "by_id",
        "by_name",
        "counters",
        "derived",
        "entries",
        "errors",
        "groups",
        "interned",
    )

    def __init__(self) -> None:
        self.attributes: _Seen | None = None
        # id of one attribute's input value (the decoder shares equal ones) -> it, kept alive, read (see _entry).
        self.entries: dict[int, _Entry] = {}
        self.by_id: dict[int, _Seen] = {}  # id of an attributes input -> what it read as (the input kept alive there)
        self.by_name: dict[str, tuple[_Seen | None, _Seen | None]] = {}
        self.attributes_by_name: dict[str, _Seen] = {}  # device name -> the attributes of the last device of that name
        self.interned: dict[tuple[Any, ...], Any] = {}  # content -> the one copy of equal parts
        # id of an attributes or capacity copy -> (the copy, kept alive; its conversion error for CEL,
        # or None), found while reading it: the allocator's device views take it from here (see shapes.py).
        self.errors: dict[int, tuple[Any, str | None]] = {}
        # id of an attributes copy read from another (:func:`_attributes_like`) -> (the copy, kept alive;
        # the other copy; the names whose values differ, each one string for another): a device whose
        # selectors read none of those names has the outcome of one with the other copy (see simulate.py).
        self.derived: dict[int, tuple[Any, Any, tuple[str, ...]]] = {}
        # id of a counter set's counters input (objects.read_slice) -> (it, kept alive; its checked copy, shared).
        self.counters: dict[int, tuple[Any, dict[str, Any]]] = {}
        # Whether a device read declares compatibility groups (only the field-by-field reader reads
        # them): where none does, no slice needs looking at for them (pools.SliceIndex).
        self.groups = False

    def intern(self, key: tuple[Any, ...], copy: Any) -> Any:
        """The copy already made of parts with this content (``key``), else ``copy``, remembered."""
        return self.interned.setdefault(key, copy)


class _Seen:
    """One part read before: the input, its copy, its key order and the types of its numeric attribute values."""

    __slots__ = ("copy", "error", "key", "keys", "numeric", "raw")

    def __init__(
        self,
        raw: Any,
        copy: Any,
        numeric: tuple[tuple[str, type], ...] = (),
        key: tuple[Any, ...] | None = None,
        error: str | None = None,
    ) -> None:
        self.raw, self.copy, self.numeric = raw, copy, numeric
        self.keys = tuple(raw) if type(raw) is dict else _counter_keys(raw)
        self.key, self.error = key, error  # an attributes map's content and conversion error (see _attributes)

    def same(self, v: dict[str, Any]) -> bool:
        """The map ``v`` reads as this one did: equal, keys in the same order, numbers of the same types."""
        if v is self.raw:  # one object (the decoder shares equal parts): it reads the same
            return True
        if v != self.raw or tuple(v) != self.keys:
            return False
        for name, t in self.numeric:
            ((_, x),) = v[name].items()
            if type(x) is not t:
                return False
        return True

    def same_consumptions(self, v: Any) -> bool:
        """The ``consumesCounters`` list ``v`` reads as this one did: equal, each one's counters in the same order."""
        if v is self.raw:
            return True
        if type(v) is not list or v != self.raw:
            return False
        if len(v) == 1:  # the usual one consumption (equal to the one read, so a map)
            return self.keys == (tuple(v[0].get("counters") or ()),)
        return _counter_keys(v) == self.keys


def _counter_keys(v: list[Any]) -> tuple[Any, ...]:
    """The key order of each consumption's counters."""
    return tuple([tuple(cc.get("counters") or ()) for cc in v])


_NOTHING: tuple[None, None] = (None, None)
_EMPTY: dict[str, Any] = {}


# One attribute value read: (the input, kept alive; its kind; its value; the value's type; its copy).
_Entry = tuple[Any, str, Any, type, dict[str, Any]]


def _entry(a: Any) -> _Entry | None:
    """One attribute value of one valid scalar, read; None otherwise."""
    if type(a) is not dict or len(a) != 1:
        return None
    ((kind, x),) = a.items()
    tx = type(x)
    if tx is str:
        if len(x) > MAX_ATTRIBUTE_VALUE_LENGTH or kind not in ("string", "version"):
            return None
    elif not ((tx is int and kind == "int" and -_INT64 <= x < _INT64) or (tx is bool and kind == "bool")):
        return None
    return a, kind, x, tx, {kind: x}


# A read attributes map: its copy, the types of its numeric values, its content, its conversion error
# for CEL, and (read from another map, see _attributes_like) the names whose values differ from it.
_Read = tuple[dict[str, Any], tuple[tuple[str, type], ...], tuple[Any, ...], str | None, tuple[str, ...]]


def _attributes(v: Any, entries: dict[int, _Entry]) -> _Read | None:
    """An attributes map whose every entry is one valid scalar, read in one pass; None otherwise.

    Returns its copy, the types of its numeric values (for :meth:`_Seen.same`), its content (the
    key to intern it by) and its conversion error for CEL (the first version that does not parse).
    Each entry's value is read once per input value (``entries``: the decoder gives equal values
    one object, so maps that differ in a UUID read only that anew); the copies share its copy.
    """
    if type(v) is not dict or len(v) > MAX_ATTRIBUTES_AND_CAPACITIES:
        return None
    out: dict[str, Any] = {}
    numeric: list[tuple[str, type]] = []
    key: list[Any] = ["a"]
    error: str | None = None
    for name, a in v.items():
        if type(name) is not str or len(name) > MAX_NAME_LENGTH:
            return None
        e = entries.get(id(a))
        if e is None or e[0] is not a:
            e = _entry(a)
            if e is None:
                return None
            if len(entries) >= _ENTRIES_LIMIT:  # values not shared (another decoder): a bounded table
                entries.clear()
            entries[id(a)] = e
        _, kind, x, tx, copy = e
        if tx is not str:
            numeric.append((name, tx))
        elif error is None and kind == "version":
            error = version_error(name, x)
        out[name] = copy
        key.append((name, kind, tx, x))
    return out, tuple(numeric), tuple(key), error, ()


def _attributes_like(v: dict[str, Any], like: _Seen, entries: dict[int, _Entry]) -> _Read | None:
    """:func:`_attributes` of ``v`` from a map read before (``like``, of a device of the same name), or None to read it whole.

    Where ``v`` has the same names in the same order and the very same values (the decoder shares
    equal ones) but for a few strings (a GPU's UUID), only those are read: the rest reads as it did
    in ``like``. None where anything else differs (a number, a version, a kind, a name). The last
    item returned: the names whose strings differ from ``like``'s (none: ``like``'s copy itself).
    """
    raw, key = like.raw, like.key
    if key is None or len(v) != len(raw) or tuple(v) != like.keys:
        return None
    values = tuple(v.values())
    differ = list(compress(count(), map(is_not, values, raw.values())))
    if not differ:
        return like.copy, like.numeric, key, like.error, ()
    content = list(key)
    copy = dict(like.copy)
    changed: list[str] = []
    for i in differ:
        a = values[i]
        e = entries.get(id(a))
        if e is None or e[0] is not a:
            e = _entry(a)
            if e is None:
                return None
        _, kind, x, tx, entry_copy = e
        name, old_kind, old_type, old_x = content[i + 1]
        if kind != "string" or tx is not str or old_kind != "string" or old_type is not str:
            return None  # not one string for another: the numbers' types or the versions' error may change
        if x == old_x:  # (two strings) an equal one, another object: it reads as like's
            continue
        copy[name] = entry_copy
        content[i + 1] = (name, kind, tx, x)
        changed.append(name)
    if not changed:
        return like.copy, like.numeric, key, like.error, ()
    return copy, like.numeric, tuple(content), like.error, tuple(changed)


def _quantities(v: Any, limit: int) -> dict[str, Any] | None:
    """The copy of a map of ``{"value": <plain quantity>}`` entries (capacities, counters); None otherwise."""
    if type(v) is not dict or len(v) > limit:
        return None
    out: dict[str, Any] = {}
    for name, c in v.items():
        if type(name) is not str or len(name) > MAX_NAME_LENGTH or type(c) is not dict or len(c) != 1:
            return None
        q = c.get("value")
        if q is None or not plain_quantity(q):
            return None
        out[name] = {"value": q}
    return out


def _consumptions(v: Any) -> list[dict[str, Any]] | None:
    """The copy of ``consumesCounters`` (each entry a counter set's name and plain counters); None otherwise."""
    if type(v) is not list or len(v) > MAX_CONSUMPTIONS_PER_DEVICE:
        return None
    out: list[dict[str, Any]] = []
    for cc in v:
        if type(cc) is not dict or not cc.keys() <= _CONSUMPTION_FIELDS:
            return None
        counters = _quantities(cc.get("counters"), MAX_COUNTERS_PER_SET) if cc.get("counters") is not None else {}
        if counters is None:
            return None
        cs = cc.get("counterSet")
        if cs is not None and (type(cs) is not str or len(cs) > MAX_NAME_LENGTH):
            return None
        entry: dict[str, Any] = {"counters": counters}
        if cs is not None:
            entry["counterSet"] = cs
        out.append(entry)
    return out


def read_device(m: Any, memo: DeviceMemo) -> dict[str, Any] | None:
    """The checked copy of a device of the usual shape (equal to ``objects._device``'s), or None to read it the slow way."""
    if type(m) is not dict or not m.keys() <= _FIELDS:
        return None
    name = m.get("name")
    if name is not None and (type(name) is not str or len(name) > MAX_NAME_LENGTH):
        return None
    pair = memo.by_name.get(name, _NOTHING) if name is not None else _NOTHING
    parts = _read_maps(m, name, pair[0], memo)
    if parts is None:
        return None
    attrs, caps, seen_caps = parts
    out: dict[str, Any] = {} if name is None else {"name": name}
    if m.get("attributes") is not None:
        out["attributes"] = attrs
    if m.get("capacity") is not None:
        out["capacity"] = caps
    multi = m.get("allowMultipleAllocations")
    if multi is not None:
        if type(multi) is not bool:
            return None
        out["allowMultipleAllocations"] = multi
    seen_ccs = pair[1]
    ccs_in = m.get("consumesCounters")
    if ccs_in is not None:
        got_ccs = _read_consumptions(ccs_in, seen_ccs, memo)
        if got_ccs is None:
            return None
        out["consumesCounters"], seen_ccs = got_ccs
    if name is not None and (seen_caps is not pair[0] or seen_ccs is not pair[1]):
        memo.by_name[name] = (seen_caps, seen_ccs)
    return out


def _read_maps(
    m: dict[str, Any], name: str | None, seen_caps: _Seen | None, memo: DeviceMemo
) -> tuple[dict[str, Any], dict[str, Any], _Seen | None] | None:
    """(attributes, capacity, what the name's devices had as capacity last), within the bound on both; None to decline."""
    attrs = _read_attributes(m, name, memo)
    if attrs is None:
        return None
    got_caps = _read_capacity(m, seen_caps, memo)
    if got_caps is None:
        return None
    caps, seen = got_caps
    if len(attrs) + len(caps) > MAX_ATTRIBUTES_AND_CAPACITIES:
        return None
    return attrs, caps, seen


def _read_attributes(m: dict[str, Any], name: str | None, memo: DeviceMemo) -> dict[str, Any] | None:
    """The device's attributes (the copy of an equal map read before where there is one); None to decline."""
    attrs_in = m.get("attributes")
    if type(attrs_in) is not dict:
        return None if attrs_in is not None or "attributes" in m else _EMPTY
    prev = memo.attributes
    if prev is None or (prev.raw is not attrs_in and not prev.same(attrs_in)):
        prev = memo.by_id.get(id(attrs_in))  # the same object read before (shared by the decoder)
        if prev is None or prev.raw is not attrs_in:
            prev = _read_new_attributes(attrs_in, name, memo)
            if prev is None:
                return None
        memo.attributes = prev
    if name is not None:
        memo.attributes_by_name[name] = prev
    copy: dict[str, Any] = prev.copy
    return copy


def _read_new_attributes(attrs_in: dict[str, Any], name: str | None, memo: DeviceMemo) -> _Seen | None:
    """Attributes not read before: from the last ones of a device of the same name where they differ in a few strings."""
    like = memo.attributes_by_name.get(name) if name is not None else None
    read = _attributes_like(attrs_in, like, memo.entries) if like is not None else None
    if read is None:
        read = _attributes(attrs_in, memo.entries)
    if read is None:
        return None
    copy, numeric, key, error, changed = read
    if changed and like is not None:
        # Read from like's copy, a few strings apart (a GPU's UUID): a map of its own, not
        # interned (hashing its content for the rare equal one would cost more than it saves).
        memo.errors[id(copy)] = (copy, error)
        memo.derived[id(copy)] = (copy, like.copy, changed)
        interned = copy
    else:
        interned = memo.intern(key, copy)
        if interned is copy:
            memo.errors[id(copy)] = (copy, error)
    seen = memo.by_id[id(attrs_in)] = _Seen(attrs_in, interned, numeric, key, error)
    return seen


def _read_capacity(m: dict[str, Any], seen_caps: _Seen | None, memo: DeviceMemo) -> tuple[dict[str, Any], _Seen | None] | None:
    """(the device's capacity, what its name's devices had last); None to decline."""
    caps_in = m.get("capacity")
    if type(caps_in) is not dict:
        return None if caps_in is not None or "capacity" in m else (_EMPTY, seen_caps)
    if seen_caps is not None and (seen_caps.raw is caps_in or seen_caps.same(caps_in)):
        return seen_caps.copy, seen_caps
    fresh = _quantities(caps_in, MAX_ATTRIBUTES_AND_CAPACITIES)
    if fresh is None:
        return None
    caps = memo.intern(("c", *((n, c["value"]) for n, c in fresh.items())), fresh)
    if caps is fresh:
        memo.errors[id(fresh)] = (fresh, capacity_error(fresh))
    return caps, _Seen(caps_in, caps)


def _read_consumptions(ccs_in: Any, seen_ccs: _Seen | None, memo: DeviceMemo) -> tuple[Any, _Seen] | None:
    """(the device's counter consumption, as its name's devices have it now); None to decline."""
    if seen_ccs is not None and (seen_ccs.raw is ccs_in or seen_ccs.same_consumptions(ccs_in)):
        return seen_ccs.copy, seen_ccs
    ccs = _consumptions(ccs_in)
    if ccs is None:
        return None
    key = tuple((cc.get("counterSet"), *((n, c["value"]) for n, c in cc["counters"].items())) for cc in ccs)
    ccs = memo.intern(("k", *key), ccs)
    return ccs, _Seen(ccs_in, ccs)
