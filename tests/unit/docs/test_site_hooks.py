"""The docs site's link rules (scripts/mkdocs_hooks.py): README links work in the site as on GitHub.

The build itself (``make docs``, strict) checks every link and anchor; these pin the rewriting.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "scripts"))

import mkdocs_hooks as hooks  # noqa: E402 - scripts/ is not a package


def test_readme_links_into_docs_lose_the_docs_prefix() -> None:
    md = "See [health](docs/guides/gpu-health-events.md#taints) and [perf](docs/perf/)."
    out = hooks.rewrite_links(md, "README.md", "index.md", None)
    assert out == "See [health](guides/gpu-health-events.md#taints) and [perf](perf/index.md)."


def test_links_outside_docs_become_paths_or_forge_links() -> None:
    md = "[the demo](demo/) and [Dockerfile](deploy/container/Dockerfile)"
    assert (
        hooks.rewrite_links(md, "README.md", "index.md", None)
        == "the demo (`demo/`) and Dockerfile (`deploy/container/Dockerfile`)"
    )
    forge = hooks.rewrite_links(md, "README.md", "index.md", "https://example.com/org/dra-gpu")
    assert forge == (
        "[the demo](https://example.com/org/dra-gpu/tree/HEAD/demo) and "
        "[Dockerfile](https://example.com/org/dra-gpu/blob/HEAD/deploy/container/Dockerfile)"
    )


def test_docs_pages_keep_their_links_and_reach_readme_as_home() -> None:
    md = "[check](gpu-check.md) [home](../../README.md#status) [ext](https://x.io/a.md) [here](#top)"
    out = hooks.rewrite_links(md, "docs/guides/metrics-security.md", "guides/metrics-security.md", None)
    assert out == "[check](gpu-check.md) [home](../index.md#status) [ext](https://x.io/a.md) [here](#top)"


def test_code_blocks_are_left_alone() -> None:
    md = "```\n[x](docs/a.md)\n```\n[y](docs/a.md)\n"
    assert hooks.rewrite_links(md, "README.md", "index.md", None) == "```\n[x](docs/a.md)\n```\n[y](a.md)\n"


def test_nav_follows_the_section_order_and_lists_only_what_exists(tmp_path: Path) -> None:
    for page in ("limitations.md", "perf/2026-01-01-a.md", "perf/2026-02-01-b.md", "guides/x.md", "zzz/y.md", "concepts/c.md"):
        (tmp_path / page).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / page).write_text(f"# {page}\n")
    nav = sorted(hooks._nav_of(tmp_path, tmp_path), key=hooks._section_key)
    names = [next(iter(e)) if isinstance(e, dict) else e for e in nav]
    assert names == ["Concepts", "Guides", "Performance", "limitations.md", "Zzz"]
    assert nav[2]["Performance"] == ["perf/index.md", "perf/2026-02-01-b.md", "perf/2026-01-01-a.md"]


def test_reference_definitions_are_rewritten_too() -> None:
    md = "[h]: docs/guides/x.md#a\n[d]: demo/\n"
    assert hooks.rewrite_links(md, "README.md", "index.md", None) == "[h]: guides/x.md#a\n[d]: demo/\n"
    forge = hooks.rewrite_links(md, "README.md", "index.md", "https://example.com/r")
    assert forge == "[h]: guides/x.md#a\n[d]: https://example.com/r/tree/HEAD/demo\n"
