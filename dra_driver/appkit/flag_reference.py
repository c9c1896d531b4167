"""The flag reference (``docs/reference/flags.md``) as Markdown, rendered from the daemons' flag tables.

Called by ``scripts/gen_reference.py flags``, which passes the tables of ``kubelet_plugin.settings``,
``controller.settings`` and ``webhook.settings`` (this module sits below the daemons and imports none);
``tests/unit/appkit/test_flag_reference.py`` fails when the committed file differs from what it prints.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dra_driver.appkit.flag_table import FlagTable

REGENERATE = "python scripts/gen_reference.py flags"
"""The command that rewrites the committed reference."""


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;").replace("\n", " ")


def _code(text: str | None) -> str:
    return f"`{text}`" if text else "—"


def render(tables: Sequence[FlagTable[Any]]) -> str:
    """Every flag of every table: flag, env var, type, default, choices, help; one section per daemon."""
    lines = [
        "# Daemon flags",
        "",
        f"Generated from the daemons' flag tables by `{REGENERATE}`; do not edit by hand.",
        "Every flag is also its env var: a set, non-empty env var is the flag's default, and the flag",
        "given on the command line wins. The Helm chart sets the env vars.",
    ]
    for table in tables:
        lines += [
            "",
            f"## {table.daemon} (`{table.prog}`)",
            "",
            f"{table.description}.",
            "",
            "| Flag | Env | Type | Default | Choices | Help |",
            "| --- | --- | --- | --- | --- | --- |",
        ]
        for row in table.rows:
            choices = ", ".join(f"`{c}`" for c in row.choices) or "—"
            default = "(required)" if row.required else _code(row.default)
            cells = [f"`{row.option}`", f"`{row.env}`", row.kind.name, default, choices, _cell(row.help)]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
