"""The draft's Markdown as HTML, for exactly the subset `rendering.render_markdown` writes: headings,
paragraphs, bold, bullet lists and tables. Every piece of text is escaped first; the only markup in
the result is the tags made here, so model, data and reviewer text can never become markup."""

from __future__ import annotations

import re

from markupsafe import Markup, escape

_BOLD = re.compile(r"\*\*(.+?)\*\*")


def _inline(text: str) -> str:
    return _BOLD.sub(r"<strong>\1</strong>", str(escape(text)))


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def _table(lines: list[str]) -> str:
    head, rows = _cells(lines[0]), [_cells(line) for line in lines[2:]]
    out = ["<table><thead><tr>", *(f"<th>{_inline(c)}</th>" for c in head), "</tr></thead><tbody>"]
    for row in rows:
        out += ["<tr>", *(f"<td>{_inline(c)}</td>" for c in row), "</tr>"]
    return "".join(out + ["</tbody></table>"])


def _block(lines: list[str]) -> str:
    first = lines[0]
    if first.startswith("#"):
        level = min(len(first) - len(first.lstrip("#")) + 1, 6)  # the page's own title is the h1
        return f"<h{level}>{_inline(first.lstrip('#').strip())}</h{level}>"
    if first.startswith("|") and len(lines) > 1:
        return _table(lines)
    if first.startswith("- "):
        return "<ul>" + "".join(f"<li>{_inline(line[2:])}</li>" for line in lines) + "</ul>"
    return "<p>" + "<br>".join(_inline(line) for line in lines) + "</p>"


def markdown_html(text: str) -> Markup:
    """Safe HTML for the report's Markdown: blocks are separated by blank lines, headings stand alone."""
    blocks: list[list[str]] = []
    current: list[str] = []
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            if current:
                blocks.append(current)
            current = [line] if line.strip() else []
            if line.startswith("#"):
                blocks.append(current)
                current = []
            continue
        current.append(line)
    if current:
        blocks.append(current)
    return Markup("\n".join(_block(block) for block in blocks))  # every text part was escaped above
