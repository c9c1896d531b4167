"""Every relative link in README.md, docs/**/*.md and demo/**/*.md points at a file that exists,
and every ``#anchor`` at a heading there (GitHub's slugs: lowercase, punctuation dropped, spaces
to hyphens, a repeated heading's anchor suffixed -1, -2, ...). URLs are not fetched.

Also the docs' fragment markers (``<!-- example: fragment -->``, docs/development/docs-conventions.md):
each stands on the line right before a fence, so none is left behind when a block moves.
The Markdown is parsed with markdown-it-py (testkit/docs_examples.py); no cluster, no network.
"""

from __future__ import annotations

from pathlib import Path

from testkit.docs_examples import REPO, anchors, broken, fences, fragment_markers, github_slug, links, markdown_files, rel


def test_every_relative_link_and_anchor_resolves() -> None:
    files = markdown_files()
    checked = [(md, link) for md in files for link in links(md)]
    problems = [f"{link.where}: {why}" for md, link in checked if (why := broken(link, md))]
    print(f"\n{len(checked)} links checked in {len(files)} Markdown files")
    assert files and checked, "no Markdown file or no link found: the discovery is broken"
    assert not problems, "broken links:\n" + "\n".join(problems)


def test_fragment_markers_stand_right_before_a_fence() -> None:
    stray = []
    for md in markdown_files():
        opening = {f.line for f in fences(md)}
        stray += [f"{rel(md)}:{n}" for n in fragment_markers(md) if n + 1 not in opening]
    assert not stray, "<!-- example: fragment --> not on the line right before a fence:\n" + "\n".join(stray)


def test_slugs_follow_github(tmp_path: Path) -> None:
    assert github_slug("Metrics: private by default, scraping with a token") == "metrics-private-by-default-scraping-with-a-token"
    assert github_slug("Troubleshooting with `dra-gpu explain`") == "troubleshooting-with-dra-gpu-explain"
    assert github_slug("MIG (Multi-Instance GPU) / sharing_modes") == "mig-multi-instance-gpu--sharing_modes"
    page = tmp_path / "page.md"
    page.write_text('# Setup\n\n## Setup\n\n### The `--nvml` flag\n\n<a id="custom"></a>\n')
    assert anchors(page) == {"setup", "setup-1", "the---nvml-flag", "custom"}


def test_broken_links_are_reported(tmp_path: Path) -> None:
    root = tmp_path
    (root / "docs").mkdir()
    page = root / "docs" / "a.md"
    page.write_text("# Top\n\n[ok](#top) [file](b.md#end) [gone](c.md) [bad](#nope) [web](https://x.example/#y)\n")
    (root / "docs" / "b.md").write_text("# Start\n")
    why = {link.target: broken(link, page, root) for link in links(page)}
    assert why["#top"] is None and why["https://x.example/#y"] is None
    assert "no heading with anchor #end" in str(why["b.md#end"])
    assert "no file docs/c.md" in str(why["c.md"])
    assert "#nope" in str(why["#nope"])
    assert REPO.joinpath("README.md").exists()
