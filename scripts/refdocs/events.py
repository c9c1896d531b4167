"""docs/reference/events.md: the Kubernetes Event reasons the daemons record and the log events worth an alert.

Called by ``scripts/gen_reference.py events``. Both are found in the daemons' code with ``ast``
(``kubelet_plugin``, ``controller``, ``webhook`` and ``dra_driver`` without its user CLI), so a
module that moves is still found:

* Event reasons: every ``Notice(reason, message, warning=...)`` (the Node Events the kubelet
  plugin records) and every ``node_event(reason=...)`` call; the reason is a string literal or a
  module-level string constant, anything else is a ``ReferenceError``. Meanings come from
  ``dra_driver.core.event_reasons``; a reason without one, or one nothing raises, is an error.
* Log events: every structlog call at warning level or above (``warning``, ``error``,
  ``exception``, ``critical``) whose first argument is the event name; ``RULE`` says why. An
  f-string name whose field is a parameter of its function (``f"{name}_failed"``) is listed once per
  string literal its callers pass (``run_daemon("plugin", ...)``: ``plugin_failed``).
"""

from __future__ import annotations

import ast
import dataclasses
import functools
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from dra_driver.core.event_reasons import EVENT_REASON_MEANINGS
from dra_driver.files.checkpoint_store import Notice
from refdocs.markdown import REPO, ReferenceError, cell, check_described, code, header, table

PACKAGES = ("kubelet_plugin", "controller", "webhook", "dra_driver")
EXCLUDED = ("dra_driver/cli",)
"""The user's command line (``dra-gpu``) prints to its user; it is not a daemon anyone alerts on."""
LEVELS = {"warning": "warning", "warn": "warning", "error": "error", "exception": "error", "critical": "critical"}
"""structlog method -> the ``level`` field of the JSON line (``exception`` logs at error, with the traceback)."""
_RANK = ("warning", "error", "critical")
RULE = (
    "Listed: every event a daemon logs at level `warning` or above (`warning`, `error`, `critical`; "
    "`log.exception` writes `error` with a traceback). At these levels something failed, was refused or "
    "runs degraded, and a person may have to act; `info` and `debug` events are the normal course of work "
    "and are left out. Events logged by the `dra-gpu` command line are left out too: it is not a daemon."
)


@dataclass(slots=True)
class EventReason:
    """One Event reason: its type (Warning, Normal) and where it is raised."""

    types: set[str] = field(default_factory=set)
    places: set[str] = field(default_factory=set)


@dataclass(slots=True)
class LogEvent:
    """One log event: its levels, the components logging it, its fields."""

    levels: set[str] = field(default_factory=set)
    components: set[str] = field(default_factory=set)
    fields: set[str] = field(default_factory=set)


@functools.cache
def _texts() -> tuple[tuple[Path, str], ...]:
    """The daemons' modules and their source text, read once."""
    out: list[tuple[Path, str]] = []
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            if not path.relative_to(REPO).as_posix().startswith(EXCLUDED):
                out.append((path, path.read_text()))
    return tuple(out)


@functools.cache
def _parse(path: Path) -> ast.Module:
    return ast.parse(dict(_texts())[path], str(path.relative_to(REPO)))


def _sources(*needles: str) -> Iterator[tuple[Path, ast.Module]]:
    """The daemons' modules whose text holds one of ``needles`` (parsing all of them takes seconds), parsed."""
    for path, text in _texts():
        if any(n in text for n in needles):
            yield path, _parse(path)


def component(path: Path) -> str:
    """Who logs or raises it: a daemon's package, or the shared ``dra_driver.<part>``."""
    parts = path.relative_to(REPO).parts
    names = {"kubelet_plugin": "kubelet plugin", "controller": "controller", "webhook": "webhook"}
    return names.get(parts[0], ".".join(parts[:2]))


def _constants(tree: ast.Module) -> dict[str, str]:
    """The module's top-level ``NAME = "text"`` assignments."""
    out: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            out.update({t.id: node.value.value for t in node.targets if isinstance(t, ast.Name)})
    return out


def _callee(node: ast.Call) -> str:
    func = node.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""


def _reason_arg(node: ast.Call) -> ast.expr | None:
    if _callee(node) == "Notice":
        return node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "reason"), None)
    if _callee(node) == "node_event":
        return next((k.value for k in node.keywords if k.arg == "reason"), None)
    return None


def _event_type(node: ast.Call) -> str:
    default = next(f.default for f in dataclasses.fields(Notice) if f.name == "warning")
    arg = node.args[2] if len(node.args) > 2 else next((k.value for k in node.keywords if k.arg == "warning"), None)
    if arg is None:
        return "Warning" if default else "Normal"
    if isinstance(arg, ast.Constant) and isinstance(arg.value, bool):
        return "Warning" if arg.value else "Normal"
    return "Warning or Normal"


def event_reasons() -> dict[str, EventReason]:
    """Every Event reason raised in the daemons' code."""
    out: dict[str, EventReason] = {}
    for path, tree in _sources("Notice(", "node_event("):
        constants = _constants(tree)
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call) or (arg := _reason_arg(node)) is None:
                continue
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                reason = arg.value
            elif isinstance(arg, ast.Name) and arg.id in constants:
                reason = constants[arg.id]
            elif _callee(node) == "node_event" and isinstance(arg, ast.Attribute) and arg.attr == "reason":
                continue  # passes on a Notice's reason, found where the Notice is made
            else:
                where = f"{path.relative_to(REPO)}:{node.lineno}"
                raise ReferenceError(f"{where}: an Event reason that is not a string literal or module constant")
            entry = out.setdefault(reason, EventReason())
            entry.types.add(_event_type(node))
            entry.places.add(component(path))
    return out


