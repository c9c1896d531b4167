"""docs/reference/flags.md is what scripts/gen_reference.py prints from the daemons' flag tables."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from controller.settings import FLAGS as CONTROLLER_FLAGS
from dra_driver.appkit.flag_reference import REGENERATE
from kubelet_plugin.settings import FLAGS as PLUGIN_FLAGS
from webhook.settings import FLAGS as WEBHOOK_FLAGS

ROOT = Path(__file__).resolve().parents[3]
PAGE = ROOT / "docs" / "reference" / "flags.md"


def test_the_committed_flag_reference_is_what_the_generator_prints() -> None:
    command = [sys.executable, str(ROOT / "scripts" / "gen_reference.py"), "flags", "--stdout"]
    printed = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    assert PAGE.read_text() == printed, f"docs/reference/flags.md is stale: regenerate it with `{REGENERATE}`"


def test_the_reference_names_every_flag_and_env_var_of_every_daemon() -> None:
    text = PAGE.read_text()
    for table in (PLUGIN_FLAGS, CONTROLLER_FLAGS, WEBHOOK_FLAGS):
        section = text.split(f"## {table.daemon} (")[1].split("\n## ")[0]
        for row in table.rows:
            assert f"| `{row.option}` | `{row.env}` |" in section, row.name
