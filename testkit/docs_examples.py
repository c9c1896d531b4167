"""The examples the docs show, found by parsing them: YAML objects, ``dra-gpu`` commands, links.

Nothing here lists a doc or an example: the Markdown files are README.md, docs/**/*.md and
demo/**/*.md, the manifests demo/**/*.yaml, and what they hold is read with markdown-it-py (the
CommonMark parser). Callers: tests/unit/docs/ (links, commands that need no cluster) and
e2e/test_doc_examples.py (every YAML object applied to a real API server, the commands that need one).

Conventions (docs/development/docs-conventions.md):
- a fenced ```yaml block holding ``apiVersion:`` is a complete example, applied as it is, unless
  the line before its fence is ``<!-- example: fragment -->`` (a part of an object, a config file);
- a ``dra-gpu`` command is a line of a ```console block starting with ``$ `` (the lines after it,
  up to the next ``$ ``, are its output; ``...`` elides) or any line of a ```sh/```bash block.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import yaml
from markdown_it import MarkdownIt
from markdown_it.token import Token

REPO = Path(__file__).resolve().parents[1]
FRAGMENT = re.compile(r"^\s*<!--\s*example:\s*fragment\b.*-->\s*$")
YAML_LANGS = frozenset({"yaml", "yml"})
CONSOLE_LANGS = frozenset({"console", "shell-session"})
SCRIPT_LANGS = frozenset({"sh", "bash", "shell"})
ELISIONS = frozenset({"...", "…"})
# How a doc may spell the CLI: dra-gpu, .venv/bin/dra-gpu, kubectl dra-gpu (the kubectl plugin).
_CLI = re.compile(r"^(?:\S*/)?dra-gpu$")
_SHELL_OPS = frozenset({"|", "||", "&", "&&", ";", ">", ">>", "<", ">&", "2>", "&>"})


def rel(path: Path, root: Path = REPO) -> str:
    """``path`` relative to the checkout (as messages name files); whole when it lies elsewhere."""
    return str(path.relative_to(root)) if path.is_relative_to(root) else str(path)


def markdown_files(root: Path = REPO) -> list[Path]:
    """README.md, docs/**/*.md and demo/**/*.md: every Markdown page a user reads."""
    found = [root / "README.md"] if (root / "README.md").exists() else []
    for top in ("docs", "demo"):
        found += sorted((root / top).rglob("*.md"))
    return found


NOT_MANIFESTS = ("demo/kind",)
"""Folders under demo/ whose YAML is another tool's configuration (kind's cluster config), not objects for the API server."""


def demo_manifests(root: Path = REPO) -> list[Path]:
    """demo/**/*.yaml (and .yml), except under ``NOT_MANIFESTS``."""
    skip = [root / s for s in NOT_MANIFESTS]
    return sorted(
        p
        for p in (root / "demo").rglob("*")
        if p.suffix in (".yaml", ".yml") and p.is_file() and not any(p.is_relative_to(s) for s in skip)
    )


@cache
def _tokens(path: Path) -> tuple[Token, ...]:
    return tuple(MarkdownIt("commonmark").parse(path.read_text()))


@dataclass(frozen=True)
class Fence:
    """A fenced code block: where it starts (1-based line of the opening fence), its language, its text."""

    path: Path
    line: int
    lang: str
    text: str
    fragment: bool  # the line before the fence is <!-- example: fragment -->
    file: str  # the path as messages name it (relative to the checkout)

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"


def fences(path: Path, root: Path = REPO) -> list[Fence]:
    """Every fenced block of a Markdown file, nested ones (in lists, quotes) included."""
    lines = path.read_text().splitlines()
    found = []
    for tok in _tokens(path):
        if tok.type == "fence" and tok.map is not None:
            start = tok.map[0]
            before = lines[start - 1] if start > 0 else ""
            lang = tok.info.split()[0].lower() if tok.info.strip() else ""
            found.append(Fence(path, start + 1, lang, tok.content, bool(FRAGMENT.match(before)), rel(path, root)))
    return found


def fragment_markers(path: Path) -> list[int]:
    """1-based lines holding a fragment marker (each must stand right before a fence); code blocks' lines aside."""
    code = {i + 1 for t in _tokens(path) if t.type in ("fence", "code_block") and t.map for i in range(*t.map)}
    return [i for i, line in enumerate(path.read_text().splitlines(), 1) if FRAGMENT.match(line) and i not in code]


@dataclass(frozen=True)
class YamlExample:
    """One YAML example: a Markdown fence or a demo manifest."""

    where: str
    text: str
    fragment: bool

    def objects(self) -> list[dict[str, Any]]:
        """Its documents (empty ones dropped); yaml.YAMLError when it does not parse."""
        return [d for d in yaml.safe_load_all(self.text) if d]


def yaml_examples(root: Path = REPO) -> list[YamlExample]:
    """Every ```yaml fence holding ``apiVersion:`` in the Markdown files, and every demo manifest."""
    found = [
        YamlExample(f.where, f.text, f.fragment)
        for md in markdown_files(root)
        for f in fences(md, root)
        if f.lang in YAML_LANGS and "apiVersion:" in f.text
    ]
    found += [YamlExample(rel(p, root), p.read_text(), False) for p in demo_manifests(root)]
    return found


