"""MkDocs hooks of the docs site (``mkdocs.yml``'s ``hooks:``; ``make docs`` builds it): README as home, nav from docs/.

* The home page is README.md, served as ``index.md``, its links rewritten so that they work in
  the site as they do on GitHub: ``docs/x.md`` becomes ``x.md``. In every page, a link to a file
  of the repository outside docs/ (``demo/``, ``deploy/...``, ``CHANGELOG.md``) becomes a link to
  it on the forge when ``repo_url`` is set, else its path in code (the site holds only docs/); a
  link to README.md becomes the home page. A reference-style definition (``[x]: demo/``) outside
  docs/ needs ``repo_url`` (a bare path cannot stand there): without it the strict build names it.
* A folder of docs/ without an ``index.md`` gets one listing its pages, so a link to the folder
  (``docs/guides/``, which GitHub shows as a listing) works in the site too.
* The navigation is docs/'s folders and files, in ``SECTION_ORDER`` (then any other, by name), each
  folder's pages by file name (``perf``: newest first, its files being ``YYYY-MM-DD-*.md``): a new
  page or section appears without editing ``mkdocs.yml``; a section with no files is not listed.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # mkdocs is imported by the build that loads this file; the link rules are tested without it
    from mkdocs.config.defaults import MkDocsConfig
    from mkdocs.structure.files import Files
    from mkdocs.structure.pages import Page

REPO = Path(__file__).resolve().parents[1]
README = "README.md"
SECTION_ORDER = ("concepts", "guides", "reference", "development", "perf", "limitations")
SECTION_TITLES = {"perf": "Performance"}
NEWEST_FIRST = frozenset({"perf"})

_LINK = re.compile(r"(?P<bang>!?)\[(?P<text>[^\]]*)\]\((?P<target>[^)\s]+)(?P<title>\s+\"[^\"]*\")?\)")
_DEFINITION = re.compile(r"^(?P<lead> {0,3}\[[^\]]+\]:\s*)(?P<target>\S+)", re.MULTILINE)
_FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)
_EXTERNAL = re.compile(r"^([a-z][a-z0-9+.-]*:|#|/)", re.IGNORECASE)


def _docs_dir(config: MkDocsConfig) -> Path:
    return Path(config.docs_dir)


def _folders_without_index(docs: Path) -> list[str]:
    """docs/'s folders (relative, posix) that hold Markdown pages but no index.md."""
    out = []
    for folder in sorted(p for p in docs.rglob("*") if p.is_dir()):
        if any(folder.glob("*.md")) and _index_of(folder) is None:
            out.append(folder.relative_to(docs).as_posix())
    return out


def _index_of(folder: Path) -> str | None:
    """The folder's own index page (index.md, or README.md as MkDocs takes it), if it has one."""
    return next((n for n in ("index.md", "README.md") if (folder / n).exists()), None)


def _title(name: str) -> str:
    return SECTION_TITLES.get(name, name.replace("-", " ").replace("_", " ").capitalize())


def _nav_of(docs: Path, folder: Path) -> list[Any]:
    """The nav entries of one folder: its index first, then pages and sub-folders by name."""
    rel = folder.relative_to(docs).as_posix()
    prefix = "" if rel == "." else rel + "/"
    index = _index_of(folder) or "index.md"  # one is generated where there is none
    pages = sorted((p for p in folder.glob("*.md") if p.name not in ("index.md", "README.md")), reverse=rel in NEWEST_FIRST)
    subfolders = sorted(p for p in folder.iterdir() if p.is_dir() and any(p.rglob("*.md")))
    entries: list[Any] = [prefix + index] if rel != "." else []
    entries += [prefix + p.name for p in pages]
    entries += [{_title(s.name): _nav_of(docs, s)} for s in subfolders]
    return entries


def _section_key(entry: Any) -> tuple[int, str]:
    name = next(iter(entry)) if isinstance(entry, dict) else str(entry)
    stem = name.removesuffix(".md").lower()
    keys = [_title(s).lower() for s in SECTION_ORDER]
    for i, section in enumerate(SECTION_ORDER):
        if stem in (section, keys[i]):
            return (i, stem)
    return (len(SECTION_ORDER), stem)


def on_config(config: MkDocsConfig) -> MkDocsConfig:
    """Build the nav from docs/ unless mkdocs.yml gives one."""
    if config.nav is None:
        docs = _docs_dir(config)
        top = sorted(_nav_of(docs, docs), key=_section_key)
        config.nav = [{"Home": "index.md"}, *top]
    return config


def _page_title(path: Path) -> str:
    """A page's first ``# `` heading, else its file name."""
    for line in path.read_text().splitlines():
        if line.startswith("# "):
            return line[2:].strip()
    return path.stem