def _event_name(arg: ast.expr) -> str | None:
    """The event name of a log call's first argument (``<name>`` for an f-string's fields), None if not one."""
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        text = arg.value
    elif isinstance(arg, ast.JoinedStr):
        text = "".join(
            str(v.value) if isinstance(v, ast.Constant) else f"<{ast.unparse(v.value)}>"
            for v in arg.values
            if isinstance(v, ast.Constant | ast.FormattedValue)
        )
    else:
        return None
    return text if text and all(c.islower() or c.isdigit() or c in "_<>" for c in text) else None


def _levels(func: ast.expr) -> list[str]:
    if isinstance(func, ast.IfExp):  # (log.error if bad else log.info)("event", ...)
        return [*_levels(func.body), *_levels(func.orelse)]
    if isinstance(func, ast.Attribute) and func.attr in LEVELS:
        return [LEVELS[func.attr]]
    return []


def _enclosing_params(tree: ast.Module) -> dict[int, tuple[str, list[str]]]:
    """Each call node's id -> (the innermost function it is in, that function's parameter names)."""
    out: dict[int, tuple[str, list[str]]] = {}
    stack: list[tuple[ast.AST, tuple[str, list[str]] | None]] = [(tree, None)]
    while stack:
        node, where = stack.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            where = (node.name, [a.arg for a in (*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs)])
        elif isinstance(node, ast.Call) and where is not None:
            out[id(node)] = where
        stack.extend((child, where) for child in ast.iter_child_nodes(node))
    return out


def _arguments(function: str, param: str, index: int) -> list[str]:
    """The string literals passed as ``param`` (position ``index``) wherever ``function`` is called."""
    found: set[str] = set()
    for _, tree in _sources(f"{function}("):
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and _callee(node) == function:
                arg = (
                    node.args[index] if len(node.args) > index else next((k.value for k in node.keywords if k.arg == param), None)
                )
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    found.add(arg.value)
    return sorted(found)


def _expand(name: str, where: tuple[str, list[str]] | None) -> list[str]:
    """An f-string event whose one field is a parameter of its function: one name per literal the callers pass."""
    if where is None or name.count("<") != 1:
        return [name]
    function, params = where
    param = name[name.index("<") + 1 : name.index(">")]
    if param not in params:
        return [name]
    values = _arguments(function, param, params.index(param))
    return [name.replace(f"<{param}>", v) for v in values] or [name]


def log_events() -> dict[str, LogEvent]:
    """Every event logged at warning or above in the daemons' modules that use structlog."""
    out: dict[str, LogEvent] = {}
    for path, tree in _sources("structlog"):
        if "structlog" not in {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}:
            continue
        enclosing = _enclosing_params(tree)
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call) or not node.args or not (levels := _levels(node.func)):
                continue
            name = _event_name(node.args[0])
            if name is None:
                continue
            for expanded in _expand(name, enclosing.get(id(node))):
                entry = out.setdefault(expanded, LogEvent())
                entry.levels.update(levels)
                entry.components.add(component(path))
                entry.fields.update(k.arg for k in node.keywords if k.arg is not None)
    return out


def _reason_rows() -> list[tuple[str, str, str, str]]:
    reasons = event_reasons()
    table_path = "dra_driver/core/event_reasons.py"
    check_described(reasons, EVENT_REASON_MEANINGS, table_path=table_path, what="Event reasons", done="raises")
    return [
        (code(r), " or ".join(sorted(reasons[r].types)), ", ".join(sorted(reasons[r].places)), cell(EVENT_REASON_MEANINGS[r]))
        for r in sorted(reasons)
    ]


def _log_rows() -> list[tuple[str, str, str, str]]:
    events = log_events()
    return [
        (
            code(name),
            ", ".join(level for level in _RANK if level in e.levels),
            ", ".join(sorted(e.components)),
            ", ".join(code(f) for f in sorted(e.fields)) or "—",
        )
        for name, e in sorted(events.items())
    ]


def render() -> str:
    """The page."""
    intro = (
        "What the daemons tell a platform team without being asked: Kubernetes Events on the Node, and "
        "log lines. Logs are JSON lines on stderr, one event per line: `event` (the name below), `level`, "
        "`timestamp` and the event's fields."
    )
    return (
        header("Events and log events", "events", intro)
        + "\n## Kubernetes Events\n\nRecorded by the kubelet plugin on its Node (namespace `default`, "
        "`kubectl get events -A --field-selector involvedObject.kind=Node`), each with a message saying "
        "what happened to what. `Raised in`: the package whose code raises it.\n\n"
        + table(("Reason", "Type", "Raised in", "Meaning"), _reason_rows())
        + f"\n## Log events\n\n{RULE} `Logged by`: the package whose code logs it (`dra_driver.*` is shared by the "
        "daemons). `Fields`: the keys the call sites add besides those bound to the logger (`claim_uid`, "
        "`device`, ...).\n\n" + table(("Event", "Level", "Logged by", "Fields"), _log_rows())
    )