# -- dra-gpu commands -----------------------------------------------------------------


@dataclass(frozen=True)
class ShownCommand:
    """A ``dra-gpu`` command a doc shows, and the output it shows under it."""

    where: str  # file:line of the command
    block: str  # file:line of its fence: the commands of one block run in order, in one directory
    args: tuple[str, ...]  # the words after dra-gpu, up to the first shell operator
    shell: str  # the line to run with bash, the CLI spelled plain dra-gpu (redirections kept)
    output: tuple[str, ...]  # the lines shown under it (console blocks), elisions dropped
    in_pod: bool  # run inside a pod (kubectl exec ... -- dra-gpu ...)

    @property
    def flags(self) -> list[str]:
        return [a.split("=", 1)[0] for a in self.args if a.startswith("-") and a != "-"]


def _logical_lines(text: str, first: int) -> list[tuple[int, str]]:
    """(1-based line, text) with backslash continuations joined."""
    out: list[tuple[int, str]] = []
    pending: tuple[int, str] | None = None
    for i, raw in enumerate(text.splitlines(), first):
        line = raw.rstrip()
        start, acc = pending if pending else (i, "")
        acc += line[:-1] + " " if line.endswith("\\") else line
        pending = (start, acc) if line.endswith("\\") else None
        if pending is None:
            out.append((start, acc))
    if pending:
        out.append(pending)
    return out


def _words(line: str) -> list[str]:
    lex = shlex.shlex(line, posix=True, punctuation_chars=True)
    lex.whitespace_split = True
    lex.commenters = "#"
    try:
        return list(lex)
    except ValueError:  # an unbalanced quote: not a command this can run
        return []


def parse_command(line: str, where: str, block: str, output: tuple[str, ...] = ()) -> ShownCommand | None:
    """The dra-gpu command on a shell line, or None when the line runs something else."""
    words = _words(line)
    start, in_pod = None, False
    if words and _CLI.match(words[0]):
        start = 1
    elif words[:2] in (["kubectl", "dra-gpu"], ["kubectl", "dra_gpu"]):
        start = 2
    elif words[:1] == ["kubectl"] and "--" in words and words.index("--") + 1 < len(words):
        at = words.index("--") + 1
        start, in_pod = (at + 1, True) if _CLI.match(words[at]) else (None, False)
    if start is None:
        return None
    args: list[str] = []
    for w in words[start:]:
        if w in _SHELL_OPS or set(w) <= set("|&;<>"):
            break
        args.append(w)
    prefix = re.match(r"^\s*(?:kubectl\s+dra[-_]gpu|\S*dra-gpu)", line)
    shell = "dra-gpu" + line[prefix.end() :] if prefix and not in_pod else line
    return ShownCommand(where, block, tuple(args), shell, output, in_pod)


def _console_commands(f: Fence) -> list[ShownCommand]:
    found: list[ShownCommand] = []
    current: tuple[int, str] | None = None
    shown: list[str] = []

    def flush() -> None:
        if current is not None:
            cmd = parse_command(current[1], f"{f.file}:{current[0]}", f.where, tuple(shown))
            found.extend([cmd] if cmd else [])

    for lineno, line in _logical_lines(f.text, f.line + 1):
        if line.lstrip().startswith("$ "):
            flush()
            current, shown = (lineno, line.lstrip()[2:]), []
        elif line.strip() and line.strip() not in ELISIONS:
            shown.append(line.strip())
    flush()
    return found


def shown_commands(root: Path = REPO) -> list[ShownCommand]:
    """Every dra-gpu command in the ```console, ```sh and ```bash blocks of the Markdown files."""
    found: list[ShownCommand] = []
    for md in markdown_files(root):
        for f in fences(md, root):
            if f.lang in CONSOLE_LANGS:
                found += _console_commands(f)
            elif f.lang in SCRIPT_LANGS:
                for lineno, line in _logical_lines(f.text, f.line + 1):
                    cmd = parse_command(line.lstrip().removeprefix("$ "), f"{f.file}:{lineno}", f.where)
                    found.extend([cmd] if cmd else [])
    return found


def needs(cmd: ShownCommand) -> str | None:
    """Why a command cannot run on this machine alone (by its subcommand), or None when it can."""
    sub, flags = (cmd.args[0] if cmd.args else ""), set(cmd.flags)
    if cmd.in_pod:
        return "needs a cluster: runs inside the plugin's pod (kubectl exec)"
    if flags & {"-h", "--help"} or not sub:
        return None
    if sub == "inventory" and "--nvml" in flags:
        return "needs a GPU: --nvml reads this machine's GPUs through NVML"
    if sub == "explain" and not (flags & {"-f", "--filename"} and "--slices" in flags):
        return "needs a cluster: reads the slices, classes and claims from the API server"
    if sub == "top":
        return "needs running plugins: reads each plugin's /metrics" + ("" if "--url" in flags else " through the API server")
    if sub == "health":
        return "needs a GPU node: reads the plugin's data dir (--plugin-dir) there"
    if sub in ("cordon", "uncordon"):
        return "needs a cluster: reads the node's slices and writes DeviceTaintRules through the API server"
    return None


