"""Markdown output: tables (and the coverage matrix) as Markdown, a fact's text always escaped to text."""

from __future__ import annotations

import html
import re

# What has a meaning inside a line of Markdown (CommonMark + GFM): escapes themselves, code spans, emphasis,
# links and images, table cells, strikethrough, math ($, GitHub), headings' closing #. `<` and `&` (raw HTML,
# autolinks such as <javascript:...>, entities) become HTML entities; `_` only where it can open or close
# emphasis (not between two letters or digits, e.g. deep_ep_missing stays as it is).
ESCAPED = "\\`*[]|~$#"
# What means something at the start of a line: a list item, a thematic break or setext underline.
LINE_START = re.compile(r"[-+=]|\d+[.)]")


def md_text(text: str) -> str:
    """A fact's text as Markdown text, never markup, as html.escape makes it HTML text: HTML as entities,
    every inline construct escaped (ESCAPED, `_`), no line break (lines joined with a space)."""
    text = " ".join(html.escape(str(text), quote=False).splitlines())
    out = []
    for i, char in enumerate(text):
        if char in ESCAPED:
            out.append("\\" + char)
        elif char == "_" and not (0 < i < len(text) - 1 and text[i - 1].isalnum() and text[i + 1].isalnum()):
            out.append("\\_")
        else:
            out.append(char)
    return "".join(out)


def md_line(text: str) -> str:
    """md_text for text that starts a line (a paragraph): no heading, list, quote, break or code block."""
    text = md_text(text).lstrip()
    start = LINE_START.match(text)
    if start:
        cut = start.end() - 1
        text = text[:cut] + "\\" + text[cut:]
    return text


def md_fence(block: str) -> str:
    """A code fence longer than any run of backticks in block, so the block cannot close it."""
    longest = max((len(run) for run in re.findall(r"`+", block)), default=0)
    return "`" * max(3, longest + 1)


def md_table(head: list[str], body: list[list[str]]) -> str:
    esc = [[md_text(c) for c in row] for row in [head, *body]]
    lines = ["| " + " | ".join(esc[0]) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(row) + " |" for row in esc[1:]]
    return "\n".join(lines)


def matrix_md(components: list[str], rows: list[dict]) -> str:
    head = ["host", "archs", *components, "deep_ep owner", "features without kernels"]
    body = [
        [r["host"], r["archs"], *[r["cells"][c]["text"] for c in components], r["deep_ep"], r["lacking"]]
        for r in rows
    ]
    return md_table(head, body)
