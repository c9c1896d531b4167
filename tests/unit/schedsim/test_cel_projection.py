"""Projections: a selector is evaluated once per distinct view of what it reads, and answers alike."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dra_driver.schedsim.cel import CelError, CelRuntimeError, DeviceView, compile_selector
from dra_driver.schedsim.cel.projection import Projector
from dra_driver.schedsim.cel.reads import reads
from dra_driver.schedsim.cel.syntax import parse
from testkit.oracle.devices import devices
from tests.differential.selectors import Grammar

DRIVER = "gpu.dra-gpu.dev"
A = f'device.attributes["{DRIVER}"]'


def answer(f: Any) -> Any:
    try:
        return f()
    except CelError as err:
        return (err.kind, err.message)


@st.composite
def selector_and_devices(draw: Any) -> tuple[str, list[dict[str, Any]]]:
    first = draw(devices(driver=DRIVER))
    expr = Grammar(draw, first).whole(draw(st.integers(0, 3)))
    others = [draw(devices(driver=DRIVER)).json for _ in range(5)]
    return expr, [first.json, *others]


@settings(max_examples=400, derandomize=True, database=None, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(selector_and_devices())
def test_a_shared_projection_gives_every_device_its_own_answer(case: tuple[str, list[dict[str, Any]]]) -> None:
    expr, devs = case
    try:
        sel = compile_selector(expr)
    except CelError:
        return
    for d in devs:
        view = DeviceView.of(d, DRIVER)
        shared = answer(lambda view=view: sel.matches_view(view))
        direct = answer(lambda d=d: sel.matches(d, driver=DRIVER))
        assert shared == direct, (expr, d)


def test_identical_gpus_share_one_evaluation() -> None:
    sel = compile_selector(f'{A}.productName == "H100" && {A}.driverVersion.compareTo(semver("570.0.0")) >= 0')
    fleet = [
        {
            "name": f"gpu-{i}",
            "attributes": {"productName": {"string": "H100"}, "driverVersion": {"version": v}, "uuid": {"string": f"GPU-{i}"}},
        }
        for i, v in enumerate(["580.95.5", "550.1.0"] * 50)
    ]
    assert [sel.matches_view(DeviceView.of(d, DRIVER)) for d in fleet] == [True, False] * 50
    assert len(sel.answers) == 2  # uuid is not read: 100 devices, two projections


@pytest.mark.parametrize(
    ("expr", "pieces", "everything"),
    [
        (f"{A}.model == 'x' && has({A}.numa)", [("attributes", DRIVER, "model"), ("attributes", DRIVER, "numa")], False),
        (
            f"cel.bind(g, {A}, g.model == 'x' && g.?numa.orValue(0) == 1)",
            [("attributes", DRIVER, "model"), ("attributes", DRIVER, "numa")],
            False,
        ),
        (f"{A}.exists(k, k == 'x')", [("attributes", DRIVER, None)], False),
        ('device.capacity["d"].memory.isInteger()', [("capacity", "d", "memory")], False),
        ("device.attributes[device.driver].x == 1", [("attributes", None, None)], False),
        ("size(device) > 0", [], True),
    ],
)
def test_the_reads_of_a_selector_are_found_statically(expr: str, pieces: list[Any], everything: bool) -> None:
    p = Projector(reads(parse(expr)))
    assert p.everything is everything
    if not everything:
        assert list(p.pieces) == pieces


def test_an_unconvertible_device_fails_every_selector_as_in_the_scheduler() -> None:
    bad = {"name": "g", "attributes": {"v": {"version": "1.2"}}}
    with pytest.raises(CelRuntimeError, match=r"^attribute v: parse semantic version: No Major.Minor.Patch elements found$"):
        compile_selector("true").matches_view(DeviceView.of(bad, DRIVER))


@settings(max_examples=300, derandomize=True, database=None, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(selector_and_devices())
def test_a_key_read_from_the_published_maps_is_the_views_key(case: tuple[str, list[dict[str, Any]]]) -> None:
    """``published_key`` (the allocator's way past the views) gives the view's key, or None where it cannot."""
    expr, devs = case
    try:
        sel = compile_selector(expr)
    except CelError:
        return
    for d in devs:
        view = DeviceView.of(d, DRIVER)
        got = sel.projector.published_key(d.get("attributes") or {}, d.get("capacity") or {}, DRIVER, view.multi)
        if got is not None:
            assert got == sel.projector.key(view), (expr, d)


def test_a_key_read_from_the_published_maps_tells_names_apart() -> None:
    p = compile_selector(f'{A}.model == "x" && device.attributes["other.dev"].model == "y"').projector
    both = {"model": {"string": "x"}, f"{DRIVER}/model": {"string": "x"}}  # one name twice: the view decides
    assert p.published_key(both, {}, DRIVER, False) is None
    bare = {"model": {"string": "x"}, "other.dev/model": {"string": "y"}}
    qualified = {f"{DRIVER}/model": {"string": "x"}, "other.dev/model": {"string": "z"}}
    assert p.published_key(bare, {}, DRIVER, False) == p.key(DeviceView.of({"attributes": bare}, DRIVER))
    assert p.published_key(bare, {}, DRIVER, False) != p.published_key(qualified, {}, DRIVER, False)
    assert p.published_key({}, {}, DRIVER, False) == p.key(DeviceView.of({}, DRIVER))  # missing reads as missing
    whole = compile_selector(f"{A}.size() > 1").projector
    assert whole.published_key(bare, {}, DRIVER, False) is None  # a whole domain: only through a view
