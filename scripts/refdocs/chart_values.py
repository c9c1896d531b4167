"""docs/reference/chart-values.md: every value of the Helm chart, from values.schema.json and values.yaml.

Called by ``scripts/gen_reference.py values``. A row per value the schema declares: an object with
``properties`` is walked into (its description heads its section), an array whose items have
``properties`` gets a row of its own and one per item field (``nodePools[].name``). The type comes
from the schema (``type``, ``enum``, ``const``, ``anyOf``, ranges), the default from values.yaml
(``—`` for a list item's fields), the description from the schema: a value without one is an error naming it (``ReferenceError``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from refdocs.markdown import REPO, ReferenceError, cell, code, header, table

CHART = REPO / "deploy" / "helm" / "dra-gpu"
SCHEMA = CHART / "values.schema.json"
VALUES = CHART / "values.yaml"


@dataclass(frozen=True, slots=True)
class ValueRow:
    """One chart value: its dotted path, type, default in values.yaml and description."""

    path: str
    type: str
    default: str
    description: str


@dataclass(frozen=True, slots=True)
class Section:
    """The values under one top-level key (or the top-level scalars), with the key's description."""

    title: str
    description: str
    rows: tuple[ValueRow, ...]


def _json(value: Any) -> str:
    return json.dumps(value, separators=(", ", ": "))


def _range(low: object, high: object) -> str:
    """`` (1-65535)``, `` (≥ 0)``, `` (≤ 30)`` or nothing."""
    if low is not None and high is not None:
        return f" ({low}-{high})"
    if low is not None or high is not None:
        return f" (≥ {low})" if low is not None else f" (≤ {high})"
    return ""


def _type(node: Mapping[str, Any]) -> str:
    """The schema node's type in words: ``integer (1-65535)``, ``one of `a`, `b` ``, ``integer or -1``."""
    if "enum" in node:
        return "one of " + ", ".join(code(_json(v)) for v in node["enum"])
    if "const" in node:
        return code(_json(node["const"]))
    if "anyOf" in node:
        return " or ".join(_type(alt) for alt in node["anyOf"])
    kind = node.get("type", "any")
    kind = " or ".join(kind) if isinstance(kind, list) else str(kind)
    items = node.get("items")
    if kind == "array" and isinstance(items, Mapping) and "properties" not in items and _type(items) != "any":
        return f"array of {_type(items)}"
    return kind + _range(node.get("minimum"), node.get("maximum"))


def _default(values: Any, parts: list[str]) -> str:
    node = values
    for part in parts:
        if not isinstance(node, Mapping) or part not in node:
            return "unset"
        node = node[part]
    return code(_json(node))


def _walk(node: Mapping[str, Any], path: list[str], defaults: Any, in_items: bool) -> Iterator[ValueRow]:
    """The rows under ``node``; ``in_items``: inside an array's items, where values.yaml sets no default."""
    props = node.get("properties")
    if isinstance(props, Mapping) and props:
        for key, child in props.items():
            yield from _walk(child, [*path, key], defaults, in_items)
        return
    dotted = ".".join(path)
    description = str(node.get("description", "")).strip()
    if not description:
        raise ReferenceError(f"chart value {dotted} has no description in {SCHEMA.relative_to(REPO)}")
    default = "—" if in_items else _default(defaults, path)
    yield ValueRow(dotted, _type(node), default, description)
    items = node.get("items")
    if isinstance(items, Mapping) and isinstance(items.get("properties"), Mapping):
        *head, last = path
        yield from _walk(items, [*head, f"{last}[]"], defaults, True)


def sections() -> list[Section]:
    """The chart's values by top-level key; top-level values that are not objects come first, together."""
    schema = json.loads(SCHEMA.read_text())
    defaults = yaml.safe_load(VALUES.read_text())
    top: list[ValueRow] = []
    out: list[Section] = []
    for key, node in schema["properties"].items():
        rows = tuple(_walk(node, [key], defaults, False))
        if isinstance(node.get("properties"), Mapping) and node["properties"]:
            description = str(node.get("description", "")).strip()
            if not description:
                raise ReferenceError(f"chart value {key} has no description in {SCHEMA.relative_to(REPO)}")
            out.append(Section(key, description, rows))
        else:
            top.extend(rows)
    return [Section("Top-level values", "Values that are not grouped under a key.", tuple(top)), *out]


def render() -> str:
    """The page."""
    parts = [
        header(
            "Chart values",
            "values",
            "Every value of the `dra-gpu` Helm chart (`deploy/helm/dra-gpu`), from the chart's "
            "`values.schema.json` (type, description) and `values.yaml` (default). Helm validates "
            "the values against that schema, so a value not listed here is refused. Paths with `[]` "
            "are fields of each item of a list.",
        )
    ]
    for section in sections():
        parts.append(f"\n## {section.title}\n\n{cell(section.description)}\n\n")
        rows = [(code(r.path), cell(r.type), r.default, cell(r.description)) for r in section.rows]
        parts.append(table(("Value", "Type", "Default", "Description"), rows))
    return "".join(parts)
