"""Markdown output: tables (and the coverage matrix) as Markdown, a fact's text always escaped to text."""

from __future__ import annotations

import html


def md_text(text: str) -> str:
    """A fact's text as Markdown text, never markup: HTML as entities, no table cell, link or line break."""
    text = html.escape(str(text), quote=False)
    for char in ("|", "[", "]"):
        text = text.replace(char, "\\" + char)
    return " ".join(text.splitlines())


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
