"""The daemons' flag tables (dra_driver.appkit.flag_table): each fills its settings dataclass exactly, names each env once."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import pytest

from controller.settings import FLAGS as CONTROLLER_FLAGS
from controller.settings import ControllerSettings
from dra_driver.appkit.flag_table import BOOL, FLOAT, FLOAT_TEXT, INT, INT_TEXT, Flag, FlagTable, env_name, settings_fields
from dra_driver.appkit.flags import COMMON_FLAGS, metrics_flags
from kubelet_plugin.settings import FLAGS as PLUGIN_FLAGS
from kubelet_plugin.settings import Settings
from webhook.settings import FLAGS as WEBHOOK_FLAGS
from webhook.settings import WebhookSettings

TABLES: dict[str, FlagTable[Any]] = {"plugin": PLUGIN_FLAGS, "controller": CONTROLLER_FLAGS, "webhook": WEBHOOK_FLAGS}

ENV_EXCEPTIONS = {"mig": "MIG_STRATEGY"}
"""The only flags whose env var is not their name by the rule (it predates the rule; the chart sets it)."""


@pytest.mark.parametrize(
    ("table", "settings"),
    [(PLUGIN_FLAGS, Settings), (CONTROLLER_FLAGS, ControllerSettings), (WEBHOOK_FLAGS, WebhookSettings)],
    ids=["plugin", "controller", "webhook"],
)
def test_a_table_fills_exactly_its_settings_fields(table: FlagTable[Any], settings: type[Any]) -> None:
    assert table.settings is settings
    assert table.field_names() == settings_fields(settings)
    filled = [row.field for row in table.rows if row.has_field]
    assert len(filled) == len(set(filled)), "two rows fill one field"


@pytest.mark.parametrize("daemon", sorted(TABLES))
def test_flag_and_env_names_are_unique_and_follow_the_rule(daemon: str) -> None:
    rows = TABLES[daemon].rows
    assert len({r.name for r in rows}) == len(rows)
    assert len({r.env for r in rows}) == len(rows)
    differing = {r.name: r.env for r in rows if r.env != env_name(r.name)}
    assert differing == {k: v for k, v in ENV_EXCEPTIONS.items() if k in {r.name for r in rows}}


@pytest.mark.parametrize("daemon", sorted(TABLES))
def test_every_default_is_a_value_its_flag_accepts(daemon: str) -> None:
    for row in TABLES[daemon].rows:
        if row.default is None:
            continue
        if row.choices:
            assert row.default in row.choices, row.name
        if row.kind in (INT, INT_TEXT):
            int(row.default)
        if row.kind in (FLOAT, FLOAT_TEXT):
            assert math.isfinite(float(row.default)), row.name
        if row.kind is BOOL:
            assert row.choices == ("true", "false")
        assert f"[{row.env}]" in row.help_text()


def test_the_plugin_and_the_controller_share_the_common_rows_themselves() -> None:
    for row in COMMON_FLAGS:
        assert row in PLUGIN_FLAGS.rows
        assert row in CONTROLLER_FLAGS.rows
    for daemon, table in TABLES.items():
        ports = {r.name: r for r in metrics_flags(daemon)}
        assert {r.name: r for r in table.rows if r.name in ports} == ports


@dataclass(frozen=True, slots=True)
class _Toy:
    name: str
    count: int
    on: bool
    wait_s: float
    where: str | None
    twice: int


def _toy_check(fail: Any, values: dict[str, Any], parsed: Any) -> None:
    if values["count"] < 0:
        fail(f"--count: {values['count']} is negative")
    values["twice"] = 2 * values["count"]


TOY = FlagTable(
    daemon="toy",
    prog="toy",
    description="a toy daemon",
    settings=_Toy,
    rows=(
        Flag("name", "its name", "anon"),
        Flag("count", "how many", "3", kind=INT),
        Flag("on", "whether", "false", kind=BOOL),
        Flag("wait", "seconds", "1.5", kind=FLOAT, field="wait_s", env="TOY_WAIT"),
        Flag("where", "a place"),
    ),
    check=_toy_check,
    derived=("twice",),
)


def test_a_row_reads_its_env_var_unless_empty_and_the_flag_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("NAME", "COUNT", "ON", "TOY_WAIT", "WHERE", "WAIT"):
        monkeypatch.delenv(var, raising=False)
    assert TOY.parse([]) == _Toy("anon", 3, False, 1.5, None, 6)
    monkeypatch.setenv("COUNT", "5")
    monkeypatch.setenv("ON", "true")
    monkeypatch.setenv("TOY_WAIT", "2")
    monkeypatch.setenv("NAME", "")  # empty: unset
    assert TOY.parse([]) == _Toy("anon", 5, True, 2.0, None, 10)
    assert TOY.parse(["--count", "1", "--name", "x", "--where", "/p"]) == _Toy("x", 1, True, 2.0, "/p", 2)


def test_a_bad_value_exits_2_naming_the_flag(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COUNT", raising=False)
    monkeypatch.delenv("ON", raising=False)
    for argv, says in ((["--count", "x"], "--count: invalid int value"), (["--on", "yes"], "--on: invalid choice"),
                       (["--count", "-1"], "--count: -1 is negative")):  # fmt: skip
        with pytest.raises(SystemExit) as exc:
            TOY.parse(argv)
        assert exc.value.code == 2
        assert says in capsys.readouterr().err


def test_help_names_each_env_var_and_what_is_required() -> None:
    text = " ".join(WEBHOOK_FLAGS.parser().format_help().split())
    assert "PEM certificate (chain) to serve [TLS_CERT_FILE] (required)" in text
    assert "[MIG_STRATEGY]" in PLUGIN_FLAGS.parser().format_help()


def test_mig_profiles_are_read_for_dynamic_mig_only(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("MIG_PROFILES", "MIG_STRATEGY", "SHARING", "FAKE_GPUS"):
        monkeypatch.delenv(var, raising=False)
    base = ["--node-name", "n1", "--fake-gpus", "h100x8"]
    assert PLUGIN_FLAGS.parse([*base, "--mig", "dynamic", "--mig-profiles", "1g, 7g.80gb"]).mig_profiles == ("1g", "7g.80gb")
    assert PLUGIN_FLAGS.parse([*base, "--mig", "dynamic"]).mig_profiles == ()
    monkeypatch.setenv("MIG_PROFILES", "3g")
    assert PLUGIN_FLAGS.parse([*base, "--mig", "dynamic"]).mig_profiles == ("3g",)
    for argv, says in (
        (["--mig", "static"], "--mig-profiles applies to --mig dynamic only (this is --mig static)"),
        (["--mig", "dynamic", "--mig-profiles", "1g;x"], "--mig-profiles: '1g;x' is neither a MIG profile name"),
    ):
        with pytest.raises(SystemExit) as exc:
            PLUGIN_FLAGS.parse([*base, *argv])
        assert exc.value.code == 2
        assert says in capsys.readouterr().err
