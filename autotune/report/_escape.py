"""A study's text (a knob's value, a reason, a name) as the Markdown and HTML reports show it: as
text, never as markup, with its control and bidirectional characters visible (errors.printable)."""

from __future__ import annotations

import html
import re

from autotune.errors import printable

# What Markdown reads as its own: a table's cell border, a link or image, a code span, emphasis and
# GFM's strikethrough, GitHub's math, an escape
_MD_SYNTAX = re.compile(r"([\\`*~$\[\]|])")
_UNDERSCORES = re.compile(r"_+")
# What GitHub links in the text after Markdown has parsed it (an e-mail autolink, @mention, #1,
# GH-1, :emoji:), so no backslash reaches it, and its www. and https:// autolinks: a zero-width
# space breaks each pattern and shows nothing, as Dependabot writes @&#8203;user
_LINKED = re.compile(
    "|".join(
        (
            r"(?<=[@#])(?=\w)",  # @user, me@example.com, #1, owner/repo#1
            r"(?<=\bgh)(?=-\d)",  # GH-1
            r"(?<=www)(?=\.)",  # www.example.com
            r"(?<=[a-z])(?=://)",  # https://example.com, ftp://
            r"(?<=:)(?=[\w+\\-]+:)",  # :smile:, :+1:, :white\_check\_mark: (its '_' escaped)
        )
    ),
    re.IGNORECASE,
)
ZWSP = "&#8203;"


def md(text: object) -> str:
    """Text as Markdown (GitHub's too) shows it, never as markup: one line (control characters and
    line breaks shown escaped, errors.printable), HTML escaped as the HTML report does (a tag or an
    autolink <javascript:...> is text), Markdown's syntax escaped, GitHub's links broken."""
    flat = printable(str(text), newlines=False)
    # '<' opens every tag and autolink, '&' an entity: escaped, the rest of the text is kept as it
    # is ("->" stays)
    held = flat.replace("&", "&amp;").replace("<", "&lt;")
    escaped = _UNDERSCORES.sub(_underscores, _MD_SYNTAX.sub(r"\\\1", held))
    return _LINKED.sub(ZWSP, escaped)


def _underscores(run: re.Match[str]) -> str:
    """A run of '_' escaped, unless letters or digits stand on both sides of it: CommonMark's
    intraword '_' is never emphasis (micro_batch_size stays as it is; _em_, __strong__ do not)."""
    text, start, end = run.string, run.start(), run.end()
    inside = 0 < start and end < len(text) and text[start - 1].isalnum() and text[end].isalnum()
    return run.group() if inside else run.group().replace("_", "\\_")


def escape(text: str) -> str:
    """html.escape of text with its control and bidirectional characters visible (a U+202E in a
    knob's value shown as <U+202E>, never turning the page's text around)."""
    return html.escape(printable(text))