def _listing(docs: Path, folder: str) -> str:
    """A generated index page: the folder's pages (by file name, ``perf`` newest first) and sub-folders."""
    lines = [f"# {_title(posixpath.basename(folder))}", ""]
    for entry in _nav_of(docs, docs / folder)[1:]:
        if isinstance(entry, dict):
            name = posixpath.basename(posixpath.dirname(next(iter(entry.values()))[0]))
            lines.append(f"- [{next(iter(entry))}]({name}/index.md)")
        else:
            lines.append(f"- [{_page_title(docs / entry)}]({posixpath.basename(entry)})")
    return "\n".join(lines) + "\n"


def on_files(files: Files, *, config: MkDocsConfig) -> Files:
    """Add README.md as index.md, and an index.md listing each folder that has none."""
    from mkdocs.structure.files import File

    if files.get_file_from_path("index.md") is None:
        files.append(File.generated(config, "index.md", abs_src_path=str(REPO / README)))
    for folder in _folders_without_index(_docs_dir(config)):
        files.append(File.generated(config, f"{folder}/index.md", content=_listing(_docs_dir(config), folder)))
    return files


def _forge_url(path: str, anchor: str, repo_url: str) -> str:
    """The forge's page of a repository path (``tree`` for a folder, ``blob`` for a file)."""
    kind = "tree" if path.endswith("/") or (REPO / path).is_dir() else "blob"
    return f"{repo_url.rstrip('/')}/{kind}/HEAD/{path.rstrip('/')}{anchor}"


def _outside(target: str, source: str) -> tuple[str, str]:
    """The repository path (a folder keeps its ``/``) and ``#anchor`` of a link outside docs/."""
    path, _, anchor = target.partition("#")
    resolved = posixpath.normpath(posixpath.join(posixpath.dirname(source), path))
    return resolved + ("/" if path.endswith("/") else ""), f"#{anchor}" if anchor else ""


def _repository_link(path: str, anchor: str, text: str, repo_url: str | None) -> str:
    if repo_url:
        return f"[{text}]({_forge_url(path, anchor, repo_url)})"
    shown = f"`{path}`"
    return shown if text.strip("`") in (path, path.rstrip("/")) else f"{text} ({shown})"


def rewrite_link(target: str, source: str, page: str) -> str | None:
    """A relative link of ``source`` (a repository path) for the site page ``page``; None: outside docs/.

    Returns the target unchanged when it needs nothing.
    """
    path, hash_, anchor = target.partition("#")
    resolved = posixpath.normpath(posixpath.join(posixpath.dirname(source), path))
    is_dir = path.endswith("/") or (REPO / resolved).is_dir()
    if resolved == README:
        in_docs = "index.md"
    elif resolved == "docs" or resolved.startswith("docs/"):
        in_docs = posixpath.relpath(resolved, "docs") + ("/index.md" if is_dir else "")
        in_docs = in_docs.removeprefix("./")
    else:
        return None
    if source != README and not is_dir and resolved != README:
        return target
    rel = posixpath.relpath(in_docs, posixpath.dirname(page) or ".")
    return rel + (hash_ + anchor if hash_ else "")


def rewrite_links(markdown: str, source: str, page: str, repo_url: str | None) -> str:
    """Every relative link of a page rewritten for the site (code blocks left alone)."""

    def one(match: re.Match[str]) -> str:
        target = match["target"]
        if _EXTERNAL.match(target):
            return match[0]
        new = rewrite_link(target, source, page)
        if new is not None:
            return f"{match['bang']}[{match['text']}]({new}{match['title'] or ''})"
        return _repository_link(*_outside(target, source), match["text"], repo_url)

    def definition(match: re.Match[str]) -> str:
        """``[label]: target``: rewritten like a link; outside docs/ only with ``repo_url`` (text cannot stand there)."""
        target = match["target"]
        if _EXTERNAL.match(target):
            return match[0]
        new = rewrite_link(target, source, page)
        if new is None and repo_url:
            new = _forge_url(*_outside(target, source), repo_url)
        return match["lead"] + (new or target)

    def both(text: str) -> str:
        return _DEFINITION.sub(definition, _LINK.sub(one, text))

    out, last = [], 0
    for fence in _FENCE.finditer(markdown):
        out += [both(markdown[last : fence.start()]), fence[0]]
        last = fence.end()
    out.append(both(markdown[last:]))
    return "".join(out)


def on_page_markdown(markdown: str, *, page: Page, config: MkDocsConfig, files: Files) -> str:
    """Rewrite the page's links (see the module docstring)."""
    src = page.file.src_uri
    source = README if src == "index.md" and page.file.abs_src_path == str(REPO / README) else f"docs/{src}"
    return rewrite_links(markdown, source, src, config.repo_url)
