"""Fake GPU usage (dra_driver.sources.fake_usage): the scripted workload, and the command that writes it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from dra_driver.core.usage import ProcessUsage, UsageTarget
from dra_driver.sources import fake_usage
from dra_driver.sources.fake_usage import SCRIPT_FILE, FakeUsageSource, ScriptError, decode_script, main

GIB = 1 << 30
A = UsageTarget("uid-a", "gpu-0", "GPU-0")
B = UsageTarget("uid-b", "gpu-1", "GPU-1")
M = UsageTarget("uid-c", "gpu-2-mig-1g10gb-6", "GPU-2", mig_uuid="MIG-x")


def write(d: Path, doc: object) -> None:
    (d / SCRIPT_FILE).write_text(json.dumps(doc))


def test_without_a_script_every_device_is_idle(tmp_path: Path) -> None:
    got = FakeUsageSource(tmp_path).sample([A, M], 100.0)
    assert got[A.key].utilization == 0.0
    assert got[A.key].memory_used_bytes == 0
    assert got[M.key].mig_uuid == "MIG-x"
    assert got[M.key].at == 100.0


def test_a_claim_entry_drives_its_devices_and_a_device_entry_wins(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "claims": {"uid-a": {"since": 0, "steps": [[0, 0.8, 10 * GIB]]}, "uid-b": {"since": 0, "steps": [[0, 0.3, 0]]}},
            "devices": {"gpu-1": {"since": 0, "steps": [[0, None, GIB]], "processes": [[42, 0.5, GIB]]}},
        },
    )
    got = FakeUsageSource(tmp_path).sample([A, B], 5.0)
    assert (got[A.key].utilization, got[A.key].memory_used_bytes) == (0.8, 10 * GIB)
    assert (got[B.key].utilization, got[B.key].memory_used_bytes) == (None, GIB)
    assert got[B.key].processes == (ProcessUsage(42, 0.5, GIB),)


def test_steps_take_effect_at_their_offsets(tmp_path: Path) -> None:
    write(tmp_path, {"claims": {"uid-a": {"since": 1000, "steps": [[600, 0.0, 0], [0, 0.9, GIB]]}}})
    src = FakeUsageSource(tmp_path)
    assert src.sample([A], 900.0)[A.key].utilization == 0.9  # before the first step: the first step
    assert src.sample([A], 1599.0)[A.key].utilization == 0.9
    assert src.sample([A], 1600.0)[A.key].utilization == 0.0


def test_an_edited_script_is_read_again(tmp_path: Path) -> None:
    src = FakeUsageSource(tmp_path)
    assert src.sample([A], 1.0)[A.key].utilization == 0.0
    write(tmp_path, {"claims": {"uid-a": {"since": 0, "steps": [[0, 0.7, 0], [1, 0.7, 1]]}}})
    assert src.sample([A], 2.0)[A.key].utilization == 0.7


@pytest.mark.parametrize(
    ("doc", "mentions"),
    [
        (b"{not json", "not valid JSON"),
        (b"[]", "top level"),
        (b'{"claims": []}', "claims: not an object"),
        (b'{"claims": {"u": {"steps": []}}}', "steps"),
        (b'{"claims": {"u": {"steps": [[0, 1.5, 0]]}}}', "[1]"),
        (b'{"claims": {"u": {"steps": [[0, 0.1, -1]]}}}', "byte count"),
        (b'{"claims": {"u": {"steps": [[0, 0.1]]}}}', "expected [a, b, c]"),
        (b'{"devices": {"g": {"steps": [[0, 0, 0]], "processes": [[0, 0, 0]]}}}', "not a pid"),
        (b'{"claims": {"u": {"steps": [[0, true, 0]]}}}', "not a number"),
    ],
)
def test_a_bad_script_is_refused_naming_where(doc: bytes, mentions: str) -> None:
    with pytest.raises(ScriptError, match=None) as err:
        decode_script(doc)
    assert mentions in str(err.value)


def test_a_bad_script_makes_every_device_unknown_never_idle(tmp_path: Path) -> None:
    (tmp_path / SCRIPT_FILE).write_text("{broken")
    assert FakeUsageSource(tmp_path).sample([A, B], 1.0) == {}


def run_cli(d: Path, *args: str) -> dict[str, Any]:
    parsed = fake_usage._parser().parse_args(["--state-dir", str(d), *args])
    return fake_usage.run_command(parsed, clock=lambda: 500.0)


def test_set_idle_clear_and_list(tmp_path: Path) -> None:
    run_cli(tmp_path, "set", "--claim", "uid-a", "--utilization", "0.8", "--memory", "10Gi", "--process", "7:0.8:9Gi")
    src = FakeUsageSource(tmp_path)
    got = src.sample([A], 600.0)[A.key]
    assert (got.utilization, got.memory_used_bytes) == (0.8, 10 * GIB)
    assert got.processes == (ProcessUsage(7, 0.8, 9 * GIB),)
    run_cli(tmp_path, "idle", "--claim", "uid-a")
    assert src.sample([A], 600.0)[A.key].utilization == 0.0
    run_cli(tmp_path, "set", "--device", "gpu-1", "--utilization", "unknown")
    assert src.sample([B], 600.0)[B.key].utilization is None
    listed = run_cli(tmp_path, "list")
    assert set(listed["claims"]) == {"uid-a"}
    assert set(listed["devices"]) == {"gpu-1"}
    run_cli(tmp_path, "clear", "--device", "gpu-1")
    assert src.sample([B], 600.0)[B.key].utilization == 0.0


def test_steps_command_counts_from_now(tmp_path: Path) -> None:
    run_cli(tmp_path, "steps", "--claim", "uid-a", "--step", "0:0.9:1Gi", "--step", "60:0")
    src = FakeUsageSource(tmp_path)
    assert src.sample([A], 559.0)[A.key].utilization == 0.9
    got = src.sample([A], 560.0)[A.key]
    assert (got.utilization, got.memory_used_bytes) == (0.0, 0)


@pytest.mark.parametrize(
    "args",
    [
        ["set", "--claim", "u", "--utilization", "2"],
        ["set", "--claim", "u", "--utilization", "lots"],
        ["set", "--claim", "u", "--utilization", "0.5", "--memory", "ten"],
        ["steps", "--claim", "u", "--step", "x:0.5"],
        ["steps", "--claim", "u", "--step", "5"],
        ["set", "--claim", "u", "--utilization", "0.5", "--process", "abc:0.1"],
    ],
)
def test_bad_arguments_exit_2_and_leave_the_script_alone(
    tmp_path: Path, args: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--state-dir", str(tmp_path), *args]) == 2
    assert "error:" in capsys.readouterr().err
    assert not (tmp_path / SCRIPT_FILE).exists()


def test_the_module_runs_as_a_command(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "dra_driver.sources.fake_usage", "--state-dir", str(tmp_path), "set", "--claim", "uid-a",
         "--utilization", "0.25", "--memory", "512Mi"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    doc = json.loads(out.stdout)
    assert doc["claims"]["uid-a"]["steps"][0][1:] == [0.25, 512 << 20]
    assert FakeUsageSource(tmp_path).sample([A], 1e12)[A.key].utilization == 0.25
