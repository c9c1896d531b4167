"""The daemons' flags page (``docs/reference/flags.md``): every flag and env var of the three daemons.

From their flag tables (``kubelet_plugin.settings``, ``controller.settings``, ``webhook.settings``),
rendered by ``dra_driver.appkit.flag_reference``. Called by ``scripts/gen_reference.py``.
"""

from __future__ import annotations

from controller.settings import FLAGS as CONTROLLER_FLAGS
from dra_driver.appkit.flag_reference import render as render_tables
from kubelet_plugin.settings import FLAGS as PLUGIN_FLAGS
from webhook.settings import FLAGS as WEBHOOK_FLAGS


def render() -> str:
    """The page's Markdown."""
    return render_tables([PLUGIN_FLAGS, CONTROLLER_FLAGS, WEBHOOK_FLAGS])
