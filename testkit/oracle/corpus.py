"""The fixed corpus: every selector in ``demo/*.yaml``, the chart's DeviceClass selectors, and devices
exactly as ``dra-gpu inventory`` publishes them for each fake GPU profile (full GPUs, static and
dynamic MIG)."""

from __future__ import annotations

import functools
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
DRIVER = "gpu.dra-gpu.dev"


def _expressions(obj: Any) -> Iterator[str]:
    if isinstance(obj, dict):
        cel = obj.get("cel")
        if isinstance(cel, dict) and isinstance(cel.get("expression"), str):
            yield cel["expression"]
        for v in obj.values():
            yield from _expressions(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _expressions(v)


def demo_objects() -> list[tuple[str, dict[str, Any]]]:
    """(file name, object) for every object in demo/*.yaml."""
    out = []
    for path in sorted((ROOT / "demo").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            if isinstance(doc, dict):
                out.append((path.name, doc))
    return out


def demo_selectors() -> list[str]:
    """Every CEL selector in the demo manifests, in file order, without repeats."""
    seen: dict[str, None] = {}
    for _, obj in demo_objects():
        for e in _expressions(obj):
            seen.setdefault(e.strip(), None)
    return list(seen)


def chart_class_selectors(driver: str = DRIVER) -> list[str]:
    """The DeviceClass selectors of the Helm chart, rendered for ``driver`` (the template's printf)."""
    text = (ROOT / "deploy" / "helm" / "dra-gpu" / "templates" / "deviceclasses.yaml").read_text(encoding="utf-8")
    type_fmt = re.search(r'\$type := printf "([^"]*)" \$driver \$driver', text)
    assert type_fmt is not None, "deviceclasses.yaml: the $type printf changed; update the corpus"
    prefix = type_fmt.group(1).replace("%s", driver)
    out = [prefix + m for m in re.findall(r'printf "%s(\'[a-z]+\')" \$type', text)]
    out += [m.replace("%s", driver) for m in re.findall(r'printf "(device\.driver == \'%s\' && [^"]*)" \$driver \| quote', text)]
    assert len(out) >= 3, f"deviceclasses.yaml: expected 3 class selectors, found {out}"
    return out


@functools.cache
def inventory(profile: str, *args: str, node: str = "node-a") -> list[dict[str, Any]]:
    """The slices ``dra-gpu inventory`` prints for a fake profile (extra CLI flags in ``args``)."""
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "dra_driver.cli.main",
            "inventory",
            "--fake-gpus",
            profile,
            "--node-name",
            node,
            "-o",
            "json",
            *args,
        ],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    items: list[dict[str, Any]] = json.loads(out.stdout)["items"]
    return items


INVENTORIES: tuple[tuple[str, ...], ...] = (
    ("h100x8",),
    ("a100x8",),
    ("h200x8",),
    ("b200x8",),
    ("l4x4",),
    ("a100-80x1",),
    ("h100x8", "--mig", "static", "--fake-mig-layout", "3g.40gb,2g.20gb,1g.10gb"),
    ("a100x8", "--mig", "dynamic"),
)


def corpus_devices() -> list[dict[str, Any]]:
    """One of each distinct device the profiles publish (identical GPUs differ only in name and ids)."""
    out: dict[str, dict[str, Any]] = {}
    for spec in INVENTORIES:
        for s in inventory(spec[0], *spec[1:]):
            for d in s["spec"].get("devices") or []:
                key = json.dumps(
                    {k: v for k, v in d.get("attributes", {}).items() if k not in ("uuid", "index", "minor")}, sort_keys=True
                )
                key += json.dumps(d.get("capacity"), sort_keys=True)
                out.setdefault(key, d)
    return list(out.values())


def chart_classes(driver: str = DRIVER) -> list[dict[str, Any]]:
    """The chart's DeviceClasses (gpu, mig., shared.) as API objects."""
    names = [driver, f"mig.{driver}", f"shared.{driver}"]
    return [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": n},
            "spec": {"selectors": [{"cel": {"expression": e}}]},
        }
        for n, e in zip(names, chart_class_selectors(driver), strict=True)
    ]


def demo_workloads() -> list[tuple[str, list[dict[str, Any]]]]:
    """(label, claims in pod order) for every pod in demo/ with claims, defaulted as the API server would.

    A pod asking for an extended resource (``nvidia.com/gpu``) has no claim of its own until the
    scheduler writes one, so it is not a case here.
    """
    from dra_driver.cli.explain import workloads

    objs = [o for _, o in demo_objects()]
    out = []
    for label, claims in workloads(objs, []):
        if claims:
            out.append((label, [_defaulted(c) for c in claims]))
    return out


def _defaulted(claim: dict[str, Any]) -> dict[str, Any]:
    claim = json.loads(json.dumps(claim))
    for r in claim["spec"]["devices"]["requests"]:
        for body in [r["exactly"]] if r.get("exactly") else r.get("firstAvailable") or []:
            body.setdefault("allocationMode", "ExactCount")
            if body["allocationMode"] == "ExactCount":
                body.setdefault("count", 1)
    return claim
