"""Print a generated reference page: ``python scripts/gen_reference.py flags > docs/reference/flags.md``.

``flags``: every flag and env var of the three daemons, from their flag tables
(``kubelet_plugin.settings``, ``controller.settings``, ``webhook.settings``), rendered by
``dra_driver.appkit.flag_reference``. ``tests/unit/test_flag_reference.py`` runs this and fails when
the committed page differs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # this checkout's packages, whatever the venv has installed

from controller.settings import FLAGS as CONTROLLER_FLAGS  # noqa: E402 - after the path above
from dra_driver.appkit.flag_reference import render  # noqa: E402
from kubelet_plugin.settings import FLAGS as PLUGIN_FLAGS  # noqa: E402
from webhook.settings import FLAGS as WEBHOOK_FLAGS  # noqa: E402


def main() -> int:
    """Print the page asked for."""
    parser = argparse.ArgumentParser(description="print a generated reference page")
    parser.add_argument("page", choices=["flags"])
    parser.parse_args()
    sys.stdout.write(render([PLUGIN_FLAGS, CONTROLLER_FLAGS, WEBHOOK_FLAGS]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
