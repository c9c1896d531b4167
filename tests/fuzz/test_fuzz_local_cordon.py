"""Fuzz the Node annotation a local cordon reads (``dra_driver.core.local_cordon``).

Where DeviceTaintRules are not served, ``dra-gpu cordon`` records cordons in the Node annotation
``<driver>/cordoned-devices`` and the plugin (``dra_driver.appkit.local_cordon``) reads it every
interval. Anyone who may annotate the Node writes it, so it is outside input: each hostile Node must
give a Withholding and never an exception, and whatever is not a plain record of device name ->
reason withholds every device (fail closed), never nothing.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from typing import Any

from dra_driver.core.local_cordon import MAX_ENTRIES, Withholding, annotation_key
from tests.fuzz import harness

DRIVER = "gpu.dra-gpu.dev"
KEY = annotation_key(DRIVER)


def _node(value: Any) -> dict[str, Any]:
    return {"metadata": {"name": "node-a", "resourceVersion": "7", "annotations": {KEY: value, "other": "x"}}}


def _hostile_value(rng: random.Random) -> Any:
    return rng.choice(['{"gpu-0": "fan"}', '{"gpu-0": 1}', "[1]", "{" * 3000, '{"": "x"}', 5, None, ["gpu-0"]])


def inputs(n: int, name: str) -> Iterator[Any]:
    rng = random.Random(harness.seed_for(name))
    seeds = (_node('{"gpu-0":"fan failure","gpu-3":"ECC"}'), _node(""), {"metadata": {"name": "node-a"}})
    for _ in range(n):
        yield harness.mutate(rng.choice(seeds), rng, extra=(_hostile_value,))


def _plain_record(node: Any) -> dict[str, str] | None:
    """The oracle: the cordons ``node`` plainly records ({} for none); None when it is anything else."""
    if not isinstance(node, dict):
        return None
    meta = node.get("metadata")
    if meta is None:
        return {}
    if not isinstance(meta, dict):
        return None
    notes = meta.get("annotations")
    if notes is None:
        return {}
    if not isinstance(notes, dict):
        return None
    if KEY not in notes:
        return {}
    value = notes[KEY]
    if not isinstance(value, str):
        return None
    if not value.strip():
        return {}
    try:
        doc = json.loads(value)
    except (ValueError, RecursionError):
        return None
    if not isinstance(doc, dict) or len(doc) > MAX_ENTRIES:
        return None
    if any(not k or not isinstance(v, str) for k, v in doc.items()):
        return None
    return doc


def test_a_hostile_node_withholds_what_it_plainly_records_or_everything() -> None:
    def read(node: Any) -> None:
        got = Withholding.from_node(node, DRIVER)
        want = _plain_record(node)
        if want is None:
            assert got.everything and got.problem, f"a Node that is no plain record withheld {got}"
        else:
            assert not got.everything and dict(got.cordoned) == want

    rep = harness.run("local cordon annotation", inputs(harness.budget(1200), "local-cordon-read"), read, ())
    harness.assert_clean(rep)
