"""Generate the reference pages of docs/reference/ from the product's own objects.

Usage: ``python scripts/gen_reference.py PAGE [--check] [--stdout]`` with PAGE one of ``PAGES``
or ``all`` (``make reference`` runs ``all``). Writes ``docs/reference/<file>``; ``--check``
writes nothing and exits 1 naming every page that differs from what is committed; ``--stdout``
prints the page instead. ``tests/unit/docs/test_reference_pages.py`` runs each page's renderer.

A page is a name, the file it writes and a function returning its Markdown: to add one, add an
entry to ``PAGES``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # refdocs, when run as a file
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))  # the checkout's product, not an installed one

from refdocs import attributes, chart_values, events, flags, metrics
from refdocs.markdown import REFERENCE_DIR, ReferenceError


@dataclass(frozen=True, slots=True)
class Page:
    """One generated page: the file under docs/reference/ and what renders it."""

    filename: str
    render: Callable[[], str]


PAGES: dict[str, Page] = {
    "values": Page("chart-values.md", chart_values.render),
    "attributes": Page("attributes.md", attributes.render),
    "metrics": Page("metrics.md", metrics.render),
    "events": Page("events.md", events.render),
    "flags": Page("flags.md", flags.render),
}


def stale(name: str) -> bool:
    """True when the committed page differs from what the generator renders now."""
    page = PAGES[name]
    path = REFERENCE_DIR / page.filename
    return not path.exists() or path.read_text() != page.render()


def table_rows(text: str) -> int:
    """The rows of a page's tables (header and separator lines not counted)."""
    lines = [line for line in text.splitlines() if line.startswith("|")]
    return len(lines) - 2 * sum(1 for line in lines if line.startswith("|---"))


def main(argv: list[str] | None = None) -> int:
    """Write, print or check the pages named on the command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("page", choices=[*PAGES, "all"])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="exit 1 naming the pages that differ from the committed ones")
    mode.add_argument("--stdout", action="store_true", help="print the page instead of writing it")
    args = parser.parse_args(argv)
    names = list(PAGES) if args.page == "all" else [args.page]
    try:
        if args.check:
            bad = [n for n in names if stale(n)]
            for n in bad:
                print(f"docs/reference/{PAGES[n].filename} is stale: run 'python scripts/gen_reference.py {n}'", file=sys.stderr)
            return 1 if bad else 0
        for n in names:
            text = PAGES[n].render()
            if args.stdout:
                sys.stdout.write(text)
                continue
            REFERENCE_DIR.mkdir(parents=True, exist_ok=True)
            (REFERENCE_DIR / PAGES[n].filename).write_text(text)
            print(f"wrote docs/reference/{PAGES[n].filename} ({table_rows(text)} table rows)")
    except ReferenceError as err:
        print(f"gen_reference: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
