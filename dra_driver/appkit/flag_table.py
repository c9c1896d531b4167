"""Declarative daemon flags: one row per flag builds the argparse parser, the env var and the settings field.

Each daemon writes its table beside its settings dataclass (``kubelet_plugin.settings``,
``controller.settings``, ``webhook.settings``); the rows every daemon shares are in
``dra_driver.appkit.flags``. A row names its flag once: the env var is the name in upper case
with ``_`` for ``-`` (``--gc-interval`` reads ``GC_INTERVAL``) unless the row spells a different
one, and the settings field is the name with ``_`` for ``-`` unless the row names another.

``FlagTable.parse`` builds the parser (an env var that is set and not empty is the flag's default),
converts each flag's string to its field's value (``Flag.value``), runs the daemon's cross-flag
``check`` (which may fill derived fields; ``fail`` exits 2 naming the flag, as argparse does) and
builds the frozen settings. The flag reference (``scripts/gen_reference.py flags``) and the chart's
tests (``tests/chart``) read the same rows.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, NoReturn, TypeVar

S = TypeVar("S")

Fail = Callable[[str], NoReturn]
"""Exit 2 with a message (``argparse.ArgumentParser.error``)."""

Values = dict[str, Any]
"""The settings fields' values by name, as a table's ``check`` sees and completes them."""

Check = Callable[[Fail, Values, Mapping[str, Any]], None]
"""A table's cross-flag checks: ``fail``, the fields' values (to complete), every flag as parsed by its dest."""


def env(name: str, default: str | None = None) -> str | None:
    """The env var's value, or ``default`` when it is unset or empty."""
    value = os.environ.get(name)
    return value if value else default


def env_name(flag: str) -> str:
    """The env var a flag reads by the rule: ``gc-interval`` -> ``GC_INTERVAL``."""
    return flag.upper().replace("-", "_")


@dataclass(frozen=True, slots=True)
class Kind:
    """How a flag's string is read (argparse's ``type``): its name in the reference, and the parser."""

    name: str
    parse: Callable[[str], Any] | None = None
    """None: the string as it is (choices are checked on the string)."""


STR = Kind("string")
INT = Kind("int", int)
FLOAT = Kind("float", float)
INT_TEXT = Kind("int")
"""An int the daemon's ``check`` reads (its own message naming the flag), not argparse."""
FLOAT_TEXT = Kind("float")
"""A float the daemon's ``check`` reads."""
BOOL = Kind("bool")
"""``true`` or ``false`` (the choices), a ``bool`` field."""


def _true(value: str) -> bool:
    return value == "true"


def _none_if_empty(value: str | None) -> str | None:
    return value or None


def _optional_path(value: str | None) -> Path | None:
    return Path(value) if value else None


def _absolute(value: str) -> Path:
    return Path(value).absolute()


as_path: Callable[[str], Path] = Path
optional: Callable[[str | None], str | None] = _none_if_empty
"""An empty value is None, as unset."""
optional_path: Callable[[str | None], Path | None] = _optional_path
absolute_path: Callable[[str], Path] = _absolute


@dataclass(frozen=True, slots=True)
class Flag:
    """One flag: ``--<name>``, its env var, how it is read, its default and help, the settings field it fills."""

    name: str
    """Without the dashes: ``gc-interval``."""
    help: str
    default: str | None = None
    """As the env var would spell it (it goes through ``kind`` too); None: unset."""
    kind: Kind = STR
    choices: tuple[str, ...] = ()
    value: Callable[[Any], Any] | None = None
    """The parsed value -> the field's (``Path``, an enum, ...); None: as parsed. A BOOL row is ``== "true"``."""
    env: str = ""
    """Only where it is not ``env_name(name)``."""
    field: str = ""
    """The settings field; default the name with ``_``; ``-`` for none (a ``check`` folds it into a derived field)."""
    required: bool = False
    """The daemon cannot start without it (its ``check`` says so); the chart must set it."""

    def __post_init__(self) -> None:
        if not self.env:
            object.__setattr__(self, "env", env_name(self.name))
        if not self.field:
            object.__setattr__(self, "field", self.name.replace("-", "_"))
        if self.kind is BOOL and not self.choices:
            object.__setattr__(self, "choices", ("true", "false"))

    @property
    def dest(self) -> str:
        """The attribute argparse sets for it."""
        return self.name.replace("-", "_")

    @property
    def option(self) -> str:
        """``--<name>``."""
        return f"--{self.name}"

    @property
    def has_field(self) -> bool:
        """Whether the row fills a settings field of its own."""
        return self.field != "-"

    def help_text(self) -> str:
        """The help argparse prints: the row's, then the env var, then whether it is required."""
        return f"{self.help} [{self.env}]" + (" (required)" if self.required else "")

    def convert(self, parsed: Any) -> Any:
        """The field's value of what argparse parsed (None stays None unless ``value`` maps it)."""
        if self.value is not None:
            return self.value(parsed)
        if self.kind is BOOL:
            return _true(parsed)
        return parsed

    def add_to(self, parser: argparse.ArgumentParser) -> None:
        """Add the flag, its default from the env var (set and not empty) or the row."""
        options: dict[str, Any] = {
            "dest": self.dest,
            "default": env(self.env, self.default),  # a string default goes through ``type`` too
            "choices": list(self.choices) or None,
            "help": self.help_text(),
        }
        if self.kind.parse is not None:
            options["type"] = self.kind.parse
        parser.add_argument(self.option, **options)


def no_check(fail: Fail, values: Values, parsed: Mapping[str, Any]) -> None:
    """A table without cross-flag checks."""


@dataclass(frozen=True, slots=True)
class FlagTable(Generic[S]):
    """A daemon's flags and the frozen settings dataclass they build."""

    daemon: str
    """Its name in the flag reference."""
    prog: str
    description: str
    settings: type[S]
    rows: tuple[Flag, ...]
    check: Check = no_check
    """The cross-flag checks, in order; may set or replace fields (``derived`` ones included)."""
    derived: tuple[str, ...] = ()
    """Settings fields no row fills: ``check`` computes them."""

    def parser(self) -> argparse.ArgumentParser:
        """The parser, defaults read from the env vars now."""
        p = argparse.ArgumentParser(prog=self.prog, description=self.description)
        for row in self.rows:
            row.add_to(p)
        return p

    def parse(self, argv: list[str] | None = None) -> S:
        """Parse flags (env vars as defaults); exit 2 with a message naming a bad value."""
        p = self.parser()
        a = p.parse_args(argv)
        parsed = {row.dest: getattr(a, row.dest) for row in self.rows}
        values: Values = {row.field: row.convert(parsed[row.dest]) for row in self.rows if row.has_field}
        self.check(p.error, values, parsed)
        return self.settings(**values)

    def field_names(self) -> set[str]:
        """Every settings field the table fills: its rows' and the derived ones."""
        return {row.field for row in self.rows if row.has_field} | set(self.derived)

    def row(self, name: str) -> Flag:
        """The row of ``--<name>``."""
        for row in self.rows:
            if row.name == name:
                return row
        raise KeyError(name)


def settings_fields(cls: type[Any]) -> set[str]:
    """A settings dataclass's field names (what a table must fill exactly)."""
    return {f.name for f in dataclasses.fields(cls)}


def rows(*groups: Iterable[Flag]) -> tuple[Flag, ...]:
    """Rows of several groups, in order (a daemon's table: shared groups and its own)."""
    return tuple(row for group in groups for row in group)
