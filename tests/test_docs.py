"""The README and the pages under docs/: short enough to finish, and every relative link (and its
#anchor, in a Markdown page) points at something that exists."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README_MAX_LINES = 600  # issue 53: a README a newcomer finishes; the detail lives in docs/
# [text](target) and ![alt](target); a target has no spaces (none of ours do)
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
HEADING = re.compile(r"^#{1,6} +(.+?) *$", re.M)


def _documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation but - and _ dropped, spaces to -."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading: its text
    return re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")


def _anchors(doc: Path) -> set[str]:
    """Every heading's anchor, a repeated one numbered as GitHub numbers it (-1, -2, ...)."""
    seen: dict[str, int] = {}
    out = set()
    for heading in HEADING.findall(FENCE.sub("", doc.read_text())):
        slug = _slug(heading)
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def _links(doc: Path) -> list[str]:
    return LINK.findall(FENCE.sub("", doc.read_text()))


def test_docs_readme_is_at_most_600_lines() -> None:
    lines = len((ROOT / "README.md").read_text().splitlines())
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; move detail to docs/"


def test_docs_every_relative_link_points_at_what_exists() -> None:
    broken = []
    for doc in _documents():
        for target in _links(doc):
            if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:: not ours to check
                continue
            path, _, anchor = target.partition("#")
            dest = (doc.parent / path).resolve() if path else doc
            where = f"{doc.relative_to(ROOT)}: {target}"
            if not dest.exists() or not dest.is_relative_to(ROOT):
                broken.append(f"{where} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
                broken.append(f"{where} (no such heading)")
    assert not broken, "\n".join(broken)


def test_docs_readme_links_every_docs_page() -> None:
    linked = {
        (ROOT / t.partition("#")[0]).resolve() for t in _links(ROOT / "README.md") if "://" not in t
    }
    missing = [p.name for p in _documents()[1:] if p.resolve() not in linked]
    assert not missing, f"docs pages the README does not link: {missing}"


def test_docs_slug_is_githubs() -> None:
    assert _slug("Your own training job (`task: command`)") == "your-own-training-job-task-command"
    assert _slug("2026-11-29: `autotune search` on GPT-2 small, one H200") == (
        "2026-11-29-autotune-search-on-gpt-2-small-one-h200"
    )
