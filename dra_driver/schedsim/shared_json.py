"""Decodes a JSON list of ResourceSlices with each repeated part decoded once and shared.

Called by ``dra-gpu explain`` for a slices file (``dra_driver.cli.explain.load_objects``) and for
the API server's pages of ResourceSlices (the CLI hands :meth:`SharedDecoder.decode` to
``dra_driver.kube.explain_api``, which imports nothing of the simulator). A large cluster's
slices repeat themselves: every node of one kind publishes devices of the same names whose
capacity, counter consumption and most attributes are the same bytes, and only a few values
(a GPU's UUID, the node's name) differ. :class:`SharedDecoder` reads the list with ``msgspec``
down to each device's fields, kept as raw JSON (in one pass where the list has the usual
layout), and decodes each distinct field text once with the standard ``json`` module: equal
texts give one shared object (never to be changed in place).
The result equals what ``json.loads`` gives for the same bytes; where the fast reading does not
apply (not one JSON object, not UTF-8, a syntax ``msgspec`` refuses, another layout, nesting as
deep as ``json.loads`` refuses) it returns None and the caller decodes the usual way, so errors
read as before. Pure: bytes in, objects out.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import msgspec

__all__ = ["SharedDecoder"]

_Fields = dict[str, msgspec.Raw]
# The usual layout in one pass: the list's items, each item's fields (its spec, its metadata), and
# the spec's fields (devices, shared counters, ...) down to each device's (and each map's) fields,
# kept raw; strings, integers, booleans and nulls above them decoded as they are. Anything else
# (a float, a list of anything but objects above the fields kept raw) takes the reading field by field.
_Value = list[_Fields] | _Fields | str | int | bool | None
_Object = dict[str, _Value]
_Top = dict[str, list[dict[str, _Object | str | int | bool | None]] | _Object | str | int | bool | None]
_JSON_SPACE = b" \t\r\n"
_FAILURES = (msgspec.DecodeError, msgspec.ValidationError, ValueError, RecursionError)
_JSON = json.JSONDecoder()  # what json.loads uses: the same values
# A part with this many brackets may be nested deep enough for the depth to matter: ``json.loads``
# of the whole text fails (RecursionError) where the part, decoded on its own, is less deep by the
# objects and lists that hold it (at most _HOLDERS in the layouts read here). Such a part is
# decoded inside as many lists, so it fails wherever the whole would (and the caller reads the
# text the usual way); parts below the mark are too shallow for any depth limit.
_DEEP_MARK = 256
_HOLDERS = 8


class SharedDecoder:
    """Decodes lists of slices, sharing equal field values between devices, slices and calls (pages of one list)."""

    __slots__ = ("_fields", "_objects_decoder", "_parts", "_top")

    def __init__(self) -> None:
        self._parts: dict[bytes, Any] = {}  # a field's JSON text -> its value, decoded once
        self._top = msgspec.json.Decoder(_Top)
        self._fields = msgspec.json.Decoder(_Fields)
        self._objects_decoder = msgspec.json.Decoder(list[_Fields])

    def decode(self, data: bytes) -> Any:
        """The JSON value of ``data`` (one object, as ``json.loads`` reads it), or None where the fast reading does not apply.

        Each item of the object's ``items`` list is read field by field: its ``spec`` likewise, and
        the spec's ``devices`` device by device; each device field and the spec's ``sharedCounters``
        are decoded once per distinct text (and shared), everything else on its own. The usual
        layout is read so in one pass (``_Top``); another, level by level.
        """
        if data.lstrip(_JSON_SPACE)[:1] != b"{" or not _utf8(data):
            return None
        try:
            return self._typed(self._top.decode(data))  # the usual layout, read in one pass
        except _FAILURES:
            pass  # another layout (or an error): level by level, as before
        try:
            top = self._fields.decode(data)
            out: dict[str, Any] = {}
            for key, raw in top.items():
                out[key] = self._list(raw) if key == "items" else _plain(raw)
        except _FAILURES:
            return None
        return out

    def _typed(self, top: dict[str, Any]) -> dict[str, Any]:
        """The value of the usual layout read in one pass (see ``_Top``): each part as :meth:`decode` gives it."""
        out: dict[str, Any] = {}
        for key, v in top.items():
            if key == "items" and type(v) is list:
                out[key] = [
                    {k: self._typed_spec(x) if k == "spec" and type(x) is dict else _value(x) for k, x in item.items()}
                    for item in v
                ]
            else:
                out[key] = _value(v)
        return out

    def _typed_spec(self, spec: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, v in spec.items():
            if key == "devices" and type(v) is list:
                out[key] = self._shared_devices(v)
            elif key == "sharedCounters" and type(v) is list:
                out[key] = [{k: self._part(bytes(x)) for k, x in cs.items()} for cs in v]
            else:
                out[key] = _value(v)
        return out

    def _list(self, raw: msgspec.Raw) -> Any:
        return self._objects(
            raw, lambda items: [{k: self._spec(v) if k == "spec" else _plain(v) for k, v in item.items()} for item in items]
        )

    def _objects(self, raw: msgspec.Raw, build: Callable[[list[_Fields]], Any]) -> Any:
        """``build`` of a list of objects read field by field; anything else (no list, an item that is no object) as it is."""
        text = bytes(raw)
        if text[:1] != b"[":
            return _decoded(text)
        try:
            objects = self._objects_decoder.decode(text)
        except msgspec.ValidationError:  # an item that is no object
            return _decoded(text)
        return build(objects)

    def _spec(self, raw: msgspec.Raw) -> Any:
        text = bytes(raw)
        if text[:1] != b"{":
            return _decoded(text)
        out: dict[str, Any] = {}
        for key, v in self._fields.decode(text).items():
            if key == "devices":
                out[key] = self._device_list(v)
            elif key == "sharedCounters":
                out[key] = self._part(bytes(v))
            else:
                out[key] = _plain(v)
        return out

    def _part(self, field: bytes) -> Any:
        """The value of one field's JSON text, decoded the first time it is seen."""
        got = self._parts.get(field)
        if got is None:
            got = self._parts[field] = _decoded(field)
        return got

    def _device_list(self, raw: msgspec.Raw) -> Any:
        return self._objects(raw, self._shared_devices)

    def _shared_devices(self, devices: list[_Fields]) -> list[dict[str, Any]]:
        """Each device's fields decoded once per distinct text (attributes entry by entry)."""
        parts = self._parts
        out = []
        for d in devices:
            dev: dict[str, Any] = {}
            for key, v in d.items():
                field = bytes(v)
                got = parts.get(field)
                if got is None:
                    got = parts[field] = self._map(field) if key == "attributes" else _decoded(field)
                dev[key] = got
            out.append(dev)
        return out

    def _map(self, field: bytes) -> Any:
        """An object whose entries are decoded once per distinct text (a device's attributes differ in a value or two)."""
        if field[:1] != b"{":
            return _decoded(field)
        parts = self._parts
        out: dict[str, Any] = {}
        for k, v in self._fields.decode(field).items():  # (what _part does, inline: a map has many entries)
            text = bytes(v)
            got = parts.get(text)
            if got is None:
                got = parts[text] = _decoded(text)
            out[k] = got
        return out


