"""The NVIDIA Container Toolkit's CDI specs are read as JSON or YAML, and the YAML parser loads only for YAML.

``dra_driver.files.cdi_store.toolkit_device_names``: the plugin calls it once at start-up
(``kubelet_plugin.driver_userspace``); a node with no spec, or a JSON one, never loads the YAML
parser (about 0.9 MiB of the plugin's resident memory).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from structlog.testing import capture_logs

from dra_driver.core.cdi import TOOLKIT_CDI_KIND
from dra_driver.files.cdi_store import toolkit_device_names

ROOT = Path(__file__).resolve().parents[3]


def test_json_and_yaml_specs_are_both_read_and_ours_and_other_kinds_are_not(tmp_path: Path) -> None:
    etc, run = tmp_path / "etc", tmp_path / "run"
    etc.mkdir()
    run.mkdir()
    (etc / "nvidia.yaml").write_text(f"cdiVersion: 0.5.0\nkind: {TOOLKIT_CDI_KIND}\ndevices:\n- name: '0'\n- name: all\n")
    (run / "nvidia.json").write_text(json.dumps({"kind": TOOLKIT_CDI_KIND, "devices": [{"name": "GPU-1"}]}))
    (run / "k8s.gpu.example.com-claim.json").write_text(json.dumps({"kind": TOOLKIT_CDI_KIND, "devices": [{"name": "x"}]}))
    (run / "other.json").write_text(json.dumps({"kind": "vendor.com/nic", "devices": [{"name": "nic0"}]}))
    assert toolkit_device_names([etc, run, tmp_path / "absent"]) == frozenset({"0", "all", "GPU-1"})


def test_an_unreadable_spec_is_logged_and_skipped(tmp_path: Path) -> None:
    (tmp_path / "broken.yaml").write_text("devices: [unclosed\n")
    (tmp_path / "good.json").write_text(json.dumps({"kind": TOOLKIT_CDI_KIND, "devices": [{"name": "0"}]}))
    with capture_logs() as logs:
        assert toolkit_device_names([tmp_path]) == frozenset({"0"})
    assert [(e["event"], e["path"]) for e in logs] == [("toolkit_cdi_spec_unreadable", str(tmp_path / "broken.yaml"))]


def test_no_spec_or_a_json_one_loads_no_yaml_parser(tmp_path: Path) -> None:
    (tmp_path / "nvidia.json").write_text(json.dumps({"kind": TOOLKIT_CDI_KIND, "devices": [{"name": "0"}]}))
    code = (
        "import sys; from pathlib import Path; from dra_driver.files.cdi_store import toolkit_device_names; "
        f"assert toolkit_device_names([Path({str(tmp_path)!r}), Path('/nonexistent')]) == {{'0'}}; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'yaml'))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]"