# Exit statuses that are answers, by subcommand: explain exits 1 when a claim is not allocatable.
ANSWER_EXITS: dict[str, frozenset[int]] = {"explain": frozenset({0, 1})}


def exited_ok(cmd: ShownCommand, returncode: int) -> bool:
    """Whether the exit status is an answer (0; for explain also 1, "not allocatable") rather than a failure."""
    return returncode in ANSWER_EXITS.get(cmd.args[0] if cmd.args else "", frozenset({0}))


def output_shape_mismatch(shown: tuple[str, ...], actual: str, words: int = 2) -> str | None:
    """None when the first ``words`` words of each shown line begin some actual line, in the shown order."""
    lines = [ln.split() for ln in actual.splitlines() if ln.strip()]
    at = 0
    for want in shown:
        head = want.split()[:words]
        hit = next((i for i in range(at, len(lines)) if lines[i][: len(head)] == head), None)
        if hit is None:
            return f"no output line (after line {at + 1}) starts with {' '.join(head)!r}"
        at = hit + 1
    return None


# -- links --------------------------------------------------------------------------


def github_slug(text: str) -> str:
    """A heading's anchor as GitHub makes it: lowercase, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def _plain(inline: Token) -> str:
    return "".join(c.content for c in inline.children or () if c.type in ("text", "code_inline"))


@cache
def anchors(path: Path) -> frozenset[str]:
    """The anchors of a Markdown file: its headings' slugs (duplicates get -1, -2, ...) and HTML ids/names."""
    seen: dict[str, int] = {}
    found: set[str] = set()
    toks = _tokens(path)
    for i, tok in enumerate(toks):
        if tok.type == "heading_open":
            slug = github_slug(_plain(toks[i + 1]))
            found.add(f"{slug}-{seen[slug]}" if slug in seen else slug)
            seen[slug] = seen.get(slug, 0) + 1
    found |= set(re.findall(r"""<a\s[^>]*(?:id|name)=["']([^"']+)["']""", path.read_text()))
    return frozenset(found)


@dataclass(frozen=True)
class Link:
    where: str
    target: str


def links(path: Path) -> list[Link]:
    """Every link and image target of a Markdown file (inline and reference style)."""
    found = []
    for tok in _tokens(path):
        if tok.type == "inline" and tok.map is not None:
            for child in tok.children or ():
                target = child.attrs.get("href") if child.type == "link_open" else child.attrs.get("src")
                if isinstance(target, str) and child.type in ("link_open", "image"):
                    found.append(Link(f"{rel(path)}:{tok.map[0] + 1}", target))
    return found


def broken(link: Link, path: Path, root: Path = REPO) -> str | None:
    """Why a relative link is broken (no such file, no such anchor), or None (also for URLs)."""
    if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:|^//", link.target):
        return None
    file_part, _, anchor = link.target.partition("#")
    file_part = unquote(file_part.split("?", 1)[0])
    if file_part.startswith("/"):
        target = root / file_part.lstrip("/")
    else:
        target = (path.parent / file_part) if file_part else path
    target = target.resolve()
    if not target.is_relative_to(root.resolve()):
        return f"{link.target} leaves the repository"
    if not target.exists():
        return f"{link.target}: no file {rel(target, root.resolve())}"
    if anchor and target.suffix == ".md" and unquote(anchor) not in anchors(target):
        return f"{link.target}: {rel(target, root.resolve())} has no heading with anchor #{anchor}"
    if anchor and target.suffix != ".md" and not re.fullmatch(r"L\d+(-L\d+)?", anchor):
        return f"{link.target}: #{anchor} is not a line anchor (#L10, #L10-L20)"
    return None


# -- running them ---------------------------------------------------------------------


def workdir_with_repo(tmp: Path, root: Path = REPO) -> Path:
    """A directory in which the docs' relative paths (demo/..., deploy/...) resolve, and files they write land."""
    tmp.mkdir(parents=True, exist_ok=True)
    for entry in root.iterdir():
        if entry.name not in (".git", ".venv") and not (tmp / entry.name).exists():
            (tmp / entry.name).symlink_to(entry)
    return tmp


def cli_env(tmp: Path, root: Path = REPO) -> dict[str, str]:
    """An environment whose ``dra-gpu`` is this checkout's CLI, run by this interpreter."""
    bindir = tmp / "bin"
    bindir.mkdir(parents=True, exist_ok=True)
    script = bindir / "dra-gpu"
    script.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -m dra_driver.cli.main "$@"\n')
    script.chmod(0o755)
    path = f"{bindir}:{os.environ.get('PATH', '/usr/bin:/bin')}"
    return {**os.environ, "PATH": path, "PYTHONPATH": str(root), "HOME": str(tmp), "KUBECONFIG": str(tmp / "no-kubeconfig")}


def run_shell(line: str, cwd: Path, env: dict[str, str], timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
    """Run one shown command line with bash, as a reader would paste it."""
    return subprocess.run(["bash", "-c", line], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
