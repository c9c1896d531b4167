"""`dra-gpu explain` needs the `explain` extra (msgspec, lark, cel-python); the CLI's other commands do not.

The daemons' image installs `dra-gpu` without the extra. Run in a subprocess whose imports of the
extra's modules fail, as where it is not installed: the CLI still loads (no simulator module is
imported), and `explain` exits 2 with one line naming what to install.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from dra_driver.cli.explain_args import EXTRA_MODULES, missing_extra

ROOT = Path(__file__).resolve().parents[2]
_WITHOUT_EXTRA = """
import json, sys
for name in {modules!r}:
    sys.modules[name] = None  # as if not installed: import fails, find_spec says None
from dra_driver.cli.main import build_parser, main
build_parser()
loaded = sorted(m for m in sys.modules if m.startswith(("dra_driver.schedsim", "dra_driver.cli.explain_")) and sys.modules[m])
rc = main(["explain", "-f", "pod.yaml", "--slices", "slices.yaml"])
print(json.dumps({{"rc": rc, "loaded": loaded}}))
"""


def test_explain_without_the_extra_says_what_to_install_in_one_line(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _WITHOUT_EXTRA.format(modules=EXTRA_MODULES)],
        cwd=tmp_path,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out == {"rc": 2, "loaded": ["dra_driver.cli.explain_args"]}
    assert done.stderr == (
        "dra-gpu explain: needs the explain extra (missing: msgspec, lark, celpy): pip install 'dra-gpu[explain]'\n"
    )


def test_the_extra_is_installed_in_the_development_venv() -> None:
    assert missing_extra() == []
