"""The committed pages of docs/reference/ are what scripts/gen_reference.py renders from the code now.

A page that differs fails naming the command that regenerates it. Also: the generator refuses a
chart value without a description, and an attribute, Event reason or metric set it cannot document.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from dra_driver.core.attribute_docs import ATTRIBUTE_MEANINGS
from dra_driver.core.event_reasons import EVENT_REASON_MEANINGS

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "scripts"))

import gen_reference  # noqa: E402 - scripts/ is not a package
from refdocs import attributes, chart_values, events, metrics  # noqa: E402
from refdocs.markdown import ReferenceError  # noqa: E402


@pytest.mark.parametrize("name", sorted(gen_reference.PAGES))
def test_committed_page_is_what_the_generator_renders(name: str) -> None:
    page = gen_reference.PAGES[name]
    path = REPO / "docs" / "reference" / page.filename
    assert path.exists(), f"docs/reference/{page.filename} is missing: run 'python scripts/gen_reference.py {name}'"
    assert path.read_text() == page.render(), (
        f"docs/reference/{page.filename} is stale: run 'python scripts/gen_reference.py {name}' (or 'make reference')"
    )


def test_every_page_has_rows() -> None:
    for name, page in gen_reference.PAGES.items():
        assert gen_reference.table_rows(page.render()) > 0, name


def test_a_chart_value_without_description_is_refused() -> None:
    node = {"properties": {"x": {"type": "object", "properties": {"y": {"type": "string"}}}}}
    with pytest.raises(ReferenceError, match=r"chart value x\.y has no description"):
        list(chart_values._walk(node["properties"]["x"], ["x"], {}, False))


def test_chart_values_list_list_items_and_defaults() -> None:
    rows = {r.path: r for s in chart_values.sections() for r in s.rows}
    assert rows["driverName"].default == '`"gpu.dra-gpu.dev"`'
    assert rows["nodePools[].name"].default == "—"
    assert "metrics.port.kubeletPlugin" in rows


def test_an_attribute_without_meaning_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(attributes, "ATTRIBUTE_MEANINGS", {k: v for k, v in ATTRIBUTE_MEANINGS.items() if k != "uuid"})
    with pytest.raises(ReferenceError, match=r"without a meaning.*uuid"):
        attributes.render()


def test_attributes_seen_on_the_right_devices() -> None:
    attrs, caps = attributes.observe()
    assert attrs["profile"].kinds == {"MIG (static)", "MIG (dynamic)"}
    assert "MIG (dynamic)" not in attrs["uuid"].kinds  # carved at prepare: no MIG UUID yet
    assert caps["computeShare"].kinds == {"GPU shared by capacity"}


def test_an_event_reason_without_meaning_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    meanings = {k: v for k, v in EVENT_REASON_MEANINGS.items() if k != "GpuUnhealthy"}
    monkeypatch.setattr(events, "EVENT_REASON_MEANINGS", meanings)
    with pytest.raises(ReferenceError, match=r"without a meaning.*GpuUnhealthy"):
        events.render()


def test_event_types_and_expanded_log_names() -> None:
    reasons = events.event_reasons()
    assert reasons["GpuHealthy"].types == {"Normal"}
    assert reasons["DriverUserspaceMissing"].types == {"Warning"}  # a module constant, resolved
    logged = events.log_events()
    assert {"plugin_failed", "controller_failed", "webhook_failed"} <= set(logged)
    assert logged["checkpoint_notice"].levels == {"error"}  # (log.error if warning else log.info)(...)


def test_a_metric_set_a_daemon_imports_but_the_page_misses_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    builders = {**metrics.BUILDERS, "webhook": {}}
    monkeypatch.setattr(metrics, "BUILDERS", builders)
    with pytest.raises(ReferenceError, match="webhook imports metric sets WebhookMetrics"):
        metrics.render()
