"""A small document model rendered twice: self-contained Markdown and self-contained HTML.

Blocks are paragraphs, tables, images (PNG bytes, embedded as base64) and collapsible details.
Their text holds names from result tables and meta.json: both renderers escape every piece of it
(Markdown viewers render raw HTML, so report.md escapes it as report.html does).
"""

from __future__ import annotations

import base64
import html
import re
from dataclasses import dataclass, field

from bench.text import markdown_text


@dataclass
class Paragraph:
    text: str


@dataclass
class TableBlock:
    header: list[str]
    rows: list[list[str]]
    #: columns to right-align (numbers)
    numeric: set[int] = field(default_factory=set)


@dataclass
class Image:
    title: str
    png: bytes


@dataclass
class Details:
    summary: str
    blocks: list


@dataclass
class Section:
    title: str
    blocks: list = field(default_factory=list)


@dataclass
class Document:
    title: str
    sections: list[Section] = field(default_factory=list)


def _md_cell(text: object) -> str:
    """Text in Markdown: one line, no raw HTML, pipes escaped (``**bold**`` of the document is kept)."""
    return markdown_text(str(text).replace("\n", " "))


def _md_block(block) -> list[str]:
    if isinstance(block, Paragraph):
        return [_md_cell(block.text), ""]
    if isinstance(block, TableBlock):
        align = ["---:" if index in block.numeric else "---" for index in range(len(block.header))]
        lines = ["| " + " | ".join(map(_md_cell, block.header)) + " |", "| " + " | ".join(align) + " |"]
        lines += ["| " + " | ".join(map(_md_cell, row)) + " |" for row in block.rows]
        return [*lines, ""]
    if isinstance(block, Image):
        data = base64.b64encode(block.png).decode()
        title = _md_cell(block.title).replace("[", "\\[").replace("]", "\\]")  # a "]" would end the alt text
        return [f"![{title}](data:image/png;base64,{data})", ""]
    if isinstance(block, Details):
        inner = [line for child in block.blocks for line in _md_block(child)]
        return [f"<details><summary>{_md_cell(block.summary)}</summary>", "", *inner, "</details>", ""]
    raise TypeError(f"unknown block {block!r}")


def markdown(document: Document) -> str:
    lines = [f"# {_md_cell(document.title)}", ""]
    for section in document.sections:
        lines += [f"## {_md_cell(section.title)}", ""]
        for block in section.blocks:
            lines += _md_block(block)
    return "\n".join(lines)


STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2rem auto; max-width: 1200px;
       color: #222; line-height: 1.45; padding: 0 1rem; }
h1 { font-size: 1.6rem; } h2 { font-size: 1.25rem; border-bottom: 1px solid #ddd; padding-bottom: .2rem;
margin-top: 2rem; }
table { border-collapse: collapse; margin: .6rem 0 1.2rem; font-size: .85rem; }
th, td { border: 1px solid #ddd; padding: .25rem .55rem; vertical-align: top; }
th { background: #f4f4f4; text-align: left; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
img { max-width: 100%; display: block; margin: .8rem 0 1.6rem; }
details { margin: .5rem 0 1rem; } summary { cursor: pointer; font-weight: 600; }
"""


def _inline(text: str) -> str:
    """Escaped text with Markdown's **bold** as <strong>."""
    return re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", html.escape(text))


def _html_block(block) -> str:
    if isinstance(block, Paragraph):
        return f"<p>{_inline(block.text)}</p>"
    if isinstance(block, TableBlock):
        head = "".join(f"<th>{html.escape(str(name))}</th>" for name in block.header)
        body = "".join(
            "<tr>" + "".join(f'<td{" class=num" if index in block.numeric else ""}>{html.escape(str(value))}</td>'
                             for index, value in enumerate(row)) + "</tr>" for row in block.rows)
        return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
    if isinstance(block, Image):
        data = base64.b64encode(block.png).decode()
        return f'<img alt="{html.escape(block.title)}" src="data:image/png;base64,{data}">'
    if isinstance(block, Details):
        inner = "\n".join(_html_block(child) for child in block.blocks)
        return f"<details><summary>{html.escape(block.summary)}</summary>\n{inner}\n</details>"
    raise TypeError(f"unknown block {block!r}")


def to_html(document: Document) -> str:
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             f"<title>{html.escape(document.title)}</title><style>{STYLE}</style></head><body>",
             f"<h1>{html.escape(document.title)}</h1>"]
    for section in document.sections:
        parts.append(f"<h2>{html.escape(section.title)}</h2>")
        parts += [_html_block(block) for block in section.blocks]
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"