def _value(v: Any) -> Any:
    """A part of the layout read in one pass as JSON reads it: its maps and lists rebuilt, raw fields decoded on their own."""
    t = type(v)
    if t is dict:
        return {k: _value(x) for k, x in v.items()}
    if t is list:
        return [_value(x) for x in v]
    if t is msgspec.Raw:
        return _plain(v)
    return v  # a string, integer, boolean or null, as json reads it


def _plain(raw: msgspec.Raw) -> Any:
    """A field decoded on its own (not shared)."""
    return _decoded(bytes(raw))


def _decoded(text: bytes) -> Any:
    """The value of one part's JSON text (UTF-8, as checked), as ``json.loads`` reads it within the whole text.

    A part deep enough for the depth to matter (see ``_DEEP_MARK``) is decoded as deep as it lies
    there, or deeper: where ``json.loads`` of the whole text would exceed the recursion limit, so
    does this (a RecursionError, and the caller decodes the text the usual way).
    """
    if len(text) < 2 * _DEEP_MARK or text.count(b"[") + text.count(b"{") < _DEEP_MARK:  # (each bracket is closed)
        return _JSON.decode(text.decode())
    value = _JSON.decode("[" * _HOLDERS + text.decode() + "]" * _HOLDERS)
    for _ in range(_HOLDERS):
        value = value[0]
    return value


def _utf8(data: bytes) -> bool:
    """``data`` is UTF-8 text (as the file or body would have to be to be read at all)."""
    if data.isascii():
        return True
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True
